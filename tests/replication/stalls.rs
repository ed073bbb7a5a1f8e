//! `lock.stall-threshold-ms` (src/stall.rs decides, src/events.rs, src/command_table.rs and
//! src/engine/handoff.rs act): a master whose event loop stood still longer than the
//! threshold (SIGSTOP here, a slow command) pauses writes for `lock.replica-loss-pause-ms`,
//! because a replica may have been promoted meanwhile. Commands queued during the stop wait
//! for the pause, a lock write later in a turn that stalled is refused with `TRYAGAIN`, and
//! the lease sweep of such a turn hands nothing off. Replicas never pause; a stall shorter
//! than the threshold, or either setting at 0, pauses nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::cmd;
use crate::common::*;

const SETTING: &str = "lock.stall-threshold-ms";
const PAUSE_MS: u64 = 1_500;
/// How long a server is stopped.
const STOP: Duration = Duration::from_millis(1_000);
/// How much earlier than the pause's end a write may complete (none in theory).
const EARLY_SLACK_MS: u64 = 200;
/// Generous: the machines are shared.
const LATE_LIMIT: Duration = Duration::from_secs(5);
/// A command that nothing delays.
const PROMPT: Duration = Duration::from_millis(300);
/// A pause of `PAUSE_MS`, after a stall of more than half `STOP`.
const BOTH_ON: [&str; 4] = ["replica-loss-pause-ms", "1500", "stall-threshold-ms", "500"];

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

/// A server under SIGSTOP. Dropping it (also when an assertion unwinds) sends SIGCONT, or
/// the server's own drop would wait for a `SHUTDOWN` that never comes.
struct Stopped(u32);

impl Stopped {
    fn new(server: &Server) -> Stopped {
        let pid = server.pid().expect("server running");
        signal(pid, "-STOP");
        Stopped(pid)
    }

    /// SIGCONT; when it was sent.
    fn resume(self) -> Instant {
        drop(self);
        Instant::now()
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// Sends `cmd` on `c` from a thread; the reply and when it arrived. The connection must be
/// open before the server is stopped (connecting needs the server's answer).
fn send(mut c: Connection, cmd: redis::Cmd) -> JoinHandle<(Result<Value, String>, Instant)> {
    thread::spawn(move || (run(&cmd, &mut c), Instant::now()))
}

fn acquire_cmd(key: &str, ttl: u64) -> redis::Cmd {
    let mut c = redis::cmd("LOCK.ACQUIRE");
    c.arg(key).arg(token()).arg(ttl);
    c
}

/// Stops `server` for `stop` while a `LOCK.ACQUIRE` of a new key and a `GET` queue on it:
/// how long after SIGCONT each was answered.
fn queued_through_a_stop(server: &Server, stop: Duration) -> (Duration, Duration) {
    let (a, g) = (server.conn(), server.conn());
    let stopped = Stopped::new(server);
    let write = send(a, acquire_cmd(&format!("stall:{}", token()), 30_000));
    let read = send(g, redis::cmd("GET").arg("stall:read").clone());
    thread::sleep(stop);
    let resumed = stopped.resume();
    let (w, w_at) = write.join().unwrap();
    let (r, r_at) = read.join().unwrap();
    assert!(matches!(w, Ok(Value::Int(_))), "LOCK.ACQUIRE: {w:?}");
    assert_eq!(r, Ok(Value::Nil));
    (w_at.duration_since(resumed), r_at.duration_since(resumed))
}

#[track_caller]
fn assert_paused(after: Duration, what: &str) {
    assert!(
        after >= Duration::from_millis(PAUSE_MS - EARLY_SLACK_MS) && after < LATE_LIMIT,
        "{what} completed {after:?} after the stall, not after the {PAUSE_MS} ms pause"
    );
}

#[test]
fn a_stopped_master_pauses_the_writes_queued_meanwhile_not_the_reads() {
    let m = Server::start(Opts::new().module_args(&BOTH_ON));
    let _r = Server::start(Opts::new().module_args(&BOTH_ON).replicaof(m.port));
    let mut mc = m.conn();
    assert_eq!(replica_acks(&mut mc, 1, 10_000), 1, "replica not online");
    let (write, read) = queued_through_a_stop(&m, STOP);
    assert!(read < PROMPT, "a read waited {read:?} after SIGCONT");
    assert_paused(write, "the queued LOCK.ACQUIRE");
    assert_eq!(stat(&mut mc, "lock_stalls"), 1);
    let log = m.log_tail(200);
    assert!(
        log.contains("the event loop stood still for")
            && log.contains(&format!("writes paused for {PAUSE_MS} ms")),
        "no notice of the stall in the log:\n{}",
        m.log_tail(20)
    );
}

/// Sentinel's failover of a master that stood still: R1 is promoted while M is stopped, and
/// R2 follows R1 `R2_MOVES` after M resumes. The `WAIT 1` that a client sends behind its
/// grant on M is what tells it that the grant is durable: how many replicas acknowledged,
/// and M's `lock_stalls`.
fn wait_after_a_failover_during_a_stop(threshold_ms: &str) -> (i64, i64) {
    // The pause outlasts R2's move by far, and the WAIT (which a replica answers with its
    // once-a-second ACK: the server sends no GETACK while writes are paused, as they are from
    // R1's departure on) ends before it, so that neither outcome depends on the timing.
    const R2_MOVES: Duration = Duration::from_millis(1_600);
    let on = [
        "replica-loss-pause-ms",
        "3000",
        "stall-threshold-ms",
        threshold_ms,
    ];
    let m = Server::start(Opts::new().module_args(&on));
    let r1 = Server::start(Opts::new().replicaof(m.port));
    let r2 = Server::start(Opts::new().replicaof(m.port));
    let mut mc = m.conn();
    assert_eq!(replica_acks(&mut mc, 2, 10_000), 2, "replicas not online");
    let (mut r1c, mut r2c) = (r1.conn(), r2.conn());
    let mut client = m.conn();
    let stopped = Stopped::new(&m);
    let pipeline = thread::spawn(move || {
        let mut p = redis::pipe();
        p.cmd("LOCK.ACQUIRE")
            .arg("stall:failover")
            .arg(token())
            .arg(30_000)
            .cmd("WAIT")
            .arg(1)
            .arg(1_400);
        p.query::<Vec<Value>>(&mut client).expect("pipeline")
    });
    // The client's commands reach M before Sentinel, which waits to see M down, promotes R1.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(cmd!(&mut r1c, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    thread::sleep(STOP - Duration::from_millis(200));
    let resumed = stopped.resume();
    // R2 is still M's replica when M resumes: Sentinel moves it only after it saw R1 promoted.
    thread::sleep(R2_MOVES.saturating_sub(resumed.elapsed()));
    assert_eq!(
        cmd!(&mut r2c, "REPLICAOF", "127.0.0.1", r1.port),
        Ok(Value::Okay)
    );
    let replies = pipeline.join().unwrap();
    assert!(matches!(replies[0], Value::Int(_)), "grant: {replies:?}");
    match replies[1] {
        Value::Int(n) => (n, stat(&mut mc, "lock_stalls")),
        ref other => panic!("WAIT: {other:?}"),
    }
}

#[test]
fn a_grant_of_a_master_deposed_while_it_stood_still_is_confirmed_by_no_replica() {
    let (acks, stalls) = wait_after_a_failover_during_a_stop("500");
    assert_eq!(
        acks, 0,
        "a replica that then followed the new master confirmed the old master's grant"
    );
    assert_eq!(stalls, 1);
    // The hole the setting closes: the replica-loss pause alone starts only once M read R1's
    // departure, after the queued grant ran, and R2, not yet moved, confirms it.
    assert_eq!(wait_after_a_failover_during_a_stop("0"), (1, 0));
}

#[test]
fn a_stop_shorter_than_the_threshold_pauses_nothing() {
    let on = [
        "replica-loss-pause-ms",
        "1500",
        "stall-threshold-ms",
        "1500",
    ];
    let m = Server::start(Opts::new().module_args(&on));
    let (write, _) = queued_through_a_stop(&m, Duration::from_millis(300));
    assert!(write < PROMPT, "the queued LOCK.ACQUIRE waited {write:?}");
    assert_eq!(stat(&mut m.conn(), "lock_stalls"), 0);
}

#[test]
fn off_while_either_setting_is_0() {
    for on in [&["stall-threshold-ms", "500"][..], &[]] {
        let m = Server::start(Opts::new().module_args(on));
        let (write, _) = queued_through_a_stop(&m, STOP);
        assert!(
            write < PROMPT,
            "{on:?}: the queued LOCK.ACQUIRE waited {write:?}"
        );
        assert_eq!(stat(&mut m.conn(), "lock_stalls"), 0, "{on:?}");
    }
}

/// Sends `DEBUG SLEEP 1.2` and `cmd` in one write, so that the server reads both in one turn;
/// their replies as text.
fn behind_a_debug_sleep(server: &Server, cmd: &[&str]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = resp_command(&["DEBUG", "SLEEP", "1.2"]);
    req.extend(resp_command(cmd));
    s.write_all(&req).expect("write");
    // Both replies are simple strings or errors: one line each.
    let mut buf = Vec::new();
    while buf.iter().filter(|&&b| b == b'\n').count() < 2 {
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf).expect("utf-8")
}

#[test]
fn a_lock_write_late_in_a_turn_that_stalled_is_refused_and_pauses_writes() {
    let m = Server::start(Opts::new().module_args(&BOTH_ON));
    let mut mc = m.conn();
    let replies = behind_a_debug_sleep(&m, &["LOCK.ACQUIRE", "stall:late", "t", "10000"]);
    let refused = Instant::now();
    let (ok, err) = replies.split_once("\r\n").unwrap();
    assert_eq!(ok, "+OK");
    assert!(
        err.starts_with("-TRYAGAIN the server stood still for"),
        "LOCK.ACQUIRE behind DEBUG SLEEP: {err:?}"
    );
    assert!(info(&mut mc, "stall:late").is_none());
    assert!(
        !exists(&mut mc, "stall:late"),
        "the refused write changed the key"
    );
    assert_eq!(stat(&mut mc, "lock_stall_refusals"), 1);
    assert_eq!(stat(&mut mc, "lock_stalls"), 1);
    let mut c = m.conn();
    assert!(acquire(&mut c, "stall:after", "t", 10_000).is_some());
    assert_paused(refused.elapsed(), "a later LOCK.ACQUIRE");
}

#[test]
fn the_sweep_of_a_turn_that_stalled_hands_off_only_after_the_pause() {
    let m = Server::start(Opts::new().module_args(&BOTH_ON));
    let mut a = m.conn();
    assert!(acquire(&mut a, "stall:sweep", "ta", 300).is_some());
    let b = send(
        m.conn(),
        redis::cmd("LOCK.ACQUIRE")
            .arg("stall:sweep")
            .arg("tb")
            .arg(10_000)
            .arg("WAIT")
            .arg(8_000)
            .clone(),
    );
    assert!(
        wait_until(Duration::from_secs(5), || waiting_clients(&mut a) == 1),
        "B did not block"
    );
    let sent = Instant::now();
    // A's lease ends during the sleep: the sweep of the turn after the sleep finds it due.
    assert_eq!(
        cmd!(&mut m.conn(), "DEBUG", "SLEEP", "1.2"),
        Ok(Value::Okay)
    );
    let (granted, at) = b.join().unwrap();
    assert!(matches!(granted, Ok(Value::Int(_))), "B: {granted:?}");
    let after = at.duration_since(sent);
    assert!(
        after >= Duration::from_millis(1_200 + PAUSE_MS - EARLY_SLACK_MS) && after < LATE_LIMIT,
        "B was granted {after:?} after DEBUG SLEEP 1.2 was sent, not after the pause"
    );
    assert!(stat(&mut a, "lock_stalls") >= 1);
}

#[test]
fn a_stopped_replica_does_not_pause_and_keeps_replicating() {
    let m = Server::start(Opts::new().module_args(&BOTH_ON));
    let r = Server::start(Opts::new().module_args(&BOTH_ON).replicaof(m.port));
    let mut mc = m.conn();
    sync_replica(&mut mc);
    let stopped = Stopped::new(&r);
    thread::sleep(STOP);
    stopped.resume();
    let mut rc = r.conn();
    assert!(acquire(&mut mc, "stall:replicated", "t", 30_000).is_some());
    let seen = wait_until(Duration::from_secs(10), || {
        exists(&mut rc, "stall:replicated")
    });
    assert!(seen, "the replica did not receive the master's write");
    assert_eq!(stat(&mut rc, "lock_stalls"), 0);
    assert_eq!(stat(&mut mc, "lock_stalls"), 0);
}

#[test]
fn turned_on_later_it_measures_no_gap_from_when_it_was_off() {
    let m = Server::start(Opts::new().module_args(&[
        "replica-loss-pause-ms",
        "1500",
        "stall-threshold-ms",
        "0",
    ]));
    let mut c = m.conn();
    thread::sleep(Duration::from_millis(1_500));
    assert_eq!(cmd!(&mut c, "CONFIG", "SET", SETTING, 500), Ok(Value::Okay));
    let t = Instant::now();
    assert!(acquire(&mut c, "stall:later", "t", 10_000).is_some());
    assert!(
        t.elapsed() < PROMPT,
        "LOCK.ACQUIRE waited {:?}",
        t.elapsed()
    );
    assert_eq!(stat(&mut c, "lock_stalls"), 0);
}

/// `CONFIG GET` of the setting under test.
fn setting(con: &mut Connection) -> String {
    config_get(con, SETTING)
}

#[test]
fn config_set_get_and_bad_values() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(setting(&mut c), "0");
    for good in ["0", "1", "3600000"] {
        assert_eq!(
            cmd!(&mut c, "CONFIG", "SET", SETTING, good),
            Ok(Value::Okay)
        );
        assert_eq!(setting(&mut c), good);
    }
    for bad in ["-1", "3600001", "abc"] {
        assert_err_starts(&cmd!(&mut c, "CONFIG", "SET", SETTING, bad), "ERR");
        assert_eq!(setting(&mut c), "3600000", "{bad:?} changed the setting");
    }
}
