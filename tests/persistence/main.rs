//! Locks survive RDB, AOF, DEBUG RELOAD, DUMP/RESTORE and MIGRATE exactly (holder, remaining
//! lease, fence). (Fences on a live server are in `tests/fences/live.rs`; replicas in
//! `tests/replication/`.)
//!
//! Files: `restarts` (RDB and AOF restarts, `DEBUG RELOAD`, a lease that ended while the server was
//! down, a crash back to an older RDB), `dump_restore_migrate` (`DUMP`/`RESTORE` and `MIGRATE`)
//! and `corrupted_payloads` (`RESTORE` payloads that are damaged or hold bad module data); `shared/`
//! the same trips for shared holds; here the helpers they share.

#[path = "../common/mod.rs"]
mod common;

mod corrupted_payloads;
mod dump_restore_migrate;
mod restarts;
mod shared;

use std::time::Duration;

use common::LockInfo;

/// Checks that `after` (read `elapsed` after `before`) is the same lease.
#[track_caller]
fn assert_survived(before: &LockInfo, after: Option<LockInfo>, elapsed: Duration) {
    let after = after.expect("lock key lost");
    assert_eq!(after.holder, before.holder, "holder");
    assert_eq!(after.fence, before.fence, "fence");
    let expect = before.ttl - elapsed.as_millis() as i64;
    assert!(
        (after.ttl - expect).abs() <= 150,
        "remaining lease {} but expected {expect} (±150) ({} before, {elapsed:?} later)",
        after.ttl,
        before.ttl
    );
}
