//! `LOCK.OBSERVE key seen timeout` against real servers: `changes` (what is a change of the
//! state, the newest fence among the key's live holds, and what is not), `keyspace` (the
//! server's keyspace operations of guarantee 3, docs/guarantees.md, answer observers as they
//! answer waiters), `server_rules` (`CLIENT UNBLOCK`, disconnects, `MULTI` and scripts,
//! RESP2/RESP3, ACL, key specs and flags, replicas, errors) and `many` (1,000 observers on one
//! key, beside a queue they must not touch). Observers are plain sockets (`observer.rs`), so
//! that a test sees exactly when each is answered, and with what.

#[path = "../common/mod.rs"]
mod common;

mod changes;
mod keyspace;
mod many;
mod observer;
mod server_rules;

use std::time::{Duration, Instant};

use redis::Connection;

use common::{stat, LockInfo};
use observer::Observer;

/// "At once": a reply sent in the turn of the change that causes it arrives within this,
/// counted from just before the change was sent.
pub const AT_ONCE: Duration = Duration::from_millis(100);
/// A reply due at a deadline (a timeout, a lease end) arrives within this after it.
pub const LATE: Duration = Duration::from_millis(100);
/// How long an observer that must not be answered is watched.
pub const QUIET: Duration = Duration::from_millis(250);
/// A lease no test outlives.
pub const TTL: u64 = 60_000;

/// The state of a lock as `LOCK.OBSERVE` follows it, from a `LOCK.INFO` reply of an
/// exclusive lock: its fence while held, else 0 (docs: the reply's `fence` is the last one
/// issued, which for an exclusive hold is the holder's).
pub fn seen_of(info: &Option<LockInfo>) -> i64 {
    match info {
        Some(i) if i.holders > 0 => i.fence,
        _ => 0,
    }
}

/// `INFO lock`'s `observing_clients`.
pub fn observing(con: &mut Connection) -> i64 {
    stat(con, "lock_observing_clients")
}

/// `INFO lock`'s `observers_answered`.
pub fn answered(con: &mut Connection) -> i64 {
    stat(con, "lock_observers_answered")
}

/// Waits until `INFO lock` counts `n` clients observing (5 s at most).
#[track_caller]
pub fn wait_observing(con: &mut Connection, n: i64) {
    let ok = common::wait_until(Duration::from_secs(5), || observing(con) == n);
    assert!(
        ok,
        "observing_clients: expected {n}, still {}",
        observing(con)
    );
}

/// The observer's reply to a change whose command was sent at `t0`: it must arrive within
/// [`AT_ONCE`] of it, and be a `LOCK.INFO` reply.
#[track_caller]
pub fn answered_at_once(o: &mut Observer, t0: Instant, what: &str) -> Option<LockInfo> {
    let info = o.info_within(AT_ONCE + Duration::from_secs(2), what);
    let after = o.answered_after(t0);
    assert!(
        after <= AT_ONCE,
        "{what}: observer {} answered {after:?} after the change (at once: {AT_ONCE:?})",
        o.id
    );
    info
}

/// Whether an observer's reply is the lock `expected` (from `LOCK.INFO` taken just after
/// it): the same holder, fence, waiters, mode and holders, and a ttl within `slack_ms`.
pub fn same_info(got: &Option<LockInfo>, expected: &Option<LockInfo>, slack_ms: i64) -> bool {
    match (got, expected) {
        (None, None) => true,
        (Some(g), Some(e)) => {
            g.holder == e.holder
                && g.fence == e.fence
                && g.waiters == e.waiters
                && g.mode == e.mode
                && g.holders == e.holders
                && (g.ttl - e.ttl).abs() <= slack_ms
        }
        _ => false,
    }
}

/// [`same_info`], asserted.
#[track_caller]
pub fn assert_info(got: &Option<LockInfo>, expected: &Option<LockInfo>, slack_ms: i64, what: &str) {
    assert!(
        same_info(got, expected, slack_ms),
        "{what}: observer got {got:?}, LOCK.INFO says {expected:?}"
    );
}
