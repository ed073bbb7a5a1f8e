//! Mutual exclusion under contention: many clients, short leases, a resource that records
//! who held it when and with which fence.

mod common;

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};

const THREADS: usize = 8;
const TTL_MS: u64 = 200;
const RUN: Duration = Duration::from_secs(3);

/// One critical section, as seen by the client that held the lock.
#[derive(Clone, Debug)]
struct Hold {
    fence: i64,
    token: String,
    /// Before LOCK.ACQUIRE was sent.
    sent: Instant,
    /// After its reply arrived: the lock was held from before this instant.
    start: Instant,
    /// Before LOCK.RELEASE was sent (or the holder walked away).
    end: Instant,
    /// After the RELEASE reply arrived.
    done: Instant,
    /// RELEASE replied 1; `None` for a holder that walked away without releasing.
    released: Option<bool>,
}

struct Run {
    holds: Vec<Hold>,
    denied: usize,
}

/// `abandon`: probability that a holder "crashes" (never releases) and the lease must end.
fn contend(seed: u64, abandon: f64) -> Run {
    let s = Server::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let denied = Arc::new(Mutex::new(0usize));
    let barrier = Arc::new(Barrier::new(THREADS));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let mut c = s.conn();
        let holds = holds.clone();
        let denied = denied.clone();
        let barrier = barrier.clone();
        handles.push(thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed + t as u64);
            barrier.wait();
            let stop = Instant::now() + RUN;
            let mut my_denied = 0;
            while Instant::now() < stop {
                let token = token();
                let sent = Instant::now();
                match acquire(&mut c, "resource", &token, TTL_MS) {
                    None => my_denied += 1,
                    Some(fence) => {
                        let start = Instant::now();
                        // Work well within the lease.
                        thread::sleep(Duration::from_millis(rng.gen_range(0..15)));
                        let end = Instant::now();
                        let released = if rng.gen_bool(abandon) {
                            None
                        } else {
                            Some(release(&mut c, "resource", &token) == 1)
                        };
                        let done = Instant::now();
                        holds.lock().unwrap().push(Hold {
                            fence,
                            token,
                            sent,
                            start,
                            end,
                            done,
                            released,
                        });
                    }
                }
            }
            *denied.lock().unwrap() += my_denied;
        }));
    }
    for h in handles {
        h.join().expect("client thread panicked");
    }
    let holds = holds.lock().unwrap().clone();
    let denied = *denied.lock().unwrap();
    Run { holds, denied }
}

/// Checks the recorded holds. They are taken in fence order; the time checks then prove
/// that fence order is grant order: each holder's section ends before the next one starts.
fn check(run: &Run, abandoned_expected: bool) {
    let mut holds = run.holds.clone();
    assert!(
        holds.len() >= 20,
        "too few grants to mean anything: {}",
        holds.len()
    );
    assert!(run.denied > 0, "no contention: every acquire was granted");
    holds.sort_by_key(|h| h.fence);
    let ttl = Duration::from_millis(TTL_MS);
    let slack = Duration::from_millis(2);

    for w in holds.windows(2) {
        assert!(
            w[1].fence > w[0].fence,
            "a fence was issued twice: {}",
            w[0].fence
        );
    }
    let tokens: std::collections::HashSet<_> = holds.iter().map(|h| &h.token).collect();
    assert_eq!(tokens.len(), holds.len());
    // A release that failed is only acceptable if the lease could have ended by then.
    for h in &holds {
        if h.released == Some(false) {
            assert!(
                h.done.duration_since(h.sent) + slack >= ttl,
                "release failed {:?} after the acquire was sent, before the {ttl:?} lease \
                 could end: {h:?}",
                h.done.duration_since(h.sent)
            );
        }
    }

    let mut abandoned = 0;
    for w in holds.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        match a.released {
            Some(true) => {
                // a held from its grant until its release; b was granted after that.
                assert!(
                    a.end <= b.start,
                    "critical sections overlap (or fences out of grant order): \
                     {a:?} and {b:?}"
                );
            }
            None | Some(false) => {
                if a.released.is_none() {
                    abandoned += 1;
                }
                // b can only be granted once a's lease ended, ttl after a was granted.
                assert!(
                    b.start + slack >= a.sent + ttl,
                    "granted {:?} after an unreleased grant, before its lease ended ({ttl:?}) \
                     (or fences out of grant order)",
                    b.start.saturating_duration_since(a.sent)
                );
                if a.end.duration_since(a.sent) < ttl {
                    assert!(
                        a.end <= b.start,
                        "overlap with holder whose lease ran out: {a:?} {b:?}"
                    );
                }
            }
        }
    }
    if abandoned_expected {
        assert!(abandoned > 0, "no abandoned leases were exercised");
    }
    println!(
        "{} grants, {} denied, {} abandoned",
        holds.len(),
        run.denied,
        abandoned
    );
}

#[test]
fn no_two_holders_overlap_and_fences_increase() {
    let seed = 0xE1C1_0001;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.0);
    check(&run, false);
}

#[test]
fn abandoned_leases_end_on_time_and_never_early() {
    let seed = 0xE1C1_0002;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.2);
    check(&run, true);
}
