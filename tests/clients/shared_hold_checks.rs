//! What the shared-hold scenarios of redis-cli and redis-rs check on the server alike: the
//! lock's shape (mode, holders, waiters) from `LOCK.INFO`, its holds from `LOCK.HOLDERS`, a
//! grant within [`GRANT_WITHIN`] of the release before it, and the refused upgrade's error.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::{info, wait_until};

/// `(mode, holders, waiters)` from `LOCK.INFO`; `None` if the key does not exist.
pub(crate) fn shape(con: &mut redis::Connection, key: &str) -> Option<(String, i64, i64)> {
    info(con, key).map(|i| (i.mode, i.holders, i.waiters))
}

#[track_caller]
pub(crate) fn assert_shape(
    con: &mut redis::Connection,
    key: &str,
    mode: &str,
    holders: i64,
    waiters: i64,
) {
    assert_eq!(
        shape(con, key),
        Some((mode.to_string(), holders, waiters)),
        "LOCK.INFO {key}"
    );
}

#[track_caller]
pub(crate) fn wait_shape(
    con: &mut redis::Connection,
    key: &str,
    mode: &str,
    holders: i64,
    waiters: i64,
) {
    let want = Some((mode.to_string(), holders, waiters));
    let mut last = None;
    let ok = wait_until(Duration::from_secs(5), || {
        last = shape(con, key);
        last == want
    });
    assert!(ok, "LOCK.INFO {key}: {last:?}, want {want:?}");
}

/// How soon a waiter must hold the lock once the hold before it is released.
pub(crate) const GRANT_WITHIN: Duration = Duration::from_millis(200);

/// `(mode, holders, waiters)` once the hold before it has gone: polled from the server, the
/// grant must have happened within [`GRANT_WITHIN`].
#[track_caller]
pub(crate) fn assert_granted_at_once(
    con: &mut redis::Connection,
    key: &str,
    mode: &str,
    holders: i64,
) {
    let t0 = Instant::now();
    let want = Some((mode.to_string(), holders));
    let mut last = None;
    while t0.elapsed() < GRANT_WITHIN {
        last = shape(con, key).map(|(m, h, _)| (m, h));
        if last == want {
            return;
        }
        sleep(Duration::from_millis(2));
    }
    panic!("{key}: {last:?} {GRANT_WITHIN:?} after the release, want {want:?}");
}

/// The error a shared holder gets when it asks for an exclusive hold (after `ERR `).
pub(crate) const UPGRADE_REFUSED: &str =
    "the token holds the lock shared: release it to take it exclusively (no upgrades)";

/// `LOCK.HOLDERS` (`common::holds::holders`): (token, fence, ttl, mode) per hold, in grant
/// order; empty for no key.
pub(crate) fn holders(con: &mut redis::Connection, key: &str) -> Vec<(String, u64, i64, String)> {
    crate::common::holds::holders(con, key)
        .unwrap_or_default()
        .into_iter()
        .map(|h| (h.token, h.fence as u64, h.ttl, h.mode))
        .collect()
}
