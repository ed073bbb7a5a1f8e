//! Every command row, reply shape and bad-input class of the README, against a real server.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

const DEFAULT_MAX_TTL: i64 = 86_400_000;

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

// ---------------------------------------------------------------- RESP2 / RESP3 shapes

#[test]
fn info_reply_shapes_resp2_and_resp3() {
    let s = Server::new();
    let mut c2 = s.conn();
    let mut c3 = s.conn3();
    let f = acquire(&mut c2, "k", "tok", 10_000).unwrap();

    let v2 = cmd!(&mut c2, "LOCK.INFO", "k").unwrap();
    match &v2 {
        Value::Array(items) => {
            assert_eq!(items.len(), 12);
            let names: Vec<_> = items
                .iter()
                .step_by(2)
                .map(|v| match v {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("RESP2 field names must be bulk strings: {other:?}"),
                })
                .collect();
            assert_eq!(
                names,
                ["holder", "fence", "ttl", "waiters", "mode", "holders"]
            );
        }
        other => panic!("RESP2 LOCK.INFO must be a flat array, got {other:?}"),
    }
    let v3 = cmd!(&mut c3, "LOCK.INFO", "k").unwrap();
    assert!(
        matches!(v3, Value::Map(_)),
        "RESP3 LOCK.INFO must be a map, got {v3:?}"
    );
    let (i2, i3) = (parse_info(&v2).unwrap(), parse_info(&v3).unwrap());
    assert_eq!(i2.holder.as_deref(), Some(&b"tok"[..]));
    assert_eq!(i3.holder, i2.holder);
    assert_eq!((i2.fence, i3.fence), (f, f));
    assert_eq!((i2.waiters, i3.waiters), (0, 0));
    assert!((i2.ttl - i3.ttl).abs() < 100);

    // Other replies under RESP3.
    assert_eq!(
        cmd!(&mut c3, "LOCK.ACQUIRE", "k", "tok", 10_000),
        Ok(Value::Int(f))
    );
    assert_eq!(
        cmd!(&mut c3, "LOCK.ACQUIRE", "k", "x", 10_000),
        Ok(Value::Nil)
    );
    assert_eq!(cmd!(&mut c3, "LOCK.FENCE", "k", "x"), Ok(Value::Nil));
    assert_eq!(
        cmd!(&mut c3, "LOCK.EXTEND", "k", "x", 10),
        Ok(Value::Int(0))
    );
    assert_eq!(
        cmd!(&mut c3, "LOCK.EXTEND", "k", "tok", 10_000),
        Ok(Value::Int(1))
    );
    assert_eq!(cmd!(&mut c3, "LOCK.RELEASE", "k", "tok"), Ok(Value::Int(1)));
}

/// Byte-exact null replies: `$-1`/`*-1` under RESP2, `_` under RESP3.
#[test]
fn null_replies_on_the_wire() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "held", "owner", 60_000).unwrap();
    let mut raw = s.raw();
    let resp2_null = |r: &[u8]| r == b"$-1\r\n" || r == b"*-1\r\n";
    let r = raw.call(&[b"LOCK.INFO", b"missing"]);
    assert!(
        resp2_null(&r),
        "RESP2 LOCK.INFO missing: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.ACQUIRE", b"held", b"other", b"1000"]);
    assert!(
        resp2_null(&r),
        "RESP2 ACQUIRE held: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.FENCE", b"held", b"other"]);
    assert!(
        resp2_null(&r),
        "RESP2 FENCE: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.INFO", b"held"]);
    assert!(
        r.starts_with(b"*12\r\n"),
        "RESP2 INFO: {:?}",
        String::from_utf8_lossy(&r)
    );

    let hello = raw.call(&[b"HELLO", b"3"]);
    assert!(
        hello.starts_with(b"%"),
        "HELLO 3: {:?}",
        String::from_utf8_lossy(&hello)
    );
    assert_eq!(raw.call(&[b"LOCK.INFO", b"missing"]), b"_\r\n");
    assert_eq!(
        raw.call(&[b"LOCK.ACQUIRE", b"held", b"other", b"1000"]),
        b"_\r\n"
    );
    assert_eq!(raw.call(&[b"LOCK.FENCE", b"held", b"other"]), b"_\r\n");
    let r = raw.call(&[b"LOCK.INFO", b"held"]);
    assert!(
        r.starts_with(b"%6\r\n"),
        "RESP3 INFO: {:?}",
        String::from_utf8_lossy(&r)
    );
    assert_eq!(raw.call(&[b"LOCK.RELEASE", b"held", b"other"]), b":0\r\n");
}

/// `LOCK.INFO`'s whole reply on the wire, exclusive and shared, in RESP2 and RESP3: field
/// names and the mode are bulk strings (as `HGETALL` replies), the shared lock's holder a
/// null, numbers integers; only the ttl moves between two calls.
#[test]
fn info_reply_on_the_wire() {
    let s = Server::new();
    let mut c = s.conn();
    let fe = acquire(&mut c, "ex", "owner", 60_000).unwrap();
    let fs = match cmd!(&mut c, "LOCK.ACQUIRE", "sh", "r1", 60_000, "SHARED") {
        Ok(Value::Int(f)) => f,
        other => panic!("shared acquire: {other:?}"),
    };
    let bulk = |t: &str| format!("${}\r\n{t}\r\n", t.len());
    let fields = |holder: &str, fence: i64, mode: &str| {
        [
            bulk("holder"),
            holder.to_string(),
            bulk("fence"),
            format!(":{fence}\r\n"),
            bulk("ttl"),
            "TTL".to_string(),
            bulk("waiters"),
            ":0\r\n".to_string(),
            bulk("mode"),
            bulk(mode),
            bulk("holders"),
            ":1\r\n".to_string(),
        ]
        .concat()
    };
    // The ttl, somewhere in the last minute, as `TTL`.
    let masked = |r: Vec<u8>| -> String {
        let r = String::from_utf8(r).expect("UTF-8 reply");
        let at = r.find("$3\r\nttl\r\n:").expect("a ttl field") + 10;
        let end = at + r[at..].find("\r\n").expect("the ttl's end") + 2;
        let ttl: i64 = r[at..end - 2].parse().expect("an integer ttl");
        assert!((59_000..=60_000).contains(&ttl), "ttl {ttl} in {r:?}");
        format!("{}TTL{}", &r[..at - 1], &r[end..])
    };
    let mut raw = s.raw();
    for (head, null) in [("*12\r\n", "$-1\r\n"), ("%6\r\n", "_\r\n")] {
        if head.starts_with('%') {
            assert!(raw.call(&[b"HELLO", b"3"]).starts_with(b"%"));
        }
        assert_eq!(
            masked(raw.call(&[b"LOCK.INFO", b"ex"])),
            format!("{head}{}", fields(&bulk("owner"), fe, "exclusive")),
            "exclusive, {head:?}"
        );
        assert_eq!(
            masked(raw.call(&[b"LOCK.INFO", b"sh"])),
            format!("{head}{}", fields(null, fs, "shared")),
            "shared, {head:?}"
        );
    }
}

// ---------------------------------------------------------------- WRONGTYPE

#[test]
fn wrongtype_on_string_key_for_every_command() {
    let s = Server::new();
    let mut c = s.conn();
    cmd!(&mut c, "SET", "str", "v").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", "str", "t", "1000"],
        vec!["LOCK.ACQUIRE", "str", "t", "1000", "WAIT", "10"],
        vec!["LOCK.RELEASE", "str", "t"],
        vec!["LOCK.EXTEND", "str", "t", "1000"],
        vec!["LOCK.FENCE", "str", "t"],
        vec!["LOCK.INFO", "str"],
    ];
    for args in cases {
        let raw: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let r = run_raw(&mut c, &raw);
        assert_err_starts(&r, "WRONGTYPE");
        assert_eq!(
            cmd!(&mut c, "GET", "str"),
            Ok(Value::BulkString(b"v".to_vec()))
        );
    }
    // And the other way round: string commands on a lock key.
    acquire(&mut c, "k", "t", 10_000).unwrap();
    assert_err_starts(&cmd!(&mut c, "GET", "k"), "WRONGTYPE");
    assert_err_starts(&cmd!(&mut c, "LPUSH", "k", "x"), "WRONGTYPE");
}

// ---------------------------------------------------------------- bad input

/// A held lock and a missing key; runs `args`, expects an error starting with `prefix`,
/// and checks nothing changed.
fn expect_error_changes_nothing(
    c: &mut redis::Connection,
    args: &[&[u8]],
    prefix: &str,
    mentions: Option<&str>,
) {
    let before = info(c, "held");
    let t0 = Instant::now();
    let raw: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    let r = run_raw(c, &raw);
    let shown: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).chars().take(20).collect())
        .collect();
    match &r {
        Err(e) => {
            assert!(
                e.starts_with(prefix),
                "{shown:?}: expected {prefix:?}..., got {e:?}"
            );
            if let Some(m) = mentions {
                assert!(e.contains(m), "{shown:?}: error {e:?} should name {m:?}");
            }
        }
        Ok(v) => panic!("{shown:?}: expected an error, got {v:?}"),
    }
    assert_same_lock(&before, &info(c, "held"), t0.elapsed(), 100);
    assert!(!exists(c, "free"), "{shown:?} created key 'free'");
}

fn bad_input_server() -> (Server, redis::Connection) {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "held", "owner", 60_000).unwrap();
    (s, c)
}

#[test]
fn bad_ttl_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let not_int: [&[u8]; 9] = [
        b"abc",
        b"1.5",
        b"",
        b"10a",
        b" 10",
        b"1e3",
        b"99999999999999999999999",
        b"0x10",
        b"\xff",
    ];
    for key in ["held", "free"] {
        for tok in ["owner", "other"] {
            let key_tok = key;
            for ttl in not_int {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    "ERR ttl is not an integer or out of range",
                    None,
                );
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.EXTEND", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    "ERR ttl is not an integer or out of range",
                    None,
                );
            }
            for ttl in [
                &b"0"[..],
                b"-1",
                b"-86400000",
                b"86400001",
                b"9223372036854775807",
                b"-9223372036854775808",
            ] {
                let want =
                    format!("ERR ttl must be between 1 and {DEFAULT_MAX_TTL} (lock.max-ttl)");
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    &want,
                    None,
                );
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.EXTEND", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    &want,
                    None,
                );
            }
        }
    }
}

#[test]
fn bad_timeout_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    for key in [&b"held"[..], b"free"] {
        for tok in [&b"owner"[..], b"other"] {
            for t in [&b"abc"[..], b"", b"1.5", b"99999999999999999999", b"5x"] {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", t],
                    "ERR timeout is not an integer or out of range",
                    None,
                );
            }
            for t in [&b"-1"[..], b"-100000", b"-9223372036854775808"] {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", t],
                    "ERR timeout must not be negative",
                    None,
                );
            }
        }
    }
}

#[test]
fn bad_token_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let long257 = vec![b'a'; 257];
    let long300 = vec![b'o'; 300];
    for key in [&b"held"[..], b"free"] {
        for tok in [&b""[..], &long257, &long300] {
            let cases: [Vec<&[u8]>; 5] = [
                vec![b"LOCK.ACQUIRE", key, tok, b"1000"],
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", b"10"],
                vec![b"LOCK.RELEASE", key, tok],
                vec![b"LOCK.EXTEND", key, tok, b"1000"],
                vec![b"LOCK.FENCE", key, tok],
            ];
            for args in cases {
                expect_error_changes_nothing(
                    &mut c,
                    &args,
                    "ERR token must be 1 to 256 bytes",
                    None,
                );
            }
        }
    }
}

#[test]
fn bad_options_are_syntax_errors_and_change_nothing() {
    let (_s, mut c) = bad_input_server();
    for key in [&b"held"[..], b"free"] {
        for tok in [&b"owner"[..], b"other"] {
            let cases: [Vec<&[u8]>; 6] = [
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"FOO", b"1"],
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"NX", b"PX"],
                vec![
                    b"LOCK.ACQUIRE",
                    key,
                    tok,
                    b"1000",
                    b"WAIT",
                    b"10",
                    b"WAIT",
                    b"10",
                ],
                vec![
                    b"LOCK.ACQUIRE",
                    key,
                    tok,
                    b"1000",
                    b"WAIT",
                    b"10",
                    b"wait",
                    b"20",
                ],
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", b"10", b"EXTRA"],
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"", b""],
            ];
            for args in cases {
                expect_error_changes_nothing(&mut c, &args, "ERR syntax error", None);
            }
            // An option without its value: an error (syntax), never a grant.
            expect_error_changes_nothing(
                &mut c,
                &[b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT"],
                "ERR",
                None,
            );
        }
    }
}

#[test]
fn wrong_arity_gets_the_standard_error_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"LOCK.ACQUIRE"], "lock.acquire"),
        (vec![b"LOCK.ACQUIRE", b"held"], "lock.acquire"),
        (vec![b"LOCK.ACQUIRE", b"free", b"t"], "lock.acquire"),
        (vec![b"lock.acquire", b"free", b"t"], "lock.acquire"),
        (vec![b"LOCK.RELEASE", b"held"], "lock.release"),
        (
            vec![b"LOCK.RELEASE", b"held", b"owner", b"x"],
            "lock.release",
        ),
        (vec![b"LOCK.EXTEND", b"held", b"owner"], "lock.extend"),
        (
            vec![b"LOCK.EXTEND", b"held", b"owner", b"1000", b"x"],
            "lock.extend",
        ),
        (vec![b"LOCK.FENCE", b"held"], "lock.fence"),
        (vec![b"LOCK.FENCE", b"held", b"owner", b"x"], "lock.fence"),
        (vec![b"LOCK.INFO"], "lock.info"),
        (vec![b"LOCK.INFO", b"held", b"x"], "lock.info"),
    ];
    for (args, name) in cases {
        let before = info(&mut c, "held");
        let t0 = Instant::now();
        let raw: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let r = run_raw(&mut c, &raw);
        match &r {
            Err(e) => {
                let l = e.to_lowercase();
                assert!(
                    l.starts_with("err wrong number of arguments for '") && l.contains(name),
                    "{name}: expected the standard arity error, got {e:?}"
                );
            }
            Ok(v) => panic!(
                "{name} with {} args: expected an arity error, got {v:?}",
                args.len()
            ),
        }
        assert_same_lock(&before, &info(&mut c, "held"), t0.elapsed(), 100);
        assert!(!exists(&mut c, "free"));
    }
}

// ---------------------------------------------------------------- configuration

#[test]
fn config_max_ttl_get_set() {
    let s = Server::new();
    let mut c = s.conn();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "86400000"]);
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", 5_000),
        Ok(Value::Okay)
    );
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    let want = "ERR ttl must be between 1 and 5000 (lock.max-ttl)";
    let r = cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 5_001);
    assert_eq!(r, Err(want.to_string()));
    assert!(!exists(&mut c, "k"));
    assert!(acquire(&mut c, "k", "t", 5_000).is_some());
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut c, "LOCK.EXTEND", "k", "t", 5_001),
        Err(want.to_string())
    );
    assert_eq!(
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 86_400_000),
        Err(want.to_string())
    );
    assert_same_lock(&before, &info(&mut c, "k"), t0.elapsed(), 100);
    // Invalid values are refused and leave the setting alone.
    for bad in ["abc", "-5", ""] {
        assert_err_starts(&cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", bad), "ERR");
    }
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    // Raising it again.
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", 100_000),
        Ok(Value::Okay)
    );
    assert_eq!(extend(&mut c, "k", "t", 100_000), 1);
}

#[test]
fn config_max_ttl_load_time_argument() {
    let s = Server::start(Opts::new().module_args(&["max-ttl", "5000"]));
    let mut c = s.conn();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    assert_eq!(
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 5_001),
        Err("ERR ttl must be between 1 and 5000 (lock.max-ttl)".to_string())
    );
    assert!(!exists(&mut c, "k"));
    assert!(acquire(&mut c, "k", "t", 5_000).is_some());
}

// ---------------------------------------------------------------- server integration

/// `LOCK.APPLY` is what a replica or an AOF load replays; from a client it is refused by its
/// origin alone. Every vector sent here is well formed (a token, a deadline a minute ahead,
/// a valid fence above the lock's), so that `LOCK.APPLY` replayed from the master link would
/// create or overwrite the lock: only the origin check stands between it and the lock.
#[test]
fn lock_apply_is_refused_from_a_normal_client() {
    const REFUSED: &str =
        "ERR LOCK.APPLY is internal: only the master link and the AOF may send it";
    let s = Server::new();
    let mut c = s.conn();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let deadline = now_ms + 60_000;
    let r = cmd!(&mut c, "LOCK.APPLY", "free", "t", deadline, 12_345);
    assert_eq!(r, Err(REFUSED.to_string()), "LOCK.APPLY on a free key");
    assert!(
        !exists(&mut c, "free"),
        "LOCK.APPLY from a client created a key"
    );

    // A held lock: an accepted APPLY would hand it to "intruder" with a new fence and lease.
    acquire(&mut c, "held", "owner", 30_000).unwrap();
    let before = info(&mut c, "held");
    let fence = before.as_ref().unwrap().fence;
    let t0 = Instant::now();
    let r = cmd!(
        &mut c,
        "LOCK.APPLY",
        "held",
        "intruder",
        deadline,
        fence + 1
    );
    assert_eq!(r, Err(REFUSED.to_string()), "LOCK.APPLY on a held key");
    let after = info(&mut c, "held");
    assert_eq!(
        after.as_ref().and_then(|i| i.holder.as_deref()),
        Some(&b"owner"[..]),
        "the refused APPLY changed the holder: {after:?}"
    );
    assert_same_lock(&before, &after, t0.elapsed(), 100);
    assert!(
        after.as_ref().unwrap().ttl <= 30_000,
        "the refused APPLY's 60 s deadline was taken: {after:?}"
    );

    // Not from MULTI either: EXEC runs it, and it is refused there alike (read as raw
    // bytes: the client library turns an error inside EXEC into an error for all of it).
    let mut raw = s.raw();
    assert_eq!(raw.call(&[b"MULTI"]), b"+OK\r\n");
    let (deadline, next) = (deadline.to_string(), (fence + 2).to_string());
    let queued = raw.call(&[
        b"LOCK.APPLY",
        b"held",
        b"intruder",
        deadline.as_bytes(),
        next.as_bytes(),
    ]);
    assert_eq!(queued, b"+QUEUED\r\n");
    assert_eq!(raw.call(&[b"LOCK.INFO", b"held"]), b"+QUEUED\r\n");
    let exec = String::from_utf8_lossy(&raw.call(&[b"EXEC"])).into_owned();
    let refused = format!("*2\r\n-{REFUSED}\r\n");
    assert!(
        exec.starts_with(&refused),
        "EXEC must refuse LOCK.APPLY: {exec:?}"
    );
    // Within the transaction too, the lock was still the owner's, under its fence.
    let inside = &exec[refused.len()..];
    assert!(
        inside.starts_with("*12\r\n$6\r\nholder\r\n$5\r\nowner\r\n$5\r\nfence\r\n")
            && inside.contains(&format!(":{fence}\r\n")),
        "LOCK.INFO inside EXEC: {inside:?}"
    );
    assert_same_lock(&before, &info(&mut c, "held"), t0.elapsed(), 100);
    assert_eq!(release(&mut c, "held", "owner"), 1, "owner still holds it");
}

#[test]
fn multi_exec_with_lock_commands() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(cmd!(&mut c, "MULTI"), Ok(Value::Okay));
    for r in [
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 10_000),
        cmd!(&mut c, "LOCK.FENCE", "k", "t"),
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "other", 10_000),
        cmd!(&mut c, "LOCK.ACQUIRE", "k2", "t", 10_000, "WAIT", 100),
        cmd!(&mut c, "LOCK.INFO", "k"),
    ] {
        assert_eq!(r, Ok(Value::SimpleString("QUEUED".into())));
    }
    let v = cmd!(&mut c, "EXEC").unwrap();
    let items = match v {
        Value::Array(items) => items,
        other => panic!("EXEC: {other:?}"),
    };
    assert_eq!(items.len(), 5, "{items:?}");
    let f1 = match items[0] {
        Value::Int(f) => f,
        ref o => panic!("ACQUIRE in MULTI: {o:?}"),
    };
    let f2 = match items[1] {
        Value::Int(f) => f,
        ref o => panic!("FENCE in MULTI: {o:?}"),
    };
    assert!(f2 > f1);
    assert_eq!(items[2], Value::Nil);
    assert!(matches!(items[3], Value::Int(_)), "{:?}", items[3]);
    let i = parse_info(&items[4]).unwrap();
    assert_eq!(i.fence, f2);
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
    // Errors inside EXEC are reported per command and change nothing (raw socket: the
    // client library would turn the whole EXEC reply into its first error).
    let mut raw = s.raw();
    assert_eq!(raw.call(&[b"MULTI"]), b"+OK\r\n");
    assert_eq!(
        raw.call(&[b"LOCK.EXTEND", b"k", b"t", b"nope"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(raw.call(&[b"LOCK.FENCE", b"k", b"t",]), b"+QUEUED\r\n");
    let r = raw.call(&[b"EXEC"]);
    let text = String::from_utf8_lossy(&r).into_owned();
    assert!(
        text.starts_with("*2\r\n-ERR ttl is not an integer or out of range\r\n:"),
        "EXEC with a bad argument: {text:?}"
    );
    let i = info(&mut c, "k").unwrap();
    assert!(i.fence > f2, "the command after the failed one ran");
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
}

fn watch_then_exec(
    s: &Server,
    setup: impl FnOnce(&mut redis::Connection),
    other: impl FnOnce(&mut redis::Connection),
) -> Value {
    let mut a = s.conn();
    let mut b = s.conn();
    setup(&mut b);
    assert_eq!(cmd!(&mut a, "WATCH", "k"), Ok(Value::Okay));
    other(&mut b);
    assert_eq!(cmd!(&mut a, "MULTI"), Ok(Value::Okay));
    let _ = cmd!(&mut a, "SET", "marker", "1");
    cmd!(&mut a, "EXEC").unwrap()
}

#[test]
fn watch_sees_lock_changes() {
    let s = Server::new();
    // Control: nothing touches the key, EXEC runs.
    let v = watch_then_exec(&s, |_| {}, |_| {});
    assert!(matches!(v, Value::Array(_)), "unmodified WATCH: {v:?}");
    let v = watch_then_exec(
        &s,
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
        |_| {},
    );
    assert!(
        matches!(v, Value::Array(_)),
        "unmodified WATCH on lock key: {v:?}"
    );

    let mut c = s.conn();
    release(&mut c, "k", "t");
    // Acquire by another client aborts EXEC.
    let v = watch_then_exec(
        &s,
        |_| {},
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched key was acquired");
    // Release.
    let v = watch_then_exec(&s, |_| {}, |b| assert_eq!(release(b, "k", "t"), 1));
    assert_eq!(v, Value::Nil, "EXEC after a watched key was released");
    // Extend and fence.
    let v = watch_then_exec(
        &s,
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
        |b| assert_eq!(extend(b, "k", "t", 20_000), 1),
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched key was extended");
    let v = watch_then_exec(&s, |_| {}, |b| assert!(fence(b, "k", "t").is_some()));
    assert_eq!(v, Value::Nil, "EXEC after a watched key got a new fence");
    // Lease end.
    let v = watch_then_exec(
        &s,
        |b| {
            assert_eq!(release(b, "k", "t"), 1);
            acquire(b, "k", "t", 150).unwrap();
        },
        |b| assert!(wait_until(Duration::from_secs(3), || !exists(b, "k"))),
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched lock's lease ended");
}

#[test]
fn command_info_flags_and_key_positions() {
    let s = Server::new();
    let mut c = s.conn();
    // Flags by core counterpart: only the command that allocates refuses on a full server
    // (like SET); releasing, extending and fencing work there, as DEL and EXPIRE do.
    let with_oom: &[&str] = &["write", "denyoom", "fast"];
    let without_oom: &[&str] = &["write", "fast"];
    let cases = [
        ("lock.acquire", with_oom, true),
        ("lock.release", without_oom, false),
        ("lock.extend", without_oom, false),
        ("lock.fence", without_oom, false),
        ("lock.info", &["readonly", "fast"][..], false),
        // Not denyoom: the guarded command's own flag decides (README, LOCK.GUARD).
        ("lock.guard", &["write", "movablekeys"][..], false),
        // O(holders): not fast.
        ("lock.holders", &["readonly"][..], false),
    ];
    for (name, want, denyoom) in cases {
        let v = cmd!(&mut c, "COMMAND", "INFO", name).unwrap();
        let entry = match v {
            Value::Array(mut items) if items.len() == 1 => items.remove(0),
            other => panic!("COMMAND INFO {name}: {other:?}"),
        };
        let fields = match entry {
            Value::Array(f) => f,
            other => panic!("COMMAND INFO {name}: {other:?}"),
        };
        let flags: Vec<String> = match &fields[2] {
            Value::Array(fl) => fl
                .iter()
                .map(|f| match f {
                    Value::SimpleString(s) => s.clone(),
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    o => panic!("flag {o:?}"),
                })
                .collect(),
            other => panic!("{name} flags: {other:?}"),
        };
        assert_eq!(
            flags.iter().any(|f| f == "denyoom"),
            denyoom,
            "{name} flags {flags:?}: denyoom"
        );
        for w in want {
            assert!(
                flags.iter().any(|f| f == w),
                "{name} flags {flags:?} lack {w}"
            );
        }
        assert_eq!(
            (&fields[3], &fields[4], &fields[5]),
            (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
            "{name} first/last/step"
        );
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.ACQUIRE")
        .arg("thekey")
        .arg("t")
        .arg(100)
        .arg("WAIT")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["thekey"]);
    // MODULE LIST shows the module as `lock`.
    let v = cmd!(&mut c, "MODULE", "LIST").unwrap();
    assert!(format!("{v:?}").contains("\"lock\""), "MODULE LIST: {v:?}");
}

/// README, observability: "`COMMAND INFO` / `COMMAND DOCS` describe them".
#[test]
fn command_info_arity_and_command_docs() {
    let s = Server::new();
    let mut c = s.conn();
    let mut problems = Vec::new();
    for (name, arity) in [
        ("lock.acquire", -4),
        ("lock.release", 3),
        ("lock.extend", 4),
        ("lock.fence", 3),
        ("lock.info", 2),
        ("lock.guard", -4),
        ("lock.holders", 2),
    ] {
        match cmd!(&mut c, "COMMAND", "INFO", name) {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::Array(f)) if f.get(1) == Some(&Value::Int(arity)) => {}
                Some(Value::Array(f)) => problems.push(format!(
                    "{name}: COMMAND INFO arity {:?}, want {arity}",
                    f[1]
                )),
                other => problems.push(format!("{name}: COMMAND INFO {other:?}")),
            },
            other => problems.push(format!("{name}: COMMAND INFO {other:?}")),
        }
        let docs = format!("{:?}", cmd!(&mut c, "COMMAND", "DOCS", name));
        for field in ["summary", "arguments"] {
            if !docs.contains(&format!("\"{field}\"")) {
                problems.push(format!("{name}: COMMAND DOCS has no {field}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------- keyspace operations

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
