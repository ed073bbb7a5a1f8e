//! Payloads the module must refuse, and what a refusal must leave behind: no key and
//! nothing in the fence issuer. Fences past the top of the range, version-3 payloads that
//! break one rule each, values after the last one, and a token in two holds.

use crate::cmd;
use crate::common::dump::{
    self, with_trailer, Layout, LockBody, SavedHold, EXCLUSIVE, OP_EOF, OP_UINT, SHARED,
};
use crate::common::*;
use crate::restore::fuzz_server::Fuzz;
use crate::restore::rules::{rules, Expect};
use crate::restore::samples::{format_of, sample};
use crate::restore::{now_ms, MAX_FENCE, MAX_LEFT_MS, MAX_TOKEN, TOP};
use redis::Value;

/// Fences are accepted from outside from 1 to 2^53-1-2^32: exact as doubles, with room for
/// 2^32 more above them (a key near 2^53 would leave the whole server without fences, since
/// the high-water mark is the server's). A `RESTORE` of a larger one is refused and leaves
/// nothing behind in the fence issuer; one at the top is accepted, later fences (on it and
/// on fresh keys) go on above it, and the dataset still saves and loads. (That no fence is
/// issued past 2^53-1 is a unit test of `src/fence.rs`: reaching it takes 2^32 fences.)
///
/// (Before: `rdb_load` accepted any fence up to 2^63-1, and the next fence was replied as a
/// negative integer.)
#[test]
fn restored_fences_at_the_top_of_the_range() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let (saved_at, _, _, holds) = s.v3();
    let hold = holds[0].clone();
    // The key's last fence and its holder's.
    let with_fence = |fence: u64| {
        let h = SavedHold {
            fence,
            ..hold.clone()
        };
        fmt.v3(EXCLUSIVE, fence, saved_at, vec![h])
    };
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    for fence in [
        TOP + 1,
        MAX_FENCE,
        MAX_FENCE + 1,
        1 << 62,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX,
        0,
    ] {
        let r = cmd!(c, "RESTORE", "k", 0, with_fence(fence).as_slice());
        assert_err_starts(&r, "ERR");
        assert!(
            !exists(c, "k"),
            "fence {fence}: a refused RESTORE left the key"
        );
        // Nothing of it lingers: a fresh key's fence is the next one at the clock floor.
        let n = acquire(c, "fresh", "a", 10_000).unwrap();
        let floor = |ms: i64| (ms as u64) << 11;
        assert!(
            n > last && (n as u64) < floor(now_ms() + 60_000),
            "after refusing fence {fence}: a fresh key got {n} (before: {last})"
        );
        last = n;
        assert_eq!(release(c, "fresh", "a"), 1);
    }
    // The top of the range: accepted, and later fences go on above it, on any key.
    let r = cmd!(c, "RESTORE", "k", 0, with_fence(TOP).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    assert_eq!(info(c, "k").unwrap().fence as u64, TOP);
    // Each next fence is the least of the server's epoch (0: its low 2 bits clear) above.
    assert_eq!(TOP % 4, 3);
    assert_eq!(fence(c, "k", "tok"), Some((TOP + 1) as i64));
    assert_eq!(
        acquire(c, "fresh", "a", 10_000),
        Some((TOP + 5) as i64),
        "a fresh key after the top"
    );
    assert_eq!(release(c, "k", "tok"), 1);
    assert_eq!(acquire(c, "k", "b", 10_000), Some((TOP + 9) as i64));
    // A lock at the top saves and loads again.
    let r = cmd!(c, "RESTORE", "top", 0, with_fence(TOP).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    assert_eq!(cmd!(c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    let i = info(c, "top").expect("the lock at the top after DEBUG RELOAD");
    assert_eq!(i.fence as u64, TOP);
    let next = fence(c, "top", "tok").unwrap() as u64;
    assert!(
        next > TOP + 3 && next <= MAX_FENCE,
        "after DEBUG RELOAD the next fence is {next}"
    );
    assert_eq!(cmd!(c, "SAVE"), Ok(Value::Okay));
    f.server.assert_alive();
}

/// What a fresh key's fence says of the fence issuer after a refusal: the next one above
/// `last`, at the clock floor (nothing of the refused payload's fences is left in it).
fn fresh_fence_after(c: &mut redis::Connection, last: i64, what: &str) -> i64 {
    let n = acquire(c, "fresh", "a", 10_000).unwrap();
    let floor = |ms: i64| (ms as u64) << 11;
    assert!(
        n > last && (n as u64) < floor(now_ms() + 60_000),
        "after refusing {what}: a fresh key got {n} (before: {last})"
    );
    assert_eq!(release(c, "fresh", "a"), 1);
    n
}

/// Version-3 payloads that break one rule each, all with valid checksums and otherwise
/// sane holds whose fences are an hour of floor ahead of the clock: each is refused (an
/// `ERR`), leaves no key and nothing in the fence issuer, and the server stays up.
#[test]
fn version_3_payloads_that_break_a_rule_are_refused() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let now = now_ms();
    let far = ((now + 3_600_000) as u64) << 11;
    let hold = |t: &str, left: i64, fence: u64| SavedHold::new(t, now + left, fence);
    let three = || {
        vec![
            hold("a", 20_000, far),
            hold("b", 40_000, far + 2),
            hold("c", 30_000, far + 1),
        ]
    };
    let v3 = |mode, last, count, holds| {
        fmt.body(
            3,
            Layout::V3 {
                saved_at: now,
                mode,
                last_fence: last,
                count,
                holds,
            },
        )
    };
    let cases: Vec<(&str, LockBody)> = vec![
        ("mode 2", v3(2, far + 2, 3, three())),
        ("mode 2^64-1", v3(u64::MAX, far + 2, 3, three())),
        ("count 0, no holds", v3(SHARED, far, 0, vec![])),
        ("count 0, holds after it", v3(SHARED, far + 2, 0, three())),
        (
            "exclusive, 2 holds",
            v3(EXCLUSIVE, far + 2, 2, three()[..2].to_vec()),
        ),
        ("exclusive, 3 holds", v3(EXCLUSIVE, far + 2, 3, three())),
        (
            "a hold's fence above the last",
            v3(SHARED, far + 1, 3, three()),
        ),
        (
            "a list cut short",
            v3(SHARED, far + 2, 3, three()[..2].to_vec()),
        ),
        ("a list with no holds", v3(SHARED, far + 2, 3, vec![])),
        ("count 2^32", v3(SHARED, far + 2, 1 << 32, three())),
        ("count 2^64-1", v3(SHARED, far + 2, u64::MAX, three())),
        ("count 2^63", v3(SHARED, far + 2, 1 << 63, three())),
        ("an empty token", {
            let mut h = three();
            h[1].token.clear();
            v3(SHARED, far + 2, 3, h)
        }),
        ("a token of 257 bytes", {
            let mut h = three();
            h[2].token = vec![b'z'; MAX_TOKEN + 1];
            v3(SHARED, far + 2, 3, h)
        }),
        ("a token of 4,096 bytes", {
            let mut h = three();
            h[0].token = vec![b'z'; 4_096];
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease of ten years and 1 ms", {
            let mut h = three();
            h[1].deadline = now + MAX_LEFT_MS + 1;
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease of 2^62 ms", {
            let mut h = three();
            h[2].deadline = now + (1 << 62);
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease whose deadline - saved_at overflows", {
            let mut h = three();
            h[0].deadline = i64::MIN + 5;
            v3(SHARED, far + 2, 3, h)
        }),
        ("a hold's fence 0", {
            let mut h = three();
            h[2].fence = 0;
            v3(SHARED, far + 2, 3, h)
        }),
        (
            "a last fence above 2^53-1-2^32",
            v3(SHARED, TOP + 1, 3, three()),
        ),
        ("a last fence and a hold's above 2^53-1-2^32", {
            let mut h = three();
            h[1].fence = TOP + 1;
            v3(SHARED, TOP + 1, 3, h)
        }),
        ("version 3's values under version 2's id", {
            v3(SHARED, far + 2, 3, three()).with_encver(2)
        }),
        ("version 2's values under version 3's id", {
            let hold = hold("a", 20_000, far);
            fmt.body(
                2,
                Layout::V2 {
                    hold,
                    saved_at: now,
                },
            )
            .with_encver(3)
        }),
        ("version 3's values under version 5's id", {
            v3(SHARED, far + 2, 3, three()).with_encver(5)
        }),
    ];
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    for (what, body) in &cases {
        assert_eq!(
            rules(body, now),
            Expect::Refused,
            "{what}: this file's rules"
        );
        let c = &mut f.con;
        let r = cmd!(c, "RESTORE", "k", 0, fmt.payload(body).as_slice());
        assert!(
            r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
            "{what}: RESTORE replied {r:?}"
        );
        assert!(!exists(c, "k"), "{what}: a refused RESTORE left the key");
        last = fresh_fence_after(c, last, what);
    }
    // The same holds under a valid header load, as a check of the cases.
    let c = &mut f.con;
    let body = v3(SHARED, far + 2, 3, three());
    assert!(matches!(rules(&body, now), Expect::Loaded(_)));
    let r = cmd!(c, "RESTORE", "k", 0, fmt.payload(&body).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    let got = dump::holders(c, "k").expect("the sane lock");
    assert_eq!(
        got.iter().map(|h| h.fence as u64).collect::<Vec<_>>(),
        [far, far + 2, far + 1]
    );
    f.server.assert_alive();
}

/// Values after a lock's last one (a hold more than version 3's count, a value after version 2's
/// save time): the module reads the lock it expects, and Redis then refuses the payload for the
/// value where the EOF opcode should be. That refusal must cost nothing either (docs/guarantees.md,
/// guarantee 6): no key, and nothing of the payload's fences (an hour of floor ahead of the clock)
/// left in the fence issuer.
#[test]
fn values_after_the_last_one_are_refused_and_leave_no_fence_behind() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let now = now_ms();
    // Each case's fences are its own hours of floor ahead of the clock.
    let far = |hours: i64| ((now + hours * 3_600_000) as u64) << 11;
    let holds = vec![
        SavedHold::new("a", now + 20_000, far(1)),
        SavedHold::new("b", now + 40_000, far(1) + 1),
    ];
    let counted_one = fmt.body(
        3,
        Layout::V3 {
            saved_at: now,
            mode: SHARED,
            last_fence: far(1) + 1,
            count: 1,
            holds,
        },
    );
    // Version 2 with one more unsigned value before the EOF.
    let hold = SavedHold::new("a", now + 20_000, far(2));
    let mut v2 = fmt
        .body(
            2,
            Layout::V2 {
                hold,
                saved_at: now,
            },
        )
        .encode();
    v2.pop();
    v2.extend([OP_UINT, 5, OP_EOF]);
    let cases = [
        (
            "version 3, a hold more than counted",
            counted_one.encode(),
            far(1),
        ),
        ("version 2, a value after the save time", v2, far(2)),
    ];
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    let mut lingered = Vec::new();
    for (what, body, fences) in cases {
        let r = cmd!(
            c,
            "RESTORE",
            "k",
            0,
            with_trailer(&body, fmt.rdb_version).as_slice()
        );
        assert!(
            r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
            "{what}: RESTORE replied {r:?}"
        );
        assert!(!exists(c, "k"), "{what}: a refused RESTORE left the key");
        let n = acquire(c, "fresh", "a", 10_000).unwrap();
        assert_eq!(release(c, "fresh", "a"), 1);
        if !(n > last && (n as u64) < fences) {
            lingered.push(format!(
                "{what}: a fresh key then got {n} (before: {last}; the payload's fences from \
                 {fences})"
            ));
        }
        last = n;
    }
    assert!(
        lingered.is_empty(),
        "refused payloads left fences behind: {lingered:#?}"
    );
}

/// A token holds a key once (`LOCK.ACQUIRE` of a token that holds it renews that hold), so
/// a version-3 payload with one token in two holds is not a lock the module could have
/// saved: it is refused, as other impossible values are.
#[test]
fn a_token_holds_a_lock_once() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let (_, _, last, holds) = s.v3();
    let now = now_ms();
    let mut holds = holds.to_vec();
    holds.push(SavedHold {
        deadline: now + 50_000,
        ..holds[0].clone()
    });
    let payload = fmt.v3(SHARED, last, now, holds);
    let c = &mut f.con;
    let r = cmd!(c, "RESTORE", "k", 0, payload.as_slice());
    let got = dump::holders(c, "k");
    assert!(
        r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
        "RESTORE of a lock held twice by token a replied {r:?}; LOCK.HOLDERS: {got:?}"
    );
}
