//! The failover harness of issue 26: real Redis Sentinel in front of a master and two
//! replicas with the module loaded, clients looping acquire → guarded `RPUSH` of their
//! fence → extend → release through the Rust client library, a fault on the current master
//! every few seconds, and at the end the recorded history judged by the checker
//! (`redis_lock_failover::check`). See failover/README.md for the options and the rules.
//!
//! Exits non-zero only when the harness itself fails (servers that do not start, no stable
//! master at the end, a client thread that panics): violations in plain mode are the
//! baseline being measured, not a failure.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use redis_lock_failover::args::Args;
use redis_lock_failover::check::{table, Report};
use redis_lock_failover::faults::Faults;
use redis_lock_failover::history::{History, Node};
use redis_lock_failover::report;
use redis_lock_failover::sentinel::{poll_sentinels, wait_ready};
use redis_lock_failover::servers::Servers;
use redis_lock_failover::shared::Shared;
use redis_lock_failover::workload::start_clients;

/// One run: servers up, clients and the poller started, the faults, then the end (see
/// `redis_lock_failover::report`); the servers are killed on every way out.
fn run(args: Args) -> Result<Report, String> {
    let began = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let base = root.join("target/failover").join(format!(
        "run-{}-{}",
        std::process::id(),
        args.mode.name()
    ));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let mut servers = Servers::start(&base, &args)?;
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
    wait_ready(&sentinels, &data)?;
    println!("ready after {:.1} s", began.elapsed().as_secs_f64());

    let shared = Arc::new(Shared::new(sentinels.clone(), args.clone()));
    let poller = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || poll_sentinels(shared))
    };
    let clients = start_clients(&shared);
    let faults = Faults::run(&mut servers, &shared)?;
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

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Every mode asked for, one after another with the same seed; a mode whose run fails
    // is reported and left out of the table, and the exit status says so.
    let mut done: Vec<(&str, Report)> = Vec::new();
    let mut failed = false;
    for &mode in &args.modes {
        match run(Args {
            mode,
            ..args.clone()
        }) {
            Ok(report) => done.push((mode.name(), report)),
            Err(e) => {
                eprintln!("failover: harness error in mode {}: {e}", mode.name());
                failed = true;
            }
        }
    }
    if args.modes.len() > 1 {
        let columns: Vec<(&str, &Report)> = done.iter().map(|(m, r)| (*m, r)).collect();
        println!(
            "\nevery mode, seed {}, {} s each:\n\n{}",
            args.seed,
            args.seconds,
            table(&columns)
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
