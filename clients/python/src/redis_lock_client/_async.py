"""Lock objects and holds on ``redis.asyncio``: the same contract as ``_sync``, with an
asyncio task as keep-alive and an ``asyncio.Event`` as loss signal."""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
import weakref
from typing import Optional

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from . import _common as c
from . import _durable
from ._async_conn import AsyncHoldConnection, NoReply
from ._sync import ABANDONED, HELD, LOST, RELEASED
from ._sync import _Kind as _SyncKind

log = logging.getLogger("redis_lock_client")
_background: set = set()  # strong references to cleanup tasks that outlive their caller


def _spawn(coro):
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


class _Kind(_SyncKind):
    def acquire(self, timeout: Optional[float] = None, *, blocking: bool = True, on_lost=None):
        """``await lock.acquire(...)`` gives a ``Hold``; ``async with lock.acquire(...) as
        hold`` holds it for the block. Raises ``NotAcquired`` / ``NotDurable``."""
        return _Acquiring(self, timeout, blocking, on_lost)

    async def _acquire(self, timeout, blocking, on_lost, token=None):
        wait_ms = c.wait_ms_for(timeout, blocking)
        token = c.new_token() if token is None else token  # a candidate's identity
        hc = await AsyncHoldConnection.open(self.client, self.name, wait_ms)
        maybe_granted = True
        try:
            sent = c.monotonic()
            ttl_ms = c.seconds_to_ms(self.ttl, "ttl")
            args = c.acquire_args(self.name, token, ttl_ms, self._options, wait_ms)
            reply = await hc.call_routed(*args, read_timeout=hc.wait_timeout)
            if reply is None:
                maybe_granted = False
                await hc.close()
                raise c.NotAcquired(c.not_granted(self.name, wait_ms))
            fence = int(reply)
            if self.durable:
                await self._confirm_durable(hc, token)
            lease = c.Lease(self.ttl, self.extend_every, sent)
            if c.monotonic() >= lease.next_extend:
                # A grant after a wait: restart its lease from a send time we know.
                resent = c.monotonic()
                extended = await hc.call(
                    "LOCK.EXTEND", self.name, token, lease.ttl_ms, within=lease.ttl
                )
                if extended != 1:
                    raise c.NotAcquired(f"{self.name!r}: granted, but the lease ended first")
                lease.sent = resent
                if self.durable:
                    await self._confirm_durable(hc, token)  # that extend too
            return Hold(self, hc, token, fence, lease, on_lost or self.on_lost)
        except BaseException:
            # Close first (an undelivered grant goes to the next waiter), then release (a
            # delivered one). Shielded: a second cancellation must not cut the cleanup short.
            cleanup = _spawn(self._abandon(hc, token, maybe_granted))
            try:
                await asyncio.shield(cleanup)
            except BaseException:
                pass
            raise

    async def _confirm_durable(self, hc, token):
        within = c.durable_within(self.durable_ms)
        acked = await hc.call("WAIT", self.durable, self.durable_ms, within=within)
        if acked < self.durable:
            raise c.NotDurable(
                c.unconfirmed("grant released", self.name, acked, self.durable, self.durable_ms),
                acked,
                self.durable,
            )

    async def _abandon(self, hc, token, maybe_granted):
        await hc.close()
        if maybe_granted:
            await hc.release_quietly(self.name, token)

    async def info(self) -> Optional[c.LockInfo]:
        return c.parse_info(await self.client.execute_command("LOCK.INFO", self.name))

    async def holders(self) -> list:
        return c.parse_holders(await self.client.execute_command("LOCK.HOLDERS", self.name))


class _Acquiring:
    """What ``acquire`` returns: awaitable, and an async context manager."""

    def __init__(self, kind, timeout, blocking, on_lost):
        self._args = (kind, timeout, blocking, on_lost)
        self._hold = None

    def __await__(self):
        kind, *rest = self._args
        return kind._acquire(*rest).__await__()

    async def __aenter__(self):
        self._hold = await self
        return self._hold

    async def __aexit__(self, *exc):
        return await self._hold.__aexit__(*exc)


class Lock(_Kind):
    """A mutex: one holder at a time, first come first served."""


class ReaderLock(_Kind):
    """The read side of a ``ReadWriteLock``."""

    _options = ("SHARED",)


class ReadWriteLock:
    """``.read`` shares the key with other readers, ``.write`` holds it alone."""

    def __init__(self, client, name, ttl: float = 30.0, **options):
        self.name = name
        self.read = ReaderLock(client, name, ttl, **options)
        self.write = Lock(client, name, ttl, **options)

    async def info(self):
        return await self.write.info()

    async def holders(self):
        return await self.write.holders()


class Semaphore(_Kind):
    """``permits`` holders at a time (``SHARED LIMIT n``); every user passes the same n."""

    def __init__(self, client, name, permits: int, ttl: float = 30.0, **options):
        if not 1 <= permits <= 2**31:
            raise ValueError("permits must be between 1 and 2147483648")
        super().__init__(client, name, ttl, **options)
        self.permits = permits
        self._options = ("SHARED", "LIMIT", permits)


class Hold:
    """One hold; see the sync ``Hold``. ``lost`` is an ``asyncio.Event``; ``on_lost`` may be
    a plain function or a coroutine function (run as a task of its own)."""

    def __init__(self, kind, hc, token, fence, lease, on_lost):
        self._core = core = _Core(kind, hc, token, fence, lease, on_lost, self)
        self.name, self.token = kind.name, token
        self.lost: asyncio.Event = core.lost
        self._finalizer = weakref.finalize(self, core.abandon)
        core.start()

    fence = property(lambda self: self._core.fence)
    lost_reason = property(lambda self: self._core.lost_reason)
    lost_at = property(lambda self: self._core.lost_at)
    expires_at = property(lambda self: self._core.lease.expires_at)
    held = property(lambda self: self._core.state == HELD)

    def check(self):
        self._core.check()

    async def guard(self, *command, **options):
        return await self._core.guard(command, options)

    async def extend(self, ttl: Optional[float] = None):
        await self._core.extend(ttl)

    async def new_fence(self) -> int:
        return await self._core.new_fence()

    async def release(self) -> bool:
        self._finalizer.detach()
        return await self._core.release()

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if self._core.state == RELEASED:
            return False
        try:
            await self.release()
        except Exception as e:
            log.warning("releasing %r failed: %r", self.name, e)
        if exc_type is None and self.lost.is_set():
            raise c.LockLost(f"{self.name!r} was lost before the block ended") from self.lost_reason
        return False

    def __repr__(self):
        return f"<Hold {self.name!r} fence={self.fence} {self._core.state}>"


class _Core:
    def __init__(self, kind, hc, token, fence, lease, on_lost, hold):
        self.client, self.name, self.token, self.fence = kind.client, kind.name, token, fence
        self.extend_every, self.auto = kind.extend_every, kind.auto_extend
        self.hc, self.lease = hc, lease
        self.durable, self.durable_ms = kind.durable, kind.durable_ms  # see _durable.py
        self.on_lost, self.hold_ref = on_lost, weakref.ref(hold)
        self.state = HELD
        self.lost = asyncio.Event()
        self.lost_reason = self.lost_at = None
        self.wake = asyncio.Event()  # the keep-alive recomputes its next step when set
        self.io = asyncio.Lock()  # one command at a time on the hold's connection
        self.loop = asyncio.get_running_loop()
        self.route = {}
        if isinstance(self.client, RedisCluster):
            self.route = {"target_nodes": self.client.get_node_from_key(self.name)}
        self.task = None

    def start(self):
        self.task = self.loop.create_task(self.run(), name=f"redis-lock keep-alive {self.name!r}")

    def lose(self, reason, from_states=(HELD,)):
        if self.state not in from_states or self.lost.is_set():
            return
        if self.state == HELD:
            self.state = LOST
        self.lost_at = c.monotonic()
        self.lost_reason = reason
        self.lost.set()
        self.wake.set()
        log.info("lost %r: %r", self.name, reason)
        hold = self.hold_ref()
        if self.on_lost is None or hold is None:
            return
        try:
            result = self.on_lost(hold)
            if inspect.isawaitable(result):
                _spawn(result).add_done_callback(_log_failure)
        except Exception:
            log.exception("on_lost callback of %r raised", self.name)

    def check(self):
        if self.lost.is_set():
            raise c.LockLost(f"{self.name!r} was lost: {self.lost_reason}") from self.lost_reason
        if self.state != HELD:
            raise c.LockError(f"{self.name!r} was released")

    async def run(self):
        try:
            while await self.sleep_until_due():
                await self.extend_once(None)
        except asyncio.CancelledError:
            pass  # the loop is shutting down; the lease ends on the server by itself
        except BaseException as e:  # the keep-alive must never die silently
            self.lose(e)
        finally:
            try:
                async with self.io:  # a release() may be using the connection
                    if self.state == ABANDONED:
                        warnings.warn(
                            f"a Hold of {self.name!r} was dropped unreleased",
                            ResourceWarning,
                            stacklevel=1,
                        )
                        await self.hc.close()
                        await self.hc.release_quietly(self.name, self.token)
                    await self.hc.close()
            except BaseException:
                log.exception("keep-alive of %r could not clean up", self.name)

    async def sleep_until_due(self) -> bool:
        while self.state == HELD:
            now = c.monotonic()
            if now >= self.lease.report_by:
                self.lose(c.LockLost("the lease ended before an extend succeeded"))
                return False
            due = self.lease.next_extend if self.auto else float("inf")
            if now >= due:
                return True
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), min(due, self.lease.report_by) - now)
            except asyncio.TimeoutError:
                pass
        return False

    async def extend_once(self, ttl) -> bool:
        lease = self.lease if ttl is None else c.Lease(ttl, self.extend_every, self.lease.sent)
        async with self.io:
            if self.state != HELD:
                return False
            reason = await self.extend_on_connection(lease)
        if reason is None:
            return True
        self.lose(reason)  # outside `io`: on_lost may start a release, which takes it
        if not isinstance(reason, Exception):
            raise reason  # the caller's extend() was cancelled: lost, and passed on
        return False

    async def extend_on_connection(self, lease):
        sent = c.monotonic()
        within = self.lease.report_by - sent
        if within <= 0:
            return c.LockLost("the lease ended before an extend succeeded")
        try:
            reply = await self.hc.call(
                "LOCK.EXTEND", self.name, self.token, lease.ttl_ms, within=within
            )
        except NoReply:
            return c.LockLost("no reply to LOCK.EXTEND before the lease's end")
        except BaseException as e:  # any error (or a cancellation): nothing vouches for it
            return e
        if reply != 1:
            return c.LockLost("LOCK.EXTEND answered 0: the hold is gone")
        if self.durable:  # unconfirmed by replicas: a failed extend (_durable.py)
            reason = await _durable.confirm_extend_async(self, self.lease.report_by)
            if reason is not None:
                return reason
        self.lease = lease
        lease.sent = sent
        self.wake.set()
        return None

    def abandon(self):
        def now():
            if self.state in (HELD, LOST):
                self.state = ABANDONED
                self.wake.set()

        try:
            self.loop.call_soon_threadsafe(now)
        except RuntimeError:  # the loop is closed: the lease ends on its own
            pass

    async def extend(self, ttl):
        self.check()
        if not await self.extend_once(ttl):
            self.check()

    async def new_fence(self):
        self.check()
        reply = await self.client.execute_command("LOCK.FENCE", self.name, self.token)
        if reply is None:
            self.lose(c.LockLost("LOCK.FENCE answered null: the hold is gone"))
            self.check()
        self.fence = int(reply)
        return self.fence

    async def guard(self, command, options):
        try:
            if self.durable:  # LOCK.GUARD and WAIT on one connection
                return await _durable.guard_async(self, command, options)
            return await self.client.execute_command(
                "LOCK.GUARD", self.name, self.fence, *command, **self.route, **options
            )
        except ResponseError as e:
            if not c.is_fenced(e):
                raise
            fenced = c.Fenced(str(e))
            if c.fenced_means_lost(e):
                self.lose(fenced)
            raise fenced from e

    async def release(self) -> bool:
        if self.state == RELEASED:
            return False
        before, self.state = self.state, RELEASED
        self.wake.set()  # the keep-alive ends
        # On the hold's own connection, after any extend in flight: it reaches the node that
        # granted the hold, whatever the client's slot map says.
        reply = None
        async with self.io:
            try:
                reply = await self.hc.call(
                    "LOCK.RELEASE", self.name, self.token, within=self.hc.user_timeout
                )
            except Exception:
                pass  # the connection is gone (which is how holds are lost): any will do
            if reply is None:
                await self.hc.close()
            else:
                await self.hc.give_back()  # answered: in step, fit for the next hold
        fallback = reply is None
        if fallback:
            reply = await self.client.execute_command("LOCK.RELEASE", self.name, self.token)
        released = reply == 1
        # After a failed first try, a 0 may only mean that the first try did release it.
        if not released and before == HELD and not fallback:
            self.lose(c.LockLost("LOCK.RELEASE answered 0: the hold was gone"), (RELEASED,))
        return released


def _log_failure(task):
    if not task.cancelled() and task.exception() is not None:
        log.error("on_lost callback raised", exc_info=task.exception())
