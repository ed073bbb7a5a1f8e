//! Shared holds, one key at a time (docs/commands.md, `LOCK.ACQUIRE … SHARED [LIMIT n]` and
//! `LOCK.HOLDERS`), against a real server: which requests are compatible, what `LIMIT n`
//! admits and refuses, per-holder leases, downgrade and the refused upgrade, `LOCK.RELEASE` /
//! `LOCK.EXTEND` / `LOCK.FENCE` on the caller's hold only, the `LOCK.INFO` and `LOCK.HOLDERS`
//! replies in RESP2 and RESP3, and `LOCK.GUARD` on a shared key. The queue across kinds, `LIMIT`
//! under contention and the server's keyspace rules for shared keys are in `tests/shared_queue/`.
//!
//! Files: `compatibility` (which requests are compatible, `LIMIT n`), `each_hold` (per-holder
//! leases, downgrade and upgrade, the commands on the caller's hold), `replies` (`LOCK.INFO`
//! and `LOCK.HOLDERS`) and `guard`; here the timings and the acquire helpers they share.

#[path = "../common/mod.rs"]
mod common;

mod compatibility;
mod each_hold;
mod guard;
mod many_holds;
mod repeated_tokens;
mod replies;

use std::time::Duration;

use common::holds::{acquire_with, holders, Hold};
use redis::{Connection, Value};

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

/// A fence (`Some`) or null (`None`); panics on anything else.
#[track_caller]
fn fence_or_nil(r: Result<Value, String>, what: &str) -> Option<i64> {
    match r {
        Ok(Value::Int(f)) if f > 0 => Some(f),
        Ok(Value::Nil) => None,
        other => panic!("{what}: expected a fence or null, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token ttl SHARED opts…`: `Some(fence)` or `None`.
#[track_caller]
fn try_shared(
    con: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    opts: &[&str],
) -> Option<i64> {
    let mut all = vec!["SHARED"];
    all.extend_from_slice(opts);
    let what = format!("LOCK.ACQUIRE {key} {token} {ttl} {}", all.join(" "));
    fence_or_nil(acquire_with(con, key, token, ttl, &all), &what)
}

/// A shared acquire that must be granted: its fence.
#[track_caller]
fn shared(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    try_shared(con, key, token, ttl, &[])
        .unwrap_or_else(|| panic!("{token}: SHARED on {key} must be granted"))
}

/// An exclusive acquire that must be granted: its fence.
#[track_caller]
fn exclusive(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    common::acquire(con, key, token, ttl)
        .unwrap_or_else(|| panic!("{token}: exclusive on {key} must be granted"))
}

/// `LOCK.HOLDERS key`, which must not be null.
#[track_caller]
fn holds(con: &mut Connection, key: &str) -> Vec<Hold> {
    holders(con, key).unwrap_or_else(|| panic!("LOCK.HOLDERS {key}: null, the key must exist"))
}
