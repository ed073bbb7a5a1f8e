//! The lease a `RESTORE` gives: the time the lock had left when dumped (payload versions 2
//! and 3; version 1 keeps its absolute deadline), whatever the dumping server's clock, also
//! across an AOF restart.

use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::cmd;
use crate::common::*;
use crate::payloads::restore;
use crate::HOUR_MS;

/// `RESTORE` of a version-2 or version-3 payload gives the lock (each of its holds) exactly
/// the time it had left when dumped (deadline - saved_at), whether the dumping server's clock
/// was an hour behind or ahead of this one's, and each lease ends on time; a version-1
/// payload keeps its absolute deadline.
#[test]
fn a_restored_lease_is_the_time_it_had_left() {
    let s = Server::new();
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    for offset in [-HOUR_MS, 0, HOUR_MS] {
        let saved_at = now_ms() + offset;
        let payload = fmt.v2("t", saved_at + 20_000, 1_000, saved_at);
        let t0 = Instant::now();
        restore(&mut c, "k", &payload);
        let i = info(&mut c, "k").expect("restored lock");
        let took = t0.elapsed().as_millis() as i64;
        assert!(
            i.ttl <= 20_000 && i.ttl >= 20_000 - took - 2,
            "dumped with 20000 ms left by a clock {offset} ms off: ttl {} ({took} ms later)",
            i.ttl
        );
        assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
        cmd!(&mut c, "DEL", "k").unwrap();
    }
    // Version 3: each hold gets the time it had left, its own fence, and the key its last
    // fence.
    for offset in [-HOUR_MS, 0, HOUR_MS] {
        let saved_at = now_ms() + offset;
        let lefts = [20_000, 40_000, 5_000];
        let holds = lefts
            .iter()
            .enumerate()
            .map(|(n, left)| {
                dump::SavedHold::new(format!("s{n}"), saved_at + left, 1_000 + n as u64)
            })
            .collect();
        let t0 = Instant::now();
        restore(&mut c, "k", &fmt.v3(dump::SHARED, 1_005, saved_at, holds));
        let got = dump::holders(&mut c, "k").expect("restored shared lock");
        let i = info(&mut c, "k").expect("restored shared lock");
        let took = t0.elapsed().as_millis() as i64;
        assert_eq!(got.len(), 3, "clock {offset} ms off: {got:?}");
        for (n, (h, left)) in got.iter().zip(lefts).enumerate() {
            assert!(
                h.token == format!("s{n}").as_bytes()
                    && h.fence == 1_000 + n as i64
                    && h.mode == "shared"
                    && h.ttl <= left
                    && h.ttl >= left - took - 2,
                "hold {n} dumped with {left} ms left by a clock {offset} ms off: {h:?} ({took} \
                 ms later)"
            );
        }
        assert!(
            i.mode == "shared" && i.holders == 3 && i.fence == 1_005,
            "clock {offset} ms off: {i:?}"
        );
        assert!(
            i.ttl <= 40_000 && i.ttl >= 40_000 - took - 2,
            "the longest lease left is 40000 ms: {i:?}"
        );
        cmd!(&mut c, "DEL", "k").unwrap();
    }
    // The lease left ends on time.
    let saved_at = now_ms() - HOUR_MS;
    let t0 = Instant::now();
    restore(&mut c, "k", &fmt.v2("t", saved_at + 300, 1_000, saved_at));
    assert!(wait_until(Duration::from_secs(5), || !exists(&mut c, "k")));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(299) && took < Duration::from_millis(1_500),
        "a 300 ms lease ended after {took:?}"
    );
    // Each hold's: one after 300 ms, the other after 600 ms.
    let saved_at = now_ms() - HOUR_MS;
    let holds = vec![
        dump::SavedHold::new("long", saved_at + 600, 1_000),
        dump::SavedHold::new("short", saved_at + 300, 1_001),
    ];
    let t0 = Instant::now();
    restore(&mut c, "k", &fmt.v3(dump::SHARED, 1_001, saved_at, holds));
    let one_left = |c: &mut redis::Connection| {
        dump::holders(c, "k").is_some_and(|h| h.len() == 1 && h[0].token == b"long")
    };
    assert!(wait_until(Duration::from_secs(5), || one_left(&mut c)));
    let first = t0.elapsed();
    assert!(wait_until(Duration::from_secs(5), || !exists(&mut c, "k")));
    let second = t0.elapsed();
    assert!(
        first >= Duration::from_millis(299)
            && first < Duration::from_millis(1_500)
            && second >= Duration::from_millis(599)
            && second < Duration::from_millis(1_800),
        "leases of 300 and 600 ms ended after {first:?} and {second:?}"
    );

    // Version 1: absolute.
    let now = now_ms();
    let t0 = Instant::now();
    restore(&mut c, "v1", &fmt.v1("t", now + 20_000, 1_000));
    let i = info(&mut c, "v1").expect("restored version-1 lock");
    let took = t0.elapsed().as_millis() as i64;
    assert!(
        i.ttl <= 20_000 + 50 && i.ttl >= 20_000 - took - 50,
        "version 1, deadline 20000 ms from now: ttl {}",
        i.ttl
    );
    restore(&mut c, "v1-later", &fmt.v1("t", now + HOUR_MS, 1_000));
    let i = info(&mut c, "v1-later").expect("restored version-1 lock");
    assert!(
        (HOUR_MS - 1_000..=HOUR_MS + 50).contains(&i.ttl),
        "version 1, deadline an hour from now: ttl {}",
        i.ttl
    );
    // An hour ago plus 20 s: over, though as time left it would be 20 s.
    restore(
        &mut c,
        "v1-over",
        &fmt.v1("t", now - HOUR_MS + 20_000, 1_000),
    );
    assert_eq!(
        info(&mut c, "v1-over"),
        None,
        "a version-1 deadline in the past"
    );
    assert!(acquire(&mut c, "v1-over", "other", 1_000).is_some());
}

/// A reloaded AOF holds the same deadline as the server that wrote it (docs/guarantees.md,
/// guarantee 5),
/// also for a lock that came in by `RESTORE`. The AOF records the `RESTORE` command with its
/// payload, whose lease is the time it had left when dumped, counted from the `RESTORE`; a
/// replay must not read that payload's deadline as absolute. (As of this writing it does:
/// dumped by a server whose clock was an hour behind, a 10-minute lease is over after the
/// restart; an hour ahead, a 20 s lease becomes an hour and 20 s.) Each hold of a shared
/// lock keeps its own.
#[test]
fn a_restored_lease_keeps_its_time_across_an_aof_restart() {
    let mut s = Server::start(Opts::new().appendonly());
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    let behind = now_ms() - HOUR_MS;
    restore(
        &mut c,
        "behind",
        &fmt.v2("t", behind + 600_000, 1_000, behind),
    );
    let ahead = now_ms() + HOUR_MS;
    restore(&mut c, "ahead", &fmt.v2("t", ahead + 20_000, 1_000, ahead));
    // Version 3: each hold's time left, from a clock an hour behind.
    let holds = vec![
        dump::SavedHold::new("a", behind + 600_000, 1_000),
        dump::SavedHold::new("b", behind + 300_000, 1_001),
    ];
    restore(
        &mut c,
        "shared",
        &fmt.v3(dump::SHARED, 1_001, behind, holds),
    );
    let shared_before = dump::holders(&mut c, "shared");
    let before = (info(&mut c, "behind"), info(&mut c, "ahead"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    let shared_after = dump::holders(&mut c, "shared");
    let ttls = |h: &Option<Vec<dump::Holder>>| {
        h.as_ref()
            .map(|h| h.iter().map(|h| (h.fence, h.ttl)).collect::<Vec<_>>())
    };
    assert!(
        ttls(&shared_after).is_some_and(|t| t.len() == 2
            && t[0].0 == 1_000
            && t[0].1 > 590_000
            && t[0].1 <= 600_000
            && t[1].0 == 1_001
            && t[1].1 > 290_000
            && t[1].1 <= 300_000),
        "shared holds (fence, ttl) before the restart {:?}, after the AOF replay {:?}",
        ttls(&shared_before),
        ttls(&shared_after)
    );
    let after = (info(&mut c, "behind"), info(&mut c, "ahead"));
    let ttl = |i: &Option<LockInfo>| i.as_ref().map(|i| i.ttl);
    assert!(
        ttl(&after.0).is_some_and(|t| t > 590_000 && t <= 600_000)
            && ttl(&after.1).is_some_and(|t| t > 10_000 && t <= 20_000),
        "before the restart: behind {:?}, ahead {:?}; after the AOF replay: behind {:?}, \
         ahead {:?}",
        ttl(&before.0),
        ttl(&before.1),
        ttl(&after.0),
        ttl(&after.1)
    );
}
