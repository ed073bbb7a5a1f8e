//! Durable mode beyond grants (issue 26): a guarded write is followed by `WAIT`, and an
//! unconfirmed one is `NotDurable` although it ran on the master; an extend is followed by
//! `WAIT`, and an unconfirmed one ends the hold; without durable mode no `WAIT` is sent.
//! Both APIs. The replica "goes away" by being killed once the hold is granted (a grant in
//! durable mode needs it).

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{aio, Error, GuardError, LossReason, Mutex, RwLock};
use support::{calls, eventually, Server, SLACK};

/// The durable mode's `WAIT` timeout in the tests where replicas are missing.
const WAIT: Duration = Duration::from_millis(500);

fn set(key: &str, value: &str) -> redis::Cmd {
    let mut c = redis::cmd("SET");
    c.arg(key).arg(value);
    c
}

fn get(server: &Server, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// The write's outcome is unknown, not "it did not run": the Display says so.
fn assert_unknown_outcome(e: &GuardError) {
    let text = e.to_string();
    assert!(
        text.contains("ran on the master") && text.contains("unknown"),
        "{text}"
    );
    let text = Error::from(GuardError::NotDurable {
        acked: 0,
        required: 1,
    })
    .to_string();
    assert!(text.contains("unknown"), "{text}");
}

/// (a) With the replica attached, a durable guarded write returns once the replica has it,
/// for a mutex and a read-write lock's writer; one `WAIT` for the grant, one per write.
#[test]
fn durable_guarded_write_is_on_the_replica_when_it_returns() {
    let master = Server::start();
    let replica = master.replica();
    let mutex = Mutex::new(master.client(), "{d}:lock").durable(1, Duration::from_secs(2));
    let rw = RwLock::new(master.client(), "{e}:lock").durable(1, Duration::from_secs(2));
    let waits = calls(&master, "wait");
    let guard = mutex.lock().unwrap();
    let writer = rw.write().unwrap();
    for i in 0..3 {
        let value = format!("v{i}");
        let () = guard.guard(&set("{d}:data", &value)).unwrap();
        assert_eq!(get(&replica, "{d}:data").as_deref(), Some(value.as_str()));
        let () = writer.guard(&set("{e}:data", &value)).unwrap();
        assert_eq!(get(&replica, "{e}:data").as_deref(), Some(value.as_str()));
    }
    assert_eq!(
        calls(&master, "wait") - waits,
        2 + 6,
        "a WAIT per grant and per write"
    );
    assert!(!guard.is_lost() && !writer.is_lost());
}

/// (b) The replica gone, a durable guarded write runs on the master and returns
/// `NotDurable { acked: 0, required: 1 }` after the `WAIT` timeout; the hold stays. A
/// refusal (`FENCED`) is not followed by a `WAIT`.
#[test]
fn durable_guarded_write_without_replica_ran_but_is_not_durable() {
    let master = Server::start();
    let replica = master.replica();
    let guard = Mutex::new(master.client(), "{d}:lock")
        .durable(1, WAIT)
        .lock()
        .unwrap();
    let reader = RwLock::new(master.client(), "{e}:lock")
        .durable(1, WAIT)
        .read()
        .unwrap();
    drop(replica);
    let waits = calls(&master, "wait");
    let started = Instant::now();
    let refused = reader.guard::<()>(&set("{e}:data", "r"));
    assert!(matches!(refused, Err(GuardError::Fenced(_))), "{refused:?}");
    assert!(started.elapsed() < WAIT, "no WAIT after a refusal");
    assert_eq!(calls(&master, "wait"), waits, "no WAIT after a refusal");

    let started = Instant::now();
    let unconfirmed = guard.guard::<()>(&set("{d}:data", "v"));
    let took = started.elapsed();
    match &unconfirmed {
        Err(
            e @ GuardError::NotDurable {
                acked: 0,
                required: 1,
            },
        ) => assert_unknown_outcome(e),
        other => panic!("{other:?}"),
    }
    assert!(
        took >= WAIT - SLACK && took < WAIT + Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(
        get(&master, "{d}:data").as_deref(),
        Some("v"),
        "the write ran"
    );
    assert!(
        !guard.is_lost(),
        "an unconfirmed write does not end the hold"
    );
}

/// (c) The replica gone while the lock is held, the keep-alive's next extend (every
/// ttl/3) is not confirmed: the hold is lost within about ttl/3 + the `WAIT` timeout,
/// long before its lease would end, though the master still has it. An explicit `extend()`
/// fails with `NotDurable` and ends the hold the same way.
#[test]
fn unconfirmed_extend_ends_the_hold() {
    let master = Server::start();
    let replica = master.replica();
    let ttl = Duration::from_secs(3);
    let mutex = Mutex::new(master.client(), "{d}:lock")
        .ttl(ttl)
        .durable(1, WAIT);
    let guard = mutex.lock().unwrap();
    let by_hand = Mutex::new(master.client(), "{e}:lock")
        .ttl(ttl)
        .no_keepalive()
        .durable(1, WAIT)
        .lock()
        .unwrap();
    let waits = calls(&master, "wait");
    by_hand.extend().unwrap();
    // The keep-alive's first extend, confirmed.
    assert!(eventually(ttl / 3 + SLACK * 3, || calls(&master, "wait") >= waits + 2));
    assert!(!guard.is_lost());

    drop(replica);
    let killed = Instant::now();
    let bound = ttl / 3 + WAIT + SLACK * 3;
    assert!(
        eventually(bound, || guard.is_lost()),
        "not lost within {bound:?}"
    );
    assert!(
        killed.elapsed() < ttl - SLACK,
        "lost by the WAIT, not the lease's end"
    );
    let reason = guard.signal().reason();
    assert!(
        matches!(&reason, Some(LossReason::Error(e)) if e.to_string().contains("not durable")),
        "{reason:?}"
    );
    let info = mutex.info().unwrap().expect("held on the master");
    assert_eq!(info.holder.as_deref(), Some(guard.token()));

    match by_hand.extend() {
        Err(Error::NotDurable {
            acked: 0,
            required: 1,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(by_hand.is_lost());
}

/// (d) Not durable: guarded writes, explicit extends and keep-alive extends send no `WAIT`.
#[test]
fn not_durable_sends_no_wait() {
    let master = Server::start();
    let guard = Mutex::new(master.client(), "{d}:lock")
        .ttl(Duration::from_millis(600))
        .lock()
        .unwrap();
    let (waits, extends) = (calls(&master, "wait"), calls(&master, "lock.extend"));
    let () = guard.guard(&set("{d}:data", "v")).unwrap();
    guard.extend().unwrap();
    assert!(eventually(Duration::from_secs(2), || {
        calls(&master, "lock.extend") >= extends + 3
    }));
    assert_eq!(calls(&master, "wait"), waits);
    assert!(!guard.is_lost());
}

/// (a)–(d) with the async API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_durable_guarded_writes_and_extends() {
    let master = Server::start();
    let replica = master.replica();
    let ttl = Duration::from_secs(3);
    let mutex = aio::Mutex::new(master.client(), "{d}:lock")
        .ttl(ttl)
        .durable(1, WAIT);
    let rw = aio::RwLock::new(master.client(), "{e}:lock").durable(1, WAIT);
    let guard = mutex.lock().await.unwrap();
    let writer = rw.write().await.unwrap();
    let waits = calls(&master, "wait");
    // (a)
    let () = guard.guard(&set("{d}:data", "a")).await.unwrap();
    assert_eq!(get(&replica, "{d}:data").as_deref(), Some("a"));
    let () = writer.guard(&set("{e}:data", "a")).await.unwrap();
    assert_eq!(get(&replica, "{e}:data").as_deref(), Some("a"));
    writer.extend().await.unwrap();
    assert_eq!(calls(&master, "wait") - waits, 3);
    assert!(!guard.is_lost() && !writer.is_lost());

    drop(replica);
    let killed = Instant::now();
    // (b)
    let started = Instant::now();
    let unconfirmed = writer.guard::<()>(&set("{e}:data", "b")).await;
    let took = started.elapsed();
    match &unconfirmed {
        Err(
            e @ GuardError::NotDurable {
                acked: 0,
                required: 1,
            },
        ) => assert_unknown_outcome(e),
        other => panic!("{other:?}"),
    }
    assert!(
        took >= WAIT - SLACK && took < WAIT + Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(
        get(&master, "{e}:data").as_deref(),
        Some("b"),
        "the write ran"
    );
    assert!(!writer.is_lost());
    match writer.extend().await {
        Err(Error::NotDurable {
            acked: 0,
            required: 1,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(writer.is_lost());
    // (c)
    let bound = ttl / 3 + WAIT + SLACK * 3;
    let reason = tokio::time::timeout(bound.saturating_sub(killed.elapsed()), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("not lost within {bound:?}"));
    assert!(
        matches!(&reason, LossReason::Error(e) if e.to_string().contains("not durable")),
        "{reason:?}"
    );
    let info = mutex.info().await.unwrap().expect("held on the master");
    assert_eq!(info.holder.as_deref(), Some(guard.token()));

    // (d)
    let plain = aio::Mutex::new(master.client(), "{f}:lock")
        .ttl(Duration::from_millis(600))
        .lock()
        .await
        .unwrap();
    let (waits, extends) = (calls(&master, "wait"), calls(&master, "lock.extend"));
    let () = plain.guard(&set("{f}:data", "v")).await.unwrap();
    plain.extend().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(calls(&master, "lock.extend") >= extends + 3);
    assert_eq!(calls(&master, "wait"), waits);
    assert!(!plain.is_lost());
}
