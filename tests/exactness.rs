//! How exactly a lease keeps its time where it leaves one command's hands:
//!
//! 1. Moved to another server (`DUMP`/`RESTORE`, `MIGRATE`) whose wall clock differs by
//!    ±30 s or ±1 h (`tests/support/wallshift.c`, a constant offset from start), a lease
//!    travels as the time it had left: it arrives with about that, never more, never less
//!    than it had minus the test's latency, and another token cannot take it there until
//!    then. A `SET … PX` key in the same `MIGRATE` is the control. On the destination's
//!    replica and across its AOF restart, such a lock keeps the deadline it arrived with.
//! 2. Where the same dataset is replicated or reloaded (the replication stream, the AOF, an
//!    RDB restart, a replica's full sync, `DEBUG RELOAD`), the deadline is the master's, never
//!    shorter. Deadlines are bracketed to the microsecond from `LOCK.INFO` samples, so that a
//!    deadline propagated 5 ms short fails. What the module writes there replays without an
//!    error.
//! 3. A writable replica ends the leases its own clients took (also by `RESTORE` or `COPY`),
//!    on time, hands them to its own waiters, and counts them out of `INFO lock`; its
//!    master's locks it leaves to the master's `DEL`.
//! 4. Inside a script or `MULTI`/`EXEC` a lease is judged at the time the unit began, as the
//!    server judges key expiry there; the next command, script or transaction is not.
//! 5. A replica announces the lock events of the changes it applies from its master.
//! 6. Each lease ends within milliseconds of its deadline while the module timer is armed for
//!    a later one (a timer that is not re-armed leaves it to the 100 ms cron).
//!
//! (`CLIENT PAUSE … WRITE` is in `tests/server_rules.rs`.)

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use redis::{Connection, Value};

const HOUR_MS: i64 = 3_600_000;

// ------------------------------------------------------------ a server with another clock

fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var("CARGO_TARGET_DIR") {
        Ok(t) => manifest.join(t),
        Err(_) => manifest.join("target"),
    }
}

/// Compiles `tests/support/wallshift.c` once per test process (as `tests/clock_steps.rs`
/// does, under a private name renamed into place).
fn wallshift_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/wallshift.c");
        let dir = target_dir();
        fs::create_dir_all(&dir).expect("create target dir");
        let out = dir.join("wallshift.so");
        let tmp = dir.join(format!("wallshift.so.exactness.{}", std::process::id()));
        let res = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc (the clock tests need gcc): {e}"));
        assert!(
            res.status.success(),
            "cc failed to build {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&res.stderr)
        );
        fs::rename(&tmp, &out).expect("rename wallshift.so");
        out.canonicalize().unwrap()
    })
}

/// The offset file of a shifted server; removed on drop (the server keeps the last value).
struct OffsetFile(PathBuf);

impl Drop for OffsetFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn real_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The server's wall clock (`TIME`) minus ours, in ms.
fn server_offset_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).expect("TIME");
    s * 1000 + us / 1000 - real_ms()
}

/// The module's wall clock minus ours, in ms, read from the fence of a fresh key on a server
/// that has seen no fence from elsewhere (a fence is `unix_ms << 11` plus a counter).
fn module_offset_ms(c: &mut Connection) -> i64 {
    let f = acquire(c, "clock-probe", "p", 1000).expect("probe acquire");
    assert_eq!(release(c, "clock-probe", "p"), 1);
    (f >> 11) - real_ms()
}

fn is_valkey(c: &mut Connection) -> bool {
    info_field(c, "server", "valkey_version").is_some()
}

/// A server whose wall clock runs `offset_ms` from the real one from its start, its module
/// included (checked through a fence).
fn shifted_server(offset_ms: i64, opts: Opts) -> (Server, OffsetFile) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join("redis-lock-tests");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!(
        "exactness-{}-{}.offset",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, format!("{offset_ms}\n")).unwrap();
    fs::rename(&tmp, &path).unwrap();
    let env = [
        (
            "LD_PRELOAD".to_string(),
            wallshift_so().display().to_string(),
        ),
        ("WALLSHIFT_FILE".to_string(), path.display().to_string()),
    ];
    let s = Server::start_with_env(opts.extra(&["--jemalloc-bg-thread", "no"]), &env);
    let mut c = s.conn();
    let server = server_offset_ms(&mut c);
    assert!(
        (server - offset_ms).abs() < 1000,
        "server wall clock at {server} ms from ours, expected {offset_ms} (LD_PRELOAD?)"
    );
    let module = module_offset_ms(&mut c);
    assert!(
        (module - offset_ms).abs() < 1000,
        "the module's wall clock is at {module} ms from ours, the server's at {server}: \
         the shim does not reach the module"
    );
    (s, OffsetFile(path))
}

// ------------------------------------------------------------------ deadlines, bracketed

/// The origin of the microsecond timeline deadlines are placed on.
fn base() -> Instant {
    static B: OnceLock<Instant> = OnceLock::new();
    *B.get_or_init(|| Instant::now() - Duration::from_secs(3600))
}

/// `at` in microseconds on the timeline of [`base`].
fn us(at: Instant) -> i64 {
    at.duration_since(base()).as_micros() as i64
}

/// Where a lock's deadline lies on the test's monotonic clock, in µs since [`base`]. A
/// `LOCK.INFO` sent at `s` and answered at `r` with ttl `T` (ms, rounded up) puts the
/// deadline in `(s + T - 1 ms, r + T]`; several samples narrow it.
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: i64,
    hi: i64,
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{:.3}, {:.3}] ms",
            self.lo as f64 / 1e3,
            self.hi as f64 / 1e3
        )
    }
}

/// The deadline of the lock at `key` as held by `holder`, from `samples` `LOCK.INFO`s.
fn deadline(c: &mut Connection, key: &str, holder: &str, samples: usize) -> Result<Span, String> {
    let mut span = Span {
        lo: i64::MIN,
        hi: i64::MAX,
    };
    for _ in 0..samples {
        let s = Instant::now();
        let i = info(c, key);
        let r = Instant::now();
        let i = i.ok_or_else(|| format!("{key}: no lock (LOCK.INFO null)"))?;
        if i.holder.as_deref() != Some(holder.as_bytes()) {
            return Err(format!("{key}: {:?}, expected holder {holder}", Lock(i)));
        }
        span.lo = span.lo.max(us(s) + i.ttl * 1000 - 1000);
        span.hi = span.hi.min(us(r) + i.ttl * 1000);
    }
    Ok(span)
}

/// Slack for the two processes' wall-clock offsets, sampled at different instants.
const TOL_US: i64 = 500;

/// `copy` must hold the deadline of `orig`: never shorter, and longer only by the rounding
/// up to a millisecond of the propagated or saved deadline.
fn same_deadline(what: &str, orig: Span, copy: Span) -> Option<String> {
    if copy.hi < orig.lo - TOL_US {
        return Some(format!(
            "{what}: deadline at least {:.3} ms SHORTER than the original's (original {orig}, \
             here {copy})",
            (orig.lo - copy.hi) as f64 / 1e3
        ));
    }
    if copy.lo > orig.hi + 1000 + TOL_US {
        return Some(format!(
            "{what}: deadline at least {:.3} ms longer than the original's (original {orig}, \
             here {copy})",
            (copy.lo - orig.hi) as f64 / 1e3
        ));
    }
    None
}

/// Whether the replica has processed everything so far.
fn sync(master: &mut Connection) {
    assert_eq!(
        wait_replicas(master, 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack within 5 s"
    );
}

/// A waiter's reply and when it came, read on its own thread.
fn watch(mut w: Waiter, within: Duration) -> JoinHandle<(Option<Reply>, Option<Instant>)> {
    thread::spawn(move || {
        let r = w.reply_within(within);
        (r, w.answered)
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------- 1. leases that travel

const MOVE_TTL: u64 = 20_000;
/// How late the destination may end a moved lease (timer plus a loaded machine).
const MOVE_SLACK: Duration = Duration::from_millis(500);

/// One moved lock: what the test knows of its lease, and its waiter on the destination.
struct Moved {
    case: String,
    fence: i64,
    acq_sent: Instant,
    acq_reply: Instant,
    moved_sent: Instant,
    moved_reply: Instant,
    waiter: JoinHandle<(Option<Reply>, Option<Instant>)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Move {
    DumpRestore,
    Migrate,
}

/// Acquires `key` on `src` with a 20 s lease, moves it to `dst`, and checks what arrived.
fn move_lock(
    src: &Server,
    dst: &Server,
    how: Move,
    case: &str,
    key: &str,
) -> Result<Moved, Vec<String>> {
    let mut sc = src.conn();
    let mut dc = dst.conn();
    let mut problems = Vec::new();
    let string_key = format!("{key}:string");
    let acq_sent = Instant::now();
    let fence = acquire(&mut sc, key, "holder", MOVE_TTL).expect("acquire on the source");
    let acq_reply = Instant::now();
    let moved_sent = Instant::now();
    match how {
        Move::DumpRestore => {
            let payload = match cmd!(&mut sc, "DUMP", key) {
                Ok(Value::BulkString(b)) => b,
                other => panic!("DUMP {key}: {other:?}"),
            };
            let r = cmd!(&mut dc, "RESTORE", key, 0, payload.as_slice());
            assert_eq!(r, Ok(Value::Okay), "{case}: RESTORE");
        }
        Move::Migrate => {
            let r = cmd!(&mut sc, "SET", &string_key, "v", "PX", MOVE_TTL);
            assert_eq!(r, Ok(Value::Okay));
            let r = cmd!(
                &mut sc,
                "MIGRATE",
                "127.0.0.1",
                dst.port,
                "",
                0,
                5000,
                "KEYS",
                key,
                &string_key
            );
            assert_eq!(r, Ok(Value::Okay), "{case}: MIGRATE");
        }
    }
    let moved_reply = Instant::now();
    let ttl_us = MOVE_TTL as i64 * 1000;
    // Never less than it had (its deadline on the source is at least acq_sent + ttl; the
    // saved time is rounded up), never more (the transfer adds at most its own duration and
    // a millisecond of rounding each way).
    let earliest = us(acq_sent) + ttl_us - 1000;
    let transit = (moved_reply - moved_sent).as_micros() as i64;
    let latest = us(acq_reply) + ttl_us + transit + 2000;
    match deadline(&mut dc, key, "holder", 5) {
        Ok(span) => {
            let to_ms = |x: i64| x as f64 / 1e3;
            if span.hi < earliest - TOL_US {
                problems.push(format!(
                    "{case}: arrived with {:.1} ms less than it had (deadline {span}, at least \
                     {:.3} expected)",
                    to_ms(earliest - span.hi),
                    to_ms(earliest)
                ));
            }
            if span.lo > latest + TOL_US {
                problems.push(format!(
                    "{case}: arrived with {:.1} ms MORE than it had (deadline {span}, at most \
                     {:.3} expected)",
                    to_ms(span.lo - latest),
                    to_ms(latest)
                ));
            }
        }
        Err(e) => problems.push(format!("{case}: on the destination right after: {e}")),
    }
    if let Some(i) = info(&mut dc, key) {
        if i.fence != fence {
            problems.push(format!("{case}: fence {} arrived as {}", fence, i.fence));
        }
    }
    if let Some(f) = acquire(&mut dc, key, "other", 1000) {
        problems.push(format!(
            "{case}: another token acquired the moved lock at once (fence {f})"
        ));
    }
    if how == Move::Migrate {
        if exists(&mut sc, key) || exists(&mut sc, &string_key) {
            problems.push(format!("{case}: MIGRATE left a key on the source"));
        }
        // The control: core carries a key's PTTL across MIGRATE.
        let pttl = match cmd!(&mut dc, "PTTL", &string_key) {
            Ok(Value::Int(n)) => n,
            other => panic!("PTTL: {other:?}"),
        };
        let had = MOVE_TTL as i64 - acq_sent.elapsed().as_millis() as i64;
        if !(had - 50..=MOVE_TTL as i64).contains(&pttl) {
            problems.push(format!(
                "{case}: the SET PX control arrived with PTTL {pttl}, expected about {had}"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let w = Waiter::join(dst, key, "next", 5000, 0);
    Ok(Moved {
        case: case.to_string(),
        fence,
        acq_sent,
        acq_reply,
        moved_sent,
        moved_reply,
        waiter: watch(w, Duration::from_millis(MOVE_TTL) + Duration::from_secs(20)),
    })
}

/// Guarantee of `src/persistence.rs`: a key that moves between servers carries the time its
/// lease had left, as core `MIGRATE` carries a PTTL, whatever the two wall clocks say.
#[test]
fn a_moved_lease_arrives_with_the_time_it_had_left_whatever_the_clocks() {
    base();
    let src = Server::new();
    if is_valkey(&mut src.conn()) {
        eprintln!("skipped on Valkey: LD_PRELOAD cannot shift a module's wall clock there");
        return;
    }
    let offsets = [
        ("+30s", 30_000),
        ("-30s", -30_000),
        ("+1h", HOUR_MS),
        ("-1h", -HOUR_MS),
    ];
    let mut findings = Findings::default();
    let mut moved = Vec::new();
    let mut servers = Vec::new();
    for (name, offset) in offsets {
        let (dst, file) = shifted_server(offset, Opts::new());
        for how in [Move::DumpRestore, Move::Migrate] {
            let case = format!("{how:?} to a server at {name}");
            let key = format!("{how:?}:{name}");
            match move_lock(&src, &dst, how, &case, &key) {
                Ok(m) => moved.push((m, servers.len(), key)),
                Err(p) => p.into_iter().for_each(|p| findings.fail(p)),
            }
        }
        servers.push((dst, file));
    }
    // Midway, every moved lock is still its holder's on the destination.
    let first = moved.iter().map(|(m, ..)| m.acq_sent).min();
    if let Some(first) = first {
        sleep(
            (first + Duration::from_millis(MOVE_TTL / 2)).saturating_duration_since(Instant::now()),
        );
    }
    for (m, at, key) in &moved {
        let mut c = servers[*at].0.conn();
        if m.acq_reply.elapsed() < Duration::from_millis(MOVE_TTL - 2000) {
            match info(&mut c, key) {
                Some(i) if i.holder.as_deref() == Some(&b"holder"[..]) && i.waiters == 1 => {}
                other => findings.fail(format!("{}: midway: {:?}", m.case, other.map(Lock))),
            }
        }
    }
    // Its waiter is granted when the lease it arrived with ends, not before, not much after.
    for (m, ..) in moved {
        let (reply, at) = m.waiter.join().expect("waiter thread");
        let ttl = Duration::from_millis(MOVE_TTL);
        let transit = m.moved_reply - m.moved_sent;
        let earliest = m.acq_sent + ttl - Duration::from_millis(1);
        let latest = m.acq_reply + ttl + transit + Duration::from_millis(2) + MOVE_SLACK;
        match (reply, at) {
            (Some(Reply::Fence(f)), Some(at)) => {
                if f <= m.fence {
                    findings.fail(format!("{}: grant fence {f} <= {}", m.case, m.fence));
                }
                if at < earliest {
                    findings.fail(format!(
                        "{}: the waiter was granted {:.1} ms BEFORE the lease ended",
                        m.case,
                        ms(earliest - at)
                    ));
                } else if at > latest {
                    findings.fail(format!(
                        "{}: the waiter was granted {:.1} ms after the lease's end (allowed {:.0})",
                        m.case,
                        ms(at - earliest),
                        ms(latest - earliest)
                    ));
                } else {
                    eprintln!(
                        "{}: granted {:.1} ms after the earliest end of the lease",
                        m.case,
                        ms(at - earliest)
                    );
                }
            }
            (r, at) => findings.fail(format!(
                "{}: the waiter got {} ({:?} after the acquire)",
                m.case,
                got(&r),
                at.map(|a| a - m.acq_sent)
            )),
        }
    }
    findings.done("leases moved between servers whose clocks differ");
}

/// A lock that arrived by `RESTORE` or `MIGRATE` from a server with another clock keeps the
/// lease it arrived with on the destination's replica and across the destination's AOF
/// restart: those replay the dataset, whose deadlines are the destination's.
#[test]
fn a_moved_lease_keeps_its_deadline_on_the_destinations_replica_and_aof() {
    base();
    let dst = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    if is_valkey(&mut dst.conn()) {
        eprintln!("skipped on Valkey: LD_PRELOAD cannot shift a module's wall clock there");
        return;
    }
    let replica = Server::start(Opts::new().replicaof(dst.port));
    let mut rc = replica.conn();
    wait_link_up(&mut rc);
    let mut dc = dst.conn();
    let mut keys = Vec::new();
    let mut sources = Vec::new();
    for (name, offset) in [("+30s", 30_000), ("-30s", -30_000)] {
        let (src, file) = shifted_server(offset, Opts::new());
        sources.push((name, src, file));
    }
    // The replica applies the moves 300 ms after its master did (as a busy or distant replica
    // would): the deadline it gets must still be its master's, not 300 ms later.
    let mut stalled = replica.conn();
    let stall = thread::spawn(move || cmd!(&mut stalled, "DEBUG", "SLEEP", "0.3"));
    sleep(Duration::from_millis(20));
    let moves_began = Instant::now();
    for (name, src, _) in &sources {
        let mut sc = src.conn();
        for how in [Move::DumpRestore, Move::Migrate] {
            let key = format!("{how:?}:{name}");
            acquire(&mut sc, &key, "holder", 30_000).unwrap();
            match how {
                Move::DumpRestore => {
                    let payload = match cmd!(&mut sc, "DUMP", &key) {
                        Ok(Value::BulkString(b)) => b,
                        other => panic!("DUMP: {other:?}"),
                    };
                    let r = cmd!(&mut dc, "RESTORE", &key, 0, payload.as_slice());
                    assert_eq!(r, Ok(Value::Okay));
                }
                Move::Migrate => {
                    let r = cmd!(&mut sc, "MIGRATE", "127.0.0.1", dst.port, &key, 0, 5000);
                    assert_eq!(r, Ok(Value::Okay));
                }
            }
            keys.push((format!("{how:?} from a server at {name}"), key));
        }
    }
    let moves_took = moves_began.elapsed();
    assert_eq!(stall.join().unwrap(), Ok(Value::Okay));
    eprintln!("the four moves took {moves_took:?}, inside the replica's 300 ms stall");
    sync(&mut dc);
    let mut findings = Findings::default();
    let mut spans = Vec::new();
    for (case, key) in &keys {
        let d = deadline(&mut dc, key, "holder", 10).expect("on the destination");
        match deadline(&mut rc, key, "holder", 10) {
            Ok(r) => {
                if let Some(p) = same_deadline(&format!("{case}, on the replica"), d, r) {
                    findings.fail(p);
                }
            }
            Err(e) => findings.fail(format!("{case}, on the replica: {e}")),
        }
        spans.push(d);
    }
    drop(rc);
    drop(replica);
    let mut dst = dst;
    dst.restart();
    let mut dc = dst.conn();
    for ((case, key), d) in keys.iter().zip(spans) {
        match deadline(&mut dc, key, "holder", 10) {
            Ok(a) => {
                if let Some(p) = same_deadline(&format!("{case}, after an AOF restart"), d, a) {
                    findings.fail(p);
                }
            }
            Err(e) => findings.fail(format!("{case}, after an AOF restart: {e}")),
        }
    }
    findings.done("moved leases on the destination's replica and AOF");
}

// ------------------------------------------------------ 2. replicated and reloaded exactly

/// Acquire, extend, renew, fence and a grant to a waiter on a master with the AOF on: after
/// each, `WAIT 1` and the replica's deadline is the master's (never shorter, at most the
/// millisecond of rounding longer) and within the ttl the test sent; after an AOF restart
/// the master's deadlines are the ones it had.
#[test]
fn replica_and_aof_deadlines_are_the_masters_never_shorter() {
    base();
    let mut m = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    let mut findings = Findings::default();
    let mut last = Vec::new();

    // Each step: the change, then the replica's deadline against the master's and the ttl.
    let mut step = |mc: &mut Connection,
                    what: &str,
                    key: &str,
                    holder: &str,
                    ttl: Option<u64>,
                    change: &mut dyn FnMut(&mut Connection)| {
        let sent = Instant::now();
        change(mc);
        let replied = Instant::now();
        sync(mc);
        let rs = deadline(&mut rc, key, holder, 10);
        let ms_ = deadline(mc, key, holder, 10).expect("master");
        let rs = match rs {
            Ok(rs) => rs,
            Err(e) => {
                findings.fail(format!("{what}: replica: {e}"));
                return ms_;
            }
        };
        if let Some(p) = same_deadline(&format!("{what}: replica vs master"), ms_, rs) {
            findings.fail(p);
        }
        if let Some(ttl) = ttl {
            // ttl - (elapsed since the command was sent) - 1 ms <= remaining <= ttl.
            let ttl_us = ttl as i64 * 1000;
            let (lo, hi) = (us(sent) + ttl_us - 1000, us(replied) + ttl_us + 1000);
            if rs.hi < lo - TOL_US {
                findings.fail(format!(
                    "{what}: replica's lease {:.3} ms shorter than the {ttl} ms sent \
                     (deadline {rs})",
                    (lo - rs.hi) as f64 / 1e3
                ));
            }
            if rs.lo > hi + TOL_US {
                findings.fail(format!(
                    "{what}: replica's lease {:.3} ms longer than the {ttl} ms sent (deadline {rs})",
                    (rs.lo - hi) as f64 / 1e3
                ));
            }
        }
        ms_
    };

    step(&mut mc, "acquire", "a", "tok", Some(30_000), &mut |c| {
        acquire(c, "a", "tok", 30_000).unwrap();
    });
    step(&mut mc, "extend", "a", "tok", Some(45_000), &mut |c| {
        assert_eq!(extend(c, "a", "tok", 45_000), 1);
    });
    step(
        &mut mc,
        "renewing acquire",
        "a",
        "tok",
        Some(50_000),
        &mut |c| {
            acquire(c, "a", "tok", 50_000).unwrap();
        },
    );
    let a = step(&mut mc, "fence", "a", "tok", None, &mut |c| {
        fence(c, "a", "tok").unwrap();
    });
    last.push(("a", "tok", a));
    acquire(&mut mc, "g", "first", 60_000).unwrap();
    let mut w = Waiter::join(&m, "g", "second", 40_000, 0);
    let g = step(&mut mc, "grant", "g", "second", Some(40_000), &mut |c| {
        assert_eq!(release(c, "g", "first"), 1);
    });
    assert!(w.reply().is_some(), "waiter not granted");
    last.push(("g", "second", g));

    // The AOF holds the same deadlines.
    drop(rc);
    drop(r);
    m.restart();
    let mut mc = m.conn();
    for (key, holder, before) in last {
        match deadline(&mut mc, key, holder, 10) {
            Ok(after) => {
                if let Some(p) =
                    same_deadline(&format!("{key}: after an AOF restart"), before, after)
                {
                    findings.fail(p);
                }
            }
            Err(e) => findings.fail(format!("{key}: after an AOF restart: {e}")),
        }
    }
    findings.done("replica and AOF deadlines");
}

/// Lines of a server log where the server reports an error reply to its AOF or master
/// client: a command the module wrote there that it refuses to replay.
fn replay_errors(s: &Server) -> Vec<String> {
    fs::read_to_string(s.log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("CRITICAL") || l.contains("sending an error to its"))
        .map(str::to_string)
        .collect()
}

/// What the module writes to the AOF and the replication stream replays without an error,
/// from a fresh server on (whose AOF is created at start), and the lock is back.
#[test]
fn the_aof_and_the_replication_stream_replay_without_errors() {
    let mut m = Server::start(Opts::new().appendonly());
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    let f = fence(&mut mc, "k", "tok").unwrap();
    sync(&mut mc);
    assert_eq!(info(&mut rc, "k").map(|i| i.fence), Some(f));
    let on_replica = replay_errors(&r);
    drop(rc);
    drop(r);
    m.restart();
    let mut mc = m.conn();
    assert_eq!(info(&mut mc, "k").map(|i| i.fence), Some(f));
    let on_master = replay_errors(&m);
    assert!(
        on_replica.is_empty() && on_master.is_empty(),
        "replayed commands were refused:\n  replica: {on_replica:#?}\n  master after an AOF \
         restart: {on_master:#?}"
    );
}

/// An RDB restart, a replica's full sync and `DEBUG RELOAD` keep the absolute deadline.
#[test]
fn rdb_restart_full_sync_and_debug_reload_keep_the_deadline() {
    base();
    let mut m = Server::new();
    let mut mc = m.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    let orig = deadline(&mut mc, "k", "tok", 10).unwrap();
    let mut findings = Findings::default();
    let mut check = |what: &str, c: &mut Connection| match deadline(c, "k", "tok", 10) {
        Ok(s) => {
            if let Some(p) = same_deadline(what, orig, s) {
                findings.fail(p);
            }
        }
        Err(e) => findings.fail(format!("{what}: {e}")),
    };
    // A replica that attaches now gets it in the full sync (an RDB transfer).
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    assert!(wait_until(Duration::from_secs(5), || exists(&mut rc, "k")));
    check("after a full sync, on the replica", &mut rc);
    drop(rc);
    drop(r);
    // The full sync's background save may still be finishing: DEBUG RELOAD refuses to run
    // beside it.
    assert!(
        wait_until(Duration::from_secs(10), || {
            info_field(&mut mc, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
        }),
        "the full sync's background save did not finish"
    );
    assert_eq!(cmd!(&mut mc, "DEBUG", "RELOAD"), Ok(Value::Okay));
    check("after DEBUG RELOAD", &mut mc);
    assert_eq!(cmd!(&mut mc, "SAVE"), Ok(Value::Okay));
    m.restart();
    let mut mc = m.conn();
    check("after an RDB restart", &mut mc);
    findings.done("RDB, full sync and DEBUG RELOAD deadlines");
}

// ------------------------------------------------------------------- 3. writable replica

/// How late a lease end may be observed on a replica.
const REPLICA_SLACK: Duration = Duration::from_millis(200);

/// Polls until `key` is gone; when it went (after `from`, at most `within` later).
fn gone_at(c: &mut Connection, key: &str, within: Duration) -> Option<Instant> {
    let give_up = Instant::now() + within;
    while Instant::now() < give_up {
        if !exists(c, key) {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn a_writable_replica_ends_its_own_leases_and_leaves_the_masters_to_the_master() {
    let m = Server::new();
    let r = Server::start(
        Opts::new()
            .replicaof(m.port)
            .extra(&["--replica-read-only", "no"]),
    );
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    let mut findings = Findings::default();
    let mut late = Vec::new();
    let mut on_time = |f: &mut Findings,
                       what: &str,
                       at: Option<Instant>,
                       sent: Instant,
                       replied: Instant,
                       ttl: u64| {
        let ttl = Duration::from_millis(ttl);
        match at {
            None => f.fail(format!("{what}: did not happen within seconds")),
            Some(at) if at < sent + ttl => f.fail(format!(
                "{what}: {:.1} ms BEFORE the deadline",
                ms(sent + ttl - at)
            )),
            Some(at) if at > replied + ttl + REPLICA_SLACK => f.fail(format!(
                "{what}: {:.1} ms after the deadline",
                ms(at - (replied + ttl))
            )),
            Some(at) => late.push(format!("{what}: {:.1} ms", ms(at - (sent + ttl)))),
        }
    };

    // A lease a client took on the replica ends there, on time, with nobody waiting.
    let sent = Instant::now();
    acquire(&mut rc, "solo", "tok", 300).expect("acquire on a writable replica");
    let replied = Instant::now();
    let at = gone_at(&mut rc, "solo", Duration::from_secs(3));
    on_time(
        &mut findings,
        "replica lease end (key removed)",
        at,
        sent,
        replied,
        300,
    );

    // Its waiter on the replica is granted at the lease's end, and that lease ends too.
    let sent = Instant::now();
    let f1 = acquire(&mut rc, "held", "tok", 300).unwrap();
    let replied = Instant::now();
    let w = watch(
        Waiter::join(&r, "held", "next", 300, 0),
        Duration::from_secs(5),
    );
    let (reply, at) = w.join().unwrap();
    match reply {
        Some(Reply::Fence(f)) if f > f1 => {}
        other => findings.fail(format!("replica waiter at lease end got {}", got(&other))),
    }
    on_time(
        &mut findings,
        "grant to a replica waiter at lease end",
        at,
        sent,
        replied,
        300,
    );
    if let Some(granted) = at {
        let gone = gone_at(&mut rc, "held", Duration::from_secs(3));
        on_time(
            &mut findings,
            "end of the replica-granted lease",
            gone,
            // It began at the first lease's end at the earliest, and before its reply came.
            sent + Duration::from_millis(300),
            granted,
            300,
        );
    }

    // A release on the replica hands the lock to its waiter there at once.
    acquire(&mut rc, "rel", "tok", 60_000).unwrap();
    let w = watch(
        Waiter::join(&r, "rel", "next", 60_000, 0),
        Duration::from_secs(5),
    );
    let released = Instant::now();
    assert_eq!(release(&mut rc, "rel", "tok"), 1);
    let (reply, at) = w.join().unwrap();
    match (reply, at) {
        (Some(Reply::Fence(_)), Some(at)) if at - released < REPLICA_SLACK => {}
        (reply, at) => findings.fail(format!(
            "replica waiter after a release got {} after {:?}",
            got(&reply),
            at.map(|a| a - released)
        )),
    }
    assert_eq!(release(&mut rc, "rel", "next"), 1);
    let held = |c: &mut Connection| lock_stat(c, "lock_held").expect("lock_held");
    if !wait_until(Duration::from_secs(1), || held(&mut rc) == 0) {
        findings.fail(format!(
            "INFO lock on the replica: lock_held {} after its own locks ended",
            held(&mut rc)
        ));
    }
    for key in ["solo", "held", "rel"] {
        if exists(&mut mc, key) {
            findings.fail(format!("{key}, written on the replica, is on the master"));
        }
    }

    // The master's lock is the master's to end: with the master's writes paused past its
    // deadline the replica keeps the key (reporting it ended), and its own lease still ends
    // about on time meanwhile.
    let t0 = Instant::now();
    acquire(&mut mc, "mk", "tok", 300).unwrap();
    sync(&mut mc);
    assert_eq!(
        cmd!(&mut mc, "CLIENT", "PAUSE", 4000, "WRITE"),
        Ok(Value::Okay)
    );
    let sent = Instant::now();
    acquire(&mut rc, "own", "tok", 600).unwrap();
    let replied = Instant::now();
    let at = gone_at(&mut rc, "own", Duration::from_secs(3));
    on_time(
        &mut findings,
        "replica lease end while a master lease is overdue there",
        at,
        sent,
        replied,
        600,
    );
    sleep((t0 + Duration::from_millis(900)).saturating_duration_since(Instant::now()));
    if t0.elapsed() < Duration::from_millis(3500) {
        if !exists(&mut rc, "mk") {
            findings.fail("the replica removed its master's lock on its own".into());
        }
        if let Some(i) = info(&mut rc, "mk") {
            findings.fail(format!(
                "the replica reports its master's ended lease as {:?}",
                Lock(i)
            ));
        }
        if held(&mut rc) != 1 {
            findings.fail(format!(
                "lock_held {} on the replica, expected 1 (mk)",
                held(&mut rc)
            ));
        }
    }
    assert_eq!(cmd!(&mut mc, "CLIENT", "UNPAUSE"), Ok(Value::Okay));
    if gone_at(&mut rc, "mk", Duration::from_secs(3)).is_none() {
        findings.fail("the master's removal did not reach the replica".into());
    }
    if !wait_until(Duration::from_secs(1), || held(&mut rc) == 0) {
        findings.fail(format!(
            "lock_held {} on the replica at the end",
            held(&mut rc)
        ));
    }
    eprintln!("writable replica, late by: {}", late.join("; "));
    findings.done("writable replica");
}

/// A lock a client of a writable replica put there by `RESTORE` or `COPY` is that replica's,
/// as core treats a key with a TTL written there by those commands: its master will never
/// send a `DEL` for it, so the replica ends it when its lease ends.
#[test]
fn a_writable_replica_ends_locks_its_clients_restored_or_copied() {
    let m = Server::new();
    let r = Server::start(
        Opts::new()
            .replicaof(m.port)
            .extra(&["--replica-read-only", "no"]),
    );
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    acquire(&mut rc, "own", "tok", 300).unwrap();
    let payload = match cmd!(&mut rc, "DUMP", "own") {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP: {other:?}"),
    };
    assert_eq!(
        cmd!(&mut rc, "RESTORE", "restored", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_eq!(cmd!(&mut rc, "COPY", "own", "copied"), Ok(Value::Int(1)));
    // A copy of a lock from the master is the replica's too: the master does not know it.
    // Its lease outlasts the sync and the COPY: under Valkey 8.1 this replica, with writes of
    // its own, once acked after a 300 ms lease had ended (the master's `DEL` then removed the
    // key COPY was to read), and once not within 1 s.
    let from_master = Duration::from_millis(3_000);
    let acquired = Instant::now();
    acquire(
        &mut mc,
        "from-master",
        "tok",
        from_master.as_millis() as u64,
    )
    .unwrap();
    sync(&mut mc);
    assert_eq!(
        cmd!(&mut rc, "COPY", "from-master", "master-copy"),
        Ok(Value::Int(1))
    );
    let mut findings = Findings::default();
    // Every lease here, of 300 ms or of `from_master`, ended by then, with the slack.
    let by = acquired + from_master + REPLICA_SLACK + Duration::from_millis(300);
    sleep(by.saturating_duration_since(Instant::now()));
    for key in ["own", "restored", "copied", "master-copy", "from-master"] {
        if exists(&mut rc, key) {
            findings.fail(format!(
                "{key}: still on the replica {} ms after the last lease's end (LOCK.INFO {:?})",
                (REPLICA_SLACK + Duration::from_millis(300)).as_millis(),
                info(&mut rc, key).map(Lock)
            ));
        }
    }
    let held = lock_stat(&mut rc, "lock_held").unwrap();
    if held != 0 {
        findings.fail(format!("INFO lock on the replica: lock_held {held}"));
    }
    findings.done("locks restored or copied on a writable replica");
}

// ------------------------------------------------------ 4. scripts and transactions

/// Holds `key` for `holder`, then in one script: `LOCK.INFO`, `LOCK.ACQUIRE … other`, a
/// busy wait on `TIME` past the lease's end, `LOCK.ACQUIRE … other` again and `LOCK.INFO`.
const SPANNING_SCRIPT: &str = r#"
local k, other = KEYS[1], ARGV[1]
local before = redis.call('LOCK.INFO', k)
if not before then return {'ended-before-start'} end
local ttl = before[6]
local first = redis.call('LOCK.ACQUIRE', k, other, 1000)
local t = redis.call('TIME')
local t0 = t[1] * 1000000 + t[2]
local spun = 0
repeat
  t = redis.call('TIME')
  spun = t[1] * 1000000 + t[2] - t0
until spun >= (ttl + 40) * 1000
local second = redis.call('LOCK.ACQUIRE', k, other, 1000)
local after = redis.call('LOCK.INFO', k)
return {'ran', first or 'null', second or 'null', after or 'null', ttl, math.floor(spun / 1000)}
"#;

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn a_script_judges_a_lease_at_the_time_it_began() {
    let s = Server::new();
    let mut c = s.conn();
    for attempt in 0..5 {
        let key = format!("k{attempt}");
        acquire(&mut c, &key, "holder", 100).unwrap();
        sleep(Duration::from_millis(60));
        let started = Instant::now();
        let v = cmd!(&mut c, "EVAL", SPANNING_SCRIPT, 1, &key, "other").expect("EVAL");
        let took = started.elapsed();
        let items = match v {
            Value::Array(items) => items,
            other => panic!("EVAL: {other:?}"),
        };
        if text(&items[0]) == "ended-before-start" {
            eprintln!("attempt {attempt}: the lease ended before the script began; again");
            continue;
        }
        assert_eq!(text(&items[0]), "ran");
        let (ttl, spun) = match (&items[4], &items[5]) {
            (Value::Int(t), Value::Int(s)) => (*t, *s),
            other => panic!("{other:?}"),
        };
        assert!(spun >= ttl + 40, "the script spun {spun} ms");
        assert_eq!(
            text(&items[1]),
            "null",
            "LOCK.ACQUIRE by another token at the script's start"
        );
        assert_eq!(
            text(&items[2]),
            "null",
            "LOCK.ACQUIRE by another token {spun} ms into a script that began {ttl} ms before \
             the lease's end: the lease must be judged at the script's start"
        );
        let after = parse_info(&items[3]).expect("LOCK.INFO inside the script, after the wait");
        assert_eq!(
            after.holder.as_deref(),
            Some(&b"holder"[..]),
            "{:?}",
            Lock(after.clone())
        );
        assert_eq!(
            after.ttl,
            ttl,
            "the ttl inside the script moved: {:?}",
            Lock(after.clone())
        );
        // Outside it, time moved on: the lease has ended.
        assert!(
            acquire(&mut c, &key, "other", 1000).is_some(),
            "after the script ({took:?}), another token cannot acquire an ended lease"
        );
        return;
    }
    panic!("the machine is too slow: in 5 attempts no script began within a 100 ms lease");
}

#[test]
fn a_transaction_judges_a_lease_at_the_time_exec_began() {
    let s = Server::new();
    let mut c = s.conn();
    for attempt in 0..5 {
        let key = format!("k{attempt}");
        let sent = Instant::now();
        acquire(&mut c, &key, "holder", 200).unwrap();
        sleep(Duration::from_millis(80));
        let items = exec(
            &mut c,
            &[
                args(&["LOCK.INFO", &key]),
                args(&["LOCK.ACQUIRE", &key, "other", "1000"]),
                args(&["DEBUG", "SLEEP", "0.3"]),
                args(&["LOCK.ACQUIRE", &key, "other", "1000"]),
                args(&["LOCK.INFO", &key]),
            ],
        );
        let Some(before) = parse_info(&items[0]) else {
            eprintln!("attempt {attempt}: the lease ended before EXEC; again");
            continue;
        };
        assert!(sent.elapsed() > Duration::from_millis(300));
        assert_eq!(
            items[1],
            Value::Nil,
            "acquire by another token at EXEC's start"
        );
        assert_eq!(
            items[3],
            Value::Nil,
            "acquire by another token 300 ms into an EXEC that began while the 200 ms lease \
             was held: the lease must be judged at EXEC's start"
        );
        let after = parse_info(&items[4]).expect("LOCK.INFO at the end of EXEC");
        assert_eq!(after.holder, before.holder);
        assert_eq!(after.ttl, before.ttl, "ttl moved inside EXEC");
        assert!(
            acquire(&mut c, &key, "other", 1000).is_some(),
            "after EXEC, another token cannot acquire an ended lease"
        );
        return;
    }
    panic!("the machine is too slow: in 5 attempts no EXEC began within a 200 ms lease");
}

/// A unit's start is its own: the next script, transaction or plain command, run right after
/// (pipelined behind a `DEBUG SLEEP` past the lease's end, so that no sweep runs between
/// them and the ended lock is still there), judges at its own time.
#[test]
fn the_next_script_or_command_does_not_reuse_a_units_start() {
    let s = Server::new();
    let mut c = s.conn();
    let info_script = "return redis.call('LOCK.INFO', KEYS[1])";
    let acquire_script = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 1000)";
    let mut findings = Findings::default();
    let mut judged = 0;
    for (case, first_is_exec, then) in [
        ("EVAL then EVAL", false, "eval"),
        ("EVAL then a plain command", false, "plain"),
        ("EXEC then EVAL", true, "eval"),
        ("EXEC then a plain command", true, "plain"),
        ("EVAL then EXEC", false, "exec"),
    ] {
        let key = case.to_string();
        acquire(&mut c, &key, "holder", 100).unwrap();
        let mut p = redis::pipe();
        if first_is_exec {
            p.cmd("MULTI").cmd("LOCK.INFO").arg(&key).cmd("EXEC");
        } else {
            p.cmd("EVAL").arg(info_script).arg(1).arg(&key);
        }
        p.cmd("DEBUG").arg("SLEEP").arg("0.2");
        match then {
            "eval" => {
                p.cmd("EVAL")
                    .arg(acquire_script)
                    .arg(1)
                    .arg(&key)
                    .arg("other");
            }
            "plain" => {
                p.cmd("LOCK.ACQUIRE").arg(&key).arg("other").arg(1000);
            }
            _ => {
                p.cmd("MULTI")
                    .cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg("other")
                    .arg(1000)
                    .cmd("EXEC");
            }
        }
        let replies: Vec<Value> = p.query(&mut c).expect("pipeline");
        let first = if first_is_exec {
            match &replies[2] {
                Value::Array(v) => v[0].clone(),
                other => panic!("{case}: EXEC {other:?}"),
            }
        } else {
            replies[0].clone()
        };
        let held = parse_info(&first).is_some_and(|i| i.holder.is_some());
        if !held {
            eprintln!("{case}: the lease had ended before the first unit; not judged");
            continue;
        }
        judged += 1;
        let last = replies.last().unwrap();
        let last = match (then, last) {
            ("exec", Value::Array(v)) => v[0].clone(),
            (_, v) => v.clone(),
        };
        if !matches!(last, Value::Int(f) if f > 0) {
            findings.fail(format!(
                "{case}: 200 ms after a 100 ms lease, another token got {last:?}: the first \
                 unit's start time was reused"
            ));
        }
    }
    assert!(
        judged >= 3,
        "only {judged} of 5 cases ran their first unit within the lease"
    );
    findings.done("units after a unit");
}

// --------------------------------------------------------------- 5. events on a replica

/// Reads keyspace messages for up to `within`, until `n` have come.
fn read_events(ps: &mut redis::PubSub<'_>, n: usize, within: Duration) -> Vec<(String, String)> {
    let give_up = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n {
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        ps.set_read_timeout(Some(left)).unwrap();
        match ps.get_message() {
            Ok(msg) => {
                let payload: String = msg.get_payload().unwrap_or_default();
                out.push((msg.get_channel_name().to_string(), payload));
            }
            Err(e) if e.is_timeout() => break,
            Err(e) => panic!("pubsub: {e}"),
        }
    }
    out
}

#[test]
fn a_replica_announces_the_lock_events_of_the_changes_it_applies() {
    let (m, r) = replica_pair();
    let mut rc = r.conn();
    let mut mc = m.conn();
    assert_eq!(
        cmd!(&mut rc, "CONFIG", "SET", "notify-keyspace-events", "Kd"),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut mc, "CONFIG", "SET", "notify-keyspace-events", "Kd"),
        Ok(Value::Okay)
    );
    let mut sub_conn = r.conn();
    let mut ps = sub_conn.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").unwrap();
    let mut msub_conn = m.conn();
    let mut mps = msub_conn.as_pubsub();
    mps.psubscribe("__keyspace@0__:*").unwrap();

    acquire(&mut mc, "k", "a", 30_000).unwrap();
    assert_eq!(extend(&mut mc, "k", "a", 30_000), 1);
    acquire(&mut mc, "k", "a", 30_000).unwrap();
    fence(&mut mc, "k", "a").unwrap();
    let mut w = Waiter::join(&m, "k", "b", 30_000, 0);
    assert_eq!(release(&mut mc, "k", "a"), 1);
    assert!(w.reply().is_some(), "waiter not granted");
    assert_eq!(release(&mut mc, "k", "b"), 1);
    sync(&mut mc);
    let expected = [
        "lock.acquired",
        "lock.extended",
        "lock.extended",
        "lock.fenced",
        "lock.granted",
        "lock.released",
    ];
    let mut got_r = read_events(&mut ps, expected.len(), Duration::from_secs(2));
    got_r.extend(read_events(&mut ps, 1, Duration::from_millis(200)));
    let got_m = read_events(&mut mps, 20, Duration::from_millis(300));
    let names: Vec<&str> = got_r.iter().map(|(_, p)| p.as_str()).collect();
    eprintln!(
        "master announced {:?}",
        got_m.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>()
    );
    assert!(
        got_r.iter().all(|(ch, _)| ch == "__keyspace@0__:k"),
        "events on other keys: {got_r:?}"
    );
    assert_eq!(names, expected, "events on the replica");
}

// ---------------------------------------------------- 6. each lease on time, timer or not

/// Acquires a 60 s lease (the module timer is armed for it), then 20 leases of 400 to 495 ms,
/// 5 ms apart, each with a waiter: each grant comes within milliseconds of its deadline. A
/// timer not re-armed for the earlier deadlines leaves them to the 100 ms cron, which grants
/// them 0 to 100 ms late, spread evenly over the period: a median near 50 ms.
#[test]
fn each_lease_ends_on_time_while_the_timer_is_armed_for_a_later_one() {
    const N: u64 = 20;
    const MEDIAN_BOUND_MS: f64 = 30.0;
    let s = Server::new();
    let mut c = s.conn();
    let mut medians = Vec::new();
    for round in 0..2 {
        acquire(&mut c, &format!("later{round}"), "l", 60_000).unwrap();
        let mut leases = Vec::new();
        for i in 0..N {
            let key = format!("r{round}k{i}");
            let ttl = 400 + 5 * i;
            let sent = Instant::now();
            let f = acquire(&mut c, &key, "h", ttl).unwrap();
            leases.push((key, ttl, sent, f));
        }
        let mut watchers = Vec::new();
        for (key, ..) in &leases {
            let w = Waiter::send(&s, key, "w", 60_000, 0);
            watchers.push(watch(w, Duration::from_secs(10)));
        }
        for (key, ttl, sent, _) in &leases {
            let joined = wait_until(Duration::from_millis(300), || {
                info(&mut c, key).is_some_and(|i| i.waiters == 1)
            });
            assert!(
                joined && sent.elapsed() < Duration::from_millis(*ttl - 50),
                "round {round}: the waiter of {key} was not queued well before its lease's end \
                 (machine too slow?)"
            );
        }
        let mut lateness = Vec::new();
        for ((key, ttl, sent, f), h) in leases.iter().zip(watchers) {
            let (reply, at) = h.join().unwrap();
            match (reply, at) {
                (Some(Reply::Fence(g)), Some(at)) if g > *f => {
                    let due = *sent + Duration::from_millis(*ttl);
                    assert!(
                        at >= due,
                        "{key}: granted {:.1} ms before its lease's end",
                        ms(due - at)
                    );
                    lateness.push(ms(at - due));
                }
                (r, _) => panic!("{key}: waiter got {}", got(&r)),
            }
        }
        lateness.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let median = (lateness[N as usize / 2 - 1] + lateness[N as usize / 2]) / 2.0;
        eprintln!(
            "round {round}: grants late by (ms, sorted) {:?}; median {median:.1}",
            lateness
                .iter()
                .map(|l| (l * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        medians.push(median);
        let i = info(&mut c, &format!("later{round}")).expect("the 60 s lease");
        assert!(i.ttl > 55_000, "{:?}", Lock(i));
    }
    let best = medians.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        best <= MEDIAN_BOUND_MS,
        "median lateness of lease ends {medians:?} ms, bound {MEDIAN_BOUND_MS}: the timer armed \
         for the 60 s lease is not re-armed for earlier deadlines (the cron ends them)"
    );
}
