//! The holds' storage against a plain list in grant order, and its cost with many holds.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::lock::Mode;

fn at(us: u64) -> Now {
    Now {
        mono: us,
        wall_us: 1_764_000_000_000_000 + us as i64,
    }
}

fn shared_lock(holds: &[(Vec<u8>, u64, u64)]) -> Box<Lock> {
    let refs: Vec<HoldRef> = holds
        .iter()
        .map(|(t, d, f)| HoldRef {
            token: t,
            deadline: *d,
            fence: *f,
        })
        .collect();
    let last = holds.iter().map(|h| h.2).max().unwrap_or(1);
    Lock::restored(b"k", 0, Mode::Shared, &refs, last).expect("a hold")
}

fn as_list(lock: &Lock) -> Vec<(Vec<u8>, u64, u64)> {
    lock.holds()
        .map(|h| (h.token.to_vec(), h.deadline, h.fence))
        .collect()
}

/// Random pushes, renewals, removals and lease ends, each checked against the list: grant
/// order, the earliest deadline, the live count and the lookup by token all agree.
#[test]
fn the_indexes_agree_with_a_plain_list() {
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model: Vec<(Vec<u8>, u64, u64)> = vec![(b"t0".to_vec(), 500, 1)];
        let mut lock = shared_lock(&model);
        let (mut next, mut fence, mut now) = (1u32, 1u64, 0u64);
        for step in 0..2_000 {
            let live = |m: &[(Vec<u8>, u64, u64)], now: u64| m.iter().filter(|h| h.1 > now).count();
            match rng.gen_range(0..10) {
                0..=3 => {
                    let token = format!("t{next}").into_bytes();
                    next += 1;
                    fence += 1;
                    let deadline = now + rng.gen_range(1..1_000);
                    lock.push(&token, deadline, fence);
                    model.push((token, deadline, fence));
                }
                4 | 5 => {
                    let i = rng.gen_range(0..model.len());
                    let deadline = now + rng.gen_range(1..1_000);
                    let at = lock.lookup(&model[i].0).expect("recorded");
                    lock.set_hold(at, deadline, model[i].2);
                    model[i].1 = deadline;
                }
                6 | 7 if model.len() > 1 => {
                    let i = rng.gen_range(0..model.len());
                    let at = lock.lookup(&model[i].0).expect("recorded");
                    lock.remove(at, now);
                    model.remove(i);
                }
                _ => {
                    now += rng.gen_range(0..300);
                    let limit = rng.gen_range(1..20);
                    let due = model.len() - live(&model, now);
                    let ended = lock.end_due(at(now), limit);
                    assert_eq!(ended.len(), due.min(limit), "seed {seed} step {step}");
                    for t in &ended {
                        let i = model.iter().position(|h| *h.0 == **t).expect("recorded");
                        assert!(model[i].1 <= now, "seed {seed}: ended before its deadline");
                        if model.len() > 1 {
                            model.remove(i);
                        }
                    }
                }
            }
            assert_eq!(as_list(&lock), model, "seed {seed} step {step}");
            let earliest = model.iter().map(|h| h.1).min().unwrap();
            assert_eq!(lock.deadline(), earliest, "seed {seed} step {step}");
            assert_eq!(
                lock.holders(at(now)),
                live(&model, now),
                "seed {seed} step {step}"
            );
            assert_eq!(lock.is_held(at(now)), live(&model, now) > 0);
            for (t, d, f) in &model {
                let h = lock.hold_of(t).expect("found by token");
                assert_eq!((h.deadline, h.fence), (*d, *f));
            }
            assert!(lock.hold_of(b"nobody").is_none());
        }
    }
}

/// 100,000 holds ending at once take O(H log H), not O(H^2) (which would be minutes), and
/// a renewal or a release among 100,000 holds costs microseconds.
#[test]
fn many_holds_cost_log_h_each() {
    const H: u64 = 100_000;
    let holds: Vec<_> = (0..H)
        .map(|i| (format!("{i:036}").into_bytes(), 1_000 + i % 7, i + 1))
        .collect();
    let built = Instant::now();
    let mut lock = shared_lock(&holds);
    let build_time = built.elapsed();

    let renewals = Instant::now();
    for i in (0..H).step_by(10) {
        let at = lock.lookup(&holds[i as usize].0).unwrap();
        lock.set_hold(at, 5_000 + i, i + 1);
    }
    for i in (1..H).step_by(100) {
        let at = lock.lookup(&holds[i as usize].0).unwrap();
        lock.remove(at, 0);
    }
    let per_op = renewals.elapsed() / (H as u32 / 10 + H as u32 / 100);

    let ending = Instant::now();
    let mut ended = 0;
    loop {
        let n = lock.end_due(at(1_000_000), 1_000).len();
        ended += n;
        if n < 1_000 {
            break;
        }
    }
    let end_time = ending.elapsed();
    assert_eq!(ended, H as usize - (H as usize - 1) / 100 - 1 + 1);
    assert_eq!(lock.recorded(), 1, "the last stays recorded");
    println!("built {build_time:?}, {per_op:?} a renewal or release, all ended in {end_time:?}");
    let slack = Duration::from_secs(2);
    assert!(
        build_time < slack && end_time < slack,
        "{build_time:?} {end_time:?}"
    );
    assert!(
        per_op < Duration::from_micros(20),
        "{per_op:?} an operation"
    );
}
