"""The redis-lock flow from redis-py: acquire -> fence -> guarded writes -> extend -> info ->
release, and a blocking LOCK.ACQUIRE ... WAIT on a second connection that is granted on release.

Also the recommended client-side pattern in raw commands (with_lock, FencedStore, and guarded
writes through LOCK.GUARD with a `guarded` helper), and read-write lock and semaphore recipes
(held, read_lock, write_lock, permit) with uses of them: two readers hold together while a
writer waits for both, and a reader after the writer waits for it; a semaphore of 2 permits
whose third caller waits until one is released. These are the tests' own helpers: for Python,
docs/CLIENTS.md shows the client library (clients/python), whose keep-alive, unlike
with_lock's here, also treats an extend's error and the lease's end as a loss.

Run by tests/clients/ as `python flow.py <port> [flow|pattern|shared|all]` in a venv with
tests/clients/requirements.txt; exits non-zero (an AssertionError) on the first failure.
"""

import contextlib
import sys
import threading
import time
import uuid

import redis


def info_dict(reply):
    """LOCK.INFO as a dict: a RESP3 map arrives as one, RESP2 as a flat field/value list."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        d = reply
    else:
        assert isinstance(reply, list) and len(reply) == 12, f"LOCK.INFO: {reply!r}"
        d = dict(zip(reply[0::2], reply[1::2]))
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    assert list(d) == ["holder", "fence", "ttl", "waiters", "mode", "holders"], f"LOCK.INFO: {d!r}"
    return d


def holders_list(reply):
    """LOCK.HOLDERS as a list of (token, fence, ttl, mode), in grant order."""
    if reply is None:
        return None
    assert isinstance(reply, list), f"LOCK.HOLDERS: {reply!r}"
    for h in reply:
        assert isinstance(h, list) and len(h) == 4, f"LOCK.HOLDERS entry: {h!r}"
        assert isinstance(h[1], int) and isinstance(h[2], int), f"LOCK.HOLDERS entry: {h!r}"
    return [tuple(h) for h in reply]


def flow(port, protocol):
    key = f"orders:{uuid.uuid4()}"
    data = f"{key}:data"
    token = str(uuid.uuid4())
    other = str(uuid.uuid4())
    a = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=30)
    b = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=30)
    try:
        f1 = a.execute_command("LOCK.ACQUIRE", key, token, 30000)
        assert isinstance(f1, int) and f1 > 0, f"acquire: {f1!r}"
        assert a.execute_command("LOCK.ACQUIRE", key, token, 30000) == f1, "a retry keeps the fence"
        assert b.execute_command("LOCK.ACQUIRE", key, other, 30000) is None, "held by another"

        f2 = a.execute_command("LOCK.FENCE", key, token)
        assert isinstance(f2, int) and f2 > f1, f"fence {f2!r} must exceed {f1}"
        assert b.execute_command("LOCK.FENCE", key, other) is None, "fence by a non-holder"

        # Guarded writes: the current fence lands, the one LOCK.FENCE replaced is refused.
        assert guarded(a, key, f2, "SET", data, "by-f2") == b"OK"
        try:
            guarded(b, key, f1, "SET", data, "by-f1")
            raise AssertionError("a write under a replaced fence landed")
        except Fenced as e:
            assert str(e) == "FENCED the lock is held under a newer fence", e
        assert a.get(data) == b"by-f2"

        assert a.execute_command("LOCK.EXTEND", key, token, 60000) == 1
        assert b.execute_command("LOCK.EXTEND", key, other, 60000) == 0

        info = info_dict(a.execute_command("LOCK.INFO", key))
        assert info["holder"] == token.encode(), info
        assert info["fence"] == f2, info
        assert 30000 < info["ttl"] <= 60000, info
        assert info["waiters"] == 0, info
        assert info["mode"] == b"exclusive" and info["holders"] == 1, info
        [(holder, fence, ttl, mode)] = holders_list(a.execute_command("LOCK.HOLDERS", key))
        assert (holder, fence, mode) == (token.encode(), f2, b"exclusive"), (holder, fence, mode)
        assert 30000 < ttl <= 60000, ttl

        # WAIT that times out: null after about 100 ms.
        t0 = time.monotonic()
        assert b.execute_command("LOCK.ACQUIRE", key, other, 30000, "WAIT", 100) is None
        assert time.monotonic() - t0 >= 0.09, "WAIT 100 returned too early"

        # A blocking WAIT on b, in a thread, granted the moment a releases.
        result = {}

        def wait_for_it():
            try:
                result["fence"] = b.execute_command("LOCK.ACQUIRE", key, other, 30000, "WAIT", 10000)
            except Exception as e:  # reported by the main thread
                result["error"] = e

        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 5
        while info_dict(a.execute_command("LOCK.INFO", key))["waiters"] != 1:
            assert time.monotonic() < deadline, "the waiter never joined the queue"
            time.sleep(0.01)
        assert a.execute_command("LOCK.RELEASE", key, token) == 1
        waiter.join(10)
        assert not waiter.is_alive(), "the waiter was not granted"
        assert "error" not in result, result
        f3 = result["fence"]
        assert isinstance(f3, int) and f3 > f2, f"granted fence {f3!r} must exceed {f2}"
        after = info_dict(a.execute_command("LOCK.INFO", key))
        assert after["holder"] == other.encode() and after["fence"] == f3, after

        assert a.execute_command("LOCK.RELEASE", key, token) == 0, "no longer the holder"
        assert b.execute_command("LOCK.RELEASE", key, other) == 1
        assert a.execute_command("LOCK.INFO", key) is None, "released and nobody waits: gone"
        assert a.exists(key) == 0
        a.delete(data)

        # Errors raise ResponseError with the server's text.
        try:
            a.execute_command("LOCK.ACQUIRE", key, token, 0)
            raise AssertionError("ttl 0 was accepted")
        except redis.ResponseError as e:
            assert "ttl must be between" in str(e), e
        return f1, f2, f3
    finally:
        a.close()
        b.close()


# --- The recommended pattern, in raw commands -----------------------------------------------


def with_lock(r, key, ttl_ms, work, wait_ms=5000):
    """Runs work(fence, lost) holding the lock at `key`; `lost` is set if the lease was lost."""
    token = str(uuid.uuid4())  # one fresh token per acquisition
    fence = r.execute_command("LOCK.ACQUIRE", key, token, ttl_ms, "WAIT", wait_ms)
    if fence is None:
        raise TimeoutError(f"{key} is still held after {wait_ms} ms")
    # Where a failover must not lose the lock, have a replica acknowledge it first:
    #   if r.execute_command("WAIT", 1, 100) == 0: release, then retry or give up
    lost, done = threading.Event(), threading.Event()

    def keep_alive():  # extend at a third of the ttl, stop as soon as the lock is gone
        while not done.wait(ttl_ms / 3000):
            if r.execute_command("LOCK.EXTEND", key, token, ttl_ms) == 0:
                lost.set()
                return

    t = threading.Thread(target=keep_alive, daemon=True)
    t.start()
    try:
        return work(fence, lost)  # pass the fence along with every write to the resource
    finally:
        done.set()
        t.join()
        r.execute_command("LOCK.RELEASE", key, token)


class Fenced(Exception):
    """The lock is no longer held under this fence: the guarded command did not run."""


def guarded(r, lock_key, fence, *command):
    """Runs `command` only while `fence` is the current fence of the lock at `lock_key`.

    Returns the command's reply (an error of the command itself raises as usual); raises
    Fenced, and nothing ran, if the lock is not held under `fence` any more.
    """
    try:
        return r.execute_command("LOCK.GUARD", lock_key, fence, *command)
    except redis.ResponseError as e:
        if str(e).startswith("FENCED "):
            raise Fenced(str(e)) from None
        raise


class FencedStore:
    """A resource that checks fences: it refuses a write older than one it has accepted."""

    def __init__(self):
        self.highest, self.value = 0, None

    def write(self, fence, value):
        if fence < self.highest:
            raise PermissionError(f"stale fence {fence} < {self.highest}")
        self.highest, self.value = fence, value


def pattern(port):
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    key = f"orders:{uuid.uuid4()}"
    data = f"{key}:data"
    store = FencedStore()
    try:
        # The work outlives the 500 ms ttl; the keep-alive holds the lock all along.
        def slow_work(fence, lost):
            time.sleep(1.0)
            assert not lost.is_set(), "the keep-alive lost the lock"
            assert info_dict(r.execute_command("LOCK.INFO", key))["fence"] == fence
            store.write(fence, "first")
            assert guarded(r, key, fence, "SET", data, "first") == b"OK"
            return fence

        f1 = with_lock(r, key, 500, slow_work)
        assert r.execute_command("LOCK.INFO", key) is None, "released after the work"

        # A holder that stalls past its lease (no keep-alive) while another takes over: the
        # store refuses the stale holder's late write, and so does LOCK.GUARD in Redis.
        stale = str(uuid.uuid4())
        f_stale = r.execute_command("LOCK.ACQUIRE", key, stale, 100)
        assert f_stale > f1
        time.sleep(0.3)

        def new_holder(fence, lost):
            store.write(fence, "new")
            assert guarded(r, key, fence, "SET", data, "new") == b"OK"
            try:
                guarded(r, key, f_stale, "SET", data, "late")  # the stalled holder wakes up
                raise AssertionError("a stale guarded write landed")
            except Fenced as e:
                assert str(e) == "FENCED the lock is held under a newer fence", e
            return fence

        f_new = with_lock(r, key, 10000, new_holder)
        assert f_new > f_stale
        try:
            store.write(f_stale, "late")
            raise AssertionError("the store took a stale write")
        except PermissionError:
            pass
        assert store.value == "new"
        assert r.get(data) == b"new", "only the holders' writes landed"
        try:
            guarded(r, key, f_new, "SET", data, "after")  # released: nobody holds it
            raise AssertionError("a guarded write landed on a released lock")
        except Fenced as e:
            assert str(e) == "FENCED the lock is not held", e
        assert r.execute_command("LOCK.RELEASE", key, stale) == 0, "the stalled holder lost it"
        return f1, f_stale, f_new
    finally:
        r.close()


# --- Read-write locks and semaphores, in raw commands --------------------------------------


@contextlib.contextmanager
def held(r, key, ttl_ms, *options, wait_ms=5000):
    """Holds the lock at `key` for a `with` block and gives its fence: alone without options,
    shared with "SHARED", as one of n permits with "SHARED", "LIMIT", n.

    Raises TimeoutError, and the block does not run, if the hold is not granted in wait_ms.
    """
    token = str(uuid.uuid4())  # one fresh token per hold
    fence = r.execute_command("LOCK.ACQUIRE", key, token, ttl_ms, *options, "WAIT", wait_ms)
    if fence is None:  # not granted: nothing is held, and there is nothing to release
        raise TimeoutError(f"{key} was not granted within {wait_ms} ms")
    try:
        yield fence
    finally:
        r.execute_command("LOCK.RELEASE", key, token)


def read_lock(r, key, ttl_ms, wait_ms=5000):
    """Shared with the other readers; waits for a writer that holds the lock or queued first."""
    return held(r, key, ttl_ms, "SHARED", wait_ms=wait_ms)


def write_lock(r, key, ttl_ms, wait_ms=5000):
    """Alone: waits until the readers and writers that came first have released."""
    return held(r, key, ttl_ms, wait_ms=wait_ms)


def permit(r, key, permits, ttl_ms, wait_ms=5000):
    """One of `permits` permits of `key` for a `with` block; queues, first come first served,
    while all are taken. Every user of `key` must pass the same `permits`."""
    return held(r, key, ttl_ms, "SHARED", "LIMIT", permits, wait_ms=wait_ms)


UPGRADE_REFUSED = "the token holds the lock shared: release it to take it exclusively (no upgrades)"
# How soon a waiter must hold the lock once the hold before it is released.
GRANT_WITHIN = 0.2


def wait_for(cond, what, timeout=5):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


class Actor:
    """One client of a scenario, in a thread of its own: it takes its hold through a recipe
    and, once granted, stays in its work until told to leave."""

    def __init__(self, name, run):
        self.name, self.fence, self.granted_at, self.error = name, None, None, None
        self.entered, self.leave = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._main, args=(run,), daemon=True)
        self.thread.start()

    def _main(self, run):
        try:
            run(self)
        except BaseException as e:  # reported by finish()
            self.error = e
            self.entered.set()

    def work(self):
        """The work under the hold: note the grant, then stay until told to leave."""
        self.granted_at = time.monotonic()
        self.entered.set()
        assert self.leave.wait(20), f"{self.name} was never told to leave"

    def granted_within(self, released):
        """Asserts that it was granted at most GRANT_WITHIN after `released`."""
        late = self.granted_at - released
        assert late < GRANT_WITHIN, f"{self.name} granted {late:.3f} s after the release"

    def wait_entered(self):
        assert self.entered.wait(5), f"{self.name} was never granted"
        if self.error is not None:
            raise self.error

    def finish(self):
        """Tells it to leave; returns once its hold is released."""
        self.leave.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), f"{self.name} did not finish"
        if self.error is not None:
            raise self.error


def info_of(r, key, *fields):
    """Some fields of LOCK.INFO (by default mode, holders, waiters); None for no key."""
    i = info_dict(r.execute_command("LOCK.INFO", key))
    return i and tuple(i[f] for f in fields or ("mode", "holders", "waiters"))


def same_token(r):
    """A reader re-acquiring renews its lease and keeps its fence; an upgrade is refused and
    leaves the hold as it was; an exclusive holder asking SHARED downgrades in place."""
    key = f"doc:{uuid.uuid4()}"
    token = str(uuid.uuid4())
    f = r.execute_command("LOCK.ACQUIRE", key, token, 10000, "SHARED")
    assert isinstance(f, int) and f > 0, f
    assert r.execute_command("LOCK.ACQUIRE", key, token, 30000, "SHARED") == f, "renewal"
    [(t, fence, ttl, mode)] = holders_list(r.execute_command("LOCK.HOLDERS", key))
    assert (t, fence, mode) == (token.encode(), f, b"shared") and 20000 < ttl <= 30000, ttl
    try:
        r.execute_command("LOCK.ACQUIRE", key, token, 30000)
        raise AssertionError("a shared holder took the lock exclusively")
    except redis.ResponseError as e:
        assert str(e) == UPGRADE_REFUSED, e
    [(t, fence, _, mode)] = holders_list(r.execute_command("LOCK.HOLDERS", key))
    assert (t, fence, mode) == (token.encode(), f, b"shared"), "the refused upgrader keeps its hold"
    assert r.execute_command("LOCK.RELEASE", key, token) == 1
    assert r.execute_command("LOCK.HOLDERS", key) is None

    fx = r.execute_command("LOCK.ACQUIRE", key, token, 30000)
    assert fx > f
    assert r.execute_command("LOCK.ACQUIRE", key, token, 30000, "SHARED") == fx, "downgrade"
    info = info_of(r, key, "holder", "mode", "holders", "fence")
    assert info == (None, b"shared", 1, fx), info
    assert r.execute_command("LOCK.RELEASE", key, token) == 1


def readers_and_writer(r):
    """Two readers hold the lock together; a writer queues until both have released; a
    reader that comes after the writer waits for it."""
    key = "{catalog}:lock"

    def reader(actor):
        def read_prices():  # the readers' work: here, stay until told to leave
            actor.work()
            return r.hgetall("{catalog}:prices")

        with read_lock(r, "{catalog}:lock", 30000):
            prices = read_prices()
        assert isinstance(prices, dict), prices

    def writer(actor):
        def write_prices(fence):  # the writer's work: a write the server checks the fence of
            actor.fence = fence
            assert guarded(r, "{catalog}:lock", fence, "HSET", "{catalog}:prices", "pen", 3) == 1
            actor.work()

        with write_lock(r, "{catalog}:lock", 30000) as fence:
            write_prices(fence)

    a = Actor("reader a", reader)
    a.wait_entered()
    b = Actor("reader b", reader)
    b.wait_entered()
    info = info_of(r, key, "holder", "mode", "holders", "waiters", "fence")
    assert info[:4] == (None, b"shared", 2, 0), info
    (_, fa, _, ma), (_, fb, _, mb) = holders_list(r.execute_command("LOCK.HOLDERS", key))
    assert (ma, mb) == (b"shared", b"shared") and fa < fb == info[4], (fa, fb, info)
    try:  # a reader's fence guards no write: LOCK.GUARD runs under an exclusive hold only
        guarded(r, key, fb, "HSET", "{catalog}:prices", "pen", 1)
        raise AssertionError("a guarded write under a shared hold landed")
    except Fenced as e:
        assert str(e) == "FENCED the lock is held shared", e

    w = Actor("writer", writer)
    wait_for(lambda: info_of(r, key) == (b"shared", 2, 1), "the writer never queued")
    c = Actor("reader c", reader)
    wait_for(lambda: info_of(r, key) == (b"shared", 2, 2), "reader c never queued")
    a.finish()
    assert info_of(r, key) == (b"shared", 1, 2), info_of(r, key)
    assert not w.entered.is_set(), "the writer holds the lock while reader b does"
    released = time.monotonic()
    b.finish()
    w.wait_entered()
    w.granted_within(released)
    info = info_of(r, key, "mode", "holders", "waiters", "fence")
    assert info == (b"exclusive", 1, 1, w.fence), info
    assert w.fence > fb, (w.fence, fb)
    assert not c.entered.is_set(), "a reader that came after the writer joined before it"
    released = time.monotonic()
    w.finish()
    c.wait_entered()
    c.granted_within(released)
    [(_, fc, _, mc)] = holders_list(r.execute_command("LOCK.HOLDERS", key))
    assert mc == b"shared" and fc > w.fence, (fc, w.fence)
    c.finish()
    assert r.execute_command("LOCK.INFO", key) is None, "released and nobody waits: gone"
    assert r.hgetall("{catalog}:prices") == {b"pen": b"3"}
    r.delete("{catalog}:prices")
    return fa, fb, w.fence, fc


def semaphore(r):
    """A semaphore of 2 permits: two callers hold one each, a third waits until one of them
    releases; a caller that gives up waiting does not run; never more than 2 at once (counted
    here, apart from the server)."""
    key = "api:calls"
    calls = {"now": 0, "max": 0}
    counting = threading.Lock()

    def caller(actor):
        def call_api():  # the callers' work: counted, and here it stays until told to leave
            with counting:
                calls["now"] += 1
                calls["max"] = max(calls["max"], calls["now"])
            try:
                actor.work()
            finally:
                with counting:
                    calls["now"] -= 1
            return actor.name

        with permit(r, "api:calls", 2, 30000):
            response = call_api()
        assert response == actor.name

    p1 = Actor("caller 1", caller)
    p1.wait_entered()
    p2 = Actor("caller 2", caller)
    p2.wait_entered()
    assert info_of(r, key) == (b"shared", 2, 0), info_of(r, key)
    [(_, f1, _, _), (_, f2, _, _)] = holders_list(r.execute_command("LOCK.HOLDERS", key))

    # Both permits taken: a caller that waits 100 ms gets TimeoutError and does not run.
    t0 = time.monotonic()
    try:
        with permit(r, key, 2, 30000, wait_ms=100):
            raise AssertionError("ran without a permit")
        raise AssertionError("no TimeoutError")
    except TimeoutError:
        pass
    assert time.monotonic() - t0 >= 0.09, "WAIT 100 returned too early"

    p3 = Actor("caller 3", caller)
    wait_for(lambda: info_of(r, key) == (b"shared", 2, 1), "caller 3 never queued")
    assert not p3.entered.is_set()
    released = time.monotonic()
    p1.finish()
    p3.wait_entered()
    p3.granted_within(released)
    assert info_of(r, key) == (b"shared", 2, 0), info_of(r, key)
    holders = holders_list(r.execute_command("LOCK.HOLDERS", key))
    assert [h[1] for h in holders][0] == f2 and holders[1][1] > f2, holders
    f3 = holders[1][1]
    p2.finish()
    p3.finish()
    assert r.execute_command("LOCK.INFO", key) is None, "released and nobody waits: gone"
    assert calls == {"now": 0, "max": 2}, calls
    return f1, f2, f3


def shared(port, protocol):
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=30)
    try:
        same_token(r)
        rw = readers_and_writer(r)
        sem = semaphore(r)
        return rw, sem
    finally:
        r.close()


def main():
    port = int(sys.argv[1])
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    if what in ("flow", "all"):
        for protocol in (2, 3):
            f1, f2, f3 = flow(port, protocol)
            print(f"redis-py {redis.__version__} RESP{protocol}: ok (fences {f1} < {f2} < {f3})")
    if what in ("pattern", "all"):
        f1, f2, f3 = pattern(port)
        print(f"redis-py {redis.__version__} pattern: ok (fences {f1} < {f2} < {f3})")
    if what in ("shared", "all"):
        for protocol in (2, 3):
            rw, sem = shared(port, protocol)
            print(
                f"redis-py {redis.__version__} RESP{protocol} shared: ok (readers {rw[0]}, {rw[1]} "
                f"< writer {rw[2]} < reader {rw[3]}; permits {sem[0]}, {sem[1]} < {sem[2]})"
            )


if __name__ == "__main__":
    main()
