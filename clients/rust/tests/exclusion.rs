//! Mutual exclusion through both libraries (issue 24): 8 Rust and 8 Python worker processes
//! on 3 keys of one server, each looping acquire → guarded writes → release with a 600 ms
//! lease, while the test `kill -9`s workers (and starts new ones) and SIGSTOPs holders past
//! the end of their lease. The evidence is in Redis: every guarded write appends
//! `"<fence> <worker> <seq>"` to the key's log, and the checker reads the logs afterwards.
//!
//! The workers are `clients/rust/examples/exclusion_worker.rs` (included here as a module:
//! this test binary runs it when started with `REDIS_LOCK_EXCLUSION_WORKER` set, so that
//! `cargo test --test exclusion` builds nothing else) and
//! `clients/python/tests/exclusion_worker.py`, run with the interpreter of the venv that
//! `clients/python/run-tests.sh 8.1.0` makes (created here if missing; without python3 the
//! Python half is skipped, with a message) and the library's source on `PYTHONPATH`.

mod support;

#[allow(dead_code)] // its `main`: this binary calls `run` itself
#[path = "../examples/exclusion_worker.rs"]
mod worker;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lock_client::{Mode, Mutex};
use support::Server;

/// Set (to the worker's arguments) in the environment of a Rust worker process.
const WORKER_ENV: &str = "REDIS_LOCK_EXCLUSION_WORKER";
const TTL: Duration = Duration::from_millis(600);
const KEYS: u32 = 3;
const PER_LANGUAGE: usize = 8;
const RUN_FOR: Duration = Duration::from_secs(22);
/// How long after the end a worker may take to finish its last hold (a wait of 2 s, a lease)
/// and print its summary.
const GRACE: Duration = Duration::from_secs(8);
/// Guarded log entries each language must have made in the main run.
const MIN_ENTRIES_PER_LANGUAGE: usize = 300;

/// Not a test of its own: the Rust worker's entry point in a process this test started.
/// Without `REDIS_LOCK_EXCLUSION_WORKER` it does nothing.
#[test]
fn exclusion_worker_entry() {
    let Ok(args) = std::env::var(WORKER_ENV) else {
        return;
    };
    let args = worker::Args::parse(args.split_whitespace().map(String::from)).expect("arguments");
    match worker::run(&args) {
        Ok(counts) => println!("{}", counts.line(&args.id)),
        Err(e) => panic!("worker {}: {e}", args.id),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Lang {
    Rust,
    Python,
}

impl Lang {
    fn prefix(self) -> &'static str {
        match self {
            Lang::Rust => "rs",
            Lang::Python => "py",
        }
    }

    fn of(id: &str) -> Option<Lang> {
        match id.split('-').next() {
            Some("rs") => Some(Lang::Rust),
            Some("py") => Some(Lang::Python),
            _ => None,
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the client's test venv (redis-py 8.1.0), made by `run-tests.sh` if missing;
/// `Err(why)` when there is no python3 to make it with. Looked for once per process.
fn python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON.get_or_init(find_python).clone()
}

fn find_python() -> Result<PathBuf, String> {
    let venv_python = repo().join("target/clients/python-redis-8.1.0/bin/python");
    if venv_python.exists() {
        return Ok(venv_python);
    }
    let probe = Command::new("python3").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return Err("python3 is unavailable".into());
    }
    let made = Command::new("bash")
        .arg(repo().join("clients/python/run-tests.sh"))
        .args(["--venv-only", "8.1.0"])
        .stdout(Stdio::null())
        .status();
    if venv_python.exists() {
        Ok(venv_python)
    } else {
        Err(format!(
            "clients/python/run-tests.sh did not make {} ({made:?})",
            venv_python.display()
        ))
    }
}

struct Worker {
    id: String,
    lang: Lang,
    child: Child,
    /// Paused once already (such workers are neither killed nor paused again, so that each
    /// paused holder's summary is read at the end).
    paused: bool,
    rogue: Option<&'static str>,
}

/// The workers of one run, all ending at `end`.
struct Fleet {
    port: u16,
    python: Option<PathBuf>,
    keys: u32,
    end: Instant,
    live: Vec<Worker>,
    next: HashMap<Lang, usize>,
    /// Summary lines of the workers that finished, by id.
    summaries: HashMap<String, HashMap<String, u64>>,
    killed: HashMap<Lang, usize>,
    hung: Vec<String>,
}

impl Fleet {
    fn new(server: &Server, python: Option<PathBuf>, keys: u32, run_for: Duration) -> Fleet {
        Fleet {
            port: server.port,
            python,
            keys,
            end: Instant::now() + run_for,
            live: Vec::new(),
            next: HashMap::new(),
            summaries: HashMap::new(),
            killed: HashMap::new(),
            hung: Vec::new(),
        }
    }

    /// Starts a worker of `lang` (half of them on RESP3) for the time left.
    fn spawn(&mut self, lang: Lang, rogue: Option<&'static str>) {
        let n = self.next.entry(lang).or_insert(0);
        *n += 1;
        let id = format!("{}-{n}", lang.prefix());
        let resp3 = n.is_multiple_of(2);
        let left = self.end.saturating_duration_since(Instant::now());
        let mut args = vec![
            "--id".to_string(),
            id.clone(),
            "--duration-ms".into(),
            left.as_millis().max(1).to_string(),
            "--keys".into(),
            self.keys.to_string(),
            "--ttl-ms".into(),
            TTL.as_millis().to_string(),
            "--wait-ms".into(),
            "2000".into(),
        ];
        if let Some(mode) = rogue {
            args.extend(["--rogue".into(), mode.into()]);
        }
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let mut cmd = match lang {
            Lang::Rust => {
                let url = if resp3 {
                    format!("{url}?protocol=resp3")
                } else {
                    url
                };
                args.extend(["--url".into(), url]);
                let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
                cmd.args([
                    "exclusion_worker_entry",
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(WORKER_ENV, args.join(" "));
                cmd
            }
            Lang::Python => {
                let python = self.python.as_ref().expect("python");
                args.extend([
                    "--url".into(),
                    url,
                    "--protocol".into(),
                    if resp3 { "3" } else { "2" }.into(),
                ]);
                let mut cmd = Command::new(python);
                cmd.arg("-u")
                    .arg(repo().join("clients/python/tests/exclusion_worker.py"))
                    .args(&args)
                    // The library as it is in the tree, not as last installed into the venv.
                    .env("PYTHONPATH", repo().join("clients/python/src"))
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                cmd
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        self.live.push(Worker {
            id,
            lang,
            child,
            paused: false,
            rogue,
        });
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.live.iter().position(|w| w.id == id)
    }

    /// `kill -9` of the worker at `i`, and a new one of its language in its place.
    fn kill_and_replace(&mut self, i: usize) -> String {
        let mut w = self.live.swap_remove(i);
        w.child.kill().expect("kill -9");
        let _ = w.child.wait();
        *self.killed.entry(w.lang).or_insert(0) += 1;
        self.spawn(w.lang, None);
        w.id
    }

    /// Reaps the workers that exited, keeping their summaries; kills those still running
    /// at `until`. Waits for all.
    fn finish(&mut self, until: Instant) {
        while !self.live.is_empty() {
            let mut i = 0;
            while i < self.live.len() {
                let done = self.live[i].child.try_wait().expect("try_wait").is_some();
                if done || Instant::now() >= until {
                    let mut w = self.live.swap_remove(i);
                    if !done {
                        self.hung.push(w.id.clone());
                        let _ = w.child.kill();
                    }
                    let status = w.child.wait().expect("wait");
                    let mut out = String::new();
                    let _ = w
                        .child
                        .stdout
                        .take()
                        .expect("stdout")
                        .read_to_string(&mut out);
                    // (After libtest's `test exclusion_worker_entry ... ` on the same line.)
                    let summary = out
                        .lines()
                        .find_map(|l| Some(&l[l.find("SUMMARY ")? + 8..]));
                    match summary {
                        Some(line) => {
                            let fields = line
                                .split_whitespace()
                                .filter_map(|kv| kv.split_once('='))
                                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                                .collect();
                            self.summaries.insert(w.id.clone(), fields);
                        }
                        None if done => panic!("{} exited ({status}) without a summary", w.id),
                        None => {}
                    }
                } else {
                    i += 1;
                }
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// The sum of a summary field over the finished workers of `lang` (all with `None`).
    fn total(&self, field: &str, lang: Option<Lang>) -> u64 {
        self.summaries
            .iter()
            .filter(|(id, _)| lang.is_none() || Lang::of(id) == lang)
            .map(|(_, s)| s.get(field).copied().unwrap_or(0))
            .sum()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for w in &mut self.live {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child of this process that has not been reaped.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// The worker that holds `{res:n}:lock` now, by the lock's fence and the owner it wrote under
/// that fence: (its id, the fence).
fn holder_of(server: &Server, con: &mut redis::Connection, n: u32) -> Option<(String, u64)> {
    let owner: Option<String> = redis::cmd("GET")
        .arg(format!("{{res:{n}}}:owner"))
        .query(con)
        .ok()?;
    let (fence, id) = owner?
        .split_once(' ')
        .map(|(f, id)| (f.parse().ok(), id.to_string()))?;
    let info = Mutex::new(server.client(), format!("{{res:{n}}}:lock"))
        .info()
        .ok()??;
    (info.mode == Mode::Exclusive && info.holder.is_some() && Some(info.fence) == fence)
        .then_some((id, info.fence))
}

/// What the logs show.
#[derive(Debug, Default)]
struct Evidence {
    entries: usize,
    by_lang: HashMap<Lang, usize>,
    by_worker: HashMap<String, u64>,
    fences: usize,
    /// An entry under a fence lower than one before it in the same log.
    decreases: usize,
    /// An entry under a fence that another worker wrote under first.
    shared: usize,
    /// A worker's entries out of its own order (a duplicate or a reordering).
    reordered: usize,
    /// Malformed entries, or an owner key that contradicts its log.
    other: usize,
    /// What each violation is, and whose entry it was.
    violations: Vec<(String, String)>,
}

impl Evidence {
    fn violated(&mut self, writer: &str, what: String) {
        self.violations.push((writer.to_string(), what));
    }

    fn count(&self) -> usize {
        self.violations.len()
    }
}

/// Reads `{res:n}:log` and `{res:n}:owner` for every key and checks them: in each log the
/// fences never decrease, the entries under one fence are one worker's, and each worker's
/// entries keep its order; the owner key is the last hold's.
fn check(con: &mut redis::Connection, keys: u32) -> Evidence {
    let mut ev = Evidence::default();
    for n in 0..keys {
        let log_key = format!("{{res:{n}}}:log");
        let log: Vec<String> = redis::cmd("LRANGE")
            .arg(&log_key)
            .arg(0)
            .arg(-1)
            .query(con)
            .expect("LRANGE");
        let mut max = 0u64;
        let mut writer_of: HashMap<u64, String> = HashMap::new();
        let mut last_seq: HashMap<String, u64> = HashMap::new();
        for (i, entry) in log.iter().enumerate() {
            let parts: Vec<&str> = entry.split(' ').collect();
            let (Some(fence), Some(seq), [_, id, _]) = (
                parts.first().and_then(|f| f.parse::<u64>().ok()),
                parts.get(2).and_then(|s| s.parse::<u64>().ok()),
                parts.as_slice(),
            ) else {
                ev.other += 1;
                ev.violated("?", format!("{log_key}[{i}] malformed: {entry:?}"));
                continue;
            };
            let id = id.to_string();
            ev.entries += 1;
            *ev.by_worker.entry(id.clone()).or_insert(0) += 1;
            if let Some(lang) = Lang::of(&id) {
                *ev.by_lang.entry(lang).or_insert(0) += 1;
            }
            if fence < max {
                ev.decreases += 1;
                ev.violated(
                    &id,
                    format!("{log_key}[{i}] {entry:?}: fence {fence} after fence {max}"),
                );
            }
            max = max.max(fence);
            let first = writer_of.entry(fence).or_insert_with(|| id.clone());
            if *first != id {
                ev.shared += 1;
                let what = format!("{log_key}[{i}] {entry:?}: fence {fence} was {first}'s");
                ev.violated(&id, what);
            }
            let before = last_seq.insert(id.clone(), seq).unwrap_or(0);
            if seq <= before {
                ev.reordered += 1;
                ev.violated(
                    &id,
                    format!("{log_key}[{i}] {entry:?}: after {id}'s seq {before}"),
                );
            }
        }
        ev.fences += writer_of.len();
        // Every hold writes the owner before its log entries, and guarded writes land only
        // under the key's newest fence: the owner's fence is at least the log's last one, and
        // at that fence it names the same worker.
        let owner: Option<String> = redis::cmd("GET")
            .arg(format!("{{res:{n}}}:owner"))
            .query(con)
            .expect("GET");
        if let Some(owner) = owner {
            let parsed = owner
                .split_once(' ')
                .and_then(|(f, id)| Some((f.parse::<u64>().ok()?, id.to_string())));
            let consistent = parsed.as_ref().is_some_and(|(fence, id)| {
                *fence > max || (*fence == max && writer_of.get(&max) == Some(id))
            });
            if !consistent && (max > 0 || parsed.is_none()) {
                ev.other += 1;
                ev.violated(
                    "?",
                    format!("{{res:{n}}}:owner {owner:?} against the log's last fence {max}"),
                );
            }
        }
    }
    ev
}

/// The main run: 16 workers, kills and pauses, then the evidence.
#[test]
fn mutual_exclusion_through_both_libraries_under_kills_and_pauses() {
    let started = Instant::now();
    let server = Server::start();
    let python = python()
        .map_err(|why| {
            eprintln!(
                "exclusion: {why}: the Python workers are SKIPPED; running the Rust ones only"
            )
        })
        .ok();
    let langs: Vec<Lang> = if python.is_some() {
        vec![Lang::Rust, Lang::Python]
    } else {
        vec![Lang::Rust]
    };
    let mut fleet = Fleet::new(&server, python, KEYS, RUN_FOR);
    for _ in 0..PER_LANGUAGE {
        for &lang in &langs {
            fleet.spawn(lang, None);
        }
    }
    let mut con = server.conn();
    let (mut holder_kills, mut other_kills) = (0, 0);
    // Holders paused past their lease: (worker, key, fence, whether another worker held the
    // key under a newer fence by the time it was resumed).
    let mut pauses: Vec<(String, u32, u64, bool)> = Vec::new();
    let mut action = 0u32;
    loop {
        sleep(Duration::from_millis(rand::random_range(600..1300)));
        if Instant::now() + Duration::from_secs(2) > fleet.end {
            break;
        }
        action += 1;
        // A holder of a random key, if one is found that may be touched.
        let first = rand::random_range(0..KEYS);
        let holder = (0..KEYS).find_map(|k| {
            let n = (first + k) % KEYS;
            let (id, fence) = holder_of(&server, &mut con, n)?;
            let i = fleet.index_of(&id)?;
            (!fleet.live[i].paused).then_some((i, n, fence))
        });
        if action % 2 == 1 {
            // kill -9: a holder (its lease must run out), every other time any worker.
            let target = holder.filter(|_| action % 4 == 1).or_else(|| {
                let eligible: Vec<usize> = (0..fleet.live.len())
                    .filter(|&i| !fleet.live[i].paused)
                    .collect();
                (!eligible.is_empty())
                    .then(|| (eligible[rand::random_range(0..eligible.len())], 0, 0))
            });
            if let Some((i, _, fence)) = target {
                fleet.kill_and_replace(i);
                if fence > 0 {
                    holder_kills += 1;
                } else {
                    other_kills += 1;
                }
            }
        } else if let Some((i, n, fence)) = holder {
            // SIGSTOP a holder past its lease's end; SIGCONT. It counts only if the worker
            // still held the lock under that fence once stopped.
            signal(&fleet.live[i].child, libc::SIGSTOP);
            sleep(Duration::from_millis(20));
            if holder_of(&server, &mut con, n).map(|(_, f)| f) != Some(fence) {
                signal(&fleet.live[i].child, libc::SIGCONT);
                continue;
            }
            sleep(TTL + Duration::from_millis(rand::random_range(300..700)));
            let taken = Mutex::new(server.client(), format!("{{res:{n}}}:lock"))
                .info()
                .ok()
                .flatten()
                .map(|info| info.fence);
            signal(&fleet.live[i].child, libc::SIGCONT);
            fleet.live[i].paused = true;
            pauses.push((
                fleet.live[i].id.clone(),
                n,
                fence,
                taken.is_some_and(|f| f > fence),
            ));
        }
    }
    let ran = started.elapsed();
    fleet.finish(fleet.end + GRACE);
    let ev = check(&mut con, KEYS);

    let kills: usize = fleet.killed.values().sum();
    println!(
        "exclusion: {} workers ({}) on {KEYS} keys, ttl {TTL:?}, {ran:.1?} of chaos, {:.1?} in all",
        fleet.next.values().sum::<usize>(),
        langs
            .iter()
            .map(|l| format!("{} {}", fleet.next[l], l.prefix()))
            .collect::<Vec<_>>()
            .join(" + "),
        started.elapsed(),
    );
    println!(
        "  logs: {} guarded entries under {} fences (rs {}, py {}); violations: {} (decreasing {}, shared fence {}, reordered {}, other {})",
        ev.entries,
        ev.fences,
        ev.by_lang.get(&Lang::Rust).unwrap_or(&0),
        ev.by_lang.get(&Lang::Python).unwrap_or(&0),
        ev.count(),
        ev.decreases,
        ev.shared,
        ev.reordered,
        ev.other,
    );
    for lang in &langs {
        let l = Some(*lang);
        println!(
            "  {} summaries of {} finished workers: holds {}, guarded writes accepted {}, FENCED refusals {}, holds lost {}, wait timeouts {}, errors {}",
            lang.prefix(),
            fleet.summaries.keys().filter(|id| Lang::of(id) == l).count(),
            fleet.total("holds", l),
            fleet.total("writes", l),
            fleet.total("fenced", l),
            fleet.total("lost", l),
            fleet.total("timeouts", l),
            fleet.total("errors", l),
        );
    }
    println!(
        "  kill -9: {kills} ({holder_kills} of holders, {other_kills} of any worker; rs {}, py {}); holders SIGSTOPped past their lease: {} ({} taken over meanwhile)",
        fleet.killed.get(&Lang::Rust).unwrap_or(&0),
        fleet.killed.get(&Lang::Python).unwrap_or(&0),
        pauses.len(),
        pauses.iter().filter(|p| p.3).count(),
    );
    for (id, n, fence, taken) in &pauses {
        let s = &fleet.summaries.get(id);
        println!(
            "    paused {id} holding {{res:{n}}}:lock under fence {fence}{}: fenced {}, lost {}",
            if *taken { ", taken over" } else { "" },
            s.map_or(0, |s| s["fenced"]),
            s.map_or(0, |s| s["lost"]),
        );
    }
    for (writer, what) in ev.violations.iter().take(20) {
        println!("  VIOLATION ({writer}): {what}");
    }

    assert!(
        fleet.hung.is_empty(),
        "workers still running {GRACE:?} after the end: {:?}",
        fleet.hung
    );
    assert_eq!(ev.count(), 0, "violations: {:?}", ev.violations);
    for lang in &langs {
        let entries = ev.by_lang.get(lang).copied().unwrap_or(0);
        assert!(
            entries >= MIN_ENTRIES_PER_LANGUAGE,
            "{} made {entries} guarded log entries",
            lang.prefix()
        );
        // Every worker that finished without an error reported exactly what landed.
        for (id, s) in fleet
            .summaries
            .iter()
            .filter(|(id, _)| Lang::of(id) == Some(*lang))
        {
            if s["errors"] == 0 {
                let landed = ev.by_worker.get(id).copied().unwrap_or(0);
                assert_eq!(
                    landed, s["pushes"],
                    "{id}: entries in the logs vs its pushes"
                );
            }
        }
    }
    assert!(
        kills >= 3 && holder_kills >= 1,
        "too few kills: {kills} ({holder_kills} of holders)"
    );
    assert!(
        pauses.len() >= 2,
        "too few holders paused: {}",
        pauses.len()
    );
    // A holder paused past its lease finds its hold lost when it wakes, and a guarded write
    // it makes then is refused (it writes right after a short sleep, where a pause lands).
    for (id, ..) in &pauses {
        let s = fleet
            .summaries
            .get(id)
            .unwrap_or_else(|| panic!("{id}: no summary"));
        assert!(
            s["lost"] >= 1,
            "{id} was paused past its lease but lost no hold: {s:?}"
        );
    }
    assert!(
        fleet.total("fenced", None) >= 1,
        "no guarded write was refused"
    );
}

/// The checker finds violations when there are some: a short run on one key with two honest
/// workers beside a rogue that appends under its old fence after a newer one (a plain RPUSH,
/// no guard) and one that appends under another worker's fence without holding the lock.
#[test]
fn the_checker_catches_planted_violations() {
    let server = Server::start();
    let python = python().ok();
    let mut fleet = Fleet::new(&server, python.clone(), 1, Duration::from_millis(3500));
    let other = if python.is_some() {
        Lang::Python
    } else {
        Lang::Rust
    };
    fleet.spawn(Lang::Rust, None);
    fleet.spawn(other, None);
    fleet.spawn(Lang::Rust, Some("stale"));
    fleet.spawn(other, Some("intrude"));
    let rogues: HashMap<String, &str> = fleet
        .live
        .iter()
        .filter_map(|w| Some((w.id.clone(), w.rogue?)))
        .collect();
    fleet.finish(fleet.end + GRACE);
    let ev = check(&mut server.conn(), 1);
    println!(
        "planted: {} entries, {} violations (decreasing {}, shared fence {}, reordered {}, other {}); rogue writes {:?}",
        ev.entries,
        ev.count(),
        ev.decreases,
        ev.shared,
        ev.reordered,
        ev.other,
        rogues
            .iter()
            .map(|(id, mode)| format!("{id} ({mode}) {}", fleet.summaries[id]["rogue"]))
            .collect::<Vec<_>>(),
    );
    for (writer, what) in ev.violations.iter().take(5) {
        println!("  VIOLATION ({writer}): {what}");
    }
    for (id, mode) in &rogues {
        assert!(
            fleet.summaries[id]["rogue"] >= 1,
            "{id} ({mode}) planted nothing"
        );
    }
    assert!(
        ev.decreases >= 1,
        "the stale writes were not caught: {ev:?}"
    );
    assert!(
        ev.shared >= 1,
        "the intruding writes were not caught: {ev:?}"
    );
    // And nothing but the planted writes was flagged.
    for (writer, what) in &ev.violations {
        assert!(
            rogues.contains_key(writer),
            "an honest write flagged: {what}"
        );
    }
}
