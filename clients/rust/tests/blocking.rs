//! The blocking API against a real server: the three lock kinds, guarded writes, release on
//! drop and panic, contention, FIFO hand-off, RESP2/RESP3, durable mode.

mod support;

use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::{Error, GuardError, Kind, LossReason, Mode, Mutex, RwLock, Semaphore};
use support::{eventually, is_free, Server};

fn hset(key: &str, field: &str, value: &str) -> redis::Cmd {
    let mut c = redis::cmd("HSET");
    c.arg(key).arg(field).arg(value);
    c
}

#[test]
fn mutex_fence_guard_and_release() {
    let server = Server::start();
    let mut con = server.conn();
    let mutex = Mutex::new(server.client(), "{order:1}:lock").ttl(Duration::from_secs(5));
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.kind(), Kind::Exclusive);
    assert_eq!(guard.key(), "{order:1}:lock");
    assert_eq!(guard.token().len(), 36, "a UUID token");
    let info = mutex.info().unwrap().expect("held");
    assert_eq!(info.holder.as_deref(), Some(guard.token()));
    assert_eq!(info.fence, guard.fence());
    assert_eq!(info.mode, Mode::Exclusive);
    let added: i64 = guard
        .guard(&hset("{order:1}:data", "status", "paid"))
        .unwrap();
    assert_eq!(added, 1);
    // The command's own error stays an ordinary error.
    let wrong = guard.guard::<i64>(&redis::cmd("HSET").arg("{order:1}:data").clone());
    assert!(matches!(wrong, Err(GuardError::Redis(_))), "{wrong:?}");
    // A new fence retires the old one.
    let old = guard.fence();
    let new = guard.refence().unwrap();
    assert!(new > old);
    let stale = redis::cmd("LOCK.GUARD")
        .arg("{order:1}:lock")
        .arg(old)
        .arg("HSET")
        .arg("{order:1}:data")
        .arg("x")
        .arg("y")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(stale.code(), Some("FENCED"));
    guard.extend().unwrap();
    let signal = guard.signal();
    assert!(guard.release().unwrap(), "still held at release");
    assert!(matches!(signal.reason(), Some(LossReason::Released)));
    assert!(is_free(&mut con, "{order:1}:lock"));
    // After the release, its fence guards nothing.
    let refused = redis::cmd("LOCK.GUARD")
        .arg("{order:1}:lock")
        .arg(new)
        .arg("HSET")
        .arg("{order:1}:data")
        .arg("x")
        .arg("y")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(refused.code(), Some("FENCED"));
}

#[test]
fn released_on_drop_and_on_panic() {
    let server = Server::start();
    let mut con = server.conn();
    let mutex = Mutex::new(server.client(), "drop:lock");
    {
        let _guard = mutex.lock().unwrap();
        assert!(!is_free(&mut con, "drop:lock"));
    }
    assert!(
        is_free(&mut con, "drop:lock"),
        "released synchronously on drop"
    );
    let m = mutex.clone();
    let panicked = thread::spawn(move || {
        let _guard = m.lock().unwrap();
        panic!("work failed");
    })
    .join();
    assert!(panicked.is_err());
    assert!(is_free(&mut con, "drop:lock"), "released while unwinding");
}

#[test]
fn contention_times_out_then_fifo_hand_off() {
    let server = Server::start();
    let mutex = Mutex::new(server.client(), "fifo:lock").ttl(Duration::from_secs(10));
    let first = mutex.lock().unwrap();
    let started = Instant::now();
    let busy = mutex.clone().wait(Duration::from_millis(200)).lock();
    let waited = started.elapsed();
    assert!(matches!(busy, Err(Error::Timeout)), "{busy:?}");
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(2),
        "{waited:?}"
    );

    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for name in ["b", "c"] {
        let (m, order) = (
            mutex.clone().wait(Duration::from_secs(10)),
            Arc::clone(&order),
        );
        waiters.push(thread::spawn(move || {
            let guard = m.lock().unwrap();
            order.lock().unwrap().push((name, guard.fence()));
            thread::sleep(Duration::from_millis(50));
        }));
        // Queued before the next one starts.
        let queued = eventually(Duration::from_secs(5), || {
            mutex.info().unwrap().map(|i| i.waiters) == Some(waiters.len() as u64)
        });
        assert!(queued);
    }
    let first_fence = first.fence();
    drop(first);
    for w in waiters {
        w.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert!(first_fence < order[0].1 && order[0].1 < order[1].1);
}

#[test]
fn rwlock_readers_share_and_writer_waits() {
    let server = Server::start();
    let lock = RwLock::new(server.client(), "{catalog}:lock").wait(Duration::from_secs(5));
    let r1 = lock.read().unwrap();
    let r2 = lock.read().unwrap();
    assert_eq!((r1.kind(), r2.kind()), (Kind::Shared, Kind::Shared));
    assert_ne!(r1.fence(), r2.fence());
    let info = lock.info().unwrap().unwrap();
    assert_eq!(
        (info.mode, info.holders, info.holder),
        (Mode::Shared, 2, None)
    );
    assert_eq!(lock.holders().unwrap().len(), 2);
    // A reader's fence guards no write.
    match r1.guard::<i64>(&hset("{catalog}:data", "p", "1")) {
        Err(GuardError::Fenced(f)) => assert_eq!(f.reason, "the lock is held shared"),
        other => panic!("{other:?}"),
    }
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || {
            let w = lock.write().unwrap();
            let _: i64 = w.guard(&hset("{catalog}:data", "p", "2")).unwrap();
            (Instant::now(), w.fence())
        })
    };
    thread::sleep(Duration::from_millis(150));
    let released = Instant::now();
    drop(r1);
    drop(r2);
    let (granted, fence) = writer.join().unwrap();
    assert!(granted >= released, "the writer waited for both readers");
    assert!(fence > 0);
}

#[test]
fn semaphore_permits() {
    let server = Server::start();
    let sem = Semaphore::new(server.client(), "api:calls", 2).wait(Duration::from_millis(200));
    let a = sem.acquire().unwrap();
    let b = sem.acquire().unwrap();
    assert_eq!(a.kind(), Kind::Permit(2));
    assert!(matches!(sem.acquire(), Err(Error::Timeout)));
    let third = {
        let sem = sem.clone().wait(Duration::from_secs(5));
        thread::spawn(move || sem.acquire().map(|g| g.fence()))
    };
    thread::sleep(Duration::from_millis(100));
    drop(a);
    assert!(third.join().unwrap().unwrap() > b.fence());
}

#[test]
fn resp3_reads_the_same() {
    let server = Server::start();
    for client in [server.client(), server.client_resp3()] {
        let mutex = Mutex::new(client, "proto:lock");
        let guard = mutex.lock().unwrap();
        let info = mutex.info().unwrap().unwrap();
        assert_eq!(info.holder.as_deref(), Some(guard.token()));
        assert_eq!(
            (info.mode, info.holders, info.waiters),
            (Mode::Exclusive, 1, 0)
        );
        assert!(info.ttl.unwrap() > Duration::from_secs(29));
        let holders = mutex.holders().unwrap();
        assert_eq!(holders[0].token, guard.token());
        assert_eq!(holders[0].fence, guard.fence());
        let _: i64 = guard.guard(&hset("proto:data", "f", "v")).unwrap();
        guard.release().unwrap();
        assert_eq!(mutex.info().unwrap(), None);
    }
}

#[test]
fn durable_needs_a_replica() {
    let master = Server::start();
    let mut con = master.conn();
    let lonely = Mutex::new(master.client(), "durable:lock").durable(1, Duration::from_millis(100));
    match lonely.lock() {
        Err(Error::NotDurable { acked, required }) => assert_eq!((acked, required), (0, 1)),
        other => panic!("{other:?}"),
    }
    assert!(
        is_free(&mut con, "durable:lock"),
        "the unconfirmed grant was released"
    );

    let _replica = master.replica();
    let durable = Mutex::new(master.client(), "durable:lock").durable(1, Duration::from_secs(2));
    let guard = durable.lock().unwrap();
    assert!(!guard.is_lost());
    drop(guard);
    assert!(is_free(&mut con, "durable:lock"));
}

#[test]
fn bad_options_are_refused() {
    let server = Server::start();
    let m = Mutex::new(server.client(), "k").ttl(Duration::from_millis(300));
    assert!(matches!(
        m.clone().keepalive(Duration::from_millis(300)).lock(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Semaphore::new(server.client(), "s", 0).acquire(),
        Err(Error::Config(_))
    ));
}
