# The guarded-write helper for redis-cli that docs/CLIENTS.md shows; tests/clients/ sources
# this file and runs it (redis_cli_flow).

# guarded LOCK_KEY FENCE COMMAND [ARG ...]: runs COMMAND only while FENCE is the current fence
# of the lock at LOCK_KEY, through "${redis_cli[@]}" (say redis_cli=(redis-cli -p 6390)).
# Prints the command's reply and returns 0; if the lock is not held under FENCE any more,
# nothing ran: prints the FENCED error on stderr and returns 3. Other errors: stderr, 1.
guarded() {
  local reply
  reply=$("${redis_cli[@]}" --no-raw LOCK.GUARD "$@")
  case $reply in
    "") return 1 ;; # no reply at all: redis-cli said why on stderr
    "(error) FENCED "*) printf '%s\n' "${reply#"(error) "}" >&2; return 3 ;;
    "(error) "*) printf '%s\n' "${reply#"(error) "}" >&2; return 1 ;;
  esac
  printf '%s\n' "$reply"
}
