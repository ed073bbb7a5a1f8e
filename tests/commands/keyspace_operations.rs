//! Core keyspace commands on lock keys (`COPY`, `RENAME`, `MOVE`, `SWAPDB`, `DEL`,
//! `FLUSHALL`): a lock keeps its lease wherever it goes, and a stale deadline never ends a
//! newer lock.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::*;
use redis::Value;

#[test]
fn copy_duplicates_the_lock_and_both_leases_end() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "tok", 600).unwrap();
    assert_eq!(cmd!(&mut c, "COPY", "k", "k2"), Ok(Value::Int(1)));
    let (a, b) = (info(&mut c, "k").unwrap(), info(&mut c, "k2").unwrap());
    assert_eq!(a.holder, b.holder);
    assert_eq!(b.fence, f);
    assert!(
        (a.ttl - b.ttl).abs() < 100,
        "ttl {} vs copy {}",
        a.ttl,
        b.ttl
    );
    match cmd!(&mut c, "MEMORY", "USAGE", "k2") {
        Ok(Value::Int(n)) => assert!(n > 0),
        other => panic!("MEMORY USAGE: {other:?}"),
    }
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "k")
            && !exists(&mut c, "k2")),
        "k exists: {}, its copy exists: {}",
        exists(&mut c, "k"),
        exists(&mut c, "k2")
    );
    assert!(acquire(&mut c, "k2", "x", 1_000).unwrap() > f);
}

#[test]
fn renamed_lock_still_ends_on_time() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = Instant::now();
    let f = acquire(&mut c, "k", "tok", 400).unwrap();
    assert_eq!(cmd!(&mut c, "RENAME", "k", "k2"), Ok(Value::Okay));
    let i = info(&mut c, "k2").expect("renamed lock");
    assert_eq!((i.holder.as_deref(), i.fence), (Some(&b"tok"[..]), f));
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "k2")),
        "renamed lock never removed"
    );
    assert!(t0.elapsed() >= Duration::from_millis(395), "removed early");
    // A lock renamed onto the old name's place is not ended by the old name's deadline.
    acquire(&mut c, "a", "tok", 300).unwrap();
    acquire(&mut c, "b", "tok", 60_000).unwrap();
    assert_eq!(cmd!(&mut c, "RENAME", "b", "a"), Ok(Value::Okay));
    sleep(Duration::from_millis(700));
    assert_eq!(
        info(&mut c, "a").map(|i| i.holder),
        Some(Some(b"tok".to_vec()))
    );
    assert!(info(&mut c, "a").unwrap().ttl > 50_000);
}

#[test]
fn moved_lock_still_ends_on_time() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 400).unwrap();
    assert_eq!(cmd!(&mut c, "MOVE", "k", 1), Ok(Value::Int(1)));
    let mut c1 = s.conn();
    assert_eq!(cmd!(&mut c1, "SELECT", 1), Ok(Value::Okay));
    assert!(info(&mut c1, "k").is_some());
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c1, "k")),
        "moved lock never removed"
    );
}

#[test]
fn swapdb_leases_follow_their_locks() {
    let s = Server::new();
    let mut c0 = s.conn();
    let mut c1 = s.conn();
    assert_eq!(cmd!(&mut c1, "SELECT", 1), Ok(Value::Okay));
    acquire(&mut c0, "k", "short", 400).unwrap();
    acquire(&mut c1, "k", "long", 60_000).unwrap();
    assert_eq!(cmd!(&mut c0, "SWAPDB", 0, 1), Ok(Value::Okay));
    assert_eq!(
        info(&mut c0, "k").unwrap().holder.as_deref(),
        Some(&b"long"[..])
    );
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c1, "k")),
        "short lease (now in db 1) never removed"
    );
    let i = info(&mut c0, "k").expect("long lease (now in db 0) was removed");
    assert_eq!(i.holder.as_deref(), Some(&b"long"[..]));
}

#[test]
fn stale_lease_ends_do_not_touch_a_newer_lock() {
    let s = Server::new();
    let mut c = s.conn();
    // Released, deleted, flushed: each leaves a 300ms deadline behind.
    acquire(&mut c, "r", "old", 300).unwrap();
    assert_eq!(release(&mut c, "r", "old"), 1);
    acquire(&mut c, "r", "new", 60_000).unwrap();
    acquire(&mut c, "d", "old", 300).unwrap();
    cmd!(&mut c, "DEL", "d").unwrap();
    acquire(&mut c, "d", "new", 60_000).unwrap();
    acquire(&mut c, "x", "old", 300).unwrap();
    assert_eq!(extend(&mut c, "x", "old", 60_000), 1);
    sleep(Duration::from_millis(800));
    for k in ["r", "d"] {
        let i = info(&mut c, k).unwrap_or_else(|| panic!("{k}: newer lock removed"));
        assert_eq!(i.holder.as_deref(), Some(&b"new"[..]), "{k}");
    }
    assert_eq!(
        info(&mut c, "x").unwrap().holder.as_deref(),
        Some(&b"old"[..])
    );
    cmd!(&mut c, "FLUSHALL").unwrap();
    acquire(&mut c, "f", "old", 300).unwrap();
    cmd!(&mut c, "FLUSHALL").unwrap();
    acquire(&mut c, "f", "new", 60_000).unwrap();
    sleep(Duration::from_millis(600));
    assert_eq!(
        info(&mut c, "f").unwrap().holder.as_deref(),
        Some(&b"new"[..])
    );
}
