"""What the sync and asyncio halves share: errors, argument building, reply parsing and
the lease arithmetic. The commands and their replies are those of the project's docs/commands.md
("Commands"); nothing here does I/O."""

from __future__ import annotations

import math
import os
import random
import socket
import time
import uuid
from typing import Any, NamedTuple, Optional

from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "LockError",
    "NotAcquired",
    "NotDurable",
    "GuardNotDurable",
    "LockLost",
    "Fenced",
    "LockInfo",
    "Holder",
    "Leader",
]


class LockError(Exception):
    """Base of this library's errors.

    Deliberately not a ``redis.RedisError``: code that retries or logs Redis errors must not
    swallow a lost lock by accident (docs/commands.md, "Guarded writes, end to end", step 4).
    """


class NotAcquired(LockError, TimeoutError):
    """The hold was not granted within the timeout (or at once, for ``blocking=False``).

    Nothing is held and there is nothing to release. A ``TimeoutError``, as the recipes in
    ``docs/CLIENTS.md`` raise, so ``except TimeoutError`` keeps working.
    """


class NotDurable(NotAcquired):
    """Granted, but fewer than ``durable`` replicas acknowledged the grant in time: the
    grant was released again and is reported as not acquired."""

    def __init__(self, message: str, acked: int, required: Optional[int] = None):
        super().__init__(message)
        self.acked = acked
        self.required = required


class GuardNotDurable(LockError):
    """Durable mode: a guarded write ran on the master (``LOCK.GUARD`` answered ``reply``), but
    fewer than ``required`` replicas acknowledged it within ``durable_timeout``. Its outcome is
    unknown: a failover now may promote a replica that never had it. ``acked`` is how many did
    (None if the ``WAIT`` itself got no answer: ``__cause__`` says why).

    Not a ``NotDurable``: that one means "not acquired", and the hold is still held. Not a
    ``LockLost`` either: the hold is intact on the master; only this write is in doubt."""

    def __init__(self, message: str, acked: Optional[int], required: int, reply: Any):
        super().__init__(message)
        self.acked = acked
        self.required = required
        self.reply = reply


class LockLost(LockError):
    """The hold is gone, or may be: the lease may have ended, so another client may hold the
    lock. Stop working on what it protects. ``__cause__`` is the error that revealed it."""


class Fenced(LockLost):
    """``LOCK.GUARD`` refused the write (a ``FENCED`` reply): nothing ran, and this fence
    will never be accepted again (or the hold is shared, which guards no write)."""


class LockInfo(NamedTuple):
    """``LOCK.INFO``, the same under RESP2 (a flat list) and RESP3 (a map)."""

    holder: Optional[str]  # the exclusive holder's token; None when shared or not held
    fence: int  # the last fence issued for the key
    ttl: int  # ms left of the (longest) lease; -1 if not held
    waiters: int
    mode: str  # "exclusive", "shared" or "none"
    holders: int


class Holder(NamedTuple):
    """One entry of ``LOCK.HOLDERS``."""

    token: str
    fence: int
    ttl: int
    mode: str


class Leader(NamedTuple):
    """Who leads an election: the candidate's identity (the token of the key's exclusive
    hold) and the fence of its hold."""

    identity: str
    fence: int


def new_token() -> str:
    # One fresh random token per acquisition: the token is what proves a hold.
    return str(uuid.uuid4())


def _text(value: Any) -> Any:
    # surrogateescape keeps a foreign, binary token round-trippable through str.
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def parse_info(reply: Any) -> Optional[LockInfo]:
    if reply is None:
        return None
    if isinstance(reply, dict):
        fields = {_text(k): v for k, v in reply.items()}
    else:  # RESP2: field, value, field, value ...
        fields = {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
    return LockInfo(
        holder=_text(fields["holder"]),
        fence=int(fields["fence"]),
        ttl=int(fields["ttl"]),
        waiters=int(fields["waiters"]),
        mode=_text(fields["mode"]),
        holders=int(fields["holders"]),
    )


def parse_holders(reply: Any) -> list:
    if reply is None:
        return []
    return [Holder(_text(t), int(f), int(ttl), _text(m)) for t, f, ttl, m in reply]


def is_fenced(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and str(error).startswith("FENCED")


def fenced_means_lost(error: BaseException) -> bool:
    # "held shared" is the answer to a reader that guarded a write: its hold is intact.
    return "held shared" not in str(error)


def redirect_of(error: BaseException):
    """("MOVED"|"ASK", host, port) for a cluster redirect, else None. Parsed from the text:
    a connection made outside the cluster client may not map these to MovedError/AskError
    (redis-py 5 under RESP3 does not)."""
    if not isinstance(error, ResponseError):
        return None
    kind, *rest = str(error).split(" ")
    if kind.upper() not in ("MOVED", "ASK"):
        parts = getattr(error, "node_addr", None)  # MovedError/AskError keep the code apart
        if parts is None:
            return None
        return ("ASK" if type(error).__name__ == "AskError" else "MOVED", parts[0], parts[1])
    host, _, port = rest[-1].rpartition(":")
    return kind.upper(), host, int(port)


def is_tryagain(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and (
        type(error).__name__ == "TryAgainError" or str(error).startswith("TRYAGAIN")
    )


def seconds_to_ms(seconds: float, what: str) -> int:
    if seconds is None or not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"{what} must be a positive number of seconds, got {seconds!r}")
    return max(1, round(seconds * 1000))


def acquire_args(key, token, ttl_ms, options, wait_ms):
    args = ["LOCK.ACQUIRE", key, token, ttl_ms, *options]
    if wait_ms is not None:
        args += ["WAIT", wait_ms]
    return args


def durable_within(durable_ms: int) -> float:
    """How long the reply to ``WAIT n <durable_ms>`` is awaited: the server answers at the
    timeout, so 2 s above it means a connection that stopped answering."""
    return durable_ms / 1000 + 2


def unconfirmed(what: str, key, acked, required: int, durable_ms: int) -> str:
    got = "no answer to WAIT" if acked is None else f"{acked} of {required} replicas acknowledged"
    return f"{key!r}: {what}: {got} within {durable_ms} ms"


def wait_ms_for(timeout: Optional[float], blocking: bool) -> Optional[int]:
    """The ``WAIT`` argument: None to try once, 0 to wait without limit."""
    if not blocking:
        if timeout is not None:
            raise ValueError("can't specify a timeout for a non-blocking acquire")
        return None
    if timeout is None:
        return 0
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    if timeout == 0:
        return None
    return max(1, math.ceil(timeout * 1000))  # WAIT 0 would mean "forever"


def not_granted(key, wait_ms) -> str:
    if wait_ms is None:
        return f"{key!r} is held or others are queued for it (tried once)"
    return f"{key!r} was not granted within {wait_ms} ms"


def wait_socket_timeout(wait_ms: Optional[int], user_timeout: Optional[float]):
    """Read timeout of the connection that waits: above the wait, so that the server's
    null reply (not the socket) ends it; None for a wait without limit."""
    if wait_ms == 0:
        return None
    wait = (wait_ms or 0) / 1000
    floor = wait + max(2.0, wait * 0.1)
    return floor if user_timeout is None else max(floor, user_timeout)


class Lease:
    """The client's view of one hold's lease, on its monotonic clock.

    The server starts a lease when it runs the command, which is after the client sent it:
    so ``sent + ttl`` never falls after the server's lease end (README, "Concepts": leases
    end on the server's monotonic clock). The loss is reported ``margin`` before that, to
    absorb thread wake-up latency and clock-rate drift (1% of the ttl plus 10 ms, at most a
    sixth of the ttl).
    """

    def __init__(self, ttl: float, extend_every: Optional[float], sent: float):
        self.set_ttl(ttl, extend_every)
        self.sent = sent  # send time of the last acquire/extend that succeeded

    def set_ttl(self, ttl: float, extend_every: Optional[float]):
        self.ttl_ms = seconds_to_ms(ttl, "ttl")
        self.ttl = self.ttl_ms / 1000
        self.margin = min(self.ttl / 6, 0.010 + self.ttl / 100)
        every = self.ttl / 3 if extend_every is None else extend_every
        if not 0 < every < self.ttl - self.margin:
            raise ValueError(f"extend_every must be between 0 and the ttl, got {every!r}")
        self.every = every

    @property
    def expires_at(self) -> float:
        return self.sent + self.ttl

    @property
    def report_by(self) -> float:
        return self.expires_at - self.margin

    @property
    def next_extend(self) -> float:
        return self.sent + self.every


monotonic = time.monotonic


# -- elections (_election.py, _async_election.py) ---------------------------------------------


def default_identity() -> str:
    # Unique per candidate: the host and pid say who it is, the uuid4 tells apart two
    # candidates of one process and a pid reused after a restart. Tokens are at most 256 bytes.
    return f"{socket.gethostname()[:180]}:{os.getpid()}:{uuid.uuid4()}"


def checked_identity(identity) -> str:
    size = len(identity.encode("utf-8", "surrogateescape")) if isinstance(identity, str) else 0
    if not 1 <= size <= 256:
        raise ValueError(f"identity must be a str of 1 to 256 bytes, got {identity!r}")
    return identity


def leader_of(info: Optional[LockInfo]) -> Optional[Leader]:
    """The leader in a ``LOCK.INFO`` (or ``LOCK.OBSERVE``) reply: the exclusive holder."""
    if info is None or info.mode != "exclusive" or info.holders == 0:
        return None
    return Leader(info.holder, info.fence)


class Follow:
    """What an ``observe()`` iteration has seen and yielded, and its rules, shared by the sync
    and asyncio generators.

    ``seen`` is the key's state in the last reply, as ``LOCK.OBSERVE`` compares it with its
    ``seen`` argument (docs/commands.md, "LOCK.OBSERVE"): the fence when someone holds the key,
    else 0. It is always the last reply's, even a reply not yielded, so that the next
    ``LOCK.OBSERVE`` blocks until the key changes again, never answering at once in a loop;
    after a reconnect it is what the iteration resumes from. Yielded leaders only ever go up in
    fence: a reply that shows a fence at or below one already yielded (a server that came back
    from a failover behind its followers) yields nothing.
    """

    _NOTHING = object()

    def __init__(self):
        self.seen = 0
        self.top = 0  # the highest fence yielded
        self.last = self._NOTHING  # the last value yielded
        self.shared = False  # the last reply showed shared holds: see ``see_holders``

    def see_holders(self, reply):
        """``LOCK.HOLDERS`` after a reply that showed the key held shared. There ``fence`` is
        the last fence issued, above the state once the newest shared hold has ended
        (docs/commands.md, "LOCK.OBSERVE"): passed as ``seen``, every call would answer at
        once. All holds shared: the state is their largest fence. An exclusive hold among
        them (the key changed since): ``seen`` stays, so the next call answers at once."""
        holders = parse_holders(reply)
        if holders and all(h.mode == "shared" for h in holders):
            self.seen = max(h.fence for h in holders)

    def see(self, reply):
        """Takes one reply; returns (True, the value to yield) or (False, None)."""
        info = parse_info(reply)
        self.seen = info.fence if info is not None and info.holders > 0 else 0
        self.shared = info is not None and info.mode == "shared"
        leader = leader_of(info)
        if leader is None:
            if self.last is None:
                return False, None
        elif leader.fence <= self.top:
            return False, None
        else:
            self.top = leader.fence
        self.last = leader
        return True, leader


def is_transient(error: BaseException) -> bool:
    """An error ``observe()`` outlives by reconnecting: the connection, the node or the
    cluster's slot map, not the request. A wrong password, a missing command, ``WRONGTYPE``,
    ``NOPERM`` would fail the same way again and end the iteration."""
    if isinstance(error, AuthenticationError):
        return False
    if isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)):
        return True  # BusyLoadingError (LOADING) is a ConnectionError
    if type(error).__name__ in ("ClusterError", "RedisClusterException", "SlotNotCoveredError"):
        return True  # a cluster client that could not reach the slot's master (yet)
    if not isinstance(error, ResponseError):
        return False
    # Cluster parsers strip the code into the class: MovedError, AskError, TryAgainError,
    # ClusterDownError, MasterDownError.
    if type(error).__name__ in ("MovedError", "AskError", "TryAgainError", "ClusterDownError",
                                "MasterDownError"):
        return True
    code = str(error).split(" ", 1)[0].upper()
    return code in ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "BUSY")


class Backoff:
    """Delays between reconnects: doubling from ``first`` to ``most`` s, each drawn from its
    upper half, so that the followers of a server that went away do not come back in step."""

    def __init__(self, first: float = 0.05, most: float = 2.0):
        self.first, self.most, self.tries = first, most, 0

    def next(self) -> float:
        delay = min(self.most, self.first * 2**self.tries)
        self.tries += 1
        return random.uniform(delay / 2, delay)

    def reset(self):
        self.tries = 0


def observe_wait_ms(block_ms: int, deadline: Optional[float]) -> Optional[int]:
    """The ``timeout`` of the next ``LOCK.OBSERVE``: ``block_ms``, less once the iteration's
    deadline is nearer; None once it has passed."""
    if deadline is None:
        return block_ms
    left = deadline - monotonic()
    if left <= 0:
        return None
    return min(block_ms, max(1, math.ceil(left * 1000)))
