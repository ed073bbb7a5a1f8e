//! A raw RESP connection, for the tests that check a reply byte for byte (what the `redis`
//! crate would parse away: RESP2 against RESP3 nulls, maps, bulk against simple strings).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::Server;

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
