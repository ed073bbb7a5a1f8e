//! `LIMIT n` under load: an in-process counter proves that no more than `n` hold at once,
//! under contention and when holders abandon their permits.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use crate::common::holds::{holders, stat};
use crate::common::{exists, release, Server};
use crate::shared::{granted, SetOnDrop, LATE};

/// What a [`semaphore_run`] saw.
struct Run {
    /// For every grant: when, and how many clients the in-process counter counted holding
    /// then (this one included).
    seen: Vec<(Instant, i64)>,
    fences: Vec<i64>,
    /// The most holds a `LOCK.HOLDERS` sampled meanwhile showed.
    sampled: i64,
}

/// `threads` clients loop `LOCK.ACQUIRE sem tok ttl SHARED LIMIT 4 WAIT 10000`, count
/// themselves in an in-process counter while they hold (from after the grant's reply to
/// before the release: never more than the server's holds), hold briefly and release.
fn semaphore_run(server: &Server, threads: u64, rounds: u64, hold: Duration) -> Run {
    let active = AtomicI64::new(0);
    let seen: Mutex<Vec<(Instant, i64)>> = Mutex::new(Vec::new());
    let fences: Mutex<Vec<i64>> = Mutex::new(Vec::new());
    let running = AtomicBool::new(true);
    let sampled = AtomicI64::new(0);
    thread::scope(|s| {
        let _stop_sampler = SetOnDrop(&running, false);
        // LOCK.HOLDERS, sampled: the server's own count never passes the limit either.
        let (running_ref, sampled_ref) = (&running, &sampled);
        s.spawn(move || {
            let mut con = server.conn();
            while running_ref.load(Ordering::SeqCst) {
                let n = holders(&mut con, "sem").map_or(0, |h| h.len() as i64);
                sampled_ref.fetch_max(n, Ordering::SeqCst);
                sleep(Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (active, seen, fences) = (&active, &seen, &fences);
                s.spawn(move || {
                    let mut con = server.conn();
                    for j in 0..rounds {
                        let t = format!("t{i}-{j}");
                        let f = granted(
                            &mut con,
                            "sem",
                            &t,
                            10_000,
                            &["SHARED", "LIMIT", "4", "WAIT", "10000"],
                        );
                        let n = active.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.lock().unwrap().push((Instant::now(), n));
                        fences.lock().unwrap().push(f);
                        sleep(hold);
                        active.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(release(&mut con, "sem", &t), 1, "{t} released");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
    });
    Run {
        seen: seen.into_inner().unwrap(),
        fences: fences.into_inner().unwrap(),
        sampled: sampled.load(Ordering::SeqCst),
    }
}

#[test]
fn limit_4_under_contention_is_never_exceeded_and_is_reached() {
    let server = Server::new();
    let mut c = server.conn();
    let (acq0, grants0) = (stat(&mut c, "lock_acquires"), stat(&mut c, "lock_grants"));
    let started = Instant::now();
    let run = semaphore_run(&server, 12, 12, Duration::from_millis(10));
    let max = run.seen.iter().map(|s| s.1).max().unwrap();
    assert!(max <= 4, "{max} clients held a LIMIT 4 semaphore at once");
    assert_eq!(max, 4, "12 clients on LIMIT 4 never held 4 permits at once");
    assert!(
        run.sampled <= 4,
        "LOCK.HOLDERS showed {} holds",
        run.sampled
    );
    assert_eq!(run.seen.len(), 144);
    let mut fences = run.fences;
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 144, "each hold has its own fence");
    let (acq, grants) = (
        stat(&mut c, "lock_acquires") - acq0,
        stat(&mut c, "lock_grants") - grants0,
    );
    assert_eq!(acq + grants, 144, "acquires {acq} + grants {grants}");
    assert!(grants > 0, "some clients waited in the queue");
    assert!(!exists(&mut c, "sem"), "all released: the key goes");
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);
    eprintln!(
        "144 holds in {:?} ({grants} by hand-off)",
        started.elapsed()
    );
}

/// Two holders abandon their permits (never release): while their leases last, only two
/// permits are left to the others; when the leases end, the permits are handed on.
#[test]
fn abandoned_permits_come_back_when_their_leases_end() {
    const ABANDONED_TTL: u64 = 300;
    let server = Server::new();
    let mut c = server.conn();
    let ends0 = stat(&mut c, "lock_lease_ends");
    let sent = Instant::now();
    for t in ["crashed-0", "crashed-1"] {
        granted(&mut c, "sem", t, ABANDONED_TTL, &["SHARED", "LIMIT", "4"]);
    }
    let answered = Instant::now();
    // Before this instant both abandoned holds are certainly live; after `ended` certainly
    // gone.
    let live_until = sent + Duration::from_millis(ABANDONED_TTL);
    let ended = answered + Duration::from_millis(ABANDONED_TTL) + LATE;
    let run = semaphore_run(&server, 8, 15, Duration::from_millis(15));
    let seen = &run.seen;
    let during: Vec<i64> = seen
        .iter()
        .filter(|s| s.0 < live_until)
        .map(|s| s.1)
        .collect();
    let later: Vec<i64> = seen.iter().filter(|s| s.0 > ended).map(|s| s.1).collect();
    assert!(
        !during.is_empty(),
        "no grant while the abandoned holds lasted"
    );
    let max_during = during.iter().max().copied().unwrap_or(0);
    assert!(
        max_during <= 2,
        "{max_during} clients held while 2 of 4 permits were abandoned but live"
    );
    let max_later = later.iter().max().copied().unwrap_or(0);
    assert_eq!(
        max_later, 4,
        "after the abandoned leases ended, 4 permits must be in use"
    );
    assert!(seen.iter().all(|s| s.1 <= 4), "more than 4 held at once");
    assert!(
        run.sampled <= 4,
        "LOCK.HOLDERS showed {} holds",
        run.sampled
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0 + 2,
        "the two abandoned leases ended"
    );
    assert!(!exists(&mut c, "sem"));
}
