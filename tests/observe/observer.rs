//! A client blocked in `LOCK.OBSERVE`, on a plain socket of its own (RESP2 or RESP3): its
//! `CLIENT ID`, when its command was sent, and when and what it was answered. A plain socket
//! rather than a `redis::Connection`, so that a test can look for a reply without waiting
//! for one and without losing the connection to a read timeout; the `redis` crate's parser
//! still reads the reply, maps and RESP3 nulls included.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::{
    client_blocked, parse_info, resp_command, server_error_text, wait_until, LockInfo, Server,
};

/// The protocol an observer speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Resp2,
    Resp3,
}

/// What an observer was answered.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A `LOCK.INFO` reply (`None`: null).
    Info(Option<LockInfo>),
    /// An error reply, its full text.
    Error(String),
}

pub struct Observer {
    s: TcpStream,
    parser: redis::Parser,
    pub proto: Proto,
    /// The server's `CLIENT ID` of this connection.
    pub id: u64,
    /// When the last command (the `LOCK.OBSERVE`) was written.
    pub sent: Instant,
    /// When its reply began to arrive.
    pub answered: Option<Instant>,
    /// The reply, as the client library reads it.
    pub reply: Option<Value>,
    /// The bytes of the reply, as they came.
    pub raw: Vec<u8>,
    closed: bool,
}

impl Observer {
    /// A connection, after `HELLO 3` for RESP3, with its `CLIENT ID` asked; nothing sent yet.
    pub fn connect(server: &Server, proto: Proto) -> Observer {
        let s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect observer");
        s.set_nodelay(true).ok();
        let mut o = Observer {
            s,
            parser: redis::Parser::new(),
            proto,
            id: 0,
            sent: Instant::now(),
            answered: None,
            reply: None,
            raw: Vec::new(),
            closed: false,
        };
        if proto == Proto::Resp3 {
            match o.call(&["HELLO", "3"]) {
                Value::Map(_) => {}
                other => panic!("HELLO 3: {other:?}"),
            }
        }
        o.id = match o.call(&["CLIENT", "ID"]) {
            Value::Int(id) => id as u64,
            other => panic!("CLIENT ID: {other:?}"),
        };
        o
    }

    /// Sends `LOCK.OBSERVE key seen timeout` on a new RESP2 connection, without reading.
    pub fn send(server: &Server, key: &str, seen: i64, timeout: u64) -> Observer {
        Observer::send_as(server, Proto::Resp2, key, seen, timeout)
    }

    /// [`Observer::send`] in `proto`.
    pub fn send_as(server: &Server, proto: Proto, key: &str, seen: i64, timeout: u64) -> Observer {
        let mut o = Observer::connect(server, proto);
        o.observe(key, seen, timeout);
        o
    }

    /// Sends, then waits until the server shows the client blocked (`CLIENT LIST` flag `b`).
    pub fn join(server: &Server, key: &str, seen: i64, timeout: u64) -> Observer {
        Observer::join_as(server, Proto::Resp2, key, seen, timeout)
    }

    /// [`Observer::join`] in `proto`.
    pub fn join_as(server: &Server, proto: Proto, key: &str, seen: i64, timeout: u64) -> Observer {
        let o = Observer::send_as(server, proto, key, seen, timeout);
        o.wait_blocked(server);
        o
    }

    /// Waits until the server shows this client blocked (5 s at most).
    pub fn wait_blocked(&self, server: &Server) {
        let mut con = server.conn();
        assert!(
            wait_until(Duration::from_secs(5), || client_blocked(&mut con, self.id)),
            "observer {} did not block",
            self.id
        );
    }

    /// Writes `LOCK.OBSERVE key seen timeout` on this connection.
    pub fn observe(&mut self, key: &str, seen: i64, timeout: u64) {
        self.send_args(&["LOCK.OBSERVE", key, &seen.to_string(), &timeout.to_string()]);
    }

    /// Writes a command without reading; its reply is for [`Observer::reply_within`].
    pub fn send_args(&mut self, args: &[&str]) {
        self.answered = None;
        self.reply = None;
        self.raw.clear();
        self.sent = Instant::now();
        self.s
            .write_all(&resp_command(args))
            .expect("observer write");
    }

    /// Sends a command and reads its reply (10 s at most).
    pub fn call(&mut self, args: &[&str]) -> Value {
        self.send_args(args);
        self.reply_within(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no reply to {args:?} within 10s"))
    }

    /// The reply, if it begins to arrive within `within` (with a zero `within`, only one
    /// that is already there). Once it begins, the rest of it is read whatever the time.
    pub fn reply_within(&mut self, within: Duration) -> Option<Value> {
        if self.reply.is_some() {
            return self.reply.clone();
        }
        if self.closed || !self.wait_readable(within) {
            return None;
        }
        self.answered = Some(Instant::now());
        self.s
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let tee = Tee {
            s: &mut self.s,
            copy: &mut self.raw,
        };
        let v = match self.parser.parse_value(tee) {
            Ok(v) => v,
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                self.closed = true;
                self.answered = None;
                return None;
            }
            Err(e) => panic!("observer {}: unreadable reply: {e}", self.id),
        };
        self.reply = Some(v.clone());
        Some(v)
    }

    /// Whether bytes (or the end of the stream) arrive within `within`.
    fn wait_readable(&mut self, within: Duration) -> bool {
        let mut b = [0u8; 1];
        let r = if within.is_zero() {
            self.s.set_nonblocking(true).unwrap();
            let r = self.s.peek(&mut b);
            self.s.set_nonblocking(false).unwrap();
            r
        } else {
            self.s.set_read_timeout(Some(within)).unwrap();
            self.s.peek(&mut b)
        };
        match r {
            Ok(0) => {
                self.closed = true;
                false
            }
            Ok(_) => true,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                false
            }
            // A reset counts as closed (CLIENT KILL may reset the connection).
            Err(_) => {
                self.closed = true;
                false
            }
        }
    }

    /// The reply, which must come within `within`, read as `LOCK.INFO` or an error.
    #[track_caller]
    pub fn answer_within(&mut self, within: Duration, what: &str) -> Answer {
        let Some(v) = self.reply_within(within) else {
            panic!(
                "{what}: observer {} had no reply within {within:?} ({:?} after its command; \
                 connection closed: {})",
                self.id,
                self.sent.elapsed(),
                self.closed
            );
        };
        match server_error_text(&v) {
            Some(e) => Answer::Error(e),
            None => Answer::Info(parse_info(&v)),
        }
    }

    /// A `LOCK.INFO` reply that must come within `within` (`None`: null).
    #[track_caller]
    pub fn info_within(&mut self, within: Duration, what: &str) -> Option<LockInfo> {
        match self.answer_within(within, what) {
            Answer::Info(i) => i,
            Answer::Error(e) => panic!("{what}: observer {} was answered {e:?}", self.id),
        }
    }

    /// An error reply that must come within `within`: its text.
    #[track_caller]
    pub fn error_within(&mut self, within: Duration, what: &str) -> String {
        match self.answer_within(within, what) {
            Answer::Error(e) => e,
            Answer::Info(i) => panic!("{what}: observer {} must get an error, got {i:?}", self.id),
        }
    }

    /// No reply within `within`; for an observer answered already, nothing more after its
    /// reply.
    #[track_caller]
    pub fn silent_for(&mut self, within: Duration, what: &str) {
        if self.reply.is_some() {
            let more = self.wait_readable(within);
            assert!(
                !more && !self.closed,
                "{what}: observer {} received more after its reply {:?} (closed: {})",
                self.id,
                self.reply,
                self.closed
            );
            return;
        }
        if let Some(v) = self.reply_within(within) {
            panic!(
                "{what}: observer {} must still be blocked, but was answered {v:?} after {:?}",
                self.id,
                self.answered.map(|a| a - self.sent)
            );
        }
        assert!(
            !self.closed,
            "{what}: observer {}'s connection was closed",
            self.id
        );
    }

    /// Whether the server closed the connection within `within`, with no reply first.
    pub fn closed_within(&mut self, within: Duration) -> bool {
        let _ = self.reply_within(within);
        self.closed && self.reply.is_none()
    }

    /// When the reply began to arrive, counted from `from`.
    #[track_caller]
    pub fn answered_after(&self, from: Instant) -> Duration {
        self.answered
            .expect("the observer has been answered")
            .saturating_duration_since(from)
    }

    /// The time from its `LOCK.OBSERVE` to its reply.
    #[track_caller]
    pub fn waited(&self) -> Duration {
        self.answered_after(self.sent)
    }
}

/// A reader that keeps a copy of what it reads.
struct Tee<'a> {
    s: &'a mut TcpStream,
    copy: &'a mut Vec<u8>,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.s.read(buf)?;
        self.copy.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}
