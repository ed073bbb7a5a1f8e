//! The waiter registry's rules, without a server.

use super::*;

fn registry() -> Registry<u32> {
    Registry::default()
}

fn queue(r: &mut Registry<u32>, handle: u32, key: &[u8], timeout_at: Option<u64>) -> u64 {
    let token = format!("t{handle}");
    r.enqueue(
        handle,
        0,
        key,
        (token.as_bytes(), 100, Want::EXCLUSIVE),
        timeout_at,
    )
}

#[test]
fn a_head_that_leaves_is_noted_for_the_engine() {
    let mut r = registry();
    let head = queue(&mut r, 1, b"k", Some(100));
    let next = queue(&mut r, 2, b"k", None);
    queue(&mut r, 3, b"k", None);
    // Not the head: nothing changes at the front.
    r.leave(next);
    assert!(r.take_heads_left().is_empty());
    assert!(r.pop_timed_out(100).is_some());
    assert_eq!(r.take_heads_left(), vec![(0, Box::from(&b"k"[..]))]);
    assert!(r.take_heads_left().is_empty(), "taken once");
    assert_eq!(r.leave(head), Some(Left::Answered), "answered, not queued");
    // The last waiter leaving leaves no queue to serve.
    let last = r.head(0, b"k").map(|w| w.client).unwrap();
    r.leave(r.id_of(last).unwrap());
    assert!(r.take_heads_left().is_empty());
}

#[test]
fn grants_go_in_fifo_order_and_wait_for_delivery() {
    let mut r = registry();
    let ids: Vec<_> = (1..=3).map(|h| queue(&mut r, h, b"k", None)).collect();
    assert_eq!(r.queued_at(0, b"k"), 3);
    assert_eq!(r.head(0, b"k").unwrap().token.as_ref(), b"t1");
    assert_eq!(r.grant_head(0, b"k", 42, true), Some((1, ids[0])));
    assert_eq!(r.queued_at(0, b"k"), 2);
    assert_eq!(r.deliver(ids[0]), Some(Reply::Granted(42)));
    assert_eq!(r.grant_head(0, b"k", 43, true), Some((2, ids[1])));
    assert_eq!(r.head(0, b"k").unwrap().token.as_ref(), b"t3");
}

#[test]
fn ids_are_never_reused_even_for_the_same_handle() {
    let mut r = registry();
    let a = queue(&mut r, 7, b"k", None);
    assert_eq!(r.leave(a), Some(Left::Queued(7)));
    let b = queue(&mut r, 7, b"k", None);
    assert!(b > a);
    assert_eq!(r.leave(a), None, "a departed waiter is not found again");
    assert_eq!(r.id_of(7), Some(b));
}

#[test]
fn a_key_event_answers_queued_and_granted_waiters_of_that_key_only() {
    let mut r = registry();
    let g = queue(&mut r, 1, b"k", None);
    let q = queue(&mut r, 2, b"k", Some(500));
    let other = queue(&mut r, 3, b"o", None);
    r.grant_head(0, b"k", 9, true);
    assert_eq!(r.answer_key(0, b"k"), vec![(2, q)]);
    assert_eq!(
        r.deliver(g),
        Some(Reply::Null),
        "a grant not yet told is withdrawn"
    );
    assert_eq!(r.deliver(q), Some(Reply::Null));
    assert_eq!(r.next_timeout(), None);
    assert_eq!(r.queued_at(0, b"o"), 1);
    assert_eq!(r.grant_head(0, b"k", 10, true), None);
    assert_eq!(r.grant_head(0, b"o", 10, true), Some((3, other)));
}

#[test]
fn a_flush_answers_one_database_or_all() {
    let mut r = registry();
    let a = r.enqueue(1, 0, b"k", (b"t", 1, Want::EXCLUSIVE), None);
    let b = r.enqueue(2, 1, b"k", (b"t", 1, Want::EXCLUSIVE), None);
    let c = r.enqueue(3, 2, b"k", (b"t", 1, Want::EXCLUSIVE), None);
    assert_eq!(r.answer_db(Some(1), Reply::Null), vec![(2, b)]);
    let mut rest = r.answer_db(None, Reply::Demoted);
    rest.sort();
    assert_eq!(rest, vec![(1, a), (3, c)]);
    assert_eq!(r.queued(), 0);
    assert_eq!(r.deliver(a), Some(Reply::Demoted));
    assert_eq!(r.deliver(b), Some(Reply::Null));
    assert_eq!(r.deliver(c), Some(Reply::Demoted));
    assert!(r.is_empty());
}

#[test]
fn timeouts_leave_the_queue_in_deadline_order() {
    let mut r = registry();
    let late = queue(&mut r, 1, b"k", Some(300));
    let early = queue(&mut r, 2, b"k", Some(100));
    let never = queue(&mut r, 3, b"k", None);
    assert_eq!(r.next_timeout(), Some(100));
    assert_eq!(r.pop_timed_out(99), None);
    assert_eq!(r.pop_timed_out(300), Some((2, early)));
    assert_eq!(r.pop_timed_out(300), Some((1, late)));
    assert_eq!(r.pop_timed_out(u64::MAX), None);
    assert_eq!(r.queued_at(0, b"k"), 1);
    assert_eq!(r.grant_head(0, b"k", 5, true), Some((3, never)));
}

#[test]
fn a_burst_of_waiters_gives_its_tables_back() {
    let mut r = registry();
    let ids: Vec<_> = (0..10_000).map(|h| queue(&mut r, h, b"k", None)).collect();
    let full = r.waiters.capacity();
    for id in ids {
        r.leave(id);
    }
    assert!(r.is_empty());
    assert!(
        r.waiters.capacity() * 16 < full,
        "{} of {full}",
        r.waiters.capacity()
    );
    assert!(r.by_handle.capacity() <= 128, "{}", r.by_handle.capacity());
}

#[test]
fn leaving_tells_how_the_waiter_stood() {
    let mut r = registry();
    let g = queue(&mut r, 1, b"k", Some(100));
    let q = queue(&mut r, 2, b"k", Some(100));
    r.grant_head(0, b"k", 77, true);
    assert_eq!(
        r.leave(g),
        Some(Left::Granted {
            db: 0,
            key: b"k".to_vec().into(),
            token: b"t1".to_vec().into(),
            fence: 77
        })
    );
    assert_eq!(r.leave(q), Some(Left::Queued(2)));
    assert_eq!(r.leave(q), None);
    assert!(r.is_empty());
    let a = queue(&mut r, 3, b"k", None);
    r.answer_key(0, b"k");
    assert_eq!(r.leave(a), Some(Left::Answered));
    assert!(r.is_empty());
}

#[test]
fn a_grant_another_request_was_told_of_is_not_taken_back() {
    let mut r = registry();
    // t1's grant made a hold; t2's renewed one it had: only the first is to be taken back.
    let fresh = queue(&mut r, 1, b"k", None);
    let renewal = queue(&mut r, 2, b"k", None);
    r.grant_head(0, b"k", 7, true);
    r.grant_head(0, b"k", 8, false);
    assert_eq!(r.leave(renewal), Some(Left::Answered));
    // Another request of t1 is told of the hold (a retry from a pool): t1's waiter leaving
    // must not take it from under that one.
    let again = queue(&mut r, 3, b"k", None);
    r.grant_head(0, b"k", 9, true);
    r.adopt(0, b"k", b"t1");
    assert_eq!(r.leave(fresh), Some(Left::Answered));
    // Adopting names one token: t3's grant is still its own.
    assert!(matches!(
        r.leave(again),
        Some(Left::Granted { fence: 9, .. })
    ));
    assert!(r.is_empty());
}

#[test]
fn the_last_untold_grant_of_a_token_to_leave_takes_the_hold_back() {
    let mut r = registry();
    let same = |r: &mut Registry<u32>, handle: u32| {
        r.enqueue(handle, 0, b"k", (b"a", 100, Want::EXCLUSIVE), None)
    };
    // Two requests of one token: a new hold, then its renewal, neither told yet.
    let (first, second) = (same(&mut r, 1), same(&mut r, 2));
    r.grant_head(0, b"k", 7, true);
    r.grant_head(0, b"k", 7, false);
    assert_eq!(
        r.leave(first),
        Some(Left::Answered),
        "the second still to be told"
    );
    assert!(matches!(
        r.leave(second),
        Some(Left::Granted { fence: 7, .. })
    ));
    // Once one of them is told, neither takes the hold back.
    let (first, second) = (same(&mut r, 3), same(&mut r, 4));
    r.grant_head(0, b"k", 8, true);
    r.grant_head(0, b"k", 8, false);
    assert_eq!(r.deliver(first), Some(Reply::Granted(8)));
    assert_eq!(r.leave(second), Some(Left::Answered));
    assert!(r.is_empty());
}
