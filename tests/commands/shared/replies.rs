//! The `LOCK.INFO` and `LOCK.HOLDERS` replies in RESP2 and RESP3, and `LOCK.HOLDERS`'s arity,
//! wrong type and `COMMAND INFO`.

use crate::cmd;
use crate::common;
use crate::common::holds::{acquire_with, bulk, tokens, Pending};
use crate::common::Server;
use crate::shared::{exclusive, holds, shared, TTL};
use redis::{Connection, Value};

/// The fields of a `LOCK.INFO` reply in order: a flat array under RESP2, a map under RESP3.
fn info_fields(v: &Value, resp3: bool) -> Vec<(String, Value)> {
    match (v, resp3) {
        (Value::Array(items), false) if items.len() == 12 => items
            .chunks(2)
            .map(|p| (bulk(&p[0], "field name"), p[1].clone()))
            .collect(),
        (Value::Map(m), true) => m
            .iter()
            .map(|(k, v)| (bulk(k, "field name"), v.clone()))
            .collect(),
        _ => panic!("LOCK.INFO (RESP{}): {v:?}", if resp3 { 3 } else { 2 }),
    }
}

/// `LOCK.INFO key` is exactly holder, fence, ttl (within `ttl`), waiters, mode, holders.
#[track_caller]
fn expect_info(
    con: &mut Connection,
    resp3: bool,
    key: &str,
    want: (Option<&str>, i64, (i64, i64), i64, &str, i64),
) {
    let v = cmd!(con, "LOCK.INFO", key).unwrap();
    let f = info_fields(&v, resp3);
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["holder", "fence", "ttl", "waiters", "mode", "holders"],
        "{v:?}"
    );
    let (holder, fence, (lo, hi), waiters, mode, n) = want;
    let holder = holder.map_or(Value::Nil, |h| Value::BulkString(h.as_bytes().to_vec()));
    assert_eq!(f[0].1, holder, "{key} holder: {v:?}");
    assert_eq!(f[1].1, Value::Int(fence), "{key} fence: {v:?}");
    assert!(
        matches!(f[2].1, Value::Int(t) if t >= lo && t <= hi),
        "{key} ttl: {v:?}"
    );
    assert_eq!(f[3].1, Value::Int(waiters), "{key} waiters: {v:?}");
    assert_eq!(
        f[4].1,
        Value::BulkString(mode.as_bytes().to_vec()),
        "{key} mode: {v:?}"
    );
    assert_eq!(f[5].1, Value::Int(n), "{key} holders: {v:?}");
}

#[test]
fn info_and_holders_replies_in_resp2_and_resp3() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = shared(&mut c, "sh", "a", 20_000);
    let fb = shared(&mut c, "sh", "b", 40_000);
    let fx = exclusive(&mut c, "ex", "x", 20_000);
    let fy = exclusive(&mut c, "wx", "y", 20_000);
    let _w1 = Pending::join(&server, "wx", "w1", TTL, &["SHARED", "WAIT", "0"]);
    let _w2 = Pending::join(&server, "wx", "w2", TTL, &["WAIT", "0"]);
    let fs = shared(&mut c, "ws", "s", 20_000);
    let _w3 = Pending::join(&server, "ws", "w3", TTL, &["WAIT", "0"]);
    let ttl = |ms: i64| (ms - 5_000, ms);
    for resp3 in [false, true] {
        let mut con = if resp3 { server.conn3() } else { server.conn() };
        let con = &mut con;
        expect_info(con, resp3, "sh", (None, fb, ttl(40_000), 0, "shared", 2));
        expect_info(
            con,
            resp3,
            "ex",
            (Some("x"), fx, ttl(20_000), 0, "exclusive", 1),
        );
        expect_info(
            con,
            resp3,
            "wx",
            (Some("y"), fy, ttl(20_000), 2, "exclusive", 1),
        );
        expect_info(con, resp3, "ws", (None, fs, ttl(20_000), 1, "shared", 1));
        assert_eq!(cmd!(con, "LOCK.INFO", "missing"), Ok(Value::Nil));
        assert_eq!(cmd!(con, "LOCK.HOLDERS", "missing"), Ok(Value::Nil));
        for (key, want) in [
            (
                "sh",
                vec![("a", fa, 20_000, "shared"), ("b", fb, 40_000, "shared")],
            ),
            ("ex", vec![("x", fx, 20_000, "exclusive")]),
            ("wx", vec![("y", fy, 20_000, "exclusive")]),
            ("ws", vec![("s", fs, 20_000, "shared")]),
        ] {
            let v = cmd!(con, "LOCK.HOLDERS", key).unwrap();
            let Value::Array(items) = &v else {
                panic!("LOCK.HOLDERS {key}: {v:?}")
            };
            assert_eq!(items.len(), want.len(), "{key}: {v:?}");
            for (item, (t, f, ms, mode)) in items.iter().zip(want) {
                let Value::Array(e) = item else {
                    panic!("LOCK.HOLDERS {key}: {v:?}")
                };
                assert_eq!(e.len(), 4, "{key}: {v:?}");
                assert_eq!(
                    e[0],
                    Value::BulkString(t.as_bytes().to_vec()),
                    "{key}: {v:?}"
                );
                assert_eq!(e[1], Value::Int(f), "{key}: {v:?}");
                let (lo, hi) = ttl(ms);
                assert!(
                    matches!(e[2], Value::Int(t) if t >= lo && t <= hi),
                    "{key}: {v:?}"
                );
                assert_eq!(
                    e[3],
                    Value::BulkString(mode.as_bytes().to_vec()),
                    "{key}: {v:?}"
                );
            }
        }
    }
    // Null on the wire: `$-1` or `*-1` under RESP2, `_` under RESP3.
    let mut raw = server.raw();
    let r = raw.call(&[b"LOCK.HOLDERS", b"missing"]);
    assert!(
        r == b"$-1\r\n" || r == b"*-1\r\n",
        "RESP2 LOCK.HOLDERS missing: {:?}",
        String::from_utf8_lossy(&r)
    );
    assert!(raw.call(&[b"HELLO", b"3"]).starts_with(b"%"));
    assert_eq!(raw.call(&[b"LOCK.HOLDERS", b"missing"]), b"_\r\n");
}

#[test]
fn holders_arity_wrong_type_and_command_info() {
    let server = Server::new();
    let mut c = server.conn();
    shared(&mut c, "k", "a", TTL);
    for args in [&["LOCK.HOLDERS"][..], &["LOCK.HOLDERS", "k", "x"]] {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        match common::run(&cmd, &mut c) {
            Err(e) => assert!(
                e.to_lowercase()
                    .starts_with("err wrong number of arguments for 'lock.holders'"),
                "{args:?}: expected the server's arity error, got {e:?}"
            ),
            Ok(v) => panic!("{args:?}: expected an arity error, got {v:?}"),
        }
    }
    assert_eq!(tokens(&holds(&mut c, "k")), ["a"]);
    cmd!(&mut c, "SET", "s", "v").unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    assert_eq!(
        cmd!(&mut c, "LOCK.HOLDERS", "s"),
        Err(wrongtype.to_string())
    );
    assert_eq!(
        acquire_with(&mut c, "s", "a", TTL, &["SHARED", "LIMIT", "2"]),
        Err(wrongtype.to_string())
    );
    assert_eq!(
        cmd!(&mut c, "GET", "s"),
        Ok(Value::BulkString(b"v".to_vec()))
    );

    let v = cmd!(&mut c, "COMMAND", "INFO", "lock.holders").unwrap();
    let Value::Array(outer) = &v else {
        panic!("COMMAND INFO lock.holders: {v:?}")
    };
    let Some(Value::Array(e)) = outer.first() else {
        panic!("COMMAND INFO lock.holders: {v:?}")
    };
    assert_eq!(e[1], Value::Int(2), "arity 2: {v:?}");
    let flags: Vec<String> = match &e[2] {
        Value::Array(f) | Value::Set(f) => f
            .iter()
            .map(|x| match x {
                Value::SimpleString(s) => s.clone(),
                other => bulk(other, "flag"),
            })
            .collect(),
        other => panic!("flags: {other:?}"),
    };
    assert!(flags.iter().any(|f| f == "readonly"), "flags {flags:?}");
    assert!(!flags.iter().any(|f| f == "write"), "flags {flags:?}");
    assert_eq!(
        (&e[3], &e[4], &e[5]),
        (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
        "{v:?}"
    );
}
