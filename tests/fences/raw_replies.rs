//! Reply lines (and `TIME` replies) read off a raw socket: for the pipelining connections
//! of `bursts`, a `MULTI`/`EXEC` written from another thread, and a command sent to a server
//! that is still starting.

use std::io::Read;
use std::net::TcpStream;

/// Reads `n` reply lines (each without its CRLF) off `s`, keeping what follows in `buf`.
pub(crate) fn read_lines(s: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Vec<Vec<u8>> {
    match try_read_lines(s, buf, n) {
        Ok(lines) => lines,
        Err(lines) => panic!(
            "the connection ended after {} of {n} reply lines",
            lines.len()
        ),
    }
}

/// [`read_lines`], or the lines read before the connection ended.
pub(crate) fn try_read_lines(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
) -> Result<Vec<Vec<u8>>, Vec<Vec<u8>>> {
    let mut lines = Vec::with_capacity(n);
    let mut chunk = vec![0u8; 1 << 16];
    let mut start = 0;
    while lines.len() < n {
        match buf[start..].windows(2).position(|w| w == b"\r\n") {
            Some(end) => {
                lines.push(buf[start..start + end].to_vec());
                start += end + 2;
            }
            None => match s.read(&mut chunk) {
                Ok(got) if got > 0 => buf.extend_from_slice(&chunk[..got]),
                _ => return Err(lines),
            },
        }
    }
    buf.drain(..start);
    Ok(lines)
}

/// The Unix millisecond of a `TIME` reply read as its five lines.
pub(crate) fn time_lines_ms(lines: &[Vec<u8>]) -> i64 {
    let num = |l: &[u8]| -> i64 { std::str::from_utf8(l).unwrap().parse().unwrap() };
    assert_eq!(lines[0], b"*2", "TIME: {lines:?}");
    num(&lines[2]) * 1000 + num(&lines[4]) / 1000
}
