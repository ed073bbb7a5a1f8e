//! Fences never go backwards, and locks survive RDB, AOF, DEBUG RELOAD, DUMP/RESTORE and
//! MIGRATE exactly (holder, remaining lease, fence).
//!
//! Files: `fences` (fences on a live server, across release, lease end and key removal),
//! `restarts` (RDB and AOF restarts, `DEBUG RELOAD`, a lease that ended while the server was
//! down, a crash back to an older RDB), `dump_restore_migrate` (`DUMP`/`RESTORE` and `MIGRATE`)
//! and `corrupted_payloads` (`RESTORE` payloads that are damaged or hold bad module data); here
//! the helpers they share.

#[path = "../common/mod.rs"]
mod common;

mod corrupted_payloads;
mod dump_restore_migrate;
mod fences;
mod restarts;

use std::time::Duration;

use common::LockInfo;
use redis::Value;

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

fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    match cmd!(c, "DUMP", key) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}
