//! Readings of `LOCK.HOLDERS` and `LOCK.INFO` for a set of keys, timed, and their
//! comparison: the same holds in the same order, each lease counted down by the time between
//! the readings (or longer by the time in transit, for keys moved alone).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::holds::{holders, Hold};
use crate::common::*;
use redis::Connection;

/// How far a remaining lease may be from the one expected, beyond the time measured between
/// the two readings: deadlines travel as Unix milliseconds rounded up (up to 2 ms per move),
/// and each server derives its wall clock from its monotonic one.
pub const SLACK_MS: i64 = 25;

/// `LOCK.INFO` of one key and the interval in which the server evaluated it.
pub struct Snapshot {
    pub info: LockInfo,
    pub before: Instant,
    pub after: Instant,
}

impl Snapshot {
    /// What `read` gives for `key`, which must be held, with the time around the reading.
    pub fn take(key: &str, read: impl FnOnce() -> Option<LockInfo>) -> Snapshot {
        let before = Instant::now();
        let info = read().unwrap_or_else(|| panic!("{key}: no lock"));
        Snapshot {
            info,
            before,
            after: Instant::now(),
        }
    }
}

/// `LOCK.INFO key` through `c`, timed ([`Snapshot`]).
pub fn snapshot(c: &mut Connection, key: &str) -> Snapshot {
    Snapshot::take(key, || info(c, key))
}

/// The state of some keys (db 0), read between `t0` and `t1`.
pub struct Snap {
    t0: Instant,
    t1: Instant,
    pub keys: BTreeMap<String, (Option<Vec<Hold>>, Option<LockInfo>)>,
}

pub fn snap(c: &mut Connection, keys: &[&str]) -> Snap {
    let t0 = Instant::now();
    let keys = keys
        .iter()
        .map(|k| (k.to_string(), (holders(c, k), info(c, k))))
        .collect();
    Snap {
        t0,
        t1: Instant::now(),
        keys,
    }
}

/// Whether a remaining lease read in `after` is the one read in `before`, counted down by the
/// time between the readings.
/// A lease moved alone (`DUMP`/`RESTORE`, `MIGRATE`) does not count down in transit: it may
/// be up to `in_transit` longer.
fn ttl_ok(before: i64, after: i64, b: &Snap, a: &Snap, in_transit: Duration) -> bool {
    let most_elapsed = a.t1.duration_since(b.t0).as_millis() as i64;
    let least_elapsed = a.t0.saturating_duration_since(b.t1).as_millis() as i64;
    let transit = in_transit.as_millis() as i64 + 1;
    after >= before - most_elapsed - SLACK_MS
        && after <= before - least_elapsed + transit + SLACK_MS
}

/// `after` holds what `before` held: the same holds in the same order (token, fence, mode),
/// each lease counted down by the time in between; `LOCK.INFO` agrees, without waiters (they
/// are never carried).
pub fn compare(before: &Snap, after: &Snap, what: &str, f: &mut Findings) {
    compare_moved(before, after, Duration::ZERO, what, f);
}

/// [`compare`] for keys moved alone, each within `in_transit` from its `DUMP` to its `RESTORE`.
pub fn compare_moved(
    before: &Snap,
    after: &Snap,
    in_transit: Duration,
    what: &str,
    f: &mut Findings,
) {
    for (key, (bh, bi)) in &before.keys {
        let (ah, ai) = &after.keys[key];
        match (bh, ah) {
            (None, None) => {}
            (Some(bh), Some(ah)) => {
                let same = bh.len() == ah.len()
                    && bh.iter().zip(ah).all(|(b, a)| {
                        a.token == b.token
                            && a.fence == b.fence
                            && a.mode == b.mode
                            && ttl_ok(b.ttl, a.ttl, before, after, in_transit)
                    });
                f.check(same, || {
                    format!(
                        "{what}: {key}: LOCK.HOLDERS {bh:?} became {ah:?} ({}..{} ms later)",
                        after.t0.saturating_duration_since(before.t1).as_millis(),
                        after.t1.duration_since(before.t0).as_millis()
                    )
                });
            }
            _ => f.fail(format!("{what}: {key}: LOCK.HOLDERS {bh:?} became {ah:?}")),
        }
        match (bi, ai) {
            (None, None) => {}
            (Some(b), Some(a)) => {
                f.check(
                    a.holder == b.holder
                        && a.fence == b.fence
                        && a.mode == b.mode
                        && a.holders == b.holders
                        && a.waiters == 0
                        && ttl_ok(b.ttl, a.ttl, before, after, in_transit),
                    || format!("{what}: {key}: LOCK.INFO {b:?} became {a:?}"),
                );
            }
            _ => f.fail(format!("{what}: {key}: LOCK.INFO {bi:?} became {ai:?}")),
        }
    }
}
