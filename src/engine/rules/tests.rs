//! The hand-off rules without a server: grants, lease ends and departures on a real `Lock`
//! and waiter `Registry`, with numbers standing in for blocked clients.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::engine::waiters::{Left, Reply};
use crate::lock::{Mode, Want};

const KEY: (i32, &[u8]) = (0, b"k");

/// The clocks `ms` milliseconds into a test.
fn at(ms: u64) -> Now {
    Now {
        mono: ms * 1000,
        wall_us: (1_764_000_000_000 + ms as i64) * 1000,
    }
}

const SHARED: Want = Want {
    mode: Mode::Shared,
    limit: None,
};

/// A lock, its queue and the engine's pending withdrawals.
struct World {
    lock: Box<Lock>,
    waiters: Registry<u32>,
    withdrawals: Vec<Withdrawal>,
    fences: FenceIssuer,
}

impl World {
    /// `token` holds the key exclusively from `now`, for `ttl` ms.
    fn held_by(token: &[u8], ttl: u64, now: Now) -> World {
        let mut fences = FenceIssuer::default();
        let (lock, _) = Lock::acquired(KEY.1, KEY.0, token, ttl, Mode::Exclusive, now, &mut fences)
            .expect("a fence");
        World {
            lock,
            waiters: Registry::default(),
            withdrawals: Vec::new(),
            fences,
        }
    }

    fn queue(&mut self, client: u32, token: &str, ttl: u64, want: Want) -> WaiterId {
        self.waiters
            .enqueue(client, KEY.0, KEY.1, (token.as_bytes(), ttl, want), None)
    }

    fn grant(&mut self, now: Now) -> (Vec<Grant<u32>>, Stop) {
        grant_queued(
            &mut self.lock,
            &mut self.waiters,
            &mut self.withdrawals,
            KEY,
            now,
            &mut self.fences,
        )
    }

    /// The clients granted, in order.
    fn granted(&mut self, now: Now) -> Vec<u32> {
        let (grants, _) = self.grant(now);
        grants.into_iter().map(|g| g.handle).collect()
    }

    fn holders(&self, now: Now) -> Vec<Vec<u8>> {
        let mut tokens: Vec<Vec<u8>> = self
            .lock
            .holds()
            .filter(|h| h.is_live(now))
            .map(|h| h.token.to_vec())
            .collect();
        tokens.sort();
        tokens
    }
}

#[test]
fn exclusive_waiters_are_granted_one_at_a_time_in_queue_order() {
    let mut w = World::held_by(b"a", 100, at(0));
    w.queue(1, "b", 100, Want::EXCLUSIVE);
    w.queue(2, "c", 100, Want::EXCLUSIVE);
    assert_eq!(w.granted(at(10)), Vec::<u32>::new(), "a still holds it");
    assert!(w.lock.release(b"a", at(10)));
    assert_eq!(w.granted(at(10)), vec![1]);
    assert_eq!(w.holders(at(10)), vec![b"b".to_vec()]);
    // b's lease ends: c next, under a larger fence.
    let b_fence = w.lock.fence();
    assert_eq!(
        w.lock.end_due(at(110), usize::MAX),
        vec![Box::from(&b"b"[..])]
    );
    let (grants, stop) = w.grant(at(110));
    assert_eq!((grants.len(), stop), (1, Stop::Busy));
    assert_eq!(grants[0].token.as_ref(), b"c");
    assert!(grants[0].fence > b_fence);
}

#[test]
fn consecutive_shared_heads_join_together_and_an_exclusive_one_waits_behind_them() {
    let mut w = World::held_by(b"x", 100, at(0));
    w.queue(1, "r1", 100, SHARED);
    w.queue(2, "r2", 100, SHARED);
    w.queue(3, "wr", 100, Want::EXCLUSIVE);
    w.queue(4, "r3", 100, SHARED);
    w.lock.release(b"x", at(1));
    assert_eq!(
        w.granted(at(1)),
        vec![1, 2],
        "readers together, the writer waits"
    );
    // r3 is behind the writer: first come, first served, even though it could share.
    assert_eq!(w.waiters.head(KEY.0, KEY.1).unwrap().token.as_ref(), b"wr");
    w.lock.release(b"r1", at(2));
    assert_eq!(w.granted(at(2)), Vec::<u32>::new(), "r2 still reads");
    w.lock.release(b"r2", at(3));
    assert_eq!(w.granted(at(3)), vec![3]);
    w.lock.release(b"wr", at(4));
    assert_eq!(w.granted(at(4)), vec![4]);
}

#[test]
fn a_limit_admits_that_many_shared_holders_and_the_next_waits() {
    let mut w = World::held_by(b"x", 100, at(0));
    let two = Want {
        mode: Mode::Shared,
        limit: Some(2),
    };
    for (client, token) in [(1, "p1"), (2, "p2"), (3, "p3")] {
        w.queue(client, token, 100, two);
    }
    w.lock.release(b"x", at(1));
    assert_eq!(w.granted(at(1)), vec![1, 2]);
    w.lock.release(b"p1", at(2));
    assert_eq!(w.granted(at(2)), vec![3]);
}

#[test]
fn a_head_that_holds_already_is_renewed_or_downgraded_under_its_fence() {
    // The holder itself queued again (a retry): renewed, same fence, nobody else let in.
    let mut w = World::held_by(b"a", 100, at(0));
    let fence = w.lock.fence();
    w.queue(1, "a", 500, Want::EXCLUSIVE);
    let (grants, _) = w.grant(at(10));
    assert_eq!(grants[0].fence, fence);
    assert_eq!(w.lock.deadline(), at(510).mono);
    // A shared request of the exclusive holder downgrades its hold, and the readers behind
    // it join.
    w.queue(2, "a", 100, SHARED);
    w.queue(3, "r", 100, SHARED);
    assert_eq!(w.granted(at(20)), vec![2, 3]);
    assert_eq!(w.lock.mode(), Mode::Shared);
    assert_eq!(w.holders(at(20)), vec![b"a".to_vec(), b"r".to_vec()]);
}

#[test]
fn an_upgrade_waits_for_its_own_shared_hold_to_end() {
    let mut w = World::held_by(b"x", 100, at(0));
    w.queue(1, "r", 100, SHARED);
    w.lock.release(b"x", at(1));
    assert_eq!(w.granted(at(1)), vec![1]);
    w.queue(2, "r", 100, Want::EXCLUSIVE);
    assert_eq!(w.grant(at(2)), (vec![], Stop::Busy));
    w.lock.release(b"r", at(3));
    assert_eq!(w.granted(at(3)), vec![2]);
    assert_eq!(w.lock.mode(), Mode::Exclusive);
}

#[test]
fn a_grant_whose_waiter_left_untold_is_taken_back_and_passed_on() {
    let mut w = World::held_by(b"a", 100, at(0));
    let b = w.queue(1, "b", 100, Want::EXCLUSIVE);
    w.queue(2, "c", 100, Want::EXCLUSIVE);
    w.lock.release(b"a", at(1));
    let (grants, _) = w.grant(at(1));
    let fence = grants[0].fence;
    // b disconnects before its reply goes out: the grant comes back, c holds next.
    let Some(Left::Granted {
        token, fence: f, ..
    }) = w.waiters.leave(b)
    else {
        panic!("b's grant is to be taken back");
    };
    assert_eq!((token.as_ref(), f), (&b"b"[..], fence));
    assert!(w.lock.withdraw(&token, f, at(2)));
    assert_eq!(w.granted(at(2)), vec![2]);
    assert_eq!(w.holders(at(2)), vec![b"c".to_vec()]);
}

#[test]
fn a_grant_already_told_to_its_token_stays_when_its_waiter_leaves() {
    let mut w = World::held_by(b"a", 100, at(0));
    let b = w.queue(1, "b", 100, Want::EXCLUSIVE);
    w.lock.release(b"a", at(1));
    w.grant(at(1));
    // b's token extended the hold directly (another connection of the same holder): the
    // hold is known, and no longer taken back.
    adopt(&mut w.waiters, &mut w.withdrawals, KEY, b"b");
    assert_eq!(w.waiters.leave(b), Some(Left::Answered));
}

#[test]
fn a_renewal_inherits_a_pending_withdrawal_of_its_own_token() {
    let mut w = World::held_by(b"a", 100, at(0));
    let b1 = w.queue(1, "b", 100, Want::EXCLUSIVE);
    w.queue(2, "b", 100, Want::EXCLUSIVE);
    w.lock.release(b"a", at(1));
    // The second request of token b is granted as a renewal of the first's hold.
    let (grants, _) = w.grant(at(1));
    assert_eq!(grants.len(), 2);
    assert_eq!(grants[0].fence, grants[1].fence);
    // The first leaves: the second, still untold, takes the hold over; nothing comes back.
    assert_eq!(w.waiters.leave(b1), Some(Left::Answered));
    assert_eq!(
        w.waiters.deliver(grants[1].id),
        Some(Reply::Granted(grants[1].fence))
    );
}

#[test]
fn with_no_fence_left_in_the_millisecond_the_rest_wait_for_the_next() {
    let mut w = World::held_by(b"x", 10, at(0));
    // More than the issuer can give in one millisecond, bursts included (see fence.rs).
    let n = (crate::fence::PER_MS * (crate::fence::BURST_MS + 2)) as u32;
    for client in 0..n {
        w.queue(client, &format!("r{client}"), 100, SHARED);
    }
    w.lock.release(b"x", at(5));
    let (grants, stop) = w.grant(at(5));
    assert_eq!(stop, Stop::NoFence);
    assert!(!grants.is_empty() && grants.len() < n as usize);
    let fences: Vec<u64> = grants.iter().map(|g| g.fence).collect();
    assert!(fences.windows(2).all(|f| f[0] < f[1]), "fences only grow");
    // Later, the rest are granted where the first stopped.
    let mut rest = Vec::new();
    for ms in 6..100 {
        let (more, _) = w.grant(at(ms));
        rest.extend(more);
        if w.waiters.head(KEY.0, KEY.1).is_none() {
            break;
        }
    }
    assert_eq!(grants.len() + rest.len(), n as usize);
    assert!(rest[0].fence > *fences.last().unwrap());
}

/// Many random operations on one key, as the engine makes them, checking after each that
/// the rules hold: at most one exclusive holder and never mixed with shared ones; one hold
/// per token; grants in queue order under fences that only grow; and no admitted head left
/// waiting. A hundred thousand operations take well under a second here.
#[test]
fn random_hand_offs_keep_the_rules() {
    let ops = std::env::var("RULES_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000usize);
    for seed in 0..4u64 {
        run_model(seed, ops / 4);
    }
}

fn run_model(seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = World::held_by(b"t0", 50, at(0));
    let mut ms = 0u64;
    let mut client = 0u32;
    // Waiters in the order they queued, with their tokens: grants must follow it.
    let mut order: Vec<(u32, WaiterId)> = Vec::new();
    let mut told: Vec<WaiterId> = Vec::new();
    let mut last_fence = 0u64;
    for step in 0..ops {
        let now = at(ms);
        let token = format!("t{}", rng.gen_range(0..6));
        match rng.gen_range(0..10) {
            // A request: direct if nobody waits and the lock admits it, else queued.
            0..=3 => {
                let want = if rng.gen_bool(0.5) {
                    SHARED
                } else {
                    Want::EXCLUSIVE
                };
                let queued = w.waiters.head(KEY.0, KEY.1).is_some();
                match w
                    .lock
                    .acquire(token.as_bytes(), 50, want, queued, now, &mut w.fences)
                {
                    Ok(Acquire::Busy) | Err(AcquireError::Upgrade) => {
                        client += 1;
                        let id = w.queue(client, &token, 50, want);
                        order.push((client, id));
                    }
                    Ok(Acquire::Granted(f)) => {
                        assert!(f > last_fence, "seed {seed} step {step}: fence went back");
                        last_fence = f;
                    }
                    Ok(Acquire::Renewed(_)) => {
                        adopt(&mut w.waiters, &mut w.withdrawals, KEY, token.as_bytes())
                    }
                    Ok(Acquire::Downgraded(_)) => {
                        adopt(&mut w.waiters, &mut w.withdrawals, KEY, token.as_bytes())
                    }
                    Err(AcquireError::Fence(_)) => {}
                }
            }
            // A holder releases.
            4 | 5 => {
                w.lock.release(token.as_bytes(), now);
            }
            // Time passes: leases end.
            6 => {
                ms += rng.gen_range(1..40);
                w.lock.end_due(at(ms), usize::MAX);
            }
            // A waiter leaves: queued, or granted and untold (the grant comes back).
            7 => {
                if !order.is_empty() {
                    let (_, id) = order.remove(rng.gen_range(0..order.len()));
                    if let Some(Left::Granted { token, fence, .. }) = w.waiters.leave(id) {
                        w.lock.withdraw(&token, fence, now);
                    }
                }
            }
            // A granted waiter's reply goes out.
            _ => {
                if let Some(id) = told.pop() {
                    w.waiters.deliver(id);
                }
            }
        }
        let now = at(ms);
        let (grants, _) = w.grant(now);
        for g in &grants {
            let pos = order.iter().position(|&(c, _)| c == g.handle);
            assert_eq!(
                pos,
                Some(0),
                "seed {seed} step {step}: granted out of queue order"
            );
            order.remove(0);
            assert!(g.fence >= last_fence || w.lock.hold_of(&g.token).is_some());
            last_fence = last_fence.max(g.fence);
            told.push(g.id);
        }
        check(&w, now, seed, step);
    }
}

fn check(w: &World, now: Now, seed: u64, step: usize) {
    let live: Vec<_> = w.lock.holds().filter(|h| h.is_live(now)).collect();
    let mut tokens: Vec<&[u8]> = live.iter().map(|h| h.token).collect();
    tokens.sort();
    let before = tokens.len();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        before,
        "seed {seed} step {step}: a token holds twice"
    );
    if w.lock.mode() == Mode::Exclusive {
        assert!(
            live.len() <= 1,
            "seed {seed} step {step}: two exclusive holders"
        );
    }
    // Nobody admitted is left at the head of the queue.
    if let Some(head) = w.waiters.head(KEY.0, KEY.1) {
        let own_shared = w.lock.is_held_by(&head.token, now);
        assert!(
            own_shared || !w.lock.admits(head.want, now),
            "seed {seed} step {step}: an admitted head waits"
        );
    }
}
