//! What each hold has of its own: its lease (each ends at its own deadline, and a lease end
//! grants a queued `LIMIT` waiter), its kind (a downgrade keeps the fence and grants the shared
//! head; an upgrade is refused), and `LOCK.RELEASE` / `LOCK.EXTEND` / `LOCK.FENCE`, which act
//! on the caller's hold only.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::holds::{acquire_with, assert_same_holds, holders, stat, tokens, Hold, Pending};
use crate::common::{exists, info, release, Server};
use crate::shared::{exclusive, holds, shared, try_shared, AT_ONCE, LATE, QUIET, TTL, UPGRADE};
use redis::Value;

// ----------------------------------------------------------------------- per-holder leases

/// Three shared holds with different ttls end one by one, each at its own deadline.
#[test]
fn each_shared_hold_ends_at_its_own_deadline() {
    let server = Server::new();
    let mut c = server.conn();
    let ends0 = stat(&mut c, "lock_lease_ends");
    let ttls = [("a", 400u64), ("b", 800), ("c", 1200)];
    // Each hold's deadline lies between its send + ttl and its reply + ttl.
    let mut due = Vec::new();
    for (t, ttl) in ttls {
        let sent = Instant::now();
        shared(&mut c, "k", t, ttl);
        let ttl = Duration::from_millis(ttl);
        due.push((t, sent + ttl, Instant::now() + ttl));
    }
    let i = info(&mut c, "k").unwrap();
    assert_eq!((i.mode.as_str(), i.holders), ("shared", 3));
    assert!(
        i.ttl > 1_100 && i.ttl <= 1_200,
        "ttl is the longest lease left: {i:?}"
    );
    assert_eq!(stat(&mut c, "lock_held"), 1);

    let mut gone: Vec<Option<Instant>> = vec![None; 3];
    let mut checked_longest = false;
    let stop = Instant::now() + Duration::from_secs(4);
    while Instant::now() < stop {
        let hs = holders(&mut c, "k");
        let seen = Instant::now();
        for (n, (t, _, _)) in due.iter().enumerate() {
            let present = hs
                .as_ref()
                .is_some_and(|hs| hs.iter().any(|h| h.token == *t));
            if !present && gone[n].is_none() {
                gone[n] = Some(seen);
            }
            if present {
                assert!(gone[n].is_none(), "{t} came back after it ended: {hs:?}");
            }
        }
        // While only b and c hold: INFO's ttl is c's, the longest. b must still have a while
        // to go, or it may end between `LOCK.HOLDERS` and `LOCK.INFO` (it did once, in CI).
        if let Some(hs) = &hs {
            if tokens(hs) == ["b", "c"] && hs[0].ttl > 100 && hs[1].ttl > hs[0].ttl + 300 {
                let i = info(&mut c, "k").unwrap();
                assert_eq!(i.holders, 2, "{i:?}");
                assert!(
                    i.ttl <= hs[1].ttl && i.ttl > hs[1].ttl - 50,
                    "INFO ttl {} must be the longest lease left ({hs:?})",
                    i.ttl
                );
                checked_longest = true;
            }
        }
        if hs.is_none() {
            break;
        }
        sleep(Duration::from_millis(5));
    }
    for (n, (t, earliest, latest)) in due.iter().enumerate() {
        let at = gone[n].unwrap_or_else(|| panic!("{t}'s hold never ended"));
        assert!(
            at >= *earliest,
            "{t}'s hold ended {:?} early",
            *earliest - at
        );
        assert!(
            at <= *latest + LATE,
            "{t}'s hold ended {:?} after its deadline",
            at - *latest
        );
    }
    assert!(checked_longest, "never saw b and c alone: {gone:?}");
    // LOCK.HOLDERS is null from the deadline on; the sweep removes the key within ms.
    assert!(
        common::wait_until(LATE, || !exists(&mut c, "k")),
        "the last lease ended: the key must go"
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0 + 3,
        "each lease end is counted"
    );
    assert_eq!(stat(&mut c, "lock_held"), 0);
}

#[test]
fn a_shared_lease_end_grants_a_queued_limit_waiter() {
    let server = Server::new();
    let mut c = server.conn();
    let sent = Instant::now();
    try_shared(&mut c, "sem", "a", 400, &["LIMIT", "2"]).expect("a");
    let (earliest, latest) = (
        sent + Duration::from_millis(400),
        Instant::now() + Duration::from_millis(400),
    );
    let fb = try_shared(&mut c, "sem", "b", TTL, &["LIMIT", "2"]).expect("b");
    let grants = stat(&mut c, "lock_grants");
    let w = Pending::join(
        &server,
        "sem",
        "w",
        TTL,
        &["SHARED", "LIMIT", "2", "WAIT", "0"],
    );
    let (fw, at) = w.granted_within(
        latest.saturating_duration_since(Instant::now()) + LATE,
        "a's lease end",
    );
    assert!(
        at >= earliest,
        "w granted {:?} before a's lease ended",
        earliest - at
    );
    assert!(fw > fb, "the grant's fence {fw} must be above {fb}");
    let hs = holds(&mut c, "sem");
    assert_eq!(tokens(&hs), ["b", "w"], "{hs:?}");
    assert_eq!(hs[1].fence, fw);
    assert_eq!(stat(&mut c, "lock_grants"), grants + 1);
}

// ------------------------------------------------------------------- changing kind

#[test]
fn a_downgrade_keeps_the_fence_renews_the_lease_and_grants_the_shared_head() {
    let server = Server::new();
    let mut c = server.conn();
    let fx = exclusive(&mut c, "k", "x", 2_000);
    let r1 = Pending::join(&server, "k", "r1", TTL, &["SHARED", "WAIT", "0"]);
    let r2 = Pending::join(&server, "k", "r2", TTL, &["SHARED", "WAIT", "0"]);
    let e = Pending::join(&server, "k", "e", TTL, &["WAIT", "0"]);
    let r3 = Pending::join(&server, "k", "r3", TTL, &["SHARED", "WAIT", "0"]);
    assert_eq!(info(&mut c, "k").unwrap().waiters, 4);

    assert_eq!(
        acquire_with(&mut c, "k", "x", TTL, &["SHARED"]),
        Ok(Value::Int(fx)),
        "a downgrade keeps the fence"
    );
    let (f1, _) = r1.granted_within(AT_ONCE, "downgrade");
    let (f2, _) = r2.granted_within(AT_ONCE, "downgrade");
    assert!(fx < f1 && f1 < f2, "fences in grant order: {fx} {f1} {f2}");
    e.still_waiting(QUIET, "an exclusive request behind the downgraded holder");
    r3.still_waiting(
        Duration::ZERO,
        "a shared request behind a queued exclusive one",
    );
    let hs = holds(&mut c, "k");
    assert_eq!(tokens(&hs), ["x", "r1", "r2"], "{hs:?}");
    assert_eq!((hs[0].fence, hs[0].mode.as_str()), (fx, "shared"));
    assert!(
        hs[0].ttl > TTL as i64 - 1_000,
        "the lease renewed to the new ttl: {hs:?}"
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!(
        (i.holder, i.fence, i.waiters, i.mode.as_str(), i.holders),
        (None, f2, 2, "shared", 3)
    );
    // Asking SHARED again is a renewal.
    assert_eq!(
        acquire_with(&mut c, "k", "x", TTL, &["SHARED"]),
        Ok(Value::Int(fx))
    );
    for t in ["x", "r1", "r2"] {
        assert_eq!(release(&mut c, "k", t), 1, "release {t}");
    }
    let (fe, _) = e.granted_within(AT_ONCE, "the shared holds released");
    assert!(fe > f2);
    r3.still_waiting(QUIET, "behind the exclusive holder");
    assert_eq!(release(&mut c, "k", "e"), 1);
    let (f3, _) = r3.granted_within(AT_ONCE, "e released");
    assert!(f3 > fe);
}

#[test]
fn an_upgrade_is_refused_and_the_shared_hold_is_kept() {
    let server = Server::new();
    let mut c = server.conn();
    shared(&mut c, "k", "a", 30_000);
    shared(&mut c, "k", "b", 30_000);
    let acquires = stat(&mut c, "lock_acquires");
    for round in ["with another holder", "alone"] {
        let before = holds(&mut c, "k");
        let fence = info(&mut c, "k").unwrap().fence;
        let t0 = Instant::now();
        for opts in [&[][..], &["WAIT", "0"], &["WAIT", "100"]] {
            assert_eq!(
                acquire_with(&mut c, "k", "a", TTL, opts),
                Err(UPGRADE.to_string()),
                "{round}: a (shared) asks exclusive {opts:?}"
            );
        }
        assert_same_holds(&before, &holds(&mut c, "k"), t0.elapsed(), round);
        let i = info(&mut c, "k").unwrap();
        assert_eq!(
            (i.fence, i.waiters, i.mode.as_str()),
            (fence, 0, "shared"),
            "{round}"
        );
        assert_eq!(
            stat(&mut c, "lock_waiting_clients"),
            0,
            "{round}: nobody queued"
        );
        if round == "with another holder" {
            assert_eq!(release(&mut c, "k", "b"), 1);
        }
    }
    assert_eq!(stat(&mut c, "lock_acquires"), acquires);
    assert_eq!(
        release(&mut c, "k", "a"),
        1,
        "the refused upgrader still releases"
    );
    assert!(!exists(&mut c, "k"));
}

// ------------------------------------------------------------- commands on one hold

#[test]
fn release_extend_and_fence_act_on_the_callers_hold_only() {
    let server = Server::new();
    let mut c = server.conn();
    for t in ["a", "b", "c"] {
        shared(&mut c, "k", t, 10_000);
    }
    let start = holds(&mut c, "k");
    let t0 = Instant::now();

    assert_eq!(common::extend(&mut c, "k", "b", 50_000), 1);
    let hs = holds(&mut c, "k");
    assert!(
        hs[1].ttl > 49_000 && hs[1].ttl <= 50_000,
        "b extended: {hs:?}"
    );
    let others = |hs: &[Hold]| vec![hs[0].clone(), hs[2].clone()];
    assert_same_holds(&others(&start), &others(&hs), t0.elapsed(), "EXTEND b");
    assert_eq!(
        info(&mut c, "k").unwrap().ttl,
        hs[1].ttl.max(hs[0].ttl),
        "INFO ttl: the longest"
    );

    let nf = common::fence(&mut c, "k", "b").expect("b holds: a new fence");
    assert!(
        nf > start[2].fence,
        "LOCK.FENCE {nf} must be above every fence ({start:?})"
    );
    let hs = holds(&mut c, "k");
    assert_eq!(hs[1].fence, nf, "b holds the new fence: {hs:?}");
    assert!(hs[1].ttl > 48_000, "LOCK.FENCE leaves b's lease: {hs:?}");
    assert_same_holds(&others(&start), &others(&hs), t0.elapsed(), "FENCE b");
    assert_eq!(info(&mut c, "k").unwrap().fence, nf);

    assert_eq!(release(&mut c, "k", "b"), 1);
    let hs = holds(&mut c, "k");
    assert_same_holds(&others(&start), &hs, t0.elapsed(), "RELEASE b");
    assert_eq!(release(&mut c, "k", "b"), 0, "b released already");
    assert_eq!(common::extend(&mut c, "k", "b", 1_000), 0);
    assert_eq!(common::fence(&mut c, "k", "b"), None);
    assert_eq!(release(&mut c, "k", "stranger"), 0);
    assert_eq!(common::extend(&mut c, "k", "stranger", 1_000), 0);
    assert_eq!(common::fence(&mut c, "k", "stranger"), None);
    assert_same_holds(
        &others(&start),
        &holds(&mut c, "k"),
        t0.elapsed(),
        "strangers",
    );
    let fd = shared(&mut c, "k", "d", 10_000);
    assert!(
        fd > nf,
        "the next hold's fence {fd} is above LOCK.FENCE's {nf}"
    );
}
