"""Durable mode past the grant (README, "Durable mode"): a guarded write and an extend are
followed by ``WAIT`` on the connection that sent them. Sync and asyncio, on a master with one
replica (the ``replicated`` fixture). "No replica acknowledges" is arranged here by pausing the
replica (SIGSTOP) after a durable grant: the grant itself needs one, unlike the durable tests of
test_wait.py, which stop at the grant."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis.asyncio as aredis
from helpers import EVERY, SLACK, TTL, run

import redis_lock_client as sync_api
import redis_lock_client.asyncio as async_api
from redis_lock_client import (
    Fenced,
    GuardNotDurable,
    Lock,
    LockError,
    LockLost,
    NotAcquired,
    ReadWriteLock,
    Semaphore,
)

TIMEOUT = 0.3  # durable_timeout of the tests where no replica acknowledges


@contextlib.contextmanager
def replica_paused(master):
    master.replica.pause()
    try:
        yield
    finally:
        master.replica.resume()


def waits(server) -> int:
    """WAIT commands the server has run so far."""
    with server.client() as r:
        return r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0)


def aclient(server, protocol):
    return aredis.Redis(host="127.0.0.1", port=server.port, protocol=protocol, socket_timeout=10)


def _assert_unknown_outcome(error, started, master, data):
    took = time.monotonic() - started
    assert TIMEOUT - 0.05 <= took < TIMEOUT + 2, took
    assert error.acked == 0 and error.required == 1
    assert error.reply in (b"OK", "OK")  # what LOCK.GUARD answered: it ran
    assert isinstance(error, LockError)
    assert not isinstance(error, (NotAcquired, LockLost))  # the hold is still held
    with master.client() as m:
        assert m.get(data) == b"v2"  # on the master: "outcome unknown" is honest


# -- sync ------------------------------------------------------------------------------------


def test_durable_guard_reaches_the_replica(replicated, protocol, key):
    r = replicated.client(protocol=protocol)
    replica = replicated.replica.client()
    lock = ReadWriteLock(r, key, ttl=30, durable=1, durable_timeout=5).write
    with lock.acquire(timeout=1) as hold:
        before = waits(replicated)
        assert hold.guard("SET", key + ":data", "v1") in (b"OK", "OK")
        assert replica.get(key + ":data") == b"v1"  # right after: WAIT 1 confirmed it
        assert waits(replicated) == before + 1
    before = waits(replicated)
    with pytest.raises(Fenced):
        hold.guard("SET", key + ":data", "late")  # refused: no WAIT follows
    assert waits(replicated) == before
    assert replica.get(key + ":data") == b"v1"
    r.close()
    replica.close()


def test_durable_guard_unacknowledged_raises_outcome_unknown(replicated, protocol, key):
    r = replicated.client(protocol=protocol)
    with Lock(r, key, ttl=30, durable=1, durable_timeout=TIMEOUT).acquire(timeout=1) as hold:
        with replica_paused(replicated):
            started = time.monotonic()
            with pytest.raises(GuardNotDurable) as e:
                hold.guard("SET", key + ":data", "v2")
            _assert_unknown_outcome(e.value, started, replicated, key + ":data")
            assert hold.held
    r.close()


@pytest.mark.parametrize("kind", ["lock", "read", "semaphore"])
def test_unconfirmed_auto_extend_is_a_loss(replicated, protocol, key, kind):
    r = replicated.client(protocol=protocol)
    options = dict(ttl=2, extend_every=EVERY, durable=1, durable_timeout=TIMEOUT)
    lock = {
        "lock": lambda: Lock(r, key, **options),
        "read": lambda: ReadWriteLock(r, key, **options).read,
        "semaphore": lambda: Semaphore(r, key, 2, **options),
    }[kind]()
    calls = []
    hold = lock.acquire(timeout=1, on_lost=calls.append)
    try:
        with replica_paused(replicated):
            sent = hold.expires_at - 2  # the grant's send time
            assert hold.lost.wait(3)
            took = hold.lost_at - sent  # first extend at EVERY, then WAIT's TIMEOUT
            assert EVERY + TIMEOUT - 0.05 <= took <= EVERY + TIMEOUT + SLACK, took
            assert "not confirmed" in str(hold.lost_reason)
            assert calls == [hold]
            with pytest.raises(LockLost):
                hold.check()
            assert hold.token in [h.token for h in lock.holders()]  # the master extended it
    finally:
        hold.release()
        r.close()


def test_unconfirmed_explicit_extend_is_a_loss(replicated, protocol, key):
    r = replicated.client(protocol=protocol)
    lock = Lock(r, key, ttl=30, auto_extend=False, durable=1, durable_timeout=TIMEOUT)
    hold = lock.acquire(timeout=1)
    hold.extend()  # confirmed
    try:
        with replica_paused(replicated):
            started = time.monotonic()
            with pytest.raises(LockLost):
                hold.extend()
            assert TIMEOUT - 0.05 <= time.monotonic() - started < TIMEOUT + 2
            assert hold.lost.is_set()
    finally:
        hold.release()
        r.close()


def test_non_durable_mode_sends_no_wait(server, r, key):
    before = waits(server)
    with Lock(r, key, ttl=TTL).acquire(timeout=1) as hold:
        hold.guard("SET", key + ":data", "v")
        hold.extend()
        time.sleep(EVERY * 1.5)  # an auto-extend too
        hold.guard("SET", key + ":data", "w")
    assert waits(server) == before


# -- asyncio ---------------------------------------------------------------------------------


def test_async_durable_guard_reaches_the_replica(replicated, protocol, key):
    async def main():
        r = aclient(replicated, protocol)
        lock = async_api.Lock(r, key, ttl=30, durable=1, durable_timeout=5)
        with replicated.replica.client() as replica:
            async with lock.acquire(timeout=1) as hold:
                before = waits(replicated)
                assert await hold.guard("SET", key + ":data", "v1") in (b"OK", "OK")
                assert replica.get(key + ":data") == b"v1"
                assert waits(replicated) == before + 1
            before = waits(replicated)
            with pytest.raises(async_api.Fenced):
                await hold.guard("SET", key + ":data", "late")
            assert waits(replicated) == before
        await r.aclose()

    run(main())


def test_async_durable_guard_unacknowledged_raises_outcome_unknown(replicated, protocol, key):
    async def main():
        r = aclient(replicated, protocol)
        lock = async_api.Lock(r, key, ttl=30, durable=1, durable_timeout=TIMEOUT)
        async with lock.acquire(timeout=1) as hold:
            with replica_paused(replicated):
                started = time.monotonic()
                with pytest.raises(async_api.GuardNotDurable) as e:
                    await hold.guard("SET", key + ":data", "v2")
                _assert_unknown_outcome(e.value, started, replicated, key + ":data")
                assert hold.held
        await r.aclose()

    run(main())


def test_async_unconfirmed_auto_extend_is_a_loss(replicated, protocol, key):
    async def main():
        r = aclient(replicated, protocol)
        options = dict(ttl=2, extend_every=EVERY, durable=1, durable_timeout=TIMEOUT)
        hold = await async_api.Lock(r, key, **options).acquire(timeout=1)
        try:
            with replica_paused(replicated):
                sent = hold.expires_at - 2
                await asyncio.wait_for(hold.lost.wait(), 3)
                took = hold.lost_at - sent
                assert EVERY + TIMEOUT - 0.05 <= took <= EVERY + TIMEOUT + SLACK, took
                assert "not confirmed" in str(hold.lost_reason)
                with pytest.raises(async_api.LockLost):
                    hold.check()
        finally:
            await hold.release()
            await r.aclose()

    run(main())


def test_async_non_durable_mode_sends_no_wait(server, protocol, key):
    async def main():
        r = aclient(server, protocol)
        before = waits(server)
        async with async_api.Lock(r, key, ttl=TTL).acquire(timeout=1) as hold:
            await hold.guard("SET", key + ":data", "v")
            await hold.extend()
            await asyncio.sleep(EVERY * 1.5)
        assert waits(server) == before
        await r.aclose()

    run(main())


def test_exports():
    assert sync_api.GuardNotDurable is async_api.GuardNotDurable
    assert issubclass(GuardNotDurable, LockError)
    assert not issubclass(GuardNotDurable, (NotAcquired, LockLost))
