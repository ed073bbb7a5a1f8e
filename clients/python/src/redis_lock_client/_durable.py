"""Durable mode (``durable=n``) past the grant: guarded writes and extends, sync and asyncio.

``WAIT n timeout`` counts the replicas that reached the offset of the last write of the
connection it is sent on; so it must follow the write on that same connection, never one that
a pool or a reconnect put in between (a connection that wrote nothing gets every replica's
acknowledgement at once). Hence:

- a durable guarded write runs on a hold connection taken for it (``_sync_conn``,
  ``_async_conn``: to the master of the lock key's node, following ``MOVED``/``ASK``, never
  reconnected behind the caller's back): ``LOCK.GUARD`` there, then ``WAIT`` there, then the
  connection goes back to the idle list. A refused (``FENCED``) or failed command is not
  followed by ``WAIT``: nothing was written. Too few acknowledgements raise
  ``GuardNotDurable``: the write ran on the master and may not survive a failover.
- an extend is followed by ``WAIT`` on the hold's own connection, which sent it. Too few
  acknowledgements are a failed extend: the hold is reported lost. A replica promoted after an
  unconfirmed extend has the earlier lease, so there the hold may end sooner than its holder
  believes; the ``WAIT`` is therefore bounded by the lease confirmed before, not the new one.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from . import _common as c
from ._sync_conn import HoldConnection, NoReply


def _no_options(options):
    if options:
        raise TypeError(f"guard() takes no options in durable mode, got {sorted(options)}")


def _guard_args(core, command):
    return ("LOCK.GUARD", core.name, core.fence, *command)


def _not_durable(core, reply, acked):
    message = c.unconfirmed(
        "guarded write ran on the master, outcome unknown", core.name, acked, core.durable,
        core.durable_ms,
    )
    return c.GuardNotDurable(message, acked, core.durable, reply)


def guard(core, command, options):
    """``LOCK.GUARD`` then ``WAIT`` on one connection; the guarded command's reply, or
    ``GuardNotDurable``. A ``ResponseError`` (``FENCED`` included) is raised as it came."""
    _no_options(options)
    hc = HoldConnection(core.client, core.name, None)
    try:
        hc.connect()
        try:
            reply = hc.call_routed(*_guard_args(core, command))
        except ResponseError:
            hc.give_back()  # an error reply: in step, and nothing was written
            raise
        try:
            acked = hc.call(
                "WAIT", core.durable, core.durable_ms, within=c.durable_within(core.durable_ms)
            )
        except Exception as e:  # NoReply, a dropped connection: closed by call()
            raise _not_durable(core, reply, None) from e
        hc.give_back()
        if acked < core.durable:
            raise _not_durable(core, reply, acked)
        return reply
    finally:
        hc.close()  # a no-op once given back


async def guard_async(core, command, options):
    """``guard`` on ``redis.asyncio``."""
    from ._async_conn import AsyncHoldConnection  # not imported by the sync API

    _no_options(options)
    hc = await AsyncHoldConnection.open(core.client, core.name, None)
    try:
        try:
            reply = await hc.call_routed(*_guard_args(core, command))
        except ResponseError:
            await hc.give_back()
            raise
        try:
            acked = await hc.call(
                "WAIT", core.durable, core.durable_ms, within=c.durable_within(core.durable_ms)
            )
        except Exception as e:
            raise _not_durable(core, reply, None) from e
        await hc.give_back()
        if acked < core.durable:
            raise _not_durable(core, reply, acked)
        return reply
    finally:
        await hc.close()


def _extend_within(core, report_by):
    return min(c.durable_within(core.durable_ms), report_by - c.monotonic())


def _extend_verdict(core, acked):
    if acked >= core.durable:
        return None
    what = "LOCK.EXTEND not confirmed, the hold may end sooner on a promoted replica"
    return c.LockLost(c.unconfirmed(what, core.name, acked, core.durable, core.durable_ms))


_LATE = "no acknowledgement of LOCK.EXTEND by replicas before the lease's end"


def confirm_extend(core, report_by):
    """``WAIT`` after a successful ``LOCK.EXTEND`` on the hold's connection (under its
    ``io`` lock), awaited no later than ``report_by``, the end of the lease confirmed before.
    None if enough replicas acknowledged; else why the hold must be taken as lost, as for any
    failed extend."""
    within = _extend_within(core, report_by)
    if within <= 0:
        return c.LockLost(_LATE)
    try:
        acked = core.hc.call("WAIT", core.durable, core.durable_ms, within=within)
    except NoReply:
        return c.LockLost(_LATE)
    except BaseException as e:  # as for the extend itself: nothing vouches for the lease
        return e
    return _extend_verdict(core, acked)


async def confirm_extend_async(core, report_by):
    """``confirm_extend`` on ``redis.asyncio``."""
    within = _extend_within(core, report_by)
    if within <= 0:
        return c.LockLost(_LATE)
    try:
        acked = await core.hc.call("WAIT", core.durable, core.durable_ms, within=within)
    except NoReply:
        return c.LockLost(_LATE)
    except BaseException as e:
        return e
    return _extend_verdict(core, acked)
