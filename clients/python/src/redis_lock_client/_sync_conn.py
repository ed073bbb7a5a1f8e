"""The one connection a hold lives on (sync).

Hold connections are reused: a hold's connection goes back to an idle list of its pool's
(at most ``MAX_IDLE``) when the hold is released with the connection in step, and the next
acquire takes it instead of connecting. A connection closed for any reason (an error, a
timeout, an interrupted wait) is never reused.

A ``LOCK.ACQUIRE … WAIT`` blocks its connection like ``BLPOP`` (docs/commands.md,
"LOCK.ACQUIRE"), so it gets a connection of its own, outside the client's pool, with a read
timeout above the wait. After the grant the same connection carries the durable ``WAIT``
(which must follow the grant on the connection that was told of it: docs/CLIENTS.md, "The
recommended pattern", step 3) and the keep-alive extends. It is never reconnected behind the
hold's back: once it breaks, the hold is lost.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError, ResponseError

from ._common import is_tryagain, redirect_of, wait_socket_timeout

log = logging.getLogger("redis_lock_client")

#: How long an abandoned hold's best-effort release may take (KeyboardInterrupt, GC).
ABANDON_TIMEOUT = 2.0
_MAX_REDIRECTS = 5
#: Idle hold connections kept per connection pool.
MAX_IDLE = 16
_idle: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # pool -> (pid, [conn])
_idle_lock = threading.Lock()


def _take_idle(pool):
    """An idle hold connection of ``pool`` that is still in step, or None."""
    with _idle_lock:
        entry = _idle.get(pool)
        if entry is None or entry[0] != os.getpid():
            return None
        conns = entry[1]
    while True:
        try:
            conn = conns.pop()
        except IndexError:
            return None
        try:
            # Readable while idle: closed by the server (EOF), or out of step.
            if not conn.can_read(timeout=0):
                return conn
        except Exception:
            pass
        try:
            conn.disconnect()
        except Exception:
            pass


def _give_idle(pool, conn):
    with _idle_lock:
        entry = _idle.get(pool)
        if entry is None or entry[0] != os.getpid():
            entry = _idle[pool] = (os.getpid(), [])
        if len(entry[1]) < MAX_IDLE:
            entry[1].append(conn)
            return
    conn.disconnect()
_MAX_TRYAGAIN = 50


class NoReply(ConnectionError):
    """No reply within the time the lease allowed; the connection is closed."""


def _pool_for(client, key):
    if isinstance(client, RedisCluster):
        return client.get_node_from_key(key).redis_connection.connection_pool
    return client.connection_pool


def _make(pool, socket_timeout, address=None, **extra):
    kwargs = dict(pool.connection_kwargs)
    # A health-check PING before a command would be one more unbounded round trip.
    kwargs.update(socket_timeout=socket_timeout, health_check_interval=0, **extra)
    if address is not None:
        kwargs["host"], kwargs["port"] = address
    if pool.connection_class.__name__ == "SentinelManagedConnection":
        kwargs["connection_pool"] = pool  # it asks its pool where the master is
    return pool.connection_class(**kwargs)


class HoldConnection:
    def __init__(self, client, key, wait_ms, socket_timeout=None):
        self._pool = _pool_for(client, key)
        # The client's own read timeout bounds the release, as it would on the client.
        self.user_timeout = self._pool.connection_kwargs.get("socket_timeout")
        # The acquire's reply is awaited this long (`within`), above the wait; the socket's
        # own timeout is the client's, which bounds the rest of a reply.
        self.wait_timeout = wait_socket_timeout(wait_ms, self.user_timeout)
        self._timeout = self.user_timeout
        self._conn = None
        extra = {}
        if socket_timeout is not None:
            # An observer's (_election.py): every read bounded, the client's setting aside, and
            # the connect too unless the client bounds it.
            self._timeout = socket_timeout
            if self._pool.connection_kwargs.get("socket_connect_timeout") is None:
                extra["socket_connect_timeout"] = socket_timeout
        else:
            self._conn = _take_idle(self._pool)
        if self._conn is None:
            self._conn = _make(self._pool, self._timeout, **extra)
        self._address = None

    def connect(self):
        try:
            self._conn.connect()  # a no-op on a reused connection
        except BaseException:
            self.close()
            raise

    def give_back(self):
        """The hold is over and the connection in step: keep it for the next acquire (not one
        redirected to another node)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._address is not None:
            conn.disconnect()
        else:
            _give_idle(self._pool, conn)

    def call(self, *args, within=None, forever=False):
        """Sends one command and reads its reply; with ``within``, gives up (closing the
        connection, raising NoReply) if no reply has started to arrive in that many s; with
        ``forever``, waits for the reply without limit."""
        if self._conn is None:
            raise ConnectionError("the hold's connection is closed")
        try:
            self._conn.send_command(*args, check_health=False)
            if forever:
                self._conn.can_read(timeout=None)
            elif within is not None and not self._conn.can_read(timeout=max(within, 0.0)):
                raise NoReply(f"no reply to {args[0]} within {within:.3f} s")
            return self._conn.read_response()
        except ResponseError:
            raise  # an error reply: the connection is still in step
        except BaseException:
            # Anything else (a timeout, a KeyboardInterrupt) may leave a reply unread that
            # the next call would take for its own; and redis-py would silently reconnect a
            # connection it dropped. Neither may happen to a hold: close for good.
            self.close()
            raise

    def call_routed(self, *args, within=None, forever=False):
        """``call`` for a command that a cluster may redirect (MOVED/ASK) or a busy fence
        counter may refuse for a millisecond (TRYAGAIN: docs/CLIENTS.md, "The recommended
        pattern", step 8)."""
        redirects = tryagain = 0
        while True:
            try:
                return self.call(*args, within=within, forever=forever)
            except ResponseError as e:
                redirect = redirect_of(e)
                if redirect is not None and redirects < _MAX_REDIRECTS:
                    redirects += 1
                    kind, host, port = redirect
                    self._reopen((host, port))
                    if kind == "ASK":
                        self.call("ASKING")
                elif is_tryagain(e) and tryagain < _MAX_TRYAGAIN:
                    tryagain += 1
                    time.sleep(0.001)
                else:
                    raise

    def _reopen(self, address):
        self.close()
        self._address = address
        self._conn = _make(self._pool, self._timeout, address)

    def close(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.disconnect()
            except Exception:  # closing is best-effort by nature
                pass

    def release_quietly(self, key, token):
        """LOCK.RELEASE on a fresh connection to the same node, bounded in time; for a hold
        abandoned mid-way (the hold's own connection may be closed or mid-reply)."""
        conn = _make(
            self._pool, ABANDON_TIMEOUT, self._address, socket_connect_timeout=ABANDON_TIMEOUT
        )
        try:
            conn.send_command("LOCK.RELEASE", key, token)
            return conn.read_response()
        except Exception as e:
            log.warning("could not release abandoned hold of %r: %r", key, e)
        finally:
            conn.disconnect()
