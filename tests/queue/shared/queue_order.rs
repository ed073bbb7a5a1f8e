//! The queue: FIFO order across shared and exclusive requests, and no writer starvation under
//! a stream of readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use crate::common::holds::{acquire_with, holders, tokens, Pending};
use crate::common::{client_blocked, exists, info, release, Server};
use crate::shared::{granted, SetOnDrop, AT_ONCE, QUIET, TTL};
use redis::Value;

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
