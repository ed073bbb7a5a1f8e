//! redis-cli's read-write lock and semaphore: the helpers of tests/clients/shared.sh (the ones
//! docs/CLIENTS.md shows), each holder a bash process that the test tells when to leave.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{wait_until, Server};
use crate::lock_counters::assert_shared_counts;
use crate::processes::{finish, manifest_dir, note, run_bounded, runtime, spawn, FLOW_TIMEOUT};
use crate::redis_cli::{cli, cli_guarded, cli_int, redis_cli_bin};
use crate::shared_hold_checks::{
    assert_granted_at_once, assert_shape, holders, shape, wait_shape, UPGRADE_REFUSED,
};

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
