//! Many worker processes, one lock, random SIGKILLs, with a file as the resource: the
//! worker loop, the file that refuses fences below the highest it accepted, and the test
//! that reads their shared log for overlapping leases and fences out of order.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use crate::child_processes::{env_var, wall_us};
use crate::common::*;
use crate::workers::{run_workers_killing_at_random, WORK_MAX_MS, WORK_TTL};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

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
pub(crate) fn worker(c: &mut redis::Connection) {
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
