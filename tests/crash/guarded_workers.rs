//! The same workers with a Redis list as the resource, written only through `LOCK.GUARD`:
//! the guarded worker loop (including writes with superseded fences, past the lease and
//! after the release), and the test that no stale write landed and every reply agrees with
//! the list.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::child_processes::{env_var, wall_us, Proc};
use crate::cmd;
use crate::common::*;
use crate::workers::{run_workers_killing_at_random, WORK_MAX_MS, WORK_TTL};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

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
pub(crate) fn guarded_worker(c: &mut redis::Connection) {
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
