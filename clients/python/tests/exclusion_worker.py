"""One worker of the mutual-exclusion test (clients/rust/tests/exclusion/ runs 8 of these
beside 8 of clients/rust/examples/exclusion_worker.rs, the same program in Rust).

    python exclusion_worker.py --url redis://127.0.0.1:6390/ --id py-1 --duration-ms 5000

Until its time is up it picks one of a few keys at random, takes a ``Lock`` on
``{res:N}:lock`` with a short lease, and writes through ``hold.guard()`` (LOCK.GUARD):
``SET {res:N}:owner "<fence> <id>"``, then a few ``RPUSH {res:N}:log "<fence> <id> <seq>"``
with short sleeps between them; then it releases. All the evidence is in Redis; the worker
only counts, and prints one line at the end: ``SUMMARY id=… holds=… writes=… pushes=…
fenced=… lost=… timeouts=… errors=… rogue=…``.

``--rogue stale`` and ``--rogue intrude`` plant violations for the test of the checker: after
each hold, a stale rogue waits for a newer fence in the log and then appends an entry under
its old fence with a plain RPUSH (no guard); an intruder appends, without any lock, an entry
under the fence of the last writer that is not itself.

Not a pytest module (no ``test_`` prefix): a program the Rust test starts.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import redis

from redis_lock_client import Fenced, Lock, LockError, NotAcquired


def last_entry(r, log):
    entry = r.lindex(log, -1)
    if entry is None:
        return None
    fence, writer = entry.decode().split(" ")[:2]
    return int(fence), writer


def misbehave(rogue, r, log, wid, fence, seq) -> bool:
    """The planted plain write after a hold under ``fence``; whether it was made."""
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        last = last_entry(r, log)
        if last is not None:
            last_fence, writer = last
            under = None
            if rogue == "stale" and last_fence > fence:
                under = fence
            elif rogue == "intrude" and writer != wid:
                under = last_fence
            if under is not None:
                r.rpush(log, f"{under} {wid} {seq}")
                return True
        time.sleep(0.01)
    return False


def run(args) -> dict:
    r = redis.Redis.from_url(args.url, protocol=args.protocol)
    counts = dict.fromkeys(
        ("holds", "writes", "pushes", "fenced", "lost", "timeouts", "errors", "rogue"), 0
    )
    ttl, wait = args.ttl_ms / 1000, args.wait_ms / 1000
    deadline = time.monotonic() + args.duration_ms / 1000
    seq = 0
    while time.monotonic() < deadline:
        n = random.randrange(args.keys)
        key, log, owner = f"{{res:{n}}}:lock", f"{{res:{n}}}:log", f"{{res:{n}}}:owner"
        try:
            hold = Lock(r, key, ttl=ttl).acquire(timeout=wait)
        except NotAcquired:
            counts["timeouts"] += 1
            continue
        except (redis.RedisError, LockError) as e:
            print(f"{args.id}: acquire {key}: {e!r}", file=sys.stderr)
            counts["errors"] += 1
            time.sleep(0.05)
            continue
        counts["holds"] += 1
        fence = hold.fence
        lost = False
        for step in range(args.pushes + 1):
            if step == 0:
                command = ("SET", owner, f"{fence} {args.id}")
            else:
                time.sleep(random.uniform(0.005, 0.030))
                seq += 1
                command = ("RPUSH", log, f"{fence} {args.id} {seq}")
            try:
                hold.guard(*command)
            except Fenced:
                counts["fenced"] += 1
                lost = True
                break
            except redis.RedisError as e:
                print(f"{args.id}: guarded write on {key}: {e!r}", file=sys.stderr)
                counts["errors"] += 1
                break
            counts["writes"] += 1
            counts["pushes"] += step > 0
        try:
            # False: the lease had ended by the time of the release.
            released = hold.release()
        except redis.RedisError:
            released = False
        lost = lost or not released or hold.lost.is_set()
        counts["lost"] += lost
        if args.rogue:
            seq += 1
            counts["rogue"] += misbehave(args.rogue, r, log, args.id, fence, seq)
        time.sleep(random.uniform(0, 0.010))
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--duration-ms", type=int, required=True)
    p.add_argument("--keys", type=int, default=3)
    p.add_argument("--ttl-ms", type=int, default=600)
    p.add_argument("--wait-ms", type=int, default=2000)
    p.add_argument("--pushes", type=int, default=4)
    p.add_argument("--protocol", type=int, choices=(2, 3), default=2)
    p.add_argument("--rogue", choices=("stale", "intrude"))
    args = p.parse_args(argv)
    counts = run(args)
    fields = " ".join(f"{k}={v}" for k, v in counts.items())
    print(f"SUMMARY id={args.id} {fields}", flush=True)


if __name__ == "__main__":
    main()
