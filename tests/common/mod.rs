//! Test harness: one real `redis-server` per test, with the module loaded ([`Server`], in
//! `server.rs`, which the benchmark shares), and helpers over its replies. Every helper the
//! test areas share is here, once, a file per thing: a raw RESP connection for byte-exact
//! replies (`raw_conn.rs`), the one client blocked in `WAIT` on a socket of its own
//! (`waiter.rs`; `holds::Pending` awaits one in a thread), shared-hold acquires and the one
//! `LOCK.HOLDERS` parser (`holds.rs`), the AOF reader (`aof.rs`), the `DUMP` codec (`dump/`),
//! our clock and a server on a shifted one (`clock.rs`, `wallclock.rs`), `used_memory`
//! (`memory.rs`), timed readings of locks (`snapshots.rs`), the keys the persistence and
//! replication tests move (`travelling_keys.rs`), settings from the environment (`env.rs`), and
//! the helpers of tests that report what they found rather than stop at the first failure
//! (`reporting.rs`). No test is defined here: every test binary includes this module.
#![allow(dead_code)]

use std::collections::HashSet;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

pub mod aof;
pub mod clock;
pub mod dump;
pub mod env;
pub mod guard;
pub mod holds;
pub mod memory;
pub mod model;
pub mod raw_conn;
pub mod reporting;
pub mod server;
pub mod snapshots;
pub mod support_lib;
pub mod travelling_keys;
pub mod waiter;
pub mod wallclock;

#[allow(unused_imports)]
pub use clock::unix_ms;
pub use raw_conn::*;
pub use reporting::*;
pub use server::*;
pub use waiter::*;

/// Runs a command built from its name and arguments; see [`run`].
///
/// `cmd!(con, "LOCK.ACQUIRE", "k", "tok", 1000)` returns `Result<redis::Value, String>`
/// where the error is the full error reply text (`"ERR syntax error"`).
#[macro_export]
macro_rules! cmd {
    ($con:expr, $name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut c = redis::cmd($name);
        $( c.arg($arg); )*
        $crate::common::run(&c, $con)
    }};
}

/// Runs a command; the error is the server's full error text (`"ERR ..."`).
/// Panics on connection errors (e.g. the server crashed).
pub fn run(c: &redis::Cmd, con: &mut Connection) -> Result<Value, String> {
    match c.query::<Value>(con) {
        Ok(v) => Ok(v),
        Err(e) => match e.code() {
            Some(code) => Err(match e.detail() {
                Some(d) => format!("{code} {d}"),
                None => code.to_string(),
            }),
            None => panic!("connection/client error: {e}"),
        },
    }
}

/// Full text of a `Value::ServerError` (as found inside `EXEC` replies).
pub fn server_error_text(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(se) => Some(match se.details() {
            Some(d) => format!("{} {}", se.code(), d),
            None => se.code().to_string(),
        }),
        _ => None,
    }
}

/// Runs a command given as raw byte strings.
pub fn run_raw(con: &mut Connection, args: &[Vec<u8>]) -> Result<Value, String> {
    let mut c = redis::Cmd::new();
    for a in args {
        c.arg(a.as_slice());
    }
    run(&c, con)
}

/// The state `LOCK.INFO` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub holder: Option<Vec<u8>>,
    pub fence: i64,
    pub ttl: i64,
    pub waiters: i64,
    /// `exclusive`, `shared` or `none`.
    pub mode: String,
    pub holders: i64,
}

fn field_name(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("LOCK.INFO field name is not a string: {other:?}"),
    }
}

fn int(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("{what}: expected an integer, got {other:?}"),
    }
}

/// Parses a `LOCK.INFO` reply (flat array or map). `None` for a null reply.
/// Panics unless exactly the fields holder, fence, ttl, waiters, mode, holders are present
/// once each, and consistent with each other (docs/commands.md, `LOCK.INFO`).
pub fn parse_info(v: &Value) -> Option<LockInfo> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) => {
            assert_eq!(items.len(), 12, "LOCK.INFO flat array: {v:?}");
            items.chunks(2).map(|c| (&c[0], &c[1])).collect()
        }
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        other => panic!("LOCK.INFO: unexpected reply {other:?}"),
    };
    assert_eq!(pairs.len(), 6, "LOCK.INFO must have 6 fields: {v:?}");
    let mut seen = HashSet::new();
    let mut info = LockInfo {
        holder: None,
        fence: 0,
        ttl: 0,
        waiters: 0,
        mode: String::new(),
        holders: 0,
    };
    for (k, val) in pairs {
        let name = field_name(k);
        assert!(seen.insert(name.clone()), "duplicate field {name} in {v:?}");
        match name.as_str() {
            "holder" => {
                info.holder = match val {
                    Value::Nil => None,
                    Value::BulkString(b) => Some(b.clone()),
                    other => panic!("holder: expected token or null, got {other:?}"),
                }
            }
            "fence" => info.fence = int(val, "fence"),
            "ttl" => info.ttl = int(val, "ttl"),
            "waiters" => info.waiters = int(val, "waiters"),
            "mode" => info.mode = field_name(val),
            "holders" => info.holders = int(val, "holders"),
            other => panic!("unknown LOCK.INFO field {other} in {v:?}"),
        }
    }
    let consistent = match info.mode.as_str() {
        "exclusive" => info.holder.is_some() && info.holders == 1 && info.ttl >= 0,
        "shared" => info.holder.is_none() && info.holders >= 1 && info.ttl >= 0,
        "none" => info.holder.is_none() && info.holders == 0 && info.ttl == -1,
        _ => false,
    };
    assert!(consistent, "LOCK.INFO fields disagree: {v:?}");
    Some(info)
}

/// `WAIT n ms` for everything the master has done so far, whichever connection did it.
/// `WAIT` waits for the calling connection's own last write only (on a connection that
/// wrote nothing it returns at once), so this connection first makes a write of its own
/// that changes no data: a `PUBLISH`, which the master propagates to its replicas.
pub fn wait_replicas(master: &mut Connection, n: i64, ms: u64) -> Result<Value, String> {
    cmd!(master, "PUBLISH", "redis-lock-tests:sync", "")?;
    cmd!(master, "WAIT", n, ms)
}

/// `LOCK.INFO key`, parsed; panics on an error reply.
pub fn info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    let v = cmd!(con, "LOCK.INFO", key).unwrap_or_else(|e| panic!("LOCK.INFO {key}: {e}"));
    parse_info(&v)
}

fn int_or_nil(v: Value, what: &str) -> Option<i64> {
    match v {
        Value::Nil => None,
        Value::Int(i) => Some(i),
        other => panic!("{what}: expected integer or null, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token ttl`: `Some(fence)` or `None`; panics on an error reply.
pub fn acquire(con: &mut Connection, key: &str, token: &str, ttl: u64) -> Option<i64> {
    let v = cmd!(con, "LOCK.ACQUIRE", key, token, ttl)
        .unwrap_or_else(|e| panic!("LOCK.ACQUIRE {key} {token} {ttl}: {e}"));
    let f = int_or_nil(v, "LOCK.ACQUIRE");
    if let Some(f) = f {
        assert!(f > 0, "fence must be positive, got {f}");
    }
    f
}

/// `LOCK.RELEASE key token`: 1 or 0.
pub fn release(con: &mut Connection, key: &str, token: &str) -> i64 {
    let v = cmd!(con, "LOCK.RELEASE", key, token)
        .unwrap_or_else(|e| panic!("LOCK.RELEASE {key} {token}: {e}"));
    let r = int(&v, "LOCK.RELEASE");
    assert!(r == 0 || r == 1, "LOCK.RELEASE must reply 0 or 1, got {r}");
    r
}

/// `LOCK.EXTEND key token ttl`: 1 or 0.
pub fn extend(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    let v = cmd!(con, "LOCK.EXTEND", key, token, ttl)
        .unwrap_or_else(|e| panic!("LOCK.EXTEND {key} {token} {ttl}: {e}"));
    let r = int(&v, "LOCK.EXTEND");
    assert!(r == 0 || r == 1, "LOCK.EXTEND must reply 0 or 1, got {r}");
    r
}

/// `LOCK.FENCE key token`: `Some(fence)` or `None`.
pub fn fence(con: &mut Connection, key: &str, token: &str) -> Option<i64> {
    let v = cmd!(con, "LOCK.FENCE", key, token)
        .unwrap_or_else(|e| panic!("LOCK.FENCE {key} {token}: {e}"));
    let f = int_or_nil(v, "LOCK.FENCE");
    if let Some(f) = f {
        assert!(f > 0, "fence must be positive, got {f}");
    }
    f
}

/// `EXISTS key == 1`.
pub fn exists(con: &mut Connection, key: &str) -> bool {
    match cmd!(con, "EXISTS", key) {
        Ok(Value::Int(n)) => n == 1,
        other => panic!("EXISTS {key}: {other:?}"),
    }
}

/// `WAIT n ms` ([`wait_replicas`]): how many replicas acknowledged.
pub fn replica_acks(master: &mut Connection, n: i64, ms: u64) -> i64 {
    match wait_replicas(master, n, ms) {
        Ok(Value::Int(acks)) => acks,
        other => panic!("WAIT {n} {ms}: {other:?}"),
    }
}

/// Waits until the one replica has processed everything the master sent (5 s at most).
#[track_caller]
pub fn sync_replica(master: &mut Connection) {
    assert_eq!(
        wait_replicas(master, 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack within 5 s"
    );
}

/// Waits until `replica` reports its link to the master up (15 s at most).
pub fn wait_link_up(replica: &mut Connection) {
    let up = wait_until(Duration::from_secs(15), || {
        info_field(replica, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert!(up, "replica link not up after 15s");
}

/// A master and a replica of it, linked.
pub fn replica_pair() -> (Server, Server) {
    let m = Server::new();
    let r = Server::start(Opts::new().replicaof(m.port));
    wait_link_up(&mut r.conn());
    (m, r)
}

/// Polls `f` every 10ms until it is true or `timeout` passes; returns whether it became true.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        sleep(Duration::from_millis(10));
    }
}

/// Waits until no RDB save or AOF rewrite is running or scheduled (20 s at most).
pub fn wait_persistence_idle(c: &mut Connection) {
    wait_persistence_idle_within(c, Duration::from_secs(20));
}

/// [`wait_persistence_idle`], for at most `limit`.
pub fn wait_persistence_idle_within(c: &mut Connection, limit: Duration) {
    let idle = wait_until(limit, || {
        info_field(c, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    assert!(
        idle,
        "background save/rewrite did not finish in {}s",
        limit.as_secs()
    );
}

/// A field of `INFO <section>`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .expect("INFO section");
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// An integer field of `INFO <section>` that must be there.
pub fn info_int(con: &mut Connection, section: &str, field: &str) -> i64 {
    let v = info_field(con, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no field {field}"));
    v.parse()
        .unwrap_or_else(|_| panic!("INFO {section} {field}: not an integer: {v:?}"))
}

/// `DBSIZE`.
pub fn dbsize(con: &mut Connection) -> i64 {
    match cmd!(con, "DBSIZE") {
        Ok(Value::Int(n)) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// Asserts that `r` is an error whose text starts with `prefix`.
#[track_caller]
pub fn assert_err_starts(r: &Result<Value, String>, prefix: &str) {
    match r {
        Err(e) => assert!(
            e.starts_with(prefix),
            "expected an error starting with {prefix:?}, got {e:?}"
        ),
        Ok(v) => panic!("expected an error starting with {prefix:?}, got reply {v:?}"),
    }
}

/// Asserts that `after` is the same lock as `before`, observed `elapsed` later: same holder,
/// fence and waiters, and a ttl that only counted down (within `slack_ms`).
#[track_caller]
pub fn assert_same_lock(
    before: &Option<LockInfo>,
    after: &Option<LockInfo>,
    elapsed: Duration,
    slack_ms: i64,
) {
    match (before, after) {
        (None, None) => {}
        (Some(b), Some(a)) => {
            assert_eq!(a.holder, b.holder, "holder changed: {b:?} -> {a:?}");
            assert_eq!(a.fence, b.fence, "fence changed: {b:?} -> {a:?}");
            assert_eq!(a.waiters, b.waiters, "waiters changed: {b:?} -> {a:?}");
            if b.ttl >= 0 {
                let el = elapsed.as_millis() as i64;
                assert!(
                    a.ttl <= b.ttl && a.ttl >= b.ttl - el - slack_ms,
                    "ttl should only count down: {} -> {} in {el}ms",
                    b.ttl,
                    a.ttl
                );
            } else {
                assert_eq!(a.ttl, b.ttl);
            }
        }
        _ => panic!("lock changed: {before:?} -> {after:?}"),
    }
}

/// A unique token.
pub fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// CRC-64/Jones as Redis computes it over DUMP payloads (reflected, init 0, no xorout), for
/// tests that build or alter `RESTORE` payloads.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 reflected
    let mut crc = 0u64;
    for &b in data {
        crc ^= b as u64;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// A connection to `server` authenticated as `user` (password `pw`).
pub fn conn_as(server: &Server, user: &str) -> Connection {
    let mut con = server.conn();
    assert_eq!(cmd!(&mut con, "AUTH", user, "pw"), Ok(Value::Okay));
    con
}

/// A connection to `server` with database `db` selected.
pub fn conn_in(server: &Server, db: i64) -> Connection {
    let mut con = server.conn();
    if db != 0 {
        cmd!(&mut con, "SELECT", db).unwrap_or_else(|e| panic!("SELECT {db}: {e}"));
    }
    con
}

/// `CONFIG GET name`: the value of one setting, which must exist.
pub fn config_get(con: &mut Connection, name: &str) -> String {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    assert_eq!(v.len(), 2, "CONFIG GET {name}: {v:?}");
    v[1].clone()
}

/// An integer field of `INFO lock` (`lock_waiting_clients`, …); `None` if it is absent.
pub fn lock_stat(con: &mut Connection, field: &str) -> Option<i64> {
    info_field(con, "lock", field).map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("INFO lock {field}: not an integer: {v:?}"))
    })
}

/// An integer field of `INFO lock` that must be there.
pub fn stat(con: &mut Connection, field: &str) -> i64 {
    lock_stat(con, field).unwrap_or_else(|| panic!("INFO lock has no {field}"))
}

/// `INFO lock` field `lock_waiting_clients`.
pub fn waiting_clients(con: &mut Connection) -> i64 {
    lock_stat(con, "lock_waiting_clients").expect("INFO lock has lock_waiting_clients")
}

/// `CLIENT UNBLOCK id [ERROR]`: 1 if the server unblocked it, 0 if not.
pub fn client_unblock(con: &mut Connection, id: u64, error: bool) -> i64 {
    let mut c = redis::cmd("CLIENT");
    c.arg("UNBLOCK").arg(id);
    if error {
        c.arg("ERROR");
    }
    match run(&c, con) {
        Ok(Value::Int(n)) => n,
        other => panic!("CLIENT UNBLOCK {id}: {other:?}"),
    }
}

/// `CLIENT LIST ID id`: the client's line, empty once it is gone.
fn client_list_entry(con: &mut Connection, id: u64) -> String {
    redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .expect("CLIENT LIST ID")
}

/// Whether client `id` is still connected (`CLIENT LIST ID`).
pub fn client_connected(con: &mut Connection, id: u64) -> bool {
    !client_list_entry(con, id).trim().is_empty()
}

/// Whether client `id` is blocked (`CLIENT LIST ID`: its flags include `b`).
pub fn client_blocked(con: &mut Connection, id: u64) -> bool {
    client_list_entry(con, id)
        .split_whitespace()
        .find_map(|f| f.strip_prefix("flags="))
        .is_some_and(|flags| flags.contains('b'))
}
