//! The state machine's rules, without a server.

use super::*;

/// The clocks `ms` milliseconds into a test.
fn at(ms: u64) -> Now {
    Now {
        mono: ms * 1000,
        wall_us: (1_764_000_000_000 + ms as i64) * 1000,
    }
}

fn at_us(us: u64) -> Now {
    Now {
        mono: us,
        wall_us: 1_764_000_000_000_000 + us as i64,
    }
}

fn fresh(token: &[u8], ttl: u64, now: Now, f: &mut FenceIssuer) -> (Box<Lock>, u64) {
    Lock::acquired(b"key", 0, token, ttl, Mode::Exclusive, now, f).unwrap()
}

#[test]
fn acquire_is_exclusive_until_the_lease_ends() {
    let mut f = FenceIssuer::default();
    let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
    assert_eq!(
        lock.acquire(b"b", 100, Want::EXCLUSIVE, false, at(50), &mut f)
            .unwrap(),
        Acquire::Busy
    );
    assert_eq!(
        lock.acquire(b"b", 100, Want::EXCLUSIVE, false, at(99), &mut f)
            .unwrap(),
        Acquire::Busy
    );
    match lock
        .acquire(b"b", 100, Want::EXCLUSIVE, false, at(100), &mut f)
        .unwrap()
    {
        Acquire::Granted(second) => assert!(second > first),
        other => panic!("{other:?}"),
    }
    assert_eq!(lock.info(at(150)).holder, Some(&b"b"[..]));
}

#[test]
fn a_retried_acquire_renews_with_the_same_fence() {
    let mut f = FenceIssuer::default();
    let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
    assert_eq!(
        lock.acquire(b"a", 500, Want::EXCLUSIVE, false, at(90), &mut f)
            .unwrap(),
        Acquire::Renewed(fence)
    );
    assert_eq!(lock.info(at(90)).ttl, 500);
}

#[test]
fn the_same_token_after_its_lease_ended_gets_a_new_fence() {
    let mut f = FenceIssuer::default();
    let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
    assert!(
        matches!(lock.acquire(b"a", 100, Want::EXCLUSIVE, false, at(100), &mut f).unwrap(), Acquire::Granted(n) if n > fence)
    );
}

#[test]
fn release_only_by_the_holder() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) = fresh(b"a", 100, at(0), &mut f);
    assert!(!lock.release(b"b", at(10)));
    assert!(lock.is_held(at(10)));
    assert!(lock.release(b"a", at(10)));
    assert!(!lock.is_held(at(10)));
    assert!(!lock.release(b"a", at(10)));
}

#[test]
fn release_after_the_lease_ended_is_refused() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) = fresh(b"a", 100, at(0), &mut f);
    assert!(!lock.release(b"a", at(100)));
}

#[test]
fn extend_moves_the_deadline_and_never_acquires() {
    let mut f = FenceIssuer::default();
    let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
    assert!(lock.extend(b"a", 1000, at(50)));
    assert_eq!(lock.info(at(50)).ttl, 1000);
    assert!(!lock.extend(b"b", 1000, at(60)));
    assert!(!lock.extend(b"a", 1000, at(1050)));
    assert_eq!(lock.info(at(1050)).holder, None);
    assert_eq!(lock.fence(), fence);
}

#[test]
fn fence_is_new_and_larger_for_the_holder_only() {
    let mut f = FenceIssuer::default();
    let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
    let second = lock.new_fence(b"a", at(1), &mut f).unwrap().unwrap();
    assert!(second > first);
    assert_eq!(lock.new_fence(b"b", at(2), &mut f).unwrap(), None);
    assert_eq!(lock.new_fence(b"a", at(100), &mut f).unwrap(), None);
    assert_eq!(lock.fence(), second);
}

#[test]
fn info_reports_the_lease() {
    let mut f = FenceIssuer::default();
    let (lock, fence) = fresh(b"a", 100, at(0), &mut f);
    assert_eq!(
        lock.info(at(30)),
        Info {
            holder: Some(&b"a"[..]),
            fence,
            ttl: 70,
            mode: Some(Mode::Exclusive),
            holders: 1,
        }
    );
    assert_eq!(
        lock.info(at(100)),
        Info {
            holder: None,
            fence,
            ttl: -1,
            mode: None,
            holders: 0,
        }
    );
}

#[test]
fn fences_never_go_backwards_across_keys_and_time() {
    let mut f = FenceIssuer::default();
    let mut seen = 0;
    for round in 0..50u64 {
        let (mut lock, fence) = fresh(b"a", 10, at(round * 20), &mut f);
        assert!(fence > seen);
        seen = fence;
        let next = lock
            .new_fence(b"a", at(round * 20 + 1), &mut f)
            .unwrap()
            .unwrap();
        assert!(next > seen);
        seen = next;
    }
}

#[test]
fn a_withdrawn_grant_frees_the_lock_unless_it_moved_on() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) = fresh(b"a", 10, at(0), &mut f);
    let g1 = lock
        .grant(b"w1", 100, Mode::Exclusive, at(10), &mut f)
        .unwrap();
    assert!(!lock.withdraw(b"w1", g1 - 1, at(11)), "another fence");
    assert!(!lock.withdraw(b"w2", g1, at(11)), "another token");
    assert!(lock.withdraw(b"w1", g1, at(11)));
    assert!(!lock.is_held(at(11)));
    let g2 = lock
        .grant(b"w2", 100, Mode::Exclusive, at(12), &mut f)
        .unwrap();
    assert!(g2 > g1);
    assert!(
        !lock.withdraw(b"w1", g1, at(13)),
        "a stale withdrawal changes nothing"
    );
    assert_eq!(lock.info(at(13)).holder, Some(&b"w2"[..]));
}

#[test]
fn a_lease_never_ends_before_its_ttl_to_the_microsecond() {
    let mut f = FenceIssuer::default();
    let (lock, _) = fresh(b"a", 50, at_us(1_999), &mut f);
    assert!(lock.is_held(at_us(51_998)));
    assert!(!lock.is_held(at_us(51_999)));
    assert_eq!(lock.info(at_us(51_998)).ttl, 1, "rounded up while held");
}

#[test]
fn the_lock_knows_its_key_and_token_apart() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) =
        Lock::acquired(b"orders:1", 3, b"tok", 10, Mode::Exclusive, at(0), &mut f).unwrap();
    assert_eq!(
        (lock.key(), lock.token(), lock.db()),
        (&b"orders:1"[..], &b"tok"[..], 3)
    );
    lock.relocate(b"o", 4);
    assert_eq!(
        (lock.key(), lock.token(), lock.db()),
        (&b"o"[..], &b"tok"[..], 4)
    );
    lock.set_replica_write(true);
    lock.relocate(b"longer-name", 4);
    assert!(lock.is_replica_write());
    assert_eq!(
        (lock.key(), lock.token()),
        (&b"longer-name"[..], &b"tok"[..])
    );
    lock.apply(b"tok", lock.deadline(), lock.fence(), Mode::Exclusive);
    assert!(!lock.is_replica_write(), "a master's state is the master's");
    lock.relocate(b"o", 4);
    assert!(matches!(
        lock.acquire(b"longer-token", 10, Want::EXCLUSIVE, false, at(20), &mut f)
            .unwrap(),
        Acquire::Granted(_)
    ));
    assert_eq!(
        (lock.key(), lock.token()),
        (&b"o"[..], &b"longer-token"[..])
    );
    let copy = lock.copied_to(b"copy", 5);
    assert_eq!(
        (copy.key(), copy.db(), copy.token(), copy.fence()),
        (&b"copy"[..], 5, &b"longer-token"[..], lock.fence())
    );
}

#[test]
fn short_names_live_inline_and_long_ones_on_the_heap() {
    let mut f = FenceIssuer::default();
    let uuid = b"3f0c9a2e-8d1b-4c4e-9a57-1d2b3c4d5e6f";
    let (short, _) = Lock::acquired(
        b"orders:12345678",
        0,
        uuid,
        10,
        Mode::Exclusive,
        at(0),
        &mut f,
    )
    .unwrap();
    assert!(matches!(short.names, Names::Inline(..)));
    assert_eq!(std::mem::size_of::<Lock>(), 96);
    let long_token = [7u8; 256];
    let (long, _) =
        Lock::acquired(b"k", 0, &long_token, 10, Mode::Exclusive, at(0), &mut f).unwrap();
    assert!(matches!(long.names, Names::Heap(_)));
    assert_eq!((long.key(), long.token()), (&b"k"[..], &long_token[..]));
    assert_eq!(long.heap_size(), 96 + 257);
}

#[test]
fn only_the_current_fence_of_a_live_hold_guards() {
    let mut f = FenceIssuer::default();
    let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
    assert_eq!(lock.guards(first, at(0)), Ok(()));
    assert_eq!(lock.guards(first, at(99)), Ok(()));
    assert_eq!(lock.guards(first + 1, at(10)), Err(Fenced::Older));
    let second = lock.new_fence(b"a", at(10), &mut f).unwrap().unwrap();
    assert!(second > first);
    assert_eq!(lock.guards(first, at(10)), Err(Fenced::Newer));
    assert_eq!(lock.guards(second, at(10)), Ok(()));
    // The lease ends at 100 ms, to the microsecond.
    assert_eq!(lock.guards(second, at_us(99_999)), Ok(()));
    assert_eq!(lock.guards(second, at_us(100_000)), Err(Fenced::NotHeld));
    // Another token's hold: the old holder's fence is behind it.
    let Acquire::Granted(third) = lock
        .acquire(b"b", 100, Want::EXCLUSIVE, false, at(150), &mut f)
        .unwrap()
    else {
        panic!("the lock was free");
    };
    assert_eq!(lock.guards(second, at(150)), Err(Fenced::Newer));
    assert_eq!(lock.guards(third, at(150)), Ok(()));
    assert!(lock.release(b"b", at(160)));
    assert_eq!(lock.guards(third, at(160)), Err(Fenced::NotHeld));
}
