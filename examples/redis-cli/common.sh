# Helpers the redis-cli examples source: each example is a transcript of raw commands.
set -euo pipefail
url=${REDIS_URL:-redis://127.0.0.1:6390}
cli=(redis-cli -u "$url" --no-raw) # --no-raw: replies typed as in the interactive prompt

# run COMMAND [ARG ...]: sends one command, prints it and its reply; the reply is in $reply.
run() {
  reply=$("${cli[@]}" "$@")
  printf '> %s\n%s\n' "$*" "$reply"
}

# expect PATTERN: exits non-zero unless the last reply matches PATTERN, a bash glob (in which
# "*(" would start an extended glob: write "(integer)" after a literal character).
expect() {
  # shellcheck disable=SC2053 # a glob on purpose
  [[ $reply == $1 ]] || { echo "FAILED: expected a reply like '$1'" >&2; exit 1; }
}

# integer: the last reply's integer ("(integer) 42" -> 42).
integer() { printf '%s' "${reply#"(integer) "}"; }

# wait_for_waiters KEY N: waits (up to 5 s) until N clients are queued for the lock at KEY.
wait_for_waiters() {
  local i
  for i in $(seq 500); do
    # LOCK.INFO in raw mode: one field or value per line; the line after "waiters".
    [ "$(redis-cli -u "$url" LOCK.INFO "$1" | sed -n '/^waiters$/{n;p;}')" = "$2" ] && return
    sleep 0.01
  done
  echo "FAILED: $2 clients never queued for $1" >&2
  exit 1
}
