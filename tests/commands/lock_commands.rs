//! Each lock command's row of docs/commands.md, one section per command: what `LOCK.ACQUIRE`,
//! `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE` and `LOCK.INFO` do for the holder and for
//! anyone else, and how a lease ends on its own.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::*;
use crate::DEFAULT_MAX_TTL;
use redis::Value;

fn is_nil(r: &Result<Value, String>) -> bool {
    matches!(r, Ok(Value::Nil))
}

// ---------------------------------------------------------------- LOCK.ACQUIRE

#[test]
fn acquire_free_key_issues_fence_and_sets_holder() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "t1", 10_000).expect("free key must be granted");
    let i = info(&mut c, "k").expect("key must exist while held");
    assert_eq!(i.holder.as_deref(), Some(&b"t1"[..]));
    assert_eq!(i.fence, f);
    assert!(i.ttl > 9_800 && i.ttl <= 10_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
    assert!(exists(&mut c, "k"));
    // A lock is its own data type (the issue asks for a 9-character type name).
    let t = cmd!(&mut c, "TYPE", "k").unwrap();
    match t {
        Value::SimpleString(name) => {
            assert_ne!(name, "string");
            assert_ne!(name, "none");
            assert_eq!(name.len(), 9, "module type name {name:?}");
        }
        other => panic!("TYPE: {other:?}"),
    }
}

#[test]
fn acquire_held_by_other_returns_null_and_changes_nothing() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "t1", 10_000).unwrap();
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(acquire(&mut c, "k", "t2", 60_000), None);
    assert_eq!(acquire(&mut c, "k", "t2", 1), None);
    let after = info(&mut c, "k");
    assert_same_lock(&before, &after, t0.elapsed(), 100);
    assert_eq!(after.unwrap().fence, f);
}

#[test]
fn retried_acquire_returns_same_fence_and_renews_lease() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = Instant::now();
    let f = acquire(&mut c, "k", "t", 2_000).unwrap();
    sleep(Duration::from_millis(1_000));
    // Renew to 3000ms from now: the lease now ends ~4000ms after t0, past the original 2000.
    assert_eq!(acquire(&mut c, "k", "t", 3_000), Some(f));
    let i = info(&mut c, "k").unwrap();
    assert!(i.ttl > 2_800 && i.ttl <= 3_000, "renewed ttl {}", i.ttl);
    assert_eq!(i.fence, f);
    let wait = Duration::from_millis(2_500).saturating_sub(t0.elapsed());
    sleep(wait);
    let i = info(&mut c, "k").expect("renewed lease must outlive the original deadline");
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
    assert!(i.ttl > 0);
    // Renewing can also shorten the lease.
    assert_eq!(acquire(&mut c, "k", "t", 300), Some(f));
    let i = info(&mut c, "k").unwrap();
    assert!(i.ttl <= 300 && i.ttl > 100, "shortened ttl {}", i.ttl);
}

#[test]
fn acquire_accepts_ttl_bounds_and_wait_option_on_free_key() {
    let s = Server::new();
    let mut c = s.conn();
    assert!(acquire(&mut c, "a", "t", 1).is_some());
    assert!(acquire(&mut c, "b", "t", DEFAULT_MAX_TTL as u64).is_some());
    let i = info(&mut c, "b").unwrap();
    assert!(i.ttl > DEFAULT_MAX_TTL - 1_000, "ttl {}", i.ttl);
    // WAIT on a free key grants at once (case-insensitive option name, like Redis options).
    for (key, opt, timeout) in [
        ("w1", "WAIT", "100"),
        ("w2", "wait", "0"),
        ("w3", "Wait", "5"),
    ] {
        let r = cmd!(&mut c, "LOCK.ACQUIRE", key, "t", 5_000, opt, timeout);
        match r {
            Ok(Value::Int(f)) => assert!(f > 0),
            other => panic!("ACQUIRE {key} t 5000 {opt} {timeout}: {other:?}"),
        }
        assert_eq!(
            info(&mut c, key).unwrap().holder.as_deref(),
            Some(&b"t"[..])
        );
    }
}

#[test]
fn binary_and_max_length_tokens() {
    let s = Server::new();
    let mut c = s.conn();
    let bin: Vec<u8> = vec![0, 255, b'\r', b'\n', 1, 2, 0, b' '];
    let r = cmd!(&mut c, "LOCK.ACQUIRE", "k", bin.as_slice(), 10_000);
    assert!(matches!(r, Ok(Value::Int(_))), "binary token: {r:?}");
    assert_eq!(info(&mut c, "k").unwrap().holder, Some(bin.clone()));
    // A token differing only after a NUL byte is another token.
    let mut other = bin.clone();
    other[7] = b'x';
    assert!(is_nil(&cmd!(
        &mut c,
        "LOCK.ACQUIRE",
        "k",
        other.as_slice(),
        10_000
    )));
    assert_eq!(
        cmd!(&mut c, "LOCK.RELEASE", "k", other.as_slice()),
        Ok(Value::Int(0))
    );
    assert_eq!(
        cmd!(&mut c, "LOCK.RELEASE", "k", bin.as_slice()),
        Ok(Value::Int(1))
    );

    let long = "x".repeat(256);
    assert!(acquire(&mut c, "k2", &long, 10_000).is_some());
    assert_eq!(
        info(&mut c, "k2").unwrap().holder,
        Some(long.clone().into_bytes())
    );
    assert_eq!(extend(&mut c, "k2", &long, 20_000), 1);
    assert!(fence(&mut c, "k2", &long).is_some());
    assert_eq!(release(&mut c, "k2", &long), 1);
}

// ---------------------------------------------------------------- LOCK.RELEASE

#[test]
fn release_by_holder_removes_key() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "t", 10_000).unwrap();
    assert_eq!(release(&mut c, "k", "t"), 1);
    assert!(
        !exists(&mut c, "k"),
        "released lock with no waiters must be removed"
    );
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(release(&mut c, "k", "t"), 0, "second release");
    // Free again for anyone.
    assert!(acquire(&mut c, "k", "t2", 10_000).is_some());
}

#[test]
fn release_by_non_holder_returns_zero_and_changes_nothing() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(release(&mut c, "missing", "t"), 0);
    assert!(!exists(&mut c, "missing"), "RELEASE must not create a key");
    acquire(&mut c, "k", "t1", 10_000).unwrap();
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "t2"), 0);
    assert_eq!(release(&mut c, "k", "t1 "), 0);
    assert_eq!(release(&mut c, "k", "T1"), 0);
    assert_same_lock(&before, &info(&mut c, "k"), t0.elapsed(), 100);
}

// ---------------------------------------------------------------- LOCK.EXTEND

#[test]
fn extend_by_holder_sets_new_lease() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = Instant::now();
    let f = acquire(&mut c, "k", "t", 1_000).unwrap();
    assert_eq!(extend(&mut c, "k", "t", 5_000), 1);
    let i = info(&mut c, "k").unwrap();
    assert!(i.ttl > 4_800 && i.ttl <= 5_000, "extended ttl {}", i.ttl);
    assert_eq!(i.fence, f, "EXTEND issues no fence");
    sleep(Duration::from_millis(1_300).saturating_sub(t0.elapsed()));
    let i = info(&mut c, "k").expect("extended lease must outlive the original one");
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
    // Shorter is fine too.
    assert_eq!(extend(&mut c, "k", "t", 200), 1);
    let i = info(&mut c, "k").unwrap();
    assert!(i.ttl <= 200, "shortened ttl {}", i.ttl);
}

#[test]
fn extend_by_non_holder_returns_zero_and_never_acquires() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(extend(&mut c, "missing", "t", 1_000), 0);
    assert!(!exists(&mut c, "missing"), "EXTEND must not create a key");
    acquire(&mut c, "k", "t1", 10_000).unwrap();
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(extend(&mut c, "k", "t2", 60_000), 0);
    assert_same_lock(&before, &info(&mut c, "k"), t0.elapsed(), 100);
    // After the lease ended, the former holder cannot extend.
    acquire(&mut c, "short", "t", 100).unwrap();
    assert!(wait_until(Duration::from_secs(3), || !exists(
        &mut c, "short"
    )));
    assert_eq!(extend(&mut c, "short", "t", 10_000), 0);
    assert!(!exists(&mut c, "short"));
}

// ---------------------------------------------------------------- LOCK.FENCE

#[test]
fn fence_by_holder_issues_larger_fence_without_renewing() {
    let s = Server::new();
    let mut c = s.conn();
    let f1 = acquire(&mut c, "k", "t", 10_000).unwrap();
    sleep(Duration::from_millis(300));
    let f2 = fence(&mut c, "k", "t").unwrap();
    let f3 = fence(&mut c, "k", "t").unwrap();
    assert!(f2 > f1 && f3 > f2, "fences {f1} {f2} {f3}");
    let i = info(&mut c, "k").unwrap();
    assert_eq!(i.fence, f3, "INFO shows the last fence issued");
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
    assert!(
        i.ttl < 9_900,
        "FENCE must not renew the lease (ttl {})",
        i.ttl
    );
}

#[test]
fn fence_by_non_holder_returns_null_and_changes_nothing() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(fence(&mut c, "missing", "t"), None);
    assert!(!exists(&mut c, "missing"), "FENCE must not create a key");
    acquire(&mut c, "k", "t1", 10_000).unwrap();
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(fence(&mut c, "k", "t2"), None);
    assert_same_lock(&before, &info(&mut c, "k"), t0.elapsed(), 100);
}

// ---------------------------------------------------------------- LOCK.INFO / lease end

#[test]
fn info_missing_key_is_null() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(cmd!(&mut c, "LOCK.INFO", "nope"), Ok(Value::Nil));
    let mut c3 = s.conn3();
    assert_eq!(cmd!(&mut c3, "LOCK.INFO", "nope"), Ok(Value::Nil));
}

#[test]
fn info_ttl_counts_down() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "t", 10_000).unwrap();
    let a = info(&mut c, "k").unwrap().ttl;
    sleep(Duration::from_millis(300));
    let b = info(&mut c, "k").unwrap().ttl;
    assert!(
        b <= a - 250 && b >= a - 1_000,
        "ttl {a} then {b} after 300ms"
    );
}

#[test]
fn key_removed_at_lease_end() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = Instant::now();
    let f = acquire(&mut c, "k", "t", 300).unwrap();
    assert!(exists(&mut c, "k"));
    // Watch EXISTS only: removal must not depend on a LOCK.* command touching the key.
    assert!(
        wait_until(Duration::from_millis(2_300), || !exists(&mut c, "k")),
        "key still exists 2s after its lease ended"
    );
    let el = t0.elapsed();
    assert!(
        el >= Duration::from_millis(298),
        "lease ended early, after {el:?}"
    );
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(release(&mut c, "k", "t"), 0);
    assert_eq!(extend(&mut c, "k", "t", 1_000), 0);
    assert_eq!(fence(&mut c, "k", "t"), None);
    let f2 = acquire(&mut c, "k", "t2", 1_000).unwrap();
    assert!(f2 > f, "{f2} after {f}");
}

#[test]
fn ended_lease_is_free_for_another_token() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "t1", 200).unwrap();
    sleep(Duration::from_millis(260));
    // Whether or not the key was removed yet, the lease has ended.
    let f2 = acquire(&mut c, "k", "t2", 10_000).expect("ended lease must be free");
    assert!(f2 > f);
    assert_eq!(release(&mut c, "k", "t1"), 0);
    assert_eq!(
        info(&mut c, "k").unwrap().holder.as_deref(),
        Some(&b"t2"[..])
    );
}
