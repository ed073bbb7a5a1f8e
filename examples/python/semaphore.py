"""A semaphore of 2 permits: six workers call a rate-limited API, never more than two at a
time; the others queue first come, first served and are granted the moment a permit comes
back. Every permit is a hold of its own, with its own token, lease and fence."""

import os
import sys
import threading
import time

import redis
from redis_lock_client import NotAcquired, Semaphore

r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6390"))
api_calls = Semaphore(r, "example:api-calls", 2, ttl=10)  # every user passes the same 2
running, most, tokens = 0, 0, set()
count = threading.Lock()  # guards the three counters above (in this process only)


def check(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def call_api():
    global running, most
    with api_calls.acquire(timeout=5) as permit:
        with count:
            running += 1
            most = max(most, running)
            tokens.add(permit.token)
        time.sleep(0.1)  # the call itself
        with count:
            running -= 1


workers = [threading.Thread(target=call_api) for _ in range(6)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(f"6 calls, at most {most} at a time, {len(tokens)} distinct permits")
check(most == 2 and len(tokens) == 6, "two permits at a time, each call its own")

# With both permits taken, a third caller that will not wait is turned away at once.
a, b = api_calls.acquire(), api_calls.acquire()
print("holders:", [(h.token[:8], h.mode) for h in api_calls.holders()])
try:
    api_calls.acquire(blocking=False)
    check(False, "a third permit must not be granted")
except NotAcquired as e:
    print("third caller:", e)
a.release()
with api_calls.acquire(blocking=False):  # a permit came back
    check(len(api_calls.holders()) == 2, "still two holders")
b.release()
print("ok")
