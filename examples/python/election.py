"""Leader election: three candidate processes campaign for one key and two follower processes
print every change of leader. The leader is killed with SIGKILL, as a crash would: nobody
resigns, and the next candidate in the key's queue leads the moment the dead leader's lease
ends. Both followers see the dead leader, then its successor, under a larger fence.

Run without arguments, it starts the five processes (this file again, with a role)."""

import os
import signal
import subprocess
import sys
import threading
import time

import redis
from redis_lock_client import Election

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390")
KEY = "{example:election}:leader"
TTL = 1.0  # the leader's lease (s), extended every third of it while the leader lives


def candidate():
    election = Election(redis.Redis.from_url(URL), KEY, ttl=TTL)  # identity: host:pid:uuid4
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leaves the with block: resigns
    print("campaigning as", election.identity, flush=True)
    with election.campaign() as leadership:  # waits in the key's queue, without limit
        print("elected, fence", leadership.fence, flush=True)
        leadership.lost.wait()  # leads until killed (or until the leadership is lost)


def follower():
    for leader in Election(redis.Redis.from_url(URL), KEY).observe(timeout=25):
        print("no leader" if leader is None else f"{leader.identity} leads, fence {leader.fence}",
              flush=True)


def start(role, name):
    """Runs this file as `role`; its lines are printed as they come, and kept with their time."""
    proc = subprocess.Popen([sys.executable, __file__, role], stdout=subprocess.PIPE, text=True)
    proc.lines = []

    def relay():
        for line in proc.stdout:
            proc.lines.append((time.monotonic(), line.strip()))
            print(f"{name}: {line.strip()}", flush=True)

    threading.Thread(target=relay, daemon=True).start()
    return proc


def wait_until(predicate, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"FAILED: {what}")
        time.sleep(0.01)


def main():
    r = redis.Redis.from_url(URL)
    r.delete(KEY)
    watcher = Election(r, KEY)
    followers = [start("follower", f"follower-{i}") for i in (1, 2)]
    candidates = []
    try:
        wait_until(lambda: all(f.lines for f in followers), "the followers started observing")
        for i in (1, 2, 3):  # one at a time: the first leads, the others queue in this order
            candidates.append(start("candidate", f"candidate-{i}"))
            due = 2 if i == 1 else 1  # "campaigning as ...", and the first's "elected ..."
            wait_until(lambda: len(candidates[-1].lines) >= due, f"candidate-{i} campaigns")
        wait_until(lambda: getattr(watcher.info(), "waiters", 0) == 2, "one leads, two queue")
        leader = watcher.leader()
        said = f"{leader.identity} leads, fence {leader.fence}"
        wait_until(lambda: all(f.lines[-1][1] == said for f in followers), "followers saw it")

        pid = int(leader.identity.split(":")[-2])  # host:pid:uuid4
        victim = next(c for c in candidates if c.pid == pid)
        killed_at = time.monotonic()
        victim.kill()  # SIGKILL: no resign, no release; the lease runs out
        print(f"killed the leader (pid {pid}) with SIGKILL")
        wait_until(lambda: all(f.lines[-1][1] != said for f in followers), "a new leader", 3 * TTL)
        time.sleep(0.1)  # anything else the followers would print

        for i, f in enumerate(followers, 1):
            lines = [line for _, line in f.lines]
            after = lines[lines.index(said) + 1:]
            if not after or " leads, fence " not in after[0]:
                sys.exit(f"FAILED: follower-{i} saw {after[:1]} after the killed leader")
            successor, fence = after[0].split(" leads, fence ")
            if successor == leader.identity or int(fence) <= leader.fence:
                sys.exit(f"FAILED: follower-{i}: no successor with a larger fence: {after[0]}")
            seen_at = f.lines[lines.index(said) + 1][0]
            # The successor is granted when the lease ends, which the dead leader's last extend
            # set no more than TTL after the kill; 0.2 s for the news to reach the follower.
            if seen_at - killed_at > TTL + 0.2:
                sys.exit(f"FAILED: follower-{i} saw a new leader {seen_at - killed_at:.2f} s after")
            print(f"follower-{i}: new leader {seen_at - killed_at:.2f} s after the kill "
                  f"(lease {TTL} s), fence {leader.fence} -> {fence}")
        print("ok")
    finally:
        for proc in followers + candidates:
            proc.terminate()  # a candidate resigns (SIGTERM); a follower just stops
        for proc in followers + candidates:
            proc.wait()


if __name__ == "__main__":
    {"candidate": candidate, "follower": follower}.get(sys.argv[1] if sys.argv[1:] else "", main)()
