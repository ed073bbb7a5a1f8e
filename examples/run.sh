#!/usr/bin/env bash
# Runs every example against a real server: starts a redis-server with the module on a free
# loopback port of 50000-50999, runs the Python, Rust and redis-cli examples against it (each
# exits non-zero if what it shows did not happen), prints one line per example and a count,
# and stops the server. Exits non-zero if any example failed.
#
#   bash examples/run.sh               # all of them
#   bash examples/run.sh python lost   # only the examples whose path contains a word given
#   EXAMPLES_VERBOSE=1 bash examples/run.sh   # each example's output too (failures: always)
#
# Needs the module built (`make build`; REDIS_LOCK_MODULE overrides its path), redis-server and
# redis-cli (7.0+), python3 with venv, and cargo. Python runs in the venv that
# clients/python/run-tests.sh makes (target/clients/python-redis-8.1.0) if there is one, else
# in target/clients/examples-venv, made here; either way on the checkout's client
# (PYTHONPATH=clients/python/src). The Rust examples build in the dev profile.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
module=${REDIS_LOCK_MODULE:-$repo/target/release/libredis_lock.so}
[ -f "$module" ] || { echo "run.sh: no module at $module: run 'make build' first" >&2; exit 2; }
for tool in redis-server redis-cli python3 cargo; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing" >&2; exit 2; }
done
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); } # bash 5
started=$(now_ms)

# -- the examples, filtered by the arguments --------------------------------------------------
examples=()
for name in mutex_guarded rwlock semaphore lost_lock election; do examples+=("python/$name.py"); done
for name in mutex_guarded rwlock semaphore lost_lock; do examples+=("rust/$name"); done
for name in mutex_guarded rwlock semaphore; do examples+=("redis-cli/$name.sh"); done
if [ $# -gt 0 ]; then
  chosen=()
  for example in "${examples[@]}"; do
    for word in "$@"; do
      if [[ $example == *"$word"* ]]; then chosen+=("$example"); break; fi
    done
  done
  examples=("${chosen[@]}")
  [ ${#examples[@]} -gt 0 ] || { echo "run.sh: no example matches: $*" >&2; exit 2; }
fi

# -- the server --------------------------------------------------------------------------------
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for _ in $(seq 20); do
  port=$((50000 + RANDOM % 1000))
  in_use "$port" && continue
  redis-server --bind 127.0.0.1 --port "$port" --dir "$tmp" --save '' --appendonly no \
    --logfile "$tmp/redis.log" --loadmodule "$module" &
  server_pid=$!
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break 2
    kill -0 "$server_pid" 2>/dev/null || break # exited: the port was taken after all
    sleep 0.05
  done
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
done
if [ -z "$server_pid" ]; then
  echo "run.sh: could not start redis-server with $module" >&2
  tail -n 20 "$tmp/redis.log" >&2 2>/dev/null || true
  exit 1
fi
export REDIS_URL=redis://127.0.0.1:$port
version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
echo "redis-server $version on $REDIS_URL (pid $server_pid)"

# -- what the examples run in -------------------------------------------------------------------
python=
if [[ " ${examples[*]} " == *" python/"* ]]; then
  venv=$repo/target/clients/python-redis-8.1.0
  if ! "$venv/bin/python" -c 'import redis' 2>/dev/null; then
    venv=$repo/target/clients/examples-venv
    if ! "$venv/bin/python" -c 'import redis' 2>/dev/null; then
      echo "making $venv"
      python3 -m venv "$venv"
      PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q "$repo/clients/python"
    fi
  fi
  python=$venv/bin/python
fi
rust_bin=
rust_build_failed=
if [[ " ${examples[*]} " == *" rust/"* ]]; then
  if (cd "$repo" && cargo build -q -p redis-lock-examples --bins) >"$tmp/cargo.log" 2>&1; then
    rust_bin=$(cd "$repo" && cargo metadata -q --format-version 1 --no-deps |
      sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug
  else
    rust_build_failed=1
  fi
fi

# -- run ------------------------------------------------------------------------------------------
passed=0 failed=0
for example in "${examples[@]}"; do
  case $example in
    python/*) command=(env PYTHONPATH="$repo/clients/python/src" PYTHONDONTWRITEBYTECODE=1
      "$python" "$here/$example") ;;
    rust/*) command=("$rust_bin/${example#rust/}") ;;
    redis-cli/*) command=(bash "$here/$example") ;;
  esac
  t0=$(now_ms)
  if [[ $example == rust/* && -n $rust_build_failed ]]; then
    status=1
    cp "$tmp/cargo.log" "$tmp/out"
    echo "(cargo build -p redis-lock-examples failed: see above)" >"$tmp/cargo.log"
  else
    status=0
    timeout 30 "${command[@]}" >"$tmp/out" 2>&1 </dev/null || status=$?
  fi
  ms=$(( $(now_ms) - t0 ))
  took=$((ms / 1000)).$((ms % 1000 / 100))
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    printf 'ok      %-28s %5s s\n' "$example" "$took"
    [ -z "${EXAMPLES_VERBOSE:-}" ] || sed 's/^/        /' "$tmp/out"
  else
    failed=$((failed + 1))
    printf 'FAILED  %-28s %5s s (exit %s)\n' "$example" "$took" "$status"
    sed 's/^/        /' "$tmp/out"
  fi
done
echo "$passed passed, $failed failed ($(( ($(now_ms) - started + 500) / 1000 )) s)"
[ "$failed" -eq 0 ]
