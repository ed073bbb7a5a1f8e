//! Test harness: one real `redis-server` per test, with the module loaded ([`Server`], in
//! `server.rs`, which the benchmark shares), and helpers over its replies.
#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

pub mod aof;
pub mod dump;
pub mod guard;
pub mod holds;
pub mod model;
pub mod server;

pub use server::*;

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

/// A raw RESP connection for checking reply bytes exactly.
pub struct RawConn {
    s: TcpStream,
}

/// A command as RESP bytes, for tests that write to a plain socket.
pub fn resp_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    req
}

impl Server {
    /// A plain socket for byte-exact protocol checks.
    pub fn raw(&self) -> RawConn {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect raw");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        RawConn { s }
    }
}

impl RawConn {
    /// Sends a command and returns the complete raw reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.s.write_all(&resp_command(args)).expect("raw write");
        let mut buf = Vec::new();
        loop {
            if let Some(n) = resp_len(&buf, 0) {
                assert_eq!(n, buf.len(), "more bytes than one reply: {buf:?}");
                return buf;
            }
            let mut chunk = [0u8; 4096];
            let n = self.s.read(&mut chunk).expect("raw read");
            assert!(n > 0, "connection closed; got {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Length of the complete RESP2/RESP3 value starting at `at`, if all of it is in `b`.
fn resp_len(b: &[u8], at: usize) -> Option<usize> {
    let line_end = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let head = *b.get(at)?;
    let line = std::str::from_utf8(&b[at + 1..line_end]).ok()?;
    let after = line_end + 2;
    match head {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after - at),
        b'$' | b'!' | b'=' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some(after - at);
            }
            let end = after + n as usize + 2;
            (b.len() >= end).then_some(end - at)
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some(after - at);
            }
            let items = if head == b'%' || head == b'|' {
                2 * n
            } else {
                n
            };
            let mut pos = after;
            for _ in 0..items {
                pos += resp_len(b, pos)?;
            }
            Some(pos - at)
        }
        _ => panic!("unexpected RESP type byte {head:#x} in {b:?}"),
    }
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
/// once each, and consistent with each other (README, `LOCK.INFO`).
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
    let idle = wait_until(Duration::from_secs(20), || {
        info_field(c, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    assert!(idle, "background save/rewrite did not finish in 20s");
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

/// A connection to `server` with database `db` selected.
pub fn conn_in(server: &Server, db: i64) -> Connection {
    let mut con = server.conn();
    if db != 0 {
        cmd!(&mut con, "SELECT", db).unwrap_or_else(|e| panic!("SELECT {db}: {e}"));
    }
    con
}

/// An integer field of `INFO lock` (`lock_waiting_clients`, …); `None` if it is absent.
pub fn lock_stat(con: &mut Connection, field: &str) -> Option<i64> {
    info_field(con, "lock", field).map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("INFO lock {field}: not an integer: {v:?}"))
    })
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

/// Whether client `id` is still connected (`CLIENT LIST ID`).
pub fn client_connected(con: &mut Connection, id: u64) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .expect("CLIENT LIST ID");
    !list.trim().is_empty()
}

/// Whether client `id` is blocked (`CLIENT LIST ID`: its flags include `b`).
pub fn client_blocked(con: &mut Connection, id: u64) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .expect("CLIENT LIST ID");
    list.split_whitespace()
        .find_map(|f| f.strip_prefix("flags="))
        .is_some_and(|flags| flags.contains('b'))
}

/// What a client blocked in `LOCK.ACQUIRE … WAIT` was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An integer: it holds the lock with this fence.
    Fence(i64),
    /// Null.
    Null,
    /// An error reply, its full text (`"UNBLOCKED …"`).
    Error(String),
    /// A simple string (`+OK`, `+PONG`).
    Status(String),
}

/// A client blocked (or about to block) in `LOCK.ACQUIRE … WAIT`, on its own plain socket, so
/// that a test controls exactly when it joins and sees exactly what it is answered. Before
/// the acquire it asks `CLIENT ID`, so that a test can `CLIENT KILL ID` / `CLIENT UNBLOCK` it.
pub struct Waiter {
    s: TcpStream,
    pub token: String,
    pub key: String,
    pub db: i64,
    /// The server's `CLIENT ID` of this connection.
    pub id: u64,
    /// When the `LOCK.ACQUIRE` was written.
    pub sent: Instant,
    /// When the last reply was complete.
    pub answered: Option<Instant>,
    buf: Vec<u8>,
    closed: bool,
}

/// How a read ended.
enum Got {
    Reply(Reply),
    Nothing,
    Closed,
}

impl Waiter {
    /// Sends `LOCK.ACQUIRE key token ttl WAIT timeout` in db 0 and returns without reading.
    pub fn send(server: &Server, key: &str, token: &str, ttl: u64, timeout: u64) -> Waiter {
        Waiter::send_in(server, 0, key, token, ttl, timeout)
    }

    /// [`Waiter::send`] in database `db`.
    pub fn send_in(
        server: &Server,
        db: i64,
        key: &str,
        token: &str,
        ttl: u64,
        timeout: u64,
    ) -> Waiter {
        Waiter::send_args(
            server,
            db,
            key,
            token,
            &ttl.to_string(),
            &timeout.to_string(),
        )
    }

    /// [`Waiter::send_in`] with the ttl and timeout as raw argument text.
    pub fn send_args(
        server: &Server,
        db: i64,
        key: &str,
        token: &str,
        ttl: &str,
        timeout: &str,
    ) -> Waiter {
        let s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect waiter");
        s.set_nodelay(true).ok();
        let mut w = Waiter {
            s,
            token: token.to_string(),
            key: key.to_string(),
            db,
            id: 0,
            sent: Instant::now(),
            answered: None,
            buf: Vec::new(),
            closed: false,
        };
        if db != 0 {
            let db = db.to_string();
            match w.call_now(&["SELECT", &db]) {
                Reply::Status(s) if s == "OK" => {}
                other => panic!("SELECT {db}: {other:?}"),
            }
        }
        w.id = match w.call_now(&["CLIENT", "ID"]) {
            Reply::Fence(id) => id as u64,
            other => panic!("CLIENT ID: {other:?}"),
        };
        w.answered = None;
        w.sent = Instant::now();
        w.write(&["LOCK.ACQUIRE", key, token, ttl, "WAIT", timeout]);
        w
    }

    /// Sends, then waits until the server counts one more waiter on `key` (db 0), so that
    /// the order of joining is the order of calls.
    pub fn join(server: &Server, key: &str, token: &str, ttl: u64, timeout: u64) -> Waiter {
        Waiter::join_in(server, 0, key, token, ttl, timeout)
    }

    /// [`Waiter::join`] in database `db`.
    pub fn join_in(
        server: &Server,
        db: i64,
        key: &str,
        token: &str,
        ttl: u64,
        timeout: u64,
    ) -> Waiter {
        let mut con = conn_in(server, db);
        let before = info(&mut con, key).map_or(0, |i| i.waiters);
        let w = Waiter::send_in(server, db, key, token, ttl, timeout);
        assert!(
            wait_until(Duration::from_secs(5), || {
                info(&mut con, key).map_or(0, |i| i.waiters) == before + 1
            }),
            "waiter {token} did not join the queue of {key} (db {db})"
        );
        w
    }

    /// Sends, then waits until the server shows this client blocked (`CLIENT LIST` flag
    /// `b`), whatever other clients of the queue do meanwhile (one may time out).
    pub fn join_blocked_in(
        server: &Server,
        db: i64,
        key: &str,
        token: &str,
        ttl: u64,
        timeout: u64,
    ) -> Waiter {
        let mut con = server.conn();
        let w = Waiter::send_in(server, db, key, token, ttl, timeout);
        assert!(
            wait_until(Duration::from_secs(5), || client_blocked(&mut con, w.id)),
            "waiter {token} did not block on {key} (db {db})"
        );
        w
    }

    fn write(&mut self, args: &[&str]) {
        self.s.write_all(&resp_command(args)).expect("waiter write");
    }

    /// Sends a command on this connection and reads its reply (10 s at most).
    pub fn call_now(&mut self, args: &[&str]) -> Reply {
        self.write(args);
        match self.read(Duration::from_secs(10)) {
            Got::Reply(r) => r,
            Got::Nothing => panic!("no reply to {args:?} within 10s"),
            Got::Closed => panic!("connection closed before a reply to {args:?}"),
        }
    }

    /// Reads one reply if it comes within `within` (with a zero `within`, only what has
    /// already arrived).
    fn read(&mut self, within: Duration) -> Got {
        let deadline = Instant::now() + within;
        let mut last_try = false;
        loop {
            if let Some((reply, used)) = parse_simple_reply(&self.buf) {
                self.buf.drain(..used);
                self.answered = Some(Instant::now());
                return Got::Reply(reply);
            }
            if self.closed {
                return Got::Closed;
            }
            if last_try {
                return Got::Nothing;
            }
            let now = Instant::now();
            let mut chunk = [0u8; 512];
            let r = if now >= deadline {
                // One last look at what has already arrived.
                last_try = true;
                self.s.set_nonblocking(true).unwrap();
                let r = self.s.read(&mut chunk);
                self.s.set_nonblocking(false).unwrap();
                r
            } else {
                self.s.set_read_timeout(Some(deadline - now)).unwrap();
                self.s.read(&mut chunk)
            };
            match r {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                // A reset counts as closed (CLIENT KILL may reset the connection).
                Err(_) => self.closed = true,
            }
        }
    }

    /// Reads one reply: `Some(fence)` or `None` for null (30 s at most). Panics on an error
    /// reply or a closed connection.
    pub fn reply(&mut self) -> Option<i64> {
        match self.read(Duration::from_secs(30)) {
            Got::Reply(Reply::Fence(f)) => Some(f),
            Got::Reply(Reply::Null) => None,
            Got::Reply(other) => panic!("waiter {}: unexpected reply {other:?}", self.token),
            Got::Nothing => panic!("waiter {}: no reply within 30s", self.token),
            Got::Closed => panic!("waiter {}: connection closed before a reply", self.token),
        }
    }

    /// The next reply if it comes within `within`; `None` if none came (or the connection
    /// was closed without one: see [`Waiter::is_closed`]).
    pub fn reply_within(&mut self, within: Duration) -> Option<Reply> {
        match self.read(within) {
            Got::Reply(r) => Some(r),
            Got::Nothing | Got::Closed => None,
        }
    }

    /// The next reply if it comes by `deadline`.
    pub fn reply_by(&mut self, deadline: Instant) -> Option<Reply> {
        self.reply_within(deadline.saturating_duration_since(Instant::now()))
    }

    /// True if a reply is already waiting to be read (it stays unread).
    pub fn has_reply(&mut self) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        self.s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = self.s.peek(&mut b);
        self.s.set_nonblocking(false).unwrap();
        matches!(r, Ok(n) if n > 0)
    }

    /// Whether the server closed the connection (within `within`), with no reply before.
    /// A reply that arrives instead is returned as `Err`.
    pub fn closed_within(&mut self, within: Duration) -> Result<bool, Reply> {
        match self.read(within) {
            Got::Reply(r) => Err(r),
            Got::Nothing => Ok(false),
            Got::Closed => Ok(true),
        }
    }

    /// Whether the connection is known to be closed by the server.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

/// One complete reply at the start of `b`, if all of it is there: the simple types a waiter
/// gets (integer, null, error, status, and a bulk string read as a status).
fn parse_simple_reply(b: &[u8]) -> Option<(Reply, usize)> {
    let end = b.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&b[1..end]).into_owned();
    let after = end + 2;
    let reply = match b[0] {
        b':' => Reply::Fence(line.parse().expect("integer reply")),
        b'_' => Reply::Null,
        b'-' => Reply::Error(line),
        b'+' => Reply::Status(line),
        b'$' | b'*' if line.starts_with('-') => Reply::Null,
        b'$' => {
            let n: usize = line.parse().expect("bulk length");
            if b.len() < after + n + 2 {
                return None;
            }
            let s = String::from_utf8_lossy(&b[after..after + n]).into_owned();
            return Some((Reply::Status(s), after + n + 2));
        }
        other => panic!("unexpected reply type {:?} in {:?}", other as char, b),
    };
    Some((reply, after))
}

// ------------------------------------------------------------ helpers for reporting tests

/// `LOCK.INFO`, shown with the holder as text in failure messages.
pub struct Lock(pub LockInfo);

impl std::ops::Deref for Lock {
    type Target = LockInfo;
    fn deref(&self) -> &LockInfo {
        &self.0
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holder = match &self.0.holder {
            Some(h) => String::from_utf8_lossy(h).into_owned(),
            None => "(none)".to_string(),
        };
        write!(
            f,
            "holder={holder} fence={} ttl={} waiters={}",
            self.0.fence, self.0.ttl, self.0.waiters
        )
    }
}

/// `LOCK.INFO key`; `None` if there is no lock.
pub fn lock_info(con: &mut Connection, key: &str) -> Option<Lock> {
    info(con, key).map(Lock)
}

/// Failures that do not stop a test, so that one run reports all of them.
#[derive(Default)]
pub struct Findings(pub Vec<String>);

impl Findings {
    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }

    pub fn fail(&mut self, msg: String) {
        self.0.push(msg);
    }

    /// Panics with every finding, one a line.
    #[track_caller]
    pub fn done(self, what: &str) {
        if !self.0.is_empty() {
            panic!(
                "{what}: {} problem(s):\n  - {}",
                self.0.len(),
                self.0.join("\n  - ")
            );
        }
    }
}

/// The message of a caught panic.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// A command as byte strings, from its words.
pub fn args(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// Runs a command given as byte strings; panics on an error reply.
pub fn must(con: &mut Connection, cmd: &[Vec<u8>]) -> Value {
    run_raw(con, cmd).unwrap_or_else(|e| panic!("{}: {e}", show_cmd(cmd)))
}

/// A command as text, for messages (long arguments shown by their length).
pub fn show_cmd(cmd: &[Vec<u8>]) -> String {
    cmd.iter()
        .map(|a| {
            if a.len() > 40 {
                format!("<{} bytes>", a.len())
            } else {
                String::from_utf8_lossy(a).into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `MULTI`, the commands, `EXEC`; panics on an error anywhere, also inside `EXEC`.
pub fn exec(con: &mut Connection, cmds: &[Vec<Vec<u8>>]) -> Vec<Value> {
    must(con, &args(&["MULTI"]));
    for c in cmds {
        match run_raw(con, c) {
            Ok(Value::SimpleString(s)) if s == "QUEUED" => {}
            other => panic!("MULTI: {} was not queued: {other:?}", show_cmd(c)),
        }
    }
    match must(con, &args(&["EXEC"])) {
        Value::Array(items) => {
            for (c, v) in cmds.iter().zip(&items) {
                if let Some(e) = server_error_text(v) {
                    panic!("inside EXEC, {} failed: {e}", show_cmd(c));
                }
            }
            items
        }
        other => panic!("EXEC: {other:?}"),
    }
}

/// What a waiter got by `deadline`, for messages.
/// What a waiter got (`None`: nothing), for messages.
pub fn got(r: &Option<Reply>) -> String {
    match r {
        None => "no reply".to_string(),
        Some(r) => format!("{r:?}"),
    }
}

/// Runs `f` (which returns its findings), turning a panic into one more finding, so that a
/// test that runs several cases can report each of them.
pub fn findings_of(f: impl FnOnce() -> Vec<String>) -> Vec<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| vec![format!("stopped: {}", panic_text(&*p))])
}
