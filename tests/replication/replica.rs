//! A replica holds exactly what its master holds; writes on it are refused; after promotion
//! its leases and fences go on.

use crate::cmd;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::*;
use redis::Value;

/// Waits until the replica has processed everything the master sent.
use crate::common::sync_replica as sync;

#[track_caller]
fn assert_mirrored(m: &mut redis::Connection, r: &mut redis::Connection, key: &str) {
    let a = info(m, key);
    let b = info(r, key);
    match (&a, &b) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            assert_eq!(a.holder, b.holder, "holder on replica");
            assert_eq!(a.fence, b.fence, "fence on replica");
            assert_eq!(a.waiters, b.waiters, "waiters on replica");
            assert!(
                (a.ttl - b.ttl).abs() <= 100,
                "remaining lease: master {} replica {}",
                a.ttl,
                b.ttl
            );
        }
        _ => panic!("{key}: master {a:?} replica {b:?}"),
    }
}

#[test]
fn replica_mirrors_every_command() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let f1 = acquire(&mut mc, "k", "tok", 30_000).unwrap();
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");
    assert_eq!(info(&mut rc, "k").unwrap().fence, f1);

    sleep(Duration::from_millis(300));
    assert_eq!(acquire(&mut mc, "k", "tok", 50_000), Some(f1));
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");
    assert!(
        info(&mut rc, "k").unwrap().ttl > 49_000,
        "renewal not replicated"
    );

    assert_eq!(extend(&mut mc, "k", "tok", 20_000), 1);
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");
    // The deadline travels in Unix milliseconds, rounded up: up to 1 ms more on the replica.
    assert!(
        info(&mut rc, "k").unwrap().ttl <= 20_001,
        "extend not replicated"
    );

    let f2 = fence(&mut mc, "k", "tok").unwrap();
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");
    assert_eq!(info(&mut rc, "k").unwrap().fence, f2);

    // Failed attempts change nothing on the replica either.
    assert_eq!(acquire(&mut mc, "k", "other", 1_000), None);
    assert_eq!(release(&mut mc, "k", "other"), 0);
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");

    assert_eq!(release(&mut mc, "k", "tok"), 1);
    sync(&mut mc);
    assert!(!exists(&mut rc, "k"), "release not replicated");

    acquire(&mut mc, "d", "tok", 30_000).unwrap();
    cmd!(&mut mc, "DEL", "d").unwrap();
    let f3 = acquire(&mut mc, "k", "new", 30_000).unwrap();
    assert!(f3 > f2);
    sync(&mut mc);
    assert!(!exists(&mut rc, "d"));
    assert_mirrored(&mut mc, &mut rc, "k");
}

#[test]
fn full_sync_carries_locks() {
    let m = Server::new();
    let mut mc = m.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    let f = fence(&mut mc, "k", "tok").unwrap();
    acquire(&mut mc, "gone", "g", 30_000).unwrap();
    let g = fence(&mut mc, "gone", "g").unwrap();
    assert_eq!(release(&mut mc, "gone", "g"), 1);
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    sync(&mut mc);
    assert_mirrored(&mut mc, &mut rc, "k");
    assert!(!exists(&mut rc, "gone"));
    // Promote: fences go on above everything the master issued.
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let n = acquire(&mut rc, "gone", "x", 1_000).unwrap();
    assert!(
        n > f.max(g),
        "fresh fence {n} on promoted replica, master issued {}",
        f.max(g)
    );
    assert!(fence(&mut rc, "k", "tok").unwrap() > n);
}

#[test]
fn writes_on_replica_are_refused_readonly() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    sync(&mut mc);
    let before = info(&mut rc, "k");
    let t0 = Instant::now();
    for args in [
        vec!["LOCK.ACQUIRE", "k", "tok", "1000"],
        vec!["LOCK.ACQUIRE", "free", "tok", "1000"],
        vec!["LOCK.ACQUIRE", "free", "tok", "1000", "WAIT", "10"],
        vec!["LOCK.RELEASE", "k", "tok"],
        vec!["LOCK.EXTEND", "k", "tok", "60000"],
        vec!["LOCK.FENCE", "k", "tok"],
    ] {
        let raw: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        assert_err_starts(&run_raw(&mut rc, &raw), "READONLY");
    }
    assert_same_lock(&before, &info(&mut rc, "k"), t0.elapsed(), 100);
    assert!(!exists(&mut rc, "free"));
    // Reads work.
    assert_eq!(
        info(&mut rc, "k").unwrap().holder.as_deref(),
        Some(&b"tok"[..])
    );
    // And the master was not touched.
    assert_mirrored(&mut mc, &mut rc, "k");
}

#[test]
fn lease_end_on_master_removes_key_on_replica() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let t0 = Instant::now();
    acquire(&mut mc, "k", "tok", 400).unwrap();
    sync(&mut mc);
    if t0.elapsed() < Duration::from_millis(300) {
        assert!(exists(&mut rc, "k"));
    }
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut rc, "k")),
        "lease end not replicated"
    );
    assert!(t0.elapsed() >= Duration::from_millis(390), "removed early");
    assert!(!exists(&mut mc, "k"));
}

#[test]
fn replica_leaves_removal_to_master_but_reads_see_lease_end() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let t0 = Instant::now();
    acquire(&mut mc, "k", "tok", 2_000).unwrap();
    sync(&mut mc);
    // Keep the master from ending the lease past its deadline: under a write pause its lease
    // ends wait, as core's expiry does (docs/operations.md). A pause is in force once its
    // reply arrives, where a `DEBUG SLEEP` sent from another thread could reach the master
    // after the deadline on a busy machine (it did, about once in five runs).
    assert_eq!(
        cmd!(&mut mc, "CLIENT", "PAUSE", 4_000, "WRITE"),
        Ok(Value::Okay)
    );
    assert!(
        t0.elapsed() < Duration::from_millis(1_900),
        "test machine too slow for this check"
    );
    sleep(Duration::from_millis(2_500).saturating_sub(t0.elapsed()));
    assert!(
        exists(&mut rc, "k"),
        "replica removed a key on its own; only the master's DEL may do that"
    );
    if let Some(i) = info(&mut rc, "k") {
        assert_eq!(
            i.holder, None,
            "replica reports an ended lease as held: {i:?}"
        );
    }
    assert_eq!(cmd!(&mut mc, "CLIENT", "UNPAUSE"), Ok(Value::Okay));
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut rc, "k")),
        "master's removal did not reach the replica"
    );
}

#[test]
fn promoted_replica_continues_leases_and_fences() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let t0 = Instant::now();
    acquire(&mut mc, "k", "tok", 2_500).unwrap();
    let mut issued = vec![fence(&mut mc, "k", "tok").unwrap()];
    issued.push(acquire(&mut mc, "k2", "t2", 60_000).unwrap());
    issued.push(fence(&mut mc, "k2", "t2").unwrap());
    acquire(&mut mc, "gone", "g", 60_000).unwrap();
    issued.push(fence(&mut mc, "gone", "g").unwrap());
    assert_eq!(release(&mut mc, "gone", "g"), 1);
    sync(&mut mc);
    let max = *issued.iter().max().unwrap();
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    // Leases go on counting down.
    let a = info(&mut rc, "k").expect("lock on promoted replica").ttl;
    sleep(Duration::from_millis(300));
    let b = info(&mut rc, "k").expect("lock on promoted replica").ttl;
    assert!(
        b <= a - 250,
        "ttl on promoted replica: {a} then {b} 300ms later"
    );
    // New fences there are above all the master issued.
    let f = fence(&mut rc, "k2", "t2").unwrap();
    assert!(
        f > max,
        "fence {f} on promoted replica; master issued {issued:?}"
    );
    let n = acquire(&mut rc, "gone", "x", 10_000).unwrap();
    assert!(n > f);
    // And the lease ends there at its deadline.
    assert!(
        wait_until(Duration::from_secs(6), || !exists(&mut rc, "k")),
        "lease did not end on the promoted replica"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(2_450),
        "lease ended early on the promoted replica, after {:?}",
        t0.elapsed()
    );
    assert!(acquire(&mut rc, "k", "new", 1_000).unwrap() > n);
}

/// A release the master propagated removes the lock on the replica even when, by the
/// replica's clock, the lease has already ended (the replica was busy when the release
/// came): the replica must follow the master, or it would keep the key for ever.
#[test]
fn a_release_is_applied_on_a_replica_whose_clock_says_the_lease_ended() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    acquire(&mut mc, "k", "tok", 1500).unwrap();
    sync(&mut mc);
    // Stall the replica past the lease's end, and release on the master before it ends.
    let mut stalled = r.conn();
    let staller = std::thread::spawn(move || {
        let _ = cmd!(&mut stalled, "DEBUG", "SLEEP", "2.5");
    });
    sleep(Duration::from_millis(100));
    assert_eq!(release(&mut mc, "k", "tok"), 1);
    staller.join().unwrap();
    sync(&mut mc);
    assert!(!exists(&mut rc, "k"), "the replica kept a released lock");
}

/// A waiter granted by a release holds the lock on the replica too, under its fence: the
/// grant reaches the replica as the new holder's state, not as the release alone.
#[test]
fn a_grant_to_a_waiter_reaches_the_replica() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let first = acquire(&mut mc, "k", "first", 30_000).unwrap();
    let mut second = Waiter::join(&m, "k", "second", 30_000, 0);
    assert_eq!(release(&mut mc, "k", "first"), 1);
    let fence = second.reply().expect("the waiter is granted the lock");
    assert!(fence > first);
    sync(&mut mc);
    let on_replica = info(&mut rc, "k").expect("the key on the replica");
    assert_eq!(on_replica.holder.as_deref(), Some(&b"second"[..]), "holder");
    assert_eq!(on_replica.fence, fence, "fence");
    assert_mirrored(&mut mc, &mut rc, "k");
}
