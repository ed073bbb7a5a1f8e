//! Memory that waiters take, and the lazy free of a flush.
//!
//! 1. **Memory for waiters returns to its baseline.** Tens of thousands of clients wait in
//!    `LOCK.ACQUIRE … WAIT` on held keys and leave (time out, disconnect, `CLIENT UNBLOCK`),
//!    a thousand at a time; once the server has settled, `used_memory` must be where the same
//!    shape done with `BLPOP` (same counts, same rounds, on a fresh server) leaves it. A
//!    module-blocked client borrows two "temp clients" (about 17 KiB each) from a pool that
//!    the server's module cron shrinks by at most 50 every 100 ms, down to 8 spare: so memory
//!    is read only once it has stopped falling. What stays after the first thousand (the 8
//!    spare temp clients, the registry's tables sized for the peak) is reported, and is
//!    compared against a bound; what stays per departed waiter must be nothing.
//! 2. **A lazy flush answers at once.** With a million locks in db 0, `FLUSHDB ASYNC` (and a
//!    plain `FLUSHDB` where the server's user flushes are lazy, as on Valkey; `FLUSHALL ASYNC`
//!    for every database) answers the flushed database's waiters null within
//!    [`PROMPT`], long before the background thread has freed the locks; a waiter in another
//!    database is not answered, and its lock is later granted to it, never to a waiter that
//!    left; a lock taken again under the flushed name while the old ones are still being freed
//!    is not disturbed by their free.
//!
//! These tests take a lot of memory and CPU: the tests of this file run one at a time.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::{
    acquire, client_unblock, conn_in, info, info_field, release, resp_command, wait_until,
    waiting_clients, Opts, Reply, Server, Waiter,
};
use redis::{Connection, Value};

static HEAVY: Mutex<()> = Mutex::new(());

/// One heavy test at a time (they measure memory and time on a small machine).
fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn int_field(con: &mut Connection, section: &str, name: &str) -> i64 {
    let v = info_field(con, section, name)
        .unwrap_or_else(|| panic!("INFO {section} has no field {name}"));
    v.parse()
        .unwrap_or_else(|_| panic!("INFO {section} {name}: not an integer: {v:?}"))
}

fn used_memory(con: &mut Connection) -> i64 {
    int_field(con, "memory", "used_memory")
}

fn lock_stat(con: &mut Connection, name: &str) -> i64 {
    int_field(con, "lock", name)
}

// ============================================================ 1. memory for waiters

/// Clients at once, and rounds of them per phase.
const PER_ROUND: usize = 1000;
const ROUNDS: usize = 10;
/// Held keys the waiters spread over (ten waiters a key).
const KEYS: usize = 100;
/// The `WAIT` of the clients that time out.
const SHORT_WAIT_MS: u64 = 200;
/// How long memory may keep falling after the clients left (the temp-client pool of 2,000
/// drains in about 4 s).
const SETTLE_LIMIT: Duration = Duration::from_secs(20);
/// Memory has settled when it has not fallen by more than [`SETTLE_STEP`] for this long
/// (the module cron frees 50 temp clients, about 880 KiB, every 100 ms).
const SETTLE_STILL: Duration = Duration::from_millis(1500);
const SETTLE_STEP: i64 = 2048;
/// What 20,000+ departed waiters may leave behind, beyond what the same `BLPOP`s leave: a
/// few bytes each. The leak this guards against was 10–17 KiB per waiter (200+ MiB here).
const PER_WAITER_SLACK: i64 = 64 * 1024;
/// What the first thousand may leave for good beyond `BLPOP`'s: the pool's 8 spare temp
/// clients (~140 KiB) and the registry's hash tables at the size the peak needed (~250 KiB
/// for a thousand).
const FIXED_SLACK: i64 = 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Lock,
    Blpop,
}

impl Shape {
    fn name(self) -> &'static str {
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
struct Settled {
    /// `used_memory` when the last client had gone.
    from: i64,
    /// Once it stopped falling, after `MEMORY PURGE`.
    used: i64,
    /// How long it kept falling.
    took: Duration,
}

/// What one shape did to memory, phase by phase.
#[derive(Debug)]
struct Figures {
    shape: Shape,
    cold: Settled,
    warm: Settled,
    /// (phase, departed waiters, settled after it, `lock_wait_timeouts` counted in it)
    phases: Vec<(&'static str, usize, Settled, i64)>,
}

fn run_shape(shape: Shape) -> Figures {
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

fn kib(b: i64) -> String {
    format!("{:+.1} KiB", b as f64 / 1024.0)
}

/// 10,000 waits that time out, 10,000 that hang up and 2,000 `CLIENT UNBLOCK`ed (half with
/// `ERROR`), a thousand at a time, after a first thousand of each kind: once the server has
/// settled after each phase, `used_memory` has moved as far as the same `BLPOP`s move it.
#[test]
fn memory_for_waiters_returns_to_its_baseline() {
    let _heavy = heavy();
    let t0 = Instant::now();
    // The two shapes on two servers at once: nothing here is timed but the settling.
    let blpop = thread::spawn(|| run_shape(Shape::Blpop));
    let lock = run_shape(Shape::Lock);
    let blpop = blpop.join().expect("the BLPOP run panicked");
    println!(
        "{} waiters a phase, {PER_ROUND} at once, on {KEYS} held keys ({:?} in all)",
        ROUNDS * PER_ROUND,
        t0.elapsed()
    );
    for f in [&lock, &blpop] {
        println!(
            "{}: cold {} B; after the first {PER_ROUND} of each kind {} ({} over cold; \
             settled in {:?} from {})",
            f.shape.name(),
            f.cold.used,
            f.warm.used,
            kib(f.warm.used - f.cold.used),
            f.warm.took,
            kib(f.warm.from - f.cold.used),
        );
        for (name, n, s, counted) in &f.phases {
            let counted = match f.shape {
                Shape::Lock => format!(" ({counted} counted in lock_wait_timeouts)"),
                Shape::Blpop => String::new(),
            };
            println!(
                "  {n} that {name}: {} B, {} over the first thousand's; settled in {:?} \
                 from {}{counted}",
                s.used,
                kib(s.used - f.warm.used),
                s.took,
                kib(s.from - f.warm.used),
            );
        }
    }
    // The module counts each wait that timed out (or was CLIENT UNBLOCKed without ERROR).
    let counted: Vec<i64> = lock.phases.iter().map(|p| p.3).collect();
    assert_eq!(
        counted,
        [(ROUNDS * PER_ROUND) as i64, 0, PER_ROUND as i64],
        "lock_wait_timeouts per phase"
    );
    let mut problems = Vec::new();
    let mut before = (lock.warm.used, blpop.warm.used);
    for (l, b) in lock.phases.iter().zip(&blpop.phases) {
        let (dl, db) = (l.2.used - before.0, b.2.used - before.1);
        if dl - db > PER_WAITER_SLACK {
            problems.push(format!(
                "{} waiters that {}: {} for LOCK.ACQUIRE … WAIT, {} for BLPOP ({:.1} bytes \
                 a waiter more)",
                l.1,
                l.0,
                kib(dl),
                kib(db),
                (dl - db) as f64 / l.1 as f64
            ));
        }
        before = (l.2.used, b.2.used);
    }
    let fixed = (lock.warm.used - lock.cold.used) - (blpop.warm.used - blpop.cold.used);
    println!(
        "kept after the first thousand, beyond BLPOP: {} (bound {})",
        kib(fixed),
        kib(FIXED_SLACK)
    );
    if fixed > FIXED_SLACK {
        problems.push(format!(
            "the first {PER_ROUND} of each kind left {} for good beyond BLPOP's",
            kib(fixed)
        ));
    }
    assert!(problems.is_empty(), "memory kept: {problems:#?}");
}

// ============================================================ 2. a lazy flush

/// Locks in db 0 (`FLUSH_RACE_LOCKS` overrides).
const LOCKS: usize = 1_000_000;
/// A waiter of a flushed database is answered within this of the flush command being sent
/// (the server answers in the same turn; the background free of a million locks takes far
/// longer).
const PROMPT: Duration = Duration::from_millis(100);
const TTL: u64 = 3_600_000;

fn locks_to_load() -> usize {
    std::env::var("FLUSH_RACE_LOCKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(LOCKS)
}

/// `n` locks `k:0` … in db 0, pipelined; how long it took.
fn load_locks(server: &Server, n: usize) -> Duration {
    let mut con = server.conn();
    let t0 = Instant::now();
    const BATCH: usize = 20_000;
    for first in (0..n).step_by(BATCH) {
        let mut p = redis::pipe();
        for i in first..n.min(first + BATCH) {
            p.cmd("LOCK.ACQUIRE")
                .arg(format!("k:{i}"))
                .arg("h")
                .arg(TTL);
        }
        let fences: Vec<Option<i64>> = p.query(&mut con).expect("pipelined LOCK.ACQUIRE");
        assert!(
            fences.iter().all(Option::is_some),
            "a fresh key was not acquired"
        );
    }
    let took = t0.elapsed();
    assert_eq!(lock_stat(&mut con, "lock_held"), n as i64);
    took
}

fn cmd_ok(con: &mut Connection, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    assert_eq!(c.query::<Value>(con), Ok(Value::Okay), "{args:?}");
}

fn lazyfree_pending(con: &mut Connection) -> i64 {
    int_field(con, "memory", "lazyfree_pending_objects")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flush {
    /// `FLUSHDB ASYNC` in db 0.
    DbAsync,
    /// `FLUSHDB` in db 0, lazy where the server's `lazyfree-lazy-user-flush` says so.
    DbPlain,
    /// `FLUSHALL ASYNC`: both databases.
    AllAsync,
}

/// A million locks in db 0, one waiter on one of them; in db 1 a lock under the same name,
/// with a waiter that hung up, one that timed out and one still waiting. The flush answers
/// the flushed databases' waiters at once; what it did not flush keeps its queue, and what
/// is acquired again under a flushed name while the old locks are still being freed is not
/// touched by their free.
fn flush_race(how: Flush) {
    let _heavy = heavy();
    let server = Server::new();
    let mut c0 = server.conn();
    let mut c1 = conn_in(&server, 1);
    let n = locks_to_load();
    let loaded = load_locks(&server, n);
    let target = format!("k:{}", n / 2);
    let old_fence = info(&mut c0, &target).expect("loaded").fence;
    acquire(&mut c1, &target, "h1", TTL).expect("db 1 is empty");

    let mut w0 = Waiter::join_in(&server, 0, &target, "w0", TTL, 0);
    let dead = Waiter::join_in(&server, 1, &target, "dead", TTL, 0);
    let mut timed = Waiter::join_in(&server, 1, &target, "timed-out", TTL, 300);
    let mut w1 = Waiter::join_in(&server, 1, &target, "w1", TTL, 0);
    drop(dead);
    assert_eq!(
        timed.reply_within(Duration::from_secs(5)),
        Some(Reply::Null),
        "WAIT 300 times out"
    );
    assert!(
        wait_until(Duration::from_secs(5), || info(&mut c1, &target)
            .is_some_and(|i| i.waiters == 1)),
        "db 1: only w1 is left in the queue"
    );

    let lazy = match how {
        Flush::DbAsync | Flush::AllAsync => true,
        Flush::DbPlain => {
            let v: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("lazyfree-lazy-user-flush")
                .query(&mut c0)
                .unwrap();
            v.get(1).is_some_and(|v| v == "yes")
        }
    };
    let words: &[&str] = match how {
        Flush::DbAsync => &["FLUSHDB", "ASYNC"],
        Flush::DbPlain => &["FLUSHDB"],
        Flush::AllAsync => &["FLUSHALL", "ASYNC"],
    };
    assert_eq!(lazyfree_pending(&mut c0), 0);
    let t0 = Instant::now();
    cmd_ok(&mut c0, words);
    let returned = t0.elapsed();
    // A synchronous flush frees everything before it replies; the waiter is answered in
    // the same turn.
    let bound = if lazy { PROMPT } else { returned + PROMPT };
    let r0 = w0.reply_by(t0 + bound);
    let answered = w0.answered.map_or(Duration::MAX, |a| a.duration_since(t0));
    let pending_then = lazyfree_pending(&mut c0);
    assert_eq!(
        r0,
        Some(Reply::Null),
        "{words:?}: the db-0 waiter must be answered null within {bound:?}"
    );
    let r1 = w1.reply_within(if how == Flush::AllAsync {
        bound.saturating_sub(t0.elapsed())
    } else {
        Duration::from_millis(50)
    });
    if how == Flush::AllAsync {
        assert_eq!(r1, Some(Reply::Null), "{words:?}: the db-1 waiter too");
    } else {
        assert_eq!(r1, None, "{words:?}: the db-1 waiter must not be answered");
    }

    // The flushed name taken again (and waited on) while the old locks are being freed.
    let f0 = acquire(&mut c0, &target, "new0", TTL).expect("db 0 was flushed");
    assert!(
        f0 > old_fence,
        "the fence went backwards: {old_fence} -> {f0}"
    );
    let mut w0b = Waiter::join_in(&server, 0, &target, "w0b", TTL, 0);
    // After FLUSHALL, db 1's name is taken again too; w1 was answered and must stay so.
    let (holder1, mut w1_live, mut w1_answered) = if how == Flush::AllAsync {
        acquire(&mut c1, &target, "h2", TTL).expect("db 1 was flushed");
        let w1b = Waiter::join_in(&server, 1, &target, "w1b", TTL, 0);
        ("h2", w1b, Some(w1))
    } else {
        ("h1", w1, None)
    };
    let racing = lazyfree_pending(&mut c0) > 0;
    let mut free_took = None;
    let mut early = Vec::new();
    let deadline = t0 + Duration::from_secs(60);
    while Instant::now() < deadline {
        for w in [&mut w0b, &mut w1_live] {
            if let Some(r) = w.reply_within(Duration::ZERO) {
                early.push(format!(
                    "{} answered {r:?} while the old locks were freed",
                    w.token
                ));
            }
        }
        if lazyfree_pending(&mut c0) == 0 && lock_stat(&mut c0, "lock_held") == 2 {
            free_took = Some(t0.elapsed());
            break;
        }
        sleep(Duration::from_millis(20));
    }
    assert!(early.is_empty(), "{words:?}: {early:#?}");
    let free_took = free_took.unwrap_or_else(|| {
        panic!(
            "{words:?}: background free not done after 60 s (pending {}, lock_held {})",
            lazyfree_pending(&mut c0),
            lock_stat(&mut c0, "lock_held")
        )
    });
    println!(
        "{words:?} on {n} locks (loaded in {loaded:?}; lazy: {lazy}): returned in \
         {returned:?}; db-0 waiter answered after {answered:?} with {pending_then} objects \
         still to free; the free took {free_took:?}; re-acquired while freeing: {racing}"
    );
    assert!(
        !lazy || pending_then > 0 || free_took > bound,
        "{words:?}: the background free ended before the waiter's bound: not a race"
    );

    // Nothing else was said to anyone.
    for w in [&mut w0b, &mut w1_live, &mut timed, &mut w0] {
        assert_eq!(
            w.reply_within(Duration::from_millis(20)),
            None,
            "{words:?}: {} got a reply it should not have",
            w.token
        );
    }
    for (con, db, holder) in [(&mut c0, 0, "new0"), (&mut c1, 1, holder1)] {
        let lock = info(con, &target).unwrap_or_else(|| panic!("db {db}: {target} is gone"));
        assert_eq!(lock.holder.as_deref(), Some(holder.as_bytes()), "db {db}");
        assert_eq!(lock.waiters, 1, "db {db}");
    }

    // The releases grant the live waiters, and nobody else.
    assert_eq!(release(&mut c0, &target, "new0"), 1);
    let g0 = w0b.reply_within(Duration::from_secs(5));
    assert!(
        matches!(g0, Some(Reply::Fence(f)) if f > f0),
        "db 0: w0b must be granted a fence above {f0}: {g0:?}"
    );
    let before1 = info(&mut c1, &target).unwrap().fence;
    assert_eq!(release(&mut c1, &target, holder1), 1);
    let g1 = w1_live.reply_within(Duration::from_secs(5));
    assert!(
        matches!(g1, Some(Reply::Fence(f)) if f > before1),
        "db 1: {} must be granted a fence above {before1}: {g1:?}",
        w1_live.token
    );
    let lock = info(&mut c1, &target).unwrap();
    assert_eq!(lock.holder.as_deref(), Some(w1_live.token.as_bytes()));
    assert_eq!(lock.waiters, 0);
    assert_eq!(waiting_clients(&mut c0), 0);
    for w in std::iter::once(&mut timed).chain(w1_answered.as_mut()) {
        assert_eq!(
            w.reply_within(Duration::from_millis(20)),
            None,
            "{words:?}: {}, answered before, was told again",
            w.token
        );
    }
    assert_eq!(lock_stat(&mut c0, "lock_grants"), 2);
    drop(c0);
    let mut server = server;
    server.assert_alive();
}

#[test]
fn flushdb_async_answers_its_waiters_before_the_background_free() {
    flush_race(Flush::DbAsync);
}

#[test]
fn plain_flushdb_answers_its_waiters_lazy_or_not() {
    flush_race(Flush::DbPlain);
}

#[test]
fn flushall_async_answers_every_database_before_the_background_free() {
    flush_race(Flush::AllAsync);
}
