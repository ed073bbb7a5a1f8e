//! What the tests read and check on the nodes: key counts, a replica's acknowledgement and its
//! `LOCK.INFO`, a lock that arrives intact after a move (migration or failover) and whose lease
//! ends on time there, and a client blocked in `LOCK.ACQUIRE … WAIT`.

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::{exists, info, wait_until, LockInfo, Server};
use crate::router::Router;
use redis::{Connection, Value};

/// How far a remaining lease may be from the one read before a move, beyond the time
/// measured between the two readings (deadlines travel as Unix ms, rounded up).
const TTL_SLACK_MS: i64 = 50;
/// How late a lease end may be observed (loaded CI machines), and how early (none, beyond
/// the conversion between the wall and the monotonic clock).
const LATE: Duration = Duration::from_millis(500);
const EARLY: Duration = Duration::from_millis(10);

pub(crate) use crate::common::sync_replica as wait_replicas;

/// `LOCK.INFO` read on a replica (`READONLY` lets it answer for its master's slots).
pub(crate) fn replica_info(replica: &Server, key: &str) -> Option<LockInfo> {
    let mut c = replica.conn();
    assert_eq!(cmd!(&mut c, "READONLY"), Ok(Value::Okay));
    info(&mut c, key)
}

pub(crate) use crate::common::snapshots::Snapshot;

/// `LOCK.INFO` of `key` through the router, timed.
pub(crate) fn snapshot(r: &mut Router, key: &str) -> Snapshot {
    Snapshot::take(key, || r.info(key))
}

/// The lock read now through `r` is the one of `s`: holder, fence, and the remaining lease
/// counted down by the time that passed.
#[track_caller]
pub(crate) fn assert_moved_intact(r: &mut Router, key: &str, s: &Snapshot) {
    let n0 = Instant::now();
    let now = r.info(key).unwrap_or_else(|| panic!("{key}: lost"));
    let n1 = Instant::now();
    assert_eq!(now.holder, s.info.holder, "{key}: holder");
    assert_eq!(now.fence, s.info.fence, "{key}: fence");
    let most = s.info.ttl - n0.saturating_duration_since(s.after).as_millis() as i64;
    let least = s.info.ttl - n1.duration_since(s.before).as_millis() as i64;
    assert!(
        now.ttl <= most + TTL_SLACK_MS && now.ttl >= least - TTL_SLACK_MS,
        "{key}: remaining lease {} after the move; from {} before it should be in \
         {least}..={most} (+-{TTL_SLACK_MS})",
        now.ttl,
        s.info.ttl
    );
}

/// Polls `key` on `c` until it is gone; asserts it went at its deadline, which lies between
/// `sent + ttl` and `replied + ttl`.
pub(crate) fn assert_lease_ends_on_time(
    c: &mut Connection,
    key: &str,
    ttl: u64,
    sent: Instant,
    replied: Instant,
) {
    let ttl = Duration::from_millis(ttl);
    assert!(
        Instant::now() + Duration::from_millis(200) < sent + ttl,
        "test machine too slow: {key}'s lease ended before the check"
    );
    assert!(
        wait_until(ttl + Duration::from_secs(5), || !exists(c, key)),
        "{key}: lease did not end"
    );
    let gone = Instant::now();
    assert!(
        gone + EARLY >= sent + ttl,
        "{key}: lease of {ttl:?} ended early, {:?} after the acquire was sent",
        gone - sent
    );
    assert!(
        gone <= replied + ttl + LATE,
        "{key}: lease of {ttl:?} ended {:?} late",
        gone - (replied + ttl)
    );
    eprintln!(
        "{key}: lease of {ttl:?} ended {}ms after the acquire's reply",
        (gone - replied).as_millis()
    );
}
