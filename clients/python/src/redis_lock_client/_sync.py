"""Lock objects and holds on redis-py's sync ``Redis`` and ``RedisCluster``."""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import warnings
import weakref
from typing import Callable, Optional

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from . import _common as c
from . import _durable
from ._sync_conn import HoldConnection, NoReply

log = logging.getLogger("redis_lock_client")

HELD, LOST, RELEASED, ABANDONED = "held", "lost", "released", "abandoned"


class _Kind:
    """A lock key and how to acquire it; ``options`` are LOCK.ACQUIRE's (docs/commands.md, "Shared
    holds"). Holds nothing itself, so one object can be shared by threads."""

    _options: tuple = ()

    def __init__(
        self,
        client,
        name,
        ttl: float = 30.0,
        *,
        extend_every: Optional[float] = None,
        auto_extend: bool = True,
        durable: int = 0,
        durable_timeout: float = 1.0,
        on_lost: Optional[Callable] = None,
    ):
        self.client = client
        self.name = name
        c.Lease(ttl, extend_every, 0.0)  # validates now rather than at the first acquire
        self.ttl, self.extend_every, self.auto_extend = ttl, extend_every, auto_extend
        if durable < 0:
            raise ValueError("durable must be a number of replicas, >= 0")
        self.durable = durable
        self.durable_ms = c.seconds_to_ms(durable_timeout, "durable_timeout")
        self.on_lost = on_lost

    def acquire(self, timeout: Optional[float] = None, *, blocking: bool = True, on_lost=None):
        """Waits up to ``timeout`` s for the hold (None: without limit; 0 or
        ``blocking=False``: tries once) and returns it as a ``Hold``, or raises
        ``NotAcquired`` (``NotDurable`` in durable mode)."""
        return self._acquire(timeout, blocking, on_lost, c.new_token())

    def _acquire(self, timeout, blocking, on_lost, token):
        # `token` is a fresh uuid4, or an election candidate's identity (_election.py).
        wait_ms = c.wait_ms_for(timeout, blocking)
        hc = HoldConnection(self.client, self.name, wait_ms)
        hc.connect()  # a failure here cannot have left a grant behind
        maybe_granted = True
        try:
            sent = c.monotonic()
            ttl_ms = c.seconds_to_ms(self.ttl, "ttl")
            args = c.acquire_args(self.name, token, ttl_ms, self._options, wait_ms)
            within = hc.wait_timeout
            reply = hc.call_routed(*args, within=within, forever=within is None)
            if reply is None:
                maybe_granted = False
                hc.close()
                raise c.NotAcquired(c.not_granted(self.name, wait_ms))
            fence = int(reply)
            if self.durable:
                self._confirm_durable(hc, token)
            lease = c.Lease(self.ttl, self.extend_every, sent)
            if c.monotonic() >= lease.next_extend:
                # A grant after a wait: its lease began somewhere between `sent` and now.
                # Restart it from a send time we know before handing the hold out.
                resent = c.monotonic()
                if hc.call("LOCK.EXTEND", self.name, token, lease.ttl_ms, within=lease.ttl) != 1:
                    raise c.NotAcquired(f"{self.name!r}: granted, but the lease ended first")
                lease.sent = resent
                if self.durable:
                    self._confirm_durable(hc, token)  # that extend too
            return Hold(self, hc, token, fence, lease, on_lost or self.on_lost)
        except BaseException:
            # Interrupted, refused or failed: close first, so that a grant the server has not
            # delivered yet goes to the next waiter; then release, in case one was delivered.
            hc.close()
            if maybe_granted:
                hc.release_quietly(self.name, token)
            raise

    def _confirm_durable(self, hc, token):
        within = c.durable_within(self.durable_ms)
        acked = hc.call("WAIT", self.durable, self.durable_ms, within=within)
        if acked < self.durable:
            raise c.NotDurable(
                c.unconfirmed("grant released", self.name, acked, self.durable, self.durable_ms),
                acked,
                self.durable,
            )

    def info(self) -> Optional[c.LockInfo]:
        return c.parse_info(self.client.execute_command("LOCK.INFO", self.name))

    def holders(self) -> list:
        return c.parse_holders(self.client.execute_command("LOCK.HOLDERS", self.name))


class Lock(_Kind):
    """A mutex: one holder at a time, first come first served."""


class ReaderLock(_Kind):
    """The read side of a ``ReadWriteLock``: shared with the other readers."""

    _options = ("SHARED",)


class ReadWriteLock:
    """Readers share the key (``.read``), a writer holds it alone (``.write``); a queued
    writer holds back the readers behind it (docs/CLIENTS.md, "Read-write locks and semaphores")."""

    def __init__(self, client, name, ttl: float = 30.0, **options):
        self.name = name
        self.read = ReaderLock(client, name, ttl, **options)
        self.write = Lock(client, name, ttl, **options)

    def info(self):
        return self.write.info()

    def holders(self):
        return self.write.holders()


class Semaphore(_Kind):
    """``permits`` holders at a time (``SHARED LIMIT n``). Every user of the key must pass
    the same ``permits``: the server checks each request against its own limit."""

    def __init__(self, client, name, permits: int, ttl: float = 30.0, **options):
        if not 1 <= permits <= 2**31:
            raise ValueError("permits must be between 1 and 2147483648")
        super().__init__(client, name, ttl, **options)
        self.permits = permits
        self._options = ("SHARED", "LIMIT", permits)


class Hold:
    """One hold of a lock: its token, its fence, and the signal that it was lost.

    A context manager: leaving the ``with`` block releases it, however the block ends; if the
    block ended normally but the hold had been lost meanwhile, leaving raises ``LockLost``.
    A hold that is garbage-collected unreleased is released by its keep-alive thread.
    """

    def __init__(self, kind: _Kind, hc: HoldConnection, token, fence, lease, on_lost):
        self._core = core = _Core(kind, hc, token, fence, lease, on_lost, self)
        self.name, self.token = kind.name, token
        self.lost: threading.Event = core.lost
        self._finalizer = weakref.finalize(self, core.abandon)
        core.start()

    fence = property(lambda self: self._core.fence, doc="The hold's current fence.")
    lost_reason = property(lambda self: self._core.lost_reason, doc="Why it was lost.")
    lost_at = property(lambda self: self._core.lost_at, doc="time.monotonic() of the loss.")
    expires_at = property(
        lambda self: self._core.lease.expires_at,
        doc="time.monotonic() at which the lease ends at the latest, unless extended: the "
        "send time of the last acquire or extend that succeeded, plus the ttl.",
    )
    held = property(lambda self: self._core.state == HELD, doc="Neither lost nor released.")

    def check(self):
        """Raises ``LockLost`` if the hold was lost, ``LockError`` if it was released."""
        self._core.check()

    def guard(self, *command, **options):
        """Runs ``command`` through ``LOCK.GUARD`` under this hold's fence and returns its
        reply (unparsed); raises ``Fenced`` if the server refused it."""
        return self._core.guard(command, options)

    def extend(self, ttl: Optional[float] = None):
        """Extends the lease now, to ``ttl`` s; a ttl given here becomes the hold's ttl, for
        the keep-alive too (default: the hold's ttl, the lock's unless changed). Raises
        ``LockLost`` if the hold is gone."""
        self._core.extend(ttl)

    def new_fence(self) -> int:
        """Takes a new, higher fence for this hold (``LOCK.FENCE``) and returns it."""
        return self._core.new_fence()

    def release(self) -> bool:
        """Stops the keep-alive and releases. True if the server still had the hold."""
        self._finalizer.detach()
        return self._core.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._core.state == RELEASED:
            return False  # released in the block: the caller has dealt with the outcome
        try:
            self.release()
        except Exception as e:
            # The lease ends on its own; an error here must not hide the block's own.
            log.warning("releasing %r failed: %r", self.name, e)
        if exc_type is None and self.lost.is_set():
            raise c.LockLost(f"{self.name!r} was lost before the block ended") from self.lost_reason
        return False

    def __repr__(self):
        return f"<Hold {self.name!r} fence={self.fence} {self._core.state}>"


class _Core:
    """A hold's state and keep-alive, apart from ``Hold`` so that the keep-alive thread does
    not keep an abandoned ``Hold`` alive."""

    def __init__(self, kind, hc, token, fence, lease, on_lost, hold):
        self.client, self.name, self.token, self.fence = kind.client, kind.name, token, fence
        self.extend_every, self.auto = kind.extend_every, kind.auto_extend
        self.hc, self.lease = hc, lease
        self.durable, self.durable_ms = kind.durable, kind.durable_ms  # see _durable.py
        self.on_lost, self.hold_ref = on_lost, weakref.ref(hold)
        self.state = HELD
        self.lost = threading.Event()
        self.lost_reason = self.lost_at = None
        self.cond = threading.Condition()  # guards state and lease; wakes the keep-alive
        self.io = threading.Lock()  # one command at a time on the hold's connection
        self.route = {}
        if isinstance(self.client, RedisCluster):
            # LOCK.GUARD has movable keys: naming the node saves a COMMAND GETKEYS per call.
            self.route = {"target_nodes": self.client.get_node_from_key(self.name)}
        self.thread = _NOT_STARTED

    def start(self):
        """Has the keep-alive thread started when it is first needed: at the first extend,
        or at the lease's end if there is none (see ``_Starter``)."""
        due = self.lease.next_extend if self.auto else self.lease.report_by
        _starter.add(self, min(due, self.lease.report_by))

    def start_thread(self):
        with self.cond:
            if self.thread is not _NOT_STARTED or self.state == RELEASED:
                return
            self.thread = threading.Thread(
                target=self.run, name=f"redis-lock keep-alive {self.name!r}", daemon=True
            )
        self.thread.start()

    # -- loss ----------------------------------------------------------------------------

    def lose(self, reason: BaseException, from_states=(HELD,)):
        """Reports the loss once: event, reason, callback (run in the detecting thread)."""
        with self.cond:
            if self.state not in from_states or self.lost.is_set():
                return
            if self.state == HELD:
                self.state = LOST
            self.lost_at = c.monotonic()
            self.lost_reason = reason
            self.lost.set()
            self.cond.notify_all()
        log.info("lost %r: %r", self.name, reason)
        hold = self.hold_ref()
        if self.on_lost is not None and hold is not None:
            try:
                self.on_lost(hold)
            except Exception:
                log.exception("on_lost callback of %r raised", self.name)

    def check(self):
        if self.lost.is_set():
            raise c.LockLost(f"{self.name!r} was lost: {self.lost_reason}") from self.lost_reason
        if self.state != HELD:
            raise c.LockError(f"{self.name!r} was released")

    # -- keep-alive ----------------------------------------------------------------------

    def run(self):
        try:
            while self.sleep_until_due():
                self.extend_once(None)
        except BaseException as e:  # the thread must never die silently
            self.lose(e)
        finally:
            self.finish()

    def sleep_until_due(self) -> bool:
        """Waits for the next extend; False once the hold is over. Reports the loss itself
        when the lease's end comes first: no I/O blocks this wait."""
        with self.cond:
            while self.state == HELD:
                now = c.monotonic()
                if now >= self.lease.report_by:
                    break
                due = self.lease.next_extend if self.auto else float("inf")
                if now >= due:
                    return True
                self.cond.wait(min(due, self.lease.report_by) - now)
            else:
                return False
        self.lose(c.LockLost("the lease ended before an extend succeeded"))
        return False

    def extend_once(self, ttl) -> bool:
        lease = self.lease
        if ttl is not None:
            lease = c.Lease(ttl, self.extend_every, lease.sent)  # validated before sending
        with self.io:
            if self.state != HELD:
                return False
            reason = self.extend_on_connection(lease)
        # Reported outside `io`: an on_lost callback may call release(), which takes it.
        if reason is None:
            return True
        self.lose(reason)
        if not isinstance(reason, Exception):
            raise reason  # KeyboardInterrupt in the caller's extend(): lost, and passed on
        return False

    def extend_on_connection(self, lease):
        """One LOCK.EXTEND, its reply awaited no longer than the lease allows. None if it
        succeeded, else why the hold must be taken as lost."""
        sent = c.monotonic()
        within = self.lease.report_by - sent
        if within <= 0:
            return c.LockLost("the lease ended before an extend succeeded")
        try:
            reply = self.hc.call(
                "LOCK.EXTEND", self.name, self.token, lease.ttl_ms, within=within
            )
        except NoReply:
            return c.LockLost("no reply to LOCK.EXTEND before the lease's end")
        except BaseException as e:  # any error: the lease cannot be vouched for
            return e
        if reply != 1:
            return c.LockLost("LOCK.EXTEND answered 0: the hold is gone")
        if self.durable:  # unconfirmed by replicas: a failed extend (_durable.py)
            reason = _durable.confirm_extend(self, self.lease.report_by)
            if reason is not None:
                return reason
        with self.cond:
            self.lease = lease
            lease.sent = sent
            self.cond.notify_all()
        return None

    def finish(self):
        try:
            if self.state == ABANDONED:
                warnings.warn(
                    f"a Hold of {self.name!r} was dropped unreleased", ResourceWarning, stacklevel=1
                )
                with self.io:
                    self.hc.close()
                    self.hc.release_quietly(self.name, self.token)
            with self.io:
                self.hc.close()
        except BaseException:
            log.exception("keep-alive of %r could not clean up", self.name)

    def abandon(self):
        with self.cond:
            if self.state in (HELD, LOST):
                self.state = ABANDONED
                self.cond.notify_all()
            else:
                return
        self.start_thread()  # it releases the hold

    # -- the holder's calls --------------------------------------------------------------

    def extend(self, ttl):
        self.check()
        if not self.extend_once(ttl):
            self.check()  # raises LockLost (or LockError, released meanwhile)

    def new_fence(self):
        self.check()
        reply = self.client.execute_command("LOCK.FENCE", self.name, self.token)
        if reply is None:
            self.lose(c.LockLost("LOCK.FENCE answered null: the hold is gone"))
            self.check()
        self.fence = int(reply)
        return self.fence

    def guard(self, command, options):
        try:
            if self.durable:  # LOCK.GUARD and WAIT on one connection
                return _durable.guard(self, command, options)
            return self.client.execute_command(
                "LOCK.GUARD", self.name, self.fence, *command, **self.route, **options
            )
        except ResponseError as e:
            if not c.is_fenced(e):
                raise
            fenced = c.Fenced(str(e))
            if c.fenced_means_lost(e):
                self.lose(fenced)
            raise fenced from e

    def release(self) -> bool:
        with self.cond:
            if self.state == RELEASED:
                return False
            before, self.state = self.state, RELEASED
            self.cond.notify_all()
        # On the hold's own connection, once an extend in flight is answered: it reaches the
        # node that granted the hold, whatever the client's slot map says.
        reply = None
        with self.io:
            try:
                reply = self.hc.call(
                    "LOCK.RELEASE", self.name, self.token, within=self.hc.user_timeout
                )
            except Exception:
                pass  # the connection is gone (which is how holds are lost): any will do
            if reply is None:
                self.hc.close()
            else:
                self.hc.give_back()  # answered: in step, fit for the next hold
        fallback = reply is None
        if fallback:
            reply = self.client.execute_command("LOCK.RELEASE", self.name, self.token)
        released = reply == 1
        # After a failed first try, a 0 may only mean that the first try did release it.
        if not released and before == HELD and not fallback:
            self.lose(c.LockLost("LOCK.RELEASE answered 0: the hold was gone"), (RELEASED,))
        return released


class _NotStarted:
    """The keep-alive thread of a hold that has not needed one yet."""

    @staticmethod
    def is_alive():
        return False


_NOT_STARTED = _NotStarted()


class _Starter:
    """One timer thread for the process that starts a hold's keep-alive thread when it is
    first due (its first extend; the lease's end without keep-alive). A hold released before
    then (most holds, with the default ttl of 30 s) costs no thread at all. A started keep-alive
    runs as before: its own thread, on the hold's own connection, its waits bounded by its
    own lease, so that no hold's I/O delays another's loss. Holds are kept by weak reference:
    a released one drops out."""

    def __init__(self):
        self.cond = threading.Condition()
        self.heap = []
        self.seq = itertools.count()
        self.thread = None
        self.pid = None
        self.wake_at = float("inf")

    def add(self, core, when):
        with self.cond:
            if self.thread is None or self.pid != os.getpid():
                self.heap, self.pid, self.wake_at = [], os.getpid(), float("inf")
                self.thread = threading.Thread(
                    target=self.run, name="redis-lock keep-alive starter", daemon=True
                )
                self.thread.start()
            heapq.heappush(self.heap, (when, next(self.seq), weakref.ref(core)))
            if when < self.wake_at:
                self.cond.notify()

    def run(self):
        while True:
            due = []
            with self.cond:
                now = c.monotonic()
                while self.heap and self.heap[0][0] <= now:
                    due.append(heapq.heappop(self.heap)[2])
                if not due:
                    self.wake_at = self.heap[0][0] if self.heap else float("inf")
                    self.cond.wait(None if not self.heap else self.wake_at - now)
                    continue
            for ref in due:
                core = ref()
                if core is not None:
                    try:
                        core.start_thread()
                    except BaseException as e:  # no thread: the hold cannot be vouched for
                        core.lose(e)


_starter = _Starter()
