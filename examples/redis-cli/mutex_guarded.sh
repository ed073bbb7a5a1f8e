#!/usr/bin/env bash
# A mutex with guarded writes, in raw commands: acquire, write through LOCK.GUARD, release.
# A holder that comes back after the lock has passed on is refused by the server itself.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
lock='{example:order}:lock' data='{example:order}:data' # one hash tag: one cluster slot
run DEL "$lock" "$data" # a clean slate

token=$(cat /proc/sys/kernel/random/uuid) # a fresh token per acquisition
run LOCK.ACQUIRE "$lock" "$token" 30000 WAIT 5000 # 30 s lease; wait up to 5 s in the queue
expect "(integer) *"
fence=$(integer) # goes with every write the lock protects
run LOCK.GUARD "$lock" "$fence" HSET "$data" status paid # the fence is current: HSET runs
expect "(integer) 1"
run LOCK.ACQUIRE "$lock" another-token 30000 # held: anyone else gets null at once
expect "(nil)"
run LOCK.RELEASE "$lock" "$token"
expect "(integer) 1"

# Someone else takes the lock; it comes with a larger fence.
run LOCK.ACQUIRE "$lock" next-holder 30000
expect "(integer) *"
(( $(integer) > fence )) || { echo "FAILED: fences only go up" >&2; exit 1; }
# The first holder, late (it paused past its lease, say), writes with its old fence:
run LOCK.GUARD "$lock" "$fence" HSET "$data" status refunded
expect "(error) FENCED the lock is held under a newer fence"
run HGET "$data" status # nothing ran
expect '"paid"'
run LOCK.RELEASE "$lock" next-holder
expect "(integer) 1"
run LOCK.GUARD "$lock" "$fence" HSET "$data" status refunded # nobody holds it now
expect "(error) FENCED the lock is not held"
echo ok
