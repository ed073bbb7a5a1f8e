//! `LOCK.GUARD key fence command [arg ...]` under the current fence (docs/commands.md,
//! `LOCK.GUARD`):
//! the inner command runs, and its reply, or its own error, is passed through unchanged, in
//! the caller's protocol.
//!
//! 1. Inner replies and inner errors pass through byte for byte, in RESP2 and RESP3; write
//!    replies as a client library decodes them; binary-safe arguments.
//! 2. Fences from `LOCK.FENCE` and from a grant to a waiter work; a renewal and `LOCK.EXTEND`
//!    keep the fence valid; release and lease end end it.

use crate::cmd;
use std::thread::sleep;
use std::time::Duration;

use crate::common::guard::*;
use crate::common::*;
use redis::{Connection, Value};

// ---------------------------------------------------------------------- replies and errors

/// Each read command's reply, and each inner error, is the same bytes through
/// `LOCK.GUARD` as sent plainly, in RESP2 and in RESP3.
#[test]
fn inner_replies_and_errors_pass_through_byte_for_byte() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "hello");
    cmd!(&mut con, "HSET", "h", "f1", "v1", "f2", "v2").unwrap();
    cmd!(&mut con, "RPUSH", "list", "a", "b", "c").unwrap();
    cmd!(&mut con, "ZADD", "z", 1.5, "m1", 2, "m2").unwrap();
    cmd!(&mut con, "SADD", "set", "x", "y").unwrap();
    cmd!(&mut con, "XADD", "s", "1-1", "f", "v").unwrap();
    let f = hold(&mut con, "lk");
    let fs = f.to_string();

    let reads: Vec<Vec<&str>> = vec![
        vec!["GET", "data"],
        vec!["GET", "missing"],
        vec!["HGETALL", "h"],
        vec!["HGET", "h", "nope"],
        vec!["LRANGE", "list", "0", "-1"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["ZSCORE", "z", "m1"],
        vec!["SMEMBERS", "set"],
        vec!["XRANGE", "s", "-", "+"],
        vec!["EXISTS", "data", "missing"],
        vec!["TYPE", "data"],
        vec!["STRLEN", "data"],
        vec!["PING"],
        // Inner errors (they change nothing).
        vec!["INCR", "list"],
        vec!["INCR", "data"],
        vec!["LPUSH", "data", "x"],
        vec!["HINCRBY", "h", "f1", "1"],
    ];
    let before = counters(&mut con);
    for proto in [2, 3] {
        let mut raw = s.raw();
        if proto == 3 {
            let hello = raw.call(&[b"HELLO", b"3"]);
            assert_eq!(
                hello[0],
                b'%',
                "HELLO 3: {}",
                String::from_utf8_lossy(&hello)
            );
        }
        for cmd in &reads {
            let plain: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
            let mut guarded: Vec<&[u8]> = vec![b"LOCK.GUARD", b"lk", fs.as_bytes()];
            guarded.extend_from_slice(&plain);
            let want = raw.call(&plain);
            let got = raw.call(&guarded);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "RESP{proto}: LOCK.GUARD lk <fence> {} differs from the plain reply",
                cmd.join(" ")
            );
        }
        // The protocol was the caller's: a map and a null of RESP3, or their RESP2 forms.
        let g = raw.call(&[b"LOCK.GUARD", b"lk", fs.as_bytes(), b"HGETALL", b"h"]);
        let n = raw.call(&[b"LOCK.GUARD", b"lk", fs.as_bytes(), b"GET", b"missing"]);
        if proto == 3 {
            assert_eq!(g[0], b'%', "RESP3 HGETALL: {}", String::from_utf8_lossy(&g));
            assert_eq!(n, b"_\r\n");
        } else {
            assert_eq!(g[0], b'*', "RESP2 HGETALL: {}", String::from_utf8_lossy(&g));
            assert_eq!(n, b"$-1\r\n");
        }
    }
    // Each ran, including those that replied with their own error.
    assert_counted(
        &mut con,
        before,
        2 * (reads.len() as i64 + 2),
        0,
        "guarded reads",
    );
}

/// Write commands' replies, as a client library decodes them, in RESP2 and RESP3; inner
/// errors are the inner command's own and change nothing.
#[test]
fn inner_write_replies_and_errors_in_resp2_and_resp3() {
    let s = Server::new();
    for (proto, mut con) in [(2, s.conn()), (3, s.conn3())] {
        let lk = format!("lk{proto}");
        let k = |name: &str| format!("{name}{proto}");
        let f = hold(&mut con, &lk);
        let g = |con: &mut Connection, inner: &[&str]| guard(con, &lk, f, inner);
        let p = format!("RESP{proto}");

        assert_eq!(
            g(&mut con, &["SET", &k("data"), "v1"]),
            Ok(Value::Okay),
            "{p} SET"
        );
        assert_eq!(g(&mut con, &["GET", &k("data")]), Ok(bulk("v1")), "{p} GET");
        assert_eq!(
            g(&mut con, &["SET", &k("data"), "v2", "GET"]),
            Ok(bulk("v1")),
            "{p} SET GET"
        );
        assert_eq!(
            g(&mut con, &["SET", &k("data"), "v3", "NX"]),
            Ok(Value::Nil),
            "{p} SET NX on an existing key"
        );
        assert_eq!(
            g(&mut con, &["GET", &k("nothing")]),
            Ok(Value::Nil),
            "{p} nil"
        );
        assert_eq!(
            g(&mut con, &["INCR", &k("n")]),
            Ok(Value::Int(1)),
            "{p} INCR"
        );
        assert_eq!(g(&mut con, &["INCRBY", &k("n"), "41"]), Ok(Value::Int(42)));
        assert_eq!(
            g(&mut con, &["RPUSH", &k("list"), "a", "b"]),
            Ok(Value::Int(2)),
            "{p} RPUSH"
        );
        assert_eq!(
            g(&mut con, &["LRANGE", &k("list"), "0", "-1"]),
            Ok(Value::Array(vec![bulk("a"), bulk("b")])),
            "{p} array"
        );
        assert_eq!(
            g(&mut con, &["TYPE", &k("list")]),
            Ok(Value::SimpleString("list".into())),
            "{p} status"
        );
        assert_eq!(
            g(&mut con, &["HSET", &k("h"), "f1", "v1", "f2", "v2"]),
            Ok(Value::Int(2))
        );
        let all = g(&mut con, &["HGETALL", &k("h")]).unwrap();
        let mut pairs: Vec<(String, String)> = match (&all, proto) {
            (Value::Map(m), 3) => m.iter().map(|(a, b)| (text(a), text(b))).collect(),
            (Value::Array(a), 2) => a.chunks(2).map(|c| (text(&c[0]), text(&c[1]))).collect(),
            other => panic!("{p} HGETALL: {other:?}"),
        };
        pairs.sort();
        assert_eq!(
            pairs,
            vec![("f1".into(), "v1".into()), ("f2".into(), "v2".into())],
            "{p} HGETALL"
        );

        // Binary-safe arguments and replies.
        let bin: Vec<u8> = vec![0, 255, b'\r', b'\n', b' ', 7];
        let r = cmd!(
            &mut con,
            "LOCK.GUARD",
            &lk,
            f,
            "SET",
            k("bin"),
            bin.as_slice()
        );
        assert_eq!(r, Ok(Value::Okay));
        assert_eq!(
            cmd!(&mut con, "LOCK.GUARD", &lk, f, "GET", k("bin")),
            Ok(Value::BulkString(bin.clone()))
        );

        // Inner errors: the inner command's own, unchanged, and nothing changed.
        let data_keys = [k("data"), k("list"), k("n")];
        let data_keys: Vec<&str> = data_keys.iter().map(String::as_str).collect();
        for (inner, plain_err) in [
            (vec!["INCR", &k("list")], "WRONGTYPE"),
            (vec!["INCR", &k("data")], "ERR"),
            (vec!["LPUSH", &k("data"), "x"], "WRONGTYPE"),
            (vec!["HINCRBY", &k("h"), "f1", "1"], "ERR"),
        ] {
            let plain = run_raw(&mut con, &args(&inner));
            let Err(plain) = plain else {
                panic!("{p} plain {inner:?}: {plain:?}")
            };
            assert!(plain.starts_with(plain_err), "{p} plain {inner:?}: {plain}");
            let before = world(&mut con, &lk, &data_keys);
            let r = g(&mut con, &inner);
            assert_eq!(
                r,
                Err(plain.clone()),
                "{p} LOCK.GUARD {inner:?}: the inner error"
            );
            // It ran (and replied with its own error): one run, no refusal; no change.
            assert_nothing_ran(&mut con, &before, 1, 0, &format!("{p} {inner:?}"));
        }
        assert_eq!(
            cmd!(&mut con, "LOCK.GUARD", &lk, f, "INCR", k("list")),
            Err(WRONGTYPE.to_string())
        );
        assert_eq!(
            cmd!(&mut con, "LOCK.GUARD", &lk, f, "INCR", k("data")),
            Err("ERR value is not an integer or out of range".to_string())
        );
    }
}

// ------------------------------------------------------------------------ fence lifecycle

/// The fence `LOCK.FENCE` issues works, the one before it no longer does; a retried
/// acquire (same fence) and `LOCK.EXTEND` keep it valid; after release and after the
/// lease ends nothing works.
#[test]
fn the_current_fence_follows_fence_extend_release_and_lease_end() {
    let s = Server::new();
    let mut con = s.conn();
    let f0 = hold(&mut con, "lk");
    assert_eq!(
        guard(&mut con, "lk", f0, &["SET", "data", "0"]),
        Ok(Value::Okay)
    );
    let f1 = fence(&mut con, "lk", HOLDER).unwrap();
    assert!(f1 > f0);
    assert_eq!(
        guard(&mut con, "lk", f1, &["SET", "data", "1"]),
        Ok(Value::Okay)
    );
    let before = world(&mut con, "lk", &["data"]);
    let r = guard(&mut con, "lk", f0, &["SET", "data", "stale"]);
    assert_refused(&mut con, &before, &r, NEWER, "the fence before LOCK.FENCE");

    assert_eq!(
        acquire(&mut con, "lk", HOLDER, TTL),
        Some(f1),
        "a renewal keeps the fence"
    );
    assert_eq!(
        guard(&mut con, "lk", f1, &["SET", "data", "2"]),
        Ok(Value::Okay)
    );
    assert_eq!(extend(&mut con, "lk", HOLDER, TTL), 1);
    assert_eq!(
        guard(&mut con, "lk", f1, &["SET", "data", "3"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "data"), bulk("3"));

    assert_eq!(release(&mut con, "lk", HOLDER), 1);
    let before = world(&mut con, "lk", &["data"]);
    let r = guard(&mut con, "lk", f1, &["SET", "data", "after-release"]);
    assert_refused(&mut con, &before, &r, NOT_HELD, "after LOCK.RELEASE");

    let f = acquire(&mut con, "short", HOLDER, 100).unwrap();
    assert_eq!(
        guard(&mut con, "short", f, &["SET", "data", "4"]),
        Ok(Value::Okay)
    );
    sleep(Duration::from_millis(180));
    let before = world(&mut con, "short", &["data"]);
    let r = guard(&mut con, "short", f, &["SET", "data", "after-lease"]);
    assert_refused(&mut con, &before, &r, NOT_HELD, "after the lease ended");
    assert_eq!(get(&mut con, "data"), bulk("4"));
}

/// A lock granted to a waiter: the waiter's fence works, the previous holder's does not.
#[test]
fn a_waiter_granted_the_lock_guards_with_its_fence() {
    let s = Server::new();
    let mut con = s.conn();
    let f0 = hold(&mut con, "lk");
    let mut w = Waiter::join(&s, "lk", "waiter", TTL, 5_000);
    assert_eq!(release(&mut con, "lk", HOLDER), 1);
    let fw = w.reply().expect("the waiter is granted on release");
    assert!(fw > f0);
    assert_eq!(
        guard(&mut con, "lk", fw, &["SET", "data", "w"]),
        Ok(Value::Okay)
    );
    let before = world(&mut con, "lk", &["data"]);
    let r = guard(&mut con, "lk", f0, &["SET", "data", "old"]);
    assert_refused(&mut con, &before, &r, NEWER, "the previous holder's fence");

    // Granted on a lease end too.
    let f0 = acquire(&mut con, "lk2", HOLDER, 100).unwrap();
    let mut w = Waiter::join(&s, "lk2", "waiter", TTL, 5_000);
    let fw = w.reply().expect("the waiter is granted at the lease end");
    assert!(fw > f0);
    assert_eq!(
        guard(&mut con, "lk2", fw, &["SET", "data2", "w"]),
        Ok(Value::Okay)
    );
    let before = world(&mut con, "lk2", &["data2"]);
    let r = guard(&mut con, "lk2", f0, &["SET", "data2", "old"]);
    assert_refused(&mut con, &before, &r, NEWER, "the fence whose lease ended");
}
