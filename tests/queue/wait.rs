//! `LOCK.ACQUIRE … WAIT`: the FIFO queue and its hand-offs (docs/guarantees.md, guarantee 3),
//! against a real server. Waiters are plain sockets, so that a test controls exactly when each one
//! joins.

use std::time::{Duration, Instant};

use crate::common::{info, wait_until, Opts, Reply, Server, Waiter};
use redis::Value;

/// "At once": the reply the server sends in the turn of the change that causes it (a
/// release, a deletion, a grant passed on) arrives within this.
const AT_ONCE: Duration = Duration::from_millis(300);
/// A reply due at a deadline (a lease end, a `WAIT` timeout) arrives within this after it.
const LATE: Duration = Duration::from_millis(250);

fn acquire(con: &mut redis::Connection, key: &str, token: &str, ttl: u64) -> Option<i64> {
    crate::common::acquire(con, key, token, ttl)
}

/// The waiter's reply, which must have arrived by `deadline` (what the test promises), so that
/// a missing reply fails here, saying so, rather than after a long socket timeout:
/// `Some(fence)` or `None` for null.
#[track_caller]
fn reply_by(w: &mut Waiter, deadline: Instant, what: &str) -> Option<i64> {
    match w.reply_by(deadline) {
        Some(Reply::Fence(f)) => Some(f),
        Some(Reply::Null) => None,
        Some(other) => panic!("{what}: waiter {} was answered {other:?}", w.token),
        None => panic!(
            "{what}: waiter {} had no reply by its deadline, {:?} after its LOCK.ACQUIRE \
             (connection closed: {})",
            w.token,
            deadline.saturating_duration_since(w.sent),
            w.is_closed()
        ),
    }
}

/// The waiter's reply to a change made just now: within [`AT_ONCE`].
#[track_caller]
fn reply_at_once(w: &mut Waiter, what: &str) -> Option<i64> {
    reply_by(w, Instant::now() + AT_ONCE, what)
}

#[test]
fn waiters_are_granted_in_fifo_order_on_release() {
    let server = Server::new();
    let mut con = server.conn();
    let first = acquire(&mut con, "k", "holder", 60_000).unwrap();
    let mut waiters: Vec<Waiter> = (0..12)
        .map(|i| Waiter::join(&server, "k", &format!("w{i}"), 60_000, 0))
        .collect();
    assert_eq!(info(&mut con, "k").unwrap().waiters, 12);

    let mut last = first;
    let mut holder = "holder".to_string();
    for w in waiters.iter_mut() {
        assert_eq!(crate::common::release(&mut con, "k", &holder), 1);
        let fence = reply_at_once(w, "release").expect("granted");
        assert!(fence > last, "fences must increase in grant order");
        last = fence;
        let now = info(&mut con, "k").unwrap();
        assert_eq!(now.holder.as_deref(), Some(w.token.as_bytes()));
        assert_eq!(now.fence, fence);
        holder = w.token.clone();
    }
    assert_eq!(crate::common::release(&mut con, "k", &holder), 1);
    assert!(
        !crate::common::exists(&mut con, "k"),
        "free and nobody waits: key removed"
    );
}

#[test]
fn the_head_is_granted_when_the_lease_ends() {
    let server = Server::new();
    let mut con = server.conn();
    acquire(&mut con, "k", "holder", 300).unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut w = Waiter::join(&server, "k", "next", 10_000, 0);
    let fence = reply_by(&mut w, deadline + LATE, "lease end").expect("granted at lease end");
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late < LATE, "granted {late:?} after the lease ended");
    assert!(
        Instant::now() + Duration::from_millis(30) >= deadline,
        "granted early"
    );
    let now = info(&mut con, "k").unwrap();
    assert_eq!(now.holder.as_deref(), Some(&b"next"[..]));
    assert_eq!(now.fence, fence);
    assert!(now.ttl > 9_000);
}

/// Deleting a key never leaves its waiters hanging: they are answered null at once (the
/// deletion may be a `MIGRATE`, after which the lock lives on elsewhere, so they are not
/// granted it here), and a retry finds the key free, with a fence above the deleted one's.
#[test]
fn deleting_the_key_answers_its_waiters_at_once() {
    for how in [
        &["DEL", "k"][..],
        &["UNLINK", "k"],
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["FLUSHALL", "ASYNC"],
        &["SET", "k", "now-a-string"],
    ] {
        let server = Server::new();
        let mut con = server.conn();
        let before = acquire(&mut con, "k", "holder", 60_000).unwrap();
        let mut a = Waiter::join(&server, "k", "a", 60_000, 0);
        let mut b = Waiter::join(&server, "k", "b", 60_000, 0);
        let deleted = Instant::now();
        let mut c = redis::cmd(how[0]);
        for arg in &how[1..] {
            c.arg(*arg);
        }
        c.query::<Value>(&mut con).unwrap();
        let what = format!("{how:?}");
        assert_eq!(
            reply_by(&mut a, deleted + AT_ONCE, &what),
            None,
            "{how:?}: the head must get null"
        );
        assert_eq!(
            reply_by(&mut b, deleted + AT_ONCE, &what),
            None,
            "{how:?}: every waiter must get null"
        );
        assert_eq!(
            crate::common::info_field(&mut con, "lock", "lock_waiting_clients").as_deref(),
            Some("0"),
            "{how:?}"
        );
        if how[0] != "SET" {
            assert!(
                info(&mut con, "k").is_none(),
                "{how:?}: nobody holds the key"
            );
            let again = acquire(&mut con, "k", "a", 60_000).expect("the key is free");
            assert!(again > before, "{how:?}: the fence went backwards");
        }
    }
}

#[test]
fn a_wait_times_out_with_null_on_time() {
    let server = Server::new();
    let mut con = server.conn();
    acquire(&mut con, "k", "holder", 60_000).unwrap();
    let mut w = Waiter::join(&server, "k", "w", 1000, 400);
    let due = w.sent + Duration::from_millis(400);
    assert_eq!(reply_by(&mut w, due + LATE, "WAIT 400"), None);
    let waited = w.sent.elapsed();
    assert!(
        waited >= Duration::from_millis(380),
        "timed out early, after {waited:?}"
    );
    let now = info(&mut con, "k").unwrap();
    assert_eq!(now.waiters, 0, "a timed-out waiter leaves the queue");
    assert_eq!(now.holder.as_deref(), Some(&b"holder"[..]));
}

#[test]
fn a_disconnected_waiter_leaves_the_queue_and_the_next_is_served() {
    let server = Server::new();
    let mut con = server.conn();
    acquire(&mut con, "k", "holder", 60_000).unwrap();
    let gone = Waiter::join(&server, "k", "gone", 60_000, 0);
    let mut next = Waiter::join(&server, "k", "next", 60_000, 0);
    drop(gone);
    assert!(wait_until(Duration::from_secs(5), || info(&mut con, "k")
        .unwrap()
        .waiters
        == 1));
    assert_eq!(crate::common::release(&mut con, "k", "holder"), 1);
    assert!(reply_at_once(&mut next, "release").is_some());
    assert_eq!(
        info(&mut con, "k").unwrap().holder.as_deref(),
        Some(&b"next"[..])
    );
}

/// A grant made to a client that is gone before its reply goes out is passed on. `CLIENT
/// KILL` in the same transaction as the release kills the head between the grant and the
/// moment its reply would be written.
#[test]
fn an_undelivered_grant_is_passed_to_the_next_waiter() {
    let server = Server::new();
    let mut con = server.conn();
    let first = acquire(&mut con, "k", "holder", 60_000).unwrap();
    let doomed = Waiter::join(&server, "k", "doomed", 60_000, 0);
    let mut next = Waiter::join(&server, "k", "next", 60_000, 0);
    let reply: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("holder")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(doomed.id)
        .query(&mut con)
        .unwrap();
    assert!(
        matches!(reply, Value::Array(ref v) if v.len() == 2),
        "{reply:?}"
    );
    let fence = reply_at_once(&mut next, "release + CLIENT KILL").expect("the grant passed on");
    assert!(fence > first);
    let now = info(&mut con, "k").unwrap();
    assert_eq!(now.holder.as_deref(), Some(&b"next"[..]));
    assert_eq!(now.fence, fence);
    assert_eq!(now.waiters, 0);
}

#[test]
fn no_barging_while_clients_wait() {
    let server = Server::new();
    let mut con = server.conn();
    acquire(&mut con, "k", "holder", 60_000).unwrap();
    let mut w = Waiter::join(&server, "k", "w", 60_000, 0);
    // Release and a newcomer's acquire in one transaction: the waiter must win.
    let (released, newcomer): (i64, Option<i64>) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("holder")
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("newcomer")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(newcomer, None, "a newcomer got in ahead of a waiter");
    assert!(reply_at_once(&mut w, "release").is_some());
}

#[test]
fn the_holder_waiting_on_its_own_lock_is_renewed_at_once() {
    let server = Server::new();
    let mut con = server.conn();
    let fence = acquire(&mut con, "k", "me", 1000).unwrap();
    let again: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&["k", "me", "60000", "WAIT", "0"])
        .query(&mut con)
        .unwrap();
    assert_eq!(again, Some(fence));
    assert!(info(&mut con, "k").unwrap().ttl > 50_000);
}

#[test]
fn wait_does_not_block_in_multi_or_scripts() {
    let server = Server::new();
    let mut con = server.conn();
    acquire(&mut con, "k", "holder", 60_000).unwrap();
    let started = Instant::now();
    let (r,): (Option<i64>,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg(&["k", "other", "1000", "WAIT", "0"])
        .query(&mut con)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<i64> = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 'other', 1000, 'WAIT', 0)")
        .arg(1)
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert_eq!(r, None);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(info(&mut con, "k").unwrap().waiters, 0);
}

#[test]
fn a_replica_sees_each_grant_with_the_same_fence_and_deadline() {
    let master = Server::start(Opts::new().extra(&["--repl-diskless-sync-delay", "0"]));
    let replica = Server::start(Opts::new().replicaof(master.port));
    let mut m = master.conn();
    let mut r = replica.conn();
    crate::common::wait_link_up(&mut r);
    acquire(&mut m, "k", "holder", 60_000).unwrap();
    let mut w = Waiter::join(&master, "k", "w", 30_000, 0);
    assert_eq!(crate::common::release(&mut m, "k", "holder"), 1);
    let fence = reply_at_once(&mut w, "release").expect("granted");
    assert!(wait_until(Duration::from_secs(5), || {
        info(&mut r, "k").is_some_and(|i| i.fence == fence)
    }));
    let (on_master, on_replica) = (info(&mut m, "k").unwrap(), info(&mut r, "k").unwrap());
    assert_eq!(on_replica.holder.as_deref(), Some(&b"w"[..]));
    assert!(
        (on_master.ttl - on_replica.ttl).abs() < 200,
        "{on_master:?} vs {on_replica:?}"
    );
}

#[test]
fn a_thousand_waiters_are_each_served_once_in_order() {
    let server = Server::new();
    let mut con = server.conn();
    let mut last = acquire(&mut con, "k", "holder", 600_000).unwrap();
    let n = 1000;
    let mut waiters: Vec<Waiter> = Vec::with_capacity(n);
    for i in 0..n {
        // Joining one at a time fixes the order of the queue.
        waiters.push(Waiter::send(&server, "k", &format!("w{i}"), 600_000, 0));
        let joined = Instant::now() + Duration::from_secs(10);
        while info(&mut con, "k").unwrap().waiters != i as i64 + 1 {
            assert!(Instant::now() < joined, "w{i} did not join");
        }
    }
    let mut holder = "holder".to_string();
    for (i, w) in waiters.iter_mut().enumerate() {
        assert_eq!(
            crate::common::release(&mut con, "k", &holder),
            1,
            "release before w{i}"
        );
        let fence = reply_at_once(w, "release").unwrap_or_else(|| panic!("w{i} not granted"));
        assert!(fence > last);
        last = fence;
        holder = w.token.clone();
    }
    for w in waiters.iter_mut() {
        assert!(!w.has_reply(), "a waiter was replied twice");
    }
    assert_eq!(crate::common::release(&mut con, "k", &holder), 1);
    assert!(!crate::common::exists(&mut con, "k"));
}
