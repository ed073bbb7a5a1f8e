//! The failover harness of issue 26: real Redis Sentinel in front of a master and two
//! replicas with the module loaded, clients looping acquire → guarded `RPUSH` of their
//! fence → extend → release through the Rust client library, a fault on the current master
//! every few seconds, and at the end the recorded history judged by the checker
//! (`redis_lock_failover::check`). See failover/README.md for the options and the rules.
//!
//! Exits non-zero only when the harness itself fails (servers that do not start, no stable
//! master at the end, a client thread that panics): violations in plain mode are the
//! baseline being measured, not a failure.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::RedisError;
use redis_lock_client::{Error, GuardError, Mutex};
use redis_lock_failover::check::check;
use redis_lock_failover::history::{History, Nanos, Node, Observation, Op, OpKind, Outcome};

/// The name Sentinel monitors the master under.
const MASTER_NAME: &str = "mymaster";
/// Ports are picked here, away from the client tests' 41000–49999.
const PORTS: std::ops::Range<u16> = 52000..56000;
/// A paused process (master or replica) stays stopped this long: past
/// `down-after-milliseconds` (1000), so that a paused master is failed over.
const PAUSE: Duration = Duration::from_secs(3);
/// A client's pause after an error, before it asks Sentinel for the master again.
const BACKOFF: Duration = Duration::from_millis(100);
/// Faults start after this, once clients run.
const WARMUP: Duration = Duration::from_secs(3);
/// How long the end waits for one master that every Sentinel names and both replicas follow.
const SETTLE: Duration = Duration::from_secs(60);

/// How the clients take their locks, and what the servers run with. Plain: the client
/// library's defaults, the module's defaults. Durable modes (the library's `durable(n, t)`)
/// and module settings slot in here as further variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "plain" => Ok(Mode::Plain),
            other => Err(format!("unknown mode {other:?} (known: plain)")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
        }
    }

    /// Extra arguments for every data server.
    fn server_args(self) -> Vec<String> {
        match self {
            Mode::Plain => Vec::new(),
        }
    }

    /// The lock as the clients take it.
    fn lock(self, mutex: Mutex) -> Mutex {
        match self {
            Mode::Plain => mutex,
        }
    }
}

#[derive(Clone, Debug)]
struct Args {
    seconds: u64,
    seed: u64,
    clients: u32,
    keys: u32,
    mode: Mode,
    ttl_ms: u64,
    wait_ms: u64,
    command_timeout_ms: u64,
    fault_min_ms: u64,
    fault_max_ms: u64,
    resolve_ms: u64,
    work_ms: u64,
    module: PathBuf,
}

const USAGE: &str = "usage: failover [--seconds N (60)] [--seed N (26)] [--clients N (8)] \
[--keys N (3)] [--mode plain] [--ttl-ms N (3000)] [--wait-ms N (1000)] \
[--command-timeout-ms N (5000)] [--fault-min-ms N (6000)] [--fault-max-ms N (8000)] \
[--resolve-ms N (0: only after errors)] [--work-ms N (5)] \
[--module PATH (target/release/libredis_lock.so, or $REDIS_LOCK_MODULE)]";

impl Args {
    fn parse() -> Result<Args, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let module = std::env::var_os("REDIS_LOCK_MODULE")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/libredis_lock.so"));
        let mut a = Args {
            seconds: 60,
            seed: 26,
            clients: 8,
            keys: 3,
            mode: Mode::Plain,
            ttl_ms: 3000,
            // At most a third of the ttl: a grant that waited longer is renewed by the
            // library with an extend the history does not see (see check.rs, "Holds").
            wait_ms: 1000,
            command_timeout_ms: 5000,
            fault_min_ms: 6000,
            fault_max_ms: 8000,
            // 0: a client asks Sentinel again only after an error, as in issue 26's
            // measurement, so a deposed master keeps its clients until Sentinel demotes it
            // (8-10 s). A period stands for clients that follow a switch as it happens
            // (a subscriber to +switch-master).
            resolve_ms: 0,
            // A hold does some work: up to this long (uniform) after the guarded write, and
            // again after the extend. Holds of a few milliseconds, as a lock guards real work.
            work_ms: 5,
            module,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_string());
            }
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let num = || {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--seconds" => a.seconds = num()?,
                "--seed" => a.seed = num()?,
                "--clients" => a.clients = num()? as u32,
                "--keys" => a.keys = num()? as u32,
                "--mode" => a.mode = Mode::parse(&value)?,
                "--ttl-ms" => a.ttl_ms = num()?,
                "--wait-ms" => a.wait_ms = num()?,
                "--command-timeout-ms" => a.command_timeout_ms = num()?,
                "--fault-min-ms" => a.fault_min_ms = num()?,
                "--fault-max-ms" => a.fault_max_ms = num()?,
                "--resolve-ms" => a.resolve_ms = num()?,
                "--work-ms" => a.work_ms = num()?,
                "--module" => a.module = PathBuf::from(&value),
                _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
            }
        }
        if a.clients == 0 || a.keys == 0 || a.fault_min_ms == 0 || a.fault_max_ms < a.fault_min_ms {
            return Err(format!(
                "clients, keys and fault intervals must be positive\n{USAGE}"
            ));
        }
        a.module = a
            .module
            .canonicalize()
            .map_err(|e| format!("module {}: {e} (run `make build`)", a.module.display()))?;
        Ok(a)
    }
}

// ---------------------------------------------------------------------------------------
// Processes

/// One server process the harness started: a data server or a Sentinel.
struct Proc {
    port: Node,
    dir: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Proc {
    fn pid(&self) -> Option<libc::pid_t> {
        self.child.as_ref().map(|c| c.id() as libc::pid_t)
    }

    fn signal(&mut self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on the PID of a child this harness started and has not reaped.
            unsafe { libc::kill(pid, sig) };
        }
        match sig {
            libc::SIGSTOP => self.stopped = true,
            libc::SIGCONT => self.stopped = false,
            _ => {}
        }
    }

    /// SIGKILL, and reap: the PID is not signalled again.
    fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.stopped = false;
    }
}

/// Every process of a run. Dropping it kills them all, by PID, also when the harness fails
/// or panics; and each is started with `PR_SET_PDEATHSIG`, so that it dies with the harness
/// even when the harness is killed itself.
struct Servers {
    data: Vec<Proc>,
    sentinels: Vec<Proc>,
    module: PathBuf,
    mode: Mode,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for p in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            p.kill();
        }
    }
}

fn spawn(args: &[String], dir: &Path) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stdout.log"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut cmd = Command::new("redis-server");
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // SAFETY: prctl(2) is async-signal-safe, and the closure touches no memory of the parent.
    // The death signal is tied to the spawning thread: only the main thread spawns.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("redis-server: {e}"))
}

fn free_ports(n: usize, seed: u64) -> Result<Vec<Node>, String> {
    // Start somewhere that depends on the PID, so that two runs on one machine rarely race
    // for the same ports; a port that binds now is taken at once by its server.
    let span = u64::from(PORTS.end - PORTS.start);
    let first = (u64::from(std::process::id()) * 7919 + seed) % span;
    let mut ports = Vec::new();
    for at in first..first + span {
        let port = PORTS.start + (at % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
            if ports.len() == n {
                return Ok(ports);
            }
        }
    }
    Err(format!("no {n} free ports in {PORTS:?}"))
}

impl Servers {
    fn data_args(&self, port: Node, dir: &Path, replica_of: Option<Node>) -> Vec<String> {
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.display().to_string(),
            "--logfile",
            "redis.log",
            "--save",
            "",
            "--appendonly",
            "no",
            // A demoted master resyncs at once, without an RDB on disk in between.
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            "--loadmodule",
            &self.module.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(master) = replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        }
        args.extend(self.mode.server_args());
        args
    }

    fn start_data(&mut self, i: usize, replica_of: Option<Node>) -> Result<(), String> {
        let (port, dir) = (self.data[i].port, self.data[i].dir.clone());
        let child = spawn(&self.data_args(port, &dir, replica_of), &dir)?;
        self.data[i].child = Some(child);
        self.data[i].stopped = false;
        Ok(())
    }

    fn start(base: &Path, args: &Args) -> Result<Servers, String> {
        let ports = free_ports(6, args.seed)?;
        let proc_at = |port: Node, name: String| -> Result<Proc, String> {
            let dir = base.join(name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok(Proc {
                port,
                dir,
                child: None,
                stopped: false,
            })
        };
        let mut s = Servers {
            data: Vec::new(),
            sentinels: Vec::new(),
            module: args.module.clone(),
            mode: args.mode,
        };
        for (i, &port) in ports[..3].iter().enumerate() {
            s.data.push(proc_at(port, format!("node-{port}"))?);
            s.start_data(i, (i > 0).then_some(ports[0]))?;
        }
        for &port in &ports[3..] {
            let p = proc_at(port, format!("sentinel-{port}"))?;
            // Sentinel rewrites its config file, so each has its own, written fresh.
            let conf = p.dir.join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel.log\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 3000\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir = p.dir.display(),
                master = ports[0],
            );
            std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
            let child = spawn(
                &[conf.display().to_string(), "--sentinel".to_string()],
                &p.dir,
            )?;
            s.sentinels.push(Proc {
                child: Some(child),
                ..p
            });
        }
        Ok(s)
    }

    fn data_index(&self, port: Node) -> Option<usize> {
        self.data.iter().position(|p| p.port == port)
    }

    fn sentinel_ports(&self) -> Vec<Node> {
        self.sentinels.iter().map(|p| p.port).collect()
    }
}

// ---------------------------------------------------------------------------------------
// Talking to servers

fn connect(port: Node, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

fn ask_master(conn: &mut redis::Connection) -> redis::RedisResult<Node> {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(conn)?;
    addr.get(1).and_then(|p| p.parse().ok()).ok_or_else(|| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "master address",
            format!("{addr:?}"),
        ))
    })
}

fn info_replication(port: Node) -> Option<HashMap<String, String>> {
    let mut conn = connect(port, Duration::from_millis(500)).ok()?;
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect(),
    )
}

/// The master every Sentinel names, if it is a master with both other data servers
/// following it, online.
fn settled_master(sentinels: &[Node], data: &[Node]) -> Option<Node> {
    let mut named = Vec::new();
    for &s in sentinels {
        let mut conn = connect(s, Duration::from_millis(500)).ok()?;
        named.push(ask_master(&mut conn).ok()?);
    }
    let master = named[0];
    if named.iter().any(|&m| m != master) || !data.contains(&master) {
        return None;
    }
    let info = info_replication(master)?;
    let online = (0..data.len())
        .filter(|i| {
            info.get(&format!("slave{i}"))
                .is_some_and(|v| v.contains("state=online"))
        })
        .count();
    if info.get("role").map(String::as_str) != Some("master") || online != data.len() - 1 {
        return None;
    }
    for &replica in data.iter().filter(|&&p| p != master) {
        let info = info_replication(replica)?;
        let ok = info.get("role").map(String::as_str) == Some("slave")
            && info.get("master_port") == Some(&master.to_string())
            && info.get("master_link_status").map(String::as_str) == Some("up");
        if !ok {
            return None;
        }
    }
    Some(master)
}

// ---------------------------------------------------------------------------------------
// The run's shared state

struct Shared {
    start: Instant,
    stop: AtomicBool,
    next_hold: AtomicU64,
    observations: StdMutex<Vec<Observation>>,
    sentinels: Vec<Node>,
    args: Args,
}

impl Shared {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    fn observe(&self, sentinel: Node, master: Node, at: Nanos) {
        self.observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Observation {
                at,
                sentinel,
                master,
            });
    }

    /// The master Sentinel names, asked as a client would (the first Sentinel that answers,
    /// starting from `first`); every answer goes into the history.
    fn resolve(&self, first: usize) -> Option<Node> {
        let n = self.sentinels.len();
        for i in 0..n {
            let s = self.sentinels[(first + i) % n];
            let at = self.now();
            let answer =
                connect(s, Duration::from_millis(300)).and_then(|mut c| ask_master(&mut c));
            if let Ok(master) = answer {
                self.observe(s, master, at);
                return Some(master);
            }
        }
        None
    }

    /// The master most Sentinels name now (for picking a fault's target).
    fn current_master(&self) -> Option<Node> {
        let obs = self
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut latest: HashMap<Node, (Nanos, Node)> = HashMap::new();
        for o in obs.iter() {
            let e = latest.entry(o.sentinel).or_insert((o.at, o.master));
            if o.at >= e.0 {
                *e = (o.at, o.master);
            }
        }
        let mut votes: BTreeMap<Node, usize> = BTreeMap::new();
        for (_, m) in latest.values() {
            *votes.entry(*m).or_default() += 1;
        }
        votes.into_iter().max_by_key(|&(_, v)| v).map(|(m, _)| m)
    }
}

/// Asks every Sentinel every 50 ms which master it names: the master of record over time.
fn poll_sentinels(shared: Arc<Shared>) {
    let mut conns: Vec<Option<redis::Connection>> = shared.sentinels.iter().map(|_| None).collect();
    while !shared.stop.load(Ordering::SeqCst) {
        for (i, &s) in shared.sentinels.iter().enumerate() {
            if conns[i].is_none() {
                conns[i] = connect(s, Duration::from_millis(300)).ok();
            }
            let Some(conn) = conns[i].as_mut() else {
                continue;
            };
            let at = shared.now();
            match ask_master(conn) {
                Ok(master) => shared.observe(s, master, at),
                Err(_) => conns[i] = None,
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------
// Clients

fn redis_outcome(e: &RedisError) -> Outcome {
    if e.code().is_some() {
        // The server answered (READONLY, LOADING, MASTERDOWN...): not done.
        Outcome::Failed(e.to_string())
    } else {
        // Even a refused connection: the library retries an acquire or a release once on a
        // new connection after a broken one, so the refusal may follow an attempt that
        // reached the server.
        Outcome::Unknown(e.to_string())
    }
}

fn lock_outcome(e: &Error) -> Outcome {
    match e {
        Error::Timeout => Outcome::Failed("not granted within the wait".into()),
        Error::NotDurable { .. } | Error::Fenced(_) | Error::Config(_) => {
            Outcome::Failed(e.to_string())
        }
        // The library gives up a hold it can no longer vouch for, also after an extend it
        // may have sent: whether the server extended is unknown.
        Error::Lost(_) => Outcome::Unknown(e.to_string()),
        Error::Redis(e) => redis_outcome(e),
        other => Outcome::Unknown(other.to_string()),
    }
}

/// Whether the client should ask Sentinel for the master again after this outcome.
fn resolve_after(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Ok(_) => false,
        Outcome::Unknown(_) => true,
        Outcome::Failed(why) => !["not granted", "not held", "FENCED"]
            .iter()
            .any(|p| why.starts_with(p)),
    }
}

struct Client {
    id: u32,
    shared: Arc<Shared>,
    rng: StdRng,
    master: Option<Node>,
    /// Set by an error: wait a little before asking Sentinel again, as clients do, rather
    /// than spin on a dead master's refusals until Sentinel replaces it.
    backoff: bool,
    locks: HashMap<(Node, u32), Mutex>,
    ops: Vec<Op>,
}

fn lock_key(k: u32) -> String {
    format!("{{k{k}}}:lock")
}

fn log_key(k: u32) -> String {
    format!("{{k{k}}}:log")
}

impl Client {
    fn record(&mut self, mut op: Op) -> Outcome {
        op.complete = self.shared.now();
        let outcome = op.outcome.clone();
        if resolve_after(&outcome) {
            self.master = None;
            self.backoff = true;
        }
        self.ops.push(op);
        outcome
    }

    fn lock(&mut self, node: Node, k: u32) -> Mutex {
        let a = &self.shared.args;
        let mode = a.mode;
        let (ttl, wait, timeout) = (a.ttl_ms, a.wait_ms, a.command_timeout_ms);
        self.locks
            .entry((node, k))
            .or_insert_with(|| {
                let client = redis::Client::open(format!("redis://127.0.0.1:{node}/"))
                    .expect("a loopback URL parses");
                // No keep-alive: every extend is the harness's own, in the history.
                mode.lock(
                    Mutex::new(client, lock_key(k))
                        .ttl(Duration::from_millis(ttl))
                        .wait(Duration::from_millis(wait))
                        .command_timeout(Duration::from_millis(timeout))
                        .no_keepalive(),
                )
            })
            .clone()
    }

    fn run(mut self) -> Vec<Op> {
        let every = Duration::from_millis(self.shared.args.resolve_ms);
        // Staggered, so that the clients do not all move at the same instant.
        let mut resolved = Instant::now() - every.mul_f64(self.rng.gen_range(0.0..1.0));
        while !self.shared.stop.load(Ordering::SeqCst) {
            if !every.is_zero() && resolved.elapsed() >= every {
                self.master = None;
            }
            let node = match self.master {
                Some(node) => node,
                None => {
                    if std::mem::take(&mut self.backoff) {
                        thread::sleep(BACKOFF);
                    }
                    self.master = self.shared.resolve(self.id as usize);
                    resolved = Instant::now();
                    if self.master.is_none() {
                        thread::sleep(Duration::from_millis(100));
                    }
                    continue;
                }
            };
            let k = self.rng.gen_range(0..self.shared.args.keys);
            self.one_hold(node, k);
            thread::sleep(Duration::from_micros(self.rng.gen_range(0..5000)));
        }
        self.ops
    }

    fn work(&mut self) {
        let us = self.shared.args.work_ms * 1000;
        if us > 0 {
            thread::sleep(Duration::from_micros(self.rng.gen_range(0..us)));
        }
    }

    fn op(&self, k: u32, hold: u64, kind: OpKind, fence: Option<u64>, node: Node) -> Op {
        let ttl_ms = match kind {
            OpKind::Acquire | OpKind::Extend => self.shared.args.ttl_ms,
            _ => 0,
        };
        Op {
            client: self.id,
            key: lock_key(k),
            hold,
            kind,
            invoke: self.shared.now(),
            complete: 0,
            outcome: Outcome::Unknown("in flight".into()),
            fence,
            ttl_ms,
            node,
        }
    }

    /// acquire → guarded RPUSH of the fence → extend → release; a step that is not
    /// acknowledged skips to the release, as a holder that lost its lock stops working.
    fn one_hold(&mut self, node: Node, k: u32) {
        let mutex = self.lock(node, k);
        let hold = self.shared.next_hold.fetch_add(1, Ordering::SeqCst);
        let mut op = self.op(k, hold, OpKind::Acquire, None, node);
        let guard = match mutex.lock() {
            Ok(guard) => {
                op.outcome = Outcome::Ok(guard.fence() as i64);
                op.fence = Some(guard.fence());
                self.record(op);
                guard
            }
            Err(e) => {
                op.outcome = lock_outcome(&e);
                self.record(op);
                return;
            }
        };
        let fence = Some(guard.fence());
        let mut op = self.op(k, hold, OpKind::GuardedWrite, fence, node);
        let mut rpush = redis::cmd("RPUSH");
        rpush.arg(log_key(k)).arg(guard.fence());
        op.outcome = match guard.guard::<i64>(&rpush) {
            Ok(len) => Outcome::Ok(len),
            Err(GuardError::Fenced(f)) => Outcome::Failed(f.to_string()),
            Err(GuardError::Redis(e)) => redis_outcome(&e),
        };
        if self.record(op).is_ok() {
            self.work();
            let mut op = self.op(k, hold, OpKind::Extend, fence, node);
            op.outcome = match guard.extend() {
                Ok(()) => Outcome::Ok(1),
                Err(e) => lock_outcome(&e),
            };
            if self.record(op).is_ok() {
                self.work();
            }
        }
        let token = guard.token().to_string();
        let mut op = self.op(k, hold, OpKind::Release, fence, node);
        op.outcome = match guard.release() {
            Ok(true) => Outcome::Ok(1),
            Ok(false) => Outcome::Failed("not held".into()),
            Err(e) => lock_outcome(&e),
        };
        let released = self.record(op);
        // The master is gone or demoted: release on the one Sentinel names now, which may
        // have the hold from replication, rather than leave the key blocked for a lease.
        if matches!(released, Outcome::Unknown(_) | Outcome::Failed(_)) && self.master.is_none() {
            if let Some(now) = self.shared.resolve(self.id as usize) {
                self.master = Some(now);
                if now != node {
                    self.raw_release(k, hold, fence, now, &token);
                }
            }
        }
    }

    fn raw_release(&mut self, k: u32, hold: u64, fence: Option<u64>, node: Node, token: &str) {
        let timeout = Duration::from_millis(self.shared.args.command_timeout_ms);
        let mut op = self.op(k, hold, OpKind::Release, fence, node);
        op.outcome = match connect(node, timeout) {
            Err(e) => Outcome::Failed(format!("never sent: {e}")),
            Ok(mut c) => match redis::cmd("LOCK.RELEASE")
                .arg(lock_key(k))
                .arg(token)
                .query::<i64>(&mut c)
            {
                Ok(1) => Outcome::Ok(1),
                Ok(_) => Outcome::Failed("not held".into()),
                Err(e) => redis_outcome(&e),
            },
        };
        self.record(op);
    }
}

// ---------------------------------------------------------------------------------------
// Faults

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL of the master; restarted (empty) as a replica of the new master once
    /// Sentinel names one.
    Kill,
    /// SIGSTOP of the master for 3 s, past down-after-milliseconds: a failover, and an old
    /// master that comes back still believing it is master.
    Pause,
    /// `SENTINEL FAILOVER`: a graceful switch.
    Failover,
    /// SIGSTOP of a replica for 3 s: it lags, and may be the one promoted next.
    PauseReplica,
}

const CYCLE: [Fault; 4] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Failover,
    Fault::PauseReplica,
];

enum Pending {
    Resume(usize),
    Restart(usize, Node, Instant),
}

struct Faults {
    log: Vec<String>,
    counts: BTreeMap<&'static str, usize>,
    pending: Vec<(Instant, Pending)>,
}

impl Faults {
    fn note(&mut self, shared: &Shared, what: String) {
        let line = format!("{:>8.3}s  {what}", shared.now() as f64 / 1e9);
        println!("{line}");
        self.log.push(line);
    }

    fn inject(
        &mut self,
        fault: Fault,
        servers: &mut Servers,
        shared: &Shared,
        rng: &mut StdRng,
    ) -> Result<(), String> {
        let Some(master) = shared.current_master() else {
            self.note(shared, format!("{fault:?} skipped: no master named"));
            return Ok(());
        };
        let Some(mi) = servers.data_index(master) else {
            return Err(format!("Sentinel names {master}, not one of ours"));
        };
        if servers.data[mi].child.is_none() || servers.data[mi].stopped {
            self.note(
                shared,
                format!("{fault:?} skipped: master :{master} is down already"),
            );
            return Ok(());
        }
        let name = match fault {
            Fault::Kill => {
                servers.data[mi].kill();
                self.pending.push((
                    Instant::now() + Duration::from_secs(1),
                    Pending::Restart(mi, master, Instant::now()),
                ));
                self.note(shared, format!("kill -9 master :{master}"));
                "kill -9 master"
            }
            Fault::Pause => {
                servers.data[mi].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(mi)));
                self.note(shared, format!("SIGSTOP master :{master} for {PAUSE:?}"));
                "SIGSTOP master 3 s"
            }
            Fault::Failover => {
                let s = servers.sentinels[rng.gen_range(0..servers.sentinels.len())].port;
                let reply = connect(s, Duration::from_secs(1)).and_then(|mut c| {
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(MASTER_NAME)
                        .query::<String>(&mut c)
                });
                self.note(
                    shared,
                    format!("SENTINEL FAILOVER via :{s} (master :{master}): {reply:?}"),
                );
                if reply.is_err() {
                    "SENTINEL FAILOVER (refused)"
                } else {
                    "SENTINEL FAILOVER"
                }
            }
            Fault::PauseReplica => {
                let up: Vec<usize> = (0..servers.data.len())
                    .filter(|&i| {
                        i != mi && servers.data[i].child.is_some() && !servers.data[i].stopped
                    })
                    .collect();
                if up.is_empty() {
                    self.note(shared, "SIGSTOP replica skipped: none up".into());
                    return Ok(());
                }
                let ri = up[rng.gen_range(0..up.len())];
                servers.data[ri].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(ri)));
                let port = servers.data[ri].port;
                self.note(shared, format!("SIGSTOP replica :{port} for {PAUSE:?}"));
                "SIGSTOP replica 3 s"
            }
        };
        *self.counts.entry(name).or_default() += 1;
        Ok(())
    }

    /// Resumes paused servers and restarts killed ones whose time has come; `now_all` does
    /// every one at once (the end of the run), a restart still waiting for a new master.
    fn due(&mut self, servers: &mut Servers, shared: &Shared, now_all: bool) -> Result<(), String> {
        let mut later = Vec::new();
        for (at, p) in std::mem::take(&mut self.pending) {
            if !now_all && at > Instant::now() {
                later.push((at, p));
                continue;
            }
            match p {
                Pending::Resume(i) => {
                    servers.data[i].signal(libc::SIGCONT);
                    let port = servers.data[i].port;
                    self.note(shared, format!("SIGCONT :{port}"));
                }
                Pending::Restart(i, old, killed) => {
                    let named = shared.current_master();
                    let waited = killed.elapsed();
                    match named {
                        Some(m) if m != old => {
                            servers.start_data(i, Some(m))?;
                            self.note(shared, format!("restarted :{old} as a replica of :{m}"));
                        }
                        // No failover after 20 s (or none to wait for at the end): back as
                        // it would come back by itself, an empty master.
                        _ if waited > Duration::from_secs(20) => {
                            servers.start_data(i, None)?;
                            self.note(shared, format!("restarted :{old} (no failover seen)"));
                        }
                        _ => later.push((
                            Instant::now() + Duration::from_millis(200),
                            Pending::Restart(i, old, killed),
                        )),
                    }
                }
            }
        }
        self.pending = later;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The run

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if ready() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{what}: not within {limit:?}"))
}

fn sentinels_ready(sentinels: &[Node]) -> bool {
    sentinels.iter().all(|&s| {
        let Ok(mut c) = connect(s, Duration::from_millis(500)) else {
            return false;
        };
        let count = |sub: &str, c: &mut redis::Connection| {
            redis::cmd("SENTINEL")
                .arg(sub)
                .arg(MASTER_NAME)
                .query::<Vec<redis::Value>>(c)
                .map_or(0, |v| v.len())
        };
        count("replicas", &mut c) == 2 && count("sentinels", &mut c) == 2
    })
}

fn run(args: Args) -> Result<(), String> {
    let began = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let base = root
        .join("target/failover")
        .join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let mut servers = Servers::start(&base, &args)?;
    let data: Vec<Node> = servers.data.iter().map(|p| p.port).collect();
    let sentinels = servers.sentinel_ports();
    println!(
        "failover: mode {}, seed {}, {} clients on {} keys, {} s; master :{}, replicas :{} :{}, \
         sentinels :{} :{} :{}; files in {}",
        args.mode.name(),
        args.seed,
        args.clients,
        args.keys,
        args.seconds,
        data[0],
        data[1],
        data[2],
        sentinels[0],
        sentinels[1],
        sentinels[2],
        base.display()
    );
    wait_until(
        "servers up and replicas in sync",
        Duration::from_secs(30),
        || settled_master(&sentinels, &data) == Some(data[0]),
    )?;
    // Without each other, Sentinels reach no quorum and nothing fails over.
    wait_until(
        "Sentinels aware of each other and of both replicas",
        Duration::from_secs(30),
        || sentinels_ready(&sentinels),
    )?;
    println!("ready after {:.1} s", began.elapsed().as_secs_f64());

    let shared = Arc::new(Shared {
        start: Instant::now(),
        stop: AtomicBool::new(false),
        next_hold: AtomicU64::new(1),
        observations: StdMutex::new(Vec::new()),
        sentinels: sentinels.clone(),
        args: args.clone(),
    });
    let poller = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || poll_sentinels(shared))
    };
    let clients: Vec<_> = (0..args.clients)
        .map(|id| {
            let client = Client {
                id,
                shared: Arc::clone(&shared),
                rng: StdRng::seed_from_u64(args.seed ^ (u64::from(id) << 32)),
                master: None,
                backoff: false,
                locks: HashMap::new(),
                ops: Vec::new(),
            };
            thread::spawn(move || client.run())
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut faults = Faults {
        log: Vec::new(),
        counts: BTreeMap::new(),
        pending: Vec::new(),
    };
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let mut next_fault = Instant::now() + WARMUP;
    let mut cycle = CYCLE.iter().cycle();
    while Instant::now() < end {
        faults.due(&mut servers, &shared, false)?;
        if Instant::now() >= next_fault {
            let fault = *cycle.next().expect("the cycle never ends");
            faults.inject(fault, &mut servers, &shared, &mut rng)?;
            next_fault +=
                Duration::from_millis(rng.gen_range(args.fault_min_ms..=args.fault_max_ms));
        }
        thread::sleep(Duration::from_millis(20));
    }
    faults.note(&shared, "faults stopped".into());
    // Resume what is paused; a killed master comes back once Sentinel names another.
    let restart_by = Instant::now() + Duration::from_secs(25);
    while !faults.pending.is_empty() && Instant::now() < restart_by {
        faults.due(&mut servers, &shared, false)?;
        if faults
            .pending
            .iter()
            .all(|(_, p)| matches!(p, Pending::Resume(_)))
        {
            faults.due(&mut servers, &shared, true)?;
        }
        thread::sleep(Duration::from_millis(50));
    }
    faults.due(&mut servers, &shared, true)?;
    shared.stop.store(true, Ordering::SeqCst);
    let mut history = History::default();
    for c in clients {
        history.ops.extend(
            c.join()
                .map_err(|_| "a client thread panicked".to_string())?,
        );
    }
    let clients_done = shared.now();
    let mut master = None;
    wait_until(
        "one master, named by every Sentinel, both replicas online",
        SETTLE,
        || {
            master = settled_master(&sentinels, &data);
            master.is_some()
        },
    )?;
    // Settled twice, a second apart: not a moment inside a failover.
    thread::sleep(Duration::from_secs(1));
    let master = match settled_master(&sentinels, &data) {
        Some(m) if Some(m) == master => m,
        _ => return Err("the master changed while settling".into()),
    };
    poller
        .join()
        .map_err(|_| "the Sentinel poller panicked".to_string())?;
    let mut conn = connect(master, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    for k in 0..args.keys {
        let log: Result<Vec<u64>, _> = redis::cmd("LRANGE")
            .arg(log_key(k))
            .arg(0)
            .arg(-1)
            .query(&mut conn);
        history.final_logs.insert(lock_key(k), log.ok());
    }
    history.observations = std::mem::take(
        &mut *shared
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    drop(servers);

    let report = check(&history);
    // A master killed or paused past down-after-milliseconds and no failover seen: the
    // Sentinels did not work, and the run measured nothing.
    let master_faults = faults.counts.get("kill -9 master").copied().unwrap_or(0)
        + faults
            .counts
            .get("SIGSTOP master 3 s")
            .copied()
            .unwrap_or(0);
    if master_faults > 0 && report.failovers == 0 {
        return Err(format!(
            "{master_faults} master faults and no failover: see the Sentinel logs in {}",
            base.display()
        ));
    }
    write_history(&base.join("history.tsv"), &history).map_err(|e| format!("history: {e}"))?;
    println!();
    println!(
        "faults: {}",
        faults
            .counts
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "clients ran {:.1} s; final logs read from :{master}; history in {}",
        clients_done as f64 / 1e9,
        base.join("history.tsv").display()
    );
    println!();
    print!("{}", report.table(args.mode.name()));
    println!();
    println!(
        "violations: {} (the baseline in plain mode, not a failure); run took {:.1} s",
        report.violations(),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The history as tab-separated lines, for a second look and for later phases' tools.
fn write_history(path: &Path, h: &History) -> std::io::Result<()> {
    let mut out = String::from(
        "client\tkey\thold\tkind\tinvoke_ns\tcomplete_ns\toutcome\tvalue\tfence\tttl_ms\tnode\n",
    );
    for op in &h.ops {
        let (outcome, value) = match &op.outcome {
            Outcome::Ok(v) => ("ok", v.to_string()),
            Outcome::Failed(why) => ("failed", why.replace(['\t', '\n'], " ")),
            Outcome::Unknown(why) => ("unknown", why.replace(['\t', '\n'], " ")),
        };
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{outcome}\t{value}\t{}\t{}\t{}",
            op.client,
            op.key,
            op.hold,
            op.kind,
            op.invoke,
            op.complete,
            op.fence.map_or(String::new(), |f| f.to_string()),
            op.ttl_ms,
            op.node
        );
    }
    let mut file = std::fs::File::create(path)?;
    file.write_all(out.as_bytes())?;
    let mut obs = String::from("at_ns\tsentinel\tmaster\n");
    for o in &h.observations {
        let _ = writeln!(obs, "{}\t{}\t{}", o.at, o.sentinel, o.master);
    }
    std::fs::write(path.with_file_name("sentinel.tsv"), obs)?;
    let mut logs = String::new();
    for (k, log) in &h.final_logs {
        let _ = writeln!(logs, "{k}\t{log:?}");
    }
    std::fs::write(path.with_file_name("final-logs.txt"), logs)
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("failover: harness error: {e}");
            ExitCode::FAILURE
        }
    }
}
