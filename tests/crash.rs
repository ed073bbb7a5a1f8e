//! Guarantees 1, 2 and 4 under crashes: client processes (holders and waiters) killed with
//! SIGKILL, the server killed with SIGKILL under `appendfsync always` and restarted from its
//! AOF, the server killed and restarted from an older RDB snapshot, and several worker
//! processes contending for one lock while some are killed at random.
//!
//! Guarded writes (`LOCK.GUARD`): the same workers with a Redis list as the resource, written
//! only through `LOCK.GUARD`, where no stale write may land; and a holder stopped with SIGSTOP
//! past its lease, whose writes after it resumes are refused while the new holder's land.
//!
//! Client processes are `redis-cli` (`$REDIS_CLI` overrides it) and this test binary itself,
//! re-run as a child on the ignored test `crash_child` with the role in an environment
//! variable.

mod common;

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// How late a lease end or grant may be observed (noisy CI).
const SLACK: Duration = Duration::from_millis(500);

// ----------------------------------------------------------------------- child processes

const ROLE: &str = "REDIS_LOCK_CRASH_ROLE";

/// A child process, SIGKILLed and reaped when dropped. Its stdout lines arrive on `lines`.
struct Proc {
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
    fn child(role: &str, env: &[(&str, String)]) -> Proc {
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
    fn holder(port: u16, key: &str, token: &str, ttl: u64) -> Proc {
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
    fn cli_waiter(port: u16, key: &str, token: &str, ttl: u64) -> Proc {
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
    fn fence(&mut self, within: Duration) -> i64 {
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
    fn line_after(&mut self, tag: &str, within: Duration) -> String {
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
    fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{signal} {}: {st}", self.child.id());
    }

    /// The process state letter of `/proc/<pid>/stat` (`T`: stopped).
    fn state(&self) -> char {
        let stat =
            fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .unwrap_or('?')
    }

    /// SIGKILL, then reap.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself; false if it did not within `within`.
    fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
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

fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child: {name} not set"))
}

fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// The entry point of the child processes (a no-op when run by hand).
#[test]
#[ignore = "entry point of the child processes that the crash tests start and kill"]
fn crash_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let port = env_var("REDIS_LOCK_CRASH_PORT");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().expect("child: connect");
    match role.as_str() {
        "hold" => {
            let f: i64 = redis::cmd("LOCK.ACQUIRE")
                .arg(env_var("REDIS_LOCK_CRASH_KEY"))
                .arg(env_var("REDIS_LOCK_CRASH_TOKEN"))
                .arg(env_var("REDIS_LOCK_CRASH_TTL"))
                .arg("WAIT")
                .arg(0)
                .query(&mut c)
                .expect("child: LOCK.ACQUIRE");
            println!("\nFENCE {f}");
            // Hold on, doing nothing, until killed (bounded, should the parent vanish).
            sleep(Duration::from_secs(60));
        }
        "worker" => worker(&mut c),
        "guarded" => guarded_worker(&mut c),
        "paused" => paused_holder(&mut c),
        other => panic!("unknown child role {other}"),
    }
}

// ------------------------------------------------------- holders and waiters killed mid-hold

#[test]
fn killed_holders_and_waiters_neither_block_nor_shorten_leases() {
    const T: u64 = 1000;
    let ttl = Duration::from_millis(T);
    let s = Server::new();
    let mut c = s.conn();
    let port = s.port;
    let holder_of = |c: &mut redis::Connection| info(c, "k").and_then(|i| i.holder);
    let waiters = |c: &mut redis::Connection| info(c, "k").map_or(0, |i| i.waiters);

    // h1 holds; w1, w2, w3 (a child that will hold on after its grant), w4 queue behind it.
    let t_lo = Instant::now();
    let mut h1 = Proc::holder(port, "k", "h1", T);
    let f1 = h1.fence(Duration::from_secs(10));
    let t_hi = Instant::now();
    let mut w1 = Proc::cli_waiter(port, "k", "w1", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 1));
    let mut w2 = Proc::cli_waiter(port, "k", "w2", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 2));
    let mut w3 = Proc::holder(port, "k", "w3", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 3));
    let mut w4 = Proc::cli_waiter(port, "k", "w4", T);
    assert!(wait_until(Duration::from_secs(5), || waiters(&mut c) == 4));

    // SIGKILL the holder mid-hold and the first waiter while it waits.
    h1.kill9();
    w1.kill9();
    let killed = Instant::now();
    assert!(
        killed + Duration::from_millis(200) < t_lo + ttl,
        "too slow: the kill came {} ms into a {T} ms lease",
        killed.duration_since(t_lo).as_millis()
    );
    // The killed waiter leaves the queue; the killed holder keeps its lease (no early end).
    assert!(
        wait_until(Duration::from_millis(500), || waiters(&mut c) == 3),
        "killed waiter still queued: {:?}",
        info(&mut c, "k")
    );
    let i = info(&mut c, "k").unwrap();
    assert_eq!(i.holder.as_deref(), Some(&b"h1"[..]), "{i:?}");
    assert_eq!(i.fence, f1);

    // h1's lease ends on time and w2 (not the killed w1) is served.
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"h1")));
    let g2 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w2"[..]));
    assert!(
        g2 >= t_lo + ttl,
        "h1's lease ended {} ms early",
        (t_lo + ttl - g2).as_millis()
    );
    assert!(
        g2 <= t_hi + ttl + SLACK,
        "h1's lease ended {} ms late",
        (g2 - t_hi - ttl).as_millis()
    );
    let f2 = w2.fence(Duration::from_secs(5));
    assert!(f2 > f1);
    assert!(w2.wait_exit(Duration::from_secs(5)).is_some());
    // w1's redis-cli was killed, so w1 must never hold the lock: checked by the order below.

    // w2's client is gone (redis-cli exited); its lease still runs out on time, then w3.
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"w2")));
    let g3 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w3"[..]));
    assert!(g3 >= t_lo + 2 * ttl, "w2's lease ended early");
    assert!(
        g3 <= g2 + ttl + SLACK,
        "w2's lease ended {} ms late",
        (g3 - g2 - ttl).as_millis()
    );
    let f3 = w3.fence(Duration::from_secs(5));
    assert!(f3 > f2);
    // w3 holds on after its grant: SIGKILL it mid-hold. w4 is served when its lease ends.
    sleep(Duration::from_millis(100));
    w3.kill9();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w3"[..]));
    assert!(wait_until(ttl + Duration::from_secs(3), || holder_of(
        &mut c
    )
    .is_some_and(|h| h != b"w3")));
    let g4 = Instant::now();
    assert_eq!(holder_of(&mut c).as_deref(), Some(&b"w4"[..]));
    assert!(g4 >= t_lo + 3 * ttl, "w3's lease ended early");
    assert!(
        g4 <= g3 + ttl + SLACK,
        "w3's lease ended {} ms late",
        (g4 - g3 - ttl).as_millis()
    );
    let f4 = w4.fence(Duration::from_secs(5));
    assert!(f4 > f3);
    // Nobody is left waiting: w4's lease runs out and the key is gone.
    assert_eq!(waiters(&mut c), 0);
    assert!(wait_until(ttl + Duration::from_secs(3), || !exists(
        &mut c, "k"
    )));
    let gone = Instant::now();
    assert!(gone >= t_lo + 4 * ttl && gone <= g4 + ttl + SLACK);
    let grants = info_field(&mut c, "lock", "lock_grants");
    eprintln!(
        "killed 3 client processes (2 holders mid-hold, 1 waiter); grants observed {} / {} / {} \
         ms apart (ttl {T}); INFO lock_grants {grants:?}",
        (g2 - t_lo).as_millis(),
        (g3 - g2).as_millis(),
        (g4 - g3).as_millis()
    );
}

// ---------------------------------------------------- server SIGKILL under appendfsync always

#[derive(Clone, Debug, Default)]
struct KeyModel {
    holder: Option<String>,
    /// The last acknowledged fence of the key (0: none yet).
    fence: i64,
    /// Every fence acknowledged for the key.
    issued: Vec<i64>,
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(String),
    Renew,
    Fence,
    Extend,
    Release,
}

/// What one writer thread saw before the server died.
struct WriterLog {
    keys: HashMap<String, KeyModel>,
    /// The command sent but never answered.
    in_flight: Option<(String, Op)>,
    acked: usize,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Runs random lock operations on its own keys until the connection dies.
fn aof_writer(port: u16, thread: usize, acked: Arc<AtomicUsize>) -> WriterLog {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rng = StdRng::seed_from_u64(thread as u64 * 7919 + 1);
    let mut log = WriterLog {
        keys: HashMap::new(),
        in_flight: None,
        acked: 0,
    };
    let mut gen = 0;
    loop {
        let key = format!("aof:{thread}:{}", rng.gen_range(0..8));
        let m = log.keys.entry(key.clone()).or_default().clone();
        let op = match &m.holder {
            None => {
                gen += 1;
                Op::Acquire(format!("t{thread}-{gen}"))
            }
            Some(_) => match rng.gen_range(0..20) {
                0..=9 => Op::Fence,
                10..=12 => Op::Extend,
                13..=14 => Op::Renew,
                _ => Op::Release,
            },
        };
        let holder = m.holder.clone().unwrap_or_default();
        let cmd = match &op {
            Op::Acquire(t) => redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg(t)
                .arg(600_000)
                .to_owned(),
            Op::Renew => redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg(&holder)
                .arg(600_000)
                .to_owned(),
            Op::Fence => redis::cmd("LOCK.FENCE").arg(&key).arg(&holder).to_owned(),
            Op::Extend => redis::cmd("LOCK.EXTEND")
                .arg(&key)
                .arg(&holder)
                .arg(600_000)
                .to_owned(),
            Op::Release => redis::cmd("LOCK.RELEASE").arg(&key).arg(&holder).to_owned(),
        };
        log.in_flight = Some((key.clone(), op.clone()));
        let v = match cmd.query::<Value>(&mut c) {
            Ok(v) => v,
            Err(e) if e.code().is_none() => return log, // the server is gone
            Err(e) => panic!("{op:?} on {key}: {e}"),
        };
        log.in_flight = None;
        let m = log.keys.get_mut(&key).unwrap();
        match op {
            Op::Acquire(t) => {
                let f = int(&v);
                assert!(f > m.fence, "fence {f} after {}", m.fence);
                m.holder = Some(t);
                m.fence = f;
                m.issued.push(f);
            }
            Op::Renew => assert_eq!(int(&v), m.fence, "renewal"),
            Op::Fence => {
                let f = int(&v);
                assert!(f > m.fence, "fence {f} after {}", m.fence);
                m.fence = f;
                m.issued.push(f);
            }
            Op::Extend => assert_eq!(int(&v), 1),
            Op::Release => {
                assert_eq!(int(&v), 1);
                m.holder = None;
            }
        }
        log.acked += 1;
        acked.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn server_sigkill_with_appendfsync_always_keeps_every_acknowledged_fence() {
    const THREADS: usize = 4;
    const KILL_AFTER: usize = 400;
    let mut s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (port, acked) = (s.port, acked.clone());
            thread::spawn(move || aof_writer(port, t, acked))
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), || acked.load(Ordering::SeqCst)
            >= KILL_AFTER),
        "writers too slow: {} acknowledged",
        acked.load(Ordering::SeqCst)
    );
    // Mid-stream: the writers are still sending.
    s.kill9();
    let logs: Vec<WriterLog> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    s.start_again();
    let mut c = s.conn();

    let total: usize = logs.iter().map(|l| l.acked).sum();
    let in_flight = logs.iter().filter(|l| l.in_flight.is_some()).count();
    let max_acked = logs
        .iter()
        .flat_map(|l| l.keys.values())
        .flat_map(|m| m.issued.iter().copied())
        .max()
        .unwrap();
    let mut checked = 0;
    let mut new_fences = Vec::new();
    for log in &logs {
        for (key, m) in &log.keys {
            let got = info(&mut c, key);
            let flying = match &log.in_flight {
                Some((k, op)) if k == key => Some(op),
                _ => None,
            };
            match (flying, &m.holder, &got) {
                // Exactly as acknowledged.
                (_, Some(h), Some(i)) if i.holder.as_deref() == Some(h.as_bytes()) => {
                    if matches!(flying, Some(Op::Fence)) {
                        assert!(i.fence >= m.fence, "{key}: fence {} < {}", i.fence, m.fence);
                    } else {
                        assert_eq!(i.fence, m.fence, "{key}: acknowledged fence lost");
                    }
                    assert!(i.ttl > 500_000, "{key}: lease {i:?}");
                }
                (_, None, None) => {}
                // The unanswered command may have been applied.
                (Some(Op::Release), Some(_), None) => {}
                (Some(Op::Acquire(t)), None, Some(i))
                    if i.holder.as_deref() == Some(t.as_bytes()) =>
                {
                    assert!(i.fence > m.fence, "{key}: {i:?} after {}", m.fence);
                }
                _ => panic!(
                    "{key}: after the crash {got:?}, but acknowledged {m:?} (in flight: {flying:?})"
                ),
            }
            checked += 1;
            // Fences continue above every acknowledged fence.
            let next = match got.as_ref().and_then(|i| i.holder.clone()) {
                Some(h) => fence(&mut c, key, std::str::from_utf8(&h).unwrap()).unwrap(),
                None => acquire(&mut c, key, "after-crash", 60_000).unwrap(),
            };
            assert!(
                next > max_acked,
                "{key}: fence {next} after the crash, but {max_acked} was acknowledged"
            );
            new_fences.push(next);
        }
    }
    for i in 0..20 {
        let f = acquire(&mut c, &format!("fresh:{i}"), "x", 60_000).unwrap();
        assert!(f > max_acked, "fresh key: fence {f} <= {max_acked}");
        new_fences.push(f);
    }
    for w in new_fences.windows(2) {
        assert!(w[1] > w[0]);
    }
    eprintln!(
        "appendfsync always: {total} operations acknowledged by {THREADS} clients, SIGKILL with \
         {in_flight} in flight; {checked} keys checked, {} fences issued after the restart, all \
         above {max_acked}",
        new_fences.len()
    );
}

// ------------------------------------------------------------ restart from an older RDB

#[test]
fn sigkill_and_restart_from_an_older_rdb_never_reissues_a_fence() {
    let mut s = Server::new();
    let mut c = s.conn();
    let mut issued: Vec<i64> = Vec::new();
    let mut snapshot = Vec::new();
    for i in 0..40 {
        let key = format!("snap:{i}");
        let tok = format!("t{i}");
        issued.push(acquire(&mut c, &key, &tok, 600_000).unwrap());
        for _ in 0..i % 3 {
            issued.push(fence(&mut c, &key, &tok).unwrap());
        }
    }
    // A key that is gone at the snapshot: its fences must not come back either.
    issued.push(acquire(&mut c, "gone", "g", 600_000).unwrap());
    assert_eq!(release(&mut c, "gone", "g"), 1);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    for i in 0..40 {
        snapshot.push(info(&mut c, &format!("snap:{i}")).unwrap());
    }
    let at_save = *issued.iter().max().unwrap();

    // After the snapshot: more fences, releases, new holders, new keys.
    for i in 0..40 {
        let key = format!("snap:{i}");
        let tok = format!("t{i}");
        for _ in 0..3 {
            issued.push(fence(&mut c, &key, &tok).unwrap());
        }
        if i % 4 == 0 {
            assert_eq!(release(&mut c, &key, &tok), 1);
            issued.push(acquire(&mut c, &key, &format!("u{i}"), 600_000).unwrap());
            issued.push(fence(&mut c, &key, &format!("u{i}")).unwrap());
        }
    }
    for i in 0..30 {
        let key = format!("late:{i}");
        issued.push(acquire(&mut c, &key, "l", 600_000).unwrap());
        issued.push(fence(&mut c, &key, "l").unwrap());
        if i % 2 == 0 {
            assert_eq!(release(&mut c, &key, "l"), 1);
        }
    }
    issued.push(acquire(&mut c, "gone", "g2", 600_000).unwrap());
    let max = *issued.iter().max().unwrap();
    assert!(max > at_save);
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();

    // The server is back at the snapshot...
    for (i, before) in snapshot.iter().enumerate() {
        let now = info(&mut c, &format!("snap:{i}")).expect("lock from the snapshot lost");
        assert_eq!(now.holder, before.holder, "snap:{i}");
        assert_eq!(
            now.fence, before.fence,
            "snap:{i}: not the snapshot's fence"
        );
    }
    for i in 0..30 {
        assert!(!exists(&mut c, &format!("late:{i}")));
    }
    // ...but every fence it issues now is above every fence issued before the crash.
    let mut after = Vec::new();
    for i in 0..40 {
        after.push(fence(&mut c, &format!("snap:{i}"), &format!("t{i}")).unwrap());
    }
    for i in 0..30 {
        after.push(acquire(&mut c, &format!("late:{i}"), "m", 60_000).unwrap());
    }
    after.push(acquire(&mut c, "gone", "g3", 60_000).unwrap());
    for i in 0..30 {
        after.push(acquire(&mut c, &format!("fresh:{i}"), "f", 60_000).unwrap());
    }
    for f in &after {
        assert!(
            *f > max,
            "fence {f} after the restart from an older RDB: {max} was issued before the crash"
        );
    }
    for w in after.windows(2) {
        assert!(w[1] > w[0]);
    }
    eprintln!(
        "older RDB: {} fences issued ({} after the SAVE) on 71 keys, then SIGKILL; {} fences \
         after the restart on 101 keys, all above the pre-crash maximum",
        issued.len(),
        issued.iter().filter(|f| **f > at_save).count(),
        after.len()
    );
}

// ------------------------------------------- many processes, one lock, random SIGKILLs

const WORK_TTL: u64 = 500;
const WORK_MAX_MS: u64 = 20;

/// Presents fence `f` to the shared "resource": a file holding the highest fence it has
/// accepted, which refuses (returns false) a fence below it. Under an exclusive `flock`,
/// which dies with its process.
fn resource_write(dir: &Path, f: i64) -> bool {
    let mut res = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("resource"))
        .unwrap();
    res.lock().unwrap();
    let mut text = String::new();
    res.read_to_string(&mut text).unwrap();
    let max: i64 = text.trim().parse().unwrap_or(0);
    if f < max {
        return false;
    }
    res.seek(SeekFrom::Start(0)).unwrap();
    res.set_len(0).unwrap();
    res.write_all(f.to_string().as_bytes()).unwrap();
    true
}

/// The worker loop of a child process: acquire → write to the resource → work (shorter than
/// the lease) → write again → release, until the deadline. Each event is appended to a shared
/// log as one line (one `write`, `O_APPEND`), with wall-clock microseconds:
///
/// - `A fence worker before after`: the grant, between `before` (the acquire was sent) and
///   `after` (its reply was read);
/// - `S`/`X fence worker t`: the first write accepted / refused as stale;
/// - `C`/`R fence worker t`: the second write, after the work, accepted / refused;
/// - `r fence worker t`: `LOCK.RELEASE` is about to be sent, at `t` (a worker killed before it
///   could note the reply may still have released: its successor can be granted at once);
/// - `Y`/`N fence worker t`: `LOCK.RELEASE`, sent at `t`, replied 1 / 0 (lease gone).
fn worker(c: &mut redis::Connection) {
    let id = env_var("REDIS_LOCK_CRASH_WORKER");
    let dir = env_var("REDIS_LOCK_CRASH_DIR");
    let until: i64 = env_var("REDIS_LOCK_CRASH_UNTIL").parse().unwrap();
    let dir = Path::new(&dir);
    let mut log = OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    let mut note = |kind: &str, f: i64, t: String| {
        log.write_all(format!("{kind} {f} {id} {t}\n").as_bytes())
            .unwrap()
    };
    let mut rng = StdRng::seed_from_u64(wall_us() as u64 ^ std::process::id() as u64);
    let mut n = 0;
    while wall_us() < until {
        n += 1;
        let tok = format!("{}-{n}", env_var("REDIS_LOCK_CRASH_WORKER"));
        let before = wall_us();
        let v: Value = redis::cmd("LOCK.ACQUIRE")
            .arg("resource")
            .arg(&tok)
            .arg(WORK_TTL)
            .arg("WAIT")
            .arg(1000)
            .query(c)
            .unwrap();
        let f = match v {
            Value::Int(f) => f,
            Value::Nil => continue,
            other => panic!("worker: {other:?}"),
        };
        note("A", f, format!("{before} {}", wall_us()));
        let ok = resource_write(dir, f);
        note(if ok { "S" } else { "X" }, f, wall_us().to_string());
        sleep(Duration::from_millis(rng.gen_range(1..=WORK_MAX_MS)));
        let ok = resource_write(dir, f);
        note(if ok { "C" } else { "R" }, f, wall_us().to_string());
        let sent = wall_us();
        note("r", f, sent.to_string());
        let r: i64 = redis::cmd("LOCK.RELEASE")
            .arg("resource")
            .arg(&tok)
            .query(c)
            .unwrap();
        note(if r == 1 { "Y" } else { "N" }, f, sent.to_string());
    }
}

/// Keeps `workers` child processes in `role` (each told `dir` and `until`, wall-clock
/// microseconds) running on `s` until shortly before `until`, SIGKILLing one every 100-300 ms
/// (half the time the current holder of `key`, whose token is `<worker id>-<n>`, else any,
/// most likely a waiter) and starting a fresh one in its place; then waits for the survivors
/// to finish, each with success. Returns the number of kills and of processes started.
#[allow(clippy::too_many_arguments)]
fn run_workers_killing_at_random(
    s: &Server,
    c: &mut redis::Connection,
    role: &str,
    key: &str,
    dir: &Path,
    until: i64,
    workers: usize,
    rng: &mut StdRng,
) -> (usize, usize) {
    let spawn = |id: usize| {
        Proc::child(
            role,
            &[
                ("REDIS_LOCK_CRASH_PORT", s.port.to_string()),
                ("REDIS_LOCK_CRASH_WORKER", id.to_string()),
                ("REDIS_LOCK_CRASH_DIR", dir.display().to_string()),
                ("REDIS_LOCK_CRASH_UNTIL", until.to_string()),
            ],
        )
    };
    let mut live: Vec<(usize, Proc)> = (0..workers).map(|id| (id, spawn(id))).collect();
    let mut next_id = workers;
    let mut kills = 0;
    while wall_us() < until - 400_000 {
        sleep(Duration::from_millis(rng.gen_range(100..300)));
        // Half the time the current holder, else anyone (most likely a waiter).
        let holder = info(c, key)
            .and_then(|i| i.holder)
            .and_then(|h| String::from_utf8(h).ok())
            .and_then(|h| h.split('-').next().and_then(|w| w.parse::<usize>().ok()));
        let victim = match holder.and_then(|h| live.iter().position(|(id, _)| *id == h)) {
            Some(at) if rng.gen_bool(0.5) => at,
            _ => rng.gen_range(0..live.len()),
        };
        let (_, mut p) = live.remove(victim);
        p.kill9();
        kills += 1;
        live.push((next_id, spawn(next_id)));
        next_id += 1;
    }
    for (id, p) in &mut live {
        let st = p
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{role} {id} did not finish"));
        assert!(st.success(), "{role} {id} failed: {st}");
    }
    (kills, next_id)
}

/// One grant, as the log tells it.
#[derive(Debug, Default, Clone)]
struct Section {
    fence: i64,
    worker: usize,
    /// The acquire was sent / its reply read.
    before: i64,
    after: i64,
    /// Writes accepted and refused by the resource.
    accepted: u32,
    refused: u32,
    /// `Some(t, replied 1)`: the release sent at `t`.
    release: Option<(i64, bool)>,
    /// The release was about to be sent at this time (whether or not its reply was noted).
    release_sent: Option<i64>,
}

#[test]
fn workers_killed_at_random_never_overlap_and_the_resource_sees_increasing_fences() {
    const WORKERS: usize = 4;
    const RUN: Duration = Duration::from_secs(4);
    let s = Server::new();
    let mut c = s.conn();
    let dir = s.dir.join("shared");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("resource"), "0").unwrap();
    fs::write(dir.join("log"), "").unwrap();
    let until = wall_us() + RUN.as_micros() as i64;
    let seed = wall_us() as u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let (kills, next_id) = run_workers_killing_at_random(
        &s, &mut c, "worker", "resource", &dir, until, WORKERS, &mut rng,
    );

    // What the workers and the resource saw.
    let text = fs::read_to_string(dir.join("log")).unwrap();
    let mut sections: HashMap<i64, Section> = HashMap::new();
    for line in text.lines() {
        let p: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> i64 { p[i].parse().unwrap_or_else(|_| panic!("{line:?}")) };
        let f = num(1);
        let s = sections.entry(f).or_default();
        match p[0] {
            "A" => {
                assert_eq!(s.fence, 0, "fence {f} granted twice: {line:?}");
                *s = Section {
                    fence: f,
                    worker: num(2) as usize,
                    before: num(3),
                    after: num(4),
                    ..Section::default()
                };
            }
            "S" | "C" => s.accepted += 1,
            "X" | "R" => s.refused += 1,
            "r" => s.release_sent = Some(num(3)),
            "Y" | "N" => s.release = Some((num(3), p[0] == "Y")),
            _ => panic!("bad log line {line:?}"),
        }
        assert_eq!(s.fence, f, "event before the grant: {line:?}");
    }
    let mut order: Vec<Section> = sections.into_values().collect();
    order.sort_by_key(|s| s.fence);

    // In fence order, each grant must come after every earlier holder's lease was surely
    // over: a holder that released with reply 1 held a valid lease until it sent the release;
    // one killed after sending its release (noted `r`, reply not noted) until the earlier of
    // that and `before + ttl`, as the release may have been applied; any other (killed, or
    // paused past its lease) until at least `before + ttl`. A grant read before that instant
    // means two valid leases at once, or fences out of grant order.
    let ttl_us = WORK_TTL as i64 * 1000;
    let (mut violations, mut held_until, mut prev) = (0, i64::MIN, None::<&Section>);
    for s in &order {
        if s.after < held_until {
            violations += 1;
        }
        if s.after < held_until && violations <= 5 {
            eprintln!(
                "VIOLATION: fence {} granted to worker {} {} us before the lease of {prev:?} \
                 was surely over",
                s.fence,
                s.worker,
                held_until - s.after
            );
        }
        let valid_until = match (s.release, s.release_sent) {
            (Some((sent, true)), _) => sent,
            (None, Some(sent)) => sent.min(s.before + ttl_us),
            _ => s.before + ttl_us,
        };
        held_until = held_until.max(valid_until);
        prev = Some(s);
    }
    // A holder whose lease was valid to the end must never be refused by the resource:
    // its fence is the highest issued so far.
    let refused_valid = order
        .iter()
        .filter(|s| s.refused > 0 && matches!(s.release, Some((_, true))))
        .count();
    let completed = order.iter().filter(|s| s.release.is_some()).count();
    let killed_holding = order.iter().filter(|s| s.release.is_none()).count();
    let paused_past_lease = order
        .iter()
        .filter(|s| matches!(s.release, Some((_, false))))
        .count();
    let refused: u32 = order.iter().map(|s| s.refused).sum();
    let writes: u32 = order.iter().map(|s| s.accepted).sum();
    eprintln!(
        "mutual exclusion (seed {seed}): {} grants to {next_id} worker processes, {completed} \
         sections completed, {writes} resource writes accepted; {kills} SIGKILLs ({killed_holding} \
         holders killed after their grant); {paused_past_lease} holders paused past their lease \
         ({refused} stale writes refused by the resource); violations: {violations} overlapping \
         leases, {refused_valid} valid holders refused",
        order.len()
    );
    assert!(completed >= 30, "too little progress: {completed} sections");
    assert!(kills >= 5, "only {kills} kills");
    assert_eq!(
        violations, 0,
        "two valid leases at once, or fences out of order"
    );
    assert_eq!(
        refused_valid, 0,
        "the resource refused the fence of a holder whose lease was valid"
    );
}

// ------------------------------- the same, with the resource a Redis key behind LOCK.GUARD

const GUARD_LOCK: &str = "guarded";
const GUARD_DATA: &str = "guarded:data";

/// One `LOCK.GUARD GUARD_LOCK fence RPUSH GUARD_DATA fence:worker:seq` of a guarded worker,
/// noted before it is sent (`W fence worker seq kind grant since`: the grant's fence, and the
/// monotonic microseconds from reading the grant to sending this write) and after its reply
/// (`w fence worker seq reply`: `OK` or the full `FENCED ...` error).
struct Guarded<'a> {
    c: &'a mut redis::Connection,
    log: fs::File,
    id: String,
    seq: u64,
}

impl Guarded<'_> {
    fn note(&mut self, line: String) {
        self.log.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// `kind`: `in` (while the worker believes it holds the lock), `old` (a fence of this
    /// hold that `LOCK.FENCE` superseded), `over` (sent past the lease), `late` (after the
    /// release). Returns whether it landed.
    fn write(&mut self, fence: i64, kind: &str, grant: i64, granted: Instant) -> bool {
        self.seq += 1;
        let (id, seq) = (self.id.clone(), self.seq);
        let since = granted.elapsed().as_micros();
        self.note(format!("W {fence} {id} {seq} {kind} {grant} {since}"));
        let entry = format!("{fence}:{id}:{seq}");
        let r = cmd!(
            self.c,
            "LOCK.GUARD",
            GUARD_LOCK,
            fence,
            "RPUSH",
            GUARD_DATA,
            &entry
        );
        let (landed, reply) = match r {
            Ok(Value::Int(_)) => (true, "OK".to_string()),
            Err(e) if e.starts_with("FENCED ") => (false, e),
            other => panic!("guarded worker: LOCK.GUARD {fence} RPUSH {entry}: {other:?}"),
        };
        self.note(format!("w {fence} {id} {seq} {reply}"));
        landed
    }
}

/// The worker loop of a child process whose resource is the Redis list `GUARD_DATA`,
/// written only through `LOCK.GUARD`: acquire → guarded write → sometimes `LOCK.FENCE`, a
/// write with the new fence and one with the superseded one → work (or, now and then,
/// overrun the lease, with probability `$REDIS_LOCK_CRASH_OVERRUN`, 0.15 if it is unset, and
/// on the first grant if it is set) → guarded write → release → sometimes one more write
/// after it. Besides the writes (see [`Guarded`]) the log has `A fence worker` (granted),
/// `F new worker old` (`LOCK.FENCE`), `r fence worker` (release about to be sent) and
/// `Y`/`N fence worker` (its reply, 1 / 0).
fn guarded_worker(c: &mut redis::Connection) {
    let id = env_var("REDIS_LOCK_CRASH_WORKER");
    let dir = env_var("REDIS_LOCK_CRASH_DIR");
    let until: i64 = env_var("REDIS_LOCK_CRASH_UNTIL").parse().unwrap();
    let log = OpenOptions::new()
        .append(true)
        .open(Path::new(&dir).join("log"))
        .unwrap();
    let mut g = Guarded {
        c,
        log,
        id: id.clone(),
        seq: 0,
    };
    let mut rng = StdRng::seed_from_u64(wall_us() as u64 ^ std::process::id() as u64);
    let ttl = Duration::from_millis(WORK_TTL);
    let given = std::env::var("REDIS_LOCK_CRASH_OVERRUN").ok();
    let overrun: f64 = given.as_ref().map_or(0.15, |p| p.parse().unwrap());
    let overrun_first = given.is_some();
    let (mut n, mut grants) = (0, 0);
    while wall_us() < until {
        n += 1;
        let tok = format!("{id}-{n}");
        let v = cmd!(
            g.c,
            "LOCK.ACQUIRE",
            GUARD_LOCK,
            &tok,
            WORK_TTL,
            "WAIT",
            1000
        );
        let granted = Instant::now();
        let f = match v {
            Ok(Value::Int(f)) => f,
            Ok(Value::Nil) => continue,
            other => panic!("guarded worker: LOCK.ACQUIRE: {other:?}"),
        };
        g.note(format!("A {f} {id}"));
        let mut cur = f;
        g.write(cur, "in", f, granted);
        if rng.gen_bool(0.25) {
            match cmd!(g.c, "LOCK.FENCE", GUARD_LOCK, &tok) {
                Ok(Value::Int(f2)) => {
                    g.note(format!("F {f2} {id} {cur}"));
                    let old = cur;
                    cur = f2;
                    g.write(cur, "in", f, granted);
                    g.write(old, "old", f, granted);
                }
                Ok(Value::Nil) => {} // the lease ended meanwhile (a slow machine)
                other => panic!("guarded worker: LOCK.FENCE: {other:?}"),
            }
        }
        grants += 1;
        if (overrun_first && grants == 1) || rng.gen_bool(overrun) {
            // Overrun the lease, as a holder paused by GC or swap would, then write.
            let past = granted + ttl + Duration::from_millis(100);
            sleep(past.saturating_duration_since(Instant::now()));
            g.write(cur, "over", f, granted);
        } else {
            sleep(Duration::from_millis(rng.gen_range(1..=WORK_MAX_MS)));
            g.write(cur, "in", f, granted);
        }
        g.note(format!("r {f} {id}"));
        let r = cmd!(g.c, "LOCK.RELEASE", GUARD_LOCK, &tok);
        let released = match r {
            Ok(Value::Int(r)) => r == 1,
            other => panic!("guarded worker: LOCK.RELEASE: {other:?}"),
        };
        g.note(format!("{} {f} {id}", if released { "Y" } else { "N" }));
        if rng.gen_bool(0.3) {
            g.write(cur, "late", f, granted);
        }
    }
}

/// One guarded write, as the log tells it.
#[derive(Debug, Clone)]
struct GuardedWrite {
    fence: i64,
    kind: String,
    /// The fence of the grant it was made under.
    grant: i64,
    /// Microseconds from reading the grant to sending it.
    since: i64,
    /// The reply, if the worker lived to note it.
    reply: Option<String>,
}

#[test]
fn workers_killed_at_random_land_no_stale_guarded_write() {
    const WORKERS: usize = 4;
    const RUN: Duration = Duration::from_secs(6);
    /// The id of the worker that is never killed (the others count from 0).
    const SPARED: usize = 1_000_000;
    // A write sent this long after its grant was read is past the lease: the lease was
    // granted before the reply was read and lasts WORK_TTL (the margin is rounding only).
    let past_lease_us = WORK_TTL as i64 * 1000 + 2_000;
    let s = Server::new();
    let mut c = s.conn();
    let dir = s.dir.join("shared");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("log"), "").unwrap();
    let until = wall_us() + RUN.as_micros() as i64;
    let seed = wall_us() as u64;
    let mut rng = StdRng::seed_from_u64(seed);
    // The holders the kill loop picks are often ones overrunning their lease (they hold the
    // lock longest), so one more worker, which it never kills, overruns on its first grant
    // and then a third of the time.
    let mut spared = Proc::child(
        "guarded",
        &[
            ("REDIS_LOCK_CRASH_PORT", s.port.to_string()),
            ("REDIS_LOCK_CRASH_WORKER", SPARED.to_string()),
            ("REDIS_LOCK_CRASH_DIR", dir.display().to_string()),
            ("REDIS_LOCK_CRASH_UNTIL", until.to_string()),
            ("REDIS_LOCK_CRASH_OVERRUN", "0.3".to_string()),
        ],
    );
    let (kills, started) = run_workers_killing_at_random(
        &s, &mut c, "guarded", GUARD_LOCK, &dir, until, WORKERS, &mut rng,
    );
    let st = spared
        .wait_exit(Duration::from_secs(10))
        .expect("the spared worker did not finish");
    assert!(st.success(), "the spared worker failed: {st}");

    // What the workers sent and were told.
    let text = fs::read_to_string(dir.join("log")).unwrap();
    let mut writes: HashMap<(String, u64), GuardedWrite> = HashMap::new();
    let mut granted = std::collections::HashSet::new();
    let (mut fenced_again, mut released, mut lapsed) = (0, 0, 0);
    for line in text.lines() {
        let p: Vec<&str> = line.splitn(5, ' ').collect();
        let num = |i: usize| -> i64 { p[i].parse().unwrap_or_else(|_| panic!("{line:?}")) };
        match p[0] {
            "A" => assert!(granted.insert(num(1)), "fence granted twice: {line:?}"),
            "F" => fenced_again += 1,
            "r" => {}
            "Y" => released += 1,
            "N" => lapsed += 1,
            "W" => {
                let q: Vec<&str> = line.split(' ').collect();
                let n = |i: usize| -> i64 { q[i].parse().unwrap_or_else(|_| panic!("{line:?}")) };
                let old = writes.insert(
                    (q[2].to_string(), n(3) as u64),
                    GuardedWrite {
                        fence: n(1),
                        kind: q[4].to_string(),
                        grant: n(5),
                        since: n(6),
                        reply: None,
                    },
                );
                assert!(old.is_none(), "write noted twice: {line:?}");
            }
            "w" => {
                let w = writes
                    .get_mut(&(p[2].to_string(), num(3) as u64))
                    .unwrap_or_else(|| panic!("reply to a write never sent: {line:?}"));
                assert_eq!(w.fence, num(1), "{line:?}");
                w.reply = Some(p[4].to_string());
            }
            _ => panic!("bad log line {line:?}"),
        }
    }

    for w in writes.values() {
        assert!(
            granted.contains(&w.grant) && w.fence >= w.grant,
            "a write under a grant never noted: {w:?}"
        );
    }
    let grants = granted.len();

    // What landed, in the order the server applied it.
    let landed: Vec<String> = redis::cmd("LRANGE")
        .arg(GUARD_DATA)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut seen: HashMap<(String, u64), usize> = HashMap::new();
    let (mut below_landed, mut after_hold, mut superseded, mut max) = (0, 0, 0, 0i64);
    let mut stale_examples = Vec::new();
    for (at, e) in landed.iter().enumerate() {
        let p: Vec<&str> = e.split(':').collect();
        assert_eq!(p.len(), 3, "entry {e:?}");
        let key = (p[1].to_string(), p[2].parse::<u64>().unwrap());
        let f: i64 = p[0].parse().unwrap();
        let w = writes
            .get(&key)
            .unwrap_or_else(|| panic!("entry {e:?} at {at} was never sent"));
        assert_eq!(w.fence, f, "entry {e:?}: {w:?}");
        assert!(seen.insert(key, at).is_none(), "entry {e:?} landed twice");
        let mut stale = false;
        if f < max {
            below_landed += 1;
            stale = true;
        }
        if w.kind == "late" || w.kind == "over" || w.since > past_lease_us {
            after_hold += 1;
            stale = true;
        }
        if w.kind == "old" {
            superseded += 1;
            stale = true;
        }
        if stale && stale_examples.len() < 5 {
            stale_examples.push(format!(
                "{e:?} at {at} (highest fence landed before: {max}): {w:?}"
            ));
        }
        max = max.max(f);
    }
    let stale = below_landed + after_hold + superseded;

    // Every reply agrees with the list: OK landed, FENCED did not.
    let mut disagree = Vec::new();
    let mut by_kind: HashMap<(&str, &str), usize> = HashMap::new();
    let mut reasons: HashMap<&str, usize> = HashMap::new();
    for (key, w) in &writes {
        let Some(reply) = &w.reply else { continue };
        let ok = reply == "OK";
        if ok != seen.contains_key(key) {
            disagree.push(format!("{key:?} {w:?}"));
        }
        *by_kind
            .entry((w.kind.as_str(), if ok { "landed" } else { "refused" }))
            .or_default() += 1;
        if !ok {
            *reasons.entry(reply.as_str()).or_default() += 1;
        }
    }
    let count = |kind: &str, what: &str| by_kind.get(&(kind, what)).copied().unwrap_or(0);
    let refused: usize = reasons.values().sum();
    let unanswered = writes.values().filter(|w| w.reply.is_none()).count();
    let runs = lock_stat(&mut c, "lock_guarded_runs");
    let refusals = lock_stat(&mut c, "lock_guarded_refusals");
    eprintln!(
        "guarded writes (seed {seed}): {grants} grants to {started} worker processes, {kills} \
         SIGKILLs, {released} released / {lapsed} lapsed, {fenced_again} LOCK.FENCE; {} guarded \
         writes sent ({unanswered} unanswered: killed), {} landed, {refused} refused: in-lease \
         {}/{}, superseded fence {}/{}, past the lease {}/{}, after the release {}/{} \
         (landed/refused); reasons {reasons:?}; INFO lock_guarded_runs {runs:?} \
         lock_guarded_refusals {refusals:?}; stale writes landed: {stale} ({below_landed} below a \
         landed fence, {after_hold} after the hold, {superseded} with a superseded fence)",
        writes.len(),
        landed.len(),
        count("in", "landed"),
        count("in", "refused"),
        count("old", "landed"),
        count("old", "refused"),
        count("over", "landed"),
        count("over", "refused"),
        count("late", "landed"),
        count("late", "refused"),
    );
    for e in &stale_examples {
        eprintln!("STALE: {e}");
    }
    assert_eq!(stale, 0, "stale guarded writes landed: {stale_examples:#?}");
    assert!(
        disagree.is_empty(),
        "replies that disagree with the list ({}): {:?}",
        disagree.len(),
        &disagree[..disagree.len().min(5)]
    );
    assert!(kills >= 5, "only {kills} kills");
    assert!(
        landed.len() >= 40,
        "too little progress: {} guarded writes landed",
        landed.len()
    );
    assert!(refused >= 10, "only {refused} guarded writes refused");
    for kind in ["old", "over", "late"] {
        assert!(count(kind, "refused") >= 1, "no {kind} write refused");
    }
    for r in reasons.keys() {
        assert!(
            *r == "FENCED the lock is held under a newer fence"
                || *r == "FENCED the lock is not held",
            "unexpected refusal {r:?}"
        );
    }
    // Every guarded command ran RPUSH on this list or was refused; a write whose worker was
    // killed before noting the reply counts on the server either way.
    assert_eq!(
        runs,
        Some(landed.len() as i64),
        "INFO lock_guarded_runs against the entries in the list"
    );
    let refusals = refusals.expect("INFO lock has lock_guarded_refusals");
    assert!(
        refusals >= refused as i64 && refusals + landed.len() as i64 <= writes.len() as i64,
        "INFO lock_guarded_refusals {refusals}: {refused} refusals noted, {} writes sent, {} \
         landed",
        writes.len(),
        landed.len()
    );
}

// ------------------------------------------------- the paused holder, end to end (SIGSTOP)

/// A reply as one line of text: `OK <value>` or the full error.
fn reply_text(r: Result<Value, String>) -> String {
    match r {
        Ok(v) => format!("OK {v:?}"),
        Err(e) => e,
    }
}

/// Waits (polling, 60 s at most) until `path` exists.
fn wait_for_file(path: &Path) {
    assert!(
        wait_until(Duration::from_secs(60), || path.exists()),
        "child: {} never appeared",
        path.display()
    );
}

/// The holder of the paused-holder test: takes the lock (`old`, ttl from the environment),
/// prints `FENCE f`, writes once through `LOCK.GUARD` with it (prints `WROTE reply`), then
/// works until the file `go1` appears — the parent stops it with SIGSTOP meanwhile — and
/// writes with its fence again, as a holder that does not know it was paused: an `RPUSH`
/// and a `SET` (prints `RESULT1 <ms since the grant> | reply | reply`). When `go2` appears it
/// tries once more (prints `RESULT2 reply`).
fn paused_holder(c: &mut redis::Connection) {
    let key = env_var("REDIS_LOCK_CRASH_KEY");
    let list = env_var("REDIS_LOCK_CRASH_LIST");
    let value = env_var("REDIS_LOCK_CRASH_VALUE");
    let ttl: u64 = env_var("REDIS_LOCK_CRASH_TTL").parse().unwrap();
    let dir = env_var("REDIS_LOCK_CRASH_DIR");
    let dir = Path::new(&dir);
    let f = match cmd!(c, "LOCK.ACQUIRE", &key, "old", ttl) {
        Ok(Value::Int(f)) => f,
        other => panic!("child: LOCK.ACQUIRE: {other:?}"),
    };
    let granted = Instant::now();
    println!("\nFENCE {f}");
    let r = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:1")
    );
    println!("WROTE {}", reply_text(r));
    wait_for_file(&dir.join("go1"));
    let since = granted.elapsed().as_millis();
    let push = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:2")
    );
    let set = cmd!(c, "LOCK.GUARD", &key, f, "SET", &value, "old");
    println!(
        "RESULT1 {since} | {} | {}",
        reply_text(push),
        reply_text(set)
    );
    wait_for_file(&dir.join("go2"));
    let push = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:3")
    );
    println!("RESULT2 {}", reply_text(push));
}

#[test]
fn a_holder_paused_past_its_lease_is_refused_by_lock_guard() {
    const TTL: u64 = 2000;
    let (key, list, value) = ("{order:42}:lock", "{order:42}:log", "{order:42}:state");
    let s = Server::new();
    let mut c = s.conn();
    let dir = s.dir.join("paused");
    fs::create_dir_all(&dir).unwrap();
    let stat = |c: &mut redis::Connection, f: &str| lock_stat(c, f).unwrap_or(-1);
    let (runs0, refusals0) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );

    // The old holder takes the lock and writes under its fence.
    let spawned = Instant::now();
    let mut old = Proc::child(
        "paused",
        &[
            ("REDIS_LOCK_CRASH_PORT", s.port.to_string()),
            ("REDIS_LOCK_CRASH_KEY", key.to_string()),
            ("REDIS_LOCK_CRASH_LIST", list.to_string()),
            ("REDIS_LOCK_CRASH_VALUE", value.to_string()),
            ("REDIS_LOCK_CRASH_TTL", TTL.to_string()),
            ("REDIS_LOCK_CRASH_DIR", dir.display().to_string()),
        ],
    );
    let f1 = old.fence(Duration::from_secs(20));
    assert_eq!(
        old.line_after("WROTE ", Duration::from_secs(10)),
        "OK int(1)",
        "the holder's write under its valid fence"
    );

    // Paused (SIGSTOP) while it holds the lock.
    old.signal("STOP");
    assert!(
        wait_until(Duration::from_secs(5), || old.state() == 'T'),
        "the holder is not stopped: state {:?}",
        old.state()
    );

    // A new holder queues and is served when the paused holder's lease ends; it writes.
    let f2 = match cmd!(&mut c, "LOCK.ACQUIRE", key, "new", 60_000, "WAIT", 20_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("new holder: LOCK.ACQUIRE … WAIT: {other:?}"),
    };
    let granted = Instant::now();
    assert!(f2 > f1, "new holder's fence {f2} after {f1}");
    assert!(
        granted >= spawned + Duration::from_millis(TTL),
        "the new holder was granted {:?} after the old one was started, within its {TTL} ms \
         lease",
        granted - spawned
    );
    for n in 1..=2 {
        assert_eq!(
            cmd!(
                &mut c,
                "LOCK.GUARD",
                key,
                f2,
                "RPUSH",
                list,
                format!("new:{f2}:{n}")
            ),
            Ok(Value::Int(n + 1))
        );
    }
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", key, f2, "SET", value, "new"),
        Ok(Value::Okay)
    );
    assert_eq!(
        old.state(),
        'T',
        "the old holder ran while it should be stopped"
    );

    // The old holder resumes and writes with its old fence: refused, nothing changes.
    fs::write(dir.join("go1"), "").unwrap();
    old.signal("CONT");
    let r1 = old.line_after("RESULT1 ", Duration::from_secs(20));
    let parts: Vec<&str> = r1.split(" | ").collect();
    assert_eq!(parts.len(), 3, "RESULT1 {r1}");
    let paused_ms: u64 = parts[0].parse().unwrap();
    // Its lease ended before the new grant (the server's word for it); its own clock, read
    // from its grant reply, agrees within scheduling noise.
    assert!(
        paused_ms + SLACK.as_millis() as u64 >= TTL,
        "the old holder wrote {paused_ms} ms after its grant: it was not paused past its \
         {TTL} ms lease"
    );
    assert_eq!(
        &parts[1..],
        [
            "FENCED the lock is held under a newer fence",
            "FENCED the lock is held under a newer fence"
        ],
        "the paused holder's RPUSH and SET with fence {f1} (the lock is held under {f2})"
    );
    let expected = vec![
        format!("old:{f1}:1"),
        format!("new:{f2}:1"),
        format!("new:{f2}:2"),
    ];
    let lrange = |c: &mut redis::Connection| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(list)
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap()
    };
    assert_eq!(lrange(&mut c), expected);
    assert_eq!(
        cmd!(&mut c, "GET", value),
        Ok(Value::BulkString(b"new".to_vec()))
    );
    let i = info(&mut c, key).unwrap();
    assert_eq!((i.holder.as_deref(), i.fence), (Some(&b"new"[..]), f2));

    // After the new holder releases, the old fence is still refused: nobody holds the lock.
    assert_eq!(release(&mut c, key, "new"), 1);
    fs::write(dir.join("go2"), "").unwrap();
    assert_eq!(
        old.line_after("RESULT2 ", Duration::from_secs(20)),
        "FENCED the lock is not held"
    );
    let st = old
        .wait_exit(Duration::from_secs(20))
        .expect("the old holder did not exit");
    assert!(st.success(), "the old holder failed: {st}");
    assert_eq!(lrange(&mut c), expected);
    assert_eq!(
        cmd!(&mut c, "GET", value),
        Ok(Value::BulkString(b"new".to_vec()))
    );
    let (runs, refusals) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );
    assert_eq!(
        (runs - runs0, refusals - refusals0),
        (4, 3),
        "INFO lock_guarded_runs / lock_guarded_refusals: {runs0} -> {runs}, {refusals0} -> \
         {refusals}"
    );
    eprintln!(
        "paused holder: fence {f1}, stopped, its {TTL} ms lease ended; the new holder was \
         granted {f2} {:?} after the old one was started and wrote; the old one resumed {paused_ms} \
         ms after its grant and was refused (newer fence, then not held)",
        granted - spawned
    );
}
