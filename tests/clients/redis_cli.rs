//! redis-cli: the helpers that run one command through it as a person would type it, and the
//! `guarded` shell helper of docs/CLIENTS.md through it; the lock flow, from redis-cli.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{info, wait_until, Server};
use crate::lock_counters::assert_guarded_counts;
use crate::processes::{
    finish, manifest_dir, note, run_bounded, runtime, spawn, Finished, FLOW_TIMEOUT,
};

/// The redis-cli binary: `$REDIS_CLI` or `redis-cli` from `PATH`.
pub(crate) fn redis_cli_bin() -> String {
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
pub(crate) fn cli(server: &Server, args: &[&str]) -> String {
    cli_with(server, &[], args)
}

fn cli_with(server: &Server, extra: &[&str], args: &[&str]) -> String {
    let what = format!("redis-cli {}", args.join(" "));
    let f = run_bounded(&mut cli_command(server, extra, args), FLOW_TIMEOUT, &what);
    f.stdout.trim_end().to_string()
}

/// The fence in redis-cli's `(integer) N`.
#[track_caller]
pub(crate) fn cli_int(out: &str) -> i64 {
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
pub(crate) fn cli_guarded(
    server: &Server,
    lock_key: &str,
    fence: i64,
    command: &[&str],
) -> Finished {
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
