#!/usr/bin/env bash
# Server instructions per acquire + release cycle, counted by callgrind: the repeatable
# companion of `make bench`, whose throughput figures move by several percent from run to
# run on a shared machine. For each workload, redis-server runs under valgrind with the
# module loaded; redis-cli pipes CYCLES cycles shaped as the benchmark's batch of 16 (16
# acquires, then 16 releases) once to warm up and once counted, and the script prints
# the user-space instructions the server executed per cycle (kernel time is not counted).
#
#   scripts/bench-instructions.sh                    # module cycle vs the native floor
#                                                    # and the module floor (a minimal C
#                                                    # module lock, tests/support/minimal_lock.c)
#   AOF=1 scripts/bench-instructions.sh              # the same with appendonly yes (the
#                                                    # propagated effects are built and written)
#   HELD=1000000 scripts/bench-instructions.sh       # with that many long-held locks first
#   REDIS_LOCK_MODULE=/path/to/other.so scripts/bench-instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=${REDIS_LOCK_MODULE:-$PWD/target/release/libredis_lock.so}
CYCLES=${CYCLES:-20000}
HELD=${HELD:-0}
for tool in valgrind callgrind_control redis-cli redis-server python3 cc; do
    command -v "$tool" >/dev/null || { echo "needs $tool (make leak-check installs valgrind)" >&2; exit 2; }
done
[ -f "$MODULE" ] || { echo "no module at $MODULE: run make build" >&2; exit 2; }
MINIMAL=$(mktemp -d)/minimal_lock.so
trap 'rm -rf "$(dirname "$MINIMAL")"' EXIT
cc -shared -fPIC -O2 -o "$MINIMAL" tests/support/minimal_lock.c

# RESP for the workload `$1` (lock | floor | minimal), `$2` cycles, on stdout.
workload() {
    python3 - "$1" "$2" <<'PY'
import sys
kind, n = sys.argv[1], int(sys.argv[2])
def cmd(*args):
    out = [f"*{len(args)}\r\n"]
    for a in map(str, args):
        out.append(f"${len(a.encode())}\r\n{a}\r\n")
    return "".join(out)
out = []
for base in range(0, n, 16):
    batch = [(f"lk:{i % 1000:09}", f"tok-{i}") for i in range(base, base + 16)]
    if kind == "minimal":
        out += [cmd("MINLOCK.ACQUIRE", k, t, 60000) for k, t in batch]
        out += [cmd("MINLOCK.RELEASE", k, t) for k, t in batch]
    elif kind == "lock":
        out += [cmd("LOCK.ACQUIRE", k, t, 60000) for k, t in batch]
        out += [cmd("LOCK.RELEASE", k, t) for k, t in batch]
    else:
        out += [cmd("SET", k, t, "PX", 60000) for k, t in batch]
        out += [cmd("DEL", k) for k, _ in batch]
sys.stdout.write("".join(out))
PY
}

# RESP for `$2` long-held locks of the workload `$1`'s kind.
held() {
    python3 - "$1" "$2" <<'PY'
import sys
kind, n = sys.argv[1], int(sys.argv[2])
tok = "held-0123456789abcdef0123456789abcdef"
out = []
for i in range(n):
    k = f"held:{i:09}"
    if kind == "lock":
        out.append(f"*4\r\n$12\r\nLOCK.ACQUIRE\r\n${len(k)}\r\n{k}\r\n${len(tok)}\r\n{tok}\r\n$7\r\n3600000\r\n")
    else:
        out.append(f"*6\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n${len(tok)}\r\n{tok}\r\n$2\r\nNX\r\n$2\r\nPX\r\n$7\r\n3600000\r\n")
sys.stdout.write("".join(out))
PY
}

# Instructions per cycle of workload `$1` (lock | floor | minimal), on a server with both
# modules loaded; `$2` = without to run the server without them (what the module costs the
# server's other commands: its keyspace-event callback and, on Redis 7.0, its command filter).
count() {
    local kind=$1 dir port pid total
    local load=(--loadmodule "$MODULE" --loadmodule "$MINIMAL")
    [ "${2:-}" = without ] && load=()
    dir=$(mktemp -d)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    local aof=(--appendonly no)
    [ "${AOF:-0}" = 1 ] && aof=(--appendonly yes --appendfsync no)
    workload "$kind" "$CYCLES" >"$dir/work.resp"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
        redis-server --port "$port" --bind 127.0.0.1 --save "" "${aof[@]}" --dir "$dir" \
        "${load[@]}" >/dev/null 2>"$dir/valgrind.log" &
    pid=$!
    for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
    if [ "$HELD" -gt 0 ]; then
        held "$kind" "$HELD" | redis-cli -p "$port" --pipe >/dev/null
    fi
    redis-cli -p "$port" --pipe <"$dir/work.resp" >/dev/null
    callgrind_control -i on "$pid" >/dev/null 2>&1
    redis-cli -p "$port" --pipe <"$dir/work.resp" >/dev/null
    callgrind_control -i off "$pid" >/dev/null 2>&1
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    total=$(awk '/^totals:/ {print $2; exit}' "$dir"/callgrind.out*)
    rm -rf "$dir"
    echo $((total / CYCLES))
}

lock=$(count lock)
floor=$(count floor)
minimal=$(count minimal)
bare=$(count floor without)
echo "server instructions per cycle (callgrind, $CYCLES cycles in batches of 16, held=$HELD, aof=${AOF:-0}):"
echo "  LOCK.ACQUIRE + LOCK.RELEASE  $lock"
echo "  SET PX + DEL (floor)         $floor"
echo "  MINLOCK.ACQUIRE + MINLOCK.RELEASE (module floor) $minimal"
echo "  SET PX + DEL, module not loaded $bare"
python3 -c "print(f'  module vs floor: {$floor / $lock:.3f}x (floor instructions / module instructions)')"
python3 -c "print(f'  module vs module floor: {$minimal / $lock:.3f}x')"
python3 -c "print(f'  the loaded module costs SET PX + DEL {($floor - $bare) / $bare * 100:+.1f}% instructions')"
