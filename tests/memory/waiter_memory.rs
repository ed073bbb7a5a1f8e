//! Memory for waiters returns to its baseline: the test, and the bounds on what the
//! `LOCK.ACQUIRE … WAIT` runs may keep beyond the same `BLPOP` runs.

use std::thread;
use std::time::Instant;

use crate::heavy;
use crate::waiter_runs::{run_shape, Shape, KEYS, PER_ROUND, ROUNDS};

/// What 20,000+ departed waiters may leave behind, beyond what the same `BLPOP`s leave: a
/// few bytes each. The leak this guards against was 10–17 KiB per waiter (200+ MiB here).
const PER_WAITER_SLACK: i64 = 64 * 1024;
/// What the first thousand may leave for good beyond `BLPOP`'s: the pool's 8 spare temp
/// clients (~140 KiB) and the registry's hash tables at the size the peak needed (~250 KiB
/// for a thousand).
const FIXED_SLACK: i64 = 1024 * 1024;

fn kib(b: i64) -> String {
    format!("{:+.1} KiB", b as f64 / 1024.0)
}

/// 10,000 waits that time out, 10,000 that hang up and 2,000 `CLIENT UNBLOCK`ed (half with
/// `ERROR`), a thousand at a time, after a first thousand of each kind: once the server has
/// settled after each phase, `used_memory` has moved as far as the same `BLPOP`s move it.
#[test]
fn memory_for_waiters_returns_to_its_baseline() {
    let _heavy = heavy();
    let t0 = Instant::now();
    // The two shapes on two servers at once: nothing here is timed but the settling.
    let blpop = thread::spawn(|| run_shape(Shape::Blpop));
    let lock = run_shape(Shape::Lock);
    let blpop = blpop.join().expect("the BLPOP run panicked");
    println!(
        "{} waiters a phase, {PER_ROUND} at once, on {KEYS} held keys ({:?} in all)",
        ROUNDS * PER_ROUND,
        t0.elapsed()
    );
    for f in [&lock, &blpop] {
        println!(
            "{}: cold {} B; after the first {PER_ROUND} of each kind {} ({} over cold; \
             settled in {:?} from {})",
            f.shape.name(),
            f.cold.used,
            f.warm.used,
            kib(f.warm.used - f.cold.used),
            f.warm.took,
            kib(f.warm.from - f.cold.used),
        );
        for (name, n, s, counted) in &f.phases {
            let counted = match f.shape {
                Shape::Lock => format!(" ({counted} counted in lock_wait_timeouts)"),
                Shape::Blpop => String::new(),
            };
            println!(
                "  {n} that {name}: {} B, {} over the first thousand's; settled in {:?} \
                 from {}{counted}",
                s.used,
                kib(s.used - f.warm.used),
                s.took,
                kib(s.from - f.warm.used),
            );
        }
    }
    // The module counts each wait that timed out (or was CLIENT UNBLOCKed without ERROR).
    let counted: Vec<i64> = lock.phases.iter().map(|p| p.3).collect();
    assert_eq!(
        counted,
        [(ROUNDS * PER_ROUND) as i64, 0, PER_ROUND as i64],
        "lock_wait_timeouts per phase"
    );
    let mut problems = Vec::new();
    let mut before = (lock.warm.used, blpop.warm.used);
    for (l, b) in lock.phases.iter().zip(&blpop.phases) {
        let (dl, db) = (l.2.used - before.0, b.2.used - before.1);
        if dl - db > PER_WAITER_SLACK {
            problems.push(format!(
                "{} waiters that {}: {} for LOCK.ACQUIRE … WAIT, {} for BLPOP ({:.1} bytes \
                 a waiter more)",
                l.1,
                l.0,
                kib(dl),
                kib(db),
                (dl - db) as f64 / l.1 as f64
            ));
        }
        before = (l.2.used, b.2.used);
    }
    let fixed = (lock.warm.used - lock.cold.used) - (blpop.warm.used - blpop.cold.used);
    println!(
        "kept after the first thousand, beyond BLPOP: {} (bound {})",
        kib(fixed),
        kib(FIXED_SLACK)
    );
    if fixed > FIXED_SLACK {
        problems.push(format!(
            "the first {PER_ROUND} of each kind left {} for good beyond BLPOP's",
            kib(fixed)
        ));
    }
    assert!(problems.is_empty(), "memory kept: {problems:#?}");
}
