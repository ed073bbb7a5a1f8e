//! The run's server processes: a master and two replicas running the module and three
//! Sentinels, on free loopback ports, with their configs and directories; starting,
//! signalling and killing them (every one by PID when `Servers` is dropped), and connecting
//! to one.

use std::collections::HashSet;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::history::Node;
use crate::mode::Mode;

/// The name Sentinel monitors the master under.
pub const MASTER_NAME: &str = "mymaster";
/// Sentinel's `down-after-milliseconds`: a master silent this long is subjectively down.
pub const DOWN_AFTER_MS: u64 = 1000;
/// Ports are picked here, away from the client tests' 41000–49999.
const PORTS: std::ops::Range<u16> = 52000..56000;

/// One server process the harness started: a data server or a Sentinel.
pub struct Proc {
    pub port: Node,
    dir: PathBuf,
    pub child: Option<Child>,
    pub stopped: bool,
}

impl Proc {
    fn pid(&self) -> Option<libc::pid_t> {
        self.child.as_ref().map(|c| c.id() as libc::pid_t)
    }

    pub fn signal(&mut self, sig: libc::c_int) {
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
    pub fn kill(&mut self) {
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
pub struct Servers {
    pub data: Vec<Proc>,
    pub sentinels: Vec<Proc>,
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
    // The death signal is tied to the spawning thread, not the process: only the thread that
    // runs a mode (`run` in src/bin/failover.rs) spawns that mode's servers, and it drops
    // (kills) them before it ends.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("redis-server: {e}"))
}

/// Ports handed out in this process: modes run in parallel never share one, even when a
/// server is down (killed, not yet restarted) and its port would bind.
static TAKEN: Mutex<Option<HashSet<Node>>> = Mutex::new(None);

fn free_ports(n: usize, seed: u64, slot: usize) -> Result<Vec<Node>, String> {
    // Start somewhere that depends on the PID and the mode's slot, so that two runs on one
    // machine rarely race for the same ports; a port that binds now is taken at once by its
    // server.
    let span = u64::from(PORTS.end - PORTS.start);
    let first = (u64::from(std::process::id()) * 7919 + seed + slot as u64 * 613) % span;
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    let taken = taken.get_or_insert_with(HashSet::new);
    let mut ports = Vec::new();
    for at in first..first + span {
        let port = PORTS.start + (at % span) as u16;
        if !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
            if ports.len() == n {
                taken.extend(&ports);
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
        // The module's load-time arguments follow its path (`loadmodule <path> name value`).
        args.extend(self.mode.module_args());
        if let Some(master) = replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        }
        args.extend(self.mode.server_args());
        args
    }

    pub fn start_data(&mut self, i: usize, replica_of: Option<Node>) -> Result<(), String> {
        let (port, dir) = (self.data[i].port, self.data[i].dir.clone());
        let child = spawn(&self.data_args(port, &dir, replica_of), &dir)?;
        self.data[i].child = Some(child);
        self.data[i].stopped = false;
        Ok(())
    }

    /// Starts the servers of `args.mode`, on ports no other mode (`slot`) of this run has.
    pub fn start(base: &Path, args: &Args, slot: usize) -> Result<Servers, String> {
        let ports = free_ports(6, args.seed, slot)?;
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
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
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

    /// An error if a data server exited within `within` of now (a module that refused its
    /// arguments, say), with the end of its log; Ok once they all ran that long.
    pub fn check_started(&mut self, within: Duration) -> Result<(), String> {
        let until = Instant::now() + within;
        loop {
            for p in &mut self.data {
                let exited = p.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    p.child = None;
                    let log = std::fs::read_to_string(p.dir.join("redis.log")).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(3).collect();
                    return Err(format!(
                        "redis-server :{} exited ({status}) at start: {}",
                        p.port,
                        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                    ));
                }
            }
            if Instant::now() >= until {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// An error unless every data server runs with the mode's module arguments: the module
    /// takes each as its `lock.<name>` configuration and ignores a name it does not know, so
    /// `CONFIG GET lock.<name>` must give the value (a mode must not run as another in
    /// disguise, with a module that lacks its setting).
    pub fn check_module_args(&self) -> Result<(), String> {
        let module_args = self.mode.module_args();
        for p in &self.data {
            let mut conn = connect(p.port, Duration::from_secs(2)).map_err(|e| e.to_string())?;
            for pair in module_args.chunks(2) {
                let (name, value) = (&pair[0], pair.get(1).cloned().unwrap_or_default());
                let got: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(format!("lock.{name}"))
                    .query(&mut conn)
                    .map_err(|e| format!(":{} CONFIG GET lock.{name}: {e}", p.port))?;
                if got.get(1) != Some(&value) {
                    return Err(format!(
                        "the module at :{} did not take `{name} {value}` (CONFIG GET lock.{name}: \
                         {got:?}): a module without that setting?",
                        p.port
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn data_index(&self, port: Node) -> Option<usize> {
        self.data.iter().position(|p| p.port == port)
    }

    pub fn sentinel_ports(&self) -> Vec<Node> {
        self.sentinels.iter().map(|p| p.port).collect()
    }
}

/// A connection to one of the run's servers, with `timeout` on connecting, reading and writing.
pub fn connect(port: Node, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}
