//! Mutual exclusion under contention: many clients, short leases, a resource that records
//! who held it when and with which fence. The clients either retry a plain `LOCK.ACQUIRE`
//! (null: try again) or queue with `LOCK.ACQUIRE … WAIT`, where every hand-off is the
//! server's grant to the head of the queue, on release or at a lease end.

use crate::cmd;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::{Rng, SeedableRng};

const THREADS: usize = 8;
const TTL_MS: u64 = 200;
const RUN: Duration = Duration::from_secs(3);
/// The `WAIT` of the queued clients: far more than the queue ahead of one can take (the
/// other clients' work, and at most their leases when they walk away).
const WAIT_MS: u64 = 10_000;

/// One critical section, as seen by the client that held the lock.
#[derive(Clone, Debug)]
struct Section {
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
    holds: Vec<Section>,
    /// Acquires answered null (with `WAIT`: waits that timed out).
    denied: usize,
    /// Holds per client thread.
    per_thread: Vec<usize>,
    /// What the resource saw.
    resource: Resource,
    /// `INFO lock` `lock_grants`: locks handed to a waiter.
    grants_to_waiters: i64,
}

/// The protected resource, as the shared thing a lock guards sees it: who is inside, and the
/// highest fence it accepted. A holder enters after its acquire was answered and leaves before
/// it sends its release (or walks away).
#[derive(Default)]
struct Resource {
    inside: Option<String>,
    last_fence: i64,
    entries: usize,
    /// Entries while another holder was inside, and exits of a holder no longer inside.
    overlaps: Vec<String>,
    /// Entries whose fence was not above every fence seen before.
    stale: Vec<String>,
}

impl Resource {
    fn enter(&mut self, token: &str, fence: i64) {
        self.entries += 1;
        if let Some(other) = &self.inside {
            self.overlaps.push(format!(
                "{token} (fence {fence}) entered while {other} was inside"
            ));
        }
        if fence <= self.last_fence {
            self.stale.push(format!(
                "{token} entered with fence {fence}, not above {}",
                self.last_fence
            ));
        } else {
            self.last_fence = fence;
        }
        self.inside = Some(token.to_string());
    }

    fn leave(&mut self, token: &str) {
        if self.inside.as_deref() == Some(token) {
            self.inside = None;
        } else {
            self.overlaps
                .push(format!("{token} left while {:?} was inside", self.inside));
        }
    }
}

/// `abandon`: probability that a holder "crashes" (never releases) and the lease must end.
/// `wait`: `Some(ms)` acquires with `WAIT ms` (queued); `None` retries plain acquires.
fn contend(seed: u64, abandon: f64, wait: Option<u64>) -> Run {
    let s = Server::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let denied = Arc::new(Mutex::new(0usize));
    let per_thread = Arc::new(Mutex::new(vec![0usize; THREADS]));
    let resource = Arc::new(Mutex::new(Resource::default()));
    let barrier = Arc::new(Barrier::new(THREADS));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let mut c = s.conn();
        let holds = holds.clone();
        let denied = denied.clone();
        let per_thread = per_thread.clone();
        let resource = resource.clone();
        let barrier = barrier.clone();
        handles.push(thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed + t as u64);
            barrier.wait();
            let stop = Instant::now() + RUN;
            let mut my_denied = 0;
            let mut my_holds = 0;
            while Instant::now() < stop {
                let token = token();
                let sent = Instant::now();
                let got = match wait {
                    None => acquire(&mut c, "resource", &token, TTL_MS),
                    Some(ms) => acquire_wait(&mut c, "resource", &token, TTL_MS, ms),
                };
                match got {
                    None => my_denied += 1,
                    Some(fence) => {
                        let start = Instant::now();
                        my_holds += 1;
                        resource.lock().unwrap().enter(&token, fence);
                        // Work well within the lease.
                        thread::sleep(Duration::from_millis(rng.gen_range(0..15)));
                        resource.lock().unwrap().leave(&token);
                        let end = Instant::now();
                        let released = if rng.gen_bool(abandon) {
                            None
                        } else {
                            Some(release(&mut c, "resource", &token) == 1)
                        };
                        let done = Instant::now();
                        holds.lock().unwrap().push(Section {
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
            per_thread.lock().unwrap()[t] = my_holds;
        }));
    }
    for h in handles {
        h.join().expect("client thread panicked");
    }
    let grants_to_waiters = lock_stat(&mut s.conn(), "lock_grants").expect("INFO lock");
    let holds = holds.lock().unwrap().clone();
    let denied = *denied.lock().unwrap();
    let per_thread = per_thread.lock().unwrap().clone();
    let resource = std::mem::take(&mut *resource.lock().unwrap());
    Run {
        holds,
        denied,
        per_thread,
        resource,
        grants_to_waiters,
    }
}

/// `LOCK.ACQUIRE key token ttl WAIT wait_ms`: `Some(fence)`, or `None` if the wait timed out.
fn acquire_wait(
    con: &mut redis::Connection,
    key: &str,
    token: &str,
    ttl: u64,
    wait_ms: u64,
) -> Option<i64> {
    match cmd!(con, "LOCK.ACQUIRE", key, token, ttl, "WAIT", wait_ms) {
        Ok(redis::Value::Int(f)) => {
            assert!(f > 0, "fence must be positive, got {f}");
            Some(f)
        }
        Ok(redis::Value::Nil) => None,
        other => panic!("LOCK.ACQUIRE {key} {token} {ttl} WAIT {wait_ms}: {other:?}"),
    }
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
    let r = &run.resource;
    assert_eq!(r.entries, holds.len());
    assert!(
        r.overlaps.is_empty(),
        "{} overlap(s) at the resource: {:#?}",
        r.overlaps.len(),
        r.overlaps
    );
    assert!(
        r.stale.is_empty(),
        "{} grant(s) whose fence did not increase: {:#?}",
        r.stale.len(),
        r.stale
    );
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
        "{} grants ({} handed to a waiter), {} denied, {} abandoned; per client {:?}",
        holds.len(),
        run.grants_to_waiters,
        run.denied,
        abandoned,
        run.per_thread
    );
}

/// Checks of a run with retried plain acquires: there was contention (nulls).
fn check_retrying(run: &Run, abandoned_expected: bool) {
    assert!(run.denied > 0, "no contention: every acquire was granted");
    assert_eq!(run.grants_to_waiters, 0, "nobody waited");
    check(run, abandoned_expected);
}

/// Checks of a run with `WAIT`: nobody's wait ran out, most holds were hand-offs from the
/// queue, and the queue served every client (first come, first served).
fn check_waiting(run: &Run, abandoned_expected: bool) {
    check(run, abandoned_expected);
    assert_eq!(
        run.denied, 0,
        "a WAIT of {WAIT_MS} ms timed out with {THREADS} clients taking turns"
    );
    let holds = run.holds.len() as i64;
    assert!(
        run.grants_to_waiters * 2 > holds,
        "only {} of {holds} holds were handed over by the queue: not contended",
        run.grants_to_waiters
    );
    let (min, max) = (
        run.per_thread.iter().min().unwrap(),
        run.per_thread.iter().max().unwrap(),
    );
    assert!(
        min * 2 >= *max,
        "FIFO turns should share the lock about evenly: {:?}",
        run.per_thread
    );
}

#[test]
fn no_two_holders_overlap_and_fences_increase() {
    let seed = 0xE1C1_0001;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.0, None);
    check_retrying(&run, false);
}

#[test]
fn abandoned_leases_end_on_time_and_never_early() {
    let seed = 0xE1C1_0002;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.2, None);
    check_retrying(&run, true);
}

/// The clients queue with `WAIT` instead of retrying: every hand-off is the server's grant to
/// the head of the queue the instant the holder releases. No two holders are ever inside the
/// resource at once, and each grant's fence is above every fence before it.
#[test]
fn waiters_under_contention_never_overlap_and_fences_increase() {
    let seed = 0xE1C1_0003;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.0, Some(WAIT_MS));
    check_waiting(&run, false);
}

/// As above, with holders that walk away: the head of the queue is granted when the lease
/// ends, never before.
#[test]
fn waiters_take_over_abandoned_leases_never_early() {
    let seed = 0xE1C1_0004;
    println!("seed {seed:#x}");
    let run = contend(seed, 0.2, Some(WAIT_MS));
    check_waiting(&run, true);
}
