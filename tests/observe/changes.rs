//! The change kinds: what moves the state `LOCK.OBSERVE` follows (the newest fence among the
//! key's live holds, 0 when nobody holds it) and what does not. Each change answers the
//! observers that saw the old state at once, with the key's `LOCK.INFO` as it is after the
//! change; what is not a change leaves them blocked.

use std::time::{Duration, Instant};

use crate::common::holds::shared;
use crate::common::{acquire, extend, fence, info, release, Server, Waiter};
use crate::observer::Observer;
use crate::{answered, answered_at_once, assert_info, observing, seen_of, wait_observing};
use crate::{AT_ONCE, LATE, QUIET, TTL};

#[test]
fn a_grant_to_a_free_key_is_a_change() {
    let s = Server::new();
    let mut c = s.conn();
    let mut o = Observer::join(&s, "k", 0, 0);
    let t0 = Instant::now();
    let f = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let got = answered_at_once(&mut o, t0, "grant to a free key").expect("not null");
    assert_eq!(got.holder.as_deref(), Some(&b"a"[..]));
    assert_eq!(
        got.fence, f,
        "the observer reports the fence the acquire got"
    );
    assert_eq!((got.mode.as_str(), got.holders), ("exclusive", 1));
    assert_info(&Some(got), &info(&mut c, "k"), 50, "grant to a free key");
}

/// Holder A releases to waiter B: the observer that saw A's fence is answered once, with B
/// holding under the fence B was answered, never with the free lock in between (observers
/// are answered after the waiters the change grants).
#[test]
fn a_hand_off_from_the_queue_answers_once_with_the_new_holder() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut b = Waiter::join(&s, "k", "b", TTL, 0);
    let mut o = Observer::join(&s, "k", fa, 0);
    let before = answered(&mut c);
    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "a"), 1);
    let got = answered_at_once(&mut o, t0, "hand-off").expect("never null in a hand-off");
    let fb = b.reply().expect("b is granted");
    assert!(fb > fa, "b's fence {fb} is above a's {fa}");
    assert_eq!(got.holder.as_deref(), Some(&b"b"[..]), "{got:?}");
    assert_eq!(got.fence, fb, "the observer reports b's own fence");
    assert_eq!((got.waiters, got.holders), (0, 1), "{got:?}");
    // Once: nothing follows on the socket, and one observer was counted.
    o.silent_for(QUIET, "after its one answer");
    assert_eq!(answered(&mut c), before + 1);
    assert_eq!(observing(&mut c), 0);
}

#[test]
fn a_release_with_nobody_waiting_answers_null() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut o = Observer::join(&s, "k", fa, 0);
    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(answered_at_once(&mut o, t0, "release"), None);
}

/// A lease end is a change made by the server's clock: answered no earlier than the
/// deadline, and soon after it (README: leases end on time, on the monotonic clock).
#[test]
fn a_lease_end_answers_at_the_deadline() {
    let s = Server::new();
    let mut c = s.conn();
    let ttl = 400;
    let acquired = Instant::now();
    let fa = acquire(&mut c, "k", "a", ttl).expect("k is free");
    let mut o = Observer::send(&s, "k", fa, 0);
    let got = o.info_within(Duration::from_secs(3), "lease end");
    assert_eq!(got, None, "nobody waits: the lock is gone");
    let at = o.answered_after(acquired);
    let ttl = Duration::from_millis(ttl);
    assert!(
        at >= ttl,
        "answered {at:?} after the acquire, before the lease's {ttl:?}"
    );
    assert!(at <= ttl + LATE, "answered {at:?} after the acquire: late");

    // With a waiter, the lease end hands the lock on: the observer sees the new holder.
    let fa = acquire(&mut c, "k", "a", 300).expect("k is free");
    let mut b = Waiter::join(&s, "k", "b", TTL, 0);
    let mut o = Observer::join(&s, "k", fa, 0);
    let got = o.info_within(Duration::from_secs(3), "lease end to a waiter");
    let fb = b.reply().expect("b is granted at the lease end");
    let got = got.expect("handed on, not null");
    assert_eq!((got.holder.as_deref(), got.fence), (Some(&b"b"[..]), fb));
}

#[test]
fn lock_fence_is_a_change() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut o = Observer::join(&s, "k", fa, 0);
    let t0 = Instant::now();
    let f2 = fence(&mut c, "k", "a").expect("a holds k");
    let got = answered_at_once(&mut o, t0, "LOCK.FENCE").expect("held");
    assert_eq!((got.holder.as_deref(), got.fence), (Some(&b"a"[..]), f2));
    assert!(f2 > fa);
}

/// `LOCK.EXTEND` and a holder's renewal keep the fence: not changes. The observer is still
/// blocked afterwards, and answered by the next real change.
#[test]
fn extend_and_renewal_are_not_changes() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut o = Observer::join(&s, "k", fa, 0);
    assert_eq!(extend(&mut c, "k", "a", TTL * 2), 1);
    assert_eq!(
        acquire(&mut c, "k", "a", TTL),
        Some(fa),
        "a renewal keeps the fence"
    );
    o.silent_for(QUIET, "after LOCK.EXTEND and a renewal");
    assert_eq!(observing(&mut c), 1);
    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(answered_at_once(&mut o, t0, "release after them"), None);
}

/// Shared holds: the state is the newest fence among the live holds. A hold joining is a
/// change; the newest leaving is one; an older one leaving is not.
#[test]
fn shared_holds_joining_and_leaving() {
    let s = Server::new();
    let mut c = s.conn();
    let f1 = shared(&mut c, "k", "r1", TTL);
    let mut o = Observer::join(&s, "k", f1, 0);
    let t0 = Instant::now();
    let f2 = shared(&mut c, "k", "r2", TTL);
    let got = answered_at_once(&mut o, t0, "a shared hold joins").expect("held");
    assert_eq!(
        (got.mode.as_str(), got.holders, got.fence),
        ("shared", 2, f2)
    );
    let f3 = shared(&mut c, "k", "r3", TTL);
    assert!(f1 < f2 && f2 < f3);

    // r2 is not the newest: the state stays f3.
    let mut o = Observer::join(&s, "k", f3, 0);
    assert_eq!(release(&mut c, "k", "r2"), 1);
    o.silent_for(QUIET, "an older shared hold leaves");

    // r3 is: the state falls back to r1's fence.
    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "r3"), 1);
    let got = answered_at_once(&mut o, t0, "the newest shared hold leaves").expect("held");
    assert_eq!((got.mode.as_str(), got.holders), ("shared", 1), "{got:?}");
    // The reply's `fence` is LOCK.INFO's, the last one issued (docs/commands.md, LOCK.INFO):
    // f3, above the state. So on a shared key the state is not in the reply; the state is f1
    // now: observing it blocks, observing f3 does not.
    assert_eq!(got.fence, f3, "{got:?}");
    let mut at_f1 = Observer::join(&s, "k", f1, 0);
    let mut at_f3 = Observer::send(&s, "k", f3, 0);
    at_f3.info_within(AT_ONCE, "seen f3 after r3 left");
    at_f1.silent_for(QUIET, "seen f1, r1's, the newest live hold");
    assert_eq!(release(&mut c, "k", "r1"), 1);
    assert_eq!(at_f1.info_within(AT_ONCE, "the last hold leaves"), None);
}

/// A timeout answers whatever the state is then: the current `LOCK.INFO`, unchanged.
#[test]
fn a_timeout_answers_the_unchanged_state() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut b = Waiter::join(&s, "k", "b", TTL, 0);
    let before = answered(&mut c);
    let timeout = Duration::from_millis(300);
    let mut o = Observer::send(&s, "k", fa, 300);
    let got = o.info_within(Duration::from_secs(3), "timeout");
    let waited = o.waited();
    assert!(
        waited >= timeout,
        "answered after {waited:?}, before its timeout"
    );
    assert!(waited <= timeout + LATE, "answered after {waited:?}: late");
    assert_info(&got, &info(&mut c, "k"), 50, "timeout");
    assert_eq!(seen_of(&got), fa);
    assert_eq!(got.as_ref().map(|i| i.waiters), Some(1));
    assert_eq!(answered(&mut c), before + 1);
    assert_eq!(observing(&mut c), 0);

    // On a key that does not exist: null at the timeout.
    let mut o = Observer::send(&s, "free", 0, 200);
    assert_eq!(
        o.info_within(Duration::from_secs(3), "timeout, no key"),
        None
    );
    assert!(o.waited() >= Duration::from_millis(200));
    assert!(o.waited() <= Duration::from_millis(200) + LATE);
    assert!(!b.has_reply(), "b is still queued behind a");
}

/// `seen` other than the state answers at once, and nobody is left observing.
#[test]
fn seen_other_than_the_state_answers_at_once() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let now = info(&mut c, "k");
    for seen in [0, fa - 1, fa + 1, i64::MAX] {
        let mut o = Observer::send(&s, "k", seen, 0);
        let got = o.info_within(AT_ONCE, &format!("seen {seen}, state {fa}"));
        assert!(o.waited() <= AT_ONCE, "seen {seen}: {:?}", o.waited());
        assert_info(&got, &now, 100, &format!("seen {seen}"));
    }
    let mut o = Observer::send(&s, "free", 1, 0);
    assert_eq!(o.info_within(AT_ONCE, "seen 1 on a free key"), None);
    wait_observing(&mut c, 0);
}
