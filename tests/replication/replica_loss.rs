//! `lock.replica-loss-pause-ms` (src/config.rs decides, src/events.rs
//! acts): a master that loses a replica which was online, because the replica was promoted
//! (`REPLICAOF NO ONE`, as Sentinel's failover does) or died (SIGKILL), pauses writes with
//! `CLIENT PAUSE <ms> WRITE` for the setting's length. Lock commands wait out the pause;
//! reads do not. At 0 (the default) nothing pauses; a replica that loses a replica of its
//! own does not pause; a second loss re-arms the pause; an operator's longer pause is
//! neither shortened nor weakened by the module's.

use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::cmd;
use crate::common::*;

const SETTING: &str = "lock.replica-loss-pause-ms";
/// The pause of these tests, and how much earlier than it a write may complete (none in
/// theory: the server releases paused writes after the pause's end).
const PAUSE_MS: u64 = 1_500;
const EARLY_SLACK_MS: u64 = 200;
/// Generous: the machines are shared.
const LATE_LIMIT: Duration = Duration::from_secs(5);
/// A command that nothing delays.
const PROMPT: Duration = Duration::from_millis(300);

/// A master and `n` replicas of it, all online (each has acknowledged a write), every server
/// loaded with `module_args`.
fn master_with_replicas(module_args: &[&str], n: usize) -> (Server, Vec<Server>) {
    let m = Server::start(Opts::new().module_args(module_args));
    let replicas: Vec<Server> = (0..n)
        .map(|_| Server::start(Opts::new().module_args(module_args).replicaof(m.port)))
        .collect();
    let mut mc = m.conn();
    assert_eq!(
        replica_acks(&mut mc, n as i64, 10_000),
        n as i64,
        "replicas not online"
    );
    (m, replicas)
}

/// `CONFIG GET` of the setting under test.
fn setting(con: &mut Connection) -> String {
    config_get(con, SETTING)
}

/// Waits until `server` has `n` replicas left (`INFO` is not a write: no pause delays it).
fn wait_replicas_left(con: &mut Connection, n: usize) {
    let left = wait_until(Duration::from_secs(10), || {
        info_field(con, "replication", "connected_slaves") == Some(n.to_string())
    });
    assert!(left, "the replica loss was not seen within 10 s");
}

/// `LOCK.ACQUIRE` of a new key on a connection of its own, granted; returns when it
/// completed.
fn acquire_new_key(server: &Server) -> Instant {
    let mut c = server.conn();
    assert!(acquire(&mut c, &format!("loss:{}", token()), &token(), 30_000).is_some());
    Instant::now()
}

/// How long a `GET` (a read) takes on a connection of its own.
fn timed_get(server: &Server) -> Duration {
    let mut c = server.conn();
    let t = Instant::now();
    assert_eq!(cmd!(&mut c, "GET", "loss:read"), Ok(Value::Nil));
    t.elapsed()
}

/// After a replica loss at `lost`: reads go on, a lock is granted only once the pause of
/// `PAUSE_MS` has passed, and the master counts one more pause.
#[track_caller]
fn assert_writes_paused_since(m: &Server, lost: Instant, pauses: i64) {
    let mut mc = m.conn();
    assert_eq!(stat(&mut mc, "lock_replica_loss_pauses"), pauses);
    let read = timed_get(m);
    assert!(read < PROMPT, "a read waited {read:?} during the pause");
    let granted = acquire_new_key(m).duration_since(lost);
    assert!(
        granted >= Duration::from_millis(PAUSE_MS - EARLY_SLACK_MS) && granted < LATE_LIMIT,
        "LOCK.ACQUIRE completed {granted:?} after the replica loss, not after the {PAUSE_MS} ms pause"
    );
    assert!(
        m.log_tail(200)
            .contains(&format!("writes paused for {PAUSE_MS} ms")),
        "no notice of the pause in the log:\n{}",
        m.log_tail(20)
    );
}

#[test]
fn a_replica_promoted_away_pauses_the_masters_writes() {
    let (m, replicas) = master_with_replicas(&["replica-loss-pause-ms", "1500"], 2);
    let mut mc = m.conn();
    assert_eq!(setting(&mut mc), "1500", "load-time argument");
    let lost = Instant::now();
    assert_eq!(
        cmd!(&mut replicas[0].conn(), "REPLICAOF", "NO", "ONE"),
        Ok(Value::Okay)
    );
    wait_replicas_left(&mut mc, 1);
    assert_writes_paused_since(&m, lost, 1);
}

#[test]
fn a_replica_killed_pauses_the_masters_writes() {
    let (m, mut replicas) = master_with_replicas(&["replica-loss-pause-ms", "1500"], 2);
    let mut mc = m.conn();
    let lost = Instant::now();
    replicas[0].kill9();
    wait_replicas_left(&mut mc, 1);
    assert_writes_paused_since(&m, lost, 1);
}

#[test]
fn each_further_loss_re_arms_the_pause() {
    let (m, mut replicas) = master_with_replicas(&["replica-loss-pause-ms", "1500"], 2);
    let mut mc = m.conn();
    replicas[0].kill9();
    wait_replicas_left(&mut mc, 1);
    std::thread::sleep(Duration::from_millis(800));
    let second = Instant::now();
    replicas[1].kill9();
    wait_replicas_left(&mut mc, 0);
    // The first pause would end about 700 ms from here; the second ends 1500 ms from here.
    assert_writes_paused_since(&m, second, 2);
}

#[test]
fn off_by_default_a_replica_loss_pauses_nothing() {
    let (m, mut replicas) = master_with_replicas(&[], 2);
    let mut mc = m.conn();
    assert_eq!(setting(&mut mc), "0");
    assert_eq!(
        cmd!(&mut replicas[0].conn(), "REPLICAOF", "NO", "ONE"),
        Ok(Value::Okay)
    );
    wait_replicas_left(&mut mc, 1);
    replicas[1].kill9();
    wait_replicas_left(&mut mc, 0);
    let t = Instant::now();
    acquire_new_key(&m);
    assert!(
        t.elapsed() < PROMPT,
        "LOCK.ACQUIRE waited {:?}",
        t.elapsed()
    );
    assert_eq!(stat(&mut mc, "lock_replica_loss_pauses"), 0);
}

#[test]
fn config_set_get_and_bad_values() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(setting(&mut c), "0");
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", SETTING, 2_500),
        Ok(Value::Okay)
    );
    assert_eq!(setting(&mut c), "2500");
    for bad in ["-1", "60001", "abc", ""] {
        let r = cmd!(&mut c, "CONFIG", "SET", SETTING, bad);
        assert_err_starts(&r, "ERR");
        eprintln!("CONFIG SET {SETTING} {bad:?}: {r:?}");
        assert_eq!(setting(&mut c), "2500", "{bad:?} changed the setting");
    }
    for good in ["60000", "0"] {
        assert_eq!(
            cmd!(&mut c, "CONFIG", "SET", SETTING, good),
            Ok(Value::Okay)
        );
        assert_eq!(setting(&mut c), good);
    }
    assert_eq!(stat(&mut c, "lock_replica_loss_pauses"), 0);
}

/// Chained replication: a replica's own replica goes offline. The replica is not paused:
/// promoted right after, it takes writes at once.
#[test]
fn a_replica_losing_its_own_replica_does_not_pause() {
    let args = ["replica-loss-pause-ms", "3000"];
    let (m, mut replicas) = master_with_replicas(&args, 1);
    let r = replicas.pop().unwrap();
    let mut sub = Server::start(Opts::new().module_args(&args).replicaof(r.port));
    let mut rc = r.conn();
    let mut mc = m.conn();
    // The sub-replica is online once it acknowledged, through the chain, a master's write.
    assert_eq!(cmd!(&mut mc, "SET", "loss:chain", "1"), Ok(Value::Okay));
    let online = wait_until(Duration::from_secs(10), || {
        matches!(
            cmd!(&mut sub.conn(), "GET", "loss:chain"),
            Ok(Value::BulkString(_))
        ) && info_field(&mut rc, "replication", "slave0")
            .is_some_and(|s| s.contains("state=online"))
    });
    assert!(online, "the sub-replica did not come online");
    sub.kill9();
    wait_replicas_left(&mut rc, 0);
    assert_eq!(stat(&mut rc, "lock_replica_loss_pauses"), 0);
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let t = Instant::now();
    acquire_new_key(&r);
    assert!(
        t.elapsed() < PROMPT,
        "the promoted replica's LOCK.ACQUIRE waited {:?}",
        t.elapsed()
    );
    // Its master did lose a replica, and paused.
    wait_replicas_left(&mut mc, 0);
    assert_eq!(stat(&mut mc, "lock_replica_loss_pauses"), 1);
}

/// An operator's longer pause is in force when a replica dies: the module's own
/// `CLIENT PAUSE 1000 WRITE` neither shortens it nor, if it pauses everything, lets reads
/// through (the server keeps the later end and the stricter type).
#[test]
fn an_operators_longer_pause_is_not_shortened() {
    for (kind, read) in [("ALL", true), ("WRITE", false)] {
        let (m, mut replicas) = master_with_replicas(&["replica-loss-pause-ms", "1000"], 1);
        let mut mc = m.conn();
        let paused = Instant::now();
        assert_eq!(
            cmd!(&mut mc, "CLIENT", "PAUSE", 3_000, kind),
            Ok(Value::Okay)
        );
        replicas[0].kill9();
        // INFO would wait out a pause of everything: the log tells that the loss was seen.
        let seen = wait_until(Duration::from_secs(10), || {
            m.log_tail(50).contains("writes paused for 1000 ms")
        });
        assert!(seen, "no notice of the loss:\n{}", m.log_tail(20));
        if read {
            timed_get(&m);
        } else {
            acquire_new_key(&m);
        }
        let done = paused.elapsed();
        assert!(
            done >= Duration::from_millis(3_000 - EARLY_SLACK_MS) && done < LATE_LIMIT,
            "a {} completed {done:?} into the operator's 3000 ms {kind} pause",
            if read { "read" } else { "LOCK.ACQUIRE" }
        );
        assert_eq!(stat(&mut mc, "lock_replica_loss_pauses"), 1);
    }
}

/// A load-time value out of range, or an argument that names no setting, stops the module
/// from loading (the server checks neither for a module), and with it the server.
#[test]
fn a_load_time_value_out_of_range_or_an_unknown_argument_is_refused() {
    use std::process::{Command, Stdio};
    let cases = [
        (
            "replica-loss-pause-ms",
            "60001",
            "replica-loss-pause-ms must be between 0 and 60000",
        ),
        (
            "replica-loss-pause-ms",
            "-1",
            "replica-loss-pause-ms must be between 0 and 60000",
        ),
        ("max-ttl", "0", "max-ttl must be between 1 and 315360000000"),
        (
            "stall-threshold-ms",
            "3600001",
            "stall-threshold-ms must be between 0 and 3600000",
        ),
        (
            "replica-loss-pause",
            "3000",
            "unknown argument \"replica-loss-pause\"",
        ),
        // Not a number: the crate refuses it before init sees it, with its own words.
        ("max-ttl", "%s%n", "invalid digit found in string"),
    ];
    for (i, (name, bad, reason)) in cases.into_iter().enumerate() {
        // No TCP port: a Unix socket of its own, so that it needs no free port.
        let socket =
            std::env::temp_dir().join(format!("redis-lock-loss-{}-{i}.sock", std::process::id(),));
        let log =
            std::env::temp_dir().join(format!("redis-lock-loss-{}-{i}.log", std::process::id(),));
        let mut child = Command::new(redis_server_bin())
            .args(["--port", "0", "--save", "", "--unixsocket"])
            .arg(&socket)
            .arg("--logfile")
            .arg(&log)
            .arg("--loadmodule")
            .arg(module_path())
            .args([name, bad])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-server");
        let exited = wait_until(Duration::from_secs(10), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        if !exited {
            let _ = child.kill();
            let _ = child.wait();
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&socket);
        assert!(exited, "the server started with {name} {bad}:\n{text}");
        assert!(
            text.contains(reason),
            "no reason given for {name} {bad}:\n{text}"
        );
    }
}
