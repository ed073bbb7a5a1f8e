//! Shared holds, one key at a time (README, `LOCK.ACQUIRE … SHARED [LIMIT n]` and
//! `LOCK.HOLDERS`), against a real server: which requests are compatible, what `LIMIT n`
//! admits and refuses, per-holder leases, downgrade and the refused upgrade, `LOCK.RELEASE` /
//! `LOCK.EXTEND` / `LOCK.FENCE` on the caller's hold only, the `LOCK.INFO` and `LOCK.HOLDERS`
//! replies in RESP2 and RESP3, and `LOCK.GUARD` on a shared key. The queue across kinds, `LIMIT`
//! under contention and the server's keyspace rules for shared keys are in `tests/shared_queue.rs`.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::holds::{acquire_with, assert_same_holds, bulk, holders, stat, tokens, Hold, Pending};
use common::{exists, info, release, Server};
use redis::{Connection, Value};

/// "At once": a reply caused by a change made just now arrives within this.
const AT_ONCE: Duration = Duration::from_millis(300);
/// A change due at a deadline (a lease end) is seen within this after it.
const LATE: Duration = Duration::from_millis(250);
/// How long a request that must stay queued is watched for a reply it must not get.
const QUIET: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;
const UPGRADE: &str =
    "ERR the token holds the lock shared: release it to take it exclusively (no upgrades)";

// ------------------------------------------------------------------------------- helpers

/// A fence (`Some`) or null (`None`); panics on anything else.
#[track_caller]
fn fence_or_nil(r: Result<Value, String>, what: &str) -> Option<i64> {
    match r {
        Ok(Value::Int(f)) if f > 0 => Some(f),
        Ok(Value::Nil) => None,
        other => panic!("{what}: expected a fence or null, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token ttl SHARED opts…`: `Some(fence)` or `None`.
#[track_caller]
fn try_shared(
    con: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    opts: &[&str],
) -> Option<i64> {
    let mut all = vec!["SHARED"];
    all.extend_from_slice(opts);
    let what = format!("LOCK.ACQUIRE {key} {token} {ttl} {}", all.join(" "));
    fence_or_nil(acquire_with(con, key, token, ttl, &all), &what)
}

/// A shared acquire that must be granted: its fence.
#[track_caller]
fn shared(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    try_shared(con, key, token, ttl, &[])
        .unwrap_or_else(|| panic!("{token}: SHARED on {key} must be granted"))
}

/// An exclusive acquire that must be granted: its fence.
#[track_caller]
fn exclusive(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    common::acquire(con, key, token, ttl)
        .unwrap_or_else(|| panic!("{token}: exclusive on {key} must be granted"))
}

/// `LOCK.HOLDERS key`, which must not be null.
#[track_caller]
fn holds(con: &mut Connection, key: &str) -> Vec<Hold> {
    holders(con, key).unwrap_or_else(|| panic!("LOCK.HOLDERS {key}: null, the key must exist"))
}

// ------------------------------------------------------------------------- compatibility

#[test]
fn shared_holds_coexist_and_exclude_exclusive_holds_both_ways() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = shared(&mut c, "k", "a", TTL);
    let fb = shared(&mut c, "k", "b", TTL);
    assert!(
        fb > fa,
        "a new shared hold gets a larger fence: {fa} then {fb}"
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!(
        (i.holder, i.fence, i.waiters, i.mode.as_str(), i.holders),
        (None, fb, 0, "shared", 2),
        "LOCK.INFO of two shared holds"
    );
    let before = holds(&mut c, "k");
    assert_eq!(tokens(&before), ["a", "b"]);
    assert_eq!((before[0].fence, before[1].fence), (fa, fb), "{before:?}");
    assert!(before.iter().all(|h| h.mode == "shared"), "{before:?}");

    // An exclusive request is refused while shared holds last: null, nothing changes.
    let contended = stat(&mut c, "lock_contended_acquires");
    let t0 = Instant::now();
    assert_eq!(acquire_with(&mut c, "k", "x", TTL, &[]), Ok(Value::Nil));
    assert_same_holds(
        &before,
        &holds(&mut c, "k"),
        t0.elapsed(),
        "exclusive refused",
    );
    assert_eq!(info(&mut c, "k").unwrap().fence, fb, "no fence issued");
    assert_eq!(stat(&mut c, "lock_contended_acquires"), contended + 1);
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(release(&mut c, "k", "b"), 1);
    assert!(!exists(&mut c, "k"), "the last hold released: the key goes");

    // And a shared request is refused while an exclusive hold lasts.
    let fx = exclusive(&mut c, "k", "x", TTL);
    assert!(fx > fb, "fences never go backwards: {fb} then {fx}");
    let before = holds(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(try_shared(&mut c, "k", "y", TTL, &[]), None);
    assert_eq!(try_shared(&mut c, "k", "y", TTL, &["LIMIT", "10"]), None);
    assert_same_holds(&before, &holds(&mut c, "k"), t0.elapsed(), "shared refused");
    assert_eq!(before.len(), 1);
    assert_eq!(
        (
            before[0].token.as_str(),
            before[0].fence,
            before[0].mode.as_str()
        ),
        ("x", fx, "exclusive")
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!(
        (i.holder.as_deref(), i.fence, i.mode.as_str(), i.holders),
        (Some(&b"x"[..]), fx, "exclusive", 1)
    );
    assert_eq!(stat(&mut c, "lock_contended_acquires"), contended + 3);
    assert_eq!(release(&mut c, "k", "x"), 1);
    assert!(!exists(&mut c, "k"));
}

#[test]
fn limit_n_admits_exactly_n_and_each_request_uses_its_own_limit() {
    let server = Server::new();
    let mut c = server.conn();
    let mut last = 0;
    for t in ["t1", "t2", "t3"] {
        let f = try_shared(&mut c, "sem", t, TTL, &["LIMIT", "3"])
            .unwrap_or_else(|| panic!("{t}: LIMIT 3 with fewer than 3 holders must be granted"));
        assert!(f > last, "fences increase");
        last = f;
    }
    let f1 = holds(&mut c, "sem")[0].fence;
    // (each request, holders before it, granted?)
    let cases: [(&str, &[&str], usize, bool); 7] = [
        ("t4", &["LIMIT", "3"], 3, false),
        ("t5", &["LIMIT", "5"], 3, true),
        ("t6", &["LIMIT", "4"], 4, false),
        ("t7", &["LIMIT", "1"], 4, false),
        ("t8", &[], 4, true),
        ("t9", &["LIMIT", "6"], 5, true),
        ("t10", &["LIMIT", "6"], 6, false),
    ];
    for (t, opts, n, granted) in cases {
        assert_eq!(holds(&mut c, "sem").len(), n, "holders before {t}");
        let r = try_shared(&mut c, "sem", t, TTL, opts);
        assert_eq!(
            r.is_some(),
            granted,
            "{t} SHARED {opts:?} with {n} holders: got {r:?}"
        );
        if let Some(f) = r {
            assert!(f > last, "{t}: fence {f} after {last}");
            last = f;
        }
    }
    // A holder renewing is not a new hold: same fence, whatever its LIMIT says.
    assert_eq!(
        try_shared(&mut c, "sem", "t1", 30_000, &["LIMIT", "1"]),
        Some(f1)
    );
    let hs = holds(&mut c, "sem");
    assert_eq!(tokens(&hs), ["t1", "t2", "t3", "t5", "t8", "t9"]);
    assert!(
        hs[0].ttl <= 30_000 && hs[0].ttl > 29_000,
        "t1 renewed: {hs:?}"
    );
    assert_eq!(info(&mut c, "sem").unwrap().holders, 6);
    assert_eq!(release(&mut c, "sem", "t2"), 1);
    assert_eq!(
        try_shared(&mut c, "sem", "t6", TTL, &["LIMIT", "6"]).map(|f| f > last),
        Some(true)
    );
    assert_eq!(try_shared(&mut c, "sem", "t7", TTL, &["LIMIT", "6"]), None);
    // The largest limit, options in any order and any case.
    assert!(try_shared(&mut c, "sem", "t11", TTL, &["LIMIT", "2147483648"]).is_some());
    for (t, opts) in [
        ("u1", &["LIMIT", "20", "SHARED"][..]),
        ("u2", &["WAIT", "0", "LIMIT", "20", "SHARED"]),
        ("u3", &["shared", "limit", "20", "wait", "100"]),
    ] {
        let r = fence_or_nil(acquire_with(&mut c, "sem", t, TTL, opts), t);
        assert!(r.is_some(), "{t} {opts:?} must be granted");
    }
    assert_eq!(info(&mut c, "sem").unwrap().holders, 10);
}

#[test]
fn bad_limits_and_limit_without_shared_are_refused_and_change_nothing() {
    let server = Server::new();
    let mut c = server.conn();
    shared(&mut c, "k", "a", TTL);
    shared(&mut c, "k", "b", TTL);
    let range = "ERR limit must be between 1 and 2147483648";
    let not_int = "ERR limit is not an integer or out of range";
    let syntax = "ERR syntax error";
    let cases: [(&[&str], &str); 16] = [
        (&["SHARED", "LIMIT", "0"], range),
        (&["SHARED", "LIMIT", "-1"], range),
        (&["SHARED", "LIMIT", "2147483649"], range),
        (&["SHARED", "LIMIT", "9223372036854775807"], range),
        (&["SHARED", "LIMIT", "x"], not_int),
        (&["SHARED", "LIMIT", "1.5"], not_int),
        (&["SHARED", "LIMIT", ""], not_int),
        (&["SHARED", "LIMIT", "99999999999999999999"], not_int),
        (&["LIMIT", "4"], syntax),
        (&["LIMIT", "4", "WAIT", "0"], syntax),
        (&["SHARED", "SHARED"], syntax),
        (&["SHARED", "LIMIT", "2", "LIMIT", "2"], syntax),
        (&["SHARED", "LIMIT"], syntax),
        (&["SHARED", "WAIT", "0", "WAIT", "0"], syntax),
        (&["EXCLUSIVE"], syntax),
        (&["SHARED", "LIMIT", "3", "EXTRA"], syntax),
    ];
    let acquires = stat(&mut c, "lock_acquires");
    for key in ["k", "free"] {
        for (opts, want) in cases {
            let before = holders(&mut c, key);
            let fence = info(&mut c, key).map(|i| i.fence);
            let t0 = Instant::now();
            let r = acquire_with(&mut c, key, "c", TTL, opts);
            assert_eq!(
                r,
                Err(want.to_string()),
                "{key}: LOCK.ACQUIRE {key} c {TTL} {opts:?}"
            );
            match (before, holders(&mut c, key)) {
                (Some(b), Some(a)) => assert_same_holds(&b, &a, t0.elapsed(), want),
                (None, None) => {}
                (b, a) => panic!("{key} {opts:?}: {b:?} became {a:?}"),
            }
            assert_eq!(info(&mut c, key).map(|i| i.fence), fence, "{key} {opts:?}");
        }
    }
    assert!(!exists(&mut c, "free"), "a refused acquire creates no key");
    assert_eq!(
        stat(&mut c, "lock_acquires"),
        acquires,
        "nothing was acquired"
    );
    assert_eq!(tokens(&holds(&mut c, "k")), ["a", "b"]);
}

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

// --------------------------------------------------------------------- reply shapes

/// The fields of a `LOCK.INFO` reply in order: a flat array under RESP2, a map under RESP3.
fn info_fields(v: &Value, resp3: bool) -> Vec<(String, Value)> {
    match (v, resp3) {
        (Value::Array(items), false) if items.len() == 12 => items
            .chunks(2)
            .map(|p| (bulk(&p[0], "field name"), p[1].clone()))
            .collect(),
        (Value::Map(m), true) => m
            .iter()
            .map(|(k, v)| (bulk(k, "field name"), v.clone()))
            .collect(),
        _ => panic!("LOCK.INFO (RESP{}): {v:?}", if resp3 { 3 } else { 2 }),
    }
}

/// `LOCK.INFO key` is exactly holder, fence, ttl (within `ttl`), waiters, mode, holders.
#[track_caller]
fn expect_info(
    con: &mut Connection,
    resp3: bool,
    key: &str,
    want: (Option<&str>, i64, (i64, i64), i64, &str, i64),
) {
    let v = cmd!(con, "LOCK.INFO", key).unwrap();
    let f = info_fields(&v, resp3);
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["holder", "fence", "ttl", "waiters", "mode", "holders"],
        "{v:?}"
    );
    let (holder, fence, (lo, hi), waiters, mode, n) = want;
    let holder = holder.map_or(Value::Nil, |h| Value::BulkString(h.as_bytes().to_vec()));
    assert_eq!(f[0].1, holder, "{key} holder: {v:?}");
    assert_eq!(f[1].1, Value::Int(fence), "{key} fence: {v:?}");
    assert!(
        matches!(f[2].1, Value::Int(t) if t >= lo && t <= hi),
        "{key} ttl: {v:?}"
    );
    assert_eq!(f[3].1, Value::Int(waiters), "{key} waiters: {v:?}");
    assert_eq!(
        f[4].1,
        Value::BulkString(mode.as_bytes().to_vec()),
        "{key} mode: {v:?}"
    );
    assert_eq!(f[5].1, Value::Int(n), "{key} holders: {v:?}");
}

#[test]
fn info_and_holders_replies_in_resp2_and_resp3() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = shared(&mut c, "sh", "a", 20_000);
    let fb = shared(&mut c, "sh", "b", 40_000);
    let fx = exclusive(&mut c, "ex", "x", 20_000);
    let fy = exclusive(&mut c, "wx", "y", 20_000);
    let _w1 = Pending::join(&server, "wx", "w1", TTL, &["SHARED", "WAIT", "0"]);
    let _w2 = Pending::join(&server, "wx", "w2", TTL, &["WAIT", "0"]);
    let fs = shared(&mut c, "ws", "s", 20_000);
    let _w3 = Pending::join(&server, "ws", "w3", TTL, &["WAIT", "0"]);
    let ttl = |ms: i64| (ms - 5_000, ms);
    for resp3 in [false, true] {
        let mut con = if resp3 { server.conn3() } else { server.conn() };
        let con = &mut con;
        expect_info(con, resp3, "sh", (None, fb, ttl(40_000), 0, "shared", 2));
        expect_info(
            con,
            resp3,
            "ex",
            (Some("x"), fx, ttl(20_000), 0, "exclusive", 1),
        );
        expect_info(
            con,
            resp3,
            "wx",
            (Some("y"), fy, ttl(20_000), 2, "exclusive", 1),
        );
        expect_info(con, resp3, "ws", (None, fs, ttl(20_000), 1, "shared", 1));
        assert_eq!(cmd!(con, "LOCK.INFO", "missing"), Ok(Value::Nil));
        assert_eq!(cmd!(con, "LOCK.HOLDERS", "missing"), Ok(Value::Nil));
        for (key, want) in [
            (
                "sh",
                vec![("a", fa, 20_000, "shared"), ("b", fb, 40_000, "shared")],
            ),
            ("ex", vec![("x", fx, 20_000, "exclusive")]),
            ("wx", vec![("y", fy, 20_000, "exclusive")]),
            ("ws", vec![("s", fs, 20_000, "shared")]),
        ] {
            let v = cmd!(con, "LOCK.HOLDERS", key).unwrap();
            let Value::Array(items) = &v else {
                panic!("LOCK.HOLDERS {key}: {v:?}")
            };
            assert_eq!(items.len(), want.len(), "{key}: {v:?}");
            for (item, (t, f, ms, mode)) in items.iter().zip(want) {
                let Value::Array(e) = item else {
                    panic!("LOCK.HOLDERS {key}: {v:?}")
                };
                assert_eq!(e.len(), 4, "{key}: {v:?}");
                assert_eq!(
                    e[0],
                    Value::BulkString(t.as_bytes().to_vec()),
                    "{key}: {v:?}"
                );
                assert_eq!(e[1], Value::Int(f), "{key}: {v:?}");
                let (lo, hi) = ttl(ms);
                assert!(
                    matches!(e[2], Value::Int(t) if t >= lo && t <= hi),
                    "{key}: {v:?}"
                );
                assert_eq!(
                    e[3],
                    Value::BulkString(mode.as_bytes().to_vec()),
                    "{key}: {v:?}"
                );
            }
        }
    }
    // Null on the wire: `$-1` or `*-1` under RESP2, `_` under RESP3.
    let mut raw = server.raw();
    let r = raw.call(&[b"LOCK.HOLDERS", b"missing"]);
    assert!(
        r == b"$-1\r\n" || r == b"*-1\r\n",
        "RESP2 LOCK.HOLDERS missing: {:?}",
        String::from_utf8_lossy(&r)
    );
    assert!(raw.call(&[b"HELLO", b"3"]).starts_with(b"%"));
    assert_eq!(raw.call(&[b"LOCK.HOLDERS", b"missing"]), b"_\r\n");
}

#[test]
fn holders_arity_wrong_type_and_command_info() {
    let server = Server::new();
    let mut c = server.conn();
    shared(&mut c, "k", "a", TTL);
    for args in [&["LOCK.HOLDERS"][..], &["LOCK.HOLDERS", "k", "x"]] {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        match common::run(&cmd, &mut c) {
            Err(e) => assert!(
                e.to_lowercase()
                    .starts_with("err wrong number of arguments for 'lock.holders'"),
                "{args:?}: expected the server's arity error, got {e:?}"
            ),
            Ok(v) => panic!("{args:?}: expected an arity error, got {v:?}"),
        }
    }
    assert_eq!(tokens(&holds(&mut c, "k")), ["a"]);
    cmd!(&mut c, "SET", "s", "v").unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    assert_eq!(
        cmd!(&mut c, "LOCK.HOLDERS", "s"),
        Err(wrongtype.to_string())
    );
    assert_eq!(
        acquire_with(&mut c, "s", "a", TTL, &["SHARED", "LIMIT", "2"]),
        Err(wrongtype.to_string())
    );
    assert_eq!(
        cmd!(&mut c, "GET", "s"),
        Ok(Value::BulkString(b"v".to_vec()))
    );

    let v = cmd!(&mut c, "COMMAND", "INFO", "lock.holders").unwrap();
    let Value::Array(outer) = &v else {
        panic!("COMMAND INFO lock.holders: {v:?}")
    };
    let Some(Value::Array(e)) = outer.first() else {
        panic!("COMMAND INFO lock.holders: {v:?}")
    };
    assert_eq!(e[1], Value::Int(2), "arity 2: {v:?}");
    let flags: Vec<String> = match &e[2] {
        Value::Array(f) | Value::Set(f) => f
            .iter()
            .map(|x| match x {
                Value::SimpleString(s) => s.clone(),
                other => bulk(other, "flag"),
            })
            .collect(),
        other => panic!("flags: {other:?}"),
    };
    assert!(flags.iter().any(|f| f == "readonly"), "flags {flags:?}");
    assert!(!flags.iter().any(|f| f == "write"), "flags {flags:?}");
    assert_eq!(
        (&e[3], &e[4], &e[5]),
        (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
        "{v:?}"
    );
}

// -------------------------------------------------------------------------- LOCK.GUARD

#[test]
fn lock_guard_refuses_a_shared_key() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = shared(&mut c, "k", "a", TTL);
    let fb = shared(&mut c, "k", "b", TTL);
    let (runs, refusals) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );
    let held_shared = Err("FENCED the lock is held shared".to_string());
    for f in [fa, fb, fb + 1] {
        assert_eq!(
            cmd!(&mut c, "LOCK.GUARD", "k", f, "SET", "data", "v"),
            held_shared,
            "fence {f}"
        );
    }
    assert!(!exists(&mut c, "data"), "nothing ran");
    assert_eq!(stat(&mut c, "lock_guarded_runs"), runs);
    assert_eq!(stat(&mut c, "lock_guarded_refusals"), refusals + 3);

    // The same fence guards while exclusive, and not once downgraded.
    let fx = exclusive(&mut c, "x", "x", TTL);
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", "x", fx, "SET", "data", "1"),
        Ok(Value::Okay)
    );
    assert_eq!(
        acquire_with(&mut c, "x", "x", TTL, &["SHARED"]),
        Ok(Value::Int(fx))
    );
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", "x", fx, "SET", "data", "2"),
        held_shared
    );
    assert_eq!(
        cmd!(&mut c, "GET", "data"),
        Ok(Value::BulkString(b"1".to_vec()))
    );
}
