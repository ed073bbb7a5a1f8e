"""The one connection a hold lives on (asyncio); see ``_sync_conn`` for why it is its own.

Reads that the lease bounds run under ``asyncio.wait_for``: a cancelled read leaves the
connection closed (redis-py closes it on any interruption), never half-read."""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError, ResponseError

from ._common import is_tryagain, redirect_of, wait_socket_timeout

from ._sync_conn import _MAX_REDIRECTS, _MAX_TRYAGAIN, ABANDON_TIMEOUT, NoReply

log = logging.getLogger("redis_lock_client")


async def _factory(client, key):
    if isinstance(client, RedisCluster):
        await client.initialize()  # a no-op once the slots are known
        node = client.get_node_from_key(key)
        return node.connection_class, dict(node.connection_kwargs)
    pool = client.connection_pool
    return pool.connection_class, dict(pool.connection_kwargs)


class AsyncHoldConnection:
    def __init__(self, cls, kwargs, wait_ms):
        self._cls, self._kwargs = cls, kwargs
        self.user_timeout = kwargs.get("socket_timeout")  # bounds the release
        socket_timeout = wait_socket_timeout(wait_ms, self.user_timeout)
        self._kwargs.update(socket_timeout=socket_timeout, health_check_interval=0)
        self._conn = cls(**self._kwargs)

    @classmethod
    async def open(cls, client, key, wait_ms):
        hc = cls(*(await _factory(client, key)), wait_ms)
        try:
            await hc._conn.connect()
        except BaseException:
            await hc.close()
            raise
        return hc

    async def call(self, *args, within=None):
        if self._conn is None:
            raise ConnectionError("the hold's connection is closed")
        try:
            await self._conn.send_command(*args)
            if within is None:
                return await self._conn.read_response()
            try:
                return await asyncio.wait_for(self._conn.read_response(), max(within, 0.0))
            except asyncio.TimeoutError:
                raise NoReply(f"no reply to {args[0]} within {within:.3f} s") from None
        except ResponseError:
            raise  # an error reply: the connection is still in step
        except BaseException:
            # Timeout, cancellation, broken socket: a reply may be left unread, and redis-py
            # would reconnect behind the hold's back. Close for good.
            await self.close()
            raise

    async def call_routed(self, *args):
        redirects = tryagain = 0
        while True:
            try:
                return await self.call(*args)
            except ResponseError as e:
                redirect = redirect_of(e)
                if redirect is not None and redirects < _MAX_REDIRECTS:
                    redirects += 1
                    kind, host, port = redirect
                    await self.close()
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
