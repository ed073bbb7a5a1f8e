//! Shared holds survive every way a dataset is saved, loaded, moved and replicated (issue 13,
//! "Persistence"; docs/operations.md, "Persistence and replication details"):
//!
//! - the RDB file and the multi-part AOF written by the module before shared holds (lock
//!   encoding version 2, `LOCK.APPLY` without `SHARED`), committed under `tests/fixtures/`
//!   (how they were made: `tests/fixtures/README.md`), still load, with every holder, fence and
//!   lease;
//! - keys with several shared holders, an exclusive key, a `LIMIT` semaphore with waiters, a
//!   downgraded key and a key whose holds were all released go through `SAVE` + restart, the
//!   AOF with and without the RDB preamble (replayed, and rewritten by `BGREWRITEAOF`),
//!   `DEBUG RELOAD`, `DUMP`/`RESTORE` and `MIGRATE` to another server, a replica's full sync,
//!   live replication of each kind of change, and promotion of the replica;
//! - every time, `LOCK.HOLDERS` (tokens, fences, mode, grant order) is the same, each hold's
//!   remaining lease is the one it had (within [`SLACK_MS`] of the time measured between the
//!   readings), `LOCK.INFO` agrees (its fence too: the key's last fence, which may be above
//!   every live hold's), waiters are not carried, and every fence issued afterwards is above
//!   every fence issued before (on that server; for a key moved alone, above that key's).
//!
//! Where two servers must hold the same state (master and replica), the `DUMP` of each key is
//! also decoded and compared hold by hold: the saved layout of encoding version 3 is described
//! at the top of `src/persistence.rs` (save time, mode, the key's last fence, then each hold's
//! token, absolute deadline and fence, in grant order). That is what shows that a shared
//! hold's lease end reached the replica: its reads hide an ended hold by its own clock either
//! way.
//!
//! Submodules: `v2_fixtures`, `snapshots` (compared readings), `dump_decoder`,
//! `travelling_keys` (the populated keys), and the trips: `save_and_reload`,
//! `dump_restore_migrate` and `replication`.

#[path = "../common/mod.rs"]
mod common;

mod dump_decoder;
mod dump_restore_migrate;
mod replication;
mod save_and_reload;
mod snapshots;
mod travelling_keys;
mod v2_fixtures;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};

/// How far a remaining lease may be from the one expected, beyond the time measured between
/// the two readings: deadlines travel as Unix milliseconds rounded up (up to 2 ms per move),
/// and each server derives its wall clock from its monotonic one.
pub(crate) const SLACK_MS: i64 = 25;
/// How late a lease end may be observed (loaded machines), and how early (none, beyond the
/// conversion between the wall and the monotonic clock).
pub(crate) const LATE: Duration = Duration::from_millis(500);
pub(crate) const EARLY: Duration = Duration::from_millis(10);

pub(crate) fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `LOCK.ACQUIRE key token ttl SHARED [LIMIT n]`: `Some(fence)` or `None`.
pub(crate) fn acquire_shared(
    c: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    limit: Option<u64>,
) -> Option<i64> {
    let r = match limit {
        Some(n) => cmd!(c, "LOCK.ACQUIRE", key, token, ttl, "SHARED", "LIMIT", n),
        None => cmd!(c, "LOCK.ACQUIRE", key, token, ttl, "SHARED"),
    };
    match r {
        Ok(Value::Int(f)) => Some(f),
        Ok(Value::Nil) => None,
        other => panic!("LOCK.ACQUIRE {key} {token} {ttl} SHARED {limit:?}: {other:?}"),
    }
}
