//! The end of a run: one settled master, the final read of every key's log from it, the
//! history checked and written to the run's directory, and the mode's table.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::check::check;
use crate::faults::Faults;
use crate::history::{History, Nanos, Node, Outcome};
use crate::mode::Mode;
use crate::sentinel::{settled_master, wait_until};
use crate::servers::connect;
use crate::summary::{table, Summary};
use crate::workload::{lock_key, log_key};

/// How long the end waits for one master that every Sentinel names and both replicas follow.
const SETTLE: Duration = Duration::from_secs(60);

/// The master every Sentinel names, with both replicas online, the same a second later.
pub fn settle(sentinels: &[Node], data: &[Node]) -> Result<Node, String> {
    let mut master = None;
    wait_until(
        "one master, named by every Sentinel, both replicas online",
        SETTLE,
        || {
            master = settled_master(sentinels, data);
            master.is_some()
        },
    )?;
    // Settled twice, a second apart: not a moment inside a failover.
    thread::sleep(Duration::from_secs(1));
    match settled_master(sentinels, data) {
        Some(m) if Some(m) == master => Ok(m),
        _ => Err("the master changed while settling".into()),
    }
}

/// Every key's log (`LRANGE`) from `master`, into the history.
pub fn read_final_logs(master: Node, keys: u32, history: &mut History) -> Result<(), String> {
    let mut conn = connect(master, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    for k in 0..keys {
        let log: Result<Vec<u64>, _> = redis::cmd("LRANGE")
            .arg(log_key(k))
            .arg(0)
            .arg(-1)
            .query(&mut conn);
        history.final_logs.insert(lock_key(k), log.ok());
    }
    Ok(())
}

/// Checks the history, writes it to `base`, and prints the faults and the mode's table (in
/// one piece, so that modes run in parallel do not interleave it); an error when master
/// faults brought no failover.
pub fn check_and_print(
    history: &History,
    faults: &Faults,
    base: &Path,
    master: Node,
    clients_done: Nanos,
    mode: Mode,
    began: Instant,
) -> Result<Summary, String> {
    let report = check(history);
    // A master killed or paused past down-after-milliseconds and no failover seen: the
    // Sentinels did not work, and the run measured nothing.
    let master_faults = faults.counts.master_faults();
    if master_faults > 0 && report.failovers == 0 {
        return Err(format!(
            "{master_faults} master faults and no failover: see the Sentinel logs in {}",
            base.display()
        ));
    }
    write_history(&base.join("history.tsv"), history).map_err(|e| format!("history: {e}"))?;
    let summary = Summary::new(history, report, faults.counts, faults.began, faults.stopped);
    let mut out = String::new();
    let _ = writeln!(out, "\nmode {}:", mode.name());
    let _ = writeln!(
        out,
        "clients ran {:.1} s, faults from {:.1} s to {:.1} s; final logs read from :{master}; \
         history in {}\n",
        clients_done as f64 / 1e9,
        faults.began as f64 / 1e9,
        faults.stopped as f64 / 1e9,
        base.join("history.tsv").display()
    );
    out += &table(&[(mode, &summary)]);
    out += &summary.report.details();
    let _ = writeln!(
        out,
        "\nviolations in mode {}: {}; run took {:.1} s",
        mode.name(),
        summary.report.violations(),
        began.elapsed().as_secs_f64()
    );
    print!("{out}");
    Ok(summary)
}

/// The history as tab-separated lines, for a second look and for later phases' tools.
fn write_history(path: &Path, h: &History) -> std::io::Result<()> {
    let mut out = String::from(
        "client\tkey\thold\tkind\tinvoke_ns\tcomplete_ns\toutcome\tvalue\tfence\tttl_ms\tnode\n",
    );
    for op in &h.ops {
        let (outcome, value) = match &op.outcome {
            Outcome::Ok(v) => ("ok", v.to_string()),
            Outcome::Failed(why) => ("failed", why.replace(['\t', '\n'], " ")),
            Outcome::Unknown(why) => ("unknown", why.replace(['\t', '\n'], " ")),
        };
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{outcome}\t{value}\t{}\t{}\t{}",
            op.client,
            op.key,
            op.hold,
            op.kind,
            op.invoke,
            op.complete,
            op.fence.map_or(String::new(), |f| f.to_string()),
            op.ttl_ms,
            op.node
        );
    }
    let mut file = std::fs::File::create(path)?;
    file.write_all(out.as_bytes())?;
    let mut obs = String::from("at_ns\tsentinel\tmaster\n");
    for o in &h.observations {
        let _ = writeln!(obs, "{}\t{}\t{}", o.at, o.sentinel, o.master);
    }
    std::fs::write(path.with_file_name("sentinel.tsv"), obs)?;
    let mut logs = String::new();
    for (k, log) in &h.final_logs {
        let _ = writeln!(logs, "{k}\t{log:?}");
    }
    std::fs::write(path.with_file_name("final-logs.txt"), logs)
}
