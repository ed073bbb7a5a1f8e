"""Acquire, release, fence, guard and the `with` contract, for the three kinds (sync)."""

from __future__ import annotations

import gc
import time
import uuid

import pytest
import redis
from helpers import TTL, wait_for

from redis_lock_client import (
    Fenced,
    LockError,
    LockInfo,
    LockLost,
    Lock,
    NotAcquired,
    ReadWriteLock,
    Semaphore,
)


def test_lock_acquire_release(r, key):
    lock = Lock(r, key, ttl=30)
    with lock.acquire(timeout=1) as hold:
        assert isinstance(hold.fence, int) and 0 < hold.fence < 2**53
        assert str(uuid.UUID(hold.token)) == hold.token
        assert hold.held and not hold.lost.is_set()
        info = lock.info()
        assert isinstance(info, LockInfo)
        assert info.holder == hold.token and info.fence == hold.fence
        assert info.mode == "exclusive" and info.holders == 1 and info.waiters == 0
        assert 29000 < info.ttl <= 30000
        [holder] = lock.holders()
        assert (holder.token, holder.fence, holder.mode) == (hold.token, hold.fence, "exclusive")
        hold.check()
    assert not hold.held
    assert lock.info() is None and lock.holders() == []
    with pytest.raises(LockError):
        hold.check()


def test_tokens_and_fences_are_fresh_per_acquisition(r, key):
    lock = Lock(r, key, ttl=30)
    first = lock.acquire()
    assert first.release() is True
    assert first.release() is False  # idempotent
    second = lock.acquire()
    assert second.token != first.token and second.fence > first.fence
    second.release()


def test_try_once(r, key):
    lock = Lock(r, key, ttl=30)
    with lock.acquire():
        for kwargs in ({"blocking": False}, {"timeout": 0}):
            start = time.monotonic()
            with pytest.raises(NotAcquired) as e:
                lock.acquire(**kwargs)
            assert time.monotonic() - start < 0.1
            assert isinstance(e.value, TimeoutError)
    with pytest.raises(ValueError):
        lock.acquire(timeout=1, blocking=False)


def test_guard_runs_and_passes_reply_and_errors_through(r, key):
    lock, data = Lock(r, "{%s}:lock" % key, ttl=30), "{%s}:data" % key
    with lock.acquire() as hold:
        assert hold.guard("HSET", data, "status", "paid") == 1
        assert r.hget(data, "status") == b"paid"
        # The inner command's own error is not a lost lock.
        with pytest.raises(redis.ResponseError) as e:
            hold.guard("INCR", data)
        assert not isinstance(e.value, Fenced) and "WRONGTYPE" in str(e.value)
        assert hold.held


def test_guard_with_a_stale_fence_is_fenced(r, key):
    lock, data = Lock(r, "{%s}:lock" % key, ttl=30), "{%s}:data" % key
    with lock.acquire() as hold:
        old = hold.fence
        new = hold.new_fence()
        assert new > old and hold.fence == new
        assert hold.guard("SET", data, "1") == b"OK"  # the hold guards with its new fence
        with pytest.raises(redis.ResponseError, match="^FENCED"):
            r.execute_command("LOCK.GUARD", lock.name, old, "SET", data, "2")
    with pytest.raises(Fenced, match="not held"):
        hold.guard("SET", data, "3")  # released: the server refuses
    assert r.get(data) == b"1"


def test_fenced_is_a_lock_lost_and_not_a_redis_error(r, key):
    assert issubclass(Fenced, LockLost)
    assert not issubclass(LockLost, redis.RedisError)  # `except RedisError` cannot eat it


def test_explicit_extend(r, key):
    lock = Lock(r, key, ttl=1, auto_extend=False)
    with lock.acquire() as hold:
        before = hold.expires_at
        hold.extend(ttl=5)
        assert hold.expires_at > before + 3.9
        assert 4000 < lock.holders()[0].ttl <= 5000
        time.sleep(0.05)
        hold.extend()  # the hold's ttl is 5 s now
        assert lock.holders()[0].ttl > 4950


def test_keep_alive_keeps_the_hold(r, key):
    lock = Lock(r, key, ttl=TTL)
    with lock.acquire() as hold:
        time.sleep(2 * TTL)
        assert hold.held and not hold.lost.is_set()
        assert lock.info().holder == hold.token
        assert hold.expires_at - time.monotonic() > TTL / 3


def test_with_releases_on_exception(r, key):
    lock = Lock(r, key, ttl=30)
    with pytest.raises(ZeroDivisionError):
        with lock.acquire() as hold:
            1 / 0  # noqa: B018
    assert not hold.held
    assert lock.info() is None
    lock.acquire(blocking=False).release()


def test_with_raises_lock_lost_when_lost_during_the_block(r, key):
    lock = Lock(r, key, ttl=30)
    with pytest.raises(LockLost):
        with lock.acquire():
            r.delete(key)  # gone; the block ends before the keep-alive notices
    assert lock.info() is None


def test_dropped_hold_is_released(r, key):
    lock = Lock(r, key, ttl=30)
    hold = lock.acquire()
    token = hold.token
    with pytest.warns(ResourceWarning):
        del hold
        gc.collect()
        wait_for(lambda: lock.info() is None, timeout=2)
    assert all(h.token != token for h in lock.holders())


def test_read_write_lock(r, key):
    rw = ReadWriteLock(r, key, ttl=30)
    a, b = rw.read.acquire(), rw.read.acquire()
    assert a.fence != b.fence
    info = rw.info()
    assert info.mode == "shared" and info.holders == 2 and info.holder is None
    with pytest.raises(NotAcquired):
        rw.write.acquire(timeout=0.1)
    # A reader's fence guards nothing, and that does not make its hold lost.
    with pytest.raises(Fenced, match="shared"):
        a.guard("SET", key + ":data", "x")
    assert a.held and not a.lost.is_set()
    a.release()
    b.release()
    with rw.write.acquire(timeout=1) as w:
        assert rw.info().mode == "exclusive"
        with pytest.raises(NotAcquired):
            rw.read.acquire(blocking=False)
        assert w.guard("SET", key + ":data", "x") == b"OK"


def test_semaphore(r, key):
    sem = Semaphore(r, key, 2, ttl=30)
    a, b = sem.acquire(), sem.acquire()
    with pytest.raises(NotAcquired):
        sem.acquire(timeout=0.1)
    assert [h.token for h in sem.holders()] == [a.token, b.token]
    a.release()
    with sem.acquire(timeout=1) as c:
        assert sem.info().holders == 2 and c.fence > b.fence
    b.release()
    with pytest.raises(ValueError):
        Semaphore(r, key, 0)


def test_on_lost_callback_runs_once_and_its_errors_are_contained(r, key):
    calls = []

    def on_lost(hold):
        calls.append(hold)
        raise RuntimeError("a buggy callback")

    lock = Lock(r, key, ttl=TTL, on_lost=on_lost)
    hold = lock.acquire()
    r.delete(key)
    assert hold.lost.wait(2)
    wait_for(lambda: calls)
    time.sleep(TTL / 2)
    assert calls == [hold]
    with pytest.raises(LockLost):
        hold.check()
    assert hold.release() is False


def test_info_of_a_free_key(r, key):
    lock = Lock(r, key)
    assert lock.info() is None and lock.holders() == []


def test_decode_responses_client(server, protocol, key):
    r = server.client(protocol=protocol, decode_responses=True)
    lock = Lock(r, key, ttl=30)
    with lock.acquire() as hold:
        assert lock.info().holder == hold.token
        assert hold.guard("SET", key + ":x", "1") == "OK"
    r.close()


def test_bad_arguments(r, key):
    with pytest.raises(ValueError):
        Lock(r, key, ttl=0)
    with pytest.raises(ValueError):
        Lock(r, key, ttl=1, extend_every=2)
    with pytest.raises(ValueError):
        Lock(r, key).acquire(timeout=-1)
