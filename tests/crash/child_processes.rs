//! The child processes the crash tests start, signal and kill: `Proc` (this test binary
//! re-run on `crash_child` in a role, or `redis-cli`), and what the children read at start
//! (their environment) and note in their logs (wall-clock time).

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) const ROLE: &str = "REDIS_LOCK_CRASH_ROLE";

/// A child process, SIGKILLed and reaped when dropped. Its stdout lines arrive on `lines`.
pub(crate) struct Proc {
    child: Child,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                match l {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        Proc { child, lines }
    }

    /// Re-runs this test binary as a child in `role`.
    pub(crate) fn child(role: &str, env: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc::spawn(cmd)
    }

    /// A child that takes `LOCK.ACQUIRE key token ttl WAIT 0` (queueing if need be), prints
    /// its fence and then holds on without doing anything until it is killed.
    pub(crate) fn holder(port: u16, key: &str, token: &str, ttl: u64) -> Proc {
        Proc::child(
            "hold",
            &[
                ("REDIS_LOCK_CRASH_PORT", port.to_string()),
                ("REDIS_LOCK_CRASH_KEY", key.to_string()),
                ("REDIS_LOCK_CRASH_TOKEN", token.to_string()),
                ("REDIS_LOCK_CRASH_TTL", ttl.to_string()),
            ],
        )
    }

    /// `redis-cli LOCK.ACQUIRE key token ttl WAIT 0`: blocks until granted, prints the
    /// fence and exits.
    pub(crate) fn cli_waiter(port: u16, key: &str, token: &str, ttl: u64) -> Proc {
        let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string());
        let mut cmd = Command::new(&cli);
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["LOCK.ACQUIRE", key, token, &ttl.to_string(), "WAIT", "0"]);
        if Command::new(&cli).arg("--version").output().is_err() {
            panic!("{cli} not found: install redis-tools or set REDIS_CLI");
        }
        Proc::spawn(cmd)
    }

    /// The fence the child printed (a line `FENCE n` or, from redis-cli, `n`).
    pub(crate) fn fence(&mut self, within: Duration) -> i64 {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no fence from the child within {within:?}"));
            // libtest prints `test crash_child ... ` before the child's own output.
            let t = match line.find("FENCE ") {
                Some(at) => &line[at + 6..],
                None => &line,
            };
            if let Ok(f) = t.trim().parse::<i64>() {
                return f;
            }
            assert!(
                !line.contains("FENCE"),
                "child printed a bad fence: {line:?}"
            );
        }
    }

    /// The rest of the first line the child prints that contains `tag` (lines before it are
    /// skipped), trimmed.
    pub(crate) fn line_after(&mut self, tag: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no line with {tag:?} from the child within {within:?}")
            });
            if let Some(at) = line.find(tag) {
                return line[at + tag.len()..].trim().to_string();
            }
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) with kill(1).
    pub(crate) fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{signal} {}: {st}", self.child.id());
    }

    /// The process state letter of `/proc/<pid>/stat` (`T`: stopped).
    pub(crate) fn state(&self) -> char {
        let stat =
            fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .unwrap_or('?')
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself; false if it did not within `within`.
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub(crate) fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child: {name} not set"))
}

pub(crate) fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}
