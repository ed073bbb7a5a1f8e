//! A job that writes through `guard()` stops when its hold is lost, before the lease ends,
//! and a write it makes late is refused by the server (FENCED): the next holder's data never
//! sees it.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{aio, GuardError, Mutex};
use support::{Server, SLACK};

const TTL: Duration = Duration::from_millis(600);
const EVERY: Duration = Duration::from_millis(200);

fn rpush(value: &str) -> redis::Cmd {
    let mut c = redis::cmd("RPUSH");
    c.arg("{job}:data").arg(value);
    c
}

fn data(server: &Server) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg("{job}:data")
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

/// Blocking: the lease is cut short and another client takes the lock over.
#[test]
fn blocking_job_stops_and_its_late_write_is_fenced() {
    let server = Server::start();
    let guard = Mutex::new(server.client(), "{job}:lock")
        .ttl(TTL)
        .lock()
        .unwrap();
    let signal = guard.signal();
    let (stopped_at, written, _next) = std::thread::scope(|s| {
        let job = s.spawn(|| {
            let mut written = 0;
            loop {
                if signal.is_lost() {
                    return (Instant::now(), written);
                }
                match guard.guard::<i64>(&rpush("a")) {
                    Ok(_) => written += 1,
                    Err(GuardError::Fenced(_)) => return (Instant::now(), written),
                    Err(e) => panic!("{e}"),
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut con = server.conn();
        let cut = Instant::now();
        let _: i64 = redis::cmd("LOCK.EXTEND")
            .arg("{job}:lock")
            .arg(guard.token())
            .arg(1)
            .query(&mut con)
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let next = Mutex::new(server.client(), "{job}:lock").lock().unwrap();
        let _: i64 = next.guard(&rpush("b")).unwrap();
        let (stopped_at, written) = job.join().unwrap();
        assert!(
            stopped_at - cut <= EVERY + SLACK,
            "stopped {:?} after the cut",
            stopped_at - cut
        );
        (stopped_at, written, next)
    });
    // It stopped on the loss (the signal, or a refusal that fired it), promptly.
    let lost_at = signal.lost_at().expect("lost");
    assert!(stopped_at >= lost_at && stopped_at - lost_at <= SLACK);
    match guard.guard::<i64>(&rpush("late")) {
        Err(GuardError::Fenced(f)) => assert_eq!(f.reason, "the lock is held under a newer fence"),
        other => panic!("late write not refused: {other:?}"),
    }
    let list = data(&server);
    assert_eq!(list.iter().filter(|v| *v == "a").count(), written);
    assert_eq!(list.last().map(String::as_str), Some("b"), "{list:?}");
}

/// Async: the server stops answering mid-job. The job, selecting on `lost()`, stops by the
/// lease's end on its own clock although its write never came back; once the server is back
/// and someone else holds the lock, that write and a later one are refused.
#[test]
fn async_job_stops_by_the_lease_end_on_a_silent_server() {
    let server = Server::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mutex = aio::Mutex::new(server.client(), "{job}:lock").ttl(TTL);
    let guard = rt.block_on(mutex.lock()).unwrap();
    let job = rt.spawn(async move {
        let (mut written, write) = (0, rpush("a"));
        loop {
            let lost = tokio::select! {
                _ = guard.lost() => true,
                wrote = guard.guard::<i64>(&write) => {
                    wrote.unwrap();
                    written += 1;
                    false
                }
            };
            if lost {
                return (Instant::now(), written, guard);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let paused = Instant::now();
    server.pause();
    // The last extend confirmed before the pause was sent before it.
    let lease_end = paused + TTL;
    let (stopped_at, written, guard) = rt.block_on(job).unwrap();
    server.resume();
    assert!(
        stopped_at <= lease_end + SLACK,
        "stopped {:?} after the lease's end",
        stopped_at - lease_end
    );
    assert!(guard.signal().lost_at().unwrap() <= lease_end);
    let next = Mutex::new(server.client(), "{job}:lock")
        .wait(Duration::from_secs(5))
        .lock()
        .unwrap();
    let _: i64 = next.guard(&rpush("b")).unwrap();
    let late = rt.block_on(guard.guard::<i64>(&rpush("late")));
    assert!(matches!(late, Err(GuardError::Fenced(_))), "{late:?}");
    // The write in flight at the pause either ran before it (its reply lost to the job) or
    // after the lease's end, refused; nothing of the job's lands after the next holder's.
    let list = data(&server);
    let landed = list.iter().filter(|v| *v == "a").count();
    assert!(
        landed == written || landed == written + 1,
        "{written} written: {list:?}"
    );
    assert_eq!(list.last().map(String::as_str), Some("b"));
    drop(next);
    rt.block_on(async move { guard.release().await }).unwrap();
}
