//! The server around a shared key: deletion, `RENAME`, `COPY`, `CLIENT UNBLOCK`, `CLIENT
//! PAUSE WRITE`, `EXPIRE` and a full server.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common;
use crate::common::holds::{acquire_with, assert_same_holds, holders, stat, tokens, Pending};
use crate::common::{client_unblock, exists, info, release, Server};
use crate::shared::{granted, AT_ONCE, LATE, TTL};
use redis::{Connection, Value};

/// Shared holders a and b (LIMIT 2), an exclusive waiter and a shared one.
fn shared_key_with_waiters(server: &Server, c: &mut Connection) -> (i64, Pending, Pending) {
    granted(c, "k", "a", TTL, &["SHARED", "LIMIT", "2"]);
    let fb = granted(c, "k", "b", TTL, &["SHARED", "LIMIT", "2"]);
    let w = Pending::join(server, "k", "w", TTL, &["WAIT", "0"]);
    let r = Pending::join(
        server,
        "k",
        "r",
        TTL,
        &["SHARED", "LIMIT", "2", "WAIT", "0"],
    );
    (fb, w, r)
}

#[test]
fn deleting_a_shared_key_answers_its_waiters_at_once() {
    let server = Server::new();
    let mut c = server.conn();
    for how in [
        &["DEL", "k"][..],
        &["UNLINK", "k"],
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["FLUSHALL", "ASYNC"],
    ] {
        let (fb, w, r) = shared_key_with_waiters(&server, &mut c);
        let mut cmd = redis::cmd(how[0]);
        cmd.arg(&how[1..]);
        common::run(&cmd, &mut c).unwrap();
        let what = format!("{how:?}");
        w.null_within(AT_ONCE, &what);
        r.null_within(AT_ONCE, &what);
        assert_eq!(holders(&mut c, "k"), None, "{what}");
        assert_eq!(stat(&mut c, "lock_waiting_clients"), 0, "{what}");
        let again = granted(&mut c, "k", "a", TTL, &["SHARED"]);
        assert!(again > fb, "{what}: the fence went backwards");
        assert_eq!(release(&mut c, "k", "a"), 1);
    }
}

#[test]
fn rename_moves_every_hold_and_copy_copies_them() {
    let server = Server::new();
    let mut c = server.conn();
    let ends0 = stat(&mut c, "lock_lease_ends");
    granted(&mut c, "k", "a", TTL, &["SHARED"]);
    let b_sent = Instant::now();
    let fb = granted(&mut c, "k", "b", 600, &["SHARED"]);
    let b_due = (
        b_sent + Duration::from_millis(600),
        Instant::now() + Duration::from_millis(600),
    );
    let w = Pending::join(&server, "k", "w", TTL, &["WAIT", "0"]);
    let before = holders(&mut c, "k").unwrap();
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut c, "RENAME", "k", "k2"), Ok(Value::Okay));
    w.null_within(AT_ONCE, "RENAME k k2");
    assert_eq!(holders(&mut c, "k"), None, "nothing left at the old name");
    let moved = holders(&mut c, "k2").expect("the holds are at k2");
    assert_same_holds(&before, &moved, t0.elapsed(), "RENAME");
    let i = info(&mut c, "k2").unwrap();
    assert_eq!(
        (i.mode.as_str(), i.holders, i.waiters, i.fence),
        ("shared", 2, 0, fb)
    );

    assert_eq!(cmd!(&mut c, "COPY", "k2", "k3"), Ok(Value::Int(1)));
    let copied = holders(&mut c, "k3").expect("COPY copies the holds");
    assert_same_holds(&moved, &copied, t0.elapsed(), "COPY");
    assert_same_holds(
        &moved,
        &holders(&mut c, "k2").unwrap(),
        t0.elapsed(),
        "COPY source",
    );

    // b's lease still ends on time, at both names.
    let mut ended = None;
    while ended.is_none() && Instant::now() < b_due.1 + LATE + Duration::from_millis(500) {
        let (h2, h3) = (
            tokens(&holders(&mut c, "k2")),
            tokens(&holders(&mut c, "k3")),
        );
        if h2 == ["a"] && h3 == ["a"] {
            ended = Some(Instant::now());
        }
        sleep(Duration::from_millis(5));
    }
    let ended = ended.expect("b's lease never ended at k2 and k3");
    assert!(ended >= b_due.0, "b's lease ended early");
    assert!(
        ended <= b_due.1 + LATE,
        "b's lease ended {:?} late",
        ended - b_due.1
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0 + 2,
        "one lease end at each name"
    );
    assert_eq!(release(&mut c, "k2", "a"), 1);
    assert!(!exists(&mut c, "k2"));
    assert_eq!(
        tokens(&holders(&mut c, "k3")),
        ["a"],
        "the copy is a lock of its own"
    );
    assert_eq!(release(&mut c, "k3", "a"), 1);
    // The old name is free; the next fence is above the moved lock's.
    assert!(granted(&mut c, "k", "w", TTL, &[]) > fb);
}

#[test]
fn client_unblock_answers_a_shared_waiter() {
    let server = Server::new();
    let mut c = server.conn();
    granted(&mut c, "k", "x", TTL, &[]);
    let r1 = Pending::join(&server, "k", "r1", TTL, &["SHARED", "WAIT", "0"]);
    let r2 = Pending::join(
        &server,
        "k",
        "r2",
        TTL,
        &["SHARED", "LIMIT", "3", "WAIT", "0"],
    );
    let timeouts = stat(&mut c, "lock_wait_timeouts");
    assert_eq!(client_unblock(&mut c, r1.id, false), 1);
    r1.null_within(AT_ONCE, "CLIENT UNBLOCK");
    assert_eq!(client_unblock(&mut c, r2.id, true), 1);
    match r2.reply_within(AT_ONCE) {
        Some((Err(e), _)) if e.starts_with("UNBLOCKED") => {}
        other => panic!("CLIENT UNBLOCK ERROR: r2 must get the UNBLOCKED error, got {other:?}"),
    }
    assert_eq!(info(&mut c, "k").unwrap().waiters, 0, "both left the queue");
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);
    // docs/operations.md, `INFO lock`: `lock_wait_timeouts` counts the waits that ended in null.
    assert_eq!(stat(&mut c, "lock_wait_timeouts"), timeouts + 1);
    assert_eq!(release(&mut c, "k", "x"), 1);
    assert!(!exists(&mut c, "k"), "nobody was granted: the key goes");
}

/// A queued exclusive request that leaves (its `WAIT` times out, its client disconnects or is
/// unblocked) no longer holds back the shared requests behind it: they are granted at once,
/// beside the shared holds, without waiting for a hold to end.
#[test]
fn shared_waiters_behind_an_exclusive_one_that_leaves_are_granted_at_once() {
    let server = Server::new();
    let mut c = server.conn();
    for how in ["timeout", "disconnect", "unblock"] {
        let key = format!("k:{how}");
        granted(&mut c, &key, "a", TTL, &["SHARED"]);
        granted(&mut c, &key, "b", TTL, &["SHARED"]);
        let timeout = if how == "timeout" { "300" } else { "0" };
        let w = Pending::join(&server, &key, "w", TTL, &["WAIT", timeout]);
        let r = Pending::join(
            &server,
            &key,
            "r",
            TTL,
            &["SHARED", "LIMIT", "3", "WAIT", "0"],
        );
        r.still_waiting(Duration::from_millis(50), how);
        let left = Instant::now();
        match how {
            "timeout" => {
                w.null_within(Duration::from_secs(2), how);
            }
            "disconnect" => {
                assert!(
                    cmd!(&mut c, "CLIENT", "KILL", "ID", w.id).is_ok(),
                    "CLIENT KILL"
                );
            }
            _ => {
                assert_eq!(client_unblock(&mut c, w.id, false), 1);
                w.null_within(AT_ONCE, how);
            }
        }
        let (fence, at) = r.granted_within(Duration::from_secs(2), how);
        let late = at.saturating_duration_since(left);
        assert!(
            late < Duration::from_millis(if how == "timeout" { 500 } else { 200 }),
            "{how}: the shared waiter was granted {late:?} after the exclusive one left"
        );
        let hs = holders(&mut c, &key).expect("the key");
        assert_eq!(tokens(&Some(hs.clone())), ["a", "b", "r"], "{how}");
        assert!(
            hs.iter().all(|h| h.fence <= fence),
            "{how}: r's fence is the last"
        );
    }
}

/// Leases that end during `CLIENT PAUSE … WRITE` are ended, and handed on, when writes
/// resume: `k` has two shared holds and an exclusive waiter, `lone` a shared hold alone.
#[test]
fn client_pause_write_defers_shared_lease_ends_and_their_hand_off() {
    let server = Server::new();
    let mut c = server.conn();
    let acquired = Instant::now();
    granted(&mut c, "k", "a", 300, &["SHARED"]);
    let fb = granted(&mut c, "k", "b", 300, &["SHARED"]);
    granted(&mut c, "lone", "c", 300, &["SHARED"]);
    let w = Pending::join(&server, "k", "w", TTL, &["WAIT", "0"]);
    let ends0 = stat(&mut c, "lock_lease_ends");
    cmd!(&mut c, "CLIENT", "PAUSE", 5_000, "WRITE").unwrap();
    sleep((acquired + Duration::from_millis(800)).saturating_duration_since(Instant::now()));
    w.still_waiting(Duration::ZERO, "the leases ended during the pause");
    assert!(
        exists(&mut c, "k") && exists(&mut c, "lone"),
        "the keys stay while paused"
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0,
        "no lease is ended while paused"
    );
    cmd!(&mut c, "CLIENT", "UNPAUSE").unwrap();
    let resumed = Instant::now();
    let (fw, at) = w.granted_within(AT_ONCE, "writes resumed");
    assert!(at + Duration::from_millis(5) >= resumed);
    assert!(fw > fb);
    let hs = holders(&mut c, "k").unwrap();
    assert_eq!(
        (hs.len(), hs[0].token.as_str(), hs[0].mode.as_str()),
        (1, "w", "exclusive")
    );
    assert!(
        common::wait_until(AT_ONCE, || !exists(&mut c, "lone")),
        "lone's lease ended in the pause: the key must go once writes resume"
    );
    assert_eq!(stat(&mut c, "lock_lease_ends"), ends0 + 3);
}

#[test]
fn expire_on_a_shared_key() {
    let server = Server::new();
    let mut c = server.conn();
    let (_, w, r) = shared_key_with_waiters(&server, &mut c);
    let set = Instant::now();
    assert_eq!(cmd!(&mut c, "PEXPIRE", "k", 300), Ok(Value::Int(1)));
    assert!(matches!(cmd!(&mut c, "PTTL", "k"), Ok(Value::Int(t)) if t > 0 && t <= 300));
    let gone = common::wait_until(Duration::from_secs(3), || !exists(&mut c, "k"));
    assert!(gone, "k did not expire within 3 s of PEXPIRE k 300");
    let seen = Instant::now();
    for p in [&w, &r] {
        let at = p.null_within(
            (seen + AT_ONCE).saturating_duration_since(Instant::now()),
            "the key expired",
        );
        assert!(
            at >= set + Duration::from_millis(300),
            "{} answered before the key expired",
            p.token
        );
    }
    assert_eq!(release(&mut c, "k", "a"), 0, "every hold went with the key");
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);

    // PERSIST keeps the holds, and the key TTL goes.
    granted(&mut c, "p", "a", TTL, &["SHARED"]);
    granted(&mut c, "p", "b", TTL, &["SHARED"]);
    let before = holders(&mut c, "p").unwrap();
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut c, "PEXPIRE", "p", 100_000), Ok(Value::Int(1)));
    assert_eq!(cmd!(&mut c, "PERSIST", "p"), Ok(Value::Int(1)));
    assert_eq!(cmd!(&mut c, "PTTL", "p"), Ok(Value::Int(-1)));
    assert_same_holds(
        &before,
        &holders(&mut c, "p").unwrap(),
        t0.elapsed(),
        "PERSIST",
    );
}

#[test]
fn a_full_server_refuses_shared_acquires_and_still_lets_holders_go() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = granted(&mut c, "k", "a", TTL, &["SHARED"]);
    cmd!(&mut c, "CONFIG", "SET", "maxmemory-policy", "noeviction").unwrap();
    cmd!(&mut c, "CONFIG", "SET", "maxmemory", 1).unwrap();
    let set = cmd!(&mut c, "SET", "plain", "v");
    assert!(
        matches!(&set, Err(e) if e.starts_with("OOM")),
        "the server must be full: {set:?}"
    );
    let before = holders(&mut c, "k").unwrap();
    let t0 = Instant::now();
    for (key, t, opts) in [
        ("k", "b", &["SHARED"][..]),
        ("k", "b", &["SHARED", "LIMIT", "3", "WAIT", "100"]),
        ("new", "b", &["SHARED"]),
    ] {
        let r = acquire_with(&mut c, key, t, 1_000, opts);
        assert!(
            matches!(&r, Err(e) if e.starts_with("OOM ")),
            "LOCK.ACQUIRE {key} {t} {opts:?} on a full server: {r:?}"
        );
    }
    assert_same_holds(&before, &holders(&mut c, "k").unwrap(), t0.elapsed(), "OOM");
    assert!(!exists(&mut c, "new"));
    assert_eq!(
        common::extend(&mut c, "k", "a", 30_000),
        1,
        "EXTEND on a full server"
    );
    let nf = common::fence(&mut c, "k", "a").expect("FENCE on a full server");
    assert!(nf > fa);
    assert_eq!(release(&mut c, "k", "a"), 1, "RELEASE on a full server");
    assert!(!exists(&mut c, "k"));
    cmd!(&mut c, "CONFIG", "SET", "maxmemory", 0).unwrap();
    assert!(granted(&mut c, "k", "b", TTL, &["SHARED"]) > nf);
}
