#!/usr/bin/env bash
# A read-write lock, in raw commands: readers take SHARED holds together; a writer waits in
# the key's queue until they release, and holds back the readers that come after it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
lock='{example:catalog}:lock' data='{example:catalog}:prices'
run DEL "$lock"
writer_reply=$(mktemp)
trap 'rm -f "$writer_reply"' EXIT

run LOCK.ACQUIRE "$lock" reader-1 30000 SHARED
expect "(integer) *"
reader_fence=$(integer)
run LOCK.ACQUIRE "$lock" reader-2 30000 SHARED # at the same time, with a fence of its own
expect "(integer) *"
run LOCK.GUARD "$lock" "$reader_fence" SET "$data" v2 # a shared hold guards no write
expect "(error) FENCED the lock is held shared"

# The writer waits in the queue: WAIT blocks its connection as BLPOP would, so in the background.
echo "> LOCK.ACQUIRE $lock writer 30000 WAIT 5000    (in the background)"
"${cli[@]}" LOCK.ACQUIRE "$lock" writer 30000 WAIT 5000 >"$writer_reply" &
writer=$!
wait_for_waiters "$lock" 1
run LOCK.ACQUIRE "$lock" reader-3 30000 SHARED # held shared, but a writer is queued first
expect "(nil)"
run LOCK.RELEASE "$lock" reader-1
expect "(integer) 1"
run LOCK.RELEASE "$lock" reader-2 # the last reader out: the writer holds it at this instant
expect "(integer) 1"
wait "$writer"
reply=$(cat "$writer_reply")
printf '(the writer'"'"'s reply)\n%s\n' "$reply"
expect "(integer) *"
writer_fence=$(integer)
run LOCK.HOLDERS "$lock"
expect '1) 1) "writer"*"exclusive"'
run LOCK.GUARD "$lock" "$writer_fence" SET "$data" v2
expect "OK"
run LOCK.RELEASE "$lock" writer
expect "(integer) 1"
echo ok
