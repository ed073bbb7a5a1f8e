"""A long job that notices a lost lock. It holds the lock with a 1 s lease that its keep-alive
extends every third of a second, and checks the hold between steps. Halfway through, another
connection deletes the lock key (as an operator, a FLUSHDB or a failover could): the next
extend answers 0, the hold is reported lost, and the job stops. Its late write, under the
fence it was given, is refused once another worker holds the lock."""

import os
import sys
import threading
import time

import redis
from redis_lock_client import Fenced, Lock, LockLost

r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6390"))
LOCK, REPORT = "{example:report}:lock", "{example:report}:result"
r.delete(REPORT)
lock = Lock(r, LOCK, ttl=1.0)


def check(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


threading.Timer(0.5, r.delete, [LOCK]).start()  # the lock vanishes 0.5 s into the job
steps = 0
try:
    with lock.acquire(timeout=5) as job:
        while steps < 30:
            job.check()  # raises LockLost once the keep-alive has found the hold gone
            time.sleep(0.1)  # one step of 0.1 s: 30 are three leases long
            steps += 1
        job.guard("SET", REPORT, "complete")
except LockLost as e:
    print(f"stopped after {steps} of 30 steps: {e}")
check(steps < 30 and job.lost.is_set(), "the job noticed the loss and stopped")
check(job.lost_at < job.expires_at, "noticed before the lease would have ended")

with lock.acquire(timeout=5) as next_job:
    next_job.guard("SET", REPORT, "by the next holder")
    try:
        job.guard("SET", REPORT, f"partial: {steps} steps")  # a write that comes too late
        check(False, "the lost job's write must be refused")
    except Fenced as refused:
        print("late write refused:", refused)
check(r.get(REPORT) == b"by the next holder", "the late write changed nothing")
print("ok")
