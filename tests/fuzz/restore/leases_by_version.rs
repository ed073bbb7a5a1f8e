//! Leases by encoding version: versions 2 and 3 restore each hold with the time it had
//! left (whatever the dumping server's clock), version 1 with its absolute deadline; and a
//! shared lock moves to another server with the time each hold had left.

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::dump::{self, Dump, Layout, SavedHold, EXCLUSIVE, SHARED};
use crate::common::*;
use crate::restore::fuzz_server::Fuzz;
use crate::restore::rules::{rules, Lease};
use crate::restore::samples::{format_of, sample};
use crate::restore::{now_ms, MAX_FENCE, MAX_LEFT_MS};
use redis::Value;

/// (saved_at, deadline - saved_at, the lease left if it loads) around the edges of what
/// `RESTORE` accepts, read at Unix ms `now`.
fn lease_cases(now: i64) -> [(i64, i64, Option<i64>); 13] {
    let hour = 3_600_000;
    [
        (now, 20_000, Some(20_000)),
        (now - hour, 20_000, Some(20_000)),
        (now + hour, 20_000, Some(20_000)),
        (0, 20_000, Some(20_000)),
        (now - hour, MAX_LEFT_MS, Some(MAX_LEFT_MS)),
        (now + hour, MAX_LEFT_MS + 1, None),
        (now, 0, Some(0)),
        (now + hour, -1, Some(-1)),
        (now - hour, -20_000, Some(-20_000)),
        (1, i64::MIN + 1, Some(i64::MIN + 1)),
        (-1, i64::MAX, None),
        // deadline - saved_at overflows (deadline wraps to i64::MIN): i64::MIN - 1,
        // i64::MIN - i64::MAX.
        (1, i64::MAX, None),
        (i64::MAX, 1, None),
    ]
}

/// Encoding version 2 carries the lease as the time it had left when dumped
/// (deadline - saved_at), whatever the clock of the server that dumped it said: exactly that,
/// never more, never less than it less the time the commands took. Up to ten years of it;
/// more, or a difference that overflows, is refused.
#[test]
fn version_2_payloads_restore_with_the_time_they_had_left() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let fence0 = s.v3().2;
    let now = now_ms();
    let hour = 3_600_000;
    let v2 = |saved_at: i64, deadline: i64| {
        let hold = SavedHold::new("tok", deadline, fence0);
        fmt.body(2, Layout::V2 { hold, saved_at })
    };
    for (saved_at, left, loads) in lease_cases(now) {
        // The overflowing ones wrap here, as the module reads them back.
        let deadline = saved_at.wrapping_add(left);
        f.what = format!("saved_at {saved_at}, deadline {deadline} (left {left})");
        let body = v2(saved_at, deadline);
        let expect = rules(&body, now);
        assert_eq!(
            expect.leases(),
            loads.map(|l| vec![Lease::Left(l)]),
            "{}: this file's rules",
            f.what
        );
        f.restore("k", &fmt.payload(&body), Some(&expect));
    }
    // The lease left ends on time, however far the dumping server's clock was.
    let payload = fmt.payload(&v2(now - hour, now - hour + 300));
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut f.con, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let c = &mut f.con;
    assert!(wait_until(Duration::from_secs(5), || !exists(c, "k")));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(299) && took < Duration::from_millis(1_300),
        "a 300 ms lease restored from a clock an hour behind ended after {took:?}"
    );
}

/// Encoding version 3 carries each hold's lease as the time it had left when dumped, as
/// version 2 does its one: a shared lock whose first hold has each lease of
/// [`lease_cases`] and whose other two have 20 s and 40 s left loads with exactly those
/// (the ones over already gone), or is refused as a whole. Each lease then ends on time.
#[test]
fn version_3_payloads_restore_each_hold_with_the_time_it_had_left() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b", b"c"], 60_000, true);
    let fmt = format_of(&s);
    let (_, _, last, holds) = s.v3();
    let holds = holds.to_vec();
    let now = now_ms();
    let hour = 3_600_000;
    let v3 = |saved_at: i64, lefts: [i64; 3]| {
        let holds = holds
            .iter()
            .zip(lefts)
            .map(|(h, left)| SavedHold {
                deadline: saved_at.wrapping_add(left),
                ..h.clone()
            })
            .collect();
        fmt.body(3, Layout::v3(SHARED, last, saved_at, holds))
    };
    for (saved_at, left, loads) in lease_cases(now) {
        for lefts in [[left, 20_000, 40_000], [40_000, 20_000, left]] {
            f.what = format!("saved_at {saved_at}, holds with {lefts:?} left");
            let body = v3(saved_at, lefts);
            let expect = rules(&body, now);
            let want = loads.map(|_| lefts.map(Lease::Left).to_vec());
            assert_eq!(expect.leases(), want, "{}: this file's rules", f.what);
            f.restore("k", &fmt.payload(&body), Some(&expect));
        }
    }
    // Each lease left ends on time, however far the dumping server's clock was: one after
    // 300 ms, one after 600 ms, the last after 900 ms.
    let at = now_ms() - hour;
    let payload = fmt.payload(&v3(at, [600, 900, 300]));
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut f.con, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let mut ends = Vec::new();
    for live in [2, 1, 0] {
        let c = &mut f.con;
        assert!(wait_until(Duration::from_secs(5), || {
            dump::holders(c, "k").map_or(0, |h| h.len()) == live
        }));
        ends.push(t0.elapsed());
    }
    let ms = |n: u64| Duration::from_millis(n);
    assert!(
        ends.iter()
            .zip([300, 600, 900])
            .all(|(t, at)| *t >= ms(at - 1) && *t < ms(at + 1_000)),
        "leases of 300, 600 and 900 ms restored from a clock an hour behind ended after \
         {ends:?}"
    );
    // The sweep removes the key within a few ms of its last lease's end.
    let c = &mut f.con;
    assert!(
        wait_until(Duration::from_millis(200), || !exists(c, "k")),
        "the key outlived its last lease by 200 ms"
    );
}

/// A shared lock of three holds, with different leases and fences (one fenced again after
/// the others joined), dumped on one server and restored on another: the payload is version
/// 3 with every hold in grant order, and `LOCK.HOLDERS` on the second server lists the same
/// tokens, fences and mode, each with the time it had left (never more than 2 ms over, never
/// less than it less the time the move took); `LOCK.INFO` agrees.
#[test]
fn shared_holds_move_to_another_server_with_the_time_each_had_left() {
    let from = Server::new();
    let to = Server::new();
    let (mut a, mut b) = (from.conn(), to.conn());
    for (token, ttl) in [("r1", 20_000), ("r2", 40_000), ("r3", 30_000)] {
        let r = cmd!(&mut a, "LOCK.ACQUIRE", "k", token, ttl, "SHARED");
        assert!(matches!(r, Ok(Value::Int(_))), "{token}: {r:?}");
    }
    let refenced = fence(&mut a, "k", "r1").expect("a new fence for r1");
    let t0 = Instant::now();
    // Both in one MULTI, so that they describe the same instant.
    let replies = exec(
        &mut a,
        &[args(&["LOCK.HOLDERS", "k"]), args(&["DUMP", "k"])],
    );
    let before = dump::parse_holders(&replies[0]).expect("the shared lock");
    let Value::BulkString(payload) = &replies[1] else {
        panic!("DUMP: {:?}", replies[1]);
    };
    let d = Dump::read(payload);
    let (saved_at, mode, last, holds) = d.v3();
    assert_eq!(mode, SHARED, "{d:?}");
    assert_eq!(last as i64, refenced, "the key's last fence: {d:?}");
    assert_eq!(
        holds
            .iter()
            .map(|h| (h.token.clone(), h.fence as i64))
            .collect::<Vec<_>>(),
        before
            .iter()
            .map(|h| (h.token.clone(), h.fence))
            .collect::<Vec<_>>(),
        "the payload's holds in grant order"
    );
    // DUMP reads the clock when it runs, LOCK.HOLDERS at the start of the MULTI; each rounds
    // up to the millisecond.
    let multi_took = t0.elapsed().as_millis() as i64 + 1;
    for (h, e) in holds.iter().zip(&before) {
        let left = h.deadline - saved_at;
        assert!(
            left >= e.ttl - multi_took && left <= e.ttl + 2,
            "{h:?} saved {left} ms left, LOCK.HOLDERS said {e:?} ({multi_took} ms)"
        );
    }
    assert_eq!(
        cmd!(&mut b, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    // Both in one MULTI, so that they describe the same instant.
    let replies = exec(
        &mut b,
        &[args(&["LOCK.HOLDERS", "k"]), args(&["LOCK.INFO", "k"])],
    );
    // Rounded up like `multi_took`: a lease a few hundred µs shorter reads 1 ms less.
    let took = t0.elapsed().as_millis() as i64 + 1;
    let after = dump::parse_holders(&replies[0]).expect("the restored lock");
    let i = parse_info(&replies[1]).expect("the restored lock");
    assert_eq!(after.len(), 3, "{after:?}");
    for (e, was) in after.iter().zip(&before) {
        assert!(
            e.token == was.token
                && e.fence == was.fence
                && e.mode == "shared"
                && e.ttl <= was.ttl + 2
                && e.ttl >= was.ttl - took,
            "moved {was:?} is {e:?} ({took} ms later)"
        );
    }
    assert!(
        i.mode == "shared"
            && i.holders == 3
            && i.fence == refenced
            && i.ttl == after.iter().map(|e| e.ttl).max().unwrap(),
        "LOCK.INFO {i:?} of {after:?}"
    );
    // The moved holds are the lock's on the second server: a new hold is fenced above them.
    let r = cmd!(&mut b, "LOCK.ACQUIRE", "k", "r4", 10_000, "SHARED");
    assert!(
        matches!(r, Ok(Value::Int(f)) if f > refenced),
        "a new shared hold after the move: {r:?}"
    );
}

/// A version-1 payload (three fields under the type id of encoding version 1, as the module
/// dumped them before version 2) still restores, its deadline read as absolute Unix ms; and
/// the lock then dumps as version 3.
#[test]
fn version_1_payloads_still_restore_with_an_absolute_deadline() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let fence0 = s.v3().2;
    let v1 = |deadline: i64, fence: u64| {
        let body = fmt.body(1, Layout::V1(SavedHold::new("tok", deadline, fence)));
        (fmt.payload(&body), body)
    };
    let now = now_ms();
    let hour = 3_600_000;
    for (deadline, fence) in [
        (now + 20_000, fence0),
        (now + hour, fence0 + 5),
        // Read as time left it would be 20 s; as absolute it is long over.
        (now - hour + 20_000, fence0 + 6),
        (now - 1, fence0 + 7),
        (now + MAX_LEFT_MS - 86_400_000, fence0 + 8),
        (now + MAX_LEFT_MS + 86_400_000, fence0 + 9),
        (now + 20_000, MAX_FENCE + 1),
        (now + 20_000, 0),
    ] {
        let (payload, body) = v1(deadline, fence);
        let expect = rules(&body, now_ms());
        f.what = format!("version 1, deadline {deadline} (now {now}), fence {fence}");
        f.restore("k", &payload, Some(&expect));
    }
    // A version-1 lock dumps as version 3, with its lease as time left.
    let (payload, _) = v1(now_ms() + 30_000, fence0);
    let c = &mut f.con;
    assert_eq!(
        cmd!(c, "RESTORE", "v1", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let d = Dump::read(&dump::dump(c, "v1"));
    let (saved_at, mode, last, holds) = d.v3();
    let left = holds[0].deadline - saved_at;
    assert!(
        mode == EXCLUSIVE
            && last == fence0
            && holds.len() == 1
            && holds[0].token == b"tok"
            && holds[0].fence == fence0
            && (28_000..=30_001).contains(&left),
        "a version-1 lock with 30 s left dumped with {left} ms left: {d:?}"
    );
}
