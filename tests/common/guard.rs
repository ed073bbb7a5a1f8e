//! Helpers of the `LOCK.GUARD` tests (`tests/guard/`; docs/commands.md, `LOCK.GUARD`): the
//! command with its fence, its `INFO lock` counters (`lock_guarded_runs`, `lock_guarded_refusals`),
//! a snapshot of all that a refused call must leave as it was, and `MULTI`/`EXEC` with its items as
//! they came.

use std::time::Instant;

use redis::{Connection, ConnectionLike, Value};

use super::*;
use crate::cmd;

pub const TTL: u64 = 30_000;
pub const HOLDER: &str = "holder";

pub const NOT_HELD: &str = "FENCED the lock is not held";
pub const NEWER: &str = "FENCED the lock is held under a newer fence";
pub const OLDER: &str = "FENCED the lock is held under an older fence";
pub const BAD_FENCE: &str = "ERR fence is not an integer or out of range";
pub const ARITY: &str = "ERR wrong number of arguments for 'lock.guard' command";
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A script that guards `SET KEYS[2] ARGV[2]` under the lock `KEYS[1]` and fence `ARGV[1]`.
pub const GUARD_SCRIPT: &str =
    "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', KEYS[2], ARGV[2])";

/// `LOCK.GUARD key fence inner...` with the fence as raw text.
pub fn guard_text(
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
pub fn guard(con: &mut Connection, key: &str, fence: i64, inner: &[&str]) -> Result<Value, String> {
    guard_text(con, key, &fence.to_string(), inner)
}

/// The `INFO lock` counters of `LOCK.GUARD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub runs: i64,
    pub refusals: i64,
}

pub fn counters(con: &mut Connection) -> Counters {
    Counters {
        runs: lock_stat(con, "lock_guarded_runs").expect("INFO lock has lock_guarded_runs"),
        refusals: lock_stat(con, "lock_guarded_refusals")
            .expect("INFO lock has lock_guarded_refusals"),
    }
}

/// The counters as they must be after `runs` more inner commands ran and `refusals` more
/// `FENCED` replies.
#[track_caller]
pub fn assert_counted(
    con: &mut Connection,
    before: Counters,
    runs: i64,
    refusals: i64,
    what: &str,
) {
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
pub struct World {
    lock_key: String,
    lock: Result<Option<LockInfo>, String>,
    data: Vec<(String, Value)>,
    keys: i64,
    counters: Counters,
    at: Instant,
}

pub fn lock_state(con: &mut Connection, key: &str) -> Result<Option<LockInfo>, String> {
    cmd!(con, "LOCK.INFO", key).map(|v| parse_info(&v))
}

#[allow(unused_imports)]
pub use super::dbsize;

pub fn world(con: &mut Connection, lock_key: &str, data_keys: &[&str]) -> World {
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
pub fn assert_nothing_ran(
    con: &mut Connection,
    before: &World,
    runs: i64,
    refusals: i64,
    what: &str,
) {
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
pub fn assert_refused(
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

pub fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A string, bulk or status value as text.
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_string(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub fn get(con: &mut Connection, key: &str) -> Value {
    cmd!(con, "GET", key).unwrap_or_else(|e| panic!("GET {key}: {e}"))
}

pub fn set(con: &mut Connection, key: &str, value: &str) {
    assert_eq!(cmd!(con, "SET", key, value), Ok(Value::Okay), "SET {key}");
}

/// `LOCK.ACQUIRE key HOLDER TTL`, which must be granted.
pub fn hold(con: &mut Connection, key: &str) -> i64 {
    acquire(con, key, HOLDER, TTL).unwrap_or_else(|| panic!("{key} must be free"))
}

/// An error value inside an `EXEC` reply, or a plain reply.
pub fn item(v: &Value) -> Result<Value, String> {
    match server_error_text(v) {
        Some(e) => Err(e),
        None => Ok(v.clone()),
    }
}

/// `MULTI`, the commands (each must be queued), `EXEC`: its items, errors as `Err`.
pub fn transaction(con: &mut Connection, cmds: &[Vec<Vec<u8>>]) -> Vec<Result<Value, String>> {
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
pub fn exec_raw(con: &mut Connection) -> redis::RedisResult<Value> {
    con.req_command(&redis::cmd("EXEC"))
}

pub fn guard_cmd(key: &str, fence: i64, inner: &[&str]) -> Vec<Vec<u8>> {
    let f = fence.to_string();
    let mut a = vec!["LOCK.GUARD", key, &f];
    a.extend_from_slice(inner);
    args(&a)
}
