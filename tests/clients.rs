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
use std::sync::{mpsc, OnceLock};
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

    // RESP2: the flat field/value array HGETALL gives.
    let resp2 = cli(&server, &["LOCK.INFO", &key]);
    let lines: Vec<&str> = resp2.lines().collect();
    assert_eq!(lines.len(), 8, "LOCK.INFO: {resp2}");
    assert_eq!(lines[0], r#"1) "holder""#);
    assert_eq!(lines[1], format!(r#"2) "{tok}""#));
    assert_eq!(lines[2], r#"3) "fence""#);
    assert_eq!(lines[3], format!("4) (integer) {f2}"));
    assert_eq!(lines[4], r#"5) "ttl""#);
    let ttl = cli_int(lines[5].strip_prefix("6) ").unwrap());
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(lines[6], r#"7) "waiters""#);
    assert_eq!(lines[7], "8) (integer) 0");
    // RESP3 (`-3`): a map.
    let resp3 = cli_with(&server, &["-3"], &["LOCK.INFO", &key]);
    assert!(
        resp3.starts_with(&format!("1# \"holder\" => \"{tok}\"")),
        "RESP3 LOCK.INFO: {resp3}"
    );
    assert!(
        resp3.contains(&format!("2# \"fence\" => (integer) {f2}")),
        "RESP3 LOCK.INFO: {resp3}"
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
    assert_eq!(i.len(), 4);

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

/// Every code block of the "Guarded writes" section of docs/CLIENTS.md is, character for
/// character, in the file whose flow runs it: what the page shows is what the tests run.
#[test]
fn docs_guarded_helpers_are_the_ones_the_flows_run() {
    let read = |rel: &str| {
        fs::read_to_string(manifest_dir().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    let docs = read("docs/CLIENTS.md");
    let (_, section) = docs
        .split_once("\n## Guarded writes")
        .expect("docs/CLIENTS.md has a `## Guarded writes` section");
    let section = section.split("\n## ").next().unwrap();
    let blocks = code_blocks(section);
    let runs = [
        ("python", "tests/clients/flow.py"),
        ("js", "tests/clients/node/flow.js"),
        ("rust", "tests/clients.rs"),
        ("sh", "tests/clients/guarded.sh"),
    ];
    for (lang, _) in &blocks {
        assert!(
            runs.iter().any(|(l, _)| l == lang),
            "a `{lang}` block in the Guarded writes section, which no flow runs"
        );
    }
    for (lang, file) in runs {
        let shown: Vec<&String> = blocks
            .iter()
            .filter(|(l, _)| l == lang)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(
            shown.len(),
            1,
            "one `{lang}` helper in the Guarded writes section"
        );
        assert!(
            read(file).contains(shown[0].as_str()),
            "the `{lang}` helper of docs/CLIENTS.md is not, as shown, in {file}:\n{}",
            shown[0]
        );
    }
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
