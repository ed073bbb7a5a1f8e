"""A mutex with guarded writes: four threads add to one counter, each read-modify-write done
under the lock and written through LOCK.GUARD. Then a holder that paused past its lease wakes
up and writes with its old fence: the server refuses it, and the data is untouched."""

import os
import sys
import threading
import time

import redis
from redis_lock_client import Fenced, Lock

r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6390"))
LOCK, COUNTER = "{example:counter}:lock", "{example:counter}:value"  # one hash tag: one slot
r.delete(COUNTER)


def check(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


lock = Lock(r, LOCK, ttl=10)  # seconds; the hold's keep-alive extends it every ttl/3


def add_ten():
    for _ in range(10):
        with lock.acquire(timeout=5) as hold:  # waits in the key's FIFO queue; released on exit
            value = int(r.get(COUNTER) or 0)  # reads need no guard
            hold.guard("SET", COUNTER, value + 1)  # runs only while hold.fence is current


threads = [threading.Thread(target=add_ten) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("counter:", r.get(COUNTER).decode())
check(r.get(COUNTER) == b"40", "four threads x ten increments make 40")

# A holder that stops extending (think: a long GC pause) loses its lease; someone else gets
# the lock, and the sleeper's write, with the fence it was given, is refused.
sleeper = Lock(r, LOCK, ttl=0.3, auto_extend=False).acquire(timeout=5)
time.sleep(0.4)
with lock.acquire(timeout=5) as next_holder:
    print(f"fences: sleeper {sleeper.fence}, next holder {next_holder.fence}")
    try:
        sleeper.guard("SET", COUNTER, 0)
        check(False, "a write under an old fence must be refused")
    except Fenced as refused:
        print("late write refused:", refused)
    check(next_holder.fence > sleeper.fence, "fences only go up")
check(r.get(COUNTER) == b"40", "the refused write changed nothing")
check(sleeper.lost.is_set(), "the sleeper's own client saw its lease end")
check(sleeper.release() is False, "nothing left to release")
print("ok")
