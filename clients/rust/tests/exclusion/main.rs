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
//!
//! Files: `fleet` (the worker processes: starting, killing, pausing them), `evidence` (the
//! checker of the logs); here the two tests and the worker's entry point.

#[path = "../support/mod.rs"]
mod support;

mod evidence;
mod fleet;

use evidence::*;
use fleet::*;

#[allow(dead_code)] // its `main`: this binary calls `run` itself
#[path = "../../examples/exclusion_worker.rs"]
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
