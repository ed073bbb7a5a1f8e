//! Fences that never go backwards (docs/guarantees.md, guarantee 4) where the high-water mark is
//! not in memory: a crash after a burst at full rate, a restart right after a crash, fences far
//! above the clock floor brought in by `RESTORE`, replicas and AOF replays that learn fences from
//! `LOCK.APPLY`, AOF rewrites with and without the RDB preamble, and the pacing of fences that all
//! of it rests on. And the lease a `RESTORE` gives: the time the lock had left when dumped.
//!
//! A fence is the least value of its master's epoch (its low 2 bits: src/fence.rs, "Epochs")
//! from `max(last + 1, high_water + 1, unix_ms << 11)` up. Fences come from a bucket of 8
//! milliseconds' worth (8 × 512 = 4,096 fences, 16,384 of the floor's slots) that refills at
//! 512 a millisecond of the wall clock; an empty bucket answers `TRYAGAIN`. So a fence is
//! never more than 8 ms of floor ahead of the clock it was issued at, and a server that
//! (re)started issues no fence until its clock is 9 ms past the moment the module loaded
//! (the module waits that out while it loads; a command that met the wait would get
//! `TRYAGAIN`): its first fence is above every fence issued before a crash. An RDB stores
//! the high-water mark with the time it was saved, and a load raises the mark to `saved +
//! 16,384 + 2,048 × (ms since the save + 1)`. Fences are accepted from outside (`RESTORE`,
//! RDB, `LOCK.APPLY`) up to
//! 2^53-1-2^32, so that the server always has fences left to issue.
//!
//! Payloads are built by `common::dump` (type id and RDB version copied from a real `DUMP`):
//! a lock of encoding version 3 (and 4, which changed only the aux data) is saved_at (Unix ms), mode, the key's last fence and its
//! holds, each token, deadline (Unix ms), fence; version 2 is token, deadline, fence,
//! saved_at; version 1 has no saved_at and an absolute deadline.
//!
//! Tests: `live` (fences on a live server, across release, lease end and key removal),
//! `crash_after_burst`, `bucket_pacing`, `fences_from_outside`, `aof_rewrites` and
//! `restored_leases`; their helpers: `clock`, `retries`, `raw_replies`, `payloads`, `bursts`.

#[path = "../common/mod.rs"]
mod common;

mod aof_rewrites;
mod bucket_pacing;
mod bursts;
mod clock;
mod crash_after_burst;
mod fences_from_outside;
mod live;
mod payloads;
mod raw_replies;
mod restored_leases;
mod retries;

use std::time::Duration;

const COUNTER_BITS: u32 = 11;
/// How far a millisecond moves the clock floor of fences.
const SLOTS_PER_MS: i64 = 1 << COUNTER_BITS;
/// A fence's low bits carry its master's epoch (src/fence.rs, "Epochs"): each fence takes
/// this many of the floor's slots.
const EPOCHS: i64 = 4;
/// Fences a millisecond, sustained.
const PER_MS: i64 = SLOTS_PER_MS / EPOCHS;
/// How many milliseconds' worth of fences a burst may take ahead of the clock.
const BURST_MS: i64 = 8;
/// A full bucket: the most fences a burst takes at once.
const BUCKET: i64 = BURST_MS * PER_MS;
/// The largest fence (the largest integer a double holds exactly), and the largest one
/// accepted from outside.
const MAX_FENCE: i64 = (1 << 53) - 1;
const TOP: i64 = MAX_FENCE - (1 << 32);
const HOUR_MS: i64 = 3_600_000;
const TRYAGAIN: &str = "TRYAGAIN fences are issued at most 512 a millisecond; retry";
/// How far the module's wall clock (derived from the monotonic one, re-synchronised ten
/// times a second) may be off the server's `TIME`, in milliseconds.
const CLOCK_SLACK_MS: i64 = 1;
/// Longer than the time after a start in which the module issues no fence (`BURST_MS` + 1
/// ms past its load; a server answers its first command after that).
const START_GUARD: Duration = Duration::from_millis(12);
