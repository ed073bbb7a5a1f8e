//! Shared holds, one key at a time (docs/commands.md, `LOCK.ACQUIRE … SHARED [LIMIT n]` and
//! `LOCK.HOLDERS`), against a real server: which requests are compatible, what `LIMIT n`
//! admits and refuses, per-holder leases, downgrade and the refused upgrade, `LOCK.RELEASE` /
//! `LOCK.EXTEND` / `LOCK.FENCE` on the caller's hold only, the `LOCK.INFO` and `LOCK.HOLDERS`
//! replies in RESP2 and RESP3. The queue across kinds, `LIMIT` under contention and the
//! server's keyspace rules for shared keys are in `tests/queue/shared/`; `LOCK.GUARD` on a
//! shared key is in `tests/guard/shared_holds.rs`.
//!
//! Files: `compatibility` (which requests are compatible, `LIMIT n`), `each_hold` (per-holder
//! leases, downgrade and upgrade, the commands on the caller's hold), `replies` (`LOCK.INFO`
//! and `LOCK.HOLDERS`), `many_holds` and `repeated_tokens`; here the timings they share (the
//! acquire helpers are `common::holds`'s).

mod compatibility;
mod each_hold;
mod many_holds;
mod repeated_tokens;
mod replies;

use std::time::Duration;

use crate::common::holds::{holders, Hold};
use redis::Connection;

/// "At once": a reply caused by a change made just now arrives within this.
const AT_ONCE: Duration = Duration::from_millis(300);
/// A change due at a deadline (a lease end) is seen within this after it.
const LATE: Duration = Duration::from_millis(250);
/// How long a request that must stay queued is watched for a reply it must not get.
const QUIET: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;
const UPGRADE: &str =
    "ERR the token holds the lock shared: release it to take it exclusively (no upgrades)";

// ------------------------------------------------------------------------------- helpers

pub(crate) use crate::common::holds::{exclusive, fence_or_nil, shared, try_shared};

/// `LOCK.HOLDERS key`, which must not be null.
#[track_caller]
fn holds(con: &mut Connection, key: &str) -> Vec<Hold> {
    holders(con, key).unwrap_or_else(|| panic!("LOCK.HOLDERS {key}: null, the key must exist"))
}
