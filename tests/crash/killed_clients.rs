//! Client processes killed with SIGKILL: holders mid-hold and waiters while they wait. A
//! killed waiter leaves the queue, a killed holder's lease runs out on time (neither early
//! nor blocking), and the waiters behind are served in order with increasing fences.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::child_processes::Proc;
use crate::common::*;
use crate::SLACK;

#[test]
fn killed_holders_and_waiters_neither_block_nor_shorten_leases() {
    const T: u64 = 1000;
    let ttl = Duration::from_millis(T);
    let s = Server::new();
    let mut c = s.conn();
    let port = s.port;
    let holder_of = |c: &mut redis::Connection| info(c, "k").and_then(|i| i.holder);
    let waiters = |c: &mut redis::Connection| info(c, "k").map_or(0, |i| i.waiters);

    // h1 holds; w1, w2, w3 (a child that will hold on after its grant), w4 queue behind it.
    let t_lo = Instant::now();
    let mut h1 = Proc::holder(port, "k", "h1", T);
    let f1 = h1.fence(Duration::from_secs(10));
    let t_hi = Instant::now();
    let mut w1 = Proc::cli_waiter(port, "k", "w1", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 1));
    let mut w2 = Proc::cli_waiter(port, "k", "w2", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 2));
    let mut w3 = Proc::holder(port, "k", "w3", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 3));
    let mut w4 = Proc::cli_waiter(port, "k", "w4", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 4));

    // SIGKILL the holder mid-hold and the first waiter while it waits.
    h1.kill9();
    w1.kill9();
    let killed = Instant::now();
    assert!(
        killed + Duration::from_millis(200) < t_lo + ttl,
        "too slow: the kill came {} ms into a {T} ms lease",
        killed.duration_since(t_lo).as_millis()
    );
    // The killed waiter leaves the queue; the killed holder keeps its lease (no early end).
    assert!(
        wait_until(Duration::from_millis(500), || waiters(&mut c) == 3),
        "killed waiter still queued: {:?}",
        info(&mut c, "k")
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!(i.holder.as_deref(), Some(&b"h1"[..]), "{i:?}");
    assert_eq!(i.fence, f1);

    // h1's lease ends on time and w2 (not the killed w1) is served.
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"h1")));
    let g2 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w2"[..]));
    assert!(
        g2 >= t_lo + ttl,
        "h1's lease ended {} ms early",
        (t_lo + ttl - g2).as_millis()
    );
    assert!(
        g2 <= t_hi + ttl + SLACK,
        "h1's lease ended {} ms late",
        (g2 - t_hi - ttl).as_millis()
    );
    let f2 = w2.fence(Duration::from_secs(5));
    assert!(f2 > f1);
    assert!(w2.wait_exit(Duration::from_secs(5)).is_some());
    // w1's redis-cli was killed, so w1 must never hold the lock: checked by the order below.

    // w2's client is gone (redis-cli exited); its lease still runs out on time, then w3.
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"w2")));
    let g3 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w3"[..]));
    assert!(g3 >= t_lo + 2 * ttl, "w2's lease ended early");
    assert!(
        g3 <= g2 + ttl + SLACK,
        "w2's lease ended {} ms late",
        (g3 - g2 - ttl).as_millis()
    );
    let f3 = w3.fence(Duration::from_secs(5));
    assert!(f3 > f2);
    // w3 holds on after its grant: SIGKILL it mid-hold. w4 is served when its lease ends.
    sleep(Duration::from_millis(100));
    w3.kill9();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w3"[..]));
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"w3")));
    let g4 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w4"[..]));
    assert!(g4 >= t_lo + 3 * ttl, "w3's lease ended early");
    assert!(
        g4 <= g3 + ttl + SLACK,
        "w3's lease ended {} ms late",
        (g4 - g3 - ttl).as_millis()
    );
    let f4 = w4.fence(Duration::from_secs(5));
    assert!(f4 > f3);
    // Nobody is left waiting: w4's lease runs out and the key is gone.
    assert_eq!(waiters(&mut c), 0);
    assert!(wait_until(ttl + Duration::from_secs(3), || !exists(
        &mut c, "k"
    )));
    let gone = Instant::now();
    assert!(gone >= t_lo + 4 * ttl && gone <= g4 + ttl + SLACK);
    let grants = info_field(&mut c, "lock", "lock_grants");
    eprintln!(
        "killed 3 client processes (2 holders mid-hold, 1 waiter); grants observed {} / {} / {} \
         ms apart (ttl {T}); INFO lock_grants {grants:?}",
        (g2 - t_lo).as_millis(),
        (g3 - g2).as_millis(),
        (g4 - g3).as_millis()
    );
}
