//! The redis-server harness, shared by the tests (re-exported from `tests/common/mod.rs`) and
//! the benchmark (`benches/bench/main.rs` includes this file alone, by `#[path]`): it must
//! not use anything else of `tests/common`.
//!
//! Each [`Server`] runs on its own loopback port (from a per-process counter whose base is
//! derived from the process id, so parallel test binaries do not collide), in a fresh
//! directory under the system temp dir that is removed when the server is dropped. The
//! process is killed and reaped on drop; if the thread is panicking, the tail of the server
//! log is printed and the directory is kept for inspection.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

/// The redis-server binary: `$REDIS_SERVER` or `redis-server` from `PATH`.
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The module under test, as an absolute path. `$REDIS_LOCK_MODULE` overrides it.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("REDIS_LOCK_MODULE") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "REDIS_LOCK_MODULE={} does not exist",
            p.display()
        );
        return p.canonicalize().expect("canonicalize module path");
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = match std::env::var("CARGO_TARGET_DIR") {
        Ok(t) => manifest.join(t),
        Err(_) => manifest.join("target"),
    };
    let p = target.join("release").join("libredis_lock.so");
    assert!(
        p.exists(),
        "module not found at {}: run `cargo build --release` first (make test does)",
        p.display()
    );
    p.canonicalize().expect("canonicalize module path")
}

static PORT_COUNTER: AtomicU16 = AtomicU16::new(0);
static DIR_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A server in cluster mode also listens on its port + 10000 (the cluster bus).
const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// Ports handed out: 200 ranges of 100 from here, one range per test process (by pid).
const FIRST_PORT: u16 = 20_000;
const LAST_PORT: u16 = FIRST_PORT + 200 * 100 - 1;
// Every port's cluster bus port must be a valid port too (the sum overflowing u16 would not
// compile).
const _: () = assert!(LAST_PORT < 55_535 && LAST_PORT + CLUSTER_BUS_OFFSET > LAST_PORT);

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port from this process's range of 100 ports, whose cluster bus port
/// (+10000) is free too: any server may be started in cluster mode, and a bus port taken by
/// another process (an ephemeral port of some connection, say) would fail its start.
fn next_port() -> u16 {
    let base = FIRST_PORT + (std::process::id() % 200) as u16 * 100;
    for _ in 0..1000 {
        let n = PORT_COUNTER.fetch_add(1, Ordering::SeqCst) % 100;
        let port = base + n;
        if port_is_free(port) && port_is_free(port + CLUSTER_BUS_OFFSET) {
            return port;
        }
    }
    panic!(
        "no free port in {base}..{} with its cluster bus port (+{CLUSTER_BUS_OFFSET}) free",
        base + 100
    );
}

fn fresh_dir(port: u16) -> PathBuf {
    let n = DIR_COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join("redis-lock-tests").join(format!(
        "{}-{}-{}",
        std::process::id(),
        port,
        n
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create server dir");
    dir
}

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Arguments after the module path on the `loadmodule` line.
    pub module_args: Vec<String>,
    /// `--appendonly yes`.
    pub appendonly: bool,
    /// `--aof-use-rdb-preamble no`.
    pub no_rdb_preamble: bool,
    /// Keep the server's default save points (otherwise `--save ""`).
    pub save: bool,
    /// `--replicaof 127.0.0.1 <port>`.
    pub replicaof: Option<u16>,
    /// Further raw arguments, e.g. `["--maxmemory", "10mb"]`.
    pub extra: Vec<String>,
    /// Run the server on this CPU only (`taskset -c N redis-server …`).
    pub cpu: Option<usize>,
}

impl Opts {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn appendonly(mut self) -> Self {
        self.appendonly = true;
        self
    }
    pub fn no_rdb_preamble(mut self) -> Self {
        self.no_rdb_preamble = true;
        self
    }
    pub fn save(mut self) -> Self {
        self.save = true;
        self
    }
    pub fn replicaof(mut self, port: u16) -> Self {
        self.replicaof = Some(port);
        self
    }
    pub fn extra(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|s| s.to_string()));
        self
    }
    pub fn cpu(mut self, cpu: usize) -> Self {
        self.cpu = Some(cpu);
        self
    }
}

/// One redis-server process with the module loaded.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    pub opts: Opts,
    child: Option<Child>,
}

impl Server {
    /// A server with default options.
    pub fn new() -> Server {
        Server::start(Opts::new())
    }

    /// Starts a server and waits until it answers `PING`.
    pub fn start(opts: Opts) -> Server {
        Server::start_with_env(opts, &[])
    }

    /// Like [`Server::start`], with `env` added to the server's environment (the clock-step
    /// tests preload a wall-clock shifter). `start_again()` and `restart()` do not re-apply it.
    pub fn start_with_env(opts: Opts, env: &[(String, String)]) -> Server {
        let module = module_path();
        // A port found free can be taken by someone else before redis binds it: retry.
        for attempt in 0..5 {
            let port = next_port();
            let dir = fresh_dir(port);
            let mut s = Server {
                port,
                dir,
                opts: opts.clone(),
                child: None,
            };
            s.spawn(&module, env);
            match s.wait_ready() {
                Ok(()) => return s,
                Err(msg) => {
                    let log = s.log_tail(40);
                    if attempt < 4 && log.contains("Address already in use") {
                        s.kill9();
                        continue;
                    }
                    panic!("redis-server did not start: {msg}\n--- log tail ---\n{log}");
                }
            }
        }
        unreachable!()
    }

    fn args(&self, module: &Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--logfile".into(),
            self.log_path().display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "yes".into(),
            "--repl-diskless-sync-delay".into(),
            "0".into(),
        ];
        if !self.opts.save {
            a.push("--save".into());
            a.push("".into());
        }
        if self.opts.appendonly {
            a.push("--appendonly".into());
            a.push("yes".into());
        }
        if self.opts.no_rdb_preamble {
            a.push("--aof-use-rdb-preamble".into());
            a.push("no".into());
        }
        if let Some(p) = self.opts.replicaof {
            a.push("--replicaof".into());
            a.push("127.0.0.1".into());
            a.push(p.to_string());
        }
        a.extend(self.opts.extra.iter().cloned());
        // Last, so that its arguments are not mistaken for another option's.
        a.push("--loadmodule".into());
        a.push(module.display().to_string());
        a.extend(self.opts.module_args.iter().cloned());
        a
    }

    fn spawn(&mut self, module: &Path, env: &[(String, String)]) {
        let mut cmd = match self.opts.cpu {
            Some(cpu) => {
                // taskset execs the server: the child's pid is the server's.
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string(), &redis_server_bin()]);
                c
            }
            None => Command::new(redis_server_bin()),
        };
        let child = cmd
            .args(self.args(module))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e} (install redis-server or set REDIS_SERVER)",
                    redis_server_bin()
                )
            });
        self.child = Some(child);
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("redis-server exited: {status}"));
                }
            }
            if let Ok(mut c) = self.try_conn() {
                if let Ok(Value::SimpleString(s)) = redis::cmd("PING").query::<Value>(&mut c) {
                    if s == "PONG" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err("not answering PING after 10s".into());
            }
            sleep(Duration::from_millis(20));
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(c)
    }

    /// A RESP2 connection (retries for up to 10s).
    pub fn conn(&self) -> Connection {
        self.conn_url(&self.url())
    }

    /// A RESP3 connection (the client sends `HELLO 3`).
    pub fn conn3(&self) -> Connection {
        self.conn_url(&format!("{}?protocol=resp3", self.url()))
    }

    fn conn_url(&self, url: &str) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = redis::Client::open(url).and_then(|cl| {
                let c = cl.get_connection_with_timeout(Duration::from_secs(2))?;
                c.set_read_timeout(Some(Duration::from_secs(30)))?;
                Ok(c)
            });
            match r {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!(
                    "cannot connect to {url}: {e}\n--- log tail ---\n{}",
                    self.log_tail(30)
                ),
                Err(_) => sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Panics (with the log tail) if the server process has exited.
    pub fn assert_alive(&mut self) {
        if !self.is_alive() {
            panic!(
                "redis-server is not running any more\n--- log tail ---\n{}",
                self.log_tail(60)
            );
        }
    }

    /// `SHUTDOWN NOSAVE` (falls back to SIGKILL after 10s) and reaps the process.
    pub fn stop(&mut self) {
        if self.child.is_none() {
            return;
        }
        if let Ok(mut c) = self.try_conn() {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<Value>(&mut c);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.is_alive() && Instant::now() < deadline {
            sleep(Duration::from_millis(10));
        }
        self.kill9();
    }

    /// SIGKILL, as a crash would, and reaps the process.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again in the same directory on the same port.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server still running");
        let module = module_path();
        self.spawn(&module, &[]);
        if let Err(msg) = self.wait_ready() {
            panic!(
                "redis-server did not restart: {msg}\n--- log tail ---\n{}",
                self.log_tail(40)
            );
        }
    }

    /// `stop()` then `start_again()`.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let crashed = self.child.is_some() && !self.is_alive();
        self.kill9();
        if std::thread::panicking() || crashed {
            eprintln!(
                "--- redis-server on port {} (dir {} kept), log tail ---\n{}",
                self.port,
                self.dir.display(),
                self.log_tail(40)
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
