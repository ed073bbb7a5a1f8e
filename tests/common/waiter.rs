//! A client blocked in `LOCK.ACQUIRE … WAIT` on a connection of its own, and what it was
//! answered: the one blocked-client helper of the tests. ([`super::holds::Pending`] is a
//! `Waiter` whose reply a thread of its own awaits.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::*;

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

impl Reply {
    /// The reply as redis-rs shows it: a value, or the error's full text.
    pub fn into_value(self) -> Result<Value, String> {
        match self {
            Reply::Fence(f) => Ok(Value::Int(f)),
            Reply::Null => Ok(Value::Nil),
            Reply::Error(e) => Err(e),
            Reply::Status(s) if s == "OK" => Ok(Value::Okay),
            Reply::Status(s) => Ok(Value::SimpleString(s)),
        }
    }
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
        Waiter::send_acquire(server.port, db, key, token, ttl, &["WAIT", timeout])
    }

    /// Sends `LOCK.ACQUIRE key token ttl opts…` in database `db` (with `WAIT` among `opts`,
    /// it may block) and returns without reading.
    pub fn send_opts(
        server: &Server,
        db: i64,
        key: &str,
        token: &str,
        ttl: u64,
        opts: &[&str],
    ) -> Waiter {
        Waiter::send_acquire(server.port, db, key, token, &ttl.to_string(), opts)
    }

    /// The one way a waiter starts: its own socket to the server on `port`, `SELECT db` (when
    /// not 0) and `CLIENT ID`, then `LOCK.ACQUIRE key token ttl opts…`, written, not read.
    pub fn send_acquire(
        port: u16,
        db: i64,
        key: &str,
        token: &str,
        ttl: &str,
        opts: &[&str],
    ) -> Waiter {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect waiter");
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
        let mut args = vec!["LOCK.ACQUIRE", key, token, ttl];
        args.extend_from_slice(opts);
        w.write(&args);
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

    /// The next reply if it comes within `within`, as redis-rs shows a reply: a value, or the
    /// error's full text (`"connection: closed"` when the server closed the connection with
    /// no reply). `None` if nothing came.
    pub fn value_within(&mut self, within: Duration) -> Option<Result<Value, String>> {
        match self.read(within) {
            Got::Reply(r) => Some(r.into_value()),
            Got::Nothing => None,
            Got::Closed => Some(Err("connection: closed".to_string())),
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
