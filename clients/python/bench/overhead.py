"""The library's overhead against the same commands sent raw (issue 24's ``make bench``).

    target/clients/python-redis-8.1.0/bin/python clients/python/bench/overhead.py

Imports ``redis_lock_client`` from ``clients/python/src`` (this checkout, not an installed
copy). Starts its own redis-server with the module (``$REDIS_LOCK_MODULE``, or
``target/release/libredis_lock.so``) on a free loopback port in 51000-51999, and measures:

1. **Uncontended lock/unlock.** Cycles per second of ``LOCK.ACQUIRE k <uuid> 30000`` +
   ``LOCK.RELEASE k <uuid>`` sent raw through ``redis.Redis.execute_command`` (one pooled
   connection, no pipelining; ``redis.asyncio.Redis`` for the asyncio side) against the
   library's cycle: ``with lock.acquire(timeout=10):`` and ``async with
   lock.acquire(timeout=10):``. Rounds of ``BENCH_ROUND_MS`` (default 2000) are interleaved,
   three of each; the median is reported, with the spread of the rounds as the noise.
2. **Keep-alive cost per held lock.** ``BENCH_HOLDS`` (default 1000) holds on distinct keys
   with a ttl of ``BENCH_KA_TTL_MS`` (default 3000: an extend every second), watched for
   ``BENCH_KA_MS`` (default 3000): this process's CPU time (``getrusage``) per held lock per
   second, the server's ``LOCK.EXTEND`` calls per held lock per second, and the threads and
   server connections each hold adds.

Prints a table, then one line ``JSON {...}`` for ``clients/bench.sh``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "src"))

import redis  # noqa: E402
import redis.asyncio  # noqa: E402

import redis_lock_client as rlc  # noqa: E402
import redis_lock_client.asyncio as arlc  # noqa: E402

ROUND = int(os.environ.get("BENCH_ROUND_MS", "2000")) / 1000
HOLDS = int(os.environ.get("BENCH_HOLDS", "1000"))
KA_TTL = int(os.environ.get("BENCH_KA_TTL_MS", "3000")) / 1000
KA_WINDOW = int(os.environ.get("BENCH_KA_MS", "3000")) / 1000
MODULE = os.environ.get("REDIS_LOCK_MODULE") or str(REPO / "target/release/libredis_lock.so")


class Server:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="redis-lock-overhead-"))
        ports = list(range(51000, 52000))
        random.shuffle(ports)
        for port in ports:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.port = port
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--maxclients", "10000", "--dir", str(self.dir),
                 "--logfile", str(self.dir / "log"), "--loadmodule", MODULE],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if self._ready():
                return
            self.stop()
        raise RuntimeError("no free port in 51000-51999 for redis-server")

    def _ready(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as r:
                    # Ours, not another suite's server that took the port first.
                    return r.info("server")["process_id"] == self.proc.pid
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def client(self, **kw):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10, **kw)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def info(self, section, field):
        with self.client() as r:
            value = r.info(section).get(field, 0)
        return value["calls"] if isinstance(value, dict) else value


def token():
    return str(uuid.uuid4())


def for_duration(d, cycle):
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < d:
        for _ in range(16):
            cycle()
        n += 16
    return n / (time.perf_counter() - start)


async def for_duration_async(d, cycle):
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < d:
        for _ in range(16):
            await cycle()
        n += 16
    return n / (time.perf_counter() - start)


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def threads():
    return threading.active_count()


def watch(server, holds, sleep, base):
    # Every hold's first extend is due a third of the ttl after its grant (and its keep-alive
    # starts then): wait for all of them, and a little more, before counting.
    sleep(KA_TTL / 2)
    threads0, conns0 = base
    held_threads = threads()
    held_conns = server.info("clients", "connected_clients")
    ext0 = server.info("commandstats", "cmdstat_lock.extend")
    cpu0, t0 = cpu_seconds(), time.monotonic()
    sleep(KA_WINDOW)
    cpu, secs = cpu_seconds() - cpu0, time.monotonic() - t0
    ext = server.info("commandstats", "cmdstat_lock.extend") - ext0
    n = len(holds)
    return {
        "holds": n,
        "ttl_ms": round(KA_TTL * 1000),
        "cpu_us_per_lock_s": round(cpu * 1e6 / n / secs, 2),
        "extends_per_lock_s": round(ext / n / secs, 3),
        "cpu_us_per_extend": round(cpu * 1e6 / ext, 1) if ext else 0.0,
        "threads_per_hold": round((held_threads - threads0) / n, 3),
        "connections_per_hold": round((held_conns - conns0) / n, 3),
        "lost": sum(1 for h in holds if h.lost.is_set()),
    }


def keepalive_sync(server):
    client = server.client()
    base = (threads(), server.info("clients", "connected_clients"))
    t0 = time.monotonic()
    holds = [rlc.Lock(client, f"ka:s:{i}", ttl=KA_TTL).acquire(timeout=10) for i in range(HOLDS)]
    acquired = time.monotonic() - t0
    cost = watch(server, holds, time.sleep, base)
    cost["acquire_s"] = round(acquired, 3)
    for h in holds:
        h.release()
    client.close()
    return cost


async def keepalive_async(server):
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, socket_timeout=10)
    base = (threads(), await asyncio.to_thread(server.info, "clients", "connected_clients"))
    t0 = time.monotonic()
    holds = []
    for i in range(HOLDS):
        holds.append(await arlc.Lock(client, f"ka:a:{i}", ttl=KA_TTL).acquire(timeout=10))
    acquired = time.monotonic() - t0
    # The event loop must keep running while we watch: the watcher sleeps in a thread.
    cost = await asyncio.to_thread(watch, server, holds, time.sleep, base)
    cost["acquire_s"] = round(acquired, 3)
    for h in holds:
        await h.release()
    await client.aclose() if hasattr(client, "aclose") else await client.close()
    return cost


def main():
    server = Server()
    try:
        run(server)
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def run(server):
    client = server.client()
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port, socket_timeout=10)
    lock = rlc.Lock(client, "bench:sync")
    alock = arlc.Lock(aclient, "bench:async")

    def raw():
        t = token()
        assert client.execute_command("LOCK.ACQUIRE", "bench:raw", t, 30000) is not None
        assert client.execute_command("LOCK.RELEASE", "bench:raw", t) == 1

    def sync():
        with lock.acquire(timeout=10):
            pass

    async def raw_async():
        t = token()
        assert await aclient.execute_command("LOCK.ACQUIRE", "bench:raw-async", t, 30000)
        assert await aclient.execute_command("LOCK.RELEASE", "bench:raw-async", t) == 1

    async def lib_async():
        async with alock.acquire(timeout=10):
            pass

    names = ["raw", "sync", "raw-async", "asyncio"]

    def measure(which, d):
        if which == 0:
            return for_duration(d, raw)
        if which == 1:
            return for_duration(d, sync)
        cycle = raw_async if which == 2 else lib_async
        return loop.run_until_complete(for_duration_async(d, cycle))

    for which in range(4):
        measure(which, 0.2)  # warm-up, not counted
    results = [[] for _ in names]
    for r in range(3):
        for i in range(4):  # interleaved, in a rotating order
            which = (i + r) % 4
            results[which].append(measure(which, ROUND))

    print(f"redis-lock-client (Python {sys.version.split()[0]}, redis-py {redis.__version__}) "
          f"overhead: uncontended lock/unlock, median of 3 rounds of {ROUND * 1000:.0f} ms")
    print(f"  {'api':<9} {'cycles/s':>12} {'spread':>8} {'vs raw':>8}")
    cycles = {}
    for which, name in enumerate(names):
        med = statistics.median(results[which])
        raw_med = statistics.median(results[0 if which < 2 else 2])
        spread = 100 * (max(results[which]) - min(results[which])) / med
        ratio = med / raw_med
        print(f"  {name:<9} {med:>12.0f} {spread:>7.1f}% {ratio:>7.2f}x")
        cycles[name] = {"cycles_per_s": round(med), "rounds": [round(x) for x in results[which]],
                        "spread_pct": round(spread, 1), "ratio_vs_raw": round(ratio, 3)}

    print("keep-alive cost (client CPU per held lock; server LOCK.EXTEND per lock):")
    ka = {"sync": keepalive_sync(server), "asyncio": loop.run_until_complete(keepalive_async(server))}
    for api, k in ka.items():
        print(f"  {api:<9} {k['holds']} holds, ttl {k['ttl_ms']} ms: {k['cpu_us_per_lock_s']:.1f} "
              f"µs CPU per held lock per s ({k['cpu_us_per_extend']:.0f} µs per extend), "
              f"{k['extends_per_lock_s']:.2f} LOCK.EXTEND/lock/s, {k['threads_per_hold']:.2f} "
              f"threads and {k['connections_per_hold']:.2f} connections per hold; acquired in "
              f"{k['acquire_s']:.2f} s, {k['lost']} lost")
    print("  at the default ttl (30 s, an extend every 10 s) the per-lock rates are a tenth of "
          "these at ttl 3 s")
    loop.run_until_complete(aclient.aclose() if hasattr(aclient, "aclose") else aclient.close())
    loop.close()
    client.close()
    print("JSON " + json.dumps({"library": "python", "redis_py": redis.__version__,
                                "round_ms": round(ROUND * 1000), "cycles": cycles,
                                "keepalive": ka}))


if __name__ == "__main__":
    main()
