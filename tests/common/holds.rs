//! Shared holds as the tests of `SHARED` see them (`tests/shared/`, `tests/shared_queue/`,
//! `tests/shared_persistence/`): `LOCK.ACQUIRE` with options, `LOCK.HOLDERS` parsed into
//! [`Hold`]s, and [`Pending`], a `LOCK.ACQUIRE` answered in a thread of its own.
#![allow(dead_code)]

use std::sync::mpsc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::{client_blocked, lock_stat, run, Server};

/// `LOCK.ACQUIRE key token ttl opts…`: the reply, or the full error text.
pub fn acquire_with(
    con: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    opts: &[&str],
) -> Result<Value, String> {
    let mut c = redis::cmd("LOCK.ACQUIRE");
    c.arg(key).arg(token).arg(ttl).arg(opts);
    run(&c, con)
}

/// An `INFO lock` counter.
pub fn stat(con: &mut Connection, field: &str) -> i64 {
    lock_stat(con, field).unwrap_or_else(|| panic!("INFO lock has no {field}"))
}

// ------------------------------------------------------------------------ LOCK.HOLDERS

/// One entry of `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub token: String,
    pub fence: i64,
    pub ttl: i64,
    pub mode: String,
}

/// A bulk string as text; panics on anything else.
pub fn bulk(v: &Value, what: &str) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{what}: expected a bulk string, got {other:?}"),
    }
}

/// Parses `LOCK.HOLDERS key`: null, or an array of `[token, fence, ttl, mode]` (bulk, integer,
/// integer, bulk string).
pub fn parse_holders(key: &str, v: &Value) -> Option<Vec<Hold>> {
    let items = match v {
        Value::Nil => return None,
        Value::Array(items) => items,
        other => panic!("LOCK.HOLDERS {key}: expected an array or null, got {other:?}"),
    };
    let hold = |h: &Value| match h {
        Value::Array(f) if f.len() == 4 => match (&f[1], &f[2]) {
            (Value::Int(fence), Value::Int(ttl)) => Hold {
                token: bulk(&f[0], &format!("LOCK.HOLDERS {key} token")),
                fence: *fence,
                ttl: *ttl,
                mode: bulk(&f[3], &format!("LOCK.HOLDERS {key} mode")),
            },
            _ => panic!("LOCK.HOLDERS {key} entry: fence and ttl must be integers: {h:?}"),
        },
        other => {
            panic!("LOCK.HOLDERS {key} entry: expected [token, fence, ttl, mode], got {other:?}")
        }
    };
    Some(items.iter().map(hold).collect())
}

/// `LOCK.HOLDERS key`; `None` for null. Panics on an error reply.
pub fn holders(con: &mut Connection, key: &str) -> Option<Vec<Hold>> {
    let mut c = redis::cmd("LOCK.HOLDERS");
    c.arg(key);
    let v = run(&c, con).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}"));
    parse_holders(key, &v)
}

/// What [`tokens`] reads: holds, or a `LOCK.HOLDERS` reply that may be null (no holds).
pub trait HoldList {
    fn hold_list(&self) -> &[Hold];
}

impl HoldList for [Hold] {
    fn hold_list(&self) -> &[Hold] {
        self
    }
}

impl HoldList for Vec<Hold> {
    fn hold_list(&self) -> &[Hold] {
        self
    }
}

impl HoldList for Option<Vec<Hold>> {
    fn hold_list(&self) -> &[Hold] {
        self.as_deref().unwrap_or(&[])
    }
}

/// The holders' tokens, in order.
pub fn tokens<H: HoldList + ?Sized>(hs: &H) -> Vec<String> {
    hs.hold_list().iter().map(|h| h.token.clone()).collect()
}

/// The same holds, observed `elapsed` later: tokens, fences and modes equal, in the same
/// order, and each ttl only counted down.
#[track_caller]
pub fn assert_same_holds(before: &[Hold], after: &[Hold], elapsed: Duration, what: &str) {
    let key = |hs: &[Hold]| -> Vec<(String, i64, String)> {
        hs.iter()
            .map(|h| (h.token.clone(), h.fence, h.mode.clone()))
            .collect()
    };
    assert_eq!(key(after), key(before), "{what}: the holds changed");
    let el = elapsed.as_millis() as i64;
    for (b, a) in before.iter().zip(after) {
        assert!(
            a.ttl <= b.ttl && a.ttl >= b.ttl - el - 100,
            "{what}: {}'s ttl went from {} to {} in {el} ms: it should only count down",
            a.token,
            b.ttl,
            a.ttl
        );
    }
}

// ----------------------------------------------------------------------------- Pending

/// A `LOCK.ACQUIRE` sent on a connection of its own, answered in a thread: the test sees
/// what it was answered, and when, without blocking.
pub struct Pending {
    pub token: String,
    /// The server's `CLIENT ID` of its connection.
    pub id: u64,
    /// The reply and when it arrived.
    pub rx: mpsc::Receiver<(Result<Value, String>, Instant)>,
}

impl Pending {
    /// Sends `LOCK.ACQUIRE key token ttl opts…` and returns without waiting for the reply.
    pub fn send(server: &Server, key: &str, token: &str, ttl: u64, opts: &[&str]) -> Pending {
        let mut con = server.conn();
        let id: u64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut con)
            .expect("CLIENT ID");
        let mut c = redis::cmd("LOCK.ACQUIRE");
        c.arg(key).arg(token).arg(ttl).arg(opts);
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let r = c
                .query::<Value>(&mut con)
                .map_err(|e| match (e.code(), e.detail()) {
                    (Some(code), Some(d)) => format!("{code} {d}"),
                    (Some(code), None) => code.to_string(),
                    _ => format!("connection: {e}"),
                });
            let _ = tx.send((r, Instant::now()));
        });
        Pending {
            token: token.to_string(),
            id,
            rx,
        }
    }

    /// Sends, then waits until the server shows the client blocked: it is in the queue.
    pub fn join(server: &Server, key: &str, token: &str, ttl: u64, opts: &[&str]) -> Pending {
        let mut con = server.conn();
        let p = Pending::send(server, key, token, ttl, opts);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !client_blocked(&mut con, p.id) {
            if let Ok((r, _)) = p.rx.try_recv() {
                panic!("{token} was answered {r:?} at once: it should have been queued");
            }
            assert!(Instant::now() < deadline, "{token} did not block on {key}");
            sleep(Duration::from_millis(5));
        }
        p
    }

    /// The reply and when it arrived, if it comes within `within`.
    pub fn reply_within(&self, within: Duration) -> Option<(Result<Value, String>, Instant)> {
        self.rx.recv_timeout(within).ok()
    }

    /// A fence that must come within `within`; the fence and when it came.
    #[track_caller]
    pub fn granted_within(&self, within: Duration, what: &str) -> (i64, Instant) {
        match self.reply_within(within) {
            Some((Ok(Value::Int(f)), at)) => (f, at),
            Some((other, _)) => panic!("{what}: {} was answered {other:?}", self.token),
            None => panic!("{what}: {} had no reply within {within:?}", self.token),
        }
    }

    /// Null that must come within `within`; when it came.
    #[track_caller]
    pub fn null_within(&self, within: Duration, what: &str) -> Instant {
        match self.reply_within(within) {
            Some((Ok(Value::Nil), at)) => at,
            Some((other, _)) => panic!("{what}: {} must get null, got {other:?}", self.token),
            None => panic!("{what}: {} had no reply within {within:?}", self.token),
        }
    }

    /// No reply within `within`.
    #[track_caller]
    pub fn still_waiting(&self, within: Duration, what: &str) {
        if let Some((r, _)) = self.reply_within(within) {
            panic!(
                "{what}: {} must still wait, but was answered {r:?}",
                self.token
            );
        }
    }
}
