//! A writable replica (point 3 of the crate doc) ends the leases its own clients took (also
//! by `RESTORE` or `COPY`) on time, hands them to its own waiters and counts them out of
//! `INFO lock`; its master's locks it leaves to the master.

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::cmd;
use crate::common::*;
use crate::{ms, sync, watch};

/// How late a lease end may be observed on a replica.
const REPLICA_SLACK: Duration = Duration::from_millis(200);

/// Polls until `key` is gone; when it went (after `from`, at most `within` later).
fn gone_at(c: &mut Connection, key: &str, within: Duration) -> Option<Instant> {
    let give_up = Instant::now() + within;
    while Instant::now() < give_up {
        if !exists(c, key) {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn a_writable_replica_ends_its_own_leases_and_leaves_the_masters_to_the_master() {
    let m = Server::new();
    let r = Server::start(
        Opts::new()
            .replicaof(m.port)
            .extra(&["--replica-read-only", "no"]),
    );
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    let mut findings = Findings::default();
    let mut late = Vec::new();
    let mut on_time = |f: &mut Findings,
                       what: &str,
                       at: Option<Instant>,
                       sent: Instant,
                       replied: Instant,
                       ttl: u64| {
        let ttl = Duration::from_millis(ttl);
        match at {
            None => f.fail(format!("{what}: did not happen within seconds")),
            Some(at) if at < sent + ttl => f.fail(format!(
                "{what}: {:.1} ms BEFORE the deadline",
                ms(sent + ttl - at)
            )),
            Some(at) if at > replied + ttl + REPLICA_SLACK => f.fail(format!(
                "{what}: {:.1} ms after the deadline",
                ms(at - (replied + ttl))
            )),
            Some(at) => late.push(format!("{what}: {:.1} ms", ms(at - (sent + ttl)))),
        }
    };

    // A lease a client took on the replica ends there, on time, with nobody waiting.
    let sent = Instant::now();
    acquire(&mut rc, "solo", "tok", 300).expect("acquire on a writable replica");
    let replied = Instant::now();
    let at = gone_at(&mut rc, "solo", Duration::from_secs(3));
    on_time(
        &mut findings,
        "replica lease end (key removed)",
        at,
        sent,
        replied,
        300,
    );

    // Its waiter on the replica is granted at the lease's end, and that lease ends too.
    let sent = Instant::now();
    let f1 = acquire(&mut rc, "held", "tok", 300).unwrap();
    let replied = Instant::now();
    let w = watch(
        Waiter::join(&r, "held", "next", 300, 0),
        Duration::from_secs(5),
    );
    let (reply, at) = w.join().unwrap();
    match reply {
        Some(Reply::Fence(f)) if f > f1 => {}
        other => findings.fail(format!("replica waiter at lease end got {}", got(&other))),
    }
    on_time(
        &mut findings,
        "grant to a replica waiter at lease end",
        at,
        sent,
        replied,
        300,
    );
    if let Some(granted) = at {
        let gone = gone_at(&mut rc, "held", Duration::from_secs(3));
        on_time(
            &mut findings,
            "end of the replica-granted lease",
            gone,
            // It began at the first lease's end at the earliest, and before its reply came.
            sent + Duration::from_millis(300),
            granted,
            300,
        );
    }

    // A release on the replica hands the lock to its waiter there at once.
    acquire(&mut rc, "rel", "tok", 60_000).unwrap();
    let w = watch(
        Waiter::join(&r, "rel", "next", 60_000, 0),
        Duration::from_secs(5),
    );
    let released = Instant::now();
    assert_eq!(release(&mut rc, "rel", "tok"), 1);
    let (reply, at) = w.join().unwrap();
    match (reply, at) {
        (Some(Reply::Fence(_)), Some(at)) if at - released < REPLICA_SLACK => {}
        (reply, at) => findings.fail(format!(
            "replica waiter after a release got {} after {:?}",
            got(&reply),
            at.map(|a| a - released)
        )),
    }
    assert_eq!(release(&mut rc, "rel", "next"), 1);
    let held = |c: &mut Connection| lock_stat(c, "lock_held").expect("lock_held");
    if !wait_until(Duration::from_secs(1), || held(&mut rc) == 0) {
        findings.fail(format!(
            "INFO lock on the replica: lock_held {} after its own locks ended",
            held(&mut rc)
        ));
    }
    for key in ["solo", "held", "rel"] {
        if exists(&mut mc, key) {
            findings.fail(format!("{key}, written on the replica, is on the master"));
        }
    }

    // The master's lock is the master's to end: with the master's writes paused past its
    // deadline the replica keeps the key (reporting it ended), and its own lease still ends
    // about on time meanwhile.
    let t0 = Instant::now();
    acquire(&mut mc, "mk", "tok", 300).unwrap();
    sync(&mut mc);
    assert_eq!(
        cmd!(&mut mc, "CLIENT", "PAUSE", 4000, "WRITE"),
        Ok(Value::Okay)
    );
    let sent = Instant::now();
    acquire(&mut rc, "own", "tok", 600).unwrap();
    let replied = Instant::now();
    let at = gone_at(&mut rc, "own", Duration::from_secs(3));
    on_time(
        &mut findings,
        "replica lease end while a master lease is overdue there",
        at,
        sent,
        replied,
        600,
    );
    sleep((t0 + Duration::from_millis(900)).saturating_duration_since(Instant::now()));
    if t0.elapsed() < Duration::from_millis(3500) {
        if !exists(&mut rc, "mk") {
            findings.fail("the replica removed its master's lock on its own".into());
        }
        if let Some(i) = info(&mut rc, "mk") {
            findings.fail(format!(
                "the replica reports its master's ended lease as {:?}",
                Lock(i)
            ));
        }
        if held(&mut rc) != 1 {
            findings.fail(format!(
                "lock_held {} on the replica, expected 1 (mk)",
                held(&mut rc)
            ));
        }
    }
    assert_eq!(cmd!(&mut mc, "CLIENT", "UNPAUSE"), Ok(Value::Okay));
    if gone_at(&mut rc, "mk", Duration::from_secs(3)).is_none() {
        findings.fail("the master's removal did not reach the replica".into());
    }
    if !wait_until(Duration::from_secs(1), || held(&mut rc) == 0) {
        findings.fail(format!(
            "lock_held {} on the replica at the end",
            held(&mut rc)
        ));
    }
    eprintln!("writable replica, late by: {}", late.join("; "));
    findings.done("writable replica");
}

/// A lock a client of a writable replica put there by `RESTORE` or `COPY` is that replica's,
/// as core treats a key with a TTL written there by those commands: its master will never
/// send a `DEL` for it, so the replica ends it when its lease ends.
#[test]
fn a_writable_replica_ends_locks_its_clients_restored_or_copied() {
    let m = Server::new();
    let r = Server::start(
        Opts::new()
            .replicaof(m.port)
            .extra(&["--replica-read-only", "no"]),
    );
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    acquire(&mut rc, "own", "tok", 300).unwrap();
    let payload = match cmd!(&mut rc, "DUMP", "own") {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP: {other:?}"),
    };
    assert_eq!(
        cmd!(&mut rc, "RESTORE", "restored", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_eq!(cmd!(&mut rc, "COPY", "own", "copied"), Ok(Value::Int(1)));
    // A copy of a lock from the master is the replica's too: the master does not know it.
    // Its lease outlasts the sync and the COPY: under Valkey 8.1 this replica, with writes of
    // its own, once acked after a 300 ms lease had ended (the master's `DEL` then removed the
    // key COPY was to read), and once not within 1 s.
    let from_master = Duration::from_millis(3_000);
    let acquired = Instant::now();
    acquire(
        &mut mc,
        "from-master",
        "tok",
        from_master.as_millis() as u64,
    )
    .unwrap();
    sync(&mut mc);
    assert_eq!(
        cmd!(&mut rc, "COPY", "from-master", "master-copy"),
        Ok(Value::Int(1))
    );
    let mut findings = Findings::default();
    // Every lease here, of 300 ms or of `from_master`, ended by then, with the slack.
    let by = acquired + from_master + REPLICA_SLACK + Duration::from_millis(300);
    sleep(by.saturating_duration_since(Instant::now()));
    for key in ["own", "restored", "copied", "master-copy", "from-master"] {
        if exists(&mut rc, key) {
            findings.fail(format!(
                "{key}: still on the replica {} ms after the last lease's end (LOCK.INFO {:?})",
                (REPLICA_SLACK + Duration::from_millis(300)).as_millis(),
                info(&mut rc, key).map(Lock)
            ));
        }
    }
    let held = lock_stat(&mut rc, "lock_held").unwrap();
    if held != 0 {
        findings.fail(format!("INFO lock on the replica: lock_held {held}"));
    }
    findings.done("locks restored or copied on a writable replica");
}
