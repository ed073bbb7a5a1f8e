"""The asyncio API: the main cases of the sync suites, on redis.asyncio."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

import redis.asyncio as aredis
from helpers import EVERY, TTL, assert_loss_timing, hold_connection_ids, run
from proxy import Proxy

from redis_lock_client.asyncio import (
    Fenced,
    Lock,
    LockLost,
    NotAcquired,
    NotDurable,
    ReadWriteLock,
    Semaphore,
)


def client(server_or_port, protocol, **kwargs):
    port = getattr(server_or_port, "port", server_or_port)
    kwargs.setdefault("socket_timeout", 10)
    return aredis.Redis(host="127.0.0.1", port=port, protocol=protocol, **kwargs)


async def _until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


async def _waiters(lock, n):
    info = await lock.info()
    return (0 if info is None else info.waiters) == n


async def _lost(hold, timeout=5.0):
    await asyncio.wait_for(hold.lost.wait(), timeout)
    return time.monotonic()


def test_acquire_guard_release(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock, data = Lock(r, "{%s}:lock" % key, ttl=30), "{%s}:data" % key
        async with lock.acquire(timeout=1) as hold:
            info = await lock.info()
            assert info.holder == hold.token and info.fence == hold.fence
            assert await hold.guard("SET", data, "1") == b"OK"
            new = await hold.new_fence()
            assert new > info.fence and hold.fence == new
            await hold.extend()
            hold.check()
        assert await lock.info() is None
        with pytest.raises(Fenced, match="not held"):
            await hold.guard("SET", data, "2")
        with pytest.raises(ZeroDivisionError):
            async with lock.acquire() as hold:
                1 / 0  # noqa: B018
        assert await lock.info() is None  # released on the exception
        h = await lock.acquire(blocking=False)  # awaitable as well as a context manager
        assert await h.release() is True
        await r.aclose()

    run(main())


def test_kinds_and_contention(server, protocol, key):
    async def main():
        r = client(server, protocol)
        rw = ReadWriteLock(r, key, ttl=30)
        a, b = await rw.read.acquire(), await rw.read.acquire()
        assert (await rw.info()).holders == 2
        with pytest.raises(Fenced, match="shared"):
            await a.guard("SET", key + ":x", "1")
        start = time.monotonic()
        with pytest.raises(NotAcquired):
            await rw.write.acquire(timeout=0.2)
        assert 0.19 <= time.monotonic() - start < 0.45
        writer = asyncio.ensure_future(rw.write.acquire(timeout=5))
        await _until(lambda: _waiters(rw.write, 1))
        await a.release()
        await b.release()
        w = await writer
        assert (await rw.info()).mode == "exclusive"
        await w.release()

        sem = Semaphore(r, key + ":sem", 2, ttl=30)
        x, y = await sem.acquire(), await sem.acquire()
        with pytest.raises(NotAcquired):
            await sem.acquire(blocking=False)
        waiter = asyncio.ensure_future(sem.acquire(timeout=5))
        await _until(lambda: _waiters(sem, 1))
        await x.release()
        z = await asyncio.wait_for(waiter, 1)
        for h in (y, z):
            await h.release()
        await r.aclose()

    run(main())


def test_fifo_hand_off(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock = Lock(r, key, ttl=30)
        first = await lock.acquire()
        order = []

        async def work(i):
            async with lock.acquire(timeout=10):
                order.append(i)
                await asyncio.sleep(0.02)

        tasks = []
        for i in range(3):
            tasks.append(asyncio.ensure_future(work(i)))
            await _until(lambda i=i: _waiters(lock, i + 1))
        await first.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2]
        await r.aclose()

    run(main())


def test_grant_after_a_long_wait_gets_a_fresh_lease(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock = Lock(r, key, ttl=TTL)
        holder = await lock.acquire()
        asyncio.get_running_loop().call_later(TTL * 1.5, asyncio.ensure_future, holder.release())
        hold = await lock.acquire(timeout=5)
        assert hold.expires_at - time.monotonic() > TTL - 0.1
        await asyncio.sleep(2 * EVERY)
        assert hold.held and (await lock.info()).holder == hold.token
        await hold.release()
        await r.aclose()

    run(main())


def test_cancelled_wait_leaves_no_grant(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock = Lock(r, key, ttl=30)
        a = await lock.acquire()
        b = asyncio.ensure_future(lock.acquire(timeout=10))
        await _until(lambda: _waiters(lock, 1))
        c = asyncio.ensure_future(lock.acquire(timeout=5))
        await _until(lambda: _waiters(lock, 2))
        b.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b
        await _until(lambda: _waiters(lock, 1))
        released_at = time.monotonic()
        await a.release()
        hold = await asyncio.wait_for(c, 0.5)
        assert time.monotonic() - released_at < 0.5
        assert [h.token for h in await lock.holders()] == [hold.token]
        await hold.release()
        await r.aclose()

    run(main())


def test_cancel_after_the_grant_releases_it(server, protocol, key):
    async def main():
        r = client(server, protocol)
        durable = Lock(r, key, ttl=30, durable=1, durable_timeout=10)
        b = asyncio.ensure_future(durable.acquire(timeout=1))  # granted, then WAIT 1 10000
        await _until(lambda: _holders_is(durable, 1))
        c = asyncio.ensure_future(Lock(r, key, ttl=30).acquire(timeout=5))
        await _until(lambda: _waiters(durable, 1))
        cancelled_at = time.monotonic()
        b.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b
        hold = await asyncio.wait_for(c, 1)
        assert time.monotonic() - cancelled_at < 0.5
        await hold.release()
        await r.aclose()

    run(main())


async def _holders_is(lock, n):
    info = await lock.info()
    return info is not None and info.holders == n


def test_durable(server, replicated, protocol, key):
    async def main():
        alone = client(server, protocol)
        with pytest.raises(NotDurable):
            await Lock(alone, key, ttl=30, durable=1, durable_timeout=0.2).acquire(timeout=1)
        assert await Lock(alone, key).info() is None
        await alone.aclose()
        r = client(replicated, protocol)
        async with Lock(r, key, ttl=30, durable=1, durable_timeout=5).acquire() as hold:
            assert hold.held
        await r.aclose()

    run(main())


@pytest.mark.parametrize("cause", ["delete", "max-ttl", "kill", "restart"])
def test_loss_within_an_interval(fresh_server, protocol, key, cause):
    async def main():
        r = client(fresh_server, protocol)
        calls = []
        hold = await Lock(r, key, ttl=TTL, on_lost=calls.append).acquire()
        sync = fresh_server.client()
        [conn_id] = hold_connection_ids(sync)
        await asyncio.sleep(EVERY / 2)
        at = time.monotonic()
        if cause == "delete":
            sync.delete(key)
        elif cause == "max-ttl":
            sync.config_set("lock.max-ttl", 100)
        elif cause == "kill":
            sync.client_kill_filter(_id=conn_id)
        else:
            sync.close()
            await asyncio.get_running_loop().run_in_executor(None, fresh_server.restart)
        assert_loss_timing(hold, at, await _lost(hold))
        assert calls == [hold]
        with pytest.raises(LockLost):
            hold.check()
        await r.aclose()
        sync.close()

    run(main())


def test_server_paused_past_the_lease(fresh_server, protocol, key):
    async def main():
        r = client(fresh_server, protocol)
        hold = await Lock(r, key, ttl=TTL).acquire()
        await asyncio.sleep(EVERY / 2)
        at = time.monotonic()
        fresh_server.pause()
        try:
            seen = await _lost(hold, 3 * TTL)
        finally:
            fresh_server.resume()
        assert_loss_timing(hold, at, seen, bounded_by_interval=False)
        assert hold.expires_at <= at + TTL and hold.lost_at >= hold.expires_at - 0.05
        await r.aclose()

    run(main())


def test_deadline_counts_from_the_send_not_the_reply(fresh_server, protocol, key):
    async def main():
        proxy = Proxy(fresh_server.port)
        r = client(proxy.port, protocol)
        hold = await Lock(r, key, ttl=TTL).acquire()
        proxy.reply_delay = 0.3
        proxy.drop_after(b"LOCK.EXTEND")
        seen = await _lost(hold, 3 * TTL)
        assert hold.lost_at <= proxy.dropped_after_at + TTL
        assert_loss_timing(hold, proxy.dropped_after_at, seen, bounded_by_interval=False)
        proxy.close()
        await r.aclose()

    run(main())


def test_guarded_job_stops_on_loss_and_late_write_is_fenced(fresh_server, protocol, key):
    async def main():
        r = client(fresh_server, protocol)
        lock_key, data = "{%s}:lock" % key, "{%s}:data" % key
        hold = await Lock(r, lock_key, ttl=TTL).acquire()

        async def job():
            i = 0
            while not hold.lost.is_set():
                await hold.guard("RPUSH", data, i)
                i += 1
                await asyncio.sleep(0.01)
            return time.monotonic(), i

        task = asyncio.ensure_future(job())
        await asyncio.sleep(EVERY)
        await r.config_set("lock.max-ttl", 100)
        stopped_at, writes = await asyncio.wait_for(task, 3 * TTL)
        assert stopped_at < hold.expires_at
        await r.config_set("lock.max-ttl", 86400000)
        other = await Lock(r, lock_key, ttl=30).acquire(timeout=2 * TTL)
        with pytest.raises(Fenced, match="newer fence"):
            await hold.guard("RPUSH", data, "late")
        assert await r.llen(data) == writes
        await other.release()
        await r.aclose()

    run(main())


def test_keep_alive_keeps_the_hold(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock = Lock(r, key, ttl=TTL)
        async with lock.acquire() as hold:
            await asyncio.sleep(2 * TTL)
            assert hold.held and (await lock.info()).holder == hold.token
        await r.aclose()

    run(main())


def test_dropped_hold_is_released_and_async_on_lost(server, protocol, key):
    async def main():
        r = client(server, protocol)
        lock = Lock(r, key, ttl=30)
        with pytest.warns(ResourceWarning):
            await lock.acquire()  # dropped at once
            gc.collect()
            await _until(lambda: _is_free(lock), 2)
        seen = []

        async def on_lost(hold):
            await asyncio.sleep(0)
            seen.append(hold)

        hold = await Lock(r, key, ttl=TTL, on_lost=on_lost).acquire()
        await r.delete(key)
        await _lost(hold)
        await _until(lambda: _true(seen))
        assert seen == [hold]
        await hold.release()
        await r.aclose()

    run(main())


async def _is_free(lock):
    return await lock.info() is None


async def _true(value):
    return bool(value)


def test_lock_lost_raised_at_block_end(server, protocol, key):
    async def main():
        r = client(server, protocol)
        with pytest.raises(LockLost):
            async with Lock(r, key, ttl=30).acquire():
                await r.delete(key)
        await r.aclose()

    run(main())



