//! Memory for waiters, the runs it is measured in: the blocking command of each shape
//! (`LOCK.ACQUIRE … WAIT` or `BLPOP`), the clients that send it and leave (time out,
//! disconnect, `CLIENT UNBLOCK`), a thousand at a time, and `used_memory` read once it has
//! settled after each phase.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::memory::used_memory;
use crate::common::{
    acquire, client_unblock, info, resp_command, wait_until, waiting_clients, Opts, Server,
};
use crate::common::{info_int as int_field, stat as lock_stat};
use redis::{Connection, Value};

/// Clients at once, and rounds of them per phase.
pub(crate) const PER_ROUND: usize = 1000;
pub(crate) const ROUNDS: usize = 10;
/// Held keys the waiters spread over (ten waiters a key).
pub(crate) const KEYS: usize = 100;
/// The `WAIT` of the clients that time out.
const SHORT_WAIT_MS: u64 = 200;
/// How long memory may keep falling after the clients left (the temp-client pool of 2,000
/// drains in about 4 s).
const SETTLE_LIMIT: Duration = Duration::from_secs(20);
/// Memory has settled when it has not fallen by more than [`SETTLE_STEP`] for this long
/// (the module cron frees 50 temp clients, about 880 KiB, every 100 ms).
const SETTLE_STILL: Duration = Duration::from_millis(1500);
const SETTLE_STEP: i64 = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Lock,
    Blpop,
}

impl Shape {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Shape::Lock => "LOCK.ACQUIRE … WAIT",
            Shape::Blpop => "BLPOP",
        }
    }

    /// Client `j`'s blocking command, with a timeout in ms (0: none).
    fn command(self, j: usize, timeout_ms: u64) -> Vec<u8> {
        let key = j % KEYS;
        match self {
            Shape::Lock => resp_command(&[
                "LOCK.ACQUIRE".to_string(),
                format!("held:{key}"),
                format!("w{j}"),
                "60000".to_string(),
                "WAIT".to_string(),
                timeout_ms.to_string(),
            ]),
            Shape::Blpop => resp_command(&[
                "BLPOP".to_string(),
                format!("list:{key}"),
                format!("{:.3}", timeout_ms as f64 / 1000.0),
            ]),
        }
    }
}

/// A connection that closes with a reset, so that tens of thousands of them leave no
/// `TIME_WAIT` behind (other tests on the machine need ephemeral ports too).
fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).ok();
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket, and an option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_LINGER");
    s
}

/// One reply line (the null replies, integers, errors are one line each) by `deadline`.
fn read_line(s: &mut TcpStream, deadline: Instant) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 128];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            return Some(String::from_utf8_lossy(&buf[..end]).into_owned());
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        s.set_read_timeout(Some(deadline - now)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn is_null(line: &str) -> bool {
    line == "$-1" || line == "*-1" || line == "_"
}

/// One server and its control connection, running one shape.
struct Run {
    server: Server,
    con: Connection,
    shape: Shape,
    next: usize,
}

impl Run {
    fn start(shape: Shape) -> Run {
        // A thousand connects at once overflow the default accept backlog (511): a dropped
        // SYN is retried after a second, and the round would not be a thousand at once.
        let server = Server::start(Opts::new().extra(&["--tcp-backlog", "2048"]));
        let mut con = server.conn();
        // Held keys in both shapes, so that the two servers start alike.
        for i in 0..KEYS {
            acquire(&mut con, &format!("held:{i}"), "holder", 3_600_000).unwrap();
        }
        Run {
            server,
            con,
            shape,
            next: 0,
        }
    }

    fn clients(&mut self, n: usize, timeout_ms: u64) -> Vec<TcpStream> {
        let port = self.server.port;
        let first = self.next;
        self.next += n;
        (first..first + n)
            .map(|j| {
                let mut s = connect(port);
                s.write_all(&self.shape.command(j, timeout_ms)).unwrap();
                s
            })
            .collect()
    }

    fn blocked(&mut self) -> i64 {
        int_field(&mut self.con, "clients", "blocked_clients")
    }

    fn await_blocked(&mut self, n: usize) {
        let mut seen = 0;
        let ok = wait_until(Duration::from_secs(30), || {
            seen = self.blocked();
            seen == n as i64
        });
        assert!(ok, "{}: {seen} of {n} clients blocked", self.shape.name());
        if self.shape == Shape::Lock {
            assert_eq!(waiting_clients(&mut self.con), n as i64);
        }
    }

    /// Every client but the control connection has gone, and nobody waits.
    fn await_gone(&mut self) {
        let shape = self.shape;
        let con = &mut self.con;
        let mut state = String::new();
        let ok = wait_until(Duration::from_secs(30), || {
            let connected = int_field(con, "clients", "connected_clients");
            let blocked = int_field(con, "clients", "blocked_clients");
            let waiting = if shape == Shape::Lock {
                waiting_clients(con)
            } else {
                0
            };
            state = format!("connected {connected}, blocked {blocked}, waiting {waiting}");
            connected == 1 && blocked == 0 && waiting == 0
        });
        assert!(ok, "{}: clients did not leave: {state}", shape.name());
    }

    /// `n` clients wait `SHORT_WAIT_MS` and are answered null.
    fn timeouts(&mut self, n: usize) {
        let t0 = Instant::now();
        let mut socks = self.clients(n, SHORT_WAIT_MS);
        let deadline = t0 + Duration::from_secs(30);
        for (i, s) in socks.iter_mut().enumerate() {
            let line = read_line(s, deadline)
                .unwrap_or_else(|| panic!("{}: client {i} got no reply", self.shape.name()));
            assert!(
                is_null(&line),
                "{}: client {i} got {line:?}",
                self.shape.name()
            );
        }
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(SHORT_WAIT_MS - 10),
            "{}: {n} waits of {SHORT_WAIT_MS} ms were all answered in {took:?}",
            self.shape.name()
        );
        drop(socks);
        self.await_gone();
    }

    /// `n` clients wait without limit, all block, then hang up.
    fn disconnects(&mut self, n: usize) {
        let socks = self.clients(n, 0);
        self.await_blocked(n);
        drop(socks);
        self.await_gone();
    }

    /// `n` clients wait without limit and are `CLIENT UNBLOCK`ed (with `ERROR` or not).
    fn unblocks(&mut self, n: usize, error: bool) {
        let port = self.server.port;
        let first = self.next;
        self.next += n;
        let mut socks: Vec<(TcpStream, u64)> = (first..first + n)
            .map(|j| {
                let mut s = connect(port);
                s.write_all(&resp_command(&["CLIENT", "ID"])).unwrap();
                let line =
                    read_line(&mut s, Instant::now() + Duration::from_secs(10)).expect("CLIENT ID");
                let id = line
                    .strip_prefix(':')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("CLIENT ID: {line:?}"));
                s.write_all(&self.shape.command(j, 0)).unwrap();
                (s, id)
            })
            .collect();
        self.await_blocked(n);
        for (_, id) in &socks {
            assert_eq!(client_unblock(&mut self.con, *id, error), 1);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for (s, id) in socks.iter_mut() {
            let line = read_line(s, deadline).expect("a reply after CLIENT UNBLOCK");
            let ok = if error {
                line.starts_with("-UNBLOCKED")
            } else {
                is_null(&line)
            };
            assert!(ok, "{}: client {id} unblocked: {line:?}", self.shape.name());
        }
        drop(socks);
        self.await_gone();
    }

    /// Waits until `used_memory` stops falling (the temp-client pool drains), then
    /// `MEMORY PURGE`: the settled figure and how long it kept falling.
    fn settle(&mut self) -> Settled {
        let t0 = Instant::now();
        let from = used_memory(&mut self.con);
        let mut low = from;
        let mut fell_until = Duration::ZERO;
        loop {
            sleep(Duration::from_millis(100));
            let now = used_memory(&mut self.con);
            if now < low - SETTLE_STEP {
                fell_until = t0.elapsed();
            }
            low = low.min(now);
            if t0.elapsed() >= fell_until + SETTLE_STILL {
                break;
            }
            assert!(
                t0.elapsed() < SETTLE_LIMIT,
                "{}: used_memory still falling after {SETTLE_LIMIT:?} ({from} -> {now})",
                self.shape.name()
            );
        }
        assert_eq!(
            redis::cmd("MEMORY")
                .arg("PURGE")
                .query::<Value>(&mut self.con),
            Ok(Value::Okay)
        );
        Settled {
            from,
            used: used_memory(&mut self.con),
            took: fell_until,
        }
    }

    /// The held keys are as they were: same holder, nobody queued.
    fn check_held_keys(&mut self) {
        for i in 0..KEYS {
            let key = format!("held:{i}");
            let lock = info(&mut self.con, &key).unwrap_or_else(|| panic!("{key} is gone"));
            assert_eq!(lock.holder.as_deref(), Some(&b"holder"[..]), "{key}");
            assert_eq!(lock.waiters, 0, "{key}");
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Settled {
    /// `used_memory` when the last client had gone.
    pub(crate) from: i64,
    /// Once it stopped falling, after `MEMORY PURGE`.
    pub(crate) used: i64,
    /// How long it kept falling.
    pub(crate) took: Duration,
}

/// What one shape did to memory, phase by phase.
#[derive(Debug)]
pub(crate) struct Figures {
    pub(crate) shape: Shape,
    pub(crate) cold: Settled,
    pub(crate) warm: Settled,
    /// (phase, departed waiters, settled after it, `lock_wait_timeouts` counted in it)
    pub(crate) phases: Vec<(&'static str, usize, Settled, i64)>,
}

pub(crate) fn run_shape(shape: Shape) -> Figures {
    let mut run = Run::start(shape);
    let cold = run.settle();
    // The first thousand, one of each way of leaving: the pool, the registry and the
    // server's own tables grow to the peak here, once.
    run.disconnects(PER_ROUND);
    run.timeouts(PER_ROUND);
    run.unblocks(PER_ROUND, false);
    let warm = run.settle();
    let mut phases = Vec::new();
    type Phase = fn(&mut Run);
    // (what the waiters do, rounds, waiters a round, a round)
    let plan: [(&str, usize, usize, Phase); 3] = [
        ("time out", ROUNDS, PER_ROUND, |r| r.timeouts(PER_ROUND)),
        ("disconnect", ROUNDS, PER_ROUND, |r| {
            r.disconnects(PER_ROUND)
        }),
        // Half unblocked to null, half to the UNBLOCKED error.
        ("are CLIENT UNBLOCKed", 2, PER_ROUND, |r| {
            r.unblocks(PER_ROUND / 2, false);
            r.unblocks(PER_ROUND / 2, true);
        }),
    ];
    for (name, rounds, per_round, phase) in plan {
        let timeouts_before =
            (shape == Shape::Lock).then(|| lock_stat(&mut run.con, "lock_wait_timeouts"));
        for _ in 0..rounds {
            phase(&mut run);
        }
        let counted =
            timeouts_before.map_or(0, |b| lock_stat(&mut run.con, "lock_wait_timeouts") - b);
        phases.push((name, rounds * per_round, run.settle(), counted));
    }
    run.check_held_keys();
    if shape == Shape::Lock {
        assert_eq!(lock_stat(&mut run.con, "lock_grants"), 0);
        assert_eq!(lock_stat(&mut run.con, "lock_held"), KEYS as i64);
        assert_eq!(waiting_clients(&mut run.con), 0);
    }
    run.server.assert_alive();
    Figures {
        shape,
        cold,
        warm,
        phases,
    }
}
