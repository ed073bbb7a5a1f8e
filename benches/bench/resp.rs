//! The pipelined phases' connection: a plain socket and a hand-written RESP scanner that finds
//! where each reply ends and shows its type and first line, without building a value or
//! allocating per reply, so that the client's share of a phase stays small (a `LOCK.INFO`
//! reply parsed into a `redis::Value` is a 12-element array of allocations).

#[allow(unused_imports)]
use crate::*;

use std::io::Read as _;
use std::net::TcpStream;

/// One reply: its type byte (`+ - : $ * _ …`) and the text of its first line after it (the
/// status, the error, the integer, or the length of a bulk string or array).
#[derive(Clone, Copy)]
pub(crate) struct Reply<'a> {
    pub(crate) kind: u8,
    pub(crate) line: &'a [u8],
}

impl Reply<'_> {
    /// `+OK`.
    pub(crate) fn is_ok(self) -> bool {
        self.kind == b'+' && self.line == b"OK"
    }
    /// The value of an integer reply.
    pub(crate) fn int(self) -> Option<i64> {
        (self.kind == b':').then(|| parse_int(self.line)).flatten()
    }
    /// An integer reply above zero (a fence).
    pub(crate) fn is_fence(self) -> bool {
        self.int().is_some_and(|f| f > 0)
    }
    /// The number of elements of an array reply (−1 for a null array).
    pub(crate) fn array_len(self) -> Option<i64> {
        (self.kind == b'*').then(|| parse_int(self.line)).flatten()
    }
    /// A bulk string that is not null.
    pub(crate) fn is_bulk(self) -> bool {
        self.kind == b'$' && self.line.first() != Some(&b'-')
    }
    /// The reply's first line, for messages.
    pub(crate) fn show(self) -> String {
        format!(
            "{}{}",
            self.kind as char,
            String::from_utf8_lossy(self.line)
        )
    }
}

/// A decimal integer (`-` allowed) from ASCII digits.
fn parse_int(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -n } else { n })
}

/// The index of the `\r` of the first `\r\n` at or after `from`, if the `\n` is there too.
fn line_end(b: &[u8], from: usize) -> Option<usize> {
    let r = from + b.get(from..)?.iter().position(|&c| c == b'\r')?;
    (b.get(r + 1) == Some(&b'\n')).then_some(r)
}

/// The length of the complete reply at the start of `b`, or `None` if part of it is still to
/// come. Nested replies are counted, not recursed into.
fn scan(b: &[u8]) -> Option<usize> {
    let mut pos = 0;
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let kind = *b.get(pos)?;
        let end = line_end(b, pos + 1)?;
        let after = end + 2;
        let n = || parse_int(&b[pos + 1..end]).unwrap_or_else(|| bad(b, pos));
        pos = match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => after,
            b'$' | b'!' | b'=' => match n() {
                len if len < 0 => after,
                len => {
                    let next = after + len as usize + 2;
                    if next > b.len() {
                        return None;
                    }
                    next
                }
            },
            b'*' | b'~' | b'>' => {
                pending += n().max(0) as u64;
                after
            }
            b'%' => {
                pending += 2 * n().max(0) as u64;
                after
            }
            // An attribute map, then the reply it annotates.
            b'|' => {
                pending += 2 * n().max(0) as u64 + 1;
                after
            }
            _ => bad(b, pos),
        };
    }
    Some(pos)
}

/// The length of the complete reply at the start of `b`, or `None` if part of it is still to
/// come (for readers of their own, as `fleet.rs`).
pub(crate) fn reply_len(b: &[u8]) -> Option<usize> {
    scan(b)
}

fn bad(b: &[u8], pos: usize) -> ! {
    let end = (pos + 40).min(b.len());
    panic!(
        "not RESP at byte {pos}: {:?}",
        String::from_utf8_lossy(&b[pos..end])
    )
}

/// A connection for pipelined phases: commands go out as written, replies are scanned.
pub(crate) struct Pipe {
    s: TcpStream,
    buf: Vec<u8>,
    /// The unread replies are `buf[at..end]`.
    at: usize,
    end: usize,
    /// Busy-poll the socket instead of sleeping in `read` (see `spinning`).
    spin: bool,
}

/// How long a spinning pipe waits for a reply before the run fails (a blocking one has its
/// read timeout).
const SPIN_LIMIT: Duration = Duration::from_secs(60);

impl Pipe {
    pub(crate) fn open(srv: &Server) -> Pipe {
        let s = TcpStream::connect(("127.0.0.1", srv.port)).expect("connect to redis-server");
        s.set_nodelay(true).unwrap();
        // A module that never replies fails the run instead of hanging it.
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Pipe {
            s,
            buf: vec![0; 64 * 1024],
            at: 0,
            end: 0,
            spin: false,
        }
    }

    /// With `spin`, the pipe polls its socket (yielding the CPU between tries) instead of
    /// sleeping until a reply comes. A thread that sleeps in `read` on a virtual machine
    /// wakes up tens of µs after its reply arrived, and an idle CPU takes longer still:
    /// with 4 connections and one batch each in flight, those wake-ups, not the server,
    /// then set the pace of cheap commands (`GET` ran at 70% of a server CPU). Only for a
    /// client with a CPU of its own (pinned), which it then keeps busy.
    pub(crate) fn spinning(self, spin: bool) -> Pipe {
        self.s.set_nonblocking(spin).unwrap();
        Pipe { spin, ..self }
    }

    /// Waits (spinning) after a socket call that would block; panics on any other error.
    fn would_block(&self, e: std::io::Error, began: &mut Option<Instant>, what: &str) {
        if !(self.spin && e.kind() == std::io::ErrorKind::WouldBlock) {
            panic!("{what} redis-server: {e}");
        }
        let began = *began.get_or_insert_with(Instant::now);
        assert!(
            began.elapsed() < SPIN_LIMIT,
            "no reply from redis-server in {SPIN_LIMIT:?}"
        );
        thread::yield_now();
    }

    pub(crate) fn send(&mut self, mut cmds: &[u8]) {
        let mut began = None;
        while !cmds.is_empty() {
            match self.s.write(cmds) {
                Ok(n) => cmds = &cmds[n..],
                Err(e) => self.would_block(e, &mut began, "write to"),
            }
        }
    }

    /// Reads more bytes after the unread ones (moved to the front, the buffer grown if full).
    fn fill(&mut self) {
        if self.at > 0 {
            self.buf.copy_within(self.at..self.end, 0);
            self.end -= self.at;
            self.at = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let mut began = None;
        loop {
            match self.s.read(&mut self.buf[self.end..]) {
                Ok(0) => panic!("redis-server closed the connection"),
                Ok(n) => return self.end += n,
                Err(e) => self.would_block(e, &mut began, "read from"),
            }
        }
    }

    /// The next reply, read from the socket as far as needed.
    pub(crate) fn next(&mut self) -> Reply<'_> {
        loop {
            if let Some(len) = scan(&self.buf[self.at..self.end]) {
                let b = &self.buf[self.at..self.at + len];
                self.at += len;
                let line = line_end(b, 1).expect("a scanned reply has its first line");
                return Reply {
                    kind: b[0],
                    line: &b[1..line],
                };
            }
            self.fill();
        }
    }

    /// Reads `n` replies; `ok(i, reply)` judges each. Returns how many it did not accept
    /// (error replies included).
    pub(crate) fn replies(&mut self, n: usize, mut ok: impl FnMut(usize, Reply) -> bool) -> u64 {
        (0..n).map(|i| u64::from(!ok(i, self.next()))).sum()
    }

    /// Sends `cmds` (`n` commands) and reads their `n` replies, as `replies`.
    pub(crate) fn round_trip(
        &mut self,
        cmds: &[u8],
        n: usize,
        ok: impl FnMut(usize, Reply) -> bool,
    ) -> u64 {
        self.send(cmds);
        self.replies(n, ok)
    }

    /// One command, whose reply must be an integer: that integer. Panics otherwise.
    pub(crate) fn int(&mut self, args: &[&str]) -> i64 {
        let mut cmd = Vec::new();
        push_cmd(&mut cmd, args);
        self.send(&cmd);
        let r = self.next();
        r.int()
            .unwrap_or_else(|| panic!("{args:?}: expected an integer, got {}", r.show()))
    }

    /// One command, whose reply must pass `ok`. Panics otherwise.
    pub(crate) fn expect(&mut self, args: &[&str], ok: impl FnOnce(Reply) -> bool) {
        let mut cmd = Vec::new();
        push_cmd(&mut cmd, args);
        self.send(&cmd);
        let r = self.next();
        assert!(ok(r), "{args:?}: unexpected reply {}", r.show());
    }
}
