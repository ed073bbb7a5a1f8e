//! The async API against a real server: basics, release by drop, and cancelled waits that
//! must leave no grant behind.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::aio::{Mutex, RwLock, Semaphore};
use redis_lock_client::{Error, GuardError, Kind, LossReason, Mode};
use support::{eventually, is_free, Server};

fn rpush(key: &str, value: &str) -> redis::Cmd {
    let mut c = redis::cmd("RPUSH");
    c.arg(key).arg(value);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_guard_release_resp2_and_resp3() {
    let server = Server::start();
    for client in [server.client(), server.client_resp3()] {
        let mutex = Mutex::new(client, "{a}:lock").ttl(Duration::from_secs(5));
        let guard = mutex.lock().await.unwrap();
        let info = mutex.info().await.unwrap().unwrap();
        assert_eq!(info.holder.as_deref(), Some(guard.token()));
        assert_eq!((info.fence, info.mode), (guard.fence(), Mode::Exclusive));
        let n: i64 = guard.guard(&rpush("{a}:data", "x")).await.unwrap();
        assert!(n >= 1);
        guard.extend().await.unwrap();
        let fence = guard.refence().await.unwrap();
        assert_eq!(fence, guard.fence());
        let busy = mutex.clone().wait(Duration::from_millis(100)).lock().await;
        assert!(matches!(busy, Err(Error::Timeout)), "{busy:?}");
        let signal = guard.signal();
        assert!(guard.release().await.unwrap());
        assert!(matches!(signal.lost().await, LossReason::Released));
        assert_eq!(mutex.info().await.unwrap(), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_and_semaphore() {
    let server = Server::start();
    let lock = RwLock::new(server.client(), "{c}:lock");
    let (r1, r2) = (lock.read().await.unwrap(), lock.read().await.unwrap());
    assert_eq!(r1.kind(), Kind::Shared);
    let refused = r1.guard::<i64>(&rpush("{c}:data", "x")).await;
    assert!(matches!(refused, Err(GuardError::Fenced(_))), "{refused:?}");
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await.map(|w| (Instant::now(), w)) }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let (granted, w) = writer.await.unwrap().unwrap();
    assert!(granted >= released);
    let _: i64 = w.guard(&rpush("{c}:data", "w")).await.unwrap();
    w.release().await.unwrap();

    let sem = Semaphore::new(server.client(), "permits", 2).wait(Duration::from_millis(100));
    let (a, _b) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
    assert!(matches!(sem.acquire().await, Err(Error::Timeout)));
    a.release().await.unwrap();
    assert_eq!(sem.acquire().await.unwrap().kind(), Kind::Permit(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_is_released() {
    let server = Server::start();
    let mutex = Mutex::new(server.client(), "drop:lock");
    let guard = mutex.lock().await.unwrap();
    let signal = guard.signal();
    drop(guard);
    assert!(matches!(signal.reason(), Some(LossReason::Released)));
    let mut con = server.conn();
    assert!(eventually(Duration::from_secs(2), || is_free(
        &mut con,
        "drop:lock"
    )));
}

/// A wait dropped at any point around a release leaves no grant behind: the key is free
/// again once the clean-up has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_wait_leaves_no_grant() {
    let server = Server::start();
    let mut con = server.conn();
    let mutex = Mutex::new(server.client(), "race:lock").wait(Duration::from_secs(5));
    for round in 0..12u64 {
        let _: u64 = redis::cmd("LOCK.ACQUIRE")
            .arg("race:lock")
            .arg("holder")
            .arg(30_000)
            .query(&mut con)
            .unwrap();
        let waiter = mutex.clone();
        // The release lands before, at about, or after the moment the wait is dropped.
        let drop_after = Duration::from_millis(30);
        let release_after = Duration::from_millis(20 + round % 4 * 5);
        let release = {
            let client = server.client();
            tokio::spawn(async move {
                tokio::time::sleep(release_after).await;
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                let _: i64 = redis::cmd("LOCK.RELEASE")
                    .arg("race:lock")
                    .arg("holder")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            })
        };
        // A guard that won the race is dropped here too, and released.
        let _ = tokio::time::timeout(drop_after, waiter.lock()).await;
        release.await.unwrap();
        assert!(
            eventually(Duration::from_secs(3), || is_free(&mut con, "race:lock")),
            "round {round}: a grant was left behind"
        );
    }
}

/// A cancelled waiter's turn passes to the one behind it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_passes_its_turn_on() {
    let server = Server::start();
    let mutex = Mutex::new(server.client(), "turn:lock").wait(Duration::from_secs(10));
    let holder = mutex.lock().await.unwrap();
    let first = tokio::spawn({
        let m = mutex.clone();
        async move { m.lock().await }
    });
    let queued = |n| {
        let m = mutex.clone();
        async move {
            for _ in 0..500 {
                if m.info().await.unwrap().map(|i| i.waiters) == Some(n) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("not queued");
        }
    };
    queued(1).await;
    let second = tokio::spawn({
        let m = mutex.clone();
        async move { m.lock().await }
    });
    queued(2).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    queued(1).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = second.await.unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_millis(500));
    assert!(guard.release().await.unwrap());
}

/// The worst moment to cancel: the server granted the lock and wrote the reply, which the
/// client has not read. The server counts it as delivered; the clean-up must release it.
#[test]
fn wait_dropped_after_its_grant_was_sent() {
    let server = Server::start();
    let mut con = server.conn();
    // One thread: while it is blocked below, nothing reads the grant's reply.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mutex = Mutex::new(server.client(), "sent:lock").wait(Duration::from_secs(10));
    let _: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("sent:lock")
        .arg("holder")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    rt.block_on(async {
        let wait = mutex.lock();
        tokio::pin!(wait);
        let queued = || mutex.info();
        for _ in 0..500 {
            tokio::select! {
                biased;
                granted = &mut wait => panic!("granted while held: {granted:?}"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            if queued().await.unwrap().map(|i| i.waiters) == Some(1) {
                break;
            }
        }
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg("sent:lock")
            .arg("holder")
            .query(&mut con)
            .unwrap();
        assert_eq!(released, 1);
        // The grant's reply reaches our socket while this thread sleeps.
        std::thread::sleep(Duration::from_millis(50));
        let holders: redis::Value = redis::cmd("LOCK.HOLDERS")
            .arg("sent:lock")
            .query(&mut con)
            .unwrap();
        assert_ne!(holders, redis::Value::Nil, "granted to the waiter");
    });
    // The wait future was dropped with the reply unread; the clean-up runs on the runtime.
    let freed = rt.block_on(async {
        for _ in 0..300 {
            if mutex.info().await.unwrap().is_none() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    assert!(freed, "the grant was left behind");
}
