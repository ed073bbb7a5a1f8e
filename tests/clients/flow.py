"""The redis-lock flow from redis-py: acquire -> fence -> guarded writes -> extend -> info ->
release, and a blocking LOCK.ACQUIRE ... WAIT on a second connection that is granted on release.

Also the recommended client-side pattern that docs/CLIENTS.md shows (with_lock, FencedStore,
and guarded writes through LOCK.GUARD with its `guarded` helper).

Run by tests/clients.rs as `python flow.py <port> [flow|pattern|all]` in a venv with
tests/clients/requirements.txt; exits non-zero (an AssertionError) on the first failure.
"""

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
        assert isinstance(reply, list) and len(reply) == 8, f"LOCK.INFO: {reply!r}"
        d = dict(zip(reply[0::2], reply[1::2]))
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    assert set(d) == {"holder", "fence", "ttl", "waiters"}, f"LOCK.INFO fields: {d!r}"
    return d


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


# --- The recommended pattern, as docs/CLIENTS.md shows it ---------------------------------


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


if __name__ == "__main__":
    main()
