//! # redis-lock benchmark (`make bench`, i.e. `cargo bench --bench bench`)
//!
//! Measures the module side by side with the ways clients lock with plain Redis today, in
//! one run, against one redis-server that this program starts itself (127.0.0.1, a free port,
//! `--save "" --appendonly no`, the module from `target/release/libredis_lock.so` — build it
//! first with `cargo build --release`; `cargo bench` does not rebuild the cdylib).
//!
//! ## Workloads (each against its baselines, with the same number of connections)
//!
//! 1. **Uncontended cycle** — acquire then release on random keys, 4 connections, batches of
//!    1 and 16 cycles: `LOCK.ACQUIRE`+`LOCK.RELEASE` vs `SET NX PX` + `EVALSHA`
//!    compare-and-delete ("Lua") vs `SET PX` + `DEL` (two native commands: the "floor").
//! 2. **Fenced cycle** — the module's acquire returns a fence anyway; the baseline is an
//!    `EVALSHA` acquire doing `SET NX PX` + `INCR` of a fence key, and the Lua release.
//! 3. **Single command**, batches of 1 and 16: `LOCK.ACQUIRE` vs `SET NX PX` on fresh keys
//!    (every op succeeds; the keys are removed after each phase, outside the measurement), and
//!    `LOCK.INFO` vs `GET` on an existing key.
//! 4. **Contended** — 20 clients on one key, each looping acquire → release with no hold
//!    time: `LOCK.ACQUIRE … WAIT 0` (blocking FIFO) vs polling `SET NX PX` every 100 ms and
//!    every 1 ms vs a pub/sub wake-up (the release script PUBLISHes; waiters sit on a
//!    SUBSCRIBE and retry on a message, or after a fallback timeout).
//! 5. **Lease-end hand-off** — a holder takes a 50 ms lease and never releases; a waiter
//!    blocked with `WAIT 0` measures from the lease deadline (send time of the holder's
//!    acquire + ttl, on the client's clock) to its grant.
//! 6. **Scale** — memory per held lock (`INFO memory` `used_memory` delta over 200k locks) for
//!    the module, a `SET NX PX` string lock and a string lock plus a fence key (module memory
//!    is counted: the module allocates through Redis); and the cycle at batch 16 with 1M
//!    module locks held vs 1k held (and, for reference, the floor cycle among 1M vs 1k held
//!    string locks: how much Redis itself slows down with a bigger keyspace).
//!
//! ## How to read the output
//!
//! - An *op* is what the row names: a whole cycle (acquire + release) in 1–2, one command in
//!   3. A batch of 16 is one pipelined round trip per step (16 acquires, then 16 releases);
//!   a batch of 1 is one command per round trip, so a cycle there is two round trips.
//! - `ops/s` = ops completed in the measurement windows / their length (each window follows a
//!   warm-up). A variant runs in 5 rounds interleaved with its baselines (A B C, C B A,
//!   A B C, …); `spread` is (max − min) / mean of its rounds' ops/s, a gauge of the noise.
//!   The contended schemes and 6b run in 3 rounds the same way.
//!   `p50/p99/p999` are the latencies of one whole batch in µs (hdrhistogram).
//! - `srv µs/op` is the server's CPU time (user + sys from `INFO cpu`) over the window divided
//!   by the ops; `srv cpu` is that CPU time over the window's length (100% = one core busy).
//!   Client and server share a 2-core machine: when `srv cpu` is well below 100% the client
//!   is the bottleneck, and `srv µs/op` is the fairer comparison.
//! - Ratios are "this row relative to that baseline", higher = better for the row: for
//!   throughput `ops/s ÷ baseline ops/s`, for CPU `baseline µs/op ÷ row µs/op`, each taken
//!   per round against the baseline's round next to it, and the median over rounds reported
//!   (a slow spell of the shared machine then hits both halves of a pair).
//! - At the end, each target of issue 4 is checked against the measurements.
//! - Everything is also written to `bench-results.json` at the crate root.
//!
//! Set `BENCH_QUICK=1` for a smoke run about 10× shorter (numbers are then noisy), and
//! `BENCH_NO_PIN=1` to run without `taskset` pinning (server on CPU 1, client on CPU 0).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use redis::{Connection, ConnectionLike, Value};

// ---------------------------------------------------------------------------------------
// Sizes and durations (the full run; BENCH_QUICK=1 divides them by about 10).

/// Connections of the uncontended workloads (1, 2, 3, 6).
const CONNS: usize = 4;
/// Batch sizes (pipeline depths) of the uncontended workloads.
const DEPTHS: [usize; 2] = [1, 16];
/// Each variant of a throughput table runs this many times, interleaved with its baselines
/// (A B C, C B A, A B C), so that drift of the machine hits all of them alike.
const ROUNDS: usize = 5;
/// Rounds of the contended schemes and of 6b (which loads a million locks per round).
const FEW_ROUNDS: usize = 3;
/// Measurement window of one round of a throughput phase, after its warm-up.
const PHASE: Duration = Duration::from_secs(1);
const WARMUP: Duration = Duration::from_millis(300);
/// Lease of the uncontended workloads.
const TTL_MS: u64 = 60_000;
/// Lease of locks that must stay held for the rest of the run (memory, 1M held).
const HOLD_TTL_MS: u64 = 600_000;
/// Distinct lock names per connection in the cycle workloads (bounds the Lua fence keys).
const KEYSPACE: u64 = 50_000;

const CONTENDED_CLIENTS: usize = 20;
const CONTENDED_RUN: Duration = Duration::from_secs(3);
/// Lease in the contended workload: far longer than a hold, so it never runs out.
const CONTENDED_TTL_MS: u64 = 10_000;
const SLOW_POLL: Duration = Duration::from_millis(100);
const FAST_POLL: Duration = Duration::from_millis(1);
/// How long a pub/sub waiter waits for a message before it retries anyway. Redisson waits for
/// the lock's remaining lease; a shorter fallback can only help this baseline.
const PUBSUB_FALLBACK: Duration = Duration::from_millis(100);

const LEASE_TTL_MS: u64 = 50;
const LEASE_REPS: usize = 200;

const MEM_LOCKS: usize = 200_000;
const FEW_HELD: usize = 1_000;
const MANY_HELD: usize = 1_000_000;
/// Commands per pipeline when loading held locks.
const LOAD_BATCH: usize = 1_000;

const LUA_RELEASE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";
const LUA_FENCED_ACQUIRE: &str = "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then \
     return redis.call('incr',KEYS[2]) else return false end";
const LUA_RELEASE_PUBLISH: &str = "if redis.call('get',KEYS[1])==ARGV[1] then \
     redis.call('del',KEYS[1]) redis.call('publish',ARGV[2],'released') return 1 else return 0 end";

/// The run's sizes, shrunk for `BENCH_QUICK=1`.
struct Plan {
    quick: bool,
    phase: Duration,
    warmup: Duration,
    contended: Duration,
    lease_reps: usize,
    mem_locks: usize,
    few_held: usize,
    many_held: usize,
}

impl Plan {
    fn from_env() -> Plan {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let div = if quick { 10 } else { 1 };
        Plan {
            quick,
            phase: PHASE / div,
            warmup: WARMUP / div,
            contended: CONTENDED_RUN / div,
            lease_reps: LEASE_REPS / div as usize,
            mem_locks: MEM_LOCKS / div as usize,
            few_held: FEW_HELD,
            many_held: MANY_HELD / div as usize,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server: started here, killed (and its directory removed) when dropped, also on panic.

struct Server {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Server {
    fn start(module: &Path, pin: bool) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("redis-lock-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the server's directory");
        let mut cmd = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "1", "redis-server"]);
            c
        } else {
            Command::new("redis-server")
        };
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            // Pub/sub waiters that do not read for a while must not be disconnected.
            .args(["--client-output-buffer-limit", "pubsub 0 0 0"])
            .arg("--loadmodule")
            .arg(module)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start redis-server");
        let mut server = Server { child, dir, port };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let began = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server exited ({status}):\n{}", self.log());
            }
            if let Ok(mut con) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            if began.elapsed() > Duration::from_secs(10) {
                panic!("redis-server did not answer within 10 s:\n{}", self.log());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        // A module that never replies fails the run instead of hanging it.
        con.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(con)
    }

    /// A connection, retried for a while (the server may be busy with a FLUSHALL).
    fn connect(&self) -> Connection {
        let mut last = None;
        for _ in 0..50 {
            match self.try_connect() {
                Ok(con) => return con,
                Err(e) => last = Some(e),
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("cannot connect to redis-server: {last:?}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------
// Wire helpers: commands are encoded by hand (cheap for the client), replies parsed by `redis`.

fn push_cmd(buf: &mut Vec<u8>, args: &[&str]) {
    write!(buf, "*{}\r\n", args.len()).unwrap();
    for a in args {
        write!(buf, "${}\r\n{a}\r\n", a.len()).unwrap();
    }
}

/// One command; a server error fails the run.
fn call(con: &mut Connection, args: &[&str]) -> Value {
    let mut buf = Vec::new();
    push_cmd(&mut buf, args);
    match con.req_packed_command(&buf) {
        Ok(Value::ServerError(e)) => panic!("{args:?}: {e:?}"),
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

fn pipeline(con: &mut Connection, buf: &[u8], count: usize) -> Vec<Value> {
    con.req_packed_commands(buf, 0, count)
        .unwrap_or_else(|e| panic!("pipeline of {count}: {e}"))
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("expected a string reply, got {other:?}"),
    }
}

/// A numeric field of `INFO section`.
fn info_field(con: &mut Connection, section: &str, field: &str) -> f64 {
    let info = text(&call(con, &["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no numeric {field}"))
}

/// The server's CPU time so far (user + sys), in seconds.
fn server_cpu(con: &mut Connection) -> f64 {
    let info = text(&call(con, &["INFO", "cpu"]));
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_user") + field("used_cpu_sys")
}

fn flushall(con: &mut Connection) {
    call(con, &["FLUSHALL"]);
}

/// `used_memory` once it has settled (incremental rehashing done).
fn used_memory(con: &mut Connection) -> f64 {
    let mut last = info_field(con, "memory", "used_memory");
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(200));
        let now = info_field(con, "memory", "used_memory");
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Runs `make(i, buf)` for `i` in `range`, `LOAD_BATCH` commands per round trip; every reply
/// must pass `ok`.
fn load(
    con: &mut Connection,
    range: std::ops::Range<usize>,
    per_item: usize,
    mut make: impl FnMut(usize, &mut Vec<u8>),
    ok: impl Fn(&Value) -> bool,
) {
    let mut buf = Vec::new();
    let mut i = range.start;
    while i < range.end {
        let end = (i + LOAD_BATCH).min(range.end);
        buf.clear();
        for j in i..end {
            make(j, &mut buf);
        }
        let replies = pipeline(con, &buf, (end - i) * per_item);
        if let Some(bad) = replies.iter().find(|v| !ok(v)) {
            panic!("loading locks: unexpected reply {bad:?}");
        }
        i = end;
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).unwrap()
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

/// The SHA1s of the baseline scripts, loaded once.
struct Scripts {
    release: String,
    fenced_acquire: String,
    release_publish: String,
}

impl Scripts {
    fn load(con: &mut Connection) -> Scripts {
        let mut load = |src: &str| text(&call(con, &["SCRIPT", "LOAD", src]));
        Scripts {
            release: load(LUA_RELEASE),
            fenced_acquire: load(LUA_FENCED_ACQUIRE),
            release_publish: load(LUA_RELEASE_PUBLISH),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Throughput phases (workloads 1, 2, 3, 6): CONNS threads, one connection each.

/// What one op of a throughput phase sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    /// `LOCK.ACQUIRE key token ttl`, then `LOCK.RELEASE key token`.
    LockCycle,
    /// `SET key token NX PX ttl`, then `EVALSHA` compare-and-delete.
    LuaCycle,
    /// `SET key token PX ttl`, then `DEL key`.
    FloorCycle,
    /// `EVALSHA` (`SET NX PX` + `INCR key:fence`), then `EVALSHA` compare-and-delete.
    LuaFencedCycle,
    /// `LOCK.ACQUIRE` on a fresh key.
    LockAcquire,
    /// `SET NX PX` on a fresh key.
    SetNx,
    /// `LOCK.INFO` of a held lock.
    LockInfo,
    /// `GET` of a string lock.
    Get,
}

impl Op {
    fn steps(self) -> usize {
        match self {
            Op::LockCycle | Op::LuaCycle | Op::FloorCycle | Op::LuaFencedCycle => 2,
            Op::LockAcquire | Op::SetNx | Op::LockInfo | Op::Get => 1,
        }
    }

    /// The key of op number `n` of connection `t`: cycles go round a keyspace, fresh-key ops
    /// never repeat a key, reads read one key.
    fn key(self, t: usize, n: u64) -> String {
        let i = match self {
            Op::LockAcquire | Op::SetNx => n,
            Op::LockInfo | Op::Get => 0,
            _ => n % KEYSPACE,
        };
        format!("lk:{t}:{i:09}")
    }

    fn encode(self, step: usize, key: &str, token: &str, s: &Scripts, buf: &mut Vec<u8>) {
        let ttl = TTL_MS.to_string();
        match (self, step) {
            (Op::LockCycle | Op::LockAcquire, 0) => {
                push_cmd(buf, &["LOCK.ACQUIRE", key, token, &ttl])
            }
            (Op::LockCycle, _) => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            (Op::LuaCycle | Op::SetNx, 0) => push_cmd(buf, &["SET", key, token, "NX", "PX", &ttl]),
            (Op::FloorCycle, 0) => push_cmd(buf, &["SET", key, token, "PX", &ttl]),
            (Op::FloorCycle, _) => push_cmd(buf, &["DEL", key]),
            (Op::LuaFencedCycle, 0) => {
                let fence_key = format!("{key}:fence");
                let sha = &s.fenced_acquire;
                push_cmd(buf, &["EVALSHA", sha, "2", key, &fence_key, token, &ttl])
            }
            (Op::LuaCycle | Op::LuaFencedCycle, _) => {
                push_cmd(buf, &["EVALSHA", &s.release, "1", key, token])
            }
            (Op::LockInfo, _) => push_cmd(buf, &["LOCK.INFO", key]),
            (Op::Get, _) => push_cmd(buf, &["GET", key]),
            (Op::SetNx, _) | (Op::LockAcquire, _) => unreachable!(),
        }
    }

    /// Whether `v` is the reply of a successful step (a lock taken, released, read).
    fn accepts(self, step: usize, v: &Value) -> bool {
        match (self, step) {
            (Op::LockCycle | Op::LockAcquire | Op::LuaFencedCycle, 0) => {
                matches!(v, Value::Int(f) if *f > 0)
            }
            (Op::LuaCycle | Op::FloorCycle | Op::SetNx, 0) => matches!(v, Value::Okay),
            (Op::LockInfo, _) => matches!(v, Value::Array(a) if a.len() == 8),
            (Op::Get, _) => matches!(v, Value::BulkString(_)),
            (_, _) => matches!(v, Value::Int(1)),
        }
    }

    /// How to remove the keys a fresh-key op left behind.
    fn cleanup(self, key: &str, token: &str, buf: &mut Vec<u8>) {
        match self {
            Op::LockAcquire => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            Op::SetNx => push_cmd(buf, &["DEL", key]),
            _ => {}
        }
    }
}

/// One measured phase.
struct Measured {
    label: String,
    depth: usize,
    ops: u64,
    secs: f64,
    hist: Histogram<u64>,
    cpu_secs: f64,
    errors: u64,
    /// ops/s of each round.
    rounds: Vec<f64>,
    /// Server CPU µs per op of each round.
    round_cpu: Vec<f64>,
}

impl Measured {
    fn empty(label: &str, depth: usize) -> Measured {
        Measured {
            label: label.to_string(),
            depth,
            ops: 0,
            secs: 0.0,
            hist: new_hist(),
            cpu_secs: 0.0,
            errors: 0,
            rounds: Vec::new(),
            round_cpu: Vec::new(),
        }
    }
    /// Adds one more round of the same phase.
    fn absorb(&mut self, round: Measured) {
        self.ops += round.ops;
        self.secs += round.secs;
        self.cpu_secs += round.cpu_secs;
        self.errors += round.errors;
        self.hist.add(&round.hist).unwrap();
        self.rounds.extend(round.rounds);
        self.round_cpu.extend(round.round_cpu);
    }
    /// (max − min) / mean of the rounds' ops/s: how far one round can be trusted (NaN for
    /// a single round).
    fn spread(&self) -> f64 {
        if self.rounds.len() < 2 {
            return f64::NAN;
        }
        let max = self.rounds.iter().cloned().fold(f64::MIN, f64::max);
        let min = self.rounds.iter().cloned().fold(f64::MAX, f64::min);
        let mean = self.rounds.iter().sum::<f64>() / self.rounds.len() as f64;
        (max - min) / mean
    }
    fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn cpu_us_per_op(&self) -> f64 {
        self.cpu_secs * 1e6 / self.ops as f64
    }
    fn cpu_util(&self) -> f64 {
        self.cpu_secs / self.secs
    }
    fn json(&self) -> Json {
        obj(vec![
            ("name", self.label.as_str().into()),
            ("pipeline", (self.depth as u64).into()),
            ("ops", self.ops.into()),
            ("seconds", self.secs.into()),
            ("ops_per_sec", self.rate().into()),
            ("p50_us", self.hist.value_at_quantile(0.5).into()),
            ("p99_us", self.hist.value_at_quantile(0.99).into()),
            ("p999_us", self.hist.value_at_quantile(0.999).into()),
            ("max_us", self.hist.max().into()),
            ("server_cpu_us_per_op", self.cpu_us_per_op().into()),
            ("server_cpu_util", self.cpu_util().into()),
            ("errors", self.errors.into()),
            ("spread", self.spread().into()),
            (
                "round_ops_per_sec",
                Json::Arr(self.rounds.iter().map(|&r| r.into()).collect()),
            ),
        ])
    }
}

/// The measurement window, shared by every thread of a phase.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

struct ThreadResult {
    ops: u64,
    errors: u64,
    hist: Histogram<u64>,
}

/// One connection's loop: batches of `depth` ops until the window ends.
fn drive(
    op: Op,
    depth: usize,
    t: usize,
    mut con: Connection,
    s: &Scripts,
    w: Window,
) -> ThreadResult {
    let token = uuid::Uuid::new_v4().to_string();
    let hold = HOLD_TTL_MS.to_string();
    let key0 = op.key(t, 0);
    match op {
        Op::LockInfo => drop(call(&mut con, &["LOCK.ACQUIRE", &key0, &token, &hold])),
        Op::Get => drop(call(&mut con, &["SET", &key0, &token, "PX", &hold])),
        _ => {}
    }
    let mut r = ThreadResult {
        ops: 0,
        errors: 0,
        hist: new_hist(),
    };
    let mut buf = Vec::with_capacity(4096);
    let mut keys: Vec<String> = Vec::with_capacity(depth);
    let mut n = 0u64;
    loop {
        let began = Instant::now();
        if began >= w.end {
            break;
        }
        keys.clear();
        keys.extend((0..depth as u64).map(|i| op.key(t, n + i)));
        n += depth as u64;
        for step in 0..op.steps() {
            buf.clear();
            for k in &keys {
                op.encode(step, k, &token, s, &mut buf);
            }
            let replies = pipeline(&mut con, &buf, depth);
            r.errors += replies.iter().filter(|v| !op.accepts(step, v)).count() as u64;
        }
        let done = Instant::now();
        if done >= w.start && done < w.end {
            r.ops += depth as u64;
            r.hist.record(micros(done - began)).unwrap();
        }
    }
    // Fresh-key ops leave their keys behind: remove them, unmeasured, so that the next phase
    // starts from an empty keyspace and an empty lease index.
    if matches!(op, Op::LockAcquire | Op::SetNx) {
        let token = &token;
        load(
            &mut con,
            0..n as usize,
            1,
            |i, buf| op.cleanup(&op.key(t, i as u64), token, buf),
            |v| matches!(v, Value::Int(1)),
        );
    }
    r
}

/// Runs `op` on `CONNS` connections for one warm-up and a measurement window of `phase`.
fn run_phase(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    phase: Duration,
    (label, op, depth): (&str, Op, usize),
) -> Measured {
    let mut probe = srv.connect();
    let conns: Vec<Connection> = (0..CONNS).map(|_| srv.connect()).collect();
    let t0 = Instant::now();
    let w = Window {
        start: t0 + plan.warmup,
        end: t0 + plan.warmup + phase,
    };
    let (results, cpu) = thread::scope(|scope| {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(t, con)| scope.spawn(move || drive(op, depth, t, con, s, w)))
            .collect();
        sleep_until(w.start);
        let c0 = server_cpu(&mut probe);
        sleep_until(w.end);
        let c1 = server_cpu(&mut probe);
        let results: Vec<ThreadResult> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, c1 - c0)
    });
    let mut m = Measured::empty(label, depth);
    m.secs = (w.end - w.start).as_secs_f64();
    m.cpu_secs = cpu;
    for r in results {
        m.ops += r.ops;
        m.errors += r.errors;
        m.hist.add(&r.hist).unwrap();
    }
    m.rounds.push(m.rate());
    m.round_cpu.push(m.cpu_us_per_op());
    eprintln!(
        "  {:<44} batch {:>2}: {:>10.0} ops/s  (server cpu {:>3.0}%)",
        label,
        depth,
        m.rate(),
        m.cpu_util() * 100.0
    );
    m
}

/// The median over rounds of `a`'s ops/s over `b`'s in the same round. Rounds of a variant
/// and its baselines run next to each other, so a slow spell of a shared machine shows in
/// both halves of a pair; one long aggregate would carry it into the ratio.
fn throughput_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&a.rounds, &b.rounds)
}

/// As `throughput_ratio`, for server CPU per op (`b`'s over `a`'s: above 1 means `a` costs less).
fn cpu_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&b.round_cpu, &a.round_cpu)
}

fn paired_median(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "rounds to pair");
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(f64::total_cmp);
    match r.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => r[n / 2],
        n => (r[n / 2 - 1] + r[n / 2]) / 2.0,
    }
}

/// A table row: a measurement, its short name for ratios, and the rows it is compared to.
struct Row {
    m: Measured,
    short: &'static str,
    vs: Vec<usize>,
}

/// Rows of one workload that share a table.
struct Table {
    title: String,
    rows: Vec<Row>,
}

impl Table {
    /// This row's throughput and server-CPU ratios to row `j`.
    fn ratios(&self, i: usize, j: usize) -> (f64, f64) {
        let (a, b) = (&self.rows[i].m, &self.rows[j].m);
        (throughput_ratio(a, b), cpu_ratio(a, b))
    }

    fn print(&self) {
        println!("\n{}", self.title);
        println!(
            "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9} {:>7} {:>4}  vs baselines: throughput | server CPU/op",
            "", "batch", "ops/s", "spread", "p50µs", "p99µs", "p999µs", "srv µs/op", "srv cpu", "err"
        );
        for (i, row) in self.rows.iter().enumerate() {
            let m = &row.m;
            let (thr, cpu): (Vec<String>, Vec<String>) = row
                .vs
                .iter()
                .map(|&j| {
                    let (t, c) = self.ratios(i, j);
                    let name = self.rows[j].short;
                    (format!("{t:.2}× {name}"), format!("{c:.2}× {name}"))
                })
                .unzip();
            let ratios = if thr.is_empty() {
                String::new()
            } else {
                format!("{} | {}", thr.join(", "), cpu.join(", "))
            };
            println!(
                "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9.2} {:>6.0}% {:>4}  {}",
                m.label,
                m.depth,
                thousands(m.rate()),
                percent(m.spread()),
                m.hist.value_at_quantile(0.5),
                m.hist.value_at_quantile(0.99),
                m.hist.value_at_quantile(0.999),
                m.cpu_us_per_op(),
                m.cpu_util() * 100.0,
                m.errors,
                ratios
            );
        }
    }

    fn json(&self) -> Json {
        let rows = self.rows.iter().enumerate().map(|(i, row)| {
            let mut j = row.m.json();
            let ratios = row.vs.iter().map(|&k| {
                let (t, c) = self.ratios(i, k);
                obj(vec![
                    ("baseline", self.rows[k].m.label.as_str().into()),
                    ("throughput_ratio", t.into()),
                    ("server_cpu_ratio", c.into()),
                ])
            });
            if let Json::Obj(fields) = &mut j {
                fields.push(("vs".into(), Json::Arr(ratios.collect())));
            }
            j
        });
        obj(vec![
            ("title", self.title.as_str().into()),
            ("rows", Json::Arr(rows.collect())),
        ])
    }

    fn find(&self, label: &str, depth: usize) -> &Measured {
        &self
            .rows
            .iter()
            .find(|r| r.m.label == label && r.m.depth == depth)
            .unwrap_or_else(|| panic!("no row {label} at batch {depth}"))
            .m
    }
}

/// Runs each (label, short name, op, compared-to) at each depth, `ROUNDS` times interleaved.
fn table(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    title: &str,
    variants: &[(&str, &'static str, Op, &[usize])],
) -> Table {
    eprintln!("{title}");
    let mut flush = srv.connect();
    let mut rows = Vec::new();
    for depth in DEPTHS {
        let base = rows.len();
        for &(label, short, _, vs) in variants {
            let m = Measured::empty(label, depth);
            let vs = vs.iter().map(|j| base + j).collect();
            rows.push(Row { m, short, vs });
        }
        for round in 0..ROUNDS {
            let mut order: Vec<usize> = (0..variants.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (label, _, op, _) = variants[i];
                flushall(&mut flush);
                let m = run_phase(srv, s, plan, plan.phase, (label, op, depth));
                rows[base + i].m.absorb(m);
            }
        }
    }
    Table {
        title: title.to_string(),
        rows,
    }
}

// ---------------------------------------------------------------------------------------
// Workload 4: 20 clients on one key.

#[derive(Clone, Copy)]
enum Contender {
    /// `LOCK.ACQUIRE … WAIT 0`, `LOCK.RELEASE`.
    Wait,
    /// `SET NX PX`, sleeping this long after a failed try; Lua release.
    Poll(Duration),
    /// `SET NX PX`; on failure wait for a release message (or the fallback); Lua release that
    /// publishes.
    PubSub,
}

const CONTENDED_KEY: &str = "contended";
const CONTENDED_CHANNEL: &str = "contended:released";

/// The resource the lock protects, in this process: it sees every holder come and go and
/// flags any overlap, and any fence that does not increase.
#[derive(Default)]
struct Resource {
    holder: AtomicU64,
    last_holder: AtomicU64,
    last_fence: AtomicU64,
    violations: AtomicU64,
}

impl Resource {
    /// Client `id` (from 1) holds the lock; returns whether it took over from another client.
    fn enter(&self, id: u64, fence: Option<i64>) -> bool {
        if self.holder.swap(id, SeqCst) != 0 {
            self.violations.fetch_add(1, SeqCst);
        }
        if let Some(f) = fence {
            if self.last_fence.fetch_max(f as u64, SeqCst) >= f as u64 {
                self.violations.fetch_add(1, SeqCst);
            }
        }
        self.last_holder.swap(id, SeqCst) != id
    }

    /// Called before the release is sent.
    fn leave(&self, id: u64) {
        if self.holder.swap(0, SeqCst) != id {
            self.violations.fetch_add(1, SeqCst);
        }
    }
}

struct ClientResult {
    acquisitions: u64,
    handoffs: u64,
    max_wait: Duration,
    waits: Histogram<u64>,
    errors: u64,
}

/// One contending client: acquire, check in and out of the resource, release, until `end`.
/// Acquisitions after `end` (clients still queued) are released but not counted.
fn contender(
    kind: Contender,
    id: u64,
    (mut con, sub): (Connection, Option<Connection>),
    res: &Resource,
    s: &Scripts,
    (start, end): (Instant, Instant),
) -> ClientResult {
    let token = uuid::Uuid::new_v4().to_string();
    let ttl = CONTENDED_TTL_MS.to_string();
    let mut sub = sub;
    let mut pubsub = sub.as_mut().map(|c| {
        let mut p = c.as_pubsub();
        p.subscribe(CONTENDED_CHANNEL).unwrap();
        p.set_read_timeout(Some(PUBSUB_FALLBACK)).unwrap();
        p
    });
    let mut r = ClientResult {
        acquisitions: 0,
        handoffs: 0,
        max_wait: Duration::ZERO,
        waits: new_hist(),
        errors: 0,
    };
    sleep_until(start);
    'run: loop {
        let began = Instant::now();
        if began >= end {
            break;
        }
        let fence = match kind {
            Contender::Wait => {
                let v = call(
                    &mut con,
                    &["LOCK.ACQUIRE", CONTENDED_KEY, &token, &ttl, "WAIT", "0"],
                );
                match v {
                    Value::Int(f) => Some(f),
                    other => panic!("LOCK.ACQUIRE WAIT 0 replied {other:?}"),
                }
            }
            Contender::Poll(_) | Contender::PubSub => loop {
                let v = call(&mut con, &["SET", CONTENDED_KEY, &token, "NX", "PX", &ttl]);
                if v == Value::Okay {
                    break None;
                }
                if Instant::now() >= end {
                    break 'run;
                }
                match (kind, pubsub.as_mut()) {
                    (Contender::Poll(every), _) => thread::sleep(every),
                    (_, Some(p)) => match p.get_message() {
                        Ok(_) => {}
                        Err(e) if e.is_timeout() => {}
                        Err(e) => panic!("pub/sub: {e}"),
                    },
                    _ => unreachable!(),
                }
            },
        };
        let got = Instant::now();
        let handoff = res.enter(id, fence);
        res.leave(id);
        let released = match kind {
            Contender::Wait => call(&mut con, &["LOCK.RELEASE", CONTENDED_KEY, &token]),
            Contender::Poll(_) => call(
                &mut con,
                &["EVALSHA", &s.release, "1", CONTENDED_KEY, &token],
            ),
            Contender::PubSub => {
                let sha = &s.release_publish;
                call(
                    &mut con,
                    &[
                        "EVALSHA",
                        sha,
                        "1",
                        CONTENDED_KEY,
                        &token,
                        CONTENDED_CHANNEL,
                    ],
                )
            }
        };
        if released != Value::Int(1) {
            r.errors += 1;
        }
        if got < end {
            r.acquisitions += 1;
            r.handoffs += u64::from(handoff);
            r.max_wait = r.max_wait.max(got - began);
            r.waits.record(micros(got - began)).unwrap();
        }
    }
    r
}

struct Contended {
    label: &'static str,
    short: &'static str,
    secs: f64,
    per_client: Vec<u64>,
    handoffs: u64,
    max_wait: Duration,
    waits: Histogram<u64>,
    violations: u64,
    errors: u64,
    cpu_secs: f64,
    /// Hand-offs/s of each round.
    rounds: Vec<f64>,
}

impl Contended {
    fn absorb(&mut self, round: Contended) {
        self.secs += round.secs;
        for (sum, n) in self.per_client.iter_mut().zip(&round.per_client) {
            *sum += n;
        }
        self.handoffs += round.handoffs;
        self.max_wait = self.max_wait.max(round.max_wait);
        self.waits.add(&round.waits).unwrap();
        self.violations += round.violations;
        self.errors += round.errors;
        self.cpu_secs += round.cpu_secs;
        self.rounds.extend(round.rounds);
    }
    /// Median over rounds of this scheme's hand-offs/s over `b`'s in the same round.
    fn handoff_ratio(&self, b: &Contended) -> f64 {
        paired_median(&self.rounds, &b.rounds)
    }
    fn acquisitions(&self) -> u64 {
        self.per_client.iter().sum()
    }
    fn handoff_rate(&self) -> f64 {
        self.handoffs as f64 / self.secs
    }
    /// Jain's fairness index of the per-client acquisition counts: 1 = perfectly even.
    fn fairness(&self) -> f64 {
        let sum: f64 = self.per_client.iter().map(|&x| x as f64).sum();
        let squares: f64 = self.per_client.iter().map(|&x| (x as f64).powi(2)).sum();
        sum * sum / (self.per_client.len() as f64 * squares)
    }
    fn json(&self, all: &[Contended]) -> Json {
        let vs = all.iter().filter(|b| b.short != self.short).map(|b| {
            obj(vec![
                ("baseline", b.label.into()),
                ("handoff_ratio", self.handoff_ratio(b).into()),
            ])
        });
        obj(vec![
            ("name", self.label.into()),
            ("seconds", self.secs.into()),
            ("handoffs", self.handoffs.into()),
            ("handoffs_per_sec", self.handoff_rate().into()),
            ("acquisitions", self.acquisitions().into()),
            (
                "acquisitions_per_sec",
                (self.acquisitions() as f64 / self.secs).into(),
            ),
            ("max_wait_us", micros(self.max_wait).into()),
            ("wait_p50_us", self.waits.value_at_quantile(0.5).into()),
            ("wait_p99_us", self.waits.value_at_quantile(0.99).into()),
            ("fairness_jain", self.fairness().into()),
            (
                "per_client_acquisitions",
                Json::Arr(self.per_client.iter().map(|&x| x.into()).collect()),
            ),
            ("violations", self.violations.into()),
            ("errors", self.errors.into()),
            ("server_cpu_util", (self.cpu_secs / self.secs).into()),
            ("vs", Json::Arr(vs.collect())),
        ])
    }
}

fn run_contended(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    label: &'static str,
    short: &'static str,
    kind: Contender,
) -> Contended {
    let mut probe = srv.connect();
    flushall(&mut probe);
    let res = Resource::default();
    let clients: Vec<(Connection, Option<Connection>)> = (0..CONTENDED_CLIENTS)
        .map(|_| {
            let sub = matches!(kind, Contender::PubSub).then(|| srv.connect());
            (srv.connect(), sub)
        })
        .collect();
    // Time for every client to subscribe before the start.
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + plan.contended;
    let (results, cpu) = thread::scope(|scope| {
        let res = &res;
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, cons)| {
                scope.spawn(move || contender(kind, i as u64 + 1, cons, res, s, (start, end)))
            })
            .collect();
        sleep_until(start);
        let c0 = server_cpu(&mut probe);
        sleep_until(end);
        let c1 = server_cpu(&mut probe);
        let results: Vec<ClientResult> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, c1 - c0)
    });
    // Everyone has released: nothing may be left of the lock (no holder, no stuck waiter).
    let left = match kind {
        Contender::Wait => call(&mut probe, &["LOCK.INFO", CONTENDED_KEY]),
        _ => call(&mut probe, &["GET", CONTENDED_KEY]),
    };
    let mut c = Contended {
        label,
        short,
        secs: plan.contended.as_secs_f64(),
        per_client: results.iter().map(|r| r.acquisitions).collect(),
        handoffs: results.iter().map(|r| r.handoffs).sum(),
        max_wait: results.iter().map(|r| r.max_wait).max().unwrap_or_default(),
        waits: new_hist(),
        violations: res.violations.load(SeqCst),
        errors: results.iter().map(|r| r.errors).sum::<u64>() + u64::from(left != Value::Nil),
        cpu_secs: cpu,
        rounds: Vec::new(),
    };
    for r in &results {
        c.waits.add(&r.waits).unwrap();
    }
    c.rounds.push(c.handoff_rate());
    eprintln!(
        "  {:<44} {:>10.0} hand-offs/s  (server cpu {:>3.0}%)",
        label,
        c.handoff_rate(),
        c.cpu_secs / c.secs * 100.0
    );
    c
}

fn print_contended(all: &[Contended]) {
    println!(
        "\n4. Contended: {CONTENDED_CLIENTS} clients on one key, acquire → release, no hold time \
         (hand-off = the lock goes to a different client; wait = from first try to acquisition)"
    );
    println!(
        "  {:<36} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8} {:>5} {:>7}  vs baselines (hand-offs/s)",
        "",
        "hand-offs/s",
        "acquires/s",
        "wait p50",
        "wait p99",
        "max wait",
        "fairness",
        "viol",
        "srv cpu"
    );
    for c in all {
        let vs: Vec<String> = all
            .iter()
            .filter(|b| b.short != c.short)
            .map(|b| format!("{} {}", ratio(c.handoff_ratio(b)), b.short))
            .collect();
        println!(
            "  {:<36} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8.4} {:>5} {:>6.0}%  {}",
            c.label,
            thousands(c.handoff_rate()),
            thousands(c.acquisitions() as f64 / c.secs),
            ms(c.waits.value_at_quantile(0.5)),
            ms(c.waits.value_at_quantile(0.99)),
            ms(micros(c.max_wait)),
            c.fairness(),
            c.violations,
            c.cpu_secs / c.secs * 100.0,
            vs.join(", ")
        );
    }
    println!("  per-client acquisitions:");
    for c in all {
        let counts: Vec<String> = c.per_client.iter().map(|x| x.to_string()).collect();
        println!("    {:<34} {}", c.short, counts.join(" "));
    }
    if all.iter().any(|c| c.errors > 0) {
        for c in all.iter().filter(|c| c.errors > 0) {
            println!(
                "  !! {}: {} failed releases or a lock left behind",
                c.label, c.errors
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Workload 5: lease end → grant to the head waiter.

struct LeaseEnd {
    delays: Histogram<u64>,
    /// Grants that arrived before the lease deadline as the client measures it (send time of
    /// the acquire + ttl, which is no later than the server's receipt + ttl): the lease
    /// ended early. They count as a delay of 0 in `delays`.
    early: u64,
    most_early: Duration,
    rtt: Histogram<u64>,
}

fn run_lease_end(srv: &Server, plan: &Plan) -> LeaseEnd {
    eprintln!("5. Lease-end hand-off");
    let mut holder = srv.connect();
    let mut waiter = srv.connect();
    flushall(&mut holder);
    let ttl = LEASE_TTL_MS.to_string();
    let mut r = LeaseEnd {
        delays: new_hist(),
        early: 0,
        most_early: Duration::ZERO,
        rtt: new_hist(),
    };
    for _ in 0..plan.lease_reps {
        let sent = Instant::now();
        let v = call(&mut holder, &["LOCK.ACQUIRE", "lease", "holder", &ttl]);
        assert!(matches!(v, Value::Int(_)), "holder's acquire: {v:?}");
        r.rtt.record(micros(sent.elapsed())).unwrap();
        let deadline = sent + Duration::from_millis(LEASE_TTL_MS);
        let v = call(
            &mut waiter,
            &["LOCK.ACQUIRE", "lease", "waiter", "10000", "WAIT", "0"],
        );
        let granted = Instant::now();
        assert!(matches!(v, Value::Int(_)), "waiter's acquire: {v:?}");
        match granted.checked_duration_since(deadline) {
            Some(d) => r.delays.record(micros(d)).unwrap(),
            None => {
                r.early += 1;
                r.most_early = r.most_early.max(deadline - granted);
                r.delays.record(1).unwrap();
            }
        }
        assert_eq!(
            call(&mut waiter, &["LOCK.RELEASE", "lease", "waiter"]),
            Value::Int(1)
        );
    }
    r
}

// ---------------------------------------------------------------------------------------
// Workload 6: memory per held lock, and throughput with many locks held.

struct MemRow {
    label: &'static str,
    bytes_per_lock: f64,
}

fn run_memory(srv: &Server, plan: &Plan) -> (Vec<MemRow>, f64) {
    eprintln!("6. Memory per held lock ({} locks)", plan.mem_locks);
    let mut con = srv.connect();
    let n = plan.mem_locks;
    let hold = HOLD_TTL_MS.to_string();
    let tokens: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let key = |i: usize| format!("lock:{i:012}");
    let mut measure = |label: &'static str, per_item: usize, make: &dyn Fn(usize, &mut Vec<u8>)| {
        flushall(&mut con);
        let before = used_memory(&mut con);
        load(&mut con, 0..n, per_item, make, |v| {
            matches!(v, Value::Okay | Value::Int(_))
        });
        let after = used_memory(&mut con);
        MemRow {
            label,
            bytes_per_lock: (after - before) / n as f64,
        }
    };
    let rows = vec![
        measure("SET NX PX string lock", 1, &|i, b| {
            push_cmd(b, &["SET", &key(i), &tokens[i], "NX", "PX", &hold])
        }),
        measure("SET NX PX + INCR fence key", 2, &|i, b| {
            let k = key(i);
            push_cmd(b, &["SET", &k, &tokens[i], "NX", "PX", &hold]);
            push_cmd(b, &["INCR", &format!("{k}:fence")]);
        }),
        measure("LOCK.ACQUIRE", 1, &|i, b| {
            push_cmd(b, &["LOCK.ACQUIRE", &key(i), &tokens[i], &hold])
        }),
    ];
    // What FLUSHALL leaves of the module's locks (lease-index entries are dropped only when
    // their deadline comes up).
    let before_flush = used_memory(&mut con);
    let held = rows[2].bytes_per_lock * n as f64;
    flushall(&mut con);
    let after_flush = used_memory(&mut con);
    let residual = (after_flush - (before_flush - held)) / n as f64;
    (rows, residual)
}

/// The cycle at batch 16 with few, then many, locks held: module cycles among held module
/// locks, and (for reference: how much Redis itself slows down with a bigger keyspace) floor
/// cycles among as many held string locks, each from an emptied keyspace.
fn run_held(srv: &Server, s: &Scripts, plan: &Plan) -> Table {
    let title = format!(
        "6b. Cycle at batch 16 with {} vs {} locks held",
        thousands(plan.few_held as f64),
        thousands(plan.many_held as f64)
    );
    eprintln!("{title}");
    let mut con = srv.connect();
    let hold = HOLD_TTL_MS.to_string();
    let token = uuid::Uuid::new_v4().to_string();
    let mut measure = |label: &str, op: Op, few: &mut Measured, many: &mut Measured| {
        flushall(&mut con);
        let mut hold_locks = |range: std::ops::Range<usize>| {
            let make = |i: usize, b: &mut Vec<u8>| {
                let key = format!("held:{i:09}");
                match op {
                    Op::LockCycle => push_cmd(b, &["LOCK.ACQUIRE", &key, &token, &hold]),
                    _ => push_cmd(b, &["SET", &key, &token, "NX", "PX", &hold]),
                }
            };
            load(&mut con, range, 1, make, |v| {
                matches!(v, Value::Okay | Value::Int(_))
            });
        };
        hold_locks(0..plan.few_held);
        let label_few = format!("{label}, {} held", thousands(plan.few_held as f64));
        few.absorb(run_phase(srv, s, plan, plan.phase, (&label_few, op, 16)));
        hold_locks(plan.few_held..plan.many_held);
        let label_many = format!("{label}, {} held", thousands(plan.many_held as f64));
        many.absorb(run_phase(srv, s, plan, plan.phase, (&label_many, op, 16)));
    };
    // Rounds alternate the module and the floor, each loaded afresh, as in the other tables:
    // on a shared machine one long phase each was as noisy as the effect measured.
    let names = |label: &str| {
        (
            format!("{label}, {} held", thousands(plan.few_held as f64)),
            format!("{label}, {} held", thousands(plan.many_held as f64)),
        )
    };
    let (lf, lm) = names("LOCK cycle");
    let (ff, fm) = names("floor cycle");
    let (mut lock_few, mut lock_many) = (Measured::empty(&lf, 16), Measured::empty(&lm, 16));
    let (mut floor_few, mut floor_many) = (Measured::empty(&ff, 16), Measured::empty(&fm, 16));
    for _ in 0..FEW_ROUNDS {
        measure("LOCK cycle", Op::LockCycle, &mut lock_few, &mut lock_many);
        measure(
            "floor cycle",
            Op::FloorCycle,
            &mut floor_few,
            &mut floor_many,
        );
    }
    flushall(&mut con);
    Table {
        title,
        rows: vec![
            Row {
                m: lock_few,
                short: "LOCK few",
                vs: vec![],
            },
            Row {
                m: lock_many,
                short: "LOCK few",
                vs: vec![0],
            },
            Row {
                m: floor_few,
                short: "floor few",
                vs: vec![],
            },
            Row {
                m: floor_many,
                short: "floor few",
                vs: vec![2],
            },
        ],
    }
}

// ---------------------------------------------------------------------------------------
// Targets of issue 4, checked against the measurements.

struct Target {
    what: String,
    measured: f64,
    goal: f64,
    /// true: measured ≥ goal is met; false: measured ≤ goal is met.
    at_least: bool,
    unit: &'static str,
}

impl Target {
    fn met(&self) -> bool {
        if self.at_least {
            self.measured >= self.goal
        } else {
            self.measured <= self.goal
        }
    }
}

fn target(
    what: impl Into<String>,
    measured: f64,
    cmp: &str,
    goal: f64,
    unit: &'static str,
) -> Target {
    Target {
        what: what.into(),
        measured,
        goal,
        at_least: cmp == ">=",
        unit,
    }
}

// ---------------------------------------------------------------------------------------
// Output helpers: numbers, and a small hand-written JSON tree.

fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.0}%", x * 100.0)
    } else {
        "-".into()
    }
}

fn ms(us: u64) -> String {
    format!("{:.2}ms", us as f64 / 1000.0)
}

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}×")
    } else {
        "∞×".into()
    }
}

enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

fn obj(fields: Vec<(&str, Json)>) -> Json {
    Json::Obj(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

impl From<f64> for Json {
    fn from(x: f64) -> Json {
        if x.is_finite() {
            Json::Num(x)
        } else {
            Json::Null
        }
    }
}
impl From<u64> for Json {
    fn from(x: u64) -> Json {
        Json::Num(x as f64)
    }
}
impl From<bool> for Json {
    fn from(x: bool) -> Json {
        Json::Bool(x)
    }
}
impl From<&str> for Json {
    fn from(x: &str) -> Json {
        Json::Str(x.to_string())
    }
}
impl From<String> for Json {
    fn from(x: String) -> Json {
        Json::Str(x)
    }
}

impl Json {
    fn render(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => write!(out, "{b}").unwrap(),
            Json::Num(x) if x.fract() == 0.0 && x.abs() < 1e15 => write!(out, "{x:.0}").unwrap(),
            Json::Num(x) => write!(out, "{x}").unwrap(),
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items) if items.iter().all(|i| matches!(i, Json::Num(_))) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.render(out, indent);
                }
                out.push(']');
            }
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    pad(out, indent + 2);
                    item.render(out, indent + 2);
                }
                out.push('\n');
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    pad(out, indent + 2);
                    Json::Str(k.clone()).render(out, indent + 2);
                    out.push_str(": ");
                    v.render(out, indent + 2);
                }
                out.push('\n');
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Setup: the module, the machine, pinning.

fn module_path() -> PathBuf {
    // As in the tests: an explicit module, e.g. an older build to compare against.
    if let Ok(p) = std::env::var("REDIS_LOCK_MODULE") {
        return PathBuf::from(p);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(|t| manifest.join(t))
        .unwrap_or_else(|_| manifest.join("target"));
    let p = target.join("release").join("libredis_lock.so");
    assert!(
        p.exists(),
        "module not found at {}: run `cargo build --release` first (`make bench` does)",
        p.display()
    );
    let p = p.canonicalize().unwrap();
    // `cargo bench` does not rebuild the cdylib: warn when the sources are newer.
    let built = fs::metadata(&p).and_then(|m| m.modified()).ok();
    let newest_src = fs::read_dir(manifest.join("src"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .max();
    if let (Some(built), Some(src)) = (built, newest_src) {
        if src > built {
            eprintln!(
                "WARNING: src/ is newer than {}: run `cargo build --release`",
                p.display()
            );
        }
    }
    p
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|x| x.1.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Pins this process (and every thread it starts from now on) to CPU 0, leaving CPU 1 to the
/// server. Must run before any thread is started.
fn pin_client(cpus: usize) -> bool {
    if std::env::var("BENCH_NO_PIN").is_ok_and(|v| !v.is_empty() && v != "0") || cpus < 2 {
        return false;
    }
    Command::new("taskset")
        .args(["-p", "-c", "0", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn git_revision() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let rev = out(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        out(&["status", "--porcelain", "--", "src", "Cargo.toml"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{rev} + uncommitted changes")
    } else {
        rev
    }
}

// ---------------------------------------------------------------------------------------

fn main() {
    let began = Instant::now();
    let plan = Plan::from_env();
    let module = module_path();
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = pin_client(cpus);
    let srv = Server::start(&module, pinned);
    let mut con = srv.connect();
    let version = text(&call(&mut con, &["INFO", "server"]))
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        .unwrap_or_default();
    let modules = format!("{:?}", call(&mut con, &["MODULE", "LIST"]));
    assert!(modules.contains("lock"), "module not loaded: {modules}");
    let scripts = Scripts::load(&mut con);
    let s = &scripts;
    let model = cpu_model();
    let revision = git_revision();
    let pinning = if pinned {
        "server pinned to CPU 1, client threads to CPU 0 (taskset)".to_string()
    } else {
        "not pinned: client and server share all CPUs".to_string()
    };

    println!(
        "redis-lock benchmark{}",
        if plan.quick {
            " (BENCH_QUICK: short smoke run, noisy)"
        } else {
            ""
        }
    );
    println!("  machine:  {model}, {cpus} CPUs (nproc), shared by client and server");
    println!(
        "  server:   redis-server {version} on 127.0.0.1:{}, --save \"\" --appendonly no",
        srv.port
    );
    println!("  module:   {} (git {revision})", module.display());
    println!("  pinning:  {pinning}");
    println!(
        "  phases:   {CONNS} connections; each variant {ROUNDS} rounds interleaved with its \
         baselines, {:.2}s warm-up + {:.2}s measured per round; contended {FEW_ROUNDS} rounds of \
         {:.1}s per scheme, 6b {FEW_ROUNDS} rounds\n  ratios:   the median over rounds of each \
         round's ratio to the baseline round next to it",
        plan.warmup.as_secs_f64(),
        plan.phase.as_secs_f64(),
        plan.contended.as_secs_f64()
    );
    eprintln!();

    if let Ok(which) = std::env::var("BENCH_PROFILE") {
        profile(&srv, s, &plan, &which);
        return;
    }

    // 1–3: uncontended.
    let cycle = table(
        &srv,
        s,
        &plan,
        "1. Uncontended acquire+release cycle on random keys (op = 1 cycle)",
        &[
            (
                "LOCK.ACQUIRE + LOCK.RELEASE",
                "LOCK",
                Op::LockCycle,
                &[2, 1],
            ),
            ("SET NX PX + EVALSHA del (Lua)", "Lua", Op::LuaCycle, &[2]),
            ("SET PX + DEL (floor)", "floor", Op::FloorCycle, &[]),
        ],
    );
    let fenced = table(
        &srv,
        s,
        &plan,
        "2. Fenced cycle (op = 1 cycle that yields a fence)",
        &[
            (
                "LOCK.ACQUIRE (fence) + LOCK.RELEASE",
                "LOCK",
                Op::LockCycle,
                &[1],
            ),
            (
                "EVALSHA SET NX PX+INCR, EVALSHA del",
                "Lua fenced",
                Op::LuaFencedCycle,
                &[],
            ),
        ],
    );
    let acquire = table(
        &srv,
        s,
        &plan,
        "3a. Single command: acquire a fresh key (op = 1 command)",
        &[
            ("LOCK.ACQUIRE", "LOCK.ACQUIRE", Op::LockAcquire, &[1]),
            ("SET NX PX", "SET NX PX", Op::SetNx, &[]),
        ],
    );
    let read = table(
        &srv,
        s,
        &plan,
        "3b. Single command: read a held lock (op = 1 command)",
        &[
            ("LOCK.INFO", "LOCK.INFO", Op::LockInfo, &[1]),
            ("GET", "GET", Op::Get, &[]),
        ],
    );

    // 4: contended.
    eprintln!("4. Contended");
    let schemes: [(&'static str, &'static str, Contender); 4] = [
        (
            "LOCK.ACQUIRE WAIT 0 (blocking FIFO)",
            "WAIT",
            Contender::Wait,
        ),
        (
            "SET NX PX, poll every 100 ms",
            "100ms poll",
            Contender::Poll(SLOW_POLL),
        ),
        (
            "SET NX PX, poll every 1 ms",
            "1ms poll",
            Contender::Poll(FAST_POLL),
        ),
        ("SET NX PX + pub/sub wake-up", "pub/sub", Contender::PubSub),
    ];
    let mut contended: Vec<Option<Contended>> = schemes.iter().map(|_| None).collect();
    for round in 0..FEW_ROUNDS {
        let mut order: Vec<usize> = (0..schemes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, short, kind) = schemes[i];
            let c = run_contended(&srv, s, &plan, label, short, kind);
            match &mut contended[i] {
                Some(sum) => sum.absorb(c),
                slot => *slot = Some(c),
            }
        }
    }
    let contended: Vec<Contended> = contended.into_iter().flatten().collect();

    // 5, 6.
    let lease = run_lease_end(&srv, &plan);
    let (memory, residual) = run_memory(&srv, &plan);
    let held = run_held(&srv, s, &plan);

    // Tables.
    for t in [&cycle, &fenced, &acquire, &read] {
        t.print();
    }
    print_contended(&contended);
    println!(
        "\n5. Lease-end hand-off: {}-ms lease never released, a waiter blocked with WAIT 0 \
         ({} times; delay from lease deadline to grant, client clock)",
        LEASE_TTL_MS, plan.lease_reps
    );
    println!(
        "  p50 {}  p99 {}  max {}   (round trip of an acquire: p50 {})",
        ms(lease.delays.value_at_quantile(0.5)),
        ms(lease.delays.value_at_quantile(0.99)),
        ms(lease.delays.max()),
        ms(lease.rtt.value_at_quantile(0.5)),
    );
    if lease.early > 0 {
        println!(
            "  !! {} of {} grants came before send time + ttl, up to {} early: the lease ended \
             before its ttl had passed since the server received the acquire",
            lease.early,
            plan.lease_reps,
            ms(micros(lease.most_early))
        );
    }
    println!(
        "\n6a. Memory per held lock ({} locks, used_memory delta)",
        thousands(plan.mem_locks as f64)
    );
    let string_bytes = memory[0].bytes_per_lock;
    for m in &memory {
        println!(
            "  {:<36} {:>8.1} bytes/lock  {:.2}× string lock",
            m.label,
            m.bytes_per_lock,
            m.bytes_per_lock / string_bytes
        );
    }
    println!("  left after FLUSHALL of the module's locks: {residual:.1} bytes/lock (until their lease deadlines)");
    held.print();

    // Targets.
    let lock_memory = memory[2].bytes_per_lock;
    let wait = &contended[0];
    let cycle_lock = cycle.find("LOCK.ACQUIRE + LOCK.RELEASE", 16);
    let cycle_lua = cycle.find("SET NX PX + EVALSHA del (Lua)", 16);
    let cycle_floor = cycle.find("SET PX + DEL (floor)", 16);
    let fenced_lock = fenced.find("LOCK.ACQUIRE (fence) + LOCK.RELEASE", 16);
    let fenced_lua = fenced.find("EVALSHA SET NX PX+INCR, EVALSHA del", 16);
    let acq_lock = acquire.find("LOCK.ACQUIRE", 16);
    let acq_set = acquire.find("SET NX PX", 16);
    let thr = throughput_ratio;
    let cpu = cpu_ratio;
    let violations: u64 = contended.iter().map(|c| c.violations).sum();
    let targets = vec![
        target(
            "cycle, batch 16, throughput vs floor",
            thr(cycle_lock, cycle_floor),
            ">=",
            0.90,
            "×",
        ),
        target(
            "cycle, batch 16, server CPU/op vs floor",
            cpu(cycle_lock, cycle_floor),
            ">=",
            0.90,
            "×",
        ),
        target(
            "cycle, batch 16, throughput vs Lua",
            thr(cycle_lock, cycle_lua),
            ">=",
            1.7,
            "×",
        ),
        target(
            "cycle, batch 16, server CPU/op vs Lua",
            cpu(cycle_lock, cycle_lua),
            ">=",
            1.7,
            "×",
        ),
        target(
            "fenced cycle, batch 16, throughput vs Lua fenced",
            thr(fenced_lock, fenced_lua),
            ">=",
            3.0,
            "×",
        ),
        target(
            "fenced cycle, batch 16, server CPU/op vs Lua fenced",
            cpu(fenced_lock, fenced_lua),
            ">=",
            3.0,
            "×",
        ),
        target(
            "LOCK.ACQUIRE, batch 16, throughput vs SET NX PX",
            thr(acq_lock, acq_set),
            ">=",
            0.90,
            "×",
        ),
        target(
            "LOCK.ACQUIRE, batch 16, server CPU/op vs SET NX PX",
            cpu(acq_lock, acq_set),
            ">=",
            0.90,
            "×",
        ),
        target(
            "contended hand-offs/s vs 1 ms poll",
            wait.handoff_ratio(&contended[2]),
            ">=",
            3.0,
            "×",
        ),
        target(
            "contended hand-offs/s vs pub/sub",
            wait.handoff_ratio(&contended[3]),
            ">=",
            150.0,
            "×",
        ),
        target(
            "contended fairness (Jain) with WAIT",
            wait.fairness(),
            ">=",
            0.999,
            "",
        ),
        target(
            "contended exclusion violations (all schemes)",
            violations as f64,
            "<=",
            0.0,
            "",
        ),
        target(
            "lease-end hand-off p99",
            lease.delays.value_at_quantile(0.99) as f64 / 1000.0,
            "<=",
            5.0,
            " ms",
        ),
        target(
            "memory per held lock vs string lock",
            lock_memory / string_bytes,
            "<=",
            1.3,
            "×",
        ),
        target(
            format!(
                "cycle throughput, {} held vs {} held",
                thousands(plan.many_held as f64),
                thousands(plan.few_held as f64)
            ),
            held.ratios(1, 0).0,
            ">=",
            0.90,
            "×",
        ),
    ];
    println!("\nTargets (issue 4)");
    for t in &targets {
        println!(
            "  {:<58} {:>9.3}{:<3} (goal {} {}{})  {}",
            t.what,
            t.measured,
            t.unit,
            if t.at_least { "≥" } else { "≤" },
            t.goal,
            t.unit,
            if t.met() { "met" } else { "MISSED" }
        );
    }
    let errors: u64 = [&cycle, &fenced, &acquire, &read, &held]
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| r.m.errors))
        .chain(contended.iter().map(|c| c.errors))
        .sum();
    if errors > 0 {
        println!(
            "\n!! {errors} unexpected replies (failed acquires/releases): see the err columns"
        );
    }
    let total = began.elapsed();
    println!("\nTotal run time: {:.0} s", total.as_secs_f64());

    // JSON.
    let unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let json = obj(vec![
        ("generated_unix", unix.into()),
        ("quick", plan.quick.into()),
        (
            "machine",
            obj(vec![
                ("cpu_model", model.into()),
                ("cpus", (cpus as u64).into()),
                ("shared_by_client_and_server", true.into()),
                ("pinned", pinned.into()),
                ("pinning", pinning.into()),
            ]),
        ),
        ("redis_version", version.into()),
        ("module_git", revision.into()),
        ("connections", (CONNS as u64).into()),
        ("warmup_seconds", plan.warmup.as_secs_f64().into()),
        ("phase_seconds", plan.phase.as_secs_f64().into()),
        ("rounds", (ROUNDS as u64).into()),
        ("uncontended_cycle", cycle.json()),
        ("fenced_cycle", fenced.json()),
        ("single_acquire", acquire.json()),
        ("single_read", read.json()),
        (
            "contended",
            obj(vec![
                ("clients", (CONTENDED_CLIENTS as u64).into()),
                (
                    "runs",
                    Json::Arr(contended.iter().map(|c| c.json(&contended)).collect()),
                ),
            ]),
        ),
        (
            "lease_end_handoff",
            obj(vec![
                ("ttl_ms", LEASE_TTL_MS.into()),
                ("reps", (plan.lease_reps as u64).into()),
                ("p50_us", lease.delays.value_at_quantile(0.5).into()),
                ("p99_us", lease.delays.value_at_quantile(0.99).into()),
                ("max_us", lease.delays.max().into()),
                ("grants_before_deadline", lease.early.into()),
                ("most_early_us", micros(lease.most_early).into()),
                (
                    "acquire_rtt_p50_us",
                    lease.rtt.value_at_quantile(0.5).into(),
                ),
            ]),
        ),
        (
            "memory",
            obj(vec![
                ("locks", (plan.mem_locks as u64).into()),
                (
                    "rows",
                    Json::Arr(
                        memory
                            .iter()
                            .map(|m| {
                                obj(vec![
                                    ("name", m.label.into()),
                                    ("bytes_per_lock", m.bytes_per_lock.into()),
                                    (
                                        "ratio_to_string_lock",
                                        (m.bytes_per_lock / string_bytes).into(),
                                    ),
                                ])
                            })
                            .collect(),
                    ),
                ),
                ("left_after_flushall_bytes_per_lock", residual.into()),
            ]),
        ),
        ("held_locks", held.json()),
        (
            "targets",
            Json::Arr(
                targets
                    .iter()
                    .map(|t| {
                        obj(vec![
                            ("what", t.what.as_str().into()),
                            ("measured", t.measured.into()),
                            ("goal", t.goal.into()),
                            ("at_least", t.at_least.into()),
                            ("met", t.met().into()),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("unexpected_replies", errors.into()),
        ("total_seconds", total.as_secs_f64().into()),
    ]);
    let mut out = String::new();
    json.render(&mut out, 0);
    out.push('\n');
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench-results.json");
    fs::write(&path, out).expect("write bench-results.json");
    println!("Results written to {}", path.display());
}

/// `BENCH_PROFILE=lock|lua|floor|lua-fenced|acquire|setnx`: one op at batch 16, repeated for
/// `BENCH_PROFILE_SECS` (default 20) so that `perf record -p <server pid>` or a before/after
/// comparison can watch it. Prints the server's PID first.
fn profile(srv: &Server, s: &Scripts, plan: &Plan, which: &str) {
    let op = match which {
        "lock" => Op::LockCycle,
        "lua" => Op::LuaCycle,
        "floor" => Op::FloorCycle,
        "lua-fenced" => Op::LuaFencedCycle,
        "acquire" => Op::LockAcquire,
        "setnx" => Op::SetNx,
        other => {
            panic!("BENCH_PROFILE={other}: expected lock, lua, floor, lua-fenced, acquire or setnx")
        }
    };
    let secs: u64 = std::env::var("BENCH_PROFILE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    // BENCH_PROFILE_HELD=n: n long-held locks (or string locks) in place first, as in 6b.
    let held: usize = std::env::var("BENCH_PROFILE_HELD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if held > 0 {
        let mut con = srv.connect();
        let hold = HOLD_TTL_MS.to_string();
        let make = |i: usize, b: &mut Vec<u8>| {
            let key = format!("held:{i:09}");
            match op {
                Op::LockCycle | Op::LockAcquire => {
                    push_cmd(b, &["LOCK.ACQUIRE", &key, "holder", &hold])
                }
                _ => push_cmd(b, &["SET", &key, "holder", "NX", "PX", &hold]),
            }
        };
        load(&mut con, 0..held, 1, make, |v| {
            matches!(v, Value::Okay | Value::Int(_))
        });
    }
    println!("server pid {}", srv.child.id());
    let m = run_phase(srv, s, plan, Duration::from_secs(secs), (which, op, 16));
    println!(
        "{which}: {:.0} ops/s, server {:.3} µs CPU/op",
        m.rate(),
        m.cpu_us_per_op()
    );
}
