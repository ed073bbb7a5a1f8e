//! The failover harness of issue 26: real Redis Sentinel in front of a master and two
//! replicas with the module loaded, clients looping acquire → guarded `RPUSH` of their
//! fence → extend → release through the Rust client library, a fault on the current master
//! every few seconds, and at the end the recorded history judged by the checker
//! (`redis_lock_failover::check`), in each mode asked for, one after another or (`--parallel`)
//! at the same time. See failover/README.md for the options and the rules.
//!
//! Exits 1 when the harness itself fails (servers that do not start, no stable master at the
//! end, a client thread that panics), 3 when a mode of `--require-safe` shows a violation or
//! under half of plain's grants, 2 on a bad flag: violations elsewhere (plain's above all)
//! are what is measured, not a failure.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_failover::args::Args;
use redis_lock_failover::faults::Faults;
use redis_lock_failover::history::{History, Node};
use redis_lock_failover::mode::Mode;
use redis_lock_failover::report;
use redis_lock_failover::schedule::Together;
use redis_lock_failover::sentinel::{poll_sentinels, wait_ready};
use redis_lock_failover::servers::Servers;
use redis_lock_failover::shared::Shared;
use redis_lock_failover::summary::{gate, table, Summary};
use redis_lock_failover::workload::start_clients;

/// How long a data server must stay up after its start before the run counts on it: one
/// whose module fails to load (a bad value for a load-time argument) exits within this. An
/// argument the module does not know is ignored, and caught by `check_module_args`.
const START_CHECK: Duration = Duration::from_secs(1);

/// One mode's run, `slot` of `together`: servers up, clients and the poller started (with
/// the other modes of `together`), the faults, then the end (see
/// `redis_lock_failover::report`); the servers are killed on every way out, and `together`
/// waits for this mode no longer once it returns.
fn run(args: Args, together: &Together, slot: usize) -> Result<Summary, String> {
    struct Leave<'a>(&'a Together, usize);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.leave(self.1);
        }
    }
    let _leave = Leave(together, slot);
    let began = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let base = root.join("target/failover").join(format!(
        "run-{}-{}",
        std::process::id(),
        args.mode.name()
    ));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let mut servers = Servers::start(&base, &args, slot)?;
    let data: Vec<Node> = servers.data.iter().map(|p| p.port).collect();
    let sentinels = servers.sentinel_ports();
    println!(
        "failover: mode {}, seed {}, {} clients on {} keys, {} s; master :{}, replicas :{} :{}, \
         sentinels :{} :{} :{}; files in {}",
        args.mode.name(),
        args.seed,
        args.clients,
        args.keys,
        args.seconds,
        data[0],
        data[1],
        data[2],
        sentinels[0],
        sentinels[1],
        sentinels[2],
        base.display()
    );
    servers.check_started(START_CHECK)?;
    wait_ready(&sentinels, &data)?;
    servers.check_module_args()?;
    println!(
        "{}ready after {:.1} s",
        if args.parallel {
            format!("[{}] ", args.mode.name())
        } else {
            String::new()
        },
        began.elapsed().as_secs_f64()
    );
    together.ready(slot);

    let shared = Arc::new(Shared::new(sentinels.clone(), args.clone()));
    let poller = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || poll_sentinels(shared))
    };
    let clients = start_clients(&shared);
    let faults = Faults::run(&mut servers, &shared, together, slot)?;
    shared.stop.store(true, Ordering::SeqCst);
    let mut history = History::default();
    for c in clients {
        history.ops.extend(
            c.join()
                .map_err(|_| "a client thread panicked".to_string())?,
        );
    }
    let clients_done = shared.now();
    let master = report::settle(&sentinels, &data)?;
    poller
        .join()
        .map_err(|_| "the Sentinel poller panicked".to_string())?;
    report::read_final_logs(master, args.keys, &mut history)?;
    history.observations = shared.take_observations();
    drop(servers);

    report::check_and_print(
        &history,
        &faults,
        &base,
        master,
        clients_done,
        args.mode,
        began,
    )
}

/// Every mode asked for, one after another (each with a `Together` of its own) or, with
/// `--parallel`, each in a thread of its own, started and stopped together; a mode whose run
/// fails is reported and left out.
fn run_all(args: &Args) -> Vec<(Mode, Result<Summary, String>)> {
    let one = |mode: Mode, together: &Together, slot: usize| {
        let result = run(
            Args {
                mode,
                ..args.clone()
            },
            together,
            slot,
        );
        if let Err(e) = &result {
            eprintln!("failover: harness error in mode {}: {e}", mode.name());
        }
        (mode, result)
    };
    if !args.parallel {
        return args
            .modes
            .iter()
            .map(|&mode| one(mode, &Together::new(1), 0))
            .collect();
    }
    let together = Together::new(args.modes.len());
    thread::scope(|s| {
        let runs: Vec<_> = args
            .modes
            .iter()
            .enumerate()
            .map(|(slot, &mode)| {
                let together = &together;
                (mode, s.spawn(move || one(mode, together, slot)))
            })
            .collect();
        runs.into_iter()
            .map(|(mode, h)| {
                h.join().unwrap_or_else(|_| {
                    eprintln!("failover: mode {} panicked", mode.name());
                    (mode, Err("panicked".into()))
                })
            })
            .collect()
    })
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let results = run_all(&args);
    let done: Vec<(Mode, &Summary)> = results
        .iter()
        .filter_map(|(m, r)| r.as_ref().ok().map(|s| (*m, s)))
        .collect();
    let failed = done.len() < results.len();
    let bound = match args.faults_per_kind {
        0 => format!("{} s of faults", args.seconds),
        n => format!("{n} faults of each kind or {} s", args.seconds),
    };
    if args.modes.len() > 1 {
        println!(
            "\n{}, seed {}, {bound}{}; took {:.1} s:\n\n{}",
            if args.parallel {
                "modes at the same time"
            } else {
                "modes one after another"
            },
            args.seed,
            if failed {
                " (failed modes left out)"
            } else {
                ""
            },
            began.elapsed().as_secs_f64(),
            table(&done)
        );
    }
    let mut unsafe_modes = false;
    if !args.require_safe.is_empty() {
        let names: Vec<&str> = args.require_safe.iter().map(|m| m.name()).collect();
        let failures = gate(&done, &args.require_safe, args.faults_per_kind);
        if !done.iter().any(|(m, _)| *m == Mode::Plain) {
            println!("--require-safe: plain not in the table, grants not compared");
        }
        if failures.is_empty() {
            println!("--require-safe {}: safe", names.join(","));
        } else {
            for f in &failures {
                println!("--require-safe: {f}");
            }
            unsafe_modes = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else if unsafe_modes {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
