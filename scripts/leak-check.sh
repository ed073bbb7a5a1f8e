#!/usr/bin/env bash
# Leak check of the module: redis-server runs under valgrind (memcheck, --leak-check=full)
# with the module loaded, while
#   1. a scripted workload (redis-cli) drives every flow of the module against one server:
#      acquire/renew/extend/fence/info/release, errors, lease ends, WAIT queues with grants,
#      timeouts and disconnects, DEL/UNLINK/FLUSHALL/FLUSHALL ASYNC/overwrite under waiters,
#      DEBUG RELOAD with a queue, DUMP/RESTORE (good and corrupt), COPY/RENAME/MOVE, MULTI, keyspace
#      events, CONFIG SET, SAVE/BGSAVE/BGREWRITEAOF, LOCK.GUARD (runs, refusals of every kind,
#      ACL denials, RESP3, MULTI, COMMAND GETKEYS), shared holds (joins, limits, a queue of
#      both kinds granted together, downgrade, refused upgrade, per-hold lease ends, LOCK.HOLDERS,
#      DUMP/RESTORE and DEBUG RELOAD of a shared key); then SHUTDOWN; and
#   2. a few integration test files (LEAK_TESTS) run with every server they start under
#      valgrind, through the harness's REDIS_SERVER (a wrapper that turns the harness's
#      SIGKILL into a SIGTERM, so that redis shuts down and memcheck writes its report).
# Then it sums the "definitely lost" and "indirectly lost" blocks whose allocation stack
# passes through the module (frames of redis_lock::, redis_module:: or libredis_lock.so),
# and the memcheck errors (invalid reads/writes, uninitialised values, bad frees) with such
# frames. Exit status 1 if there is any; the full logs stay in the output directory.
#
#   scripts/leak-check.sh                       # both parts
#   LEAK_TESTS= scripts/leak-check.sh           # only the scripted workload
#   LEAK_TESTS="queue:wait:: model" scripts/leak-check.sh   # test binaries, each with an
#                                               # optional test-name filter after a colon
#   LEAK_SKIP="crash" (default)                 # test names skipped (--skip) in part 2
#   LEAK_CHECK_DIR=/tmp/leak scripts/leak-check.sh   # where the logs go (default: a temp dir)
#
# Redis under valgrind runs 20-50x slower, so timing assertions of the integration tests can
# fail there; their results are reported, but only the valgrind figures decide the exit status.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODULE=${REDIS_LOCK_MODULE:-$ROOT/target/release/libredis_lock.so}
REDIS=${REDIS_SERVER:-redis-server}
LEAK_TESTS=${LEAK_TESTS-"queue:wait:: persistence fences:live:: fuzz:restore:: model"}
# Tests that simulate a crash (kill -9, then restart at once on the same port) cannot run
# under the wrapper below, which has to let the old server shut down first.
LEAK_SKIP=${LEAK_SKIP-"crash"}
OUT=${LEAK_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/redis-lock-leak.XXXXXX")}
mkdir -p "$OUT"
rm -f "$OUT"/vg.*.log

for tool in valgrind redis-cli "$REDIS"; do
  command -v "$tool" >/dev/null || { echo "leak-check: $tool not found" >&2; exit 2; }
done
[ -f "$MODULE" ] || { echo "leak-check: $MODULE not built (make build)" >&2; exit 2; }
MODULE=$(readlink -f "$MODULE")
REDIS_BIN=$(command -v "$REDIS")

# memcheck sees only allocations that go through the malloc it replaces. Debian's redis-server
# calls the system libjemalloc.so.2 (unprefixed malloc/free): replace that one. A redis built
# with its bundled, statically linked jemalloc hides every allocation: build it with MALLOC=libc.
SONAME=()
if ldd "$REDIS_BIN" 2>/dev/null | grep -q 'libjemalloc\.so'; then
  SONAME=(--soname-synonyms=somalloc=libjemalloc.so.2)
elif nm "$REDIS_BIN" 2>/dev/null | grep -q ' je_malloc$'; then
  echo "leak-check: $REDIS_BIN has jemalloc linked in statically; memcheck cannot see its" \
       "allocations. Use a redis-server built with MALLOC=libc (REDIS_SERVER=...)." >&2
  exit 2
fi
# Redis's own suppression (src/valgrind.sup): LZF reads its hash table uninitialised on purpose.
SUPP=$OUT/lzf.supp
for kind in Cond Value4 Value8; do
  printf '{\n   <lzf_uninitialized_hash_table>\n   Memcheck:%s\n   fun:lzf_compress\n}\n' "$kind"
done >"$SUPP"
VALGRIND=(valgrind --tool=memcheck --leak-check=full "--suppressions=$SUPP"
  --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect
  --num-callers=40 --child-silent-after-fork=yes "${SONAME[@]}"
  "--log-file=$OUT/vg.%p.log")

# The wrapper the harness starts as its redis-server. The harness stops a server with
# SHUTDOWN NOSAVE, or with SIGKILL when it drops it or simulates a crash; a SIGKILL would
# lose memcheck's report. So valgrind runs as a child of this wrapper, and a watcher stops
# it with SHUTDOWN NOSAVE (like a crash: no final save) once the wrapper is gone, or with
# SIGTERM if that fails.
WRAPPER=$OUT/redis-server-valgrind
{
  echo '#!/usr/bin/env bash'
  echo 'port=6379 prev='
  echo 'for a in "$@"; do [ "$prev" = --port ] && port=$a; prev=$a; done'
  printf '%s %q "$@" &\n' "$(printf '%q ' "${VALGRIND[@]}")" "$REDIS_BIN"
  echo 'child=$! me=$$'
  echo '( trap "" TERM INT'
  echo '  while kill -0 "$me" 2>/dev/null; do sleep 0.1; done'
  echo '  if tr "\\0" " " <"/proc/$child/cmdline" 2>/dev/null | grep -q -- "--port $port "; then'
  echo '    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || kill -TERM "$child" 2>/dev/null'
  echo '  fi ) </dev/null >/dev/null 2>&1 &'
  echo "trap 'kill -TERM \$child 2>/dev/null' TERM INT"
  echo 'wait "$child" || wait "$child"'
} >"$WRAPPER"
chmod +x "$WRAPPER"

t_start=$(date +%s)

# ------------------------------------------------------------------ 1. the scripted workload

PORT=${LEAK_PORT:-$((16400 + RANDOM % 1000))}
SDIR=$OUT/server
mkdir -p "$SDIR"
"$WRAPPER" --port "$PORT" --bind 127.0.0.1 --dir "$SDIR" --logfile "$SDIR/redis.log" \
  --save "" --enable-debug-command yes --loadmodule "$MODULE" &
SERVER_PID=$!
BG=()
# Stops the processes this script started that are still running (still children of this
# shell, so that a pid reused by another process is never signalled).
cleanup() {
  local p
  for p in "${BG[@]}" "$SERVER_PID"; do
    [ "$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)" = "$$" ] && kill "$p" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT

cli() { redis-cli -p "$PORT" "$@"; }
# Commands whose reply (often an error) is not checked; redis-cli exits 1 on an error reply.
run() { cli "$@" >/dev/null 2>&1 || true; }
for _ in $(seq 1 300); do
  [ "$(cli PING 2>/dev/null)" = PONG ] && break
  sleep 0.2
done
[ "$(cli PING 2>/dev/null)" = PONG ] || { echo "leak-check: server did not start" >&2; exit 1; }

fail() { echo "leak-check: workload: $*" >&2; exit 1; }
expect() { # expect <wanted output> <command...>
  local want=$1 got
  shift
  got=$(cli "$@" 2>&1 | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "$want" ] || fail "$* -> '$got', expected '$want'"
}
waiters() { cli LOCK.INFO "$1" | sed -n '8p'; }
await_waiters() { # await_waiters <key> <n>
  local i
  for i in $(seq 1 500); do
    [ "$(waiters "$1")" = "$2" ] && return 0
    sleep 0.02
  done
  fail "$1 never had $2 waiters (has '$(waiters "$1")')"
}
# A client blocked in LOCK.ACQUIRE … WAIT, in the background; its reply goes to $OUT/w.<name>.
waiter() { # waiter <key> <token> <timeout>
  redis-cli -p "$PORT" LOCK.ACQUIRE "$1" "$2" 60000 WAIT "$3" >"$OUT/w.$2" 2>&1 &
  BG+=($!)
  LAST_BG=$!
}
await_reply() { # await_reply <token>: the waiter's reply, once it is there
  local i
  for i in $(seq 1 500); do
    [ -s "$OUT/w.$1" ] && { cat "$OUT/w.$1"; return 0; }
    sleep 0.02
  done
  fail "waiter $1 got no reply"
}

ROUNDS=${LEAK_ROUNDS:-2}
LONG=$(head -c 256 /dev/zero | tr '\0' 'x')
for round in $(seq 1 "$ROUNDS"); do
  # Basics, renewal, another token, extend, fence, info, release.
  [ "$(cli LOCK.ACQUIRE a t1 60000)" -gt 0 ] || fail "LOCK.ACQUIRE"
  expect "" LOCK.ACQUIRE a t2 60000
  expect 1 LOCK.EXTEND a t1 30000
  [ "$(cli LOCK.FENCE a t1)" -gt 0 ] || fail "LOCK.FENCE"
  run LOCK.INFO a
  run --resp3 LOCK.INFO a
  expect 0 LOCK.RELEASE a t2
  expect 1 LOCK.RELEASE a t1
  expect "" LOCK.INFO a
  run LOCK.ACQUIRE long "$LONG" 60000
  expect 1 LOCK.RELEASE long "$LONG"
  # Errors: every argument check, wrong type, arity, the internal command.
  run LOCK.ACQUIRE a t 0
  run LOCK.ACQUIRE a t notanumber
  run LOCK.ACQUIRE a "${LONG}y" 100
  run LOCK.ACQUIRE a "" 100
  run LOCK.ACQUIRE a t 100 WAIT -1
  run LOCK.ACQUIRE a t 100 WAIT 5 WAIT 5
  run LOCK.ACQUIRE a t 100 NX
  run LOCK.EXTEND a t 99999999999999
  run LOCK.FENCE a
  run LOCK.INFO a b
  run LOCK.APPLY a t 1 1
  run SET str x
  run LOCK.ACQUIRE str t 100
  run LOCK.INFO str
  # Lease ends, with and without a waiter.
  run LOCK.ACQUIRE e t 50
  run LOCK.ACQUIRE g holder 300
  waiter g gw 0
  await_waiters g 1
  [ "$(await_reply gw)" -gt 0 ] || fail "lease-end grant"
  expect 1 LOCK.RELEASE g gw
  expect "" LOCK.INFO e
  # A queue: FIFO grants on release, a timeout, a disconnect.
  run LOCK.ACQUIRE q holder 60000
  waiter q w1 0; await_waiters q 1
  waiter q w2 0; await_waiters q 2
  waiter q gone 0; await_waiters q 3; kill "$LAST_BG"; await_waiters q 2
  waiter q late 100; sleep 1; await_waiters q 2
  [ -z "$(cat "$OUT/w.late")" ] || fail "timed-out waiter: $(cat "$OUT/w.late")"
  waiter q w3 0; await_waiters q 3
  waiter q w4 0; await_waiters q 4
  waiter q w5 0; await_waiters q 5
  expect 1 LOCK.RELEASE q holder
  [ "$(await_reply w1)" -gt 0 ] || fail "grant on release"
  # Waiters of a deleted (or reloaded) lock are answered null.
  run DEL q
  for w in w2 w3 w4 w5; do [ -z "$(await_reply $w)" ] || fail "$w after DEL"; done
  for how in UNLINK FLUSHALL "FLUSHALL ASYNC" SET; do
    run LOCK.ACQUIRE q holder 60000
    waiter q x 0; await_waiters q 1
    if [ "$how" = SET ]; then run SET q overwritten; else run $how $([ "$how" = UNLINK ] && echo q); fi
    [ -z "$(await_reply x)" ] || fail "waiter after $how"
    run DEL q
  done
  # DEBUG RELOAD with a queue (the lock survives, its waiter is answered null); MULTI.
  run LOCK.ACQUIRE r holder 60000
  waiter r rw 0; await_waiters r 1
  expect OK DEBUG RELOAD
  [ -z "$(await_reply rw)" ] || fail "waiter after DEBUG RELOAD"
  [ "$(cli LOCK.INFO r | sed -n 2p)" = holder ] || fail "lock lost in DEBUG RELOAD"
  waiter r rw2 0; await_waiters r 1
  printf 'MULTI\nLOCK.ACQUIRE r other 1000 WAIT 0\nEXEC\n' | cli >/dev/null 2>&1 || true
  expect 1 LOCK.RELEASE r holder
  [ "$(await_reply rw2)" -gt 0 ] || fail "grant after DEBUG RELOAD"
  # DUMP/RESTORE, good and corrupt; COPY, RENAME, MOVE.
  run LOCK.ACQUIRE d t 60000
  cli DUMP d | head -c -1 >"$OUT/dump.bin"
  [ -s "$OUT/dump.bin" ] || fail "DUMP of a lock"
  cli -x RESTORE d2 0 <"$OUT/dump.bin" >/dev/null || fail "RESTORE of a DUMP"
  head -c -3 "$OUT/dump.bin" | cli -x RESTORE d3 0 >/dev/null 2>&1 || true
  run LOCK.INFO d2
  run COPY d d4
  run RENAME d4 d5
  run MOVE d5 1
  run -n 1 LOCK.RELEASE d5 t
  # Guarded writes: runs (RESP2 and RESP3, an inner error), refusals by fence, by command and
  # by ACL, COMMAND GETKEYS (the getkeys-api path), MULTI.
  f=$(cli LOCK.ACQUIRE gk t 60000)
  expect OK LOCK.GUARD gk "$f" SET gd v
  run --resp3 LOCK.GUARD gk "$f" HGETALL gh
  run LOCK.GUARD gk "$f" INCR gd
  run LOCK.GUARD gk 1 SET gd w
  run LOCK.GUARD gk "$((f + 1))" SET gd w
  run LOCK.GUARD nolock "$f" SET gd w
  run LOCK.GUARD gk "$f" BLPOP gl 0
  run LOCK.GUARD gk "$f" MULTI
  run LOCK.GUARD gk "$f" LOCK.RELEASE gk t
  run LOCK.GUARD gk "$f" NOSUCHCOMMAND
  run LOCK.GUARD gk "$f" SET gd
  run LOCK.GUARD gk 0 SET gd v
  run LOCK.GUARD gk "$f" CLIENT KILL ID 999999
  run COMMAND GETKEYS LOCK.GUARD gk "$f" MSET ga 1 gb 2
  run COMMAND GETKEYS LOCK.GUARD gk "$f" LOCK.GUARD gk "$f" GET ga
  run ACL SETUSER gu on nopass +lock.guard +get '~*'
  run --user gu --pass x LOCK.GUARD gk "$f" SET gd v
  run --user gu --pass x LOCK.GUARD gk "$f" GET gd
  run ACL DELUSER gu
  printf 'MULTI\nLOCK.GUARD gk %s SET gd m\nLOCK.GUARD gk 1 SET gd n\nEXEC\n' "$f" | cli >/dev/null 2>&1 || true
  expect 1 LOCK.RELEASE gk t
  # Shared holds: joins under limits, a queue of both kinds granted together on release,
  # a downgrade, a refused upgrade, per-hold lease ends, HOLDERS, DUMP/RESTORE, DEBUG RELOAD.
  run LOCK.ACQUIRE sh r1 60000 SHARED
  run LOCK.ACQUIRE sh r2 60000 SHARED LIMIT 3
  run LOCK.ACQUIRE sh r3 60000 SHARED LIMIT 2
  run LOCK.ACQUIRE sh r1 60000
  run LOCK.ACQUIRE sh r4 60000 SHARED LIMIT 0
  run --resp3 LOCK.HOLDERS sh
  run LOCK.HOLDERS sh
  run LOCK.FENCE sh r2
  run LOCK.EXTEND sh r1 30000
  run LOCK.ACQUIRE sx w 60000
  waiter sx sw1 0; await_waiters sx 1
  redis-cli -p "$PORT" LOCK.ACQUIRE sx sr1 60000 SHARED WAIT 0 >"$OUT/w.sr1" 2>&1 &
  BG+=($!); await_waiters sx 2
  redis-cli -p "$PORT" LOCK.ACQUIRE sx sr2 60000 SHARED WAIT 0 >"$OUT/w.sr2" 2>&1 &
  BG+=($!); await_waiters sx 3
  expect 1 LOCK.RELEASE sx w
  [ "$(await_reply sw1)" -gt 0 ] || fail "exclusive grant"
  run LOCK.ACQUIRE sx sw1 60000 SHARED
  [ "$(await_reply sr1)" -gt 0 ] || fail "shared grant after a downgrade"
  [ "$(await_reply sr2)" -gt 0 ] || fail "shared grants together"
  run LOCK.ACQUIRE se a 50 SHARED
  run LOCK.ACQUIRE se b 60000 SHARED
  sleep 0.2
  run LOCK.HOLDERS se
  cli DUMP sh | head -c -1 >"$OUT/dump-shared.bin"
  cli -x RESTORE sh2 0 <"$OUT/dump-shared.bin" >/dev/null || fail "RESTORE of a shared DUMP"
  run DEBUG RELOAD
  run LOCK.GUARD sh 1 SET gd v
  for t in r1 r2 r3; do run LOCK.RELEASE sh "$t"; done
  run DEL sh2 sx se
  # Keyspace events, configuration, persistence.
  run CONFIG SET notify-keyspace-events KEA
  run LOCK.ACQUIRE n t 60000
  run LOCK.FENCE n t
  run LOCK.RELEASE n t
  run CONFIG SET notify-keyspace-events ""
  run CONFIG SET lock.max-ttl 1000
  run LOCK.ACQUIRE m t 5000
  run CONFIG SET lock.max-ttl 86400000
  run INFO lock
  run MEMORY USAGE d
  expect OK SAVE
  run CONFIG SET appendonly yes
  sleep 2
  run BGREWRITEAOF
  sleep 2
  run CONFIG SET appendonly no
  run FLUSHALL
  echo "leak-check: workload round $round done"
done
# Leave some state for shutdown: held locks and a queued waiter (freed at exit, not leaked).
cli LOCK.ACQUIRE z holder 60000 >/dev/null
waiter z zw 0
await_waiters z 1
cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
wait "$SERVER_PID" || true
t_workload=$(($(date +%s) - t_start))

# ------------------------------------------------------------- 2. integration tests under it

tests_status="skipped"
if [ -n "$LEAK_TESTS" ]; then
  skips=()
  for t in $LEAK_SKIP; do skips+=(--skip "$t"); done
  echo "leak-check: integration tests under valgrind: $LEAK_TESTS"
  : >"$OUT/tests.log"
  rc=0
  set +e
  # One cargo run per test binary, as each may have a filter of its own (`binary:filter`).
  for t in $LEAK_TESTS; do
    bin=${t%%:*}
    filter=()
    [ "$bin" != "$t" ] && filter=("${t#*:}")
    REDIS_SERVER=$WRAPPER REDIS_LOCK_MODULE=$MODULE \
      MODEL_OPS=${MODEL_OPS:-300} FUZZ_RESTORES=${FUZZ_RESTORES:-300} \
      cargo test --profile itest --no-fail-fast --test "$bin" -- --test-threads=2 "${filter[@]}" "${skips[@]}" >>"$OUT/tests.log" 2>&1 || rc=1
  done
  set -e
  tests_status=$(grep -E '^test result:' "$OUT/tests.log" | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}')
  [ $rc -eq 0 ] || tests_status="$tests_status (timing under valgrind; see $OUT/tests.log)"
fi

# Every valgrind process writes its report when it exits; wait for those still running.
incomplete=0
for _ in $(seq 1 600); do
  pending=0 incomplete=0
  for f in "$OUT"/vg.*.log; do
    grep -q 'ERROR SUMMARY' "$f" && continue
    pid=${f##*/vg.}
    pid=${pid%.log}
    if kill -0 "$pid" 2>/dev/null; then pending=$((pending + 1)); else incomplete=$((incomplete + 1)); fi
  done
  [ $pending -eq 0 ] && break
  sleep 0.5
done
t_total=$(($(date +%s) - t_start))

# ----------------------------------------------------------------------------- the figures

# One record per loss record or error: its first line, then the stack up to a blank line.
summary=$(awk '
  function flush() {
    if (kind != "") {
      mod = (stack ~ /redis_lock::|redis_module::|libredis_lock\.so/)
      key = kind (mod ? "_module" : "_other")
      bytes[key] += b; blocks[key] += n; records[key]++
    }
    kind = ""; stack = ""
  }
  /==[0-9]+== *$/ { flush(); next }
  /are definitely lost in loss record/ { flush(); kind = "definite"; b = $2; n = $5; gsub(/,/, "", b); gsub(/[(),]/, "", n); next }
  /are indirectly lost in loss record/ { flush(); kind = "indirect"; b = $2; n = $5; gsub(/,/, "", b); gsub(/[(),]/, "", n); next }
  /are possibly lost in loss record/   { flush(); kind = "possible"; b = $2; n = $5; gsub(/,/, "", b); gsub(/[(),]/, "", n); next }
  /== (Invalid (read|write|free)|Conditional jump|Use of uninitialised|Syscall param|Mismatched free|Source and destination overlap)/ {
    flush(); kind = "error"; b = 0; n = 1; next }
  { if (kind != "") stack = stack "\n" $0 }
  /definitely lost:/ { x = $4; gsub(/,/, "", x); tot_def += x }
  /indirectly lost:/ { x = $4; gsub(/,/, "", x); tot_ind += x }
  END {
    flush()
    printf "definite_module_bytes=%d definite_module_blocks=%d\n", bytes["definite_module"], blocks["definite_module"]
    printf "indirect_module_bytes=%d indirect_module_blocks=%d\n", bytes["indirect_module"], blocks["indirect_module"]
    printf "possible_module_bytes=%d possible_module_blocks=%d\n", bytes["possible_module"], blocks["possible_module"]
    printf "errors_module=%d errors_other=%d\n", records["error_module"], records["error_other"]
    printf "definite_total_bytes=%d indirect_total_bytes=%d\n", tot_def, tot_ind
    printf "definite_other_bytes=%d definite_other_blocks=%d\n", bytes["definite_other"], blocks["definite_other"]
  }' "$OUT"/vg.*.log)
eval "$summary"
reports=$(ls "$OUT"/vg.*.log | wc -l)
allocs=$(grep -h 'total heap usage' "$OUT"/vg.*.log | awk '{gsub(/,/, "", $5); s += $5} END {print s + 0}')

echo
echo "leak-check: $reports redis-server processes under valgrind, $allocs heap allocations;" \
     "workload ${t_workload}s, total ${t_total}s; integration tests: $tests_status"
echo "  attributable to the module (a frame in redis_lock::, redis_module:: or libredis_lock.so):"
echo "    definitely lost: $definite_module_bytes bytes in $definite_module_blocks blocks"
echo "    indirectly lost: $indirect_module_bytes bytes in $indirect_module_blocks blocks"
echo "    possibly lost:   $possible_module_bytes bytes in $possible_module_blocks blocks (informational)"
echo "    memcheck errors: $errors_module"
echo "  whole server: definitely lost $definite_total_bytes bytes, indirectly lost $indirect_total_bytes bytes;" \
     "memcheck errors without a module frame: $errors_other"
echo "  logs: $OUT/vg.*.log ($incomplete ended without a report, e.g. a server that could not bind its port)"
if [ "$definite_module_blocks" -gt 0 ] || [ "$indirect_module_blocks" -gt 0 ] || [ "$errors_module" -gt 0 ]; then
  echo "leak-check: FAILED (see the loss records and errors with redis_lock frames in the logs)"
  exit 1
fi
echo "leak-check: no leak and no memory error from the module"
