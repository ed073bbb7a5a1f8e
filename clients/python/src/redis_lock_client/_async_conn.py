"""The one connection a hold lives on (asyncio); see ``_sync_conn`` for why it is its own.

Reads that the lease bounds run under ``asyncio.wait_for``: a cancelled read leaves the
connection closed (redis-py closes it on any interruption), never half-read."""

from __future__ import annotations

import asyncio
import logging
import weakref

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError, ResponseError

from ._common import is_tryagain, redirect_of, wait_socket_timeout

from ._sync_conn import _MAX_REDIRECTS, _MAX_TRYAGAIN, ABANDON_TIMEOUT, NoReply

log = logging.getLogger("redis_lock_client")


#: Idle hold connections kept per pool (or cluster node), per event loop.
MAX_IDLE = 16
_idle: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # loop -> {owner: [conn]}


async def _factory(client, key):
    """The class and arguments of a connection to the node of ``key``, and what its idle
    connections are kept under."""
    if isinstance(client, RedisCluster):
        await client.initialize()  # a no-op once the slots are known
        node = client.get_node_from_key(key)
        return node.connection_class, dict(node.connection_kwargs), node
    pool = client.connection_pool
    return pool.connection_class, dict(pool.connection_kwargs), pool


def _idle_list(owner):
    """The idle connections of ``owner`` (a pool, a cluster node) on the running loop. Those
    left when a loop closes are closed by the garbage collector (a ResourceWarning)."""
    try:
        per_loop = _idle.setdefault(asyncio.get_running_loop(), weakref.WeakKeyDictionary())
        return per_loop.setdefault(owner, [])
    except TypeError:  # not weakly referenceable: no reuse
        return None


class AsyncHoldConnection:
    """A hold's connection. Reused (see ``_sync_conn``): released holds give an answered
    connection back to an idle list of the event loop's, which the next acquire takes after
    checking that nothing is waiting to be read on it. A wait without limit gets a fresh
    connection without a read timeout, never reused."""

    def __init__(self, cls, kwargs, wait_ms, owner=None, socket_timeout=None):
        self._cls, self._kwargs = cls, kwargs
        self.user_timeout = kwargs.get("socket_timeout")  # bounds the release
        # The acquire's reply is awaited this long, above the wait.
        self.wait_timeout = wait_socket_timeout(wait_ms, self.user_timeout)
        # An observer (_async_election.py) brings its own socket timeout and is never reused.
        reused = wait_ms != 0 and socket_timeout is None
        self._idle = _idle_list(owner) if reused else None
        if socket_timeout is None:
            socket_timeout = self.user_timeout if self._idle is not None else self.wait_timeout
        elif kwargs.get("socket_connect_timeout") is None:
            self._kwargs["socket_connect_timeout"] = socket_timeout
        self._kwargs.update(socket_timeout=socket_timeout, health_check_interval=0)
        self._conn = None
        self._redirected = False

    @classmethod
    async def open(cls, client, key, wait_ms, socket_timeout=None):
        conn_cls, kwargs, owner = await _factory(client, key)
        hc = cls(conn_cls, kwargs, wait_ms, owner, socket_timeout)
        idle = hc._idle
        while idle:
            conn = idle.pop()
            try:
                # Readable while idle: closed by the server (EOF), or out of step.
                # can_read() in redis-py 8 (can_read_destructive is deprecated), not in 5.
                can_read = getattr(conn, "can_read", None) or conn.can_read_destructive
                if not await can_read():
                    hc._conn = conn
                    return hc
            except Exception:
                pass
            try:
                await conn.disconnect(nowait=True)
            except BaseException:
                pass
        hc._conn = conn_cls(**hc._kwargs)
        try:
            await hc._conn.connect()
        except BaseException:
            await hc.close()
            raise
        return hc

    async def give_back(self):
        """The hold is over and the connection in step: keep it for the next acquire."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._idle is not None and not self._redirected and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            try:
                await conn.disconnect(nowait=True)
            except BaseException:
                pass

    async def call(self, *args, within=None, read_timeout=None):
        """``read_timeout``: the socket's for this reply (an acquire's wait), not the
        connection's."""
        if self._conn is None:
            raise ConnectionError("the hold's connection is closed")
        try:
            await self._conn.send_command(*args, check_health=False)
            if within is None:
                return await self._conn.read_response(timeout=read_timeout)
            try:
                read = self._conn.read_response(timeout=read_timeout)
                return await asyncio.wait_for(read, max(within, 0.0))
            except asyncio.TimeoutError:
                raise NoReply(f"no reply to {args[0]} within {within:.3f} s") from None
        except ResponseError:
            raise  # an error reply: the connection is still in step
        except BaseException:
            # Timeout, cancellation, broken socket: a reply may be left unread, and redis-py
            # would reconnect behind the hold's back. Close for good.
            await self.close()
            raise

    async def call_routed(self, *args, read_timeout=None):
        redirects = tryagain = 0
        while True:
            try:
                return await self.call(*args, read_timeout=read_timeout)
            except ResponseError as e:
                redirect = redirect_of(e)
                if redirect is not None and redirects < _MAX_REDIRECTS:
                    redirects += 1
                    kind, host, port = redirect
                    await self.close()
                    self._redirected = True
                    self._kwargs.update(host=host, port=port)
                    self._conn = self._cls(**self._kwargs)
                    if kind == "ASK":
                        await self.call("ASKING")
                elif is_tryagain(e) and tryagain < _MAX_TRYAGAIN:
                    tryagain += 1
                    await asyncio.sleep(0.001)
                else:
                    raise

    async def close(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.disconnect(nowait=True)
            except BaseException:  # closing is best-effort by nature
                pass

    async def release_quietly(self, key, token):
        """LOCK.RELEASE on a fresh connection to the same node, bounded in time."""
        kwargs = dict(self._kwargs, socket_timeout=ABANDON_TIMEOUT)
        kwargs["socket_connect_timeout"] = ABANDON_TIMEOUT
        conn = self._cls(**kwargs)
        try:
            await asyncio.wait_for(self._release(conn, key, token), ABANDON_TIMEOUT)
        except Exception as e:
            log.warning("could not release abandoned hold of %r: %r", key, e)
        finally:
            try:
                await conn.disconnect(nowait=True)
            except BaseException:
                pass

    @staticmethod
    async def _release(conn, key, token):
        await conn.send_command("LOCK.RELEASE", key, token)
        return await conn.read_response()
