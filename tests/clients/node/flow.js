// The redis-lock flow from ioredis: acquire -> fence -> guarded writes -> extend -> info ->
// release, and a blocking LOCK.ACQUIRE ... WAIT on a second connection that is granted on
// release. Also the recommended client-side pattern that docs/CLIENTS.md shows (withLock with
// its keep-alive, FencedStore, and guarded writes through LOCK.GUARD with its `guarded`
// helper), and each way its keep-alive reports a loss (`loss`). And the read-write lock and
// semaphore recipes it shows (withHold, withReadLock, withWriteLock, withPermit): two readers
// hold together while a writer waits for both, and a reader after the writer waits for it; a
// semaphore of 2 permits whose third caller waits until one is released.
// Run by tests/clients/ as `node flow.js <port> [flow|pattern|shared|loss|all]`; exits non-zero
// on the first failure.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const Redis = require("ioredis");

const port = Number(process.argv[2]);
assert.ok(port > 0, "usage: node flow.js <port>");

function connect(extra = {}) {
  return new Redis({
    host: "127.0.0.1",
    port,
    // Fail fast instead of reconnecting forever if the server is gone.
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    ...extra,
  });
}

// LOCK.INFO replies a flat field/value array under RESP2 (ioredis speaks RESP2).
function infoObject(reply) {
  if (reply === null) return null;
  assert.ok(Array.isArray(reply) && reply.length === 12, `LOCK.INFO: ${JSON.stringify(reply)}`);
  const names = reply.filter((_, i) => i % 2 === 0);
  assert.deepEqual(names, ["holder", "fence", "ttl", "waiters", "mode", "holders"]);
  const o = {};
  for (let i = 0; i < reply.length; i += 2) o[reply[i]] = reply[i + 1];
  return o;
}

// A fence is below 2^53, so a JavaScript number holds it exactly.
function checkFence(f, what) {
  assert.equal(typeof f, "number", `${what}: ${f}`);
  assert.ok(Number.isSafeInteger(f) && f > 0, `${what}: ${f} is not a safe positive integer`);
}

async function main() {
  const key = `orders:${randomUUID()}`;
  const data = `${key}:data`;
  const token = randomUUID();
  const other = randomUUID();
  const a = connect();
  const b = connect();
  // The same replies as strings, to check that no number lost precision on the way.
  const s = connect({ stringNumbers: true });
  try {
    const f1 = await a.call("LOCK.ACQUIRE", key, token, 30000);
    checkFence(f1, "acquire");
    assert.equal(await a.call("LOCK.ACQUIRE", key, token, 30000), f1, "retry keeps the fence");
    assert.equal(await b.call("LOCK.ACQUIRE", key, other, 30000), null, "held by another");

    const f2 = await a.call("LOCK.FENCE", key, token);
    checkFence(f2, "fence");
    assert.ok(f2 > f1, `fence ${f2} must exceed ${f1}`);
    assert.equal(await b.call("LOCK.FENCE", key, other), null, "fence by a non-holder");

    // Guarded writes: the current fence lands, the one LOCK.FENCE replaced is refused.
    assert.equal(await guarded(a, key, f2, "SET", data, "by-f2"), "OK");
    await assert.rejects(guarded(b, key, f1, "SET", data, "by-f1"), (e) => {
      assert.ok(e instanceof Fenced, `not Fenced: ${e}`);
      assert.equal(e.message, "FENCED the lock is held under a newer fence");
      return true;
    });
    assert.equal(await a.get(data), "by-f2");

    assert.equal(await a.call("LOCK.EXTEND", key, token, 60000), 1);
    assert.equal(await b.call("LOCK.EXTEND", key, other, 60000), 0);

    const info = infoObject(await a.call("LOCK.INFO", key));
    assert.equal(info.holder, token);
    assert.equal(info.fence, f2);
    assert.ok(info.ttl > 30000 && info.ttl <= 60000, `ttl ${info.ttl}`);
    assert.equal(info.waiters, 0);
    assert.equal(info.mode, "exclusive");
    assert.equal(info.holders, 1);
    const [[holder, fence, ttl, mode]] = holdersList(await a.call("LOCK.HOLDERS", key));
    assert.deepEqual([holder, fence, mode], [token, f2, "exclusive"]);
    assert.ok(ttl > 30000 && ttl <= 60000, `ttl ${ttl}`);
    const exact = infoObject(await s.call("LOCK.INFO", key));
    assert.equal(exact.fence, String(f2), "the fence as a string and as a number agree");

    // WAIT that times out: null after about 100 ms.
    const t0 = Date.now();
    assert.equal(await b.call("LOCK.ACQUIRE", key, other, 30000, "WAIT", 100), null);
    assert.ok(Date.now() - t0 >= 90, "WAIT 100 returned too early");

    // A blocking WAIT on b, granted the moment a releases.
    const granted = b.call("LOCK.ACQUIRE", key, other, 30000, "WAIT", 10000);
    const deadline = Date.now() + 5000;
    while (infoObject(await a.call("LOCK.INFO", key)).waiters !== 1) {
      assert.ok(Date.now() < deadline, "the waiter never joined the queue");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(await a.call("LOCK.RELEASE", key, token), 1);
    const f3 = await granted;
    checkFence(f3, "granted");
    assert.ok(f3 > f2, `granted fence ${f3} must exceed ${f2}`);
    const after = infoObject(await a.call("LOCK.INFO", key));
    assert.equal(after.holder, other);
    assert.equal(after.fence, f3);

    assert.equal(await a.call("LOCK.RELEASE", key, token), 0, "no longer the holder");
    assert.equal(await b.call("LOCK.RELEASE", key, other), 1);
    assert.equal(await a.call("LOCK.INFO", key), null, "released and nobody waits: gone");
    assert.equal(await a.exists(key), 0);
    await a.del(data);

    // Errors arrive as rejected promises with the server's text.
    await assert.rejects(a.call("LOCK.ACQUIRE", key, token, 0), /ttl must be between/);
    console.log(`ioredis ${require("ioredis/package.json").version}: ok (fences ${f1} < ${f2} < ${f3})`);
  } finally {
    a.disconnect();
    b.disconnect();
    s.disconnect();
  }
}

// --- The recommended pattern, as docs/CLIENTS.md shows it ----------------------------------

// Runs work(fence, isLost) holding the lock at `key`, and extends its lease every third of
// the ttl while the work runs. isLost() turns true, for good, once the lock may be gone: an
// extend answered 0 or failed (any error: this client can no longer tell), or the lease's
// end passed, counted on this process's clock from the moment the last acquire or extend
// that succeeded was sent. Rejects if the lock is not granted within waitMs, and if it was
// lost while the work ran. LOCK.ACQUIRE ... WAIT blocks its connection like BLPOP: give it a
// connection that nothing else waits on (redis.duplicate()).
async function withLock(redis, key, ttlMs, work, waitMs = 5000) {
  const token = randomUUID(); // one fresh token per acquisition
  const asked = performance.now(); // a lease starts after its command was sent
  const fence = await redis.call("LOCK.ACQUIRE", key, token, ttlMs, "WAIT", waitMs);
  if (fence === null) throw new Error(`${key} was not granted within ${waitMs} ms`);
  // Where a failover must not lose the lock, have a replica acknowledge it first:
  //   if ((await redis.call("WAIT", 1, 100)) === 0) release, then retry or give up
  let deadline = asked + ttlMs; // the lease ends after this, by this process's clock
  let lost = false;
  const isLost = () => (lost ||= performance.now() >= deadline);
  const extend = async () => {
    const sent = performance.now();
    try {
      // 0: the lease ended, or the key was deleted or taken by another token
      if ((await redis.call("LOCK.EXTEND", key, token, ttlMs)) !== 1) lost = true;
      else deadline = sent + ttlMs;
    } catch {
      lost = true; // refused (a lowered lock.max-ttl, OOM), a closed connection, ...
    }
  };
  // Granted after a long wait: extend now, so that the lease counts from a recent send.
  if (performance.now() - asked > ttlMs / 3) await extend();
  let timer = null;
  const keepAlive = async () => {
    await extend();
    if (timer !== null && !isLost()) timer = setTimeout(keepAlive, ttlMs / 3);
  };
  timer = setTimeout(keepAlive, ttlMs / 3);
  try {
    if (isLost()) throw new Error(`${key} was lost before the work began`);
    const result = await work(fence, isLost); // pass the fence with every write to the resource
    if (isLost()) throw new Error(`${key} was lost while the work ran`);
    return result;
  } finally {
    clearTimeout(timer);
    timer = null; // an extend still on its way schedules no other
    // 0 or an error: the lease has ended, or ends on its own
    await redis.call("LOCK.RELEASE", key, token).catch(() => {});
  }
}

// The lock is no longer held under this fence: the guarded command did not run.
class Fenced extends Error {
  name = "Fenced";
}

// Runs `command` only while `fence` is the current fence of the lock at `lockKey`. Resolves
// to the command's reply (an error of the command itself rejects as usual); rejects with
// Fenced, and nothing ran, if the lock is not held under `fence` any more.
async function guarded(redis, lockKey, fence, ...command) {
  try {
    return await redis.call("LOCK.GUARD", lockKey, fence, ...command);
  } catch (e) {
    if (e instanceof Redis.ReplyError && e.message.startsWith("FENCED ")) {
      throw new Fenced(e.message);
    }
    throw e;
  }
}

// A resource that checks fences: it refuses a write older than one it has accepted.
class FencedStore {
  constructor() {
    this.highest = 0;
    this.value = null;
  }
  write(fence, value) {
    if (fence < this.highest) throw new Error(`stale fence ${fence} < ${this.highest}`);
    this.highest = fence;
    this.value = value;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function pattern() {
  const r = connect();
  const key = `orders:${randomUUID()}`;
  const data = `${key}:data`;
  const store = new FencedStore();
  try {
    // The work outlives the 500 ms ttl; the keep-alive holds the lock all along.
    const f1 = await withLock(r, key, 500, async (fence, isLost) => {
      await sleep(1000);
      assert.ok(!isLost(), "the keep-alive lost the lock");
      assert.equal(infoObject(await r.call("LOCK.INFO", key)).fence, fence);
      store.write(fence, "first");
      assert.equal(await guarded(r, key, fence, "SET", data, "first"), "OK");
      return fence;
    });
    assert.equal(await r.call("LOCK.INFO", key), null, "released after the work");

    // A holder that stalls past its lease while another takes over: the store refuses the
    // stale holder's late write, and so does LOCK.GUARD in Redis.
    const stale = randomUUID();
    const fStale = await r.call("LOCK.ACQUIRE", key, stale, 100);
    assert.ok(fStale > f1);
    await sleep(300);
    const fenced = (reason) => (e) => {
      assert.ok(e instanceof Fenced, `not Fenced: ${e}`);
      assert.equal(e.message, `FENCED ${reason}`);
      return true;
    };
    const fNew = await withLock(r, key, 10000, async (fence) => {
      store.write(fence, "new");
      assert.equal(await guarded(r, key, fence, "SET", data, "new"), "OK");
      // the stalled holder wakes up
      await assert.rejects(
        guarded(r, key, fStale, "SET", data, "late"),
        fenced("the lock is held under a newer fence"),
      );
      return fence;
    });
    assert.ok(fNew > fStale);
    assert.throws(() => store.write(fStale, "late"), /stale fence/);
    assert.equal(store.value, "new");
    assert.equal(await r.get(data), "new", "only the holders' writes landed");
    // released: nobody holds it
    await assert.rejects(
      guarded(r, key, fNew, "SET", data, "after"),
      fenced("the lock is not held"),
    );
    assert.equal(await r.call("LOCK.RELEASE", key, stale), 0, "the stalled holder lost it");
    console.log(`ioredis ${require("ioredis/package.json").version} pattern: ok (fences ${f1} < ${fStale} < ${fNew})`);
  } finally {
    r.disconnect();
  }
}

// withLock's keep-alive when the lock goes: every way is reported by isLost() within one
// keep-alive interval (plus a round trip) of its cause, never after the lease's end by this
// process's clock, and withLock then rejects, although the work itself returned.
async function loss() {
  const r = connect();
  const admin = connect();
  const ttl = 600;
  const within = ttl / 3 + 150; // one keep-alive interval, and room for the round trip
  const lostIn = async (isLost, since, limit, what) => {
    while (!isLost()) {
      assert.ok(performance.now() - since < limit, `${what}: not reported lost in ${limit} ms`);
      await sleep(2);
    }
    return performance.now() - since;
  };
  const rejectsLost = (key) => (e) => {
    assert.equal(e.message, `${key} was lost while the work ran`);
    return true;
  };
  try {
    // Granted after waiting longer than a third of the ttl: extended at once, so that the
    // lease counts from then, and held past the end it would have had from the acquire's send.
    let key = `jobs:${randomUUID()}`;
    assert.ok((await admin.call("LOCK.ACQUIRE", key, "first", 10000)) > 0);
    const handOver = sleep(ttl * 0.9).then(() => admin.call("LOCK.RELEASE", key, "first"));
    await withLock(r, key, ttl, async (fence, isLost) => {
      const until = performance.now() + ttl * 0.5; // past the acquire's send + ttl
      while (performance.now() < until) {
        assert.ok(!isLost(), "lost after a long wait");
        await sleep(2);
      }
    });
    assert.equal(await handOver, 1);

    // The key deleted under the holder: the next extend answers 0.
    key = `jobs:${randomUUID()}`;
    let took = 0;
    await assert.rejects(
      withLock(r, key, ttl, async (fence, isLost) => {
        assert.ok(!isLost());
        const cause = performance.now();
        assert.equal(await admin.del(key), 1);
        took = await lostIn(isLost, cause, within, "deleted");
      }),
      rejectsLost(key),
    );
    const deleted = took;

    // LOCK.EXTEND refused: lock.max-ttl lowered below the ttl. An error is a loss too.
    key = `jobs:${randomUUID()}`;
    await assert.rejects(
      withLock(r, key, ttl, async (fence, isLost) => {
        const cause = performance.now();
        assert.equal(await admin.call("CONFIG", "SET", "lock.max-ttl", "100"), "OK");
        try {
          took = await lostIn(isLost, cause, within, "extend refused");
        } finally {
          await admin.call("CONFIG", "SET", "lock.max-ttl", "86400000");
        }
        // the server still holds it for this token: only the client cannot keep it
        assert.equal(infoObject(await admin.call("LOCK.INFO", key)).holders, 1);
      }),
      rejectsLost(key),
    );
    const refused = took;

    // The server stops answering (paused past the lease): no extend comes back, and the
    // lease's end by this process's clock, from the acquire's send, is the loss.
    key = `jobs:${randomUUID()}`;
    const before = performance.now(); // before the acquire was sent
    await assert.rejects(
      withLock(r, key, ttl, async (fence, isLost) => {
        assert.equal(await admin.call("CLIENT", "PAUSE", String(ttl * 3), "ALL"), "OK");
        took = await lostIn(isLost, before, ttl + 50, "server paused");
      }),
      rejectsLost(key),
    );
    const paused = took;
    assert.equal(await admin.call("LOCK.INFO", key), null, "released, or its lease ended");
    console.log(
      `ioredis ${require("ioredis/package.json").version} loss: ok (deleted: lost in ` +
        `${deleted.toFixed(0)} ms, extend refused: ${refused.toFixed(0)} ms, server paused: ` +
        `${paused.toFixed(0)} ms after the acquire, lease ${ttl} ms)`,
    );
  } finally {
    r.disconnect();
    admin.disconnect();
  }
}

// --- Read-write locks and semaphores, as docs/CLIENTS.md shows them -------------------------

// Runs work(fence) holding the lock at `key`: alone with no options, shared with ["SHARED"],
// as one of n permits with ["SHARED", "LIMIT", n]. Rejects, and work does not run, if the
// hold is not granted within waitMs. The WAIT blocks `redis` like BLPOP: give each holder
// that may wait a connection of its own (redis.duplicate()).
async function withHold(redis, key, ttlMs, options, work, waitMs = 5000) {
  const token = randomUUID(); // one fresh token per hold
  const fence = await redis.call("LOCK.ACQUIRE", key, token, ttlMs, ...options, "WAIT", waitMs);
  // not granted: nothing is held, and there is nothing to release
  if (fence === null) throw new Error(`${key} was not granted within ${waitMs} ms`);
  try {
    return await work(fence);
  } finally {
    await redis.call("LOCK.RELEASE", key, token);
  }
}

// Shared with the other readers; waits for a writer that holds the lock or queued first.
const withReadLock = (redis, key, ttlMs, work, waitMs) =>
  withHold(redis, key, ttlMs, ["SHARED"], work, waitMs);

// Alone: waits until the readers and writers that came first have released.
const withWriteLock = (redis, key, ttlMs, work, waitMs) =>
  withHold(redis, key, ttlMs, [], work, waitMs);

// Runs work(fence) holding one of `permits` permits of `key`; queues, first come first
// served, while all are taken. Every user of `key` must pass the same `permits`.
const withPermit = (redis, key, permits, ttlMs, work, waitMs) =>
  withHold(redis, key, ttlMs, ["SHARED", "LIMIT", permits], work, waitMs);

const UPGRADE_REFUSED =
  "ERR the token holds the lock shared: release it to take it exclusively (no upgrades)";
// How soon (ms) a waiter must hold the lock once the hold before it is released.
const GRANT_WITHIN = 200;

async function waitFor(cond, what, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, what);
    await sleep(5);
  }
}

// One client of a scenario, on a connection of its own (its WAIT blocks it): it takes its
// hold through a recipe and, once granted, stays in its work until told to leave.
class Actor {
  constructor(name, run) {
    this.name = name;
    this.redis = connect();
    this.fence = null;
    this.grantedAt = null;
    this.isEntered = false;
    this.entered = new Promise((resolve) => (this.onEntered = resolve));
    this.left = new Promise((resolve) => (this.onLeave = resolve));
    this.done = run(this).finally(() => this.redis.disconnect());
    this.done.catch(() => {}); // awaited, and reported, by waitEntered() and finish()
  }

  // The work under the hold: note the grant, then stay until told to leave.
  async work() {
    this.grantedAt = performance.now();
    this.isEntered = true;
    this.onEntered();
    await this.left;
  }

  // Asserts that it was granted at most GRANT_WITHIN ms after `released`.
  grantedWithin(released) {
    const late = this.grantedAt - released;
    assert.ok(late < GRANT_WITHIN, `${this.name} granted ${late} ms after the release`);
  }

  async waitEntered() {
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${this.name} was never granted`)), 5000);
    });
    const ended = this.done.then(() => {
      throw new Error(`${this.name} finished without being granted`);
    });
    try {
      await Promise.race([this.entered, ended, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  // Tells it to leave; resolves once its hold is released.
  async finish() {
    this.onLeave();
    await this.done;
  }
}

// LOCK.HOLDERS as [token, fence, ttl, mode] entries, in grant order.
function holdersList(reply) {
  if (reply === null) return null;
  assert.ok(Array.isArray(reply), `LOCK.HOLDERS: ${JSON.stringify(reply)}`);
  for (const h of reply) {
    assert.ok(Array.isArray(h) && h.length === 4, `LOCK.HOLDERS entry: ${JSON.stringify(h)}`);
    checkFence(h[1], "LOCK.HOLDERS fence");
  }
  return reply;
}

// Some fields of LOCK.INFO (by default mode, holders, waiters); null for no key.
async function infoOf(r, key, fields = ["mode", "holders", "waiters"]) {
  const i = infoObject(await r.call("LOCK.INFO", key));
  return i && fields.map((f) => i[f]);
}

// Waits until LOCK.INFO's mode, holders and waiters are `want`.
async function waitShape(r, key, want, what) {
  await waitFor(async () => String(await infoOf(r, key)) === String(want), what);
}

// A reader re-acquiring renews its lease and keeps its fence; an upgrade is refused and leaves
// the hold as it was; an exclusive holder asking SHARED downgrades in place.
async function sameToken(r) {
  const key = `doc:${randomUUID()}`;
  const token = randomUUID();
  const f = await r.call("LOCK.ACQUIRE", key, token, 10000, "SHARED");
  checkFence(f, "shared acquire");
  assert.equal(await r.call("LOCK.ACQUIRE", key, token, 30000, "SHARED"), f, "renewal");
  let [[t, fence, ttl, mode]] = holdersList(await r.call("LOCK.HOLDERS", key));
  assert.deepEqual([t, fence, mode], [token, f, "shared"]);
  assert.ok(ttl > 20000 && ttl <= 30000, `ttl ${ttl}`);
  await assert.rejects(r.call("LOCK.ACQUIRE", key, token, 30000), (e) => {
    assert.ok(e instanceof Redis.ReplyError, `${e}`);
    assert.equal(e.message, UPGRADE_REFUSED);
    return true;
  });
  [[t, fence, , mode]] = holdersList(await r.call("LOCK.HOLDERS", key));
  assert.deepEqual([t, fence, mode], [token, f, "shared"], "the refused upgrader keeps its hold");
  assert.equal(await r.call("LOCK.RELEASE", key, token), 1);
  assert.equal(await r.call("LOCK.HOLDERS", key), null);

  const fx = await r.call("LOCK.ACQUIRE", key, token, 30000);
  assert.ok(fx > f);
  assert.equal(await r.call("LOCK.ACQUIRE", key, token, 30000, "SHARED"), fx, "downgrade");
  const info = infoObject(await r.call("LOCK.INFO", key));
  assert.deepEqual([info.holder, info.mode, info.holders, info.fence], [null, "shared", 1, fx]);
  assert.equal(await r.call("LOCK.RELEASE", key, token), 1);
}

// Two readers hold the lock together; a writer queues until both have released; a reader
// that comes after the writer waits for it.
async function readersAndWriter(r) {
  const key = `{catalog:${randomUUID()}}:lock`;
  const data = key.replace(/:lock$/, ":prices");
  const reader = (name) =>
    new Actor(name, (actor) =>
      withReadLock(actor.redis, key, 30000, async (fence) => {
        actor.fence = fence;
        await actor.work();
      }),
    );
  const writer = () =>
    new Actor("writer", (actor) =>
      withWriteLock(actor.redis, key, 30000, async (fence) => {
        actor.fence = fence;
        // a write the server checks the fence of
        assert.equal(await guarded(actor.redis, key, fence, "HSET", data, "pen", 3), 1);
        await actor.work();
      }),
    );

  const a = reader("reader a");
  await a.waitEntered();
  const b = reader("reader b");
  await b.waitEntered();
  const info = infoObject(await r.call("LOCK.INFO", key));
  assert.deepEqual([info.holder, info.mode, info.holders, info.waiters], [null, "shared", 2, 0]);
  const holders = holdersList(await r.call("LOCK.HOLDERS", key));
  assert.deepEqual(holders.map((h) => [h[1], h[3]]), [[a.fence, "shared"], [b.fence, "shared"]]);
  assert.ok(a.fence < b.fence && b.fence === info.fence);
  // a reader's fence guards no write: LOCK.GUARD runs under an exclusive hold only
  await assert.rejects(guarded(r, key, b.fence, "HSET", data, "pen", 1), (e) => {
    assert.ok(e instanceof Fenced, `not Fenced: ${e}`);
    assert.equal(e.message, "FENCED the lock is held shared");
    return true;
  });

  const w = writer();
  await waitShape(r, key, ["shared", 2, 1], "the writer never queued");
  const c = reader("reader c");
  await waitShape(r, key, ["shared", 2, 2], "reader c never queued");
  await a.finish();
  assert.deepEqual(await infoOf(r, key), ["shared", 1, 2]);
  assert.ok(!w.isEntered, "the writer holds the lock while reader b does");
  let released = performance.now();
  await b.finish();
  await w.waitEntered();
  w.grantedWithin(released);
  const fields = ["mode", "holders", "waiters", "fence"];
  assert.deepEqual(await infoOf(r, key, fields), ["exclusive", 1, 1, w.fence]);
  assert.ok(w.fence > b.fence);
  assert.ok(!c.isEntered, "a reader that came after the writer joined before it");
  released = performance.now();
  await w.finish();
  await c.waitEntered();
  c.grantedWithin(released);
  assert.ok(c.fence > w.fence);
  await c.finish();
  assert.equal(await r.call("LOCK.INFO", key), null, "released and nobody waits: gone");
  assert.deepEqual(await r.hgetall(data), { pen: "3" });
  await r.del(data);
  return [a.fence, b.fence, w.fence, c.fence];
}

// A semaphore of 2 permits: two callers hold one each, a third waits until one of them
// releases; a caller that gives up waiting does not run; never more than 2 at once (counted
// here, apart from the server).
async function semaphore(r) {
  const key = `api:${randomUUID()}`;
  const calls = { now: 0, max: 0 };
  const caller = (name) =>
    new Actor(name, (actor) =>
      withPermit(actor.redis, key, 2, 30000, async (fence) => {
        actor.fence = fence;
        calls.now += 1;
        calls.max = Math.max(calls.max, calls.now);
        try {
          await actor.work();
        } finally {
          calls.now -= 1;
        }
      }),
    );
  const p1 = caller("caller 1");
  await p1.waitEntered();
  const p2 = caller("caller 2");
  await p2.waitEntered();
  assert.deepEqual(await infoOf(r, key), ["shared", 2, 0]);

  // Both permits taken: a caller that waits 100 ms is rejected and does not run.
  const t0 = Date.now();
  let ran = false;
  await assert.rejects(
    withPermit(r, key, 2, 30000, async () => (ran = true), 100),
    /was not granted within 100 ms/,
  );
  assert.ok(!ran, "ran without a permit");
  assert.ok(Date.now() - t0 >= 90, "WAIT 100 returned too early");

  const p3 = caller("caller 3");
  await waitShape(r, key, ["shared", 2, 1], "caller 3 never queued");
  assert.ok(!p3.isEntered);
  const released = performance.now();
  await p1.finish();
  await p3.waitEntered();
  p3.grantedWithin(released);
  assert.deepEqual(await infoOf(r, key), ["shared", 2, 0]);
  const holders = holdersList(await r.call("LOCK.HOLDERS", key));
  assert.deepEqual(holders.map((h) => h[1]), [p2.fence, p3.fence]);
  assert.ok(p3.fence > p2.fence && p2.fence > p1.fence);
  await p2.finish();
  await p3.finish();
  assert.equal(await r.call("LOCK.INFO", key), null, "released and nobody waits: gone");
  assert.deepEqual(calls, { now: 0, max: 2 });
  return [p1.fence, p2.fence, p3.fence];
}

async function shared() {
  const r = connect();
  try {
    await sameToken(r);
    const rw = await readersAndWriter(r);
    const sem = await semaphore(r);
    console.log(
      `ioredis ${require("ioredis/package.json").version} shared: ok (readers ${rw[0]}, ${rw[1]} ` +
        `< writer ${rw[2]} < reader ${rw[3]}; permits ${sem[0]}, ${sem[1]} < ${sem[2]})`,
    );
  } finally {
    r.disconnect();
  }
}

const what = process.argv[3] || "all";
(async () => {
  if (what === "flow" || what === "all") await main();
  if (what === "pattern" || what === "all") await pattern();
  if (what === "shared" || what === "all") await shared();
  if (what === "loss" || what === "all") await loss();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
