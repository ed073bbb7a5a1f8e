"""Leader election (sync) on one lock key: candidates campaign with ``LOCK.ACQUIRE … WAIT``
under their identity as the token, the leader holds an ordinary ``Hold`` (keep-alive, loss
signal, fence, guarded writes), and anyone follows the leader with ``LOCK.OBSERVE``."""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterator, Optional

from redis.cluster import RedisCluster

from . import _common as c
from ._sync import RELEASED, Hold, Lock
from ._sync_conn import HoldConnection

log = logging.getLogger("redis_lock_client")

#: The longest one ``LOCK.OBSERVE`` blocks, in seconds: how long a connection that died
#: without a word (a half-open TCP connection) can go unnoticed, beyond the reply margin.
BLOCK = 10.0


class Election:
    """An election on the lock key ``name``, as seen by one candidate, ``identity``.

    ``identity`` is the token of the leader's hold: what ``leader()`` and ``observe()``
    report, and what the server tells candidates apart by. It must be unique per candidate:
    two candidates with one identity would be a single holder to the server. The default is
    ``host:pid:uuid4``, new for each ``Election`` object. ``ttl`` and ``options`` are
    ``Lock``'s: the leadership is a hold of a ``Lock`` on ``name``.
    """

    _lock_class = Lock

    def __init__(self, client, name, ttl: float = 30.0, *, identity: Optional[str] = None,
                 **options):
        self.client, self.name = client, name
        self.identity = c.checked_identity(c.default_identity() if identity is None else identity)
        self._lock = self._lock_class(client, name, ttl, **options)
        self._mutex = threading.Lock()  # guards the two below
        self._hold: Optional[Hold] = None
        self._campaigning = False

    @property
    def leadership(self):
        """The ``Hold`` this candidate's last campaign won, until it is released (lost or
        not); else None."""
        hold = self._hold
        return hold if hold is not None and hold._core.state != RELEASED else None

    def _start_campaign(self):
        with self._mutex:
            if self._campaigning:
                raise c.LockError(f"{self.identity!r} is already campaigning for {self.name!r}")
            if self._hold is not None and self._hold.held:
                raise c.LockError(f"{self.identity!r} already leads {self.name!r}: resign first")
            self._campaigning = True
            # A leadership that was lost but never released: it is released before this
            # identity asks again, so that its hold, should the server still have it, cannot
            # pass for the new one, and a late release() of it cannot end the new one.
            previous, self._hold = self._hold, None
        return previous

    def campaign(self, timeout: Optional[float] = None, *, on_lost=None) -> Hold:
        """Waits up to ``timeout`` s (None: without limit; 0: tries once) in the key's queue to
        lead, and returns the leadership, a ``Hold`` whose token is ``identity``; raises
        ``NotAcquired`` if not elected in time. ``with election.campaign() as leadership:``
        resigns when the block ends. Raises ``LockError`` while this candidate leads."""
        previous = self._start_campaign()
        try:
            if previous is not None:
                try:
                    previous.release()
                except Exception as e:  # its lease ends on its own
                    log.warning("releasing the lost leadership of %r failed: %r", self.name, e)
            hold = self._lock._acquire(timeout, True, on_lost, self.identity)
            self._hold = hold
            return hold
        finally:
            self._campaigning = False

    def resign(self) -> bool:
        """Releases the leadership (``LOCK.RELEASE``): the first candidate in the queue leads at
        that instant. True if the server still had it; False if there was none."""
        with self._mutex:
            hold, self._hold = self._hold, None
        return False if hold is None else hold.release()

    def leader(self) -> Optional[c.Leader]:
        """The current leader, ``Leader(identity, fence)``, from ``LOCK.INFO``; None if none."""
        return c.leader_of(self._lock.info())

    def info(self) -> Optional[c.LockInfo]:
        """The key's ``LOCK.INFO``: ``waiters`` is the number of candidates in the queue."""
        return self._lock.info()

    def observe(self, timeout: Optional[float] = None, *, block: float = BLOCK
                ) -> Iterator[Optional[c.Leader]]:
        """A generator of the election's leaders: first the current one (or None), then each
        change, as a ``Leader`` or None (nobody leads). Leaders come in strictly increasing
        fence order; a leader that takes a new fence is yielded again with it. It follows the
        key with ``LOCK.OBSERVE`` on a connection of its own, blocking at most ``block`` s per
        call; connection errors, a server restart or failover and cluster redirects are
        outlived (reconnects with backoff, resuming from the last state seen), other errors
        raised. Ends after ``timeout`` s (None: never)."""
        block_ms = c.seconds_to_ms(block, "block")
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must not be negative")
        deadline = None if timeout is None else c.monotonic() + timeout
        return self._observe(block_ms, deadline)

    def _observe(self, block_ms, deadline):
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
                        hc = self._connect(reconnecting, c.wait_socket_timeout(block_ms, None))
                    if follow.last is c.Follow._NOTHING:
                        # The first reply is the state as it is, whether held or not.
                        reply = hc.call_routed("LOCK.INFO", self.name, within=within)
                    elif follow.shared:  # not an election's state, but not to spin on
                        follow.see_holders(hc.call_routed("LOCK.HOLDERS", self.name, within=within))
                        follow.shared = False
                        continue
                    else:
                        reply = hc.call_routed(
                            "LOCK.OBSERVE", self.name, follow.seen, wait_ms, within=within
                        )
                except Exception as e:
                    if not c.is_transient(e):
                        raise
                    if hc is not None:
                        hc.close()
                    hc, reconnecting = None, True
                    delay = backoff.next()
                    log.warning("observing %r: %r; reconnecting in %.2f s", self.name, e, delay)
                    if deadline is not None:
                        delay = min(delay, max(0.0, deadline - c.monotonic()))
                    time.sleep(delay)
                    continue
                backoff.reset()
                changed, leader = follow.see(reply)
                if changed:
                    yield leader
        finally:
            if hc is not None:
                hc.close()

    def _connect(self, reconnecting, socket_timeout):
        if reconnecting and isinstance(self.client, RedisCluster):
            # The slot may have a new master (a failover): a command through the cluster
            # client refreshes its slot map, which the new connection is routed by.
            self.client.execute_command("LOCK.INFO", self.name)
        hc = HoldConnection(self.client, self.name, None, socket_timeout=socket_timeout)
        hc.connect()
        return hc

    def __repr__(self):
        return f"<Election {self.name!r} as {self.identity!r}>"
