//! Guarantees 4 and 5 under failover: a master holds locks on several keys (each acquire
//! acknowledged by the replica with `WAIT 1`) and has clients blocked in `WAIT`; the replica
//! is promoted, (a) with `REPLICAOF NO ONE` after the master was killed with SIGKILL, and
//! (b) with a graceful `FAILOVER`. On the new master every acknowledged lock has the same
//! holder and fence and the remaining lease it had on the old one; leases end on time there;
//! every new fence, on an old key or a fresh one, is above every fence the old master issued;
//! and the waiters of the old master got an error or a closed connection instead of hanging.
//!
//! A lock taken without `WAIT 1` may be lost when the master dies (docs/guarantees.md, "Honest
//! limits"):
//! the test does not assert that it survives, only that if it does it is exact, and that if
//! it is lost the next holder's fence is still above it.

use crate::cmd;
use std::time::{Duration, Instant};

use crate::common::holds::Pending;
use crate::common::snapshots::{snapshot, Snapshot};
use crate::common::*;
use redis::{Connection, Value};

/// How far the remaining lease on the new master may be from the old master's, beyond the
/// time measured between the two readings (deadlines travel as Unix ms, rounded up).
const TTL_SLACK_MS: i64 = 50;
/// How late a lease end may be observed on the new master (loaded CI machines).
const LATE: Duration = Duration::from_millis(500);
/// How early: none, beyond the conversion between the wall and the monotonic clock.
const EARLY: Duration = Duration::from_millis(10);
/// Leases that end during the test, after the failover, and leases that outlive it.
const SHORT_TTLS: [u64; 3] = [4_000, 4_500, 5_000];
const LONG_TTL: u64 = 60_000;

fn role(c: &mut Connection) -> String {
    info_field(c, "replication", "role").unwrap_or_default()
}

/// A lock the master granted and the replica acknowledged.
struct Held {
    key: String,
    token: String,
    ttl: u64,
    /// When the acquire was sent and when its reply came: the deadline is in between + ttl.
    sent: Instant,
    replied: Instant,
}

/// What the master held and issued before the failover.
struct Before {
    held: Vec<Held>,
    /// Every fence the old master issued.
    issued: Vec<i64>,
    /// A key that was acquired, fenced and released: its fences exist, its key does not.
    released: String,
    waiters: Vec<Pending>,
}

impl Before {
    fn max_issued(&self) -> i64 {
        *self.issued.iter().max().unwrap()
    }
    fn long(&self) -> impl Iterator<Item = &Held> {
        self.held.iter().filter(|h| h.ttl == LONG_TTL)
    }
    fn short(&self) -> impl Iterator<Item = &Held> {
        self.held.iter().filter(|h| h.ttl != LONG_TTL)
    }
}

/// Locks on six keys, each acknowledged by the replica; fences taken by the long holders; a
/// released key; three clients waiting on two of the long-held keys.
fn load_master(m: &Server) -> Before {
    let mut mc = m.conn();
    let mut held = Vec::new();
    let mut issued = Vec::new();
    let ttls = SHORT_TTLS.iter().copied().chain([LONG_TTL; 3]);
    for (i, ttl) in ttls.enumerate() {
        let key = format!("acked:{i}");
        let tok = token();
        let sent = Instant::now();
        let f = acquire(&mut mc, &key, &tok, ttl).expect("free key");
        let replied = Instant::now();
        assert_eq!(
            replica_acks(&mut mc, 1, 5_000),
            1,
            "replica did not ack {key}"
        );
        issued.push(f);
        held.push(Held {
            key,
            token: tok,
            ttl,
            sent,
            replied,
        });
    }
    for h in held.iter().filter(|h| h.ttl == LONG_TTL) {
        for _ in 0..3 {
            issued.push(fence(&mut mc, &h.key, &h.token).unwrap());
        }
    }
    let released = "released".to_string();
    let tok = token();
    issued.push(acquire(&mut mc, &released, &tok, LONG_TTL).unwrap());
    issued.push(fence(&mut mc, &released, &tok).unwrap());
    assert_eq!(release(&mut mc, &released, &tok), 1);
    assert_eq!(replica_acks(&mut mc, 1, 5_000), 1);
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "the master's own fences are not increasing: {issued:?}"
    );

    let long: Vec<String> = held
        .iter()
        .filter(|h| h.ttl == LONG_TTL)
        .map(|h| h.key.clone())
        .collect();
    let waiters = vec![
        Pending::send(m, &long[0], &token(), 10_000, &["WAIT", "0"]),
        Pending::send(m, &long[0], &token(), 10_000, &["WAIT", "0"]),
        Pending::send(m, &long[1], &token(), 10_000, &["WAIT", "0"]),
    ];
    let queued = wait_until(Duration::from_secs(10), || {
        info(&mut mc, &long[0]).unwrap().waiters == 2
            && info(&mut mc, &long[1]).unwrap().waiters == 1
    });
    assert!(queued, "waiters did not queue on the master");
    Before {
        held,
        issued,
        released,
        waiters,
    }
}

/// Every waiter of the old master gets an error or a closed connection, soon.
fn assert_waiters_released(waiters: Vec<Pending>) {
    for w in waiters {
        match w.rx.recv_timeout(Duration::from_secs(10)).map(|(r, _)| r) {
            Ok(Err(e)) => eprintln!("waiter on {} after the failover: error {e:?}", w.key),
            Ok(Ok(v)) => panic!(
                "waiter on {} of the old master got a reply instead of an error: {v:?}",
                w.key
            ),
            Err(_) => panic!(
                "waiter on {} of the old master still hangs 10s after the failover",
                w.key
            ),
        }
    }
}

/// The promoted server holds what the old master held (`snaps`, read there just before the
/// failover), leases end on time there, and its fences are above all the old master issued.
fn assert_promoted_continues(nc: &mut Connection, before: &Before, snaps: &[Snapshot]) {
    let max = before.max_issued();
    let first_end = before
        .short()
        .map(|h| h.replied + Duration::from_millis(h.ttl))
        .min()
        .unwrap();
    assert!(
        Instant::now() + Duration::from_millis(500) < first_end,
        "test machine too slow: the failover took until the short leases' end"
    );
    // 1. Same holder and fence, the remaining lease it had on the old master; no waiters
    //    (they were connections to the old master); another token cannot take it.
    for (h, s) in before.held.iter().zip(snaps) {
        let n0 = Instant::now();
        let now = info(nc, &h.key).unwrap_or_else(|| panic!("{}: lost in the failover", h.key));
        let n1 = Instant::now();
        assert_eq!(
            now.holder.as_deref(),
            Some(h.token.as_bytes()),
            "{}: holder",
            h.key
        );
        assert_eq!(now.fence, s.info.fence, "{}: fence", h.key);
        assert_eq!(now.waiters, 0, "{}: waiters on the new master", h.key);
        let most = s.info.ttl - n0.saturating_duration_since(s.after).as_millis() as i64;
        let least = s.info.ttl - n1.duration_since(s.before).as_millis() as i64;
        assert!(
            now.ttl <= most + TTL_SLACK_MS && now.ttl >= least - TTL_SLACK_MS,
            "{}: remaining lease {} on the new master; from the old master's {} it should be \
             in {least}..={most} (+-{TTL_SLACK_MS})",
            h.key,
            now.ttl,
            s.info.ttl
        );
        assert_eq!(
            acquire(nc, &h.key, &token(), 1_000),
            None,
            "{}: stolen",
            h.key
        );
    }
    // 2. New fences for the holders of the long leases are above everything issued before.
    let mut last = max;
    for h in before.long() {
        let f = fence(nc, &h.key, &h.token).expect("holder can fence");
        assert!(
            f > last,
            "{}: fence {f} after failover, max before {max}",
            h.key
        );
        last = f;
    }
    // 3. The short leases end on time, on the new master's own (timer, cron).
    let mut gone: Vec<Option<Instant>> = vec![None; SHORT_TTLS.len()];
    let all_gone = wait_until(Duration::from_secs(15), || {
        for (h, g) in before.short().zip(gone.iter_mut()) {
            if g.is_none() && !exists(nc, &h.key) {
                *g = Some(Instant::now());
            }
        }
        gone.iter().all(|g| g.is_some())
    });
    assert!(all_gone, "leases did not end on the new master: {gone:?}");
    for (h, g) in before.short().zip(&gone) {
        let g = g.unwrap();
        let ttl = Duration::from_millis(h.ttl);
        assert!(
            g + EARLY >= h.sent + ttl,
            "{}: lease of {}ms ended early on the new master, {:?} after the acquire was sent",
            h.key,
            h.ttl,
            g - h.sent
        );
        assert!(
            g <= h.replied + ttl + LATE,
            "{}: lease of {}ms ended {:?} late on the new master",
            h.key,
            h.ttl,
            g - (h.replied + ttl)
        );
        eprintln!(
            "{}: lease of {}ms ended on the new master {}ms after the acquire's reply",
            h.key,
            h.ttl,
            (g - h.replied).as_millis()
        );
    }
    // 4. Fresh acquires: of the keys whose lease ended, of the released key, of a new key.
    let mut keys: Vec<&str> = before.short().map(|h| h.key.as_str()).collect();
    keys.push(&before.released);
    keys.push("never-used");
    for k in keys {
        let f = acquire(nc, k, &token(), 10_000).expect("free after failover");
        assert!(f > last, "{k}: fresh fence {f}, max before failover {max}");
        last = f;
    }
}

/// (a) The master dies (SIGKILL); the replica is promoted with `REPLICAOF NO ONE`.
#[test]
fn replica_promoted_after_master_sigkill_keeps_acknowledged_locks() {
    let (mut m, r) = replica_pair();
    let mut before = load_master(&m);
    let mut mc = m.conn();

    // Two locks without `WAIT 1`: one taken just before the crash, one taken after the
    // replica lost its link (pointed at a port nobody listens on: a partition just before
    // the crash). Either may be lost.
    let plain_tok = token();
    let plain = acquire(&mut mc, "unacked:plain", &plain_tok, LONG_TTL).unwrap();
    let mut rc = r.conn();
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "127.0.0.1", 1), Ok(Value::Okay));
    let cut_off = wait_until(Duration::from_secs(10), || {
        info_field(&mut mc, "replication", "connected_slaves").as_deref() == Some("0")
    });
    assert!(cut_off, "the master still sees its replica");
    let cut_tok = token();
    let cut = acquire(&mut mc, "unacked:cut", &cut_tok, LONG_TTL).unwrap();
    let acks = replica_acks(&mut mc, 1, 50);
    before.issued.extend([plain, cut]);

    let snaps: Vec<Snapshot> = before
        .held
        .iter()
        .map(|h| snapshot(&mut mc, &h.key))
        .collect();
    m.kill9();
    assert_waiters_released(std::mem::take(&mut before.waiters));

    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    assert_eq!(role(&mut rc), "master");

    for (key, tok, f) in [
        ("unacked:plain", &plain_tok, plain),
        ("unacked:cut", &cut_tok, cut),
    ] {
        match info(&mut rc, key) {
            Some(i) => {
                assert_eq!(i.holder.as_deref(), Some(tok.as_bytes()), "{key}: holder");
                assert_eq!(i.fence, f, "{key}: fence");
                eprintln!("{key} (no WAIT 1; WAIT 1 50 after the cut: {acks}): survived");
            }
            None => {
                let n = acquire(&mut rc, key, &token(), 10_000).unwrap();
                assert!(
                    n > f,
                    "{key}: lost lock had fence {f}, the next holder got {n}"
                );
                eprintln!(
                    "{key} (no WAIT 1; WAIT 1 50 after the cut: {acks}): lost; next fence {n} > {f}"
                );
            }
        }
    }
    assert_promoted_continues(&mut rc, &before, &snaps);
}

/// (b) A graceful `FAILOVER`: the replica becomes master, the old master its replica.
#[test]
fn graceful_failover_keeps_locks_and_releases_waiters() {
    let (m, r) = replica_pair();
    let mut before = load_master(&m);
    let mut mc = m.conn();
    // A graceful failover waits for the replica to catch up: even a lock taken without
    // `WAIT 1` must survive it.
    let plain_tok = token();
    let plain = acquire(&mut mc, "unacked:plain", &plain_tok, LONG_TTL).unwrap();
    before.issued.push(plain);

    let snaps: Vec<Snapshot> = before
        .held
        .iter()
        .map(|h| snapshot(&mut mc, &h.key))
        .collect();
    assert_eq!(cmd!(&mut mc, "FAILOVER"), Ok(Value::Okay));
    let mut rc = r.conn();
    let done = wait_until(Duration::from_secs(15), || {
        role(&mut rc) == "master"
            && role(&mut mc) == "slave"
            && info_field(&mut mc, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert!(done, "FAILOVER did not complete in 15s");
    assert_waiters_released(std::mem::take(&mut before.waiters));

    let i = info(&mut rc, "unacked:plain").expect("graceful failover lost a lock");
    assert_eq!(i.holder.as_deref(), Some(plain_tok.as_bytes()));
    assert_eq!(i.fence, plain);

    // The old master is a replica now: it refuses writes, kept no waiters, and mirrors the
    // new master.
    assert_err_starts(&cmd!(&mut mc, "LOCK.ACQUIRE", "x", "t", 1_000), "READONLY");
    assert_eq!(
        info_field(&mut mc, "lock", "lock_waiting_clients").as_deref(),
        Some("0"),
        "the demoted master still counts waiting clients"
    );
    assert_promoted_continues(&mut rc, &before, &snaps);
    assert_eq!(replica_acks(&mut rc, 1, 5_000), 1, "old master did not ack");
    let mut keys: Vec<&str> = before.held.iter().map(|h| h.key.as_str()).collect();
    keys.extend(["unacked:plain", "released", "never-used"]);
    for k in keys {
        let (a, b) = (info(&mut rc, k), info(&mut mc, k));
        match (&a, &b) {
            (Some(a), Some(b)) => {
                assert_eq!((&a.holder, a.fence), (&b.holder, b.fence), "{k}");
                assert_eq!(b.waiters, 0, "{k}: waiters on the demoted master");
                assert!(
                    (a.ttl - b.ttl).abs() <= 100,
                    "{k}: ttl {} vs {}",
                    a.ttl,
                    b.ttl
                );
            }
            (None, None) => {}
            _ => panic!("{k}: new master {a:?}, old master {b:?}"),
        }
    }
}
