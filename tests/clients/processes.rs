//! Running the clients' programs: their runtimes (a missing one fails, saying what to install),
//! child processes bounded in time, and where installs go (named by the hash of the file they
//! come from).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

/// How long installing a client may take (a cold pip or npm cache) and how long a flow may run.
pub(crate) const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
pub(crate) const FLOW_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) use crate::common::support_lib::target_dir;

/// A note that `cargo test` does not swallow: written to the process's stderr directly.
pub(crate) fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The first line of `prog --version`, or `None` if it cannot be run.
fn version_of(prog: &str) -> Option<String> {
    let out = Command::new(prog)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

/// The versions of every program a flow needs; fails, saying what to install, if one of them
/// cannot be run.
#[track_caller]
pub(crate) fn runtime(flow: &str, progs: &[&str]) -> Vec<String> {
    let mut versions = Vec::new();
    let mut missing = Vec::new();
    for p in progs {
        match version_of(p) {
            Some(v) => versions.push(v),
            None => missing.push(*p),
        }
    }
    assert!(
        missing.is_empty(),
        "{flow}: `{} --version` could not be run. The client tests need redis-cli, python3 \
         (with venv and pip), node and npm; on Debian or Ubuntu: `apt-get install redis-tools \
         python3 python3-venv nodejs npm` (REDIS_CLI names another redis-cli binary).",
        missing.join(" --version`, `")
    );
    versions
}

/// What a bounded child process left.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    #[track_caller]
    pub(crate) fn expect_success(self, what: &str) -> Finished {
        assert!(
            self.status.success(),
            "{what} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Collects a child's output; kills it (and fails) if it runs past `timeout`.
pub(crate) fn finish(mut child: Child, timeout: Duration, what: &str) -> Finished {
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned();
            let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
            panic!("{what} still running after {timeout:?}; killed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
        }
        sleep(Duration::from_millis(10));
    };
    Finished {
        status,
        stdout: String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
    }
}

pub(crate) fn spawn(cmd: &mut Command, what: &str) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
}

pub(crate) fn run_bounded(cmd: &mut Command, timeout: Duration, what: &str) -> Finished {
    let child = spawn(cmd, what);
    finish(child, timeout, what)
}

/// FNV-1a of a file, to name what was installed from it.
pub(crate) fn file_hash(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
