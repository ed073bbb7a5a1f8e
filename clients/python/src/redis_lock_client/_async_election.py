"""Leader election on ``redis.asyncio``: the same contract as ``_election``, with coroutines and
an async generator."""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Optional

from redis.asyncio.cluster import RedisCluster

from . import _common as c
from ._async import Lock
from ._async_conn import AsyncHoldConnection
from ._election import BLOCK
from ._election import Election as _SyncElection

log = logging.getLogger("redis_lock_client")


class Election(_SyncElection):
    """See the sync ``Election``. ``campaign()`` is awaitable and an async context manager;
    ``resign()`` and ``leader()`` are coroutines; ``observe()`` is an async generator (cancel
    the task that iterates it, or leave the ``async for``, to stop it)."""

    _lock_class = Lock

    def campaign(self, timeout: Optional[float] = None, *, on_lost=None):
        """``await election.campaign(...)`` gives the leadership (a ``Hold``);
        ``async with election.campaign(...) as leadership`` resigns when the block ends."""
        return _Campaign(self, timeout, on_lost)

    async def _campaign(self, timeout, on_lost):
        previous = self._start_campaign()
        try:
            if previous is not None:
                try:
                    await previous.release()
                except Exception as e:  # its lease ends on its own
                    log.warning("releasing the lost leadership of %r failed: %r", self.name, e)
            hold = await self._lock._acquire(timeout, True, on_lost, self.identity)
            self._hold = hold
            return hold
        finally:
            self._campaigning = False

    async def resign(self) -> bool:
        hold, self._hold = self._hold, None
        return False if hold is None else await hold.release()

    async def leader(self) -> Optional[c.Leader]:
        return c.leader_of(await self._lock.info())

    async def info(self) -> Optional[c.LockInfo]:
        return await self._lock.info()

    def observe(self, timeout: Optional[float] = None, *, block: float = BLOCK
                ) -> AsyncIterator[Optional[c.Leader]]:
        block_ms = c.seconds_to_ms(block, "block")
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must not be negative")
        deadline = None if timeout is None else c.monotonic() + timeout
        return self._observe(block_ms, deadline)

    async def _observe(self, block_ms, deadline):
        follow, backoff = c.Follow(), c.Backoff()
        hc, reconnecting = None, False
        try:
            while True:
                wait_ms = c.observe_wait_ms(block_ms, deadline)
                if wait_ms is None:
                    return
                within = c.wait_socket_timeout(wait_ms, None)  # above the wait
                try:
                    if hc is None:
                        socket_timeout = c.wait_socket_timeout(block_ms, None)
                        hc = await self._connect(reconnecting, socket_timeout)
                    if follow.last is c.Follow._NOTHING:
                        reply = await hc.call_routed("LOCK.INFO", self.name, read_timeout=within)
                    elif follow.shared:
                        holders = await hc.call_routed(
                            "LOCK.HOLDERS", self.name, read_timeout=within
                        )
                        follow.see_holders(holders)
                        follow.shared = False
                        continue
                    else:
                        reply = await hc.call_routed(
                            "LOCK.OBSERVE", self.name, follow.seen, wait_ms, read_timeout=within
                        )
                except Exception as e:
                    if not c.is_transient(e):
                        raise
                    if hc is not None:
                        await hc.close()
                    hc, reconnecting = None, True
                    delay = backoff.next()
                    log.warning("observing %r: %r; reconnecting in %.2f s", self.name, e, delay)
                    if deadline is not None:
                        delay = min(delay, max(0.0, deadline - c.monotonic()))
                    await asyncio.sleep(delay)
                    continue
                backoff.reset()
                changed, leader = follow.see(reply)
                if changed:
                    yield leader
        finally:
            if hc is not None:
                await hc.close()

    async def _connect(self, reconnecting, socket_timeout):
        if reconnecting and isinstance(self.client, RedisCluster):
            await self.client.execute_command("LOCK.INFO", self.name)  # see the sync one
        return await AsyncHoldConnection.open(
            self.client, self.name, None, socket_timeout=socket_timeout
        )


class _Campaign:
    """What ``campaign`` returns: awaitable, and an async context manager."""

    def __init__(self, election, timeout, on_lost):
        self._args = (election, timeout, on_lost)
        self._hold = None

    def __await__(self):
        election, timeout, on_lost = self._args
        return election._campaign(timeout, on_lost).__await__()

    async def __aenter__(self):
        self._hold = await self
        return self._hold

    async def __aexit__(self, *exc):
        return await self._hold.__aexit__(*exc)
