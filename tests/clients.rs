//! The lock flow from the clients people use: redis-cli, redis-py, ioredis and redis-rs, each
//! against a real server with the module. Every flow takes a token from a UUID, acquires with
//! a ttl, takes a new fence, writes through `LOCK.GUARD` (once under the current fence, which
//! lands, and once under the fence it replaced, which is refused), extends, reads
//! `LOCK.INFO`, releases, and has a second connection blocked in `LOCK.ACQUIRE … WAIT` that is
//! granted (with a larger fence) on release.
//!
//! The guarded-write helpers the flows run are the ones `docs/CLIENTS.md` shows, character for
//! character ([`docs_guarded_helpers_are_the_ones_the_flows_run`]), and redis-py's
//! `RedisCluster` runs them against a three-master cluster (`redis_py_cluster_guard`).
//!
//! Shared holds: every client runs the read-write lock and semaphore recipes of
//! `docs/CLIENTS.md` (and the README's uses of them), checked to be the code shown
//! ([`docs_shared_recipes_are_the_ones_the_flows_run`]): two readers hold the lock together
//! while a writer waits for both and a reader after the writer waits for it (each granted
//! within [`GRANT_WITHIN`] of the release before it), the writer's guarded write lands and a
//! reader's fence is refused; three callers of a 2-permit semaphore, the third granted when
//! one releases, and one that gives up waiting without running; a reader's renewal, the
//! refused upgrade and a downgrade. The server's counters must show every step
//! ([`assert_shared_counts`]).
//!
//! redis-py is installed from `tests/clients/requirements.txt` (pinned, with hashes) into a
//! throwaway venv under `target/clients/`; ioredis with `npm ci` from
//! `tests/clients/node/package-lock.json` into that folder's `node_modules`. Both happen on
//! first use. A flow whose runtime (redis-cli, python3 with its venv module, node and npm) is
//! missing fails, naming what to install: a test that passes without having run would hide
//! that the flow was never checked.

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::{info, wait_until, Opts, Server};
use redis::Value;

/// How long installing a client may take (a cold pip or npm cache) and how long a flow may run.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
const FLOW_TIMEOUT: Duration = Duration::from_secs(60);

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => manifest_dir().join(t),
        None => manifest_dir().join("target"),
    }
}

/// A note that `cargo test` does not swallow: written to the process's stderr directly.
fn note(msg: &str) {
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
fn runtime(flow: &str, progs: &[&str]) -> Vec<String> {
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
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    #[track_caller]
    fn expect_success(self, what: &str) -> Finished {
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
fn finish(mut child: Child, timeout: Duration, what: &str) -> Finished {
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

fn spawn(cmd: &mut Command, what: &str) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
}

fn run_bounded(cmd: &mut Command, timeout: Duration, what: &str) -> Finished {
    let child = spawn(cmd, what);
    finish(child, timeout, what)
}

/// FNV-1a of a file, to name what was installed from it.
fn file_hash(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

// ---------------------------------------------------------------------------------------------
// redis-cli

/// The redis-cli binary: `$REDIS_CLI` or `redis-cli` from `PATH`.
fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

fn cli_command(server: &Server, extra: &[&str], args: &[&str]) -> Command {
    let mut c = Command::new(redis_cli_bin());
    c.args([
        "-h",
        "127.0.0.1",
        "-p",
        &server.port.to_string(),
        "--no-raw",
    ])
    .args(extra)
    .args(args);
    c
}

/// One command through redis-cli, as a person would type it; its output, trimmed.
fn cli(server: &Server, args: &[&str]) -> String {
    cli_with(server, &[], args)
}

fn cli_with(server: &Server, extra: &[&str], args: &[&str]) -> String {
    let what = format!("redis-cli {}", args.join(" "));
    let f = run_bounded(&mut cli_command(server, extra, args), FLOW_TIMEOUT, &what);
    f.stdout.trim_end().to_string()
}

/// The fence in redis-cli's `(integer) N`.
#[track_caller]
fn cli_int(out: &str) -> i64 {
    out.strip_prefix("(integer) ")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("expected `(integer) N`, got {out:?}"))
}

#[test]
fn redis_cli_flow() {
    let v = runtime("redis-cli flow", &[&redis_cli_bin(), "bash"]);
    note(&format!("redis-cli flow with {}", v[0]));
    let server = Server::new();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let tok = uuid::Uuid::new_v4().to_string();
    let other = uuid::Uuid::new_v4().to_string();

    let f1 = cli_int(&cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000"]));
    assert!(f1 > 0);
    assert_eq!(
        cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000"]),
        format!("(integer) {f1}"),
        "a retry by the holder keeps its fence"
    );
    assert_eq!(
        cli(&server, &["LOCK.ACQUIRE", &key, &other, "30000"]),
        "(nil)"
    );
    let f2 = cli_int(&cli(&server, &["LOCK.FENCE", &key, &tok]));
    assert!(f2 > f1, "fence {f2} must exceed {f1}");
    assert_eq!(cli(&server, &["LOCK.FENCE", &key, &other]), "(nil)");

    // Guarded writes through the shell helper: the current fence lands, the replaced one is
    // refused (status 3, the FENCED error on stderr) and changes nothing.
    let data = format!("{key}:data");
    let landed = cli_guarded(&server, &key, f2, &["SET", &data, "by-f2"]);
    assert_eq!(
        (
            landed.status.code(),
            landed.stdout.as_str(),
            landed.stderr.as_str()
        ),
        (Some(0), "OK\n", ""),
        "a guarded write under the current fence"
    );
    let refused = cli_guarded(&server, &key, f1, &["SET", &data, "by-f1"]);
    assert_eq!(
        (
            refused.status.code(),
            refused.stdout.as_str(),
            refused.stderr.as_str()
        ),
        (Some(3), "", "FENCED the lock is held under a newer fence\n"),
        "a guarded write under a replaced fence"
    );
    assert_eq!(cli(&server, &["GET", &data]), "\"by-f2\"");
    let ran = cli_guarded(&server, &key, f2, &["INCR", &data]);
    assert_eq!(
        (ran.status.code(), ran.stderr.as_str()),
        (Some(1), "ERR value is not an integer or out of range\n"),
        "the inner command's own error is an error, not FENCED"
    );
    assert_eq!(
        cli(&server, &["LOCK.EXTEND", &key, &tok, "60000"]),
        "(integer) 1"
    );
    assert_eq!(
        cli(&server, &["LOCK.EXTEND", &key, &other, "60000"]),
        "(integer) 0"
    );

    // RESP2: the flat field/value array HGETALL gives (redis-cli pads the numbers to two
    // digits for twelve elements).
    let resp2 = cli(&server, &["LOCK.INFO", &key]);
    let lines: Vec<&str> = resp2.lines().collect();
    assert_eq!(lines.len(), 12, "LOCK.INFO: {resp2}");
    let ttl = cli_int(lines[5].strip_prefix(" 6) ").unwrap());
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(
        lines,
        [
            r#" 1) "holder""#.to_string(),
            format!(r#" 2) "{tok}""#),
            r#" 3) "fence""#.to_string(),
            format!(" 4) (integer) {f2}"),
            r#" 5) "ttl""#.to_string(),
            format!(" 6) (integer) {ttl}"),
            r#" 7) "waiters""#.to_string(),
            " 8) (integer) 0".to_string(),
            r#" 9) "mode""#.to_string(),
            r#"10) "exclusive""#.to_string(),
            r#"11) "holders""#.to_string(),
            "12) (integer) 1".to_string(),
        ],
        "LOCK.INFO: {resp2}"
    );
    // RESP3 (`-3`): a map.
    let resp3 = cli_with(&server, &["-3"], &["LOCK.INFO", &key]);
    let lines: Vec<&str> = resp3.lines().collect();
    assert_eq!(lines.len(), 6, "RESP3 LOCK.INFO: {resp3}");
    let ttl = cli_int(lines[2].strip_prefix(r#"3# "ttl" => "#).unwrap());
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(
        lines,
        [
            format!(r#"1# "holder" => "{tok}""#),
            format!(r#"2# "fence" => (integer) {f2}"#),
            format!(r#"3# "ttl" => (integer) {ttl}"#),
            r#"4# "waiters" => (integer) 0"#.to_string(),
            r#"5# "mode" => "exclusive""#.to_string(),
            r#"6# "holders" => (integer) 1"#.to_string(),
        ],
        "RESP3 LOCK.INFO: {resp3}"
    );
    // LOCK.HOLDERS: one [token, fence, ttl, mode] entry per hold.
    let holders = cli(&server, &["LOCK.HOLDERS", &key]);
    let lines: Vec<&str> = holders.lines().collect();
    assert_eq!(lines.len(), 4, "LOCK.HOLDERS: {holders}");
    let ttl = cli_int(lines[2].strip_prefix("   3) ").unwrap());
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(
        lines,
        [
            format!(r#"1) 1) "{tok}""#),
            format!("   2) (integer) {f2}"),
            format!("   3) (integer) {ttl}"),
            r#"   4) "exclusive""#.to_string(),
        ],
        "LOCK.HOLDERS: {holders}"
    );

    // A WAIT that times out.
    let t0 = Instant::now();
    assert_eq!(
        cli(
            &server,
            &["LOCK.ACQUIRE", &key, &other, "30000", "WAIT", "100"]
        ),
        "(nil)"
    );
    assert!(t0.elapsed() >= Duration::from_millis(90));

    // A blocked redis-cli, granted when another redis-cli releases.
    let waiter = spawn(
        &mut cli_command(
            &server,
            &[],
            &["LOCK.ACQUIRE", &key, &other, "30000", "WAIT", "10000"],
        ),
        "blocked redis-cli",
    );
    let mut con = server.conn();
    assert!(
        wait_until(Duration::from_secs(10), || info(&mut con, &key)
            .is_some_and(|i| i.waiters == 1)),
        "the blocked redis-cli never joined the queue"
    );
    assert_eq!(cli(&server, &["LOCK.RELEASE", &key, &tok]), "(integer) 1");
    let granted = finish(waiter, Duration::from_secs(10), "blocked redis-cli")
        .expect_success("blocked redis-cli");
    let f3 = cli_int(granted.stdout.trim_end());
    assert!(f3 > f2, "granted fence {f3} must exceed {f2}");
    let i = info(&mut con, &key).expect("held by the waiter");
    assert_eq!(i.holder.as_deref(), Some(other.as_bytes()));
    assert_eq!(i.fence, f3);

    assert_eq!(cli(&server, &["LOCK.RELEASE", &key, &tok]), "(integer) 0");
    assert_eq!(cli(&server, &["LOCK.RELEASE", &key, &other]), "(integer) 1");
    assert_eq!(cli(&server, &["LOCK.INFO", &key]), "(nil)");
    let err = cli(&server, &["LOCK.ACQUIRE", &key, &tok, "0"]);
    assert!(
        err.starts_with("(error) ERR ttl must be between 1 and"),
        "{err}"
    );
    let late = cli_guarded(&server, &key, f3, &["SET", &data, "late"]);
    assert_eq!(
        (late.status.code(), late.stderr.as_str()),
        (Some(3), "FENCED the lock is not held\n"),
        "a guarded write after the release"
    );
    assert_eq!(cli(&server, &["GET", &data]), "\"by-f2\"");
    assert_guarded_counts(&server, 2, 2);
}

/// `guarded LOCK_KEY FENCE COMMAND…` from tests/clients/guarded.sh (the helper docs/CLIENTS.md
/// shows), sourced into bash with `redis_cli` set to this server's redis-cli.
fn cli_guarded(server: &Server, lock_key: &str, fence: i64, command: &[&str]) -> Finished {
    let helper = manifest_dir().join("tests/clients/guarded.sh");
    let script =
        r#"source "$GUARDED_SH"; redis_cli=("$CLI_BIN" -h 127.0.0.1 -p "$CLI_PORT"); guarded "$@""#;
    run_bounded(
        Command::new("bash")
            .args(["-c", script, "guarded"])
            .arg(lock_key)
            .arg(fence.to_string())
            .args(command)
            .env("GUARDED_SH", helper)
            .env("CLI_BIN", redis_cli_bin())
            .env("CLI_PORT", server.port.to_string()),
        FLOW_TIMEOUT,
        &format!("guarded {lock_key} {fence} {}", command.join(" ")),
    )
}

// --- redis-cli: read-write locks and semaphores ----------------------------------------------

/// What a shell holder runs under its hold (`$LOCK_FENCE` set by the helper): with `write` as
/// its second argument, first a guarded `HSET` through tests/clients/guarded.sh; then it writes
/// its fence to `$1.held` and stays until `$1.leave` exists (or 20 s at least have passed, so
/// that a failed test leaves nothing running).
const SHELL_WORK: &str = r#"if [ "$2" = write ]; then
  source "$GUARDED_SH"; redis_cli=("$CLI_BIN" -h 127.0.0.1 -p "$CLI_PORT")
  guarded "$LOCK_KEY" "$LOCK_FENCE" HSET "$DATA_KEY" pen 3 > "$1.wrote" || exit 9
fi
printf %s "$LOCK_FENCE" > "$1.tmp" && mv "$1.tmp" "$1.held"
i=0
while [ ! -e "$1.leave" ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i + 1)); done"#;

/// A bash process that runs one of the helpers of tests/clients/shared.sh (the ones
/// docs/CLIENTS.md shows) with `SHELL_WORK` as its command.
struct ShellHolder {
    name: &'static str,
    path: PathBuf,
    child: Option<Child>,
}

impl ShellHolder {
    /// `helper args…` with [`SHELL_WORK`] as its command; `data` is the writer's data key.
    fn start(
        server: &Server,
        dir: &Path,
        name: &'static str,
        helper: &[&str],
        data: Option<&str>,
    ) -> ShellHolder {
        let path = dir.join(name);
        let mut cmd = shell_helper(server, helper);
        cmd.args(["bash", "-c", SHELL_WORK, "work"])
            .arg(&path)
            .env("LOCK_KEY", helper[1]);
        if let Some(data) = data {
            cmd.arg("write").env("DATA_KEY", data);
        }
        ShellHolder {
            name,
            path,
            child: Some(spawn(&mut cmd, name)),
        }
    }

    fn file(&self, ext: &str) -> PathBuf {
        self.path.with_extension(ext)
    }

    /// The fence, once the helper has run the work.
    fn fence(&self) -> Option<u64> {
        fs::read_to_string(self.file("held"))
            .ok()
            .map(|f| f.parse().expect("a fence"))
    }

    #[track_caller]
    fn wait_granted(&self) -> u64 {
        assert!(
            wait_until(Duration::from_secs(5), || self.fence().is_some()),
            "{} was never granted",
            self.name
        );
        self.fence().unwrap()
    }

    /// Tells it to leave, and waits until the helper has released and exited.
    #[track_caller]
    fn finish(mut self) {
        fs::write(self.file("leave"), "").unwrap();
        let child = self.child.take().unwrap();
        let done = finish(child, Duration::from_secs(10), self.name);
        assert_eq!(
            done.status.code(),
            Some(0),
            "{}: {}\n{}",
            self.name,
            done.stdout,
            done.stderr
        );
    }
}

impl Drop for ShellHolder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// bash with tests/clients/shared.sh sourced and `redis_cli` set to this server's redis-cli,
/// about to run `helper` with the arguments the caller adds.
fn shell_helper(server: &Server, helper: &[&str]) -> Command {
    let script = r#"source "$SHARED_SH"; redis_cli=("$CLI_BIN" -h 127.0.0.1 -p "$CLI_PORT"); "$@""#;
    let mut c = Command::new("bash");
    c.args(["-c", script, "shared"])
        .args(helper)
        .env("SHARED_SH", manifest_dir().join("tests/clients/shared.sh"))
        .env(
            "GUARDED_SH",
            manifest_dir().join("tests/clients/guarded.sh"),
        )
        .env("CLI_BIN", redis_cli_bin())
        .env("CLI_PORT", server.port.to_string());
    c
}

/// A fresh directory for the shell holders' files.
fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redis-lock-shared-{}", uuid::Uuid::new_v4()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// `(mode, holders, waiters)` from `LOCK.INFO`; `None` if the key does not exist.
fn shape(con: &mut redis::Connection, key: &str) -> Option<(String, i64, i64)> {
    info(con, key).map(|i| (i.mode, i.holders, i.waiters))
}

#[track_caller]
fn assert_shape(con: &mut redis::Connection, key: &str, mode: &str, holders: i64, waiters: i64) {
    assert_eq!(
        shape(con, key),
        Some((mode.to_string(), holders, waiters)),
        "LOCK.INFO {key}"
    );
}

#[track_caller]
fn wait_shape(con: &mut redis::Connection, key: &str, mode: &str, holders: i64, waiters: i64) {
    let want = Some((mode.to_string(), holders, waiters));
    let mut last = None;
    let ok = wait_until(Duration::from_secs(5), || {
        last = shape(con, key);
        last == want
    });
    assert!(ok, "LOCK.INFO {key}: {last:?}, want {want:?}");
}

/// How soon a waiter must hold the lock once the hold before it is released.
const GRANT_WITHIN: Duration = Duration::from_millis(200);

/// `(mode, holders, waiters)` once the hold before it has gone: polled from the server, the
/// grant must have happened within [`GRANT_WITHIN`].
#[track_caller]
fn assert_granted_at_once(con: &mut redis::Connection, key: &str, mode: &str, holders: i64) {
    let t0 = Instant::now();
    let want = Some((mode.to_string(), holders));
    let mut last = None;
    while t0.elapsed() < GRANT_WITHIN {
        last = shape(con, key).map(|(m, h, _)| (m, h));
        if last == want {
            return;
        }
        sleep(Duration::from_millis(2));
    }
    panic!("{key}: {last:?} {GRANT_WITHIN:?} after the release, want {want:?}");
}

/// The redis-cli read-write lock and semaphore of docs/CLIENTS.md (tests/clients/shared.sh),
/// each holder a bash process: two readers hold together while a writer waits for both, a
/// reader after the writer waits for it, the writer's guarded write lands and a reader's fence
/// is refused; a semaphore of 2 permits whose third caller waits for a release, and a caller
/// that gives up does not run. Also, from redis-cli itself, a reader's renewal, the refused
/// upgrade and a downgrade.
#[test]
fn redis_cli_shared_holds() {
    runtime("redis-cli shared holds", &[&redis_cli_bin(), "bash"]);
    let server = Server::new();
    let mut con = server.conn();
    let dir = scratch_dir();

    // The same token again: renewal (same fence), no upgrade, downgrade in place.
    let key = format!("doc:{}", uuid::Uuid::new_v4());
    let tok = uuid::Uuid::new_v4().to_string();
    let f = cli_int(&cli(
        &server,
        &["LOCK.ACQUIRE", &key, &tok, "10000", "SHARED"],
    )) as u64;
    assert_eq!(
        cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000", "SHARED"]),
        format!("(integer) {f}"),
        "a reader re-acquiring renews, with the same fence"
    );
    let h = &holders(&mut con, &key)[0];
    assert!(h.2 > 20_000, "renewed: {h:?}");
    assert_eq!(
        cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000"]),
        format!("(error) ERR {UPGRADE_REFUSED}")
    );
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| (h.1, h.3.as_str()))
            .collect::<Vec<_>>(),
        [(f, "shared")],
        "the refused upgrader keeps its hold"
    );
    assert_eq!(cli(&server, &["LOCK.RELEASE", &key, &tok]), "(integer) 1");
    let fx = cli_int(&cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000"])) as u64;
    assert!(fx > f);
    assert_eq!(
        cli(&server, &["LOCK.ACQUIRE", &key, &tok, "30000", "SHARED"]),
        format!("(integer) {fx}"),
        "a downgrade keeps the fence"
    );
    assert_shape(&mut con, &key, "shared", 1, 0);
    assert_eq!(cli(&server, &["LOCK.RELEASE", &key, &tok]), "(integer) 1");

    // Readers and a writer.
    let key = format!("{{catalog:{}}}:lock", uuid::Uuid::new_v4());
    let data = key.replace(":lock", ":prices");
    let read = ["read_locked", &key, "30000", "5000"];
    let holder =
        |name, helper: &[&str], data| ShellHolder::start(&server, &dir, name, helper, data);
    let a = holder("reader-a", &read, None);
    let fa = a.wait_granted();
    let b = holder("reader-b", &read, None);
    let fb = b.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| (h.1, h.3.as_str()))
            .collect::<Vec<_>>(),
        [(fa, "shared"), (fb, "shared")]
    );
    let refused = cli_guarded(&server, &key, fb as i64, &["HSET", &data, "pen", "1"]);
    assert_eq!(
        (refused.status.code(), refused.stderr.as_str()),
        (Some(3), "FENCED the lock is held shared\n"),
        "a reader's fence guards no write"
    );
    let w = holder(
        "writer",
        &["write_locked", &key, "30000", "5000"],
        Some(data.as_str()),
    );
    wait_shape(&mut con, &key, "shared", 2, 1);
    let c = holder("reader-c", &read, None);
    wait_shape(&mut con, &key, "shared", 2, 2);
    a.finish();
    assert_shape(&mut con, &key, "shared", 1, 2);
    assert_eq!(
        w.fence(),
        None,
        "the writer holds the lock while reader b does"
    );
    b.finish();
    assert_granted_at_once(&mut con, &key, "exclusive", 1);
    let fw = w.wait_granted();
    assert!(fw > fb, "writer {fw} after readers {fa}, {fb}");
    assert_eq!(
        fs::read_to_string(w.file("wrote")).unwrap(),
        "(integer) 1\n"
    );
    assert_shape(&mut con, &key, "exclusive", 1, 1);
    assert_eq!(
        c.fence(),
        None,
        "a reader that came after the writer joined before it"
    );
    w.finish();
    assert_granted_at_once(&mut con, &key, "shared", 1);
    let fc = c.wait_granted();
    assert!(fc > fw);
    c.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    assert_eq!(cli(&server, &["HGET", &data, "pen"]), "\"3\"");
    cli(&server, &["DEL", &data]);

    // A semaphore of 2 permits.
    let key = format!("api:{}", uuid::Uuid::new_v4());
    let take = ["with_permit", &key, "2", "30000", "5000"];
    let p1 = holder("caller-1", &take, None);
    let f1 = p1.wait_granted();
    let p2 = holder("caller-2", &take, None);
    let f2 = p2.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);
    // Both permits taken: a caller that waits 100 ms gets status 2 and does not run.
    let ran = dir.join("ran");
    let t0 = Instant::now();
    let gave_up = run_bounded(
        shell_helper(&server, &["with_permit", &key, "2", "30000", "100"])
            .arg("touch")
            .arg(&ran),
        FLOW_TIMEOUT,
        "with_permit WAIT 100",
    );
    assert!(t0.elapsed() >= Duration::from_millis(90));
    assert_eq!(gave_up.status.code(), Some(2), "{}", gave_up.stderr);
    assert!(!ran.exists(), "ran without a permit");
    let p3 = holder("caller-3", &take, None);
    wait_shape(&mut con, &key, "shared", 2, 1);
    p1.finish();
    assert_granted_at_once(&mut con, &key, "shared", 2);
    let f3 = p3.wait_granted();
    assert!(f3 > f2 && f2 > f1);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| h.1)
            .collect::<Vec<_>>(),
        [f2, f3]
    );
    p2.finish();
    p3.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    let _ = fs::remove_dir_all(&dir);
    note(&format!(
        "redis-cli shared: ok (readers {fa}, {fb} < writer {fw} < reader {fc}; permits {f1}, {f2} < {f3})"
    ));
    assert_shared_counts(&server, 1);
}

// ---------------------------------------------------------------------------------------------
// redis-py

/// A venv with tests/clients/requirements.txt installed, under target/clients/ and named by the
/// file's hash; made on first use. Built under a temporary name and renamed into place, so a
/// half-made venv is never used; made once per test process (two tests use it).
fn python_venv() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(make_python_venv).clone()
}

fn make_python_venv() -> PathBuf {
    let reqs = manifest_dir().join("tests/clients/requirements.txt");
    let root = target_dir().join("clients");
    let venv = root.join(format!("python-{}", file_hash(&reqs)));
    let python = venv.join("bin/python");
    if python.exists() {
        let ok = run_bounded(
            Command::new(&python).args(["-c", "import redis"]),
            FLOW_TIMEOUT,
            "venv check",
        );
        if ok.status.success() {
            return venv;
        }
        note(&format!("{} is broken; making it again", venv.display()));
        let _ = fs::remove_dir_all(&venv);
    }
    fs::create_dir_all(&root).expect("create target/clients");
    let tmp = root.join(format!("python-tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    note(&format!("installing redis-py into {}", venv.display()));
    run_bounded(
        Command::new("python3").args(["-m", "venv"]).arg(&tmp),
        INSTALL_TIMEOUT,
        "python3 -m venv",
    )
    .expect_success("python3 -m venv");
    run_bounded(
        Command::new(tmp.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-input", "--require-hashes", "--only-binary", ":all:"])
            .arg("-r")
            .arg(&reqs),
        INSTALL_TIMEOUT,
        "pip install",
    )
    .expect_success("pip install -r tests/clients/requirements.txt");
    if fs::rename(&tmp, &venv).is_err() {
        // Another test run made it meanwhile.
        let _ = fs::remove_dir_all(&tmp);
    }
    venv
}

#[test]
fn redis_py_flow() {
    runtime("redis-py flow", &["python3"]);
    let venv = python_venv();
    let script = manifest_dir().join("tests/clients/flow.py");
    let run = |server: &Server, what: &str| {
        let out = run_bounded(
            Command::new(venv.join("bin/python"))
                .arg(&script)
                .arg(server.port.to_string())
                .arg(what),
            FLOW_TIMEOUT,
            &format!("tests/clients/flow.py {what}"),
        )
        .expect_success(&format!("tests/clients/flow.py {what}"));
        note(out.stdout.trim_end());
        out.stdout
    };
    let server = Server::new();
    let out = run(&server, "flow");
    assert_eq!(
        out.matches(": ok (fences").count(),
        2,
        "both RESP2 and RESP3 flows must report ok: {out}"
    );
    assert_flow_counts(&server, 2);
    let server = Server::new();
    let out = run(&server, "pattern");
    assert!(out.contains("pattern: ok (fences"), "{out}");
    assert_pattern_counts(&server);
    let server = Server::new();
    let out = run(&server, "shared");
    assert_eq!(
        out.matches(" shared: ok (readers").count(),
        2,
        "both RESP2 and RESP3 shared runs must report ok: {out}"
    );
    assert_shared_counts(&server, 2);
}

// ---------------------------------------------------------------------------------------------
// ioredis

/// `npm ci` in tests/clients/node unless its node_modules matches package-lock.json already.
fn node_modules() -> PathBuf {
    let dir = manifest_dir().join("tests/clients/node");
    let stamp = dir.join("node_modules/.redis-lock-installed");
    let want = file_hash(&dir.join("package-lock.json"));
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        return dir;
    }
    note(&format!("npm ci in {}", dir.display()));
    run_bounded(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
        INSTALL_TIMEOUT,
        "npm ci",
    )
    .expect_success("npm ci in tests/clients/node");
    fs::write(&stamp, &want).expect("write the install stamp");
    dir
}

#[test]
fn ioredis_flow() {
    runtime("ioredis flow", &["node", "npm"]);
    let dir = node_modules();
    let run = |server: &Server, what: &str| {
        let out = run_bounded(
            Command::new("node")
                .arg("flow.js")
                .arg(server.port.to_string())
                .arg(what)
                .current_dir(&dir),
            FLOW_TIMEOUT,
            &format!("tests/clients/node/flow.js {what}"),
        )
        .expect_success(&format!("tests/clients/node/flow.js {what}"));
        note(out.stdout.trim_end());
        out.stdout
    };
    let server = Server::new();
    let out = run(&server, "flow");
    assert!(out.contains(": ok (fences"), "{out}");
    assert_flow_counts(&server, 1);
    let server = Server::new();
    let out = run(&server, "pattern");
    assert!(out.contains("pattern: ok (fences"), "{out}");
    assert_pattern_counts(&server);
    let server = Server::new();
    let out = run(&server, "shared");
    assert!(out.contains(" shared: ok (readers"), "{out}");
    assert_shared_counts(&server, 1);
}

fn lock_counters(server: &Server) -> (String, HashMap<String, i64>) {
    let mut con = server.conn();
    let text: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
    let fields = text
        .lines()
        .filter_map(|l| l.strip_prefix("lock_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect();
    (text, fields)
}

/// What the server counted for the recommended pattern (with_lock / withLock): three
/// acquisitions, two releases, the stalled holder's lease end, at least the extends that
/// carried a 500 ms lease through 1 s of work, and the guarded writes: the two holders'
/// landed, the stalled holder's and one after the release were refused.
#[track_caller]
fn assert_pattern_counts(server: &Server) {
    let (text, f) = lock_counters(server);
    for (name, want) in [
        ("guarded_runs", 2),
        ("guarded_refusals", 2),
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 3),
        ("contended_acquires", 0),
        ("releases", 2),
        ("lease_ends", 1),
        ("grants", 0),
        ("wait_timeouts", 0),
        ("fences", 0),
    ] {
        assert_eq!(f[name], want, "lock_{name} after the pattern:\n{text}");
    }
    assert!(f["extends"] >= 3, "the keep-alive must extend:\n{text}");
}

/// What the server counted for `flows` runs of the scripted flow, so a script that skipped a
/// step cannot pass: per flow one acquire, three contended acquires (busy, timed-out WAIT,
/// granted WAIT), one fence, one guarded write run and one refused, one extend plus the
/// holder's renewal, two releases, one grant and one wait timeout.
#[track_caller]
fn assert_flow_counts(server: &Server, flows: i64) {
    let (text, f) = lock_counters(server);
    let field = |name: &str| -> i64 {
        *f.get(name)
            .unwrap_or_else(|| panic!("no lock_{name} in INFO lock:\n{text}"))
    };
    let expect = [
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 1),
        ("contended_acquires", 3),
        ("fences", 1),
        ("guarded_runs", 1),
        ("guarded_refusals", 1),
        ("extends", 2),
        ("releases", 2),
        ("grants", 1),
        ("wait_timeouts", 1),
        ("lease_ends", 0),
    ];
    for (name, per_flow) in expect {
        let want = if name == "held" || name == "waiting_clients" {
            0
        } else {
            per_flow * flows
        };
        assert_eq!(
            field(name),
            want,
            "lock_{name} after {flows} flow(s):\n{text}"
        );
    }
}

/// What the server counted for `runs` runs of the shared-hold scenarios (the same in every
/// client), so a client that skipped a step cannot pass. Per run, counted per hold: a
/// reader's renewal and a downgrade (2 extends; the refused upgrade counts nowhere); six holds
/// taken at once (the same-token checks' shared and exclusive holds, readers a and b, permits 1
/// and 2) and three granted from the queue (the writer, reader c, permit 3), after four
/// contended acquires (those three and the caller that gave up: one wait timeout); nine
/// releases; the writer's guarded write run and a reader's refused.
#[track_caller]
fn assert_shared_counts(server: &Server, runs: i64) {
    let (text, f) = lock_counters(server);
    for (name, per_run) in [
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 6),
        ("contended_acquires", 4),
        ("grants", 3),
        ("wait_timeouts", 1),
        ("extends", 2),
        ("releases", 9),
        ("fences", 0),
        ("lease_ends", 0),
        ("guarded_runs", 1),
        ("guarded_refusals", 1),
    ] {
        assert_eq!(
            f[name],
            per_run * runs,
            "lock_{name} after {runs} shared run(s):\n{text}"
        );
    }
}

/// The `INFO lock` counters of `LOCK.GUARD`: inner commands run (their own errors included)
/// and `FENCED` refusals.
#[track_caller]
fn assert_guarded_counts(server: &Server, runs: i64, refusals: i64) {
    let (text, f) = lock_counters(server);
    assert_eq!(
        (f.get("guarded_runs"), f.get("guarded_refusals")),
        (Some(&runs), Some(&refusals)),
        "lock_guarded_runs and lock_guarded_refusals:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// redis-rs

/// `LOCK.INFO` through redis-rs's own conversions, as an application would read it.
fn rs_info(con: &mut redis::Connection, key: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.INFO").arg(key).query(con).unwrap()
}

fn rs_flow(server: &Server, resp3: bool) -> (u64, u64, u64) {
    let url = if resp3 {
        format!("{}?protocol=resp3", server.url())
    } else {
        server.url()
    };
    let client = redis::Client::open(url).unwrap();
    let mut a = client.get_connection().unwrap();
    let mut b = client.get_connection().unwrap();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let data = format!("{key}:data");
    let token = uuid::Uuid::new_v4().to_string();
    let other = uuid::Uuid::new_v4().to_string();

    let acquire = |con: &mut redis::Connection, tok: &str| -> Option<u64> {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg(tok)
            .arg(30_000)
            .query(con)
            .unwrap()
    };
    let f1 = acquire(&mut a, &token).expect("free lock");
    assert_eq!(acquire(&mut a, &token), Some(f1), "a retry keeps the fence");
    assert_eq!(acquire(&mut b, &other), None, "held by another");

    let f2: Option<u64> = redis::cmd("LOCK.FENCE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    let f2 = f2.expect("the holder gets a fence");
    assert!(f2 > f1);
    let none: Option<u64> = redis::cmd("LOCK.FENCE")
        .arg(&key)
        .arg(&other)
        .query(&mut b)
        .unwrap();
    assert_eq!(none, None);

    // Guarded writes: the current fence lands, the one LOCK.FENCE replaced is refused.
    let landed: Guarded<String> = guarded(&mut a, &key, f2, ("SET", &data, "by-f2")).unwrap();
    assert_eq!(landed, Guarded::Ran("OK".to_string()));
    let refused: Guarded<String> = guarded(&mut b, &key, f1, ("SET", &data, "by-f1")).unwrap();
    assert_eq!(
        refused,
        Guarded::Fenced("the lock is held under a newer fence".to_string())
    );
    let stored: String = redis::cmd("GET").arg(&data).query(&mut a).unwrap();
    assert_eq!(stored, "by-f2");
    let _: () = redis::cmd("DEL").arg(&data).query(&mut a).unwrap();

    let extended: bool = redis::cmd("LOCK.EXTEND")
        .arg(&key)
        .arg(&token)
        .arg(60_000)
        .query(&mut a)
        .unwrap();
    assert!(extended);
    let extended: bool = redis::cmd("LOCK.EXTEND")
        .arg(&key)
        .arg(&other)
        .arg(60_000)
        .query(&mut b)
        .unwrap();
    assert!(!extended);

    let i = rs_info(&mut a, &key).expect("held");
    let holder: Option<String> = redis::from_redis_value(&i["holder"]).unwrap();
    let fence: u64 = redis::from_redis_value(&i["fence"]).unwrap();
    let ttl: i64 = redis::from_redis_value(&i["ttl"]).unwrap();
    let waiters: u64 = redis::from_redis_value(&i["waiters"]).unwrap();
    assert_eq!(holder.as_deref(), Some(token.as_str()));
    assert_eq!(fence, f2);
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(waiters, 0);
    let mode: String = redis::from_redis_value(&i["mode"]).unwrap();
    let holders: u64 = redis::from_redis_value(&i["holders"]).unwrap();
    assert_eq!((mode.as_str(), holders), ("exclusive", 1));
    assert_eq!(i.len(), 6);
    let holders: Vec<(String, u64, i64, String)> =
        redis::cmd("LOCK.HOLDERS").arg(&key).query(&mut a).unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let (holder, fence, ttl, mode) = &holders[0];
    assert_eq!((holder, *fence, mode.as_str()), (&token, f2, "exclusive"));
    assert!(*ttl > 30_000 && *ttl <= 60_000, "ttl {ttl}");

    let t0 = Instant::now();
    let timed_out: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&other)
        .arg(30_000)
        .arg("WAIT")
        .arg(100)
        .query(&mut b)
        .unwrap();
    assert_eq!(timed_out, None);
    assert!(t0.elapsed() >= Duration::from_millis(90));

    // The blocking WAIT on its own connection and thread, granted on release.
    let (k, o) = (key.clone(), other.clone());
    let waiter = thread::spawn(move || -> Option<u64> {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&k)
            .arg(&o)
            .arg(30_000)
            .arg("WAIT")
            .arg(10_000)
            .query(&mut b)
            .unwrap()
    });
    let joined = wait_until(Duration::from_secs(5), || {
        rs_info(&mut a, &key).is_some_and(|i| i["waiters"] == Value::Int(1))
    });
    assert!(joined, "the waiter never joined the queue");
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    assert!(released);
    let f3 = waiter.join().unwrap().expect("granted on release");
    assert!(f3 > f2, "granted fence {f3} must exceed {f2}");

    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    assert!(!released, "no longer the holder");
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&other)
        .query(&mut a)
        .unwrap();
    assert!(released);
    assert!(rs_info(&mut a, &key).is_none(), "gone once released");

    let err = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&token)
        .arg(0)
        .query::<Option<u64>>(&mut a)
        .unwrap_err();
    assert!(
        err.to_string().contains("ttl must be between"),
        "error: {err}"
    );
    (f1, f2, f3)
}

#[test]
fn redis_rs_flow() {
    let server = Server::new();
    for resp3 in [false, true] {
        let (f1, f2, f3) = rs_flow(&server, resp3);
        note(&format!(
            "redis-rs RESP{}: ok (fences {f1} < {f2} < {f3})",
            if resp3 { 3 } else { 2 }
        ));
    }
    assert_flow_counts(&server, 2);
}

// ---------------------------------------------------------------------------------------------
// redis-py's RedisCluster

/// Three cluster-enabled servers with the module, made masters without replicas by
/// `redis-cli --cluster create` (as tests/cluster.rs makes its larger cluster); returned once
/// every node knows all three and serves all 16384 slots.
fn small_cluster() -> Vec<Server> {
    let opts = Opts::new().extra(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
    ]);
    let nodes: Vec<Server> = (0..3).map(|_| Server::start(opts.clone())).collect();
    run_bounded(
        Command::new(redis_cli_bin())
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"]),
        FLOW_TIMEOUT,
        "redis-cli --cluster create",
    )
    .expect_success("redis-cli --cluster create");
    let mut last = String::new();
    let ready = wait_until(Duration::from_secs(60), || {
        nodes.iter().all(|n| {
            last = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut n.conn())
                .unwrap();
            [
                "cluster_state:ok",
                "cluster_slots_ok:16384",
                "cluster_known_nodes:3",
            ]
            .iter()
            .all(|want| last.lines().any(|l| l.trim() == *want))
        })
    });
    assert!(ready, "the cluster is not ready after 60 s:\n{last}");
    nodes
}

/// redis-py's `RedisCluster` routes `LOCK.GUARD` by the keys `COMMAND GETKEYS` names, straight
/// to the master of a hash tag's slot, and the `guarded` helper of docs/CLIENTS.md works
/// through it unchanged: `tests/clients/cluster_guard.py` acquires `{order:42}:lock`, writes
/// `{order:42}:data` under the fence (checked on the owning master, and on the others that it
/// is not there), is refused under a stale fence, and finds keys of two slots refused by
/// `RedisCluster` and by the server (`CROSSSLOT`).
#[test]
fn redis_py_cluster_guard() {
    runtime("redis-py RedisCluster", &["python3", &redis_cli_bin()]);
    let venv = python_venv();
    let nodes = small_cluster();
    let script = manifest_dir().join("tests/clients/cluster_guard.py");
    // The seed is the first node, which owns slots 0-5460: {order:42} hashes to slot 8691.
    let out = run_bounded(
        Command::new(venv.join("bin/python"))
            .arg(&script)
            .arg(nodes[0].port.to_string()),
        FLOW_TIMEOUT,
        "tests/clients/cluster_guard.py",
    )
    .expect_success("tests/clients/cluster_guard.py");
    note(out.stdout.trim_end());
    assert!(out.stdout.contains("RedisCluster: ok"), "{}", out.stdout);
    // Counted on one master only: four commands run, two refused (the CROSSSLOT one never
    // reached the module).
    let counts: Vec<(i64, i64)> = nodes
        .iter()
        .map(|n| {
            let (_, f) = lock_counters(n);
            (f["guarded_runs"], f["guarded_refusals"])
        })
        .collect();
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [(0, 0), (0, 0), (4, 2)],
        "LOCK.GUARD counters by node: {counts:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// docs/CLIENTS.md

/// The fenced code blocks of a Markdown text: (language tag, body).
fn code_blocks(md: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in md.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => blocks.push(open.take().unwrap()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    blocks
}

/// The text under the heading line `heading` (e.g. `## Guarded writes`) of a Markdown text, up
/// to the next heading of the same or a higher level (lines in code blocks are not headings).
fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let start = md
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no `{heading}` section"))
        + heading.len()
        + 2;
    let body = &md[start..];
    let mut in_code = false;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
                return &body[..offset];
            }
        }
        offset += line.len();
    }
    body
}

/// Whether `file` contains `block` line for line, at its own indentation or shifted right as
/// a whole (a snippet that runs inside a function or a `with` block).
fn contains_block(file: &str, block: &str) -> bool {
    if file.contains(block) {
        return true;
    }
    let first = block.lines().next().unwrap_or_default();
    file.lines()
        .filter_map(|line| line.strip_suffix(first))
        .filter(|indent| indent.chars().all(|c| c == ' '))
        .any(|indent| {
            let shifted: String = block
                .lines()
                .map(|l| match l {
                    "" => "\n".to_string(),
                    l => format!("{indent}{l}\n"),
                })
                .collect();
            file.contains(&shifted)
        })
}

/// Every code block of the section `heading` of the file `doc` is, character for character,
/// in the file that runs it (by its language tag, from `runs`), and every language of `runs`
/// has one: what the page shows is what the tests run.
#[track_caller]
fn assert_doc_blocks_run(doc: &str, heading: &str, runs: &[(&str, &str)]) {
    let read = |rel: &str| {
        fs::read_to_string(manifest_dir().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    let blocks = code_blocks(section(&read(doc), heading));
    for (lang, block) in &blocks {
        let file = runs
            .iter()
            .find(|(l, _)| l == lang)
            .map(|(_, f)| f)
            .unwrap_or_else(|| panic!("a `{lang}` block in {doc} `{heading}`, which no flow runs"));
        assert!(
            contains_block(&read(file), block),
            "this `{lang}` block of {doc} `{heading}` is not, as shown, in {file}:\n{block}"
        );
    }
    for (lang, _) in runs {
        assert!(
            blocks.iter().any(|(l, _)| l == lang),
            "no `{lang}` block in {doc} `{heading}`"
        );
    }
}

/// Every code block of the "Guarded writes" section of docs/CLIENTS.md is, character for
/// character, in the file whose flow runs it.
#[test]
fn docs_guarded_helpers_are_the_ones_the_flows_run() {
    let runs = [
        ("python", "tests/clients/flow.py"),
        ("js", "tests/clients/node/flow.js"),
        ("rust", "tests/clients.rs"),
        ("sh", "tests/clients/guarded.sh"),
    ];
    assert_doc_blocks_run("docs/CLIENTS.md", "## Guarded writes", &runs);
}

/// The read-write lock and semaphore recipes of docs/CLIENTS.md, in every language, and the
/// README's uses of them, are, character for character, what the flows run
/// (`redis_py_flow`, `ioredis_flow`, `redis_rs_shared_holds`, `redis_cli_shared_holds`).
#[test]
fn docs_shared_recipes_are_the_ones_the_flows_run() {
    let runs = [
        ("python", "tests/clients/flow.py"),
        ("js", "tests/clients/node/flow.js"),
        ("rust", "tests/clients.rs"),
        ("sh", "tests/clients/shared.sh"),
    ];
    assert_doc_blocks_run("docs/CLIENTS.md", "### Read-write lock", &runs);
    assert_doc_blocks_run("docs/CLIENTS.md", "### Semaphore", &runs);
    assert_doc_blocks_run(
        "README.md",
        "### Read-write locks and semaphores",
        &[("python", "tests/clients/flow.py")],
    );
}

// --- The recommended pattern, as docs/CLIENTS.md shows it ------------------------------------

/// What a guarded command came to.
#[derive(Debug, PartialEq)]
enum Guarded<T> {
    /// `fence` was the lock's current fence: the command ran, and this is its reply.
    Ran(T),
    /// The lock is not held under `fence` any more (the server's reason): nothing ran.
    Fenced(String),
}

/// Runs `command` only while `fence` is the current fence of the lock at `lock_key`. A
/// `FENCED` refusal comes back as `Guarded::Fenced`; every other error (the command's own
/// included) stays an `Err`.
fn guarded<T: redis::FromRedisValue>(
    con: &mut impl redis::ConnectionLike,
    lock_key: &str,
    fence: u64,
    command: impl redis::ToRedisArgs,
) -> redis::RedisResult<Guarded<T>> {
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(lock_key).arg(fence).arg(command);
    match cmd.query(con) {
        Ok(reply) => Ok(Guarded::Ran(reply)),
        Err(e) if e.code() == Some("FENCED") => {
            Ok(Guarded::Fenced(e.detail().unwrap_or_default().to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Runs `work(fence, lost)` holding the lock at `key`; `None` if it was still held after
/// 5 s. `lost` turns true if the lease was lost while `work` ran.
fn with_lock<T>(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    work: impl FnOnce(u64, &AtomicBool) -> T,
) -> redis::RedisResult<Option<T>> {
    let token = uuid::Uuid::new_v4().to_string(); // one fresh token per acquisition
    let mut con = client.get_connection()?;
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&token)
        .arg(ttl_ms)
        .arg("WAIT")
        .arg(5_000)
        .query(&mut con)?;
    let Some(fence) = fence else {
        return Ok(None);
    };
    // Where a failover must not lose the lock, have a replica acknowledge it first:
    //   if WAIT 1 100 replies 0: release, then retry or give up
    let lost = AtomicBool::new(false);
    let (stop, stopped) = mpsc::channel::<()>();
    let result = thread::scope(|s| {
        // Extend at a third of the ttl, on a connection of its own; stop once it is gone.
        let (lost, token) = (&lost, &token);
        let keep_alive = s.spawn(move || -> redis::RedisResult<()> {
            let mut con = client.get_connection()?;
            let every = Duration::from_millis(ttl_ms / 3);
            while stopped.recv_timeout(every) == Err(mpsc::RecvTimeoutError::Timeout) {
                let extended: bool = redis::cmd("LOCK.EXTEND")
                    .arg(key)
                    .arg(token)
                    .arg(ttl_ms)
                    .query(&mut con)?;
                if !extended {
                    lost.store(true, Ordering::SeqCst);
                    break;
                }
            }
            Ok(())
        });
        let result = work(fence, lost); // pass the fence with every write to the resource
        drop(stop);
        keep_alive.join().expect("keep-alive thread")?;
        Ok::<T, redis::RedisError>(result)
    });
    let _released: bool = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(&token)
        .query(&mut con)?;
    result.map(Some)
}

/// A resource that checks fences: it refuses a write older than one it has accepted.
#[derive(Default)]
struct FencedStore {
    highest: u64,
    value: Option<String>,
}

impl FencedStore {
    fn write(&mut self, fence: u64, value: &str) -> Result<(), String> {
        if fence < self.highest {
            return Err(format!("stale fence {fence} < {}", self.highest));
        }
        self.highest = fence;
        self.value = Some(value.to_string());
        Ok(())
    }
}

#[test]
fn redis_rs_pattern() {
    let server = Server::new();
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let data = format!("{key}:data");
    let mut store = FencedStore::default();
    let set = |value: &'static str| ("SET", data.clone(), value);

    // The work outlives the 500 ms ttl; the keep-alive holds the lock all along.
    let f1 = with_lock(&client, &key, 500, |fence, lost| {
        sleep(Duration::from_millis(1000));
        assert!(!lost.load(Ordering::SeqCst), "the keep-alive lost the lock");
        assert_eq!(info(&mut con, &key).unwrap().fence as u64, fence);
        store.write(fence, "first").unwrap();
        let landed: Guarded<String> = guarded(&mut con, &key, fence, set("first")).unwrap();
        assert_eq!(landed, Guarded::Ran("OK".to_string()));
        fence
    })
    .unwrap()
    .expect("free lock");
    assert!(info(&mut con, &key).is_none(), "released after the work");

    // A holder that stalls past its lease while another takes over: the store refuses the
    // stale holder's late write, and so does LOCK.GUARD in Redis.
    let stale = uuid::Uuid::new_v4().to_string();
    let f_stale: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&stale)
        .arg(100)
        .query(&mut con)
        .unwrap();
    let f_stale = f_stale.unwrap();
    assert!(f_stale > f1);
    sleep(Duration::from_millis(300));
    let f_new = with_lock(&client, &key, 10_000, |fence, _| {
        store.write(fence, "new").unwrap();
        let landed: Guarded<String> = guarded(&mut con, &key, fence, set("new")).unwrap();
        assert_eq!(landed, Guarded::Ran("OK".to_string()));
        // The stalled holder wakes up.
        let late: Guarded<String> = guarded(&mut con, &key, f_stale, set("late")).unwrap();
        assert_eq!(
            late,
            Guarded::Fenced("the lock is held under a newer fence".to_string())
        );
        fence
    })
    .unwrap()
    .expect("free after the stalled lease ended");
    assert!(f_new > f_stale);
    assert!(store.write(f_stale, "late").is_err(), "a stale write");
    assert_eq!(store.value.as_deref(), Some("new"));
    let stored: String = redis::cmd("GET").arg(&data).query(&mut con).unwrap();
    assert_eq!(stored, "new", "only the holders' writes landed");
    let after: Guarded<String> = guarded(&mut con, &key, f_new, set("after")).unwrap();
    assert_eq!(
        after,
        Guarded::Fenced("the lock is not held".to_string()),
        "released: nobody holds it"
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&stale)
        .query(&mut con)
        .unwrap();
    assert!(!released, "the stalled holder lost it");
    note(&format!(
        "redis-rs pattern: ok (fences {f1} < {f_stale} < {f_new})"
    ));
    assert_pattern_counts(&server);
}

/// The pattern docs/CLIENTS.md recommends where replication matters: acquire, then
/// `WAIT 1 <ms>` for a replica to have the grant before using it; the replica holds the same
/// holder and fence.
#[test]
fn redis_rs_acquire_then_wait_for_a_replica() {
    let master = Server::new();
    let replica = Server::start(Opts::new().replicaof(master.port));
    let mut r = replica.conn();
    assert!(
        wait_until(Duration::from_secs(15), || common::info_field(
            &mut r,
            "replication",
            "master_link_status"
        )
        .as_deref()
            == Some("up")),
        "replica link not up"
    );
    let mut m = master.conn();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let token = uuid::Uuid::new_v4().to_string();
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&token)
        .arg(30_000)
        .query(&mut m)
        .unwrap();
    let fence = fence.expect("free lock");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "the replica must acknowledge the grant");
    let on_replica = info(&mut r, &key).expect("the replica holds the lock");
    assert_eq!(on_replica.holder.as_deref(), Some(token.as_bytes()));
    assert_eq!(on_replica.fence as u64, fence);

    // With no replica to acknowledge, WAIT says 0: treat the lock as not acquired.
    drop(replica);
    let key2 = format!("orders:{}", uuid::Uuid::new_v4());
    let fence2: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key2)
        .arg(&token)
        .arg(30_000)
        .query(&mut m)
        .unwrap();
    assert!(fence2.is_some_and(|f| f > fence));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut m).unwrap();
    assert_eq!(acked, 0, "no replica is left to acknowledge");
}

// --- Read-write locks and semaphores, as docs/CLIENTS.md shows them --------------------------

/// One hold of a lock, on a connection of its own; released when dropped, however the work
/// under it ends.
struct Hold {
    /// The hold's fence: pass it with every write the hold protects.
    fence: u64,
    key: String,
    token: String,
    con: redis::Connection,
}

impl Drop for Hold {
    fn drop(&mut self) {
        // 0 or an error: the lease had ended, or ends on its own.
        let _: redis::RedisResult<bool> = redis::cmd("LOCK.RELEASE")
            .arg(&self.key)
            .arg(&self.token)
            .query(&mut self.con);
    }
}

/// Takes a hold of the lock at `key`: exclusive with no `options`, shared with
/// `&["SHARED"]`, one of n permits with `&["SHARED", "LIMIT", n]`. `None`, and nothing is
/// held, if it is not granted within `wait_ms`. The `WAIT` blocks the hold's connection.
fn hold(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    options: &[&str],
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    let mut con = client.get_connection()?;
    let token = uuid::Uuid::new_v4().to_string(); // one fresh token per hold
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&token)
        .arg(ttl_ms)
        .arg(options)
        .arg("WAIT")
        .arg(wait_ms)
        .query(&mut con)?;
    Ok(fence.map(|fence| Hold {
        fence,
        key: key.to_string(),
        token,
        con,
    }))
}

/// Shared with the other readers; waits for a writer that holds the lock or queued first.
fn read_lock(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(client, key, ttl_ms, &["SHARED"], wait_ms)
}

/// Alone: waits until the readers and writers that came first have released.
fn write_lock(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(client, key, ttl_ms, &[], wait_ms)
}

/// One of `permits` permits of `key`; queues, first come first served, while all are taken.
/// Every user of `key` must pass the same `permits`.
fn permit(
    client: &redis::Client,
    key: &str,
    permits: u32,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(
        client,
        key,
        ttl_ms,
        &["SHARED", "LIMIT", &permits.to_string()],
        wait_ms,
    )
}

/// The error a shared holder gets when it asks for an exclusive hold (after `ERR `).
const UPGRADE_REFUSED: &str =
    "the token holds the lock shared: release it to take it exclusively (no upgrades)";

/// `LOCK.HOLDERS`: (token, fence, ttl, mode) per hold, in grant order; empty for no key.
fn holders(con: &mut redis::Connection, key: &str) -> Vec<(String, u64, i64, String)> {
    let holders: Option<Vec<(String, u64, i64, String)>> =
        redis::cmd("LOCK.HOLDERS").arg(key).query(con).unwrap();
    holders.unwrap_or_default()
}

/// The fence and the instant of a grant, as an actor saw them.
type Granted = Arc<Mutex<Option<(u64, Instant)>>>;

/// One client of a scenario, in a thread of its own: it takes its hold through a recipe and,
/// once granted, counts itself in `in_flight` and stays until told to leave; then it drops
/// the hold, which releases it.
struct Actor {
    name: &'static str,
    granted: Granted,
    leave: mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

/// Holders counted by the clients themselves, apart from the server: (now, most at once).
type InFlight = Arc<Mutex<(u32, u32)>>;

impl Actor {
    fn start(
        name: &'static str,
        in_flight: &InFlight,
        take: impl FnOnce() -> redis::RedisResult<Option<Hold>> + Send + 'static,
    ) -> Actor {
        let granted = Granted::default();
        let (leave, left) = mpsc::channel::<()>();
        let (g, in_flight) = (granted.clone(), in_flight.clone());
        let thread = thread::spawn(move || {
            let hold = take()
                .unwrap()
                .unwrap_or_else(|| panic!("{name} was not granted"));
            {
                let mut n = in_flight.lock().unwrap();
                n.0 += 1;
                n.1 = n.1.max(n.0);
            }
            *g.lock().unwrap() = Some((hold.fence, Instant::now()));
            let _ = left.recv_timeout(Duration::from_secs(20));
            in_flight.lock().unwrap().0 -= 1;
            drop(hold);
        });
        Actor {
            name,
            granted,
            leave,
            thread,
        }
    }

    fn granted(&self) -> Option<(u64, Instant)> {
        *self.granted.lock().unwrap()
    }

    #[track_caller]
    fn wait_granted(&self) -> (u64, Instant) {
        let ok = wait_until(Duration::from_secs(5), || {
            self.granted().is_some() || self.thread.is_finished()
        });
        assert!(
            ok && self.granted().is_some(),
            "{} was never granted",
            self.name
        );
        self.granted().unwrap()
    }

    /// Tells it to leave; returns once its hold is released.
    fn finish(self) {
        let _ = self.leave.send(());
        self.thread.join().expect(self.name);
    }
}

/// redis-rs, RESP2 and RESP3: the read-write lock and semaphore of docs/CLIENTS.md (the
/// `Hold` guard and `read_lock`, `write_lock`, `permit` above), each holder a thread with a
/// connection of its own. Two readers hold together while a writer waits for both, a reader
/// after the writer waits for it, the writer's guarded write lands and a reader's fence is
/// refused; a semaphore of 2 permits whose third caller waits for a release, and a caller that
/// gives up does not run. Also a reader's renewal, the refused upgrade and a downgrade.
#[test]
fn redis_rs_shared_holds() {
    let server = Server::new();
    for resp3 in [false, true] {
        let url = if resp3 {
            format!("{}?protocol=resp3", server.url())
        } else {
            server.url()
        };
        let client = redis::Client::open(url).unwrap();
        rs_same_token(&client);
        let rw = rs_readers_and_writer(&client);
        let sem = rs_semaphore(&client);
        note(&format!(
            "redis-rs RESP{} shared: ok (readers {}, {} < writer {} < reader {}; permits {}, {} < {})",
            if resp3 { 3 } else { 2 },
            rw[0],
            rw[1],
            rw[2],
            rw[3],
            sem[0],
            sem[1],
            sem[2]
        ));
    }
    assert_shared_counts(&server, 2);
}

fn rs_same_token(client: &redis::Client) {
    let mut con = client.get_connection().unwrap();
    let key = format!("doc:{}", uuid::Uuid::new_v4());
    let token = uuid::Uuid::new_v4().to_string();
    let acquire = |con: &mut redis::Connection, ttl: u64, shared: bool| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&key).arg(&token).arg(ttl);
        if shared {
            cmd.arg("SHARED");
        }
        cmd.query::<Option<u64>>(con)
    };
    let f = acquire(&mut con, 10_000, true).unwrap().unwrap();
    assert_eq!(acquire(&mut con, 30_000, true).unwrap(), Some(f), "renewal");
    let h = &holders(&mut con, &key)[0];
    assert_eq!(
        (h.0.as_str(), h.1, h.3.as_str()),
        (token.as_str(), f, "shared")
    );
    assert!(h.2 > 20_000, "renewed: {h:?}");
    let err = acquire(&mut con, 30_000, false).unwrap_err();
    assert_eq!(
        (err.code(), err.detail()),
        (Some("ERR"), Some(UPGRADE_REFUSED)),
        "{err}"
    );
    let h = &holders(&mut con, &key)[0];
    assert_eq!(
        (h.1, h.3.as_str()),
        (f, "shared"),
        "the refused upgrader keeps its hold"
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert!(released);
    let fx = acquire(&mut con, 30_000, false).unwrap().unwrap();
    assert!(fx > f);
    assert_eq!(
        acquire(&mut con, 30_000, true).unwrap(),
        Some(fx),
        "downgrade"
    );
    let i = info(&mut con, &key).unwrap();
    assert_eq!(
        (i.holder, i.mode.as_str(), i.holders, i.fence as u64),
        (None, "shared", 1, fx)
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert!(released);
}

/// Two readers hold the lock together; a writer queues until both have released; a reader
/// that comes after the writer waits for it. The fences of the four holds.
fn rs_readers_and_writer(client: &redis::Client) -> [u64; 4] {
    let mut con = client.get_connection().unwrap();
    let key = format!("{{catalog:{}}}:lock", uuid::Uuid::new_v4());
    let data = key.replace(":lock", ":prices");
    let in_flight = InFlight::default();
    let reader = |name| {
        let (client, key) = (client.clone(), key.clone());
        Actor::start(name, &in_flight, move || {
            read_lock(&client, &key, 30_000, 5_000)
        })
    };
    let a = reader("reader a");
    let (fa, _) = a.wait_granted();
    let b = reader("reader b");
    let (fb, _) = b.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| (h.1, h.3.as_str()))
            .collect::<Vec<_>>(),
        [(fa, "shared"), (fb, "shared")]
    );
    // A reader's fence guards no write: LOCK.GUARD runs under an exclusive hold only.
    let refused: Guarded<i64> = guarded(&mut con, &key, fb, ("HSET", &data, "pen", 1)).unwrap();
    assert_eq!(
        refused,
        Guarded::Fenced("the lock is held shared".to_string())
    );

    let writer = {
        let (client, key, data) = (client.clone(), key.clone(), data.clone());
        Actor::start("writer", &in_flight, move || {
            let hold = write_lock(&client, &key, 30_000, 5_000)?;
            if let Some(hold) = &hold {
                // A write the server checks the fence of.
                let mut con = client.get_connection()?;
                let wrote: Guarded<i64> =
                    guarded(&mut con, &key, hold.fence, ("HSET", &data, "pen", 3))?;
                assert_eq!(wrote, Guarded::Ran(1));
            }
            Ok(hold)
        })
    };
    wait_shape(&mut con, &key, "shared", 2, 1);
    let c = reader("reader c");
    wait_shape(&mut con, &key, "shared", 2, 2);
    a.finish();
    assert_shape(&mut con, &key, "shared", 1, 2);
    assert!(
        writer.granted().is_none(),
        "the writer holds the lock while reader b does"
    );
    let released = Instant::now();
    b.finish();
    let (fw, at) = writer.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "writer granted {:?} after",
        at - released
    );
    assert!(fw > fb, "writer {fw} after readers {fa}, {fb}");
    let i = info(&mut con, &key).unwrap();
    assert_eq!(
        (i.mode.as_str(), i.holders, i.waiters, i.fence as u64),
        ("exclusive", 1, 1, fw)
    );
    assert!(
        c.granted().is_none(),
        "a reader that came after the writer joined before it"
    );
    let released = Instant::now();
    writer.finish();
    let (fc, at) = c.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "reader c granted {:?} after",
        at - released
    );
    assert!(fc > fw);
    c.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    assert_eq!(*in_flight.lock().unwrap(), (0, 2));
    let pen: String = redis::cmd("HGET")
        .arg(&data)
        .arg("pen")
        .query(&mut con)
        .unwrap();
    assert_eq!(pen, "3");
    let _: () = redis::cmd("DEL").arg(&data).query(&mut con).unwrap();
    [fa, fb, fw, fc]
}

/// A semaphore of 2 permits: two callers hold one each, a third waits until one of them
/// releases; a caller that gives up waiting does not run; never more than 2 at once (counted
/// by the callers, apart from the server). The fences of the three permits.
fn rs_semaphore(client: &redis::Client) -> [u64; 3] {
    let mut con = client.get_connection().unwrap();
    let key = format!("api:{}", uuid::Uuid::new_v4());
    let in_flight = InFlight::default();
    let caller = |name| {
        let (client, key) = (client.clone(), key.clone());
        Actor::start(name, &in_flight, move || {
            permit(&client, &key, 2, 30_000, 5_000)
        })
    };
    let p1 = caller("caller 1");
    let (f1, _) = p1.wait_granted();
    let p2 = caller("caller 2");
    let (f2, _) = p2.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);

    // Both permits taken: a caller that waits 100 ms gets None, and holds nothing.
    let t0 = Instant::now();
    assert!(permit(client, &key, 2, 30_000, 100).unwrap().is_none());
    assert!(t0.elapsed() >= Duration::from_millis(90));

    let p3 = caller("caller 3");
    wait_shape(&mut con, &key, "shared", 2, 1);
    assert!(p3.granted().is_none());
    let released = Instant::now();
    p1.finish();
    let (f3, at) = p3.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "caller 3 granted {:?} after",
        at - released
    );
    assert_shape(&mut con, &key, "shared", 2, 0);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| h.1)
            .collect::<Vec<_>>(),
        [f2, f3]
    );
    assert!(f3 > f2 && f2 > f1);
    p2.finish();
    p3.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    assert_eq!(*in_flight.lock().unwrap(), (0, 2));
    [f1, f2, f3]
}
