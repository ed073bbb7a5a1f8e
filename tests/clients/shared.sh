# The read-write lock and semaphore helpers for redis-cli that docs/CLIENTS.md shows;
# tests/clients/ sources this file and runs them (redis_cli_shared_holds).

# locked KEY TTL_MS WAIT_MS [SHARED [LIMIT N]] -- COMMAND [ARG ...]: runs COMMAND holding the
# lock at KEY (alone; with SHARED, with the other SHARED holders; with SHARED LIMIT N, as one
# of N permits), through "${redis_cli[@]}", with the hold's fence in $LOCK_FENCE. Releases
# when COMMAND ends and returns its status. Returns 2, and COMMAND does not run, if the hold
# is not granted within WAIT_MS; other errors: stderr, 1.
locked() {
  local key=$1 ttl=$2 wait=$3 options=() token reply
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  shift # the --
  token=$(cat /proc/sys/kernel/random/uuid) # one fresh token per hold
  reply=$("${redis_cli[@]}" --no-raw \
    LOCK.ACQUIRE "$key" "$token" "$ttl" "${options[@]}" WAIT "$wait")
  case $reply in
    "(integer) "*) ;;
    "(nil)") return 2 ;; # not granted: nothing is held, and there is nothing to release
    "") return 1 ;; # no reply at all: redis-cli said why on stderr
    *) printf '%s\n' "${reply#"(error) "}" >&2; return 1 ;;
  esac
  (
    trap '"${redis_cli[@]}" LOCK.RELEASE "$key" "$token" >/dev/null' EXIT
    LOCK_FENCE=${reply#"(integer) "} "$@"
  )
}

# read_locked KEY TTL_MS WAIT_MS COMMAND [ARG ...]: shared with the other readers; waits for
# a writer that holds the lock or queued first.
read_locked() { locked "$1" "$2" "$3" SHARED -- "${@:4}"; }

# write_locked KEY TTL_MS WAIT_MS COMMAND [ARG ...]: alone; waits until the readers and
# writers that came first have released.
write_locked() { locked "$1" "$2" "$3" -- "${@:4}"; }

# with_permit KEY N TTL_MS WAIT_MS COMMAND [ARG ...]: holding one of N permits of KEY; queues,
# first come first served, while all are taken. Every user of KEY must pass the same N.
with_permit() { locked "$1" "$3" "$4" SHARED LIMIT "$2" -- "${@:5}"; }
