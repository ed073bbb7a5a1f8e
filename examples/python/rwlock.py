"""A read-write lock: two readers hold it together; a writer queues until both release; a
reader that comes after the writer waits behind it (readers cannot starve a writer). Only the
writer's exclusive hold can guard a write."""

import os
import sys
import threading
import time

import redis
from redis_lock_client import Fenced, ReadWriteLock

r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6390"))
LOCK, PRICES = "{example:catalog}:lock", "{example:catalog}:prices"
r.set(PRICES, "v1")
rw = ReadWriteLock(r, LOCK, ttl=10)
events = []


def check(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def wait_for_waiters(n):  # LOCK.INFO counts the clients queued for the key
    deadline = time.monotonic() + 5
    while (info := rw.info()) is None or info.waiters < n:
        check(time.monotonic() < deadline, f"{n} clients queued")
        time.sleep(0.01)


def writer():
    with rw.write.acquire(timeout=5) as w:
        events.append("writer")
        w.guard("SET", PRICES, "v2")


def late_reader():
    with rw.read.acquire(timeout=5):
        events.append("late reader read " + r.get(PRICES).decode())


r1, r2 = rw.read.acquire(timeout=5), rw.read.acquire(timeout=5)  # two shared holds at once
info = rw.info()
print(f"held {info.mode} by {info.holders}; fences {r1.fence} and {r2.fence}")
check(info.mode == "shared" and info.holders == 2, "two readers hold the lock together")
try:
    r1.guard("SET", PRICES, "oops")
    check(False, "a reader's hold must not guard a write")
except Fenced as refused:
    print("reader's write refused:", refused)
check(r1.held, "that refusal does not end the reader's hold")

threads = [threading.Thread(target=writer), threading.Thread(target=late_reader)]
threads[0].start()
wait_for_waiters(1)  # the writer queues behind the readers...
threads[1].start()
wait_for_waiters(2)  # ...and the late reader behind the writer
events.append("readers release")
r1.release()
r2.release()
for t in threads:
    t.join()
print(" -> ".join(events))
check(events == ["readers release", "writer", "late reader read v2"], "FIFO: writer first")
print("ok")
