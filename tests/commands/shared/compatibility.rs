//! Which requests are compatible: shared holds coexist and exclude exclusive ones both ways;
//! `LIMIT n` admits exactly n, each request by its own limit; bad limits and `LIMIT` without
//! `SHARED` are refused and change nothing.

use std::time::Instant;

use crate::common::holds::{acquire_with, assert_same_holds, holders, stat, tokens};
use crate::common::{exists, info, release, Server};
use crate::shared::{exclusive, fence_or_nil, holds, shared, try_shared, TTL};
use redis::Value;

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
    let without_shared = "ERR syntax error: LIMIT needs SHARED";
    let twice = |option: &str| format!("ERR syntax error: {option} given twice");
    let (shared_twice, limit_twice, wait_twice) = (twice("SHARED"), twice("LIMIT"), twice("WAIT"));
    let no_number = "ERR syntax error: LIMIT needs a number";
    let unknown = "ERR syntax error: expected SHARED, LIMIT n or WAIT timeout";
    let cases: [(&[&str], &str); 16] = [
        (&["SHARED", "LIMIT", "0"], range),
        (&["SHARED", "LIMIT", "-1"], range),
        (&["SHARED", "LIMIT", "2147483649"], range),
        (&["SHARED", "LIMIT", "9223372036854775807"], range),
        (&["SHARED", "LIMIT", "x"], not_int),
        (&["SHARED", "LIMIT", "1.5"], not_int),
        (&["SHARED", "LIMIT", ""], not_int),
        (&["SHARED", "LIMIT", "99999999999999999999"], not_int),
        (&["LIMIT", "4"], without_shared),
        (&["LIMIT", "4", "WAIT", "0"], without_shared),
        (&["SHARED", "SHARED"], &shared_twice),
        (&["SHARED", "LIMIT", "2", "LIMIT", "2"], &limit_twice),
        (&["SHARED", "LIMIT"], no_number),
        (&["SHARED", "WAIT", "0", "WAIT", "0"], &wait_twice),
        (&["EXCLUSIVE"], unknown),
        (&["SHARED", "LIMIT", "3", "EXTRA"], unknown),
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
