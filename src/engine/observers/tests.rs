use super::*;

type Obs = Observers<u32>;

fn handles(woken: &[(u32, ObserverId)]) -> Vec<u32> {
    let mut h: Vec<u32> = woken.iter().map(|&(h, _)| h).collect();
    h.sort_unstable();
    h
}

#[test]
fn ids_say_observer_and_never_collide_with_waiter_ids() {
    let mut o = Obs::default();
    let a = o.observe(1, 0, b"k", 0, None);
    let b = o.observe(2, 0, b"k", 0, None);
    assert!(is_observer(a) && is_observer(b) && a != b);
    // Waiter ids count up from 1 (waiters.rs).
    assert!(!is_observer(1) && !is_observer(u64::MAX >> 1));
}

#[test]
fn a_change_answers_those_that_saw_another_state_only() {
    let mut o = Obs::default();
    o.observe(1, 0, b"k", 5, None);
    o.observe(2, 0, b"k", 5, None);
    o.observe(4, 0, b"other", 5, None);
    assert_eq!(o.blocked(), 3);
    // The state is still 5 (an extend): nobody is answered.
    assert!(o.changed(0, b"k", 5).is_empty());
    assert_eq!(o.blocked(), 3);
    // Released: both that saw 5 are answered; the other key's observer stays.
    assert_eq!(handles(&o.changed(0, b"k", 0)), vec![1, 2]);
    assert_eq!(o.blocked(), 1);
    // One that saw 0 (it came after the release) stays through a change to 0.
    o.observe(3, 0, b"k", 0, None);
    assert!(o.changed(0, b"k", 0).is_empty());
    assert!(o.watches(0, b"k") && o.watches(0, b"other"));
    // Another database's key of the same name is another key.
    assert!(o.changed(1, b"other", 9).is_empty());
    assert_eq!(handles(&o.changed(0, b"k", 7)), vec![3]);
    assert!(!o.watches(0, b"k"));
}

#[test]
fn an_answered_observer_is_delivered_once_and_forgotten() {
    let mut o = Obs::default();
    let id = o.observe(1, 3, b"k", 5, Some(100));
    assert_eq!(o.changed(3, b"k", 6), vec![(1, id)]);
    // Answered: a second change, a timeout or a flush does not answer it again.
    assert!(o.changed(3, b"k", 7).is_empty());
    assert!(o.pop_timed_out(1_000).is_none());
    assert!(o.answer_db(None).is_empty());
    assert_eq!(o.deliver(id), Some((3, b"k"[..].into())));
    assert_eq!(o.deliver(id), None);
    assert!(o.is_empty() && o.id_of(1).is_none());
}

#[test]
fn timeouts_answer_in_order_and_leave_the_rest() {
    let mut o = Obs::default();
    let late = o.observe(1, 0, b"k", 0, Some(300));
    let early = o.observe(2, 0, b"k", 0, Some(100));
    o.observe(3, 0, b"k", 0, None);
    assert_eq!(o.next_timeout(), Some(100));
    assert!(o.pop_timed_out(99).is_none());
    assert_eq!(o.pop_timed_out(100), Some((2, early)));
    assert_eq!(o.next_timeout(), Some(300));
    assert_eq!(o.pop_timed_out(1_000), Some((1, late)));
    assert_eq!(o.pop_timed_out(u64::MAX), None);
    assert_eq!(o.blocked(), 1);
    assert!(o.watches(0, b"k"));
}

#[test]
fn keys_and_databases_answer_everyone_in_them() {
    let mut o = Obs::default();
    o.observe(1, 0, b"a", 0, None);
    o.observe(2, 0, b"b", 0, Some(50));
    o.observe(3, 1, b"a", 0, None);
    o.observe(4, 2, b"a", 0, None);
    assert_eq!(handles(&o.answer_key(0, b"a")), vec![1]);
    assert_eq!(handles(&o.answer_db(Some(0))), vec![2]);
    // The answered observer's timeout went with it.
    assert_eq!(o.next_timeout(), None);
    assert_eq!(handles(&o.answer_db(None)), vec![3, 4]);
    assert_eq!(o.blocked(), 0);
}

#[test]
fn leaving_says_whether_the_handle_is_still_ours() {
    let mut o = Obs::default();
    let blocked = o.observe(1, 0, b"k", 0, Some(10));
    let answered = o.observe(2, 0, b"k", 5, None);
    o.changed(0, b"k", 0);
    assert_eq!(o.id_of(2), Some(answered));
    assert_eq!(
        o.leave(answered),
        Some((Left::Answered, 0, b"k"[..].into()))
    );
    assert_eq!(
        o.leave(blocked),
        Some((Left::Blocked(1), 0, b"k"[..].into()))
    );
    assert_eq!(o.leave(blocked), None);
    // Nothing is kept: no list, no timeout, no handle.
    assert!(o.is_empty() && !o.watches(0, b"k"));
    assert_eq!(o.next_timeout(), None);
    assert_eq!(o.blocked(), 0);
    assert!(o.by_key.is_empty() && o.by_handle.is_empty() && o.timeouts.is_empty());
}

#[test]
fn a_thousand_observers_are_answered_by_one_change() {
    let mut o = Obs::default();
    for h in 0..1_000u32 {
        o.observe(h, 0, b"leader", 42, Some(u64::from(h) + 1_000));
    }
    let woken = o.changed(0, b"leader", 43);
    assert_eq!(woken.len(), 1_000);
    assert_eq!(o.blocked(), 0);
    assert_eq!(o.next_timeout(), None);
    for (_, id) in woken {
        assert!(o.deliver(id).is_some());
    }
    assert!(o.is_empty());
}
