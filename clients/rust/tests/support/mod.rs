//! Real redis-server processes with the module loaded, for the client's tests: one per test,
//! on a free loopback port of 41000–49999 (the module's own suites use 20000–39999), killed
//! by pid when dropped. No mocks: every behaviour under test is the server's.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Slack on top of what the library promises, for a loaded two-core machine.
pub const SLACK: Duration = Duration::from_millis(100);

/// The module: `$REDIS_LOCK_MODULE`, or the workspace's release build.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("REDIS_LOCK_MODULE") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libredis_lock.so")
}

static NEXT: AtomicU16 = AtomicU16::new(0);

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port of this process's range of 100 (by pid) that is free, with its cluster bus port
/// (+10000) free too.
fn free_port() -> u16 {
    let base = 41_000 + (std::process::id() % 90) as u16 * 100;
    for _ in 0..200 {
        let port = base + NEXT.fetch_add(1, Ordering::SeqCst) % 100;
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port in {base}..{}", base + 100);
}

pub struct Server {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with further arguments (`["--replicaof", "127.0.0.1", "41001"]`, ...).
    pub fn start_with(extra: &[&str]) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir()
                .join(format!("redis-lock-client-{}-{port}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("server dir");
            let mut s = Server {
                port,
                dir,
                extra: extra.iter().map(|a| a.to_string()).collect(),
                child: None,
            };
            s.spawn();
            if s.wait_ready() {
                return s;
            }
            // Lost a race for the port: try another.
            s.kill();
        }
        panic!("redis-server did not start");
    }

    fn spawn(&mut self) {
        let module = module_path();
        assert!(module.exists(), "module not built: {}", module.display());
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--loadmodule")
            .arg(&module)
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("log"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn redis-server"));
    }

    fn wait_ready(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if let Ok(mut c) = self.client().get_connection() {
                // Ours, not a server of another suite that took the port first.
                let pid = format!("process_id:{}\r\n", self.pid());
                if let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut c) {
                    return info.contains(&pid);
                }
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn client_resp3(&self) -> redis::Client {
        redis::Client::open(format!("{}?protocol=resp3", self.url())).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connection")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGSTOP: the server stops answering, its clock does not.
    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id() as i32, libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server (SIGKILL) and starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(self.wait_ready(), "redis-server did not restart");
    }

    /// Kills the server; `restart_only` brings it back.
    pub fn crash(&mut self) {
        self.kill();
    }

    pub fn restart_only(&mut self) {
        self.spawn();
        assert!(self.wait_ready(), "redis-server did not restart");
    }

    /// A replica of this server, once its link is up and it acknowledges writes (its first
    /// acknowledgement after the sync can take a second: a `WAIT` meanwhile would time out).
    pub fn replica(&self) -> Server {
        let port = self.port.to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
        let until = Instant::now() + Duration::from_secs(10);
        let mut master = self.conn();
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut master)
                .unwrap();
            if info.contains("connected_slaves:1") && info.contains("state=online") {
                break;
            }
            assert!(Instant::now() < until, "replica link not up:\n{info}");
            sleep(Duration::from_millis(20));
        }
        // A write of this connection's own, so that the `WAIT` waits for an acknowledgement.
        let _: i64 = redis::cmd("INCR")
            .arg("support:replica-synced")
            .query(&mut master)
            .unwrap();
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(10_000)
            .query(&mut master)
            .unwrap();
        assert_eq!(acked, 1, "the replica does not acknowledge");
        replica
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with the pid of a child this process started and has not reaped.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Three masters in one cluster, all slots assigned and agreed.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let flags = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let nodes: Vec<Server> = (0..3).map(|_| Server::start_with(&flags)).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .arg("--cluster-yes")
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let until = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            let mut c = node.conn();
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                    break;
                }
                assert!(Instant::now() < until, "cluster not ok:\n{info}");
                sleep(Duration::from_millis(50));
            }
        }
        Cluster { nodes }
    }

    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.nodes.iter().map(|n| n.url()).collect::<Vec<_>>())
            .expect("cluster client")
    }
}

/// Polls `f` every 10 ms until it is true or `within` passes; whether it became true.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        sleep(Duration::from_millis(10));
    }
}

/// `LOCK.INFO key` is null: nobody holds the lock and nobody waits.
pub fn is_free(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("LOCK.INFO")
        .arg(key)
        .query::<redis::Value>(con)
        .map(|v| v == redis::Value::Nil)
        .unwrap_or(false)
}

/// How many times the server ran `command` (lower case, e.g. `wait`, `lock.extend`), from
/// `INFO commandstats`; 0 if never.
pub fn calls(server: &Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}
