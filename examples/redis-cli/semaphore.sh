#!/usr/bin/env bash
# A semaphore of 2 permits, in raw commands: SHARED LIMIT 2 lets two holders in; a third
# waits in the queue and is granted the moment a permit comes back, by a release or, for a
# holder that crashed, by the end of its lease.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
key=example:api-calls # every user of the key passes the same LIMIT
run DEL "$key"
third_reply=$(mktemp)
trap 'rm -f "$third_reply"' EXIT

run LOCK.ACQUIRE "$key" caller-1 30000 SHARED LIMIT 2
expect "(integer) *"
run LOCK.ACQUIRE "$key" caller-2 30000 SHARED LIMIT 2
expect "(integer) *"
run LOCK.ACQUIRE "$key" caller-3 30000 SHARED LIMIT 2 # both permits taken
expect "(nil)"

echo "> LOCK.ACQUIRE $key caller-3 30000 SHARED LIMIT 2 WAIT 5000    (in the background)"
"${cli[@]}" LOCK.ACQUIRE "$key" caller-3 30000 SHARED LIMIT 2 WAIT 5000 >"$third_reply" &
third=$!
wait_for_waiters "$key" 1
run LOCK.RELEASE "$key" caller-1 # a permit comes back: caller-3 gets it at this instant
expect "(integer) 1"
wait "$third"
reply=$(cat "$third_reply")
printf '(caller-3'"'"'s reply)\n%s\n' "$reply"
expect "(integer) *"
run LOCK.HOLDERS "$key"
expect '1) 1) "caller-2"*2) 1) "caller-3"*'

# caller-2 crashes: its lease (cut to 200 ms here, to keep the example short) ends on its own.
run LOCK.EXTEND "$key" caller-2 200
expect "(integer) 1"
sleep 0.3
run LOCK.ACQUIRE "$key" caller-4 30000 SHARED LIMIT 2 # the crashed holder's permit is free
expect "(integer) *"
run LOCK.INFO "$key"
expect '*"mode"*"shared"*12) (integer) 2' # two holders
run LOCK.RELEASE "$key" caller-3
expect "(integer) 1"
run LOCK.RELEASE "$key" caller-4
expect "(integer) 1"
echo ok
