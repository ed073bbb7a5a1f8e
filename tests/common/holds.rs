//! Shared holds as the tests of `SHARED` see them: `LOCK.ACQUIRE` with options, the one parser
//! of `LOCK.HOLDERS` (into [`Hold`]s, tokens as text, or [`Holder`]s, tokens as bytes), and
//! [`Pending`], a `LOCK.ACQUIRE` answered in a thread of its own.
#![allow(dead_code)]

use std::sync::mpsc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::{client_blocked, run, Server, Waiter};

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

/// A fence (`Some`) or null (`None`); panics on anything else.
#[track_caller]
pub fn fence_or_nil(r: Result<Value, String>, what: &str) -> Option<i64> {
    match r {
        Ok(Value::Int(f)) if f > 0 => Some(f),
        Ok(Value::Nil) => None,
        other => panic!("{what}: expected a fence or null, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key token ttl SHARED opts…`: `Some(fence)` or `None`.
#[track_caller]
pub fn try_shared(
    con: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    opts: &[&str],
) -> Option<i64> {
    let mut all = vec!["SHARED"];
    all.extend_from_slice(opts);
    let what = format!("LOCK.ACQUIRE {key} {token} {ttl} {}", all.join(" "));
    fence_or_nil(acquire_with(con, key, token, ttl, &all), &what)
}

/// `LOCK.ACQUIRE key token ttl SHARED [LIMIT n]`: `Some(fence)` or `None`.
#[track_caller]
pub fn acquire_shared(
    con: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    limit: Option<u64>,
) -> Option<i64> {
    match limit {
        Some(n) => try_shared(con, key, token, ttl, &["LIMIT", &n.to_string()]),
        None => try_shared(con, key, token, ttl, &[]),
    }
}

/// A shared acquire that must be granted: its fence.
#[track_caller]
pub fn shared(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    try_shared(con, key, token, ttl, &[])
        .unwrap_or_else(|| panic!("{token}: SHARED on {key} must be granted"))
}

/// An exclusive acquire that must be granted: its fence.
#[track_caller]
pub fn exclusive(con: &mut Connection, key: &str, token: &str, ttl: u64) -> i64 {
    super::acquire(con, key, token, ttl)
        .unwrap_or_else(|| panic!("{token}: exclusive on {key} must be granted"))
}

/// An `INFO lock` counter, which must be there.
#[allow(unused_imports)]
pub use super::stat;

// ------------------------------------------------------------------------ LOCK.HOLDERS

/// One entry of `LOCK.HOLDERS`, its token as text (tests choose their tokens).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub token: String,
    pub fence: i64,
    pub ttl: i64,
    pub mode: String,
}

/// One entry of `LOCK.HOLDERS`, its token as the bytes it is (tokens from a fuzzer or a
/// payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    /// `exclusive` or `shared`.
    pub mode: String,
}

/// A bulk string as text; panics on anything else.
pub fn bulk(v: &Value, what: &str) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{what}: expected a bulk string, got {other:?}"),
    }
}

/// Parses a `LOCK.HOLDERS` reply: null, or an array of `[token, fence, ttl, mode]` (bulk
/// string, integer, integer, bulk string); the error says what is not.
pub fn parse_holder_entries(v: &Value) -> Result<Option<Vec<Holder>>, String> {
    let items = match v {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("expected an array or null, got {other:?}")),
    };
    let mut holds = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(e) = item else {
            return Err(format!("entry {item:?} is not an array"));
        };
        match &e[..] {
            [Value::BulkString(t), Value::Int(f), Value::Int(ttl), Value::BulkString(m)] => holds
                .push(Holder {
                    token: t.clone(),
                    fence: *f,
                    ttl: *ttl,
                    mode: String::from_utf8_lossy(m).into_owned(),
                }),
            _ => return Err(format!("entry {item:?} is not [bulk, int, int, bulk]")),
        }
    }
    Ok(Some(holds))
}

/// [`parse_holder_entries`], tokens as bytes; panics unless the reply has that shape.
pub fn parse_holders_raw(v: &Value) -> Option<Vec<Holder>> {
    parse_holder_entries(v).unwrap_or_else(|e| panic!("LOCK.HOLDERS: {e}"))
}

/// Parses `LOCK.HOLDERS key` ([`parse_holder_entries`]), tokens as text; panics unless the
/// reply has that shape.
pub fn parse_holders(key: &str, v: &Value) -> Option<Vec<Hold>> {
    let holds = parse_holder_entries(v).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}"));
    holds.map(|hs| {
        hs.into_iter()
            .map(|h| Hold {
                token: String::from_utf8_lossy(&h.token).into_owned(),
                fence: h.fence,
                ttl: h.ttl,
                mode: h.mode,
            })
            .collect()
    })
}

/// `LOCK.HOLDERS key`, tokens as bytes; `None` for null. Panics on an error reply.
pub fn holders_raw(con: &mut Connection, key: &str) -> Option<Vec<Holder>> {
    let mut c = redis::cmd("LOCK.HOLDERS");
    c.arg(key);
    let v = run(&c, con).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}"));
    parse_holders_raw(&v)
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

/// A `LOCK.ACQUIRE` sent by a [`Waiter`] on a connection of its own, whose reply a thread
/// awaits: the test sees what it was answered, and when it arrived, without blocking.
pub struct Pending {
    pub key: String,
    pub token: String,
    /// The server's `CLIENT ID` of its connection.
    pub id: u64,
    /// The reply (an error's full text; `"connection: …"` when the server closed the
    /// connection with no reply) and when it arrived.
    pub rx: mpsc::Receiver<(Result<Value, String>, Instant)>,
}

impl Pending {
    /// Sends `LOCK.ACQUIRE key token ttl opts…` and returns without waiting for the reply.
    pub fn send(server: &Server, key: &str, token: &str, ttl: u64, opts: &[&str]) -> Pending {
        Pending::send_to(server.port, key, token, ttl, opts)
    }

    /// [`Pending::send`] to the server on `port`.
    pub fn send_to(port: u16, key: &str, token: &str, ttl: u64, opts: &[&str]) -> Pending {
        let mut w = Waiter::send_acquire(port, 0, key, token, &ttl.to_string(), opts);
        let id = w.id;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            // As long as the server keeps the connection: a day stands for no limit.
            if let Some(r) = w.value_within(Duration::from_secs(86_400)) {
                let _ = tx.send((r, Instant::now()));
            }
        });
        Pending {
            key: key.to_string(),
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
