"""Waiting: timeouts, first-come-first-served hand-off, shared waiters, and waits cut short
by the caller (sync; KeyboardInterrupt delivered as a real SIGINT to the main thread)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from helpers import EVERY, TTL, wait_for

from redis_lock_client import Lock, NotAcquired, NotDurable, ReadWriteLock, Semaphore


def _waiters(lock):
    info = lock.info()
    return 0 if info is None else info.waiters


def _in_thread(fn):
    """Runs fn in a thread; returns (thread, box) where box gets its result or error."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e
        box["at"] = time.monotonic()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def test_wait_times_out(r, key):
    lock = Lock(r, key, ttl=30)
    with lock.acquire():
        start = time.monotonic()
        with pytest.raises(NotAcquired):
            lock.acquire(timeout=0.3)
        elapsed = time.monotonic() - start
        assert 0.29 <= elapsed < 0.3 + 0.25
        assert _waiters(lock) == 0


def test_wait_is_granted_on_release(r, key):
    lock = Lock(r, key, ttl=30)
    holder = lock.acquire()
    t, box = _in_thread(lambda: lock.acquire(timeout=5))
    wait_for(lambda: _waiters(lock) == 1)
    released_at = time.monotonic()
    holder.release()
    t.join(5)
    hold = box["value"]
    assert box["at"] - released_at < 0.2  # handed over at once, not polled for
    assert hold.fence > holder.fence and lock.info().holder == hold.token
    hold.release()


def test_grant_after_a_long_wait_gets_a_lease_counted_from_a_known_send(r, key):
    """Waited longer than the whole lease: counted from the acquire's send, the lease would
    be over at once. The grant is confirmed by an extend before acquire returns."""
    lock = Lock(r, key, ttl=TTL)
    holder = lock.acquire()
    threading.Timer(TTL * 1.5, holder.release).start()
    hold = lock.acquire(timeout=5)
    assert hold.expires_at - time.monotonic() > TTL - 0.1
    time.sleep(2 * EVERY)
    assert hold.held and lock.info().holder == hold.token
    hold.release()


def test_wait_outlasts_a_short_client_socket_timeout(server, protocol, key):
    # redis-py 8 reads with a 5 s socket timeout by default; the hold's own connection must
    # wait longer than any such timeout when asked to wait longer.
    r = server.client(protocol=protocol, socket_timeout=0.2)
    lock = Lock(r, key, ttl=30)
    holder = lock.acquire()
    threading.Timer(0.6, holder.release).start()
    with lock.acquire(timeout=3) as hold:
        assert lock.info().holder == hold.token
    r.close()


def test_wait_without_limit(r, key):
    lock = Lock(r, key, ttl=30)
    holder = lock.acquire()
    threading.Timer(0.4, holder.release).start()
    with lock.acquire(timeout=None) as hold:
        assert hold.held


def test_fifo_hand_off(r, key):
    lock = Lock(r, key, ttl=30)
    first = lock.acquire()
    order, threads = [], []
    for i in range(3):
        def work(i=i):
            with lock.acquire(timeout=10):
                order.append(i)
                time.sleep(0.05)

        threads.append(_in_thread(work)[0])
        wait_for(lambda i=i: _waiters(lock) == i + 1)
    first.release()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2]


def test_readers_wait_behind_a_queued_writer(r, key):
    rw = ReadWriteLock(r, key, ttl=30)
    reader = rw.read.acquire()
    writer_t, writer = _in_thread(lambda: rw.write.acquire(timeout=5))
    wait_for(lambda: _waiters(rw) == 1)
    with pytest.raises(NotAcquired):
        rw.read.acquire(timeout=0.1)  # no barging past the writer
    reader.release()
    writer_t.join(5)
    w = writer["value"]
    assert rw.info().mode == "exclusive"
    w.release()


def test_semaphore_waiter_gets_a_returned_permit(r, key):
    sem = Semaphore(r, key, 2, ttl=30)
    a, b = sem.acquire(), sem.acquire()
    t, box = _in_thread(lambda: sem.acquire(timeout=5))
    wait_for(lambda: _waiters(sem) == 1)
    released_at = time.monotonic()
    b.release()
    t.join(5)
    assert box["at"] - released_at < 0.2
    box["value"].release()
    a.release()


def test_interrupted_wait_leaves_no_grant(r, key):
    """Holder A, waiter B (interrupted), waiter C: once B is interrupted its connection is
    closed, so A's release goes straight to C, not to a grant that B never takes."""
    lock = Lock(r, key, ttl=30)
    a = lock.acquire()
    c_box = {}

    def queue_c_then_interrupt():
        wait_for(lambda: _waiters(lock) == 1)
        _, box = _in_thread(lambda: lock.acquire(timeout=5))
        c_box.update(box=box)
        wait_for(lambda: _waiters(lock) == 2)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=queue_c_then_interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(timeout=10)
    wait_for(lambda: _waiters(lock) == 1)  # B left the queue
    released_at = time.monotonic()
    a.release()
    box = wait_for(lambda: "at" in c_box["box"] and c_box["box"])
    assert "value" in box, box
    assert box["at"] - released_at < 0.5
    assert [h.token for h in lock.holders()] == [box["value"].token]
    box["value"].release()


def test_interrupt_after_the_grant_releases_it(r, key):
    """Granted, then interrupted while waiting for replicas (there are none): the grant was
    delivered, so closing is not enough; it is released, and the next waiter gets it."""
    lock = Lock(r, key, ttl=30, durable=1, durable_timeout=10)
    plain = Lock(r, key, ttl=30)
    c_box = {}

    def queue_c_then_interrupt():
        wait_for(lambda: (lock.info() or None) and lock.info().holders == 1)
        _, box = _in_thread(lambda: plain.acquire(timeout=5))
        c_box.update(box=box)
        wait_for(lambda: _waiters(lock) == 1)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=queue_c_then_interrupt, daemon=True).start()
    interrupted_at = None
    with pytest.raises(KeyboardInterrupt):
        try:
            lock.acquire(timeout=1)
        finally:
            interrupted_at = time.monotonic()
    box = wait_for(lambda: "at" in c_box["box"] and c_box["box"])
    assert "value" in box, box
    assert box["at"] - interrupted_at < 0.5  # not after the 30 s lease
    box["value"].release()


def test_durable_without_replica_is_not_acquired(r, key):
    lock = Lock(r, key, ttl=30, durable=1, durable_timeout=0.2)
    with pytest.raises(NotDurable) as e:
        lock.acquire(timeout=1)
    assert e.value.acked == 0
    assert lock.info() is None  # released again
    Lock(r, key).acquire(blocking=False).release()


def test_durable_with_a_replica(replicated, protocol, key):
    r = replicated.client(protocol=protocol)
    lock = Lock(r, key, ttl=30, durable=1, durable_timeout=5)
    with lock.acquire(timeout=1) as hold:
        assert lock.info().holder == hold.token
    with pytest.raises(NotDurable):
        Lock(r, key, ttl=30, durable=2, durable_timeout=0.2).acquire(timeout=1)
    assert Lock(r, key).info() is None
    r.close()
