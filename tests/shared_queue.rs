//! Shared holds and the queue (README, `LOCK.ACQUIRE … SHARED [LIMIT n]` and
//! [The server around a lock](../README.md#the-server-around-a-lock)), against a real server:
//! FIFO order across kinds, no writer starvation under a stream of readers, `LIMIT n` under
//! contention (an in-process counter proves that no more than `n` hold at once, also when
//! holders abandon their permits), and the server's keyspace rules for shared keys (deletion,
//! `RENAME`, `COPY`, `CLIENT UNBLOCK`, `CLIENT PAUSE WRITE`, `EXPIRE`, a full server). One key's
//! semantics are in `tests/shared.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::holds::{acquire_with, assert_same_holds, holders, stat, tokens, Pending};
use common::{client_blocked, client_unblock, exists, info, release, Server};
use redis::{Connection, Value};

/// "At once": a reply caused by a change made just now arrives within this.
const AT_ONCE: Duration = Duration::from_millis(300);
/// A change due at a deadline (a lease end) is seen within this after it.
const LATE: Duration = Duration::from_millis(250);
/// How long a request that must stay queued is watched for a reply it must not get.
const QUIET: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;

// ------------------------------------------------------------------------------- helpers

/// Sets the flag when dropped, so that threads looping on it stop even when the test fails.
struct SetOnDrop<'a>(&'a AtomicBool, bool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, Ordering::SeqCst);
    }
}

/// An acquire with `opts` that must be granted at once: its fence.
#[track_caller]
fn granted(con: &mut Connection, key: &str, token: &str, ttl: u64, opts: &[&str]) -> i64 {
    match acquire_with(con, key, token, ttl, opts) {
        Ok(Value::Int(f)) if f > 0 => f,
        other => {
            panic!("LOCK.ACQUIRE {key} {token} {ttl} {opts:?}: must be granted, got {other:?}")
        }
    }
}

// ------------------------------------------------------------------------------ the queue

/// Holder x; queue r1 (shared), r2 (shared), w2 (exclusive), r3 (shared). Each release grants
/// the compatible run at the head, in order, and nothing behind the first request that has
/// to wait.
#[test]
fn the_queue_is_fifo_across_kinds() {
    let server = Server::new();
    let mut c = server.conn();
    let fx = granted(&mut c, "k", "x", TTL, &[]);
    let r1 = Pending::join(&server, "k", "r1", TTL, &["SHARED", "WAIT", "0"]);
    let r2 = Pending::join(&server, "k", "r2", TTL, &["SHARED", "WAIT", "0"]);
    let w2 = Pending::join(&server, "k", "w2", TTL, &["WAIT", "0"]);
    let r3 = Pending::join(&server, "k", "r3", TTL, &["SHARED", "WAIT", "0"]);
    assert_eq!(info(&mut c, "k").unwrap().waiters, 4);

    let released = Instant::now();
    assert_eq!(release(&mut c, "k", "x"), 1);
    let (f1, at1) = r1.granted_within(AT_ONCE, "x released");
    let (f2, at2) = r2.granted_within(
        (released + AT_ONCE).saturating_duration_since(Instant::now()),
        "x released",
    );
    assert!(
        at1 <= released + AT_ONCE && at2 <= released + AT_ONCE,
        "r1 and r2 are granted together, at once"
    );
    assert!(fx < f1 && f1 < f2, "fences in grant order: {fx} {f1} {f2}");
    w2.still_waiting(QUIET, "r1 and r2 hold shared");
    r3.still_waiting(Duration::ZERO, "behind w2");
    let hs = holders(&mut c, "k").unwrap();
    assert_eq!(
        hs.iter()
            .map(|h| (h.token.as_str(), h.fence, h.mode.as_str()))
            .collect::<Vec<_>>(),
        [("r1", f1, "shared"), ("r2", f2, "shared")]
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!((i.mode.as_str(), i.holders, i.waiters), ("shared", 2, 2));
    // No barging past the queued writer, for a newcomer of either kind.
    assert_eq!(
        acquire_with(&mut c, "k", "new", TTL, &["SHARED"]),
        Ok(Value::Nil)
    );
    assert_eq!(acquire_with(&mut c, "k", "new", TTL, &[]), Ok(Value::Nil));

    assert_eq!(release(&mut c, "k", "r1"), 1);
    w2.still_waiting(QUIET, "r2 still holds");
    assert_eq!(release(&mut c, "k", "r2"), 1);
    let (fw, _) = w2.granted_within(AT_ONCE, "r1 and r2 released");
    assert!(fw > f2, "{fw} after {f2}");
    r3.still_waiting(QUIET, "w2 holds exclusive");
    let hs = holders(&mut c, "k").unwrap();
    assert_eq!(
        (hs.len(), hs[0].token.as_str(), hs[0].mode.as_str()),
        (1, "w2", "exclusive")
    );
    assert_eq!(release(&mut c, "k", "w2"), 1);
    let (f3, _) = r3.granted_within(AT_ONCE, "w2 released");
    assert!(f3 > fw, "{f3} after {fw}");
    assert_eq!(release(&mut c, "k", "r3"), 1);
    assert!(!exists(&mut c, "k"));
}

/// Readers in several threads re-acquire `SHARED` back to back, so that the key is never
/// free; a writer queues with `WAIT` and is granted once the readers that held before it
/// are gone, and no reader that came after it is granted before it or while it holds.
#[test]
fn a_writer_is_not_starved_by_a_stream_of_readers() {
    const READER_TTL: u64 = 1_000;
    let server = Server::new();
    let stop = AtomicBool::new(false);
    // (sent, answered, fence) of every reader acquisition.
    let log: Mutex<Vec<(Instant, Instant, i64)>> = Mutex::new(Vec::new());
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let (writer_queued, writer_granted, writer_released, fw) = thread::scope(|s| {
        let _stop_readers = SetOnDrop(&stop, true);
        for r in 0..4 {
            let (server, stop, log, problems) = (&server, &stop, &log, &problems);
            s.spawn(move || {
                let mut con = server.conn();
                sleep(Duration::from_millis(8 * r));
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let t = format!("r{r}-{n}");
                    n += 1;
                    let sent = Instant::now();
                    let got =
                        acquire_with(&mut con, "k", &t, READER_TTL, &["SHARED", "WAIT", "5000"]);
                    let answered = Instant::now();
                    match got {
                        Ok(Value::Int(f)) => log.lock().unwrap().push((sent, answered, f)),
                        other => {
                            problems.lock().unwrap().push(format!("{t}: {other:?}"));
                            return;
                        }
                    }
                    sleep(Duration::from_millis(30));
                    if release(&mut con, "k", &t) != 1 {
                        problems
                            .lock()
                            .unwrap()
                            .push(format!("{t}: its hold was gone"));
                    }
                }
            });
        }
        sleep(Duration::from_millis(300));
        let mut con = server.conn();
        let w = Pending::send(&server, "k", "w", 10_000, &["WAIT", "5000"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !client_blocked(&mut con, w.id) {
            if let Ok((r, _)) = w.rx.try_recv() {
                panic!("the writer was answered {r:?} at once: readers should have held the key");
            }
            assert!(Instant::now() < deadline, "the writer did not block");
            sleep(Duration::from_millis(2));
        }
        let queued = Instant::now();
        let (fw, at) = w.granted_within(
            Duration::from_millis(READER_TTL) + Duration::from_millis(500),
            "a stream of readers",
        );
        let hs = holders(&mut con, "k");
        assert_eq!(tokens(&hs), ["w"], "the writer holds alone: {hs:?}");
        sleep(Duration::from_millis(100));
        let released = Instant::now();
        assert_eq!(release(&mut con, "k", "w"), 1);
        sleep(Duration::from_millis(300));
        (queued, at, released, fw)
    });
    let problems = problems.into_inner().unwrap();
    assert!(problems.is_empty(), "readers: {problems:?}");
    let log = log.into_inner().unwrap();
    let waited = writer_granted - writer_queued;
    assert!(
        log.iter().any(|&(_, _, f)| f < fw),
        "no reader held before the writer"
    );
    let mut after = 0;
    for &(sent, answered, f) in &log {
        if sent > writer_queued {
            after += 1;
            assert!(
                f > fw,
                "a reader sent {:?} after the writer queued was granted fence {f}, before the \
                 writer's {fw}",
                sent - writer_queued
            );
            assert!(
                answered >= writer_released,
                "a reader that came after the writer was answered while the writer held"
            );
        }
    }
    assert!(
        after > 0,
        "no reader came after the writer: the stream stopped"
    );
    let mut fences: Vec<i64> = log.iter().map(|l| l.2).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        log.len(),
        "every reader hold has a fence of its own"
    );
    eprintln!(
        "writer waited {waited:?} behind {} reader holds; {after} readers queued behind it",
        log.iter().filter(|l| l.2 < fw).count()
    );
}

// ------------------------------------------------------------------- LIMIT under load

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

// ----------------------------------------------------------------- the server around it

/// Shared holders a and b (LIMIT 2), an exclusive waiter and a shared one.
fn shared_key_with_waiters(server: &Server, c: &mut Connection) -> (i64, Pending, Pending) {
    granted(c, "k", "a", TTL, &["SHARED", "LIMIT", "2"]);
    let fb = granted(c, "k", "b", TTL, &["SHARED", "LIMIT", "2"]);
    let w = Pending::join(server, "k", "w", TTL, &["WAIT", "0"]);
    let r = Pending::join(
        server,
        "k",
        "r",
        TTL,
        &["SHARED", "LIMIT", "2", "WAIT", "0"],
    );
    (fb, w, r)
}

#[test]
fn deleting_a_shared_key_answers_its_waiters_at_once() {
    let server = Server::new();
    let mut c = server.conn();
    for how in [
        &["DEL", "k"][..],
        &["UNLINK", "k"],
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["FLUSHALL", "ASYNC"],
    ] {
        let (fb, w, r) = shared_key_with_waiters(&server, &mut c);
        let mut cmd = redis::cmd(how[0]);
        cmd.arg(&how[1..]);
        common::run(&cmd, &mut c).unwrap();
        let what = format!("{how:?}");
        w.null_within(AT_ONCE, &what);
        r.null_within(AT_ONCE, &what);
        assert_eq!(holders(&mut c, "k"), None, "{what}");
        assert_eq!(stat(&mut c, "lock_waiting_clients"), 0, "{what}");
        let again = granted(&mut c, "k", "a", TTL, &["SHARED"]);
        assert!(again > fb, "{what}: the fence went backwards");
        assert_eq!(release(&mut c, "k", "a"), 1);
    }
}

#[test]
fn rename_moves_every_hold_and_copy_copies_them() {
    let server = Server::new();
    let mut c = server.conn();
    let ends0 = stat(&mut c, "lock_lease_ends");
    granted(&mut c, "k", "a", TTL, &["SHARED"]);
    let b_sent = Instant::now();
    let fb = granted(&mut c, "k", "b", 600, &["SHARED"]);
    let b_due = (
        b_sent + Duration::from_millis(600),
        Instant::now() + Duration::from_millis(600),
    );
    let w = Pending::join(&server, "k", "w", TTL, &["WAIT", "0"]);
    let before = holders(&mut c, "k").unwrap();
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut c, "RENAME", "k", "k2"), Ok(Value::Okay));
    w.null_within(AT_ONCE, "RENAME k k2");
    assert_eq!(holders(&mut c, "k"), None, "nothing left at the old name");
    let moved = holders(&mut c, "k2").expect("the holds are at k2");
    assert_same_holds(&before, &moved, t0.elapsed(), "RENAME");
    let i = info(&mut c, "k2").unwrap();
    assert_eq!(
        (i.mode.as_str(), i.holders, i.waiters, i.fence),
        ("shared", 2, 0, fb)
    );

    assert_eq!(cmd!(&mut c, "COPY", "k2", "k3"), Ok(Value::Int(1)));
    let copied = holders(&mut c, "k3").expect("COPY copies the holds");
    assert_same_holds(&moved, &copied, t0.elapsed(), "COPY");
    assert_same_holds(
        &moved,
        &holders(&mut c, "k2").unwrap(),
        t0.elapsed(),
        "COPY source",
    );

    // b's lease still ends on time, at both names.
    let mut ended = None;
    while ended.is_none() && Instant::now() < b_due.1 + LATE + Duration::from_millis(500) {
        let (h2, h3) = (
            tokens(&holders(&mut c, "k2")),
            tokens(&holders(&mut c, "k3")),
        );
        if h2 == ["a"] && h3 == ["a"] {
            ended = Some(Instant::now());
        }
        sleep(Duration::from_millis(5));
    }
    let ended = ended.expect("b's lease never ended at k2 and k3");
    assert!(ended >= b_due.0, "b's lease ended early");
    assert!(
        ended <= b_due.1 + LATE,
        "b's lease ended {:?} late",
        ended - b_due.1
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0 + 2,
        "one lease end at each name"
    );
    assert_eq!(release(&mut c, "k2", "a"), 1);
    assert!(!exists(&mut c, "k2"));
    assert_eq!(
        tokens(&holders(&mut c, "k3")),
        ["a"],
        "the copy is a lock of its own"
    );
    assert_eq!(release(&mut c, "k3", "a"), 1);
    // The old name is free; the next fence is above the moved lock's.
    assert!(granted(&mut c, "k", "w", TTL, &[]) > fb);
}

#[test]
fn client_unblock_answers_a_shared_waiter() {
    let server = Server::new();
    let mut c = server.conn();
    granted(&mut c, "k", "x", TTL, &[]);
    let r1 = Pending::join(&server, "k", "r1", TTL, &["SHARED", "WAIT", "0"]);
    let r2 = Pending::join(
        &server,
        "k",
        "r2",
        TTL,
        &["SHARED", "LIMIT", "3", "WAIT", "0"],
    );
    let timeouts = stat(&mut c, "lock_wait_timeouts");
    assert_eq!(client_unblock(&mut c, r1.id, false), 1);
    r1.null_within(AT_ONCE, "CLIENT UNBLOCK");
    assert_eq!(client_unblock(&mut c, r2.id, true), 1);
    match r2.reply_within(AT_ONCE) {
        Some((Err(e), _)) if e.starts_with("UNBLOCKED") => {}
        other => panic!("CLIENT UNBLOCK ERROR: r2 must get the UNBLOCKED error, got {other:?}"),
    }
    assert_eq!(info(&mut c, "k").unwrap().waiters, 0, "both left the queue");
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);
    // README, `INFO lock`: `lock_wait_timeouts` counts the waits that ended in null.
    assert_eq!(stat(&mut c, "lock_wait_timeouts"), timeouts + 1);
    assert_eq!(release(&mut c, "k", "x"), 1);
    assert!(!exists(&mut c, "k"), "nobody was granted: the key goes");
}

/// A queued exclusive request that leaves (its `WAIT` times out, its client disconnects or is
/// unblocked) no longer holds back the shared requests behind it: they are granted at once,
/// beside the shared holds, without waiting for a hold to end.
#[test]
fn shared_waiters_behind_an_exclusive_one_that_leaves_are_granted_at_once() {
    let server = Server::new();
    let mut c = server.conn();
    for how in ["timeout", "disconnect", "unblock"] {
        let key = format!("k:{how}");
        granted(&mut c, &key, "a", TTL, &["SHARED"]);
        granted(&mut c, &key, "b", TTL, &["SHARED"]);
        let timeout = if how == "timeout" { "300" } else { "0" };
        let w = Pending::join(&server, &key, "w", TTL, &["WAIT", timeout]);
        let r = Pending::join(
            &server,
            &key,
            "r",
            TTL,
            &["SHARED", "LIMIT", "3", "WAIT", "0"],
        );
        r.still_waiting(Duration::from_millis(50), how);
        let left = Instant::now();
        match how {
            "timeout" => {
                w.null_within(Duration::from_secs(2), how);
            }
            "disconnect" => {
                assert!(
                    cmd!(&mut c, "CLIENT", "KILL", "ID", w.id).is_ok(),
                    "CLIENT KILL"
                );
            }
            _ => {
                assert_eq!(client_unblock(&mut c, w.id, false), 1);
                w.null_within(AT_ONCE, how);
            }
        }
        let (fence, at) = r.granted_within(Duration::from_secs(2), how);
        let late = at.saturating_duration_since(left);
        assert!(
            late < Duration::from_millis(if how == "timeout" { 500 } else { 200 }),
            "{how}: the shared waiter was granted {late:?} after the exclusive one left"
        );
        let hs = holders(&mut c, &key).expect("the key");
        assert_eq!(tokens(&Some(hs.clone())), ["a", "b", "r"], "{how}");
        assert!(
            hs.iter().all(|h| h.fence <= fence),
            "{how}: r's fence is the last"
        );
    }
}

/// Leases that end during `CLIENT PAUSE … WRITE` are ended, and handed on, when writes
/// resume: `k` has two shared holds and an exclusive waiter, `lone` a shared hold alone.
#[test]
fn client_pause_write_defers_shared_lease_ends_and_their_hand_off() {
    let server = Server::new();
    let mut c = server.conn();
    let acquired = Instant::now();
    granted(&mut c, "k", "a", 300, &["SHARED"]);
    let fb = granted(&mut c, "k", "b", 300, &["SHARED"]);
    granted(&mut c, "lone", "c", 300, &["SHARED"]);
    let w = Pending::join(&server, "k", "w", TTL, &["WAIT", "0"]);
    let ends0 = stat(&mut c, "lock_lease_ends");
    cmd!(&mut c, "CLIENT", "PAUSE", 5_000, "WRITE").unwrap();
    sleep((acquired + Duration::from_millis(800)).saturating_duration_since(Instant::now()));
    w.still_waiting(Duration::ZERO, "the leases ended during the pause");
    assert!(
        exists(&mut c, "k") && exists(&mut c, "lone"),
        "the keys stay while paused"
    );
    assert_eq!(
        stat(&mut c, "lock_lease_ends"),
        ends0,
        "no lease is ended while paused"
    );
    cmd!(&mut c, "CLIENT", "UNPAUSE").unwrap();
    let resumed = Instant::now();
    let (fw, at) = w.granted_within(AT_ONCE, "writes resumed");
    assert!(at + Duration::from_millis(5) >= resumed);
    assert!(fw > fb);
    let hs = holders(&mut c, "k").unwrap();
    assert_eq!(
        (hs.len(), hs[0].token.as_str(), hs[0].mode.as_str()),
        (1, "w", "exclusive")
    );
    assert!(
        common::wait_until(AT_ONCE, || !exists(&mut c, "lone")),
        "lone's lease ended in the pause: the key must go once writes resume"
    );
    assert_eq!(stat(&mut c, "lock_lease_ends"), ends0 + 3);
}

#[test]
fn expire_on_a_shared_key() {
    let server = Server::new();
    let mut c = server.conn();
    let (_, w, r) = shared_key_with_waiters(&server, &mut c);
    let set = Instant::now();
    assert_eq!(cmd!(&mut c, "PEXPIRE", "k", 300), Ok(Value::Int(1)));
    assert!(matches!(cmd!(&mut c, "PTTL", "k"), Ok(Value::Int(t)) if t > 0 && t <= 300));
    let gone = common::wait_until(Duration::from_secs(3), || !exists(&mut c, "k"));
    assert!(gone, "k did not expire within 3 s of PEXPIRE k 300");
    let seen = Instant::now();
    for p in [&w, &r] {
        let at = p.null_within(
            (seen + AT_ONCE).saturating_duration_since(Instant::now()),
            "the key expired",
        );
        assert!(
            at >= set + Duration::from_millis(300),
            "{} answered before the key expired",
            p.token
        );
    }
    assert_eq!(release(&mut c, "k", "a"), 0, "every hold went with the key");
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);

    // PERSIST keeps the holds, and the key TTL goes.
    granted(&mut c, "p", "a", TTL, &["SHARED"]);
    granted(&mut c, "p", "b", TTL, &["SHARED"]);
    let before = holders(&mut c, "p").unwrap();
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut c, "PEXPIRE", "p", 100_000), Ok(Value::Int(1)));
    assert_eq!(cmd!(&mut c, "PERSIST", "p"), Ok(Value::Int(1)));
    assert_eq!(cmd!(&mut c, "PTTL", "p"), Ok(Value::Int(-1)));
    assert_same_holds(
        &before,
        &holders(&mut c, "p").unwrap(),
        t0.elapsed(),
        "PERSIST",
    );
}

#[test]
fn a_full_server_refuses_shared_acquires_and_still_lets_holders_go() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = granted(&mut c, "k", "a", TTL, &["SHARED"]);
    cmd!(&mut c, "CONFIG", "SET", "maxmemory-policy", "noeviction").unwrap();
    cmd!(&mut c, "CONFIG", "SET", "maxmemory", 1).unwrap();
    let set = cmd!(&mut c, "SET", "plain", "v");
    assert!(
        matches!(&set, Err(e) if e.starts_with("OOM")),
        "the server must be full: {set:?}"
    );
    let before = holders(&mut c, "k").unwrap();
    let t0 = Instant::now();
    for (key, t, opts) in [
        ("k", "b", &["SHARED"][..]),
        ("k", "b", &["SHARED", "LIMIT", "3", "WAIT", "100"]),
        ("new", "b", &["SHARED"]),
    ] {
        let r = acquire_with(&mut c, key, t, 1_000, opts);
        assert!(
            matches!(&r, Err(e) if e.starts_with("OOM ")),
            "LOCK.ACQUIRE {key} {t} {opts:?} on a full server: {r:?}"
        );
    }
    assert_same_holds(&before, &holders(&mut c, "k").unwrap(), t0.elapsed(), "OOM");
    assert!(!exists(&mut c, "new"));
    assert_eq!(
        common::extend(&mut c, "k", "a", 30_000),
        1,
        "EXTEND on a full server"
    );
    let nf = common::fence(&mut c, "k", "a").expect("FENCE on a full server");
    assert!(nf > fa);
    assert_eq!(release(&mut c, "k", "a"), 1, "RELEASE on a full server");
    assert!(!exists(&mut c, "k"));
    cmd!(&mut c, "CONFIG", "SET", "maxmemory", 0).unwrap();
    assert!(granted(&mut c, "k", "b", TTL, &["SHARED"]) > nf);
}
