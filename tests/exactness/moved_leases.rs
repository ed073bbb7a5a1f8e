//! Leases that travel (point 1 of the crate doc): a lock moved by `DUMP`/`RESTORE` or
//! `MIGRATE` to a server whose wall clock differs arrives with the time it had left, and keeps
//! that deadline on the destination's replica and across the destination's AOF restart.

use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use redis::Value;

use crate::cmd;
use crate::common::*;
use crate::deadlines::{base, deadline, same_deadline, us, TOL_US};
use crate::shifted_clock::{is_valkey, shifted_server};
use crate::{ms, sync, watch};

const HOUR_MS: i64 = 3_600_000;

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
