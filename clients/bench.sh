#!/usr/bin/env bash
# The client libraries' overhead (issue 24): an uncontended lock/unlock through each library
# API against the same two commands sent raw on one connection, and the keep-alive's cost
# per held lock. Runs clients/rust/examples/overhead.rs and clients/python/bench/overhead.py
# (each starts its own redis-server with the module on a port in 51000-51999), prints one
# table and writes target/clients-bench.json.
#
#   bash clients/bench.sh            # about a minute
#   BENCH_ROUND_MS=2000 BENCH_HOLDS=1000 BENCH_KA_TTL_MS=3000 bash clients/bench.sh
#
# Needs the module built (`make build`; REDIS_LOCK_MODULE overrides its path) and the venv
# target/clients/python-redis-8.1.0 (clients/python/run-tests.sh makes it; PYTHON overrides).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
export REDIS_LOCK_MODULE=${REDIS_LOCK_MODULE:-$repo/target/release/libredis_lock.so}
python=${PYTHON:-$repo/target/clients/python-redis-8.1.0/bin/python}
[ -f "$REDIS_LOCK_MODULE" ] || { echo "bench.sh: no module at $REDIS_LOCK_MODULE: run 'make build'" >&2; exit 2; }
[ -x "$python" ] || { echo "bench.sh: no $python: run clients/python/run-tests.sh 8.1.0" >&2; exit 2; }
# Rounds of 1 s, three per API, interleaved, and a 2 s keep-alive window: the whole run
# stays near a minute (BENCH_ROUND_MS=2000 for steadier figures, in about 90 s).
export BENCH_ROUND_MS=${BENCH_ROUND_MS:-1000} BENCH_KA_MS=${BENCH_KA_MS:-2000}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Only the client crate, in release: never the root package (others' servers load its .so).
(cd "$repo" && cargo build -q --release -p redis-lock-client --example overhead)
"$repo/target/release/examples/overhead" | tee "$out/rust.txt"
echo
(cd "$repo" && PYTHONDONTWRITEBYTECODE=1 "$python" clients/python/bench/overhead.py) | tee "$out/python.txt"

"$python" - "$out/rust.txt" "$out/python.txt" "$repo/target/clients-bench.json" <<'EOF'
import json, os, platform, subprocess, sys

runs = []
for path in sys.argv[1:3]:
    with open(path) as f:
        runs += [json.loads(l[5:]) for l in f if l.startswith("JSON ")]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
machine = {"nproc": os.cpu_count(), "cpu": cpu, "redis_server": server, "kernel": platform.release(),
           "loadavg_at_end": os.getloadavg()}
print()
print(f"machine: {machine['nproc']} cpus, {cpu}; {server.split(' sha=')[0]}; load {machine['loadavg_at_end'][0]:.2f}")
print(f"{'library':<8} {'api':<10} {'cycles/s':>10} {'raw/s':>10} {'ratio':>6} {'spread':>7}   target >= 0.90")
for run in runs:
    lib, cyc = run["library"], run["cycles"]
    for api, raw in (("blocking", "raw"), ("async", "raw-async"), ("sync", "raw"), ("asyncio", "raw-async")):
        if api in cyc:
            r = cyc[api]
            ok = "ok" if r["ratio_vs_raw"] >= 0.9 else "BELOW"
            print(f"{lib:<8} {api:<10} {r['cycles_per_s']:>10} {cyc[raw]['cycles_per_s']:>10} "
                  f"{r['ratio_vs_raw']:>6.2f} {r['spread_pct']:>6.1f}%   {ok}")
print()
print(f"{'library':<8} {'api':<10} {'holds':>6} {'ttl ms':>7} {'CPU µs/lock/s':>14} {'CPU µs/extend':>14} "
      f"{'EXTEND/lock/s':>14} {'threads/hold':>13} {'conns/hold':>11}")
for run in runs:
    for api, k in run["keepalive"].items():
        print(f"{run['library']:<8} {api:<10} {k['holds']:>6} {k['ttl_ms']:>7} {k['cpu_us_per_lock_s']:>14.1f} "
              f"{k['cpu_us_per_extend']:>14.1f} {k['extends_per_lock_s']:>14.2f} "
              f"{k['threads_per_hold']:>13.2f} {k['connections_per_hold']:>11.2f}")
print("(keep-alive at ttl 3 s; at the default ttl of 30 s the per-lock rates are a tenth)")
with open(sys.argv[3], "w") as f:
    json.dump({"machine": machine, "runs": runs}, f, indent=2)
print(f"wrote {sys.argv[3]}")
EOF
