"""The asyncio API, on ``redis.asyncio.Redis`` and ``redis.asyncio.cluster.RedisCluster``:

    lock = Lock(r, "orders:42", ttl=30)
    async with lock.acquire(timeout=5) as hold:
        await hold.guard("HSET", "orders:42:data", "status", "paid")

Same names and semantics as the sync API; the methods that talk to Redis are coroutines,
``hold.lost`` is an ``asyncio.Event`` and the keep-alive is a task on the running loop.
"""

from ._async import Hold, Lock, ReaderLock, ReadWriteLock, Semaphore
from ._async_election import Election
from ._common import (
    Fenced,
    GuardNotDurable,
    Holder,
    Leader,
    LockError,
    LockInfo,
    LockLost,
    NotAcquired,
    NotDurable,
)

__all__ = [
    "Lock",
    "ReadWriteLock",
    "ReaderLock",
    "Semaphore",
    "Hold",
    "LockError",
    "NotAcquired",
    "NotDurable",
    "GuardNotDurable",
    "LockLost",
    "Fenced",
    "LockInfo",
    "Holder",
    "Election",
    "Leader",
]
