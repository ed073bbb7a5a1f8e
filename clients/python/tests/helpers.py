"""Constants and checks shared by the test modules."""

from __future__ import annotations

import asyncio
import time

from servers import wait_for  # noqa: F401  (re-exported for the tests)

# Loss tests use a short lease so that each one takes about a second. The keep-alive extends
# every third of it; SLACK is what the tests allow for a busy 2-core machine beyond that.
TTL = 0.6
EVERY = TTL / 3
SLACK = 0.15


def run(coro):
    """Runs an async test body on a fresh event loop (no pytest-asyncio needed)."""
    return asyncio.run(coro)


def hold_connection_ids(r) -> list:
    """CLIENT LIST ids of connections whose last command was a hold's: a hold's own
    connection carries only LOCK.ACQUIRE, WAIT and LOCK.EXTEND."""
    return [
        c["id"]
        for c in r.client_list()
        if c["cmd"] in ("lock.acquire", "lock.extend", "wait")
    ]


def assert_loss_timing(hold, cause_at, lost_seen_at, bounded_by_interval=True):
    """The promises on every loss path, by the client's monotonic clock:
    - never after the lease's end (send time of the last successful extend + ttl): tight;
    - within one keep-alive interval of the cause, with SLACK for scheduling."""
    assert hold.lost.is_set()
    assert hold.lost_at is not None
    assert hold.lost_at <= hold.expires_at, (hold.lost_at, hold.expires_at)
    assert lost_seen_at - hold.lost_at < SLACK  # the event woke the waiter promptly
    if bounded_by_interval:
        assert hold.lost_at - cause_at <= EVERY + SLACK, hold.lost_at - cause_at
    assert hold.lost_at >= cause_at - 0.001, "reported lost before the cause"


def now():
    return time.monotonic()
