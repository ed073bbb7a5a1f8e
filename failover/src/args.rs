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
    /// `--mode`'s modes (a comma list; `all`: every mode), run one after another with the
    /// same seed, or at the same time with `--parallel`.
    pub modes: Vec<Mode>,
    /// Run `modes` at the same time, each on servers of its own.
    pub parallel: bool,
    /// Stop the faults once every kind was injected this many times (0: only `seconds`).
    pub faults_per_kind: usize,
    /// Modes that must show no violation, at half of plain's grants or more (`--require-safe`).
    pub require_safe: Vec<Mode>,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub command_timeout_ms: u64,
    pub fault_min_ms: u64,
    pub fault_max_ms: u64,
    pub resolve_ms: u64,
    pub work_ms: u64,
    pub module: PathBuf,
}

const USAGE: &str = "usage: failover [--seconds N (60): the faults' time bound] [--seed N (26)] \
[--faults-per-kind N (0: none): stop once each kind of fault was injected N times] \
[--mode MODE[,MODE...] (plain): plain|durable1|settings|minreplicas1|recommended|all] \
[--parallel: run the modes at the same time, on servers of their own] \
[--require-safe MODE[,MODE...]: exit 3 if one shows a violation or under half of plain's grants] \
[--clients N (8)] [--keys N (3)] [--ttl-ms N (3000)] [--wait-ms N (1000)] \
[--command-timeout-ms N (5000)] [--fault-min-ms N (6000)] [--fault-max-ms N (8000)] \
[--resolve-ms N (0: only after errors)] [--work-ms N (5)] \
[--module PATH (target/release/libredis_lock.so, or $REDIS_LOCK_MODULE)]";

impl Args {
    /// The command line's flags, the module's path made absolute.
    pub fn parse() -> Result<Args, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let module = std::env::var_os("REDIS_LOCK_MODULE")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/libredis_lock.so"));
        let mut a = Args::from_flags(std::env::args().skip(1), module)?;
        a.module = a
            .module
            .canonicalize()
            .map_err(|e| format!("module {}: {e} (run `make build`)", a.module.display()))?;
        Ok(a)
    }

    /// `flags`, over the defaults (`module` unless `--module`); the path is not checked.
    pub fn from_flags(
        flags: impl IntoIterator<Item = String>,
        module: PathBuf,
    ) -> Result<Args, String> {
        let mut a = Args {
            seconds: 60,
            seed: 26,
            clients: 8,
            keys: 3,
            mode: Mode::Plain,
            modes: vec![Mode::Plain],
            parallel: false,
            faults_per_kind: 0,
            require_safe: Vec::new(),
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
        let mut it = flags.into_iter();
        while let Some(flag) = it.next() {
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_string());
            }
            if flag == "--parallel" {
                a.parallel = true;
                continue;
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
                "--mode" => a.modes = Mode::parse_list(&value)?,
                "--faults-per-kind" => a.faults_per_kind = num()? as usize,
                "--require-safe" => a.require_safe = Mode::parse_list(&value)?,
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
        if let Some(m) = a.require_safe.iter().find(|m| !a.modes.contains(m)) {
            return Err(format!(
                "--require-safe {}: not one of --mode's modes\n{USAGE}",
                m.name()
            ));
        }
        if a.require_safe.contains(&Mode::Plain) {
            return Err(format!(
                "--require-safe plain: plain is the baseline, its violations are measured\n{USAGE}"
            ));
        }
        a.mode = a.modes[0];
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::Args;
    use crate::mode::Mode;

    fn parse(flags: &str) -> Result<Args, String> {
        Args::from_flags(
            flags.split_whitespace().map(String::from),
            PathBuf::from("m.so"),
        )
    }

    #[test]
    fn the_defaults_run_plain_alone_sequentially_bound_by_seconds() {
        let a = parse("").unwrap();
        assert_eq!((a.mode, a.modes.clone()), (Mode::Plain, vec![Mode::Plain]));
        assert!(!a.parallel && a.require_safe.is_empty());
        assert_eq!((a.seconds, a.faults_per_kind), (60, 0));
    }

    #[test]
    fn the_ci_flags_parse() {
        let a = parse(
            "--mode plain,recommended --parallel --seed 26 --faults-per-kind 20 \
             --seconds 660 --require-safe recommended",
        )
        .unwrap();
        assert_eq!(a.modes, [Mode::Plain, Mode::Recommended]);
        assert_eq!(a.mode, Mode::Plain);
        assert!(a.parallel);
        assert_eq!((a.seed, a.faults_per_kind, a.seconds), (26, 20, 660));
        assert_eq!(a.require_safe, [Mode::Recommended]);
        assert_eq!(parse("--mode all").unwrap().modes, Mode::ALL);
    }

    #[test]
    fn a_required_mode_must_be_run_and_cannot_be_plain() {
        let e = parse("--mode plain --require-safe recommended").unwrap_err();
        assert!(
            e.starts_with("--require-safe recommended: not one of"),
            "{e}"
        );
        let e = parse("--mode plain,minreplicas1 --require-safe plain").unwrap_err();
        assert!(
            e.starts_with("--require-safe plain: plain is the baseline"),
            "{e}"
        );
        assert!(parse("--mode plain,nope").is_err());
        assert!(parse("--faults-per-kind").is_err());
    }
}
