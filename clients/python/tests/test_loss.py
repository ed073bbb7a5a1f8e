"""Every way a hold is lost, and when the holder hears of it (sync). Each test notes the
cause's time, then checks the promises in helpers.assert_loss_timing: within one keep-alive
interval of the cause, and never after the lease's end by the client's clock."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from helpers import EVERY, SLACK, TTL, assert_loss_timing, hold_connection_ids, wait_for
from proxy import Proxy

from redis_lock_client import Fenced, Lock, LockLost


def _lost(hold, timeout=5.0):
    assert hold.lost.wait(timeout), "the loss was never reported"
    return time.monotonic()


def test_key_deleted(r, key):
    hold = Lock(r, key, ttl=TTL).acquire()
    time.sleep(EVERY / 2)
    cause = time.monotonic()
    r.delete(key)
    assert_loss_timing(hold, cause, _lost(hold))
    assert "answered 0" in str(hold.lost_reason)
    with pytest.raises(LockLost):
        hold.check()
    assert not hold.held
    hold.release()


def test_taken_by_another_token(r, key):
    lock = Lock(r, key, ttl=TTL)
    hold = lock.acquire()
    time.sleep(EVERY / 2)
    cause = time.monotonic()

    def cut_short_and_take():
        # Someone with the token cuts the lease short; once it ended, another takes the key.
        r.execute_command("LOCK.EXTEND", key, hold.token, 1)
        time.sleep(0.005)
        return r.execute_command("LOCK.ACQUIRE", key, "other", 30000)

    wait_for(cut_short_and_take, timeout=EVERY)
    assert_loss_timing(hold, cause, _lost(hold))
    with pytest.raises(Fenced, match="newer fence"):
        hold.guard("SET", key + ":data", "late")
    assert hold.release() is False  # never releases the new holder's hold
    assert lock.info().holder == "other"


def test_extend_refused_by_max_ttl(fresh_server, protocol, key):
    r = fresh_server.client(protocol=protocol)
    hold = Lock(r, key, ttl=TTL).acquire()
    time.sleep(EVERY / 2)
    cause = time.monotonic()
    r.config_set("lock.max-ttl", 100)
    assert_loss_timing(hold, cause, _lost(hold))
    assert isinstance(hold.lost_reason, redis.ResponseError)
    assert "lock.max-ttl" in str(hold.lost_reason)
    r.close()


def test_connection_killed(r, key):
    hold = Lock(r, key, ttl=TTL).acquire()
    [conn_id] = hold_connection_ids(r)
    time.sleep(EVERY / 2)
    cause = time.monotonic()
    r.client_kill_filter(_id=conn_id)
    assert_loss_timing(hold, cause, _lost(hold))
    assert isinstance(hold.lost_reason, redis.ConnectionError)
    hold.release()


def test_server_paused_past_the_lease(fresh_server, protocol, key):
    """SIGSTOP: the extend in flight gets no reply. The loss is reported by the lease's end
    all the same, though the keep-alive is blocked waiting for that reply."""
    r = fresh_server.client(protocol=protocol)
    hold = Lock(r, key, ttl=TTL).acquire()
    time.sleep(EVERY / 2)
    cause = time.monotonic()
    fresh_server.pause()
    try:
        seen = _lost(hold, 3 * TTL)
    finally:
        fresh_server.resume()
    # The lease may have lasted until `expires_at`: silence is reported there, not sooner.
    assert_loss_timing(hold, cause, seen, bounded_by_interval=False)
    assert hold.expires_at <= cause + TTL
    assert hold.lost_at >= hold.expires_at - 0.05
    assert "no reply" in str(hold.lost_reason) or "lease ended" in str(hold.lost_reason)
    r.close()


def test_server_restarted(fresh_server, protocol, key):
    r = fresh_server.client(protocol=protocol)
    hold = Lock(r, key, ttl=TTL).acquire()
    time.sleep(EVERY / 2)
    cause = time.monotonic()
    fresh_server.restart()
    assert_loss_timing(hold, cause, _lost(hold))
    assert Lock(r, key).info() is None  # the new server holds nothing
    r.close()


def test_lease_runs_out_without_keep_alive(r, key):
    hold = Lock(r, key, ttl=TTL, auto_extend=False).acquire()
    seen = _lost(hold, 2 * TTL)
    assert_loss_timing(hold, hold.expires_at - TTL, seen, bounded_by_interval=False)
    assert hold.lost_at >= hold.expires_at - 0.05
    hold.release()


def test_deadline_counts_from_the_send_not_the_reply(fresh_server, protocol, key):
    """Replies come 0.3 s late; then nothing the client sends reaches the server. The last
    extend the server ran arrived at `dropped_after_at`, so the lease ends TTL after that at
    the latest: a deadline counted from the (late) reply would come 0.3 s too late. Another
    client, waiting all along, is granted the key when the server's lease ends: after the
    holder heard it was lost."""
    proxy = Proxy(fresh_server.port)
    r = redis.Redis(port=proxy.port, protocol=protocol, socket_timeout=5)
    direct = fresh_server.client(protocol=protocol)
    hold = Lock(r, key, ttl=TTL).acquire()
    proxy.reply_delay = 0.3
    proxy.drop_after(b"LOCK.EXTEND")
    granted = {}
    waiter = threading.Thread(
        target=lambda: granted.update(hold=Lock(direct, key, ttl=30).acquire(timeout=3 * TTL),
                                      at=time.monotonic()))
    waiter.start()
    seen = _lost(hold, 3 * TTL)
    assert proxy.dropped_after_at is not None
    assert hold.lost_at <= proxy.dropped_after_at + TTL, hold.lost_at - proxy.dropped_after_at
    assert_loss_timing(hold, proxy.dropped_after_at, seen, bounded_by_interval=False)
    waiter.join(3 * TTL)
    assert hold.lost_at < granted["at"], granted["at"] - hold.lost_at
    granted["hold"].release()
    proxy.close()
    r.close()
    direct.close()


def test_guarded_job_stops_on_loss_and_late_write_is_fenced(fresh_server, protocol, key):
    """A job appends through LOCK.GUARD until the hold is lost. The extends start failing
    (lock.max-ttl lowered) while the server still has the lease: the job stops before the
    lease ends. Once another client has the lock, a late write is refused."""
    r = fresh_server.client(protocol=protocol)
    lock_key, data = "{%s}:lock" % key, "{%s}:data" % key
    hold = Lock(r, lock_key, ttl=TTL).acquire()
    stopped = {}

    def job():
        i = 0
        while not hold.lost.is_set():
            hold.guard("RPUSH", data, i)
            i += 1
            time.sleep(0.01)
        stopped.update(at=time.monotonic(), writes=i)

    t = threading.Thread(target=job)
    t.start()
    time.sleep(EVERY)
    r.config_set("lock.max-ttl", 100)
    t.join(3 * TTL)
    assert stopped["at"] < hold.expires_at  # stopped while the lease still ran
    assert r.llen(data) == stopped["writes"]
    r.config_set("lock.max-ttl", 86400000)
    other = Lock(r, lock_key, ttl=30).acquire(timeout=2 * TTL)  # after the lease ended
    with pytest.raises(Fenced, match="newer fence"):
        hold.guard("RPUSH", data, "late")
    assert r.llen(data) == stopped["writes"]
    other.release()
    r.close()


def test_explicit_extend_reports_loss(r, key):
    hold = Lock(r, key, ttl=30).acquire()
    r.delete(key)
    with pytest.raises(LockLost):
        hold.extend()
    assert hold.lost.is_set()
    assert hold.lost_at <= hold.expires_at
    hold.release()


def test_no_loss_reported_after_release(r, key):
    calls = []
    hold = Lock(r, key, ttl=TTL, on_lost=calls.append).acquire()
    hold.release()
    time.sleep(TTL + SLACK)
    assert not hold.lost.is_set() and calls == []
    wait_for(lambda: not hold._core.thread.is_alive(), 1)
