//! `LOCK.GUARD key fence command [arg ...]` (README, `LOCK.GUARD` and guarded writes; issue
//! 12): the inner command runs, atomically, only under the current fence of an exclusive,
//! unexpired hold of `key`, and is then checked as if the caller had sent it.
//!
//! 1. Every refusal and its error, in the order they are checked (arity, fence, the inner
//!    command, the key's type, the fence itself); each refused call changes nothing and
//!    counts only where `INFO lock` says (`lock_guarded_refusals` for `FENCED` replies).
//! 2. Inner replies and inner errors pass through byte for byte, in RESP2 and RESP3.
//! 3. Fences from `LOCK.FENCE` and from a grant to a waiter work; release and lease end end them.
//! 4. ACL command permissions and key patterns, `COMMAND GETKEYS`/`GETKEYSANDFLAGS`.
//! 5. `MULTI`/`EXEC` and `EVAL`; the AOF, restart and `DEBUG RELOAD`; a replica.
//! 6. The server's rules: `maxmemory`, `CLIENT PAUSE WRITE`, an inner command on the lock key
//!    itself (its waiters are answered null).

mod common;

use std::fs;
use std::sync::mpsc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, ConnectionLike, Value};

const TTL: u64 = 30_000;
const HOLDER: &str = "holder";
/// "At once".
const AT_ONCE: Duration = Duration::from_millis(200);

const NOT_HELD: &str = "FENCED the lock is not held";
const NEWER: &str = "FENCED the lock is held under a newer fence";
const OLDER: &str = "FENCED the lock is held under an older fence";
const BAD_FENCE: &str = "ERR fence is not an integer or out of range";
const ARITY: &str = "ERR wrong number of arguments for 'lock.guard' command";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

// ------------------------------------------------------------------------------ helpers

/// `LOCK.GUARD key fence inner...` with the fence as raw text.
fn guard_text(
    con: &mut Connection,
    key: &str,
    fence: &str,
    inner: &[&str],
) -> Result<Value, String> {
    let mut a = vec!["LOCK.GUARD", key, fence];
    a.extend_from_slice(inner);
    run_raw(con, &args(&a))
}

/// `LOCK.GUARD key fence inner...`.
fn guard(con: &mut Connection, key: &str, fence: i64, inner: &[&str]) -> Result<Value, String> {
    guard_text(con, key, &fence.to_string(), inner)
}

/// The `INFO lock` counters of `LOCK.GUARD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counters {
    runs: i64,
    refusals: i64,
}

fn counters(con: &mut Connection) -> Counters {
    Counters {
        runs: lock_stat(con, "lock_guarded_runs").expect("INFO lock has lock_guarded_runs"),
        refusals: lock_stat(con, "lock_guarded_refusals")
            .expect("INFO lock has lock_guarded_refusals"),
    }
}

/// The counters as they must be after `runs` more inner commands ran and `refusals` more
/// `FENCED` replies.
#[track_caller]
fn assert_counted(con: &mut Connection, before: Counters, runs: i64, refusals: i64, what: &str) {
    let now = counters(con);
    assert_eq!(
        (now.runs - before.runs, now.refusals - before.refusals),
        (runs, refusals),
        "{what}: lock_guarded_runs / lock_guarded_refusals moved by ({}, {}), expected ({runs}, {refusals})",
        now.runs - before.runs,
        now.refusals - before.refusals,
    );
}

/// What a refused `LOCK.GUARD` must leave as it was: the lock (`LOCK.INFO`, or its error on
/// a key of another type), the data keys (`DUMP`: type and value), the number of keys, and
/// the counters.
struct World {
    lock_key: String,
    lock: Result<Option<LockInfo>, String>,
    data: Vec<(String, Value)>,
    keys: i64,
    counters: Counters,
    at: Instant,
}

fn lock_state(con: &mut Connection, key: &str) -> Result<Option<LockInfo>, String> {
    cmd!(con, "LOCK.INFO", key).map(|v| parse_info(&v))
}

fn dbsize(con: &mut Connection) -> i64 {
    match cmd!(con, "DBSIZE") {
        Ok(Value::Int(n)) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

fn world(con: &mut Connection, lock_key: &str, data_keys: &[&str]) -> World {
    let data = data_keys
        .iter()
        .map(|k| {
            let d = cmd!(con, "DUMP", *k).unwrap_or_else(|e| panic!("DUMP {k}: {e}"));
            (k.to_string(), d)
        })
        .collect();
    World {
        lock_key: lock_key.to_string(),
        lock: lock_state(con, lock_key),
        data,
        keys: dbsize(con),
        counters: counters(con),
        at: Instant::now(),
    }
}

/// Nothing changed since `before`, and the counters moved by exactly (`runs`, `refusals`).
#[track_caller]
fn assert_nothing_ran(con: &mut Connection, before: &World, runs: i64, refusals: i64, what: &str) {
    let lock = lock_state(con, &before.lock_key);
    match (&before.lock, &lock) {
        (Ok(Some(b)), Ok(Some(a))) => {
            assert_eq!(
                (&a.holder, a.fence, a.waiters),
                (&b.holder, b.fence, b.waiters),
                "{what}: the lock {} changed: {b:?} -> {a:?}",
                before.lock_key
            );
            let el = before.at.elapsed().as_millis() as i64;
            assert!(
                a.ttl <= b.ttl && a.ttl >= b.ttl - el - 100,
                "{what}: the lease of {} moved: {} -> {} in {el} ms",
                before.lock_key,
                b.ttl,
                a.ttl
            );
        }
        (b, a) => assert_eq!(
            a, b,
            "{what}: LOCK.INFO {} changed: {b:?} -> {a:?}",
            before.lock_key
        ),
    }
    for (k, d) in &before.data {
        let now = cmd!(con, "DUMP", k.as_str()).unwrap();
        assert!(
            now == *d,
            "{what}: data key {k} changed (DUMP {d:?} -> {now:?})"
        );
    }
    assert_eq!(
        dbsize(con),
        before.keys,
        "{what}: the number of keys changed"
    );
    assert_counted(con, before.counters, runs, refusals, what);
}

/// `r` is an error starting with `expected`, and nothing changed since `before` (a
/// `FENCED` reply counts one refusal, any other none).
#[track_caller]
fn assert_refused(
    con: &mut Connection,
    before: &World,
    r: &Result<Value, String>,
    expected: &str,
    what: &str,
) {
    match r {
        Err(e) => assert!(
            e.starts_with(expected),
            "{what}: expected an error starting with {expected:?}, got {e:?}"
        ),
        Ok(v) => panic!("{what}: expected an error starting with {expected:?}, got reply {v:?}"),
    }
    let fenced = i64::from(expected.starts_with("FENCED"));
    assert_nothing_ran(con, before, 0, fenced, what);
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A string, bulk or status value as text.
fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_string(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn get(con: &mut Connection, key: &str) -> Value {
    cmd!(con, "GET", key).unwrap_or_else(|e| panic!("GET {key}: {e}"))
}

fn set(con: &mut Connection, key: &str, value: &str) {
    assert_eq!(cmd!(con, "SET", key, value), Ok(Value::Okay), "SET {key}");
}

/// A connection authenticated as `user` (password `pw`).
fn conn_as(server: &Server, user: &str) -> Connection {
    let mut con = server.conn();
    assert_eq!(cmd!(&mut con, "AUTH", user, "pw"), Ok(Value::Okay));
    con
}

/// `LOCK.ACQUIRE key HOLDER TTL`, which must be granted.
fn hold(con: &mut Connection, key: &str) -> i64 {
    acquire(con, key, HOLDER, TTL).unwrap_or_else(|| panic!("{key} must be free"))
}

/// An error value inside an `EXEC` reply, or a plain reply.
fn item(v: &Value) -> Result<Value, String> {
    match server_error_text(v) {
        Some(e) => Err(e),
        None => Ok(v.clone()),
    }
}

/// `MULTI`, the commands (each must be queued), `EXEC`: its items, errors as `Err`.
fn transaction(con: &mut Connection, cmds: &[Vec<Vec<u8>>]) -> Vec<Result<Value, String>> {
    assert_eq!(cmd!(con, "MULTI"), Ok(Value::Okay));
    for c in cmds {
        match run_raw(con, c) {
            Ok(Value::SimpleString(s)) if s == "QUEUED" => {}
            other => panic!("MULTI: {} was not queued: {other:?}", show_cmd(c)),
        }
    }
    match exec_raw(con) {
        Ok(Value::Array(items)) => items.iter().map(item).collect(),
        other => panic!("EXEC: {other:?}"),
    }
}

/// `EXEC`, its reply as it came: an error inside it stays an item (`query` would turn the
/// first one into the error of the whole reply).
fn exec_raw(con: &mut Connection) -> redis::RedisResult<Value> {
    con.req_command(&redis::cmd("EXEC"))
}

fn guard_cmd(key: &str, fence: i64, inner: &[&str]) -> Vec<Vec<u8>> {
    let f = fence.to_string();
    let mut a = vec!["LOCK.GUARD", key, &f];
    a.extend_from_slice(inner);
    args(&a)
}

// ------------------------------------------------------------------------ fence refusals

/// Each reason the fence is refused, with its error; the inner command (which would change
/// `data`) does not run, nothing else changes, and each counts one refusal, no run.
#[test]
fn every_fence_refusal_names_its_reason_and_changes_nothing() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let inner = ["SET", "data", "new"];
    let check = |con: &mut Connection, key: &str, fence: i64, expected: &str, what: &str| {
        // The same refusal whatever the inner command.
        for inner in [
            &inner[..],
            &["DEL", "data"][..],
            &["INCR", "fresh-counter"][..],
            &["GET", "data"][..],
        ] {
            let before = world(con, key, &["data"]);
            let r = guard(con, key, fence, inner);
            assert_refused(
                con,
                &before,
                &r,
                expected,
                &format!("{what}, inner {inner:?}"),
            );
        }
    };

    // Not held: no key at all (a real fence, of another key).
    let f_other = hold(&mut con, "other");
    check(&mut con, "nokey", f_other, NOT_HELD, "no lock at the key");

    // Not held: released.
    let f = hold(&mut con, "released");
    assert_eq!(release(&mut con, "released", HOLDER), 1);
    check(&mut con, "released", f, NOT_HELD, "after LOCK.RELEASE");

    // Not held: the lease ended (whether or not the sweep has removed the key yet).
    let f = acquire(&mut con, "ended", HOLDER, 50).unwrap();
    sleep(Duration::from_millis(120));
    check(&mut con, "ended", f, NOT_HELD, "after the lease ended");

    // Newer: LOCK.FENCE issued a new fence to the same hold.
    let f0 = hold(&mut con, "fenced");
    let f1 = fence(&mut con, "fenced", HOLDER).unwrap();
    assert!(f1 > f0);
    check(&mut con, "fenced", f0, NEWER, "the fence before LOCK.FENCE");

    // Newer: released, then acquired by another token.
    let f0 = hold(&mut con, "reacquired");
    assert_eq!(release(&mut con, "reacquired", HOLDER), 1);
    let f1 = acquire(&mut con, "reacquired", "second", TTL).unwrap();
    assert!(f1 > f0);
    check(
        &mut con,
        "reacquired",
        f0,
        NEWER,
        "the first holder's fence after a re-acquire",
    );

    // Newer: the lease ended, then another token acquired it.
    let f0 = acquire(&mut con, "expired", HOLDER, 50).unwrap();
    sleep(Duration::from_millis(120));
    let f1 = acquire(&mut con, "expired", "second", TTL).unwrap();
    assert!(f1 > f0);
    check(
        &mut con,
        "expired",
        f0,
        NEWER,
        "a fence whose lease ended, after a re-acquire",
    );

    // Newer: a smaller fence, issued to another key.
    let f_before = hold(&mut con, "earlier");
    let f = hold(&mut con, "current");
    assert!(f > f_before);
    check(
        &mut con,
        "current",
        f_before,
        NEWER,
        "a smaller fence of another key",
    );

    // Older: a fence never issued to this hold.
    check(&mut con, "current", f + 1, OLDER, "fence + 1");
    let f_later = hold(&mut con, "later");
    assert!(f_later > f);
    check(
        &mut con,
        "current",
        f_later,
        OLDER,
        "a larger fence of another key",
    );

    // The key holds another type: WRONGTYPE, counted as no refusal.
    set(&mut con, "str", "a string");
    check(&mut con, "str", f, WRONGTYPE, "a string key");

    // And with the right fence, the same command runs.
    assert_eq!(guard(&mut con, "current", f, &inner), Ok(Value::Okay));
    assert_eq!(get(&mut con, "data"), bulk("new"));
}

/// A holder that slept past its lease while another took the lock and wrote: its write
/// with its old fence is refused, and the data shows only the new holder's writes.
#[test]
fn a_holder_that_slept_past_its_lease_is_refused() {
    let s = Server::new();
    let mut a = s.conn();
    let mut b = s.conn();
    let fa = acquire(&mut a, "lk", "a", 100).unwrap();
    assert_eq!(
        guard(&mut a, "lk", fa, &["RPUSH", "log", "a1"]),
        Ok(Value::Int(1))
    );
    sleep(Duration::from_millis(180));
    let fb = acquire(&mut b, "lk", "b", TTL).expect("the lease of a ended");
    assert!(fb > fa);
    assert_eq!(
        guard(&mut b, "lk", fb, &["RPUSH", "log", "b1"]),
        Ok(Value::Int(2))
    );
    let before = world(&mut a, "lk", &["log"]);
    let r = guard(&mut a, "lk", fa, &["RPUSH", "log", "a2"]);
    assert_refused(&mut a, &before, &r, NEWER, "the woken holder's write");
    assert_eq!(
        guard(&mut b, "lk", fb, &["RPUSH", "log", "b2"]),
        Ok(Value::Int(3))
    );
    assert_eq!(
        cmd!(&mut a, "LRANGE", "log", 0, -1),
        Ok(Value::Array(vec![bulk("a1"), bulk("b1"), bulk("b2")]))
    );
}

// ------------------------------------------------------------------------- bad arguments

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let f = hold(&mut con, "lk");
    let fs = f.to_string();

    for a in [
        vec!["LOCK.GUARD"],
        vec!["LOCK.GUARD", "lk"],
        vec!["LOCK.GUARD", "lk", &fs],
        vec!["lock.guard", "lk", &fs],
    ] {
        let before = world(&mut con, "lk", &["data"]);
        let r = run_raw(&mut con, &args(&a));
        assert_refused(&mut con, &before, &r, ARITY, &format!("{a:?}"));
    }

    for bad in ["0", "-1", "abc", "18446744073709551616", "1.5", ""] {
        let before = world(&mut con, "lk", &["data"]);
        let r = guard_text(&mut con, "lk", bad, &["SET", "data", "new"]);
        assert_refused(&mut con, &before, &r, BAD_FENCE, &format!("fence {bad:?}"));
    }
    assert_eq!(get(&mut con, "data"), bulk("orig"));
}

/// The checks run in their documented order: arity, fence, inner command, the key's type,
/// the fence against the hold.
#[test]
fn checks_run_in_order() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    set(&mut con, "str", "x");
    let f = hold(&mut con, "lk");
    let cases: Vec<(&str, String, Vec<&str>, &str, &str)> = vec![
        (
            "str",
            "abc".into(),
            vec!["NoSuchCmd"],
            BAD_FENCE,
            "bad fence before inner, type",
        ),
        (
            "lk",
            "0".into(),
            vec!["SET", "data"],
            BAD_FENCE,
            "bad fence before inner arity",
        ),
        (
            "str",
            f.to_string(),
            vec!["NoSuchCmd"],
            "ERR LOCK.GUARD: unknown command 'NoSuchCmd'",
            "inner before the key's type",
        ),
        (
            "nokey",
            f.to_string(),
            vec!["SET", "data"],
            "ERR LOCK.GUARD: wrong number of arguments for 'SET'",
            "inner arity before the fence",
        ),
        (
            "str",
            f.to_string(),
            vec!["SET", "data", "new"],
            WRONGTYPE,
            "type before the fence",
        ),
        (
            "lk",
            (f + 1).to_string(),
            vec!["SET", "data", "new"],
            OLDER,
            "fence last",
        ),
    ];
    for (key, fence_text, inner, expected, what) in cases {
        let before = world(&mut con, key, &["data", "str"]);
        let r = guard_text(&mut con, key, &fence_text, &inner);
        assert_refused(&mut con, &before, &r, expected, what);
    }
}

// ---------------------------------------------------------------- inner command refusals

/// Inner commands that cannot be guarded, with the error expected (a prefix): unknown,
/// wrong arity, blocking, `noscript`, `LOCK.*`. Each of them would change something if it
/// ran (pop, move, release, fence, enter a transaction or subscribed mode).
fn refused_inners(lk: &str, fence: i64) -> Vec<(Vec<String>, String)> {
    let f = fence.to_string();
    let e = |m: &str| format!("ERR LOCK.GUARD: {m}");
    let blocks = |name: &str| e(&format!("'{name}' blocks and cannot be guarded"));
    let noscript = |name: &str| {
        e(&format!(
            "'{name}' cannot be guarded: scripts may not run it"
        ))
    };
    let lock = |name: &str| e(&format!("'{name}' cannot be guarded: it is a LOCK command"));
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (v(&["NoSuchCmd", "x"]), e("unknown command 'NoSuchCmd'")),
        (v(&["foo"]), e("unknown command 'foo'")),
        (
            v(&["set", "data"]),
            e("wrong number of arguments for 'set'"),
        ),
        (v(&["get"]), e("wrong number of arguments for 'get'")),
        (
            v(&["get", "data", "extra"]),
            e("wrong number of arguments for 'get'"),
        ),
        (v(&["blpop", "list", "0"]), blocks("blpop")),
        (v(&["brpop", "list", "1"]), blocks("brpop")),
        (
            v(&["blmove", "list", "dst", "LEFT", "RIGHT", "0"]),
            blocks("blmove"),
        ),
        (v(&["bzpopmin", "z", "0"]), blocks("bzpopmin")),
        (
            v(&["xread", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"]),
            blocks("xread"),
        ),
        (v(&["XREAD", "STREAMS", "s", "0"]), blocks("XREAD")),
        (
            v(&[
                "xreadgroup",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ]),
            blocks("xreadgroup"),
        ),
        // Blocking on some servers, noscript on others (Redis 7.0): refused either way.
        (v(&["wait", "0", "0"]), e("'wait' ")),
        (v(&["multi"]), noscript("multi")),
        (v(&["MULTI"]), noscript("MULTI")),
        (v(&["exec"]), noscript("exec")),
        (v(&["discard"]), noscript("discard")),
        (v(&["watch", "data"]), noscript("watch")),
        (v(&["unwatch"]), noscript("unwatch")),
        (v(&["subscribe", "ch"]), noscript("subscribe")),
        (v(&["psubscribe", "ch*"]), noscript("psubscribe")),
        (v(&["ssubscribe", "ch"]), noscript("ssubscribe")),
        (
            v(&[
                "eval",
                "return redis.call('SET', KEYS[1], 'new')",
                "1",
                "data",
            ]),
            noscript("eval"),
        ),
        (v(&["fcall", "f", "0"]), noscript("fcall")),
        (
            v(&["lock.acquire", "elsewhere", "t", "1000"]),
            lock("lock.acquire"),
        ),
        (
            v(&["LOCK.ACQUIRE", lk, "t", "1000", "WAIT", "0"]),
            lock("LOCK.ACQUIRE"),
        ),
        (v(&["LOCK.RELEASE", lk, HOLDER]), lock("LOCK.RELEASE")),
        (v(&["lock.fence", lk, HOLDER]), lock("lock.fence")),
        (v(&["LOCK.EXTEND", lk, HOLDER, "1"]), lock("LOCK.EXTEND")),
        (v(&["LOCK.INFO", lk]), lock("LOCK.INFO")),
        (
            v(&["LOCK.GUARD", lk, &f, "SET", "data", "new"]),
            lock("LOCK.GUARD"),
        ),
    ]
}

/// Every inner refusal changes nothing, leaves the connection as it was (not in a
/// transaction, not subscribed, watching nothing), counts in neither counter, and comes
/// before the fence and the key's type are looked at: the same error with the current
/// fence, a stale one, no lock at the key, and a string key.
#[test]
fn inner_commands_that_cannot_be_guarded_are_refused_before_the_fence() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    assert_eq!(cmd!(&mut con, "RPUSH", "list", "a", "b"), Ok(Value::Int(2)));
    assert_eq!(cmd!(&mut con, "ZADD", "z", 1, "m"), Ok(Value::Int(1)));
    cmd!(&mut con, "XADD", "s", "1-1", "f", "v").unwrap();
    assert_eq!(
        cmd!(&mut con, "XGROUP", "CREATE", "s", "g", "0"),
        Ok(Value::Okay)
    );
    set(&mut con, "str", "x");
    let stale = hold(&mut con, "lk");
    let current = fence(&mut con, "lk", HOLDER).unwrap();
    let data_keys = ["data", "list", "z", "s", "str"];

    for (key, fence, situation) in [
        ("lk", current, "held, current fence"),
        ("lk", stale, "held, stale fence"),
        ("nokey", current, "no lock at the key"),
        ("str", current, "a string key"),
    ] {
        for (inner, expected) in refused_inners("lk", current) {
            let inner: Vec<&str> = inner.iter().map(String::as_str).collect();
            let what = format!("[{situation}] LOCK.GUARD {key} <fence> {}", inner.join(" "));
            let before = world(&mut con, key, &data_keys);
            let lock_before = world(&mut con, "lk", &[]);
            let r = guard(&mut con, key, fence, &inner);
            assert_refused(&mut con, &before, &r, &expected, &what);
            assert_nothing_ran(&mut con, &lock_before, 0, 0, &format!("{what} (lk)"));
            // The connection is neither in a transaction nor subscribed.
            assert_eq!(
                cmd!(&mut con, "GET", "data"),
                Ok(bulk("orig")),
                "{what}: the connection changed state"
            );
        }
    }

    // The refused WATCH watches nothing: a change to data does not abort a transaction.
    let mut other = s.conn();
    set(&mut other, "data", "changed");
    let r = transaction(&mut con, &[args(&["SET", "after-watch", "1"])]);
    assert_eq!(r, vec![Ok(Value::Okay)], "a refused WATCH must not watch");
}

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

// ----------------------------------------------------------------------------------- ACL

/// Command permissions: a user allowed `LOCK.GUARD` and `GET` but not `SET` is refused an
/// inner `SET` (after the fence check), and may run an inner `GET`.
#[test]
fn acl_command_permissions_apply_to_the_inner_command() {
    let s = Server::new();
    let mut admin = s.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "limited",
            "on",
            ">pw",
            "~*",
            "+lock.guard",
            "+get"
        ),
        Ok(Value::Okay)
    );
    set(&mut admin, "data", "orig");
    let stale = hold(&mut admin, "lk");
    let f = fence(&mut admin, "lk", HOLDER).unwrap();
    let mut user = conn_as(&s, "limited");

    assert_err_starts(&cmd!(&mut user, "SET", "data", "x"), "NOPERM");
    let before = world(&mut admin, "lk", &["data"]);
    let r = guard(&mut user, "lk", f, &["set", "data", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM LOCK.GUARD: this user has no permissions to run 'set' or to touch its keys",
        "inner SET without +set",
    );
    let r = guard(&mut user, "lk", f, &["set", "fresh", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner SET of a new key without +set",
    );
    // The fence is checked first.
    let r = guard(&mut user, "lk", stale, &["set", "data", "new"]);
    assert_refused(&mut admin, &before, &r, NEWER, "a stale fence and no +set");

    let c = counters(&mut admin);
    assert_eq!(
        guard(&mut user, "lk", f, &["GET", "data"]),
        Ok(bulk("orig"))
    );
    assert_counted(&mut admin, c, 1, 0, "an allowed inner GET");
}

/// Key patterns: the server itself refuses keys outside the user's patterns (the inner
/// keys are declared), for the inner key and the lock key; `%R~` keys may be read and not
/// written through the guard.
#[test]
fn acl_key_patterns_apply_to_the_inner_keys() {
    let s = Server::new();
    let mut admin = s.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~lock:*",
            "~allowed:*",
            "+@all"
        ),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "reader", "on", ">pw", "~lock:*", "%R~ro:*", "+@all"),
        Ok(Value::Okay)
    );
    set(&mut admin, "other:1", "orig");
    set(&mut admin, "ro:1", "orig");
    let f = hold(&mut admin, "lock:1");
    let fo = hold(&mut admin, "other:lock");
    let mut app = conn_as(&s, "app");
    let mut reader = conn_as(&s, "reader");
    let data = ["other:1", "ro:1", "ro:2", "allowed:1", "allowed:2"];

    let server_noperm = |r: &Result<Value, String>, what: &str| {
        let e = r.as_ref().expect_err(what);
        assert!(
            e.starts_with("NOPERM") && !e.starts_with("NOPERM LOCK.GUARD"),
            "{what}: expected the server's own NOPERM, got {e:?}"
        );
    };

    let before = world(&mut admin, "lock:1", &data);
    let r = guard(&mut app, "lock:1", f, &["SET", "other:1", "new"]);
    server_noperm(&r, "inner SET outside the key patterns");
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner SET outside the key patterns",
    );
    let r = guard(
        &mut app,
        "lock:1",
        f,
        &["MSET", "allowed:2", "x", "other:1", "new"],
    );
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner MSET with one key outside",
    );

    let before = world(&mut admin, "other:lock", &data);
    let r = guard(&mut app, "other:lock", fo, &["SET", "allowed:1", "new"]);
    server_noperm(&r, "lock key outside the key patterns");
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "lock key outside the key patterns",
    );

    let before = world(&mut admin, "lock:1", &data);
    let r = guard(&mut reader, "lock:1", f, &["SET", "ro:1", "new"]);
    server_noperm(&r, "inner SET of a read-only key");
    assert_refused(&mut admin, &before, &r, "NOPERM", "inner SET of a %R~ key");

    let r = guard(
        &mut reader,
        "lock:1",
        f,
        &["MSET", "ro:1", "new", "ro:2", "new"],
    );
    assert_refused(&mut admin, &before, &r, "NOPERM", "inner MSET of %R~ keys");
    let r = guard(&mut reader, "lock:1", f, &["APPEND", "ro:1", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner APPEND of a %R~ key",
    );

    let c = counters(&mut admin);
    assert_eq!(
        guard(&mut reader, "lock:1", f, &["GET", "ro:1"]),
        Ok(bulk("orig"))
    );
    assert_eq!(
        guard(&mut app, "lock:1", f, &["SET", "allowed:1", "v"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut admin, "allowed:1"), bulk("v"));
    assert_counted(
        &mut admin,
        c,
        2,
        0,
        "guarded commands inside the key patterns",
    );
}

// ---------------------------------------------------------------------- keys and metadata

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().map(text).collect(),
        other => panic!("expected an array of strings, got {other:?}"),
    }
}

/// `COMMAND GETKEYSANDFLAGS` as (key, flags).
fn keys_and_flags(v: &Value) -> Vec<(String, Vec<String>)> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|e| match e {
                Value::Array(kf) if kf.len() == 2 => (text(&kf[0]), strings(&kf[1])),
                other => panic!("GETKEYSANDFLAGS entry: {other:?}"),
            })
            .collect(),
        other => panic!("GETKEYSANDFLAGS: {other:?}"),
    }
}

#[test]
fn command_getkeys_declares_the_lock_key_and_the_inner_keys() {
    let s = Server::new();
    let mut con = s.conn();
    let f = hold(&mut con, "lk");
    let fs = f.to_string();
    let getkeys = |con: &mut Connection, inner: &[&str]| {
        let mut a = vec!["COMMAND", "GETKEYS", "LOCK.GUARD", "lk", &fs];
        a.extend_from_slice(inner);
        strings(&must(con, &args(&a)))
    };
    assert_eq!(getkeys(&mut con, &["SET", "x", "v"]), ["lk", "x"]);
    assert_eq!(
        getkeys(&mut con, &["MSET", "a", "1", "b", "2"]),
        ["lk", "a", "b"]
    );
    assert_eq!(getkeys(&mut con, &["GET", "x"]), ["lk", "x"]);
    assert_eq!(getkeys(&mut con, &["RENAME", "x", "y"]), ["lk", "x", "y"]);
    assert_eq!(getkeys(&mut con, &["PING"]), ["lk"]);

    // The lock key is only read (RO, access). Each inner key carries the flags the server's
    // key lookup for modules gives (README, LOCK.GUARD): the command's own where it has a
    // key-finding function (SET), none otherwise — the guarded command's own ACL check then
    // applies the exact read/write rules (tested with `%R~` in the ACL test).
    let mut problems = Findings::default();
    for inner in [
        &["SET", "x", "v"][..],
        &["MSET", "a", "1", "b", "2"][..],
        &["GET", "x"][..],
        &["RENAME", "x", "y"][..],
        &["DEL", "x", "y"][..],
        &["LMOVE", "x", "y", "LEFT", "RIGHT"][..],
    ] {
        let mut a = vec!["COMMAND", "GETKEYSANDFLAGS", "LOCK.GUARD", "lk", &fs];
        a.extend_from_slice(inner);
        let got = keys_and_flags(&must(&mut con, &args(&a)));
        let mut p = vec!["COMMAND", "GETKEYSANDFLAGS"];
        p.extend_from_slice(inner);
        let plain = keys_and_flags(&must(&mut con, &args(&p)));
        problems.check(got.len() == plain.len() + 1, || {
            format!("{inner:?}: {got:?} is not the lock key and {plain:?}")
        });
        let Some((lock, rest)) = got.split_first() else {
            continue;
        };
        problems.check(lock.0 == "lk" && lock.1.iter().any(|f| f == "RO"), || {
            format!("{inner:?}: the lock key must come first, RO: {got:?}")
        });
        for w in ["RW", "OW", "RM", "insert", "update", "delete"] {
            problems.check(!lock.1.iter().any(|f| f == w), || {
                format!("{inner:?}: the lock key must not be {w}: {got:?}")
            });
        }
        let names = |v: &[(String, Vec<String>)]| v.iter().map(|k| k.0.clone()).collect::<Vec<_>>();
        problems.check(names(rest) == names(&plain), || {
            format!("{inner:?}: inner keys {rest:?}, plainly {plain:?}")
        });
        for (got, want) in rest.iter().zip(&plain) {
            problems.check(got.1.is_empty() || got.1 == want.1, || {
                format!(
                    "{inner:?}: {} has flags {:?}, plainly {:?}",
                    got.0, got.1, want.1
                )
            });
        }
        if inner[0] == "SET" {
            problems.check(rest == &plain[..], || {
                format!("SET: inner keys and flags {rest:?}, plainly {plain:?}")
            });
        }
    }
    problems.done("COMMAND GETKEYSANDFLAGS LOCK.GUARD");

    // COMMAND INFO: arity -4, a write command with movable keys, not deny-oom.
    let info = must(&mut con, &args(&["COMMAND", "INFO", "lock.guard"]));
    let Value::Array(entries) = info else {
        panic!("COMMAND INFO: {info:?}")
    };
    let Some(Value::Array(e)) = entries.first() else {
        panic!("COMMAND INFO lock.guard: {entries:?}")
    };
    assert_eq!(text(&e[0]), "lock.guard");
    assert_eq!(e[1], Value::Int(-4), "arity");
    let flags = strings(&e[2]);
    for want in ["write", "movablekeys"] {
        assert!(
            flags.iter().any(|f| f == want),
            "flags {flags:?} lack {want}"
        );
    }
    assert!(
        !flags.iter().any(|f| f == "denyoom"),
        "flags {flags:?}: must not be denyoom"
    );
}

// --------------------------------------------------------------------- MULTI/EXEC and EVAL

/// Each `LOCK.GUARD` in a transaction is checked when `EXEC` runs it: one passes, one with a
/// stale fence is refused, one whose fence a `LOCK.FENCE` earlier in the same transaction
/// made stale is refused; a fence made stale between queueing and `EXEC` is refused.
#[test]
fn guards_in_a_transaction_are_checked_when_exec_runs_them() {
    let s = Server::new();
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let c = counters(&mut con);
    let r = transaction(
        &mut con,
        &[
            guard_cmd("lk", f, &["SET", "a", "1"]),
            guard_cmd("lk", stale, &["SET", "b", "2"]),
            args(&["LOCK.FENCE", "lk", HOLDER]),
            guard_cmd("lk", f, &["SET", "c", "3"]),
        ],
    );
    assert_eq!(r.len(), 4, "EXEC: {r:?}");
    assert_eq!(r[0], Ok(Value::Okay), "the current fence: {r:?}");
    assert_err_starts(&r[1], NEWER);
    let Ok(Value::Int(f2)) = r[2] else {
        panic!("LOCK.FENCE in EXEC: {r:?}")
    };
    assert!(f2 > f);
    assert_err_starts(&r[3], NEWER);
    assert_eq!(get(&mut con, "a"), bulk("1"));
    assert!(
        !exists(&mut con, "b") && !exists(&mut con, "c"),
        "a refused guard ran in EXEC"
    );
    assert_counted(&mut con, c, 1, 2, "MULTI with one run and two refusals");

    // Queued under the current fence, made stale before EXEC by another client.
    let mut other = s.conn();
    assert_eq!(cmd!(&mut con, "MULTI"), Ok(Value::Okay));
    let q = run_raw(&mut con, &guard_cmd("lk", f2, &["SET", "d", "4"]));
    assert_eq!(q, Ok(Value::SimpleString("QUEUED".into())));
    let q = run_raw(&mut con, &guard_cmd("lk", f2, &["GET", "a"]));
    assert_eq!(q, Ok(Value::SimpleString("QUEUED".into())));
    let f3 = fence(&mut other, "lk", HOLDER).unwrap();
    match exec_raw(&mut con) {
        Ok(Value::Array(items)) => {
            assert_eq!(items.len(), 2, "EXEC: {items:?}");
            for i in &items {
                assert_err_starts(&item(i), NEWER);
            }
        }
        other => panic!("EXEC: {other:?}"),
    }
    assert!(!exists(&mut con, "d"));
    assert_eq!(
        transaction(&mut con, &[guard_cmd("lk", f3, &["SET", "d", "5"])]),
        vec![Ok(Value::Okay)]
    );
    assert_eq!(get(&mut con, "d"), bulk("5"));
}

const GUARD_SCRIPT: &str =
    "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', KEYS[2], ARGV[2])";
const PCALL_SCRIPT: &str = "local r = redis.pcall('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', \
                            KEYS[2], ARGV[2]) \
                            if type(r) == 'table' and r.err then return 'caught: ' .. r.err end \
                            return 'ran'";

#[test]
fn eval_runs_guarded_commands_and_a_refusal_is_a_script_error() {
    let s = Server::new();
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let c = counters(&mut con);
    assert_eq!(
        cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "data", f, "v1"),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "data"), bulk("v1"));
    assert_eq!(
        cmd!(
            &mut con,
            "EVAL",
            "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'INCRBY', KEYS[2], 5)",
            2,
            "lk",
            "n",
            f
        ),
        Ok(Value::Int(5))
    );
    assert_counted(&mut con, c, 2, 0, "two guarded commands from EVAL");

    let before = world(&mut con, "lk", &["data"]);
    let r = cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "data", stale, "v2");
    assert_refused(&mut con, &before, &r, NEWER, "EVAL with a stale fence");

    let before = world(&mut con, "lk", &["data"]);
    let r = cmd!(&mut con, "EVAL", PCALL_SCRIPT, 2, "lk", "data", stale, "v3");
    match &r {
        Ok(Value::BulkString(b)) => {
            let t = String::from_utf8_lossy(b);
            assert!(
                t.starts_with(&format!("caught: {NEWER}")),
                "redis.pcall: {t}"
            );
        }
        other => panic!("redis.pcall: {other:?}"),
    }
    assert_nothing_ran(
        &mut con,
        &before,
        0,
        1,
        "EVAL with redis.pcall and a stale fence",
    );
    assert_eq!(
        cmd!(&mut con, "EVAL", PCALL_SCRIPT, 2, "lk", "data", f, "v4"),
        Ok(bulk("ran"))
    );
    assert_eq!(get(&mut con, "data"), bulk("v4"));
}

// ----------------------------------------------------------------- AOF, reload, replicas

/// One command of an AOF file as byte strings.
fn aof_commands(b: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line(b: &[u8], at: &mut usize) -> String {
        let end = *at + b[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let s = String::from_utf8_lossy(&b[*at..end]).into_owned();
        *at = end + 2;
        s
    }
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let head = line(b, &mut at);
        let n: usize = head
            .strip_prefix('*')
            .unwrap_or_else(|| panic!("AOF: expected an array, got {head:?}"))
            .parse()
            .unwrap();
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(b, &mut at)
                .strip_prefix('$')
                .expect("AOF: bulk string")
                .parse()
                .unwrap();
            cmd.push(b[at..at + len].to_vec());
            at += len + 2;
        }
        out.push(cmd);
    }
    out
}

fn incr_aof(s: &Server) -> Vec<u8> {
    let dir = s.dir.join("appendonlydir");
    let path = fs::read_dir(&dir)
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file");
    fs::read(path).expect("read the incremental AOF")
}

fn mentions(cmds: &[Vec<Vec<u8>>], word: &str) -> bool {
    cmds.iter()
        .flatten()
        .any(|a| String::from_utf8_lossy(a).to_lowercase().contains(word))
}

fn has_cmd(cmds: &[Vec<Vec<u8>>], want: &[&str]) -> bool {
    cmds.iter().any(|c| {
        c.len() == want.len()
            && c[0].eq_ignore_ascii_case(want[0].as_bytes())
            && c[1..]
                .iter()
                .zip(&want[1..])
                .all(|(a, b)| a == b.as_bytes())
    })
}

/// The AOF holds the inner commands and never `LOCK.GUARD`; a refused guard adds nothing;
/// the data comes back after a restart from the AOF and after `DEBUG RELOAD`.
#[test]
fn the_aof_holds_only_the_inner_commands() {
    let mut s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v1"]),
        Ok(Value::Okay)
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["RPUSH", "list", "a", "b"]),
        Ok(Value::Int(2))
    );
    assert_eq!(guard(&mut con, "lk", f, &["GET", "data"]), Ok(bulk("v1")));

    let size = incr_aof(&s).len();
    assert_err_starts(
        &guard(&mut con, "lk", stale, &["SET", "refused1", "x"]),
        NEWER,
    );
    assert_err_starts(
        &guard(&mut con, "lk", f + 1, &["SET", "refused2", "x"]),
        OLDER,
    );
    assert_err_starts(
        &guard(&mut con, "nokey", f, &["SET", "refused3", "x"]),
        NOT_HELD,
    );
    assert_err_starts(
        &guard(&mut con, "lk", f, &["NoSuchCmd", "refused4"]),
        "ERR LOCK.GUARD:",
    );
    assert_err_starts(
        &guard_text(&mut con, "lk", "0", &["SET", "refused5", "x"]),
        BAD_FENCE,
    );
    assert_eq!(incr_aof(&s).len(), size, "refused guards wrote to the AOF");

    let cmds = aof_commands(&incr_aof(&s));
    assert!(
        !mentions(&cmds, "lock.guard"),
        "LOCK.GUARD in the AOF: {cmds:?}"
    );
    assert!(
        !mentions(&cmds, "refused"),
        "a refused guard's command in the AOF"
    );
    assert!(
        has_cmd(&cmds, &["SET", "data", "v1"]),
        "no SET data v1 in the AOF"
    );
    assert!(
        has_cmd(&cmds, &["RPUSH", "list", "a", "b"]),
        "no RPUSH in the AOF"
    );

    drop(con);
    s.kill9();
    s.start_again();
    let mut con = s.conn();
    assert_eq!(
        get(&mut con, "data"),
        bulk("v1"),
        "after a restart from the AOF"
    );
    assert_eq!(cmd!(&mut con, "LLEN", "list"), Ok(Value::Int(2)));
    assert_eq!(
        info(&mut con, "lk").map(|i| i.fence),
        Some(f),
        "the lock after the restart"
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v2"]),
        Ok(Value::Okay)
    );

    assert_eq!(cmd!(&mut con, "DEBUG", "RELOAD"), Ok(Value::Okay));
    assert_eq!(get(&mut con, "data"), bulk("v2"), "after DEBUG RELOAD");
    assert_eq!(cmd!(&mut con, "LLEN", "list"), Ok(Value::Int(2)));
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v3"]),
        Ok(Value::Okay)
    );
    let cmds = aof_commands(&incr_aof(&s));
    assert!(
        !mentions(&cmds, "lock.guard"),
        "LOCK.GUARD in the AOF: {cmds:?}"
    );
    assert!(
        has_cmd(&cmds, &["SET", "data", "v3"]),
        "no SET data v3 in the AOF"
    );
}

/// A replica receives the inner commands only: it has the data, never ran `LOCK.GUARD`
/// (no `cmdstat_lock.guard`, its counters at 0), got nothing from a refused guard, and
/// refuses `LOCK.GUARD` from its own clients as a write command.
#[test]
fn a_replica_gets_the_inner_commands_only() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let stale = hold(&mut mc, "lk");
    let f = fence(&mut mc, "lk", HOLDER).unwrap();
    assert_eq!(
        guard(&mut mc, "lk", f, &["SET", "data", "v1"]),
        Ok(Value::Okay)
    );
    assert_eq!(
        guard(&mut mc, "lk", f, &["HSET", "h", "f", "v"]),
        Ok(Value::Int(1))
    );
    assert_err_starts(
        &guard(&mut mc, "lk", stale, &["SET", "refused", "x"]),
        NEWER,
    );
    assert_eq!(
        cmd!(&mut mc, "WAIT", 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack"
    );

    assert_eq!(get(&mut rc, "data"), bulk("v1"));
    assert_eq!(cmd!(&mut rc, "HGET", "h", "f"), Ok(bulk("v")));
    assert!(
        !exists(&mut rc, "refused"),
        "a refused guard reached the replica"
    );
    assert_eq!(info(&mut rc, "lk").map(|i| i.fence), Some(f));
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut rc)
        .unwrap();
    assert!(
        !stats.contains("cmdstat_lock.guard"),
        "the replica ran LOCK.GUARD:\n{stats}"
    );
    assert!(
        stats.contains("cmdstat_set:"),
        "the replica did not apply SET:\n{stats}"
    );
    assert!(
        stats.contains("cmdstat_hset:"),
        "the replica did not apply HSET:\n{stats}"
    );
    assert_eq!(
        counters(&mut rc),
        Counters {
            runs: 0,
            refusals: 0
        },
        "replica counters"
    );
    let mstats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut mc)
        .unwrap();
    assert!(
        mstats.contains("cmdstat_lock.guard:calls=3,"),
        "master:\n{mstats}"
    );

    assert_err_starts(&guard(&mut rc, "lk", f, &["SET", "data", "v2"]), "READONLY");
    assert_eq!(get(&mut rc, "data"), bulk("v1"));
}

// ------------------------------------------------------------------ the server's rules

/// Over `maxmemory` (`noeviction`), an inner `SET` is refused with the server's OOM error
/// and an inner `DEL`/`GET` still runs; a stale fence is still `FENCED`.
#[test]
fn over_maxmemory_only_deny_oom_inner_commands_are_refused() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    set(&mut con, "data2", "orig");
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    must(
        &mut con,
        &args(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
    );
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "1"]));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_err_starts(&cmd!(&mut con, "SET", "probe", "x"), "OOM");
        let keys = ["data", "data2", "new"];
        let before = world(&mut con, "lk", &keys);
        let r = guard(&mut con, "lk", f, &["SET", "new", "v"]);
        assert_refused(&mut con, &before, &r, OOM, "inner SET over maxmemory");
        let r = guard(&mut con, "lk", f, &["APPEND", "data", "more"]);
        assert_refused(&mut con, &before, &r, OOM, "inner APPEND over maxmemory");
        let r = guard(&mut con, "lk", stale, &["SET", "new", "v"]);
        assert_refused(&mut con, &before, &r, NEWER, "a stale fence over maxmemory");

        let c = counters(&mut con);
        assert_eq!(guard(&mut con, "lk", f, &["GET", "data"]), Ok(bulk("orig")));
        assert_eq!(
            guard(&mut con, "lk", f, &["DEL", "data"]),
            Ok(Value::Int(1))
        );
        assert_eq!(
            guard(&mut con, "lk", f, &["EXISTS", "data"]),
            Ok(Value::Int(0))
        );
        assert_counted(&mut con, c, 3, 0, "GET, DEL, EXISTS over maxmemory");
    }));
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "0"]));
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "new", "v"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "new"), bulk("v"));
}

/// `LOCK.GUARD` is a write command: `CLIENT PAUSE … WRITE` holds it (whatever its inner
/// command) until writes resume, while plain reads go on.
#[test]
fn client_pause_write_holds_a_guard_until_unpause() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let f = hold(&mut con, "lk");
    must(&mut con, &args(&["CLIENT", "PAUSE", "10000", "WRITE"]));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for inner in [vec!["SET", "data", "new"], vec!["GET", "other"]] {
        let mut c = s.conn();
        let tx = tx.clone();
        threads.push(thread::spawn(move || {
            let r = guard(&mut c, "lk", f, &inner);
            tx.send((inner, r, Instant::now())).unwrap();
        }));
    }
    let early = rx.recv_timeout(Duration::from_millis(300));
    assert!(
        early.is_err(),
        "a LOCK.GUARD ran during CLIENT PAUSE WRITE: {early:?}"
    );
    assert_eq!(
        get(&mut con, "data"),
        bulk("orig"),
        "reads go on during the pause"
    );
    let resumed = Instant::now();
    must(&mut con, &args(&["CLIENT", "UNPAUSE"]));
    for _ in 0..2 {
        let (inner, r, at) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the paused LOCK.GUARD is answered after CLIENT UNPAUSE");
        let want = if inner[0] == "SET" {
            Value::Okay
        } else {
            Value::Nil
        };
        assert_eq!(r, Ok(want), "LOCK.GUARD lk <fence> {inner:?}");
        assert!(
            at.duration_since(resumed) < AT_ONCE,
            "{inner:?} answered {:?} after the unpause",
            at.duration_since(resumed)
        );
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(get(&mut con, "data"), bulk("new"));
}

/// The inner command may touch the lock key itself: `DEL` removes the lock and answers its
/// waiters null at once, an overwrite replaces it, `RENAME` moves it (holder and fence
/// with it).
#[test]
fn an_inner_command_on_the_lock_key_itself() {
    let s = Server::new();
    let mut con = s.conn();

    let f = hold(&mut con, "lk");
    let mut w = Waiter::join(&s, "lk", "waiter", TTL, 0);
    let c = counters(&mut con);
    assert_eq!(guard(&mut con, "lk", f, &["DEL", "lk"]), Ok(Value::Int(1)));
    assert_counted(&mut con, c, 1, 0, "LOCK.GUARD lk <fence> DEL lk");
    let answered = w.reply_within(AT_ONCE);
    assert_eq!(
        answered,
        Some(Reply::Null),
        "the waiter of a deleted lock: {}",
        got(&answered)
    );
    assert!(!exists(&mut con, "lk"));
    assert_eq!(waiting_clients(&mut con), 0);
    assert_err_starts(&guard(&mut con, "lk", f, &["SET", "data", "x"]), NOT_HELD);
    let f2 = hold(&mut con, "lk");
    assert!(
        f2 > f,
        "the next fence after the DEL ({f2}) must be above {f}"
    );

    let mut w = Waiter::join(&s, "lk", "waiter", TTL, 0);
    assert_eq!(
        guard(&mut con, "lk", f2, &["SET", "lk", "plain"]),
        Ok(Value::Okay)
    );
    let answered = w.reply_within(AT_ONCE);
    assert_eq!(
        answered,
        Some(Reply::Null),
        "the waiter of an overwritten lock: {}",
        got(&answered)
    );
    assert_eq!(
        cmd!(&mut con, "TYPE", "lk"),
        Ok(Value::SimpleString("string".into()))
    );
    assert_err_starts(&guard(&mut con, "lk", f2, &["SET", "data", "x"]), WRONGTYPE);
    assert!(!exists(&mut con, "data"));

    let f3 = hold(&mut con, "lk3");
    assert_eq!(
        guard(&mut con, "lk3", f3, &["RENAME", "lk3", "lk4"]),
        Ok(Value::Okay)
    );
    assert_err_starts(&guard(&mut con, "lk3", f3, &["SET", "data", "x"]), NOT_HELD);
    assert_eq!(
        guard(&mut con, "lk4", f3, &["SET", "data", "moved"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "data"), bulk("moved"));
}

// ------------------------------------------------------------------------------ counters

/// `lock_guarded_runs` counts inner commands run (also those that replied with an error);
/// `lock_guarded_refusals` counts `FENCED` replies; other refusals count in neither.
#[test]
fn info_counters_move_by_exactly_what_ran_and_what_was_fenced() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "str", "abc");
    cmd!(&mut con, "RPUSH", "list", "a").unwrap();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let start = counters(&mut con);
    assert_eq!(
        start,
        Counters {
            runs: 0,
            refusals: 0
        },
        "a fresh server's counters"
    );

    let mut expect = start;
    let mut step = |con: &mut Connection, runs: i64, refusals: i64, what: &str| {
        expect.runs += runs;
        expect.refusals += refusals;
        assert_eq!(counters(con), expect, "after {what}");
    };
    let r = guard(&mut con, "lk", f, &["SET", "a", "1"]);
    assert_eq!(r, Ok(Value::Okay));
    step(&mut con, 1, 0, "a run");
    let r = guard(&mut con, "lk", f, &["INCR", "list"]);
    assert_err_starts(&r, "WRONGTYPE");
    step(&mut con, 1, 0, "an inner WRONGTYPE");
    let r = guard(&mut con, "lk", f, &["INCR", "str"]);
    assert_err_starts(&r, "ERR value is not an integer");
    step(&mut con, 1, 0, "an inner ERR");
    assert_err_starts(&guard(&mut con, "lk", stale, &["SET", "a", "2"]), NEWER);
    step(&mut con, 0, 1, "a newer-fence refusal");
    assert_err_starts(&guard(&mut con, "lk", f + 1, &["SET", "a", "2"]), OLDER);
    step(&mut con, 0, 1, "an older-fence refusal");
    assert_err_starts(&guard(&mut con, "nokey", f, &["SET", "a", "2"]), NOT_HELD);
    step(&mut con, 0, 1, "a not-held refusal");
    assert_err_starts(
        &guard_text(&mut con, "lk", "-1", &["SET", "a", "2"]),
        BAD_FENCE,
    );
    step(&mut con, 0, 0, "a bad fence");
    assert_err_starts(&run_raw(&mut con, &args(&["LOCK.GUARD", "lk", "1"])), ARITY);
    step(&mut con, 0, 0, "too few arguments");
    assert_err_starts(&guard(&mut con, "lk", f, &["NoSuchCmd"]), "ERR LOCK.GUARD:");
    step(&mut con, 0, 0, "an unknown inner command");
    assert_err_starts(
        &guard(&mut con, "lk", f, &["BLPOP", "list", "0"]),
        "ERR LOCK.GUARD:",
    );
    step(&mut con, 0, 0, "a blocking inner command");
    assert_err_starts(&guard(&mut con, "lk", f, &["SET", "a"]), "ERR LOCK.GUARD:");
    step(&mut con, 0, 0, "an inner arity error");
    assert_err_starts(&guard(&mut con, "str", f, &["SET", "a", "2"]), WRONGTYPE);
    step(&mut con, 0, 0, "WRONGTYPE lock key");
    let t = transaction(
        &mut con,
        &[
            guard_cmd("lk", f, &["SET", "a", "3"]),
            guard_cmd("lk", stale, &["SET", "a", "4"]),
            guard_cmd("lk", f, &["GET", "a"]),
        ],
    );
    assert_eq!(t[0], Ok(Value::Okay));
    assert_err_starts(&t[1], NEWER);
    assert_eq!(t[2], Ok(bulk("3")));
    step(&mut con, 2, 1, "MULTI with two runs and a refusal");
    let r = cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "a", f, "5");
    assert_eq!(r, Ok(Value::Okay));
    step(&mut con, 1, 0, "EVAL that ran");
    assert_err_starts(
        &cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "a", stale, "6"),
        NEWER,
    );
    step(&mut con, 0, 1, "EVAL that was fenced");
    assert_eq!(get(&mut con, "a"), bulk("5"));
}
