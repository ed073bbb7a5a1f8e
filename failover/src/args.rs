//! The harness's flags, their defaults and their parsing.

use std::path::{Path, PathBuf};

use crate::mode::Mode;

/// The run's settings: the flags, or their defaults.
#[derive(Clone, Debug)]
pub struct Args {
    pub seconds: u64,
    pub seed: u64,
    pub clients: u32,
    pub keys: u32,
    /// The mode of this run.
    pub mode: Mode,
    /// `--mode`'s modes, run one after another with the same seed (`all`: every mode).
    pub modes: Vec<Mode>,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub command_timeout_ms: u64,
    pub fault_min_ms: u64,
    pub fault_max_ms: u64,
    pub resolve_ms: u64,
    pub work_ms: u64,
    pub module: PathBuf,
}

const USAGE: &str = "usage: failover [--seconds N (60)] [--seed N (26)] [--clients N (8)] \
[--keys N (3)] [--mode plain|durable1|settings|minreplicas1|all (plain)] [--ttl-ms N (3000)] [--wait-ms N (1000)] \
[--command-timeout-ms N (5000)] [--fault-min-ms N (6000)] [--fault-max-ms N (8000)] \
[--resolve-ms N (0: only after errors)] [--work-ms N (5)] \
[--module PATH (target/release/libredis_lock.so, or $REDIS_LOCK_MODULE)]";

impl Args {
    pub fn parse() -> Result<Args, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let module = std::env::var_os("REDIS_LOCK_MODULE")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/libredis_lock.so"));
        let mut a = Args {
            seconds: 60,
            seed: 26,
            clients: 8,
            keys: 3,
            mode: Mode::Plain,
            modes: vec![Mode::Plain],
            ttl_ms: 3000,
            // At most a third of the ttl: a grant that waited longer is renewed by the
            // library with an extend the history does not see (see check.rs, "Holds").
            wait_ms: 1000,
            command_timeout_ms: 5000,
            fault_min_ms: 6000,
            fault_max_ms: 8000,
            // 0: a client asks Sentinel again only after an error, as in issue 26's
            // measurement, so a deposed master keeps its clients until Sentinel demotes it
            // (8-10 s). A period stands for clients that follow a switch as it happens
            // (a subscriber to +switch-master).
            resolve_ms: 0,
            // A hold does some work: up to this long (uniform) after the guarded write, and
            // again after the extend. Holds of a few milliseconds, as a lock guards real work.
            work_ms: 5,
            module,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_string());
            }
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let num = || {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--seconds" => a.seconds = num()?,
                "--seed" => a.seed = num()?,
                "--clients" => a.clients = num()? as u32,
                "--keys" => a.keys = num()? as u32,
                "--mode" if value == "all" => a.modes = Mode::ALL.to_vec(),
                "--mode" => a.modes = vec![Mode::parse(&value)?],
                "--ttl-ms" => a.ttl_ms = num()?,
                "--wait-ms" => a.wait_ms = num()?,
                "--command-timeout-ms" => a.command_timeout_ms = num()?,
                "--fault-min-ms" => a.fault_min_ms = num()?,
                "--fault-max-ms" => a.fault_max_ms = num()?,
                "--resolve-ms" => a.resolve_ms = num()?,
                "--work-ms" => a.work_ms = num()?,
                "--module" => a.module = PathBuf::from(&value),
                _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
            }
        }
        if a.clients == 0 || a.keys == 0 || a.fault_min_ms == 0 || a.fault_max_ms < a.fault_min_ms {
            return Err(format!(
                "clients, keys and fault intervals must be positive\n{USAGE}"
            ));
        }
        a.mode = a.modes[0];
        a.module = a
            .module
            .canonicalize()
            .map_err(|e| format!("module {}: {e} (run `make build`)", a.module.display()))?;
        Ok(a)
    }
}
