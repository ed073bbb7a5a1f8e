//! Raw connections: a waiter's socket, whose `LOCK.ACQUIRE … WAIT` reply is read later,
//! and the commands sent on a connection made while a restarted server is still starting.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common;

#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    Int(i64),
    Null,
    Error(String),
    Other(String),
    /// The server closed the connection.
    Closed,
}

/// A client on its own socket, for `LOCK.ACQUIRE … WAIT` whose reply is read later.
pub(crate) struct Sock {
    pub(crate) s: TcpStream,
    buf: Vec<u8>,
}

impl Sock {
    pub(crate) fn connect(port: u16) -> Sock {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect waiter");
        s.set_nodelay(true).ok();
        Sock { s, buf: Vec::new() }
    }

    pub(crate) fn send(&mut self, args: &[&[u8]]) {
        self.s
            .write_all(&common::resp_command(args))
            .expect("send to waiter socket");
    }

    /// One reply of the shapes `LOCK.ACQUIRE` gives, within `timeout`.
    pub(crate) fn reply(&mut self, timeout: Duration) -> Option<Reply> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.parse() {
                return Some(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 16 * 1024];
            match self.s.read(&mut chunk) {
                Ok(0) => return Some(Reply::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(Reply::Closed),
                Err(e) => panic!("waiter socket: {e}"),
            }
        }
    }

    fn parse(&mut self) -> Option<Reply> {
        let end = self.buf.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&self.buf[1..end]).to_string();
        let r = match self.buf[0] {
            b':' => Reply::Int(line.parse().expect("integer reply")),
            b'$' | b'*' if line == "-1" => Reply::Null,
            b'_' => Reply::Null,
            b'-' => Reply::Error(line),
            _ => Reply::Other(String::from_utf8_lossy(&self.buf).to_string()),
        };
        self.buf.drain(..end + 2);
        Some(r)
    }

    /// True if the server sent anything (a reply or a close) that was not read yet.
    pub(crate) fn has_input(&mut self) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        self.s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = self.s.peek(&mut b);
        self.s.set_nonblocking(false).unwrap();
        r.is_ok()
    }
}

/// The reply to a command sent right after a restart (`early_calls`).
pub(crate) struct EarlyReply {
    pub(crate) reply: Option<Reply>,
    /// When the command that got `reply` was sent, and when `reply` came.
    pub(crate) sent: Instant,
    pub(crate) recv: Instant,
    /// Earlier sends of it answered `TRYAGAIN` (no fence yet) or `LOADING`.
    pub(crate) tryagain: u64,
    pub(crate) loading: u64,
}

/// Sends each of `cmds` (RESP) in turn on one connection to `port`, made as soon as a server
/// that is starting there takes one, and reads its reply; a `TRYAGAIN` or `LOADING` reply
/// sends it again a millisecond later (for up to a second).
pub(crate) fn early_calls(port: u16, cmds: &[Vec<u8>]) -> Result<Vec<EarlyReply>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => sleep(Duration::from_millis(1)),
            Err(e) => return Err(format!("no connection to the restarted server: {e}")),
        }
    };
    s.set_nodelay(true).ok();
    let mut sock = Sock { s, buf: Vec::new() };
    let mut out = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        let (mut tryagain, mut loading) = (0, 0);
        loop {
            let sent = Instant::now();
            sock.s
                .write_all(cmd)
                .map_err(|e| format!("send to the restarted server: {e}"))?;
            let reply = sock.reply(Duration::from_secs(10));
            let recv = Instant::now();
            match &reply {
                Some(Reply::Error(e)) if tryagain + loading < 1000 => {
                    if e.starts_with("TRYAGAIN ") {
                        tryagain += 1;
                    } else if e.starts_with("LOADING ") {
                        loading += 1;
                    } else {
                        return Err(format!("error from the restarted server: {e}"));
                    }
                    sleep(Duration::from_millis(1));
                }
                _ => {
                    out.push(EarlyReply {
                        reply,
                        sent,
                        recv,
                        tryagain,
                        loading,
                    });
                    break;
                }
            }
        }
    }
    Ok(out)
}
