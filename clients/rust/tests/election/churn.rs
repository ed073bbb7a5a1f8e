//! A follower under churn (issue 25): candidate processes campaign on one key with a 300 ms
//! lease, hold it for 30 to 700 ms and resign, or let the lease end (no keep-alive), and rest
//! now and then (so that the office falls vacant), while
//! the test `kill -9`s leaders and other candidates at random (and starts new ones) and
//! kills the followers' connections now and then. Two followers (a blocking `Observer` on a
//! thread, an async one on a runtime of its own) record what they see.
//!
//! The ground truth is the candidates' own logs: each prints `ELECTED <fence> <t>` once its
//! campaign returns and `LOST <fence> <t>` before it resigns or when its loss signal fires
//! (dated at the lease's deadline when the lease ended); a killed leader's hold is taken to
//! end at its kill. Every one of those times is no later than the end of the hold at the
//! server, and `ELECTED` no earlier than the grant, so a logged hold longer than 100 ms
//! was longer than 100 ms. Times are `CLOCK_MONOTONIC`, the same in every process.
//!
//! Checked, for each follower: the leaders it yields have strictly increasing fences; every
//! leader that held for more than 100 ms is among them, under its identity; every leader it
//! yields is a candidate's, logged, or of a candidate killed before it could log.
//!
//! The candidates are this test binary, started with `REDIS_LOCK_ELECTION_CANDIDATE` set, as
//! `tests/exclusion/` starts its workers.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

const CANDIDATE_ENV: &str = "REDIS_LOCK_ELECTION_CANDIDATE";
const KEY: &str = "churn:leader";
const TTL: Duration = Duration::from_millis(300);
const CANDIDATES: usize = 3;
const RUN_FOR: Duration = Duration::from_secs(20);
/// A candidate's last campaign (1 s) and hold (700 ms), and its exit.
const GRACE: Duration = Duration::from_secs(5);
/// Leaders that held longer than this must all be seen.
const MUST_SEE: f64 = 100.0;

/// `CLOCK_MONOTONIC` in milliseconds: one clock for every process of the machine.
fn mono_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Not a test of its own: a candidate's entry point in a process the churn test started.
#[test]
fn election_candidate_entry() {
    let Ok(args) = std::env::var(CANDIDATE_ENV) else {
        return;
    };
    let args: Vec<&str> = args.split_whitespace().collect();
    let [url, id, ms] = args[..] else {
        panic!("candidate arguments: url id duration-ms: {args:?}");
    };
    candidate(url, id, Duration::from_millis(ms.parse().unwrap()));
}

fn candidate(url: &str, id: &str, run_for: Duration) {
    let client = redis::Client::open(url).unwrap();
    let keeping = Election::new(client, KEY)
        .with_identity(id)
        .ttl(TTL)
        .wait(Duration::from_secs(1));
    // The same candidate (a clone), whose lease ends unless extended.
    let lapsing = keeping.clone().no_keepalive();
    let (i0, m0) = (Instant::now(), mono_ms());
    let at = |i: Instant| m0 + (i - i0).as_secs_f64() * 1e3;
    let end = Instant::now() + run_for;
    while Instant::now() < end {
        let lapse = rand::random_bool(0.15);
        let election = if lapse { &lapsing } else { &keeping };
        let leadership = match election.campaign() {
            Ok(l) => l,
            Err(Error::Timeout) => continue,
            Err(e) => {
                eprintln!("{id}: campaign: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let fence = leadership.fence();
        println!("ELECTED {fence} {:.3}", mono_ms());
        let signal = leadership.signal();
        let hold = Duration::from_millis(rand::random_range(30..700));
        match signal.wait_timeout(if lapse { Duration::MAX } else { hold }) {
            Some(reason) => {
                let lost = at(signal.lost_at().unwrap());
                println!("LOST {fence} {lost:.3} {reason}");
                drop(leadership);
            }
            None => {
                println!("LOST {fence} {:.3} resigned", mono_ms());
                let _ = leadership.resign();
            }
        }
        // Now and then a rest long enough for the office to fall vacant.
        let rest = if rand::random_bool(0.6) {
            300..1500
        } else {
            0..30
        };
        thread::sleep(Duration::from_millis(rand::random_range(rest)));
    }
}

struct Candidate {
    id: String,
    child: Child,
}

/// One leadership, from a candidate's log.
#[derive(Debug)]
struct Term {
    id: String,
    fence: u64,
    elected: f64,
    /// Its end, or the candidate's kill.
    lost: f64,
    killed: bool,
}

impl Term {
    fn held(&self) -> f64 {
        self.lost - self.elected
    }
}

struct Candidates {
    url: String,
    end: Instant,
    live: Vec<Candidate>,
    next: usize,
    /// Candidates killed (`kill -9`), at when.
    killed: HashMap<String, f64>,
    /// What each candidate printed.
    logs: HashMap<String, String>,
}

impl Candidates {
    fn spawn(&mut self) {
        self.next += 1;
        let id = format!("cand-{}", self.next);
        let left = self.end.saturating_duration_since(Instant::now());
        let args = format!("{} {id} {}", self.url, left.as_millis().max(1));
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "churn::election_candidate_entry",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CANDIDATE_ENV, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn candidate");
        self.live.push(Candidate { id, child });
    }

    /// `kill -9` of the candidate at `i`, and a new one in its place.
    fn kill_and_replace(&mut self, i: usize) {
        let mut c = self.live.swap_remove(i);
        c.child.kill().expect("kill -9");
        self.killed.insert(c.id.clone(), mono_ms());
        self.reap(c);
        self.spawn();
    }

    fn reap(&mut self, mut c: Candidate) {
        let _ = c.child.wait();
        let mut out = String::new();
        let _ = c
            .child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out);
        self.logs.insert(c.id, out);
    }

    /// Waits for the candidates to finish; kills those still running at `until`.
    fn finish(&mut self, until: Instant) {
        while let Some(mut c) = self.live.pop() {
            while c.child.try_wait().expect("try_wait").is_none() && Instant::now() < until {
                thread::sleep(Duration::from_millis(20));
            }
            if c.child.try_wait().expect("try_wait").is_none() {
                let _ = c.child.kill();
                self.killed.insert(c.id.clone(), mono_ms());
            }
            self.reap(c);
        }
    }

    /// The leaderships in the logs.
    fn terms(&self) -> Vec<Term> {
        let mut terms = Vec::new();
        for (id, log) in &self.logs {
            let mut open: Option<(u64, f64)> = None;
            // (After libtest's `test churn::election_candidate_entry ... ` on the same line.)
            for line in log.lines() {
                let event = ["ELECTED ", "LOST "]
                    .iter()
                    .find_map(|tag| Some(line[line.find(tag)?..].split_whitespace()));
                let Some(mut fields) = event else { continue };
                let (Some(what), Some(fence), Some(t)) = (
                    fields.next(),
                    fields.next().and_then(|f| f.parse::<u64>().ok()),
                    fields.next().and_then(|t| t.parse::<f64>().ok()),
                ) else {
                    panic!("{id}: a malformed line {line:?}");
                };
                match (what, open.take()) {
                    ("ELECTED", None) => open = Some((fence, t)),
                    ("LOST", Some((f, elected))) if f == fence => terms.push(Term {
                        id: id.clone(),
                        fence,
                        elected,
                        lost: t,
                        killed: false,
                    }),
                    other => panic!("{id}: a log out of order at {line:?}: {other:?}"),
                }
            }
            if let Some((fence, elected)) = open {
                let lost = *self
                    .killed
                    .get(id)
                    .unwrap_or_else(|| panic!("{id} elected under {fence}, never lost"));
                terms.push(Term {
                    id: id.clone(),
                    fence,
                    elected,
                    lost,
                    killed: true,
                });
            }
        }
        terms.sort_by_key(|t| t.fence);
        terms
    }
}

impl Drop for Candidates {
    fn drop(&mut self) {
        for c in &mut self.live {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

/// What one follower saw: (when, the change), and how many errors.
#[derive(Default)]
struct Seen {
    changes: Vec<(f64, Option<Leader>)>,
    errors: usize,
}

impl Seen {
    fn record(&mut self, item: Change) {
        match item {
            Ok(change) => self.changes.push((mono_ms(), change)),
            Err(_) => self.errors += 1,
        }
    }

    fn leaders(&self) -> impl Iterator<Item = &Leader> {
        self.changes.iter().filter_map(|(_, l)| l.as_ref())
    }
}

/// Kills the connections blocked in `LOCK.OBSERVE`; how many.
fn kill_observers(server: &Server) -> usize {
    let mut con = server.conn();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    list.lines()
        .filter(|l| l.contains(" cmd=lock.observe"))
        .filter_map(|l| {
            l.strip_prefix("id=")?
                .split(' ')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .filter(|id| {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(*id)
                .query::<i64>(&mut con)
                .is_ok_and(|n| n == 1)
        })
        .count()
}

/// The checks of one follower against the logs; the problems found, and the holds it saw.
fn check(name: &str, seen: &Seen, terms: &[Term], killed: &HashMap<String, f64>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut top = 0;
    for leader in seen.leaders() {
        if leader.fence <= top {
            problems.push(format!(
                "{name}: fence {} after {top}: not increasing",
                leader.fence
            ));
        }
        top = top.max(leader.fence);
    }
    let yielded: HashSet<(&str, u64)> = seen
        .leaders()
        .map(|l| (l.identity.as_str(), l.fence))
        .collect();
    for t in terms.iter().filter(|t| t.held() > MUST_SEE) {
        if !yielded.contains(&(t.id.as_str(), t.fence)) {
            problems.push(format!("{name}: missed {t:?} (held {:.1} ms)", t.held()));
        }
    }
    let logged: HashSet<u64> = terms.iter().map(|t| t.fence).collect();
    for l in seen.leaders() {
        if !logged.contains(&l.fence) && !killed.contains_key(&l.identity) {
            problems.push(format!("{name}: {l:?} is in no candidate's log"));
        }
    }
    problems
}

/// The churn run: the followers must see every leader that held for more than 100 ms, in
/// fence order.
#[test]
fn followers_under_churn() {
    if std::env::var(CANDIDATE_ENV).is_ok() {
        return;
    }
    let started = Instant::now();
    let server = Server::start();
    let mut fleet = Candidates {
        url: server.url(),
        end: Instant::now() + RUN_FOR,
        live: Vec::new(),
        next: 0,
        killed: HashMap::new(),
        logs: HashMap::new(),
    };
    for _ in 0..CANDIDATES {
        fleet.spawn();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let blocking_seen = Arc::new(Mutex::new(Seen::default()));
    let async_seen = Arc::new(Mutex::new(Seen::default()));
    // Observes short enough to time out under a leader now and then.
    let blocking = thread::spawn({
        let observer = Election::new(server.client(), KEY)
            .observe_timeout(Duration::from_millis(250))
            .observe();
        let (stop, seen) = (Arc::clone(&stop), Arc::clone(&blocking_seen));
        move || {
            for item in observer {
                seen.lock().unwrap().record(item);
                if stop.load(Ordering::SeqCst) {
                    return;
                }
            }
        }
    });
    let asynchronous = thread::spawn({
        let election =
            aio::Election::new(server.client_resp3(), KEY).observe_timeout(Duration::from_secs(2));
        let (stop, seen) = (Arc::clone(&stop), Arc::clone(&async_seen));
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut observer = election.observe();
                while !stop.load(Ordering::SeqCst) {
                    // Cut short and taken up again: nothing may be lost in between.
                    let next =
                        tokio::time::timeout(Duration::from_millis(300), observer.next_change());
                    if let Ok(item) = next.await {
                        seen.lock().unwrap().record(item);
                    }
                }
            })
        }
    });

    let probe = Election::new(server.client(), KEY).command_timeout(Duration::from_secs(2));
    let (mut leader_kills, mut other_kills, mut connection_kills) = (0, 0, 0);
    let mut action = 0;
    while Instant::now() + Duration::from_secs(1) < fleet.end {
        thread::sleep(Duration::from_millis(rand::random_range(300..900)));
        action += 1;
        // Every fifth action kills the followers' connections; the others kill a candidate,
        // the leader two times in three.
        if action % 5 == 0 {
            connection_kills += kill_observers(&server);
            continue;
        }
        let leader = probe.leader().ok().flatten();
        let of_leader = leader.and_then(|l| fleet.live.iter().position(|c| c.id == l.identity));
        match of_leader {
            Some(i) if action % 3 != 0 => {
                fleet.kill_and_replace(i);
                leader_kills += 1;
            }
            _ => {
                fleet.kill_and_replace(rand::random_range(0..fleet.live.len()));
                other_kills += 1;
            }
        }
    }
    let churned = started.elapsed();
    fleet.finish(fleet.end + GRACE);
    // The last leader's end is seen too.
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    // With nothing changing, a blocking observer yields nothing: an error wakes it.
    while !(blocking.is_finished() && asynchronous.is_finished()) {
        kill_observers(&server);
        thread::sleep(Duration::from_millis(50));
    }
    blocking.join().unwrap();
    asynchronous.join().unwrap();

    let terms = fleet.terms();
    let (blocking_seen, async_seen) = (blocking_seen.lock().unwrap(), async_seen.lock().unwrap());
    let must: Vec<&Term> = terms.iter().filter(|t| t.held() > MUST_SEE).collect();
    println!(
        "churn: {} candidates ({CANDIDATES} at a time), ttl {TTL:?}, {churned:.1?} of churn, {:.1?} in all",
        fleet.next,
        started.elapsed()
    );
    println!(
        "  {} leaders in the logs ({} ended by a kill), {} held > {MUST_SEE} ms; kill -9: {} of leaders, {} of others; follower connections killed: {connection_kills}",
        terms.len(),
        terms.iter().filter(|t| t.killed).count(),
        must.len(),
        leader_kills,
        other_kills,
    );
    let mut problems = Vec::new();
    for (name, seen) in [("blocking", &*blocking_seen), ("async", &*async_seen)] {
        let fences: HashSet<u64> = seen.leaders().map(|l| l.fence).collect();
        let held_seen: Vec<f64> = terms
            .iter()
            .filter(|t| fences.contains(&t.fence))
            .map(Term::held)
            .collect();
        let short_missed = terms
            .iter()
            .filter(|t| t.held() <= MUST_SEE && !fences.contains(&t.fence))
            .count();
        println!(
            "  {name} follower: {} changes ({} leaders, {} vacancies), {} errors; held by the leaders it saw: min {:.1} ms, max {:.1} ms; missed: {} of the {} that held <= {MUST_SEE} ms, {} of those that held longer",
            seen.changes.len(),
            seen.leaders().count(),
            seen.changes.len() - seen.leaders().count(),
            seen.errors,
            held_seen.iter().copied().fold(f64::INFINITY, f64::min),
            held_seen.iter().copied().fold(0.0, f64::max),
            short_missed,
            terms.len() - must.len(),
            must.iter().filter(|t| !fences.contains(&t.fence)).count(),
        );
        problems.extend(check(name, seen, &terms, &fleet.killed));
    }
    for p in problems.iter().take(20) {
        println!("  PROBLEM {p}");
    }
    assert!(problems.is_empty(), "{} problems", problems.len());
    assert!(
        must.len() >= 20,
        "too few leaders held long: {}",
        must.len()
    );
    assert!(
        leader_kills >= 3 && terms.iter().any(|t| t.killed),
        "too few leaders killed: {leader_kills}"
    );
    assert!(connection_kills >= 1, "no follower connection was killed");
    assert!(blocking_seen.errors >= 1 && async_seen.errors >= 1);
}
