//! Shared holds: compatibility, limits, per-hold leases and fences, changing kind.

use super::*;

fn at(ms: u64) -> Now {
    Now {
        mono: ms * 1000,
        wall_us: (1_764_000_000_000 + ms as i64) * 1000,
    }
}

const SHARED_ANY: Want = Want {
    mode: Mode::Shared,
    limit: None,
};

fn shared(limit: u32) -> Want {
    Want {
        mode: Mode::Shared,
        limit: Some(limit),
    }
}

fn granted(a: Result<Acquire, AcquireError>) -> u64 {
    match a {
        Ok(Acquire::Granted(f)) => f,
        other => panic!("not granted: {other:?}"),
    }
}

fn tokens(lock: &Lock, now: Now) -> Vec<Vec<u8>> {
    lock.holds()
        .filter(|h| h.is_live(now))
        .map(|h| h.token.to_vec())
        .collect()
}

/// A key shared by `a` (100 ms), `b` (200 ms) and `c` (300 ms), granted in that order.
fn three_readers(f: &mut FenceIssuer) -> (Box<Lock>, [u64; 3]) {
    let (mut lock, fa) = Lock::acquired(b"k", 0, b"a", 100, Mode::Shared, at(0), f).unwrap();
    let fb = granted(lock.acquire(b"b", 200, SHARED_ANY, false, at(0), f));
    let fc = granted(lock.acquire(b"c", 300, SHARED_ANY, false, at(0), f));
    (lock, [fa, fb, fc])
}

#[test]
fn shared_holds_coexist_and_exclude_an_exclusive_one() {
    let mut f = FenceIssuer::default();
    let (mut lock, [fa, fb, fc]) = three_readers(&mut f);
    assert!(fa < fb && fb < fc, "every new hold gets a larger fence");
    assert_eq!(lock.holders(at(0)), 3);
    let w = lock.acquire(b"w", 100, Want::EXCLUSIVE, false, at(50), &mut f);
    assert_eq!(w, Ok(Acquire::Busy));
    // An exclusive holder keeps shared requests out.
    let (mut x, _) = Lock::acquired(b"x", 0, b"w", 100, Mode::Exclusive, at(0), &mut f).unwrap();
    let r = x.acquire(b"r", 100, SHARED_ANY, false, at(10), &mut f);
    assert_eq!(r, Ok(Acquire::Busy));
    assert!(!x.admits(SHARED_ANY, at(10)));
    assert!(x.admits(SHARED_ANY, at(100)), "free once the lease ended");
}

#[test]
fn a_limit_admits_only_while_fewer_tokens_hold() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) = three_readers(&mut f);
    assert!(!lock.admits(shared(3), at(0)));
    assert!(lock.admits(shared(4), at(0)));
    let over = lock.acquire(b"d", 100, shared(3), false, at(0), &mut f);
    assert_eq!(over, Ok(Acquire::Busy), "each request's own limit applies");
    granted(lock.acquire(b"d", 100, shared(4), false, at(0), &mut f));
    assert_eq!(lock.holders(at(0)), 4);
    // Once `a`'s lease has ended, three hold again.
    assert!(lock.admits(shared(4), at(100)));
    // A holder renews whatever the limit.
    let again = lock.acquire(b"d", 500, shared(1), false, at(10), &mut f);
    assert!(matches!(again, Ok(Acquire::Renewed(_))));
}

#[test]
fn a_newcomer_never_slips_in_ahead_of_the_queue() {
    let mut f = FenceIssuer::default();
    let (mut lock, _) = three_readers(&mut f);
    let queued = lock.acquire(b"d", 100, SHARED_ANY, true, at(0), &mut f);
    assert_eq!(queued, Ok(Acquire::Busy));
    // A holder is not a newcomer: it renews even with clients queued.
    let renew = lock.acquire(b"a", 100, SHARED_ANY, true, at(0), &mut f);
    assert!(matches!(renew, Ok(Acquire::Renewed(_))));
}

#[test]
fn each_hold_has_its_own_lease_and_the_order_of_grants_stays() {
    let mut f = FenceIssuer::default();
    let (mut lock, [_, fb, fc]) = three_readers(&mut f);
    assert_eq!(lock.deadline(), 100_000, "indexed at the earliest lease");
    assert!(lock.end_due(at(99), usize::MAX).is_empty());
    assert_eq!(
        lock.end_due(at(100), usize::MAX),
        vec![Box::from(&b"a"[..])]
    );
    assert_eq!(tokens(&lock, at(100)), [b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(
        (lock.token(), lock.fence()),
        (&b"b"[..], fb),
        "b moved first"
    );
    assert_eq!(lock.deadline(), 200_000);
    assert!(lock.extend(b"b", 500, at(150)));
    assert_eq!(lock.deadline(), 300_000);
    assert_eq!(
        lock.end_due(at(300), usize::MAX),
        vec![Box::from(&b"c"[..])]
    );
    assert_eq!(
        lock.last_fence(),
        fc,
        "the key's last fence outlives its hold"
    );
    assert!(lock.release(b"b", at(310)));
    assert!(!lock.is_held(at(310)));
    assert_eq!(lock.holds().count(), 1, "one ended record remains");
    let next = granted(lock.acquire(b"w", 100, Want::EXCLUSIVE, false, at(320), &mut f));
    assert!(next > fc);
    assert_eq!(lock.holds().count(), 1);
}

#[test]
fn releasing_one_hold_leaves_the_others() {
    let mut f = FenceIssuer::default();
    let (mut lock, [fa, _, fc]) = three_readers(&mut f);
    assert!(!lock.release(b"nobody", at(10)));
    assert!(lock.release(b"b", at(10)));
    assert!(!lock.release(b"b", at(10)), "once");
    assert_eq!(tokens(&lock, at(10)), [b"a".to_vec(), b"c".to_vec()]);
    assert_eq!(lock.fence(), fa);
    assert_eq!(lock.last_fence(), fc);
    assert!(lock.release(b"c", at(10)));
    assert_eq!(lock.last_fence(), fc, "c had the last fence");
    assert!(lock.more.is_some(), "kept only to remember it");
}

#[test]
fn an_exclusive_holder_downgrades_in_place_and_upgrades_are_refused() {
    let mut f = FenceIssuer::default();
    let (mut lock, fw) =
        Lock::acquired(b"k", 0, b"w", 100, Mode::Exclusive, at(0), &mut f).unwrap();
    let down = lock.acquire(b"w", 300, SHARED_ANY, false, at(10), &mut f);
    assert_eq!(down, Ok(Acquire::Downgraded(fw)), "same fence");
    assert_eq!(lock.mode(), Mode::Shared);
    assert_eq!(lock.deadline(), 310_000, "lease renewed");
    let fr = granted(lock.acquire(b"r", 100, SHARED_ANY, false, at(20), &mut f));
    assert!(fr > fw);
    let up = lock.acquire(b"r", 100, Want::EXCLUSIVE, false, at(30), &mut f);
    assert_eq!(up, Err(AcquireError::Upgrade));
    assert_eq!(lock.holders(at(30)), 2, "the upgrader keeps its hold");
    assert!(lock.is_held_by(b"r", at(30)));
}

#[test]
fn fences_are_per_hold_and_guard_only_an_exclusive_hold() {
    let mut f = FenceIssuer::default();
    let (mut lock, [fa, _, fc]) = three_readers(&mut f);
    let fa2 = lock.new_fence(b"a", at(10), &mut f).unwrap().unwrap();
    assert!(fa2 > fc && fa2 > fa);
    assert_eq!(lock.last_fence(), fa2);
    assert_eq!(lock.new_fence(b"z", at(10), &mut f), Ok(None));
    let c = lock.holds().find(|h| h.token == b"c").unwrap();
    assert_eq!(c.fence, fc, "only a's fence moved");
    assert_eq!(lock.guards(fa2, at(10)), Err(Fenced::Shared));
    assert_eq!(lock.guards(fc, at(10)), Err(Fenced::Shared));
}

#[test]
fn info_describes_a_shared_key() {
    let mut f = FenceIssuer::default();
    let (lock, [_, _, fc]) = three_readers(&mut f);
    let i = lock.info(at(50));
    assert_eq!(i.holder, None);
    assert_eq!(i.mode, Some(Mode::Shared));
    assert_eq!(
        (i.holders, i.fence, i.ttl),
        (3, fc, 250),
        "the longest lease"
    );
    let i = lock.info(at(400));
    assert_eq!((i.mode, i.holders, i.ttl), (None, 0, -1));
}

#[test]
fn a_replica_applies_and_drops_holds_as_its_master_says() {
    let mut f = FenceIssuer::default();
    let (master, [fa, fb, fc]) = three_readers(&mut f);
    let mut replica = Lock::restored(
        b"k",
        0,
        Mode::Exclusive,
        &[HoldRef {
            token: b"old",
            deadline: 5_000,
            fence: 1,
        }],
        1,
    )
    .unwrap();
    for h in master.holds() {
        replica.apply(h.token, h.deadline, h.fence, Mode::Shared);
    }
    assert_eq!(
        replica.holds().collect::<Vec<_>>(),
        master.holds().collect::<Vec<_>>()
    );
    assert_eq!(replica.last_fence(), fc);
    // The replica does not judge the master's leases by its own clock.
    assert_eq!(replica.drop_hold(b"a", at(1_000).mono), Some(false));
    assert_eq!(replica.drop_hold(b"a", at(1_000).mono), None);
    assert_eq!(replica.drop_hold(b"b", at(1_000).mono), Some(false));
    assert_eq!(
        replica.drop_hold(b"c", at(1_000).mono),
        Some(true),
        "the last: the key goes"
    );
    assert!(fa < fb);
    // An exclusive hold replaces them all.
    let mut r2 = master.clone();
    r2.apply(b"w", 900_000, fc + 10, Mode::Exclusive);
    assert_eq!(
        (r2.holds().count(), r2.mode(), r2.last_fence()),
        (1, Mode::Exclusive, fc + 10)
    );
}

#[test]
fn holds_survive_a_copy_and_a_restore_and_cost_little() {
    let mut f = FenceIssuer::default();
    let (lock, _) = three_readers(&mut f);
    let copy = lock.copied_to(b"elsewhere", 3);
    assert_eq!(
        copy.holds().collect::<Vec<_>>(),
        lock.holds().collect::<Vec<_>>()
    );
    assert_eq!(
        (copy.key(), copy.db(), copy.mode()),
        (&b"elsewhere"[..], 3, Mode::Shared)
    );
    let holds: Vec<HoldRef> = lock.holds().collect();
    let back = Lock::restored(b"k", 0, Mode::Shared, &holds, lock.last_fence()).unwrap();
    assert_eq!(*back, *lock);
    let (one, _) = Lock::acquired(b"k", 0, b"a", 100, Mode::Shared, at(0), &mut f).unwrap();
    let (excl, _) = Lock::acquired(b"k", 0, b"a", 100, Mode::Exclusive, at(0), &mut f).unwrap();
    assert_eq!(
        one.heap_size(),
        excl.heap_size(),
        "one shared hold costs an exclusive lock"
    );
    // Each further hold: at most 64 bytes and its token (the vector doubles as it grows).
    let mut many = one.clone();
    let token = [b'x'; 36];
    for i in 0..64u8 {
        let mut t = token;
        t[0] = i;
        granted(many.acquire(&t, 100, SHARED_ANY, false, at(1), &mut f));
    }
    let per_hold = (many.heap_size() - one.heap_size()) / 64;
    assert!(per_hold <= 64 + 36, "{per_hold} bytes per hold");
}
