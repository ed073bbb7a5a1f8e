// The redis-lock flow from ioredis: acquire -> fence -> guarded writes -> extend -> info ->
// release, and a blocking LOCK.ACQUIRE ... WAIT on a second connection that is granted on
// release. Also the recommended client-side pattern that docs/CLIENTS.md shows (withLock,
// FencedStore, and guarded writes through LOCK.GUARD with its `guarded` helper).
// Run by tests/clients.rs as `node flow.js <port> [flow|pattern|all]`; exits non-zero on the
// first failure.
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
  assert.ok(Array.isArray(reply) && reply.length === 8, `LOCK.INFO: ${JSON.stringify(reply)}`);
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

// Runs work(fence, isLost) holding the lock at `key`. LOCK.ACQUIRE ... WAIT blocks its
// connection like BLPOP: give it a connection that nothing else waits on.
async function withLock(redis, key, ttlMs, work, waitMs = 5000) {
  const token = randomUUID(); // one fresh token per acquisition
  const fence = await redis.call("LOCK.ACQUIRE", key, token, ttlMs, "WAIT", waitMs);
  if (fence === null) throw new Error(`${key} is still held after ${waitMs} ms`);
  // Where a failover must not lose the lock, have a replica acknowledge it first:
  //   if ((await redis.call("WAIT", 1, 100)) === 0) release, then retry or give up
  let lost = false;
  const keepAlive = setInterval(async () => {
    // extend at a third of the ttl; 0 means the lock is gone
    if ((await redis.call("LOCK.EXTEND", key, token, ttlMs)) === 0) lost = true;
  }, ttlMs / 3);
  try {
    return await work(fence, () => lost); // pass the fence with every write to the resource
  } finally {
    clearInterval(keepAlive);
    await redis.call("LOCK.RELEASE", key, token);
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

const what = process.argv[3] || "all";
(async () => {
  if (what === "flow" || what === "all") await main();
  if (what === "pattern" || what === "all") await pattern();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
