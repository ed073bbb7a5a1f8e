"""Python client of redis-lock: locks, read-write locks and semaphores on the module's
``LOCK.*`` commands, with a keep-alive that reports a lost lease, fences and guarded
writes. ``redis_lock_client`` is the sync API (redis-py's ``Redis``, ``RedisCluster``);
``redis_lock_client.asyncio`` the same on ``redis.asyncio``; ``Election`` is leader election on
a lock key. See README.md beside this package and the project's docs/commands.md."""

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
from ._election import Election
from ._sync import Hold, Lock, ReaderLock, ReadWriteLock, Semaphore

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
__version__ = "0.1.0"
