//! The machine: which modules, which CPU, pinning, the git revision, the command.

#[allow(unused_imports)]
use crate::*;

/// `cargo bench` does not rebuild the cdylib: warns when the sources are newer than the
/// module built in the target directory (an explicit `$REDIS_LOCK_MODULE` is taken as is).
pub(crate) fn warn_if_stale(module: &Path) {
    if std::env::var_os("REDIS_LOCK_MODULE").is_some() {
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = fs::metadata(module).and_then(|m| m.modified()).ok();
    let newest_src = fs::read_dir(manifest.join("src"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .max();
    if let (Some(built), Some(src)) = (built, newest_src) {
        if src > built {
            eprintln!(
                "WARNING: src/ is newer than {}: run `cargo build --release`",
                module.display()
            );
        }
    }
}

/// The `--loadmodule` arguments of the module floor (`tests/support/minimal_lock.c`), which
/// the bench's servers load beside redis-lock; compiled once per run.
pub(crate) fn minimal_lock_module() -> [&'static str; 2] {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| {
        let so = support_lib::build_support_lib("minimal_lock", &[], "the bench's module floor");
        so.display().to_string()
    });
    ["--loadmodule", path]
}

pub(crate) fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|x| x.1.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Pins this process (and every thread it starts from now on) to CPU 0, leaving CPU 1 to the
/// server. Must run before any thread is started.
pub(crate) fn pin_client(cpus: usize) -> bool {
    if std::env::var("BENCH_NO_PIN").is_ok_and(|v| !v.is_empty() && v != "0") || cpus < 2 {
        return false;
    }
    Command::new("taskset")
        .args(["-p", "-c", "0", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn git_revision() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let rev = out(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        out(&["status", "--porcelain", "--", "src", "Cargo.toml"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{rev} + uncommitted changes")
    } else {
        rev
    }
}

/// The command that reproduces this run: the variables that shape it, then `cargo bench`.
pub(crate) fn command_line() -> String {
    let vars = [
        "REDIS_LOCK_MODULE",
        "REDIS_SERVER",
        "BENCH_QUICK",
        "BENCH_ONLY",
        "BENCH_NO_PIN",
        "BENCH_SEM_WORK_US",
    ];
    let mut parts: Vec<String> = vars
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
        .collect();
    parts.push("cargo bench --bench bench".into());
    parts.join(" ")
}

/// Today's date (UTC), `YYYY-MM-DD`.
pub(crate) fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date, counting in 400-year eras from 0000-03-01.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// What the run ran on, for the header, the summary and the results file.
pub(crate) struct Machine {
    pub(crate) model: String,
    pub(crate) cpus: usize,
    pub(crate) pinned: bool,
    pub(crate) version: String,
    pub(crate) revision: String,
    pub(crate) module: PathBuf,
}

impl Machine {
    pub(crate) fn read(srv: &Server, module: PathBuf, cpus: usize, pinned: bool) -> Machine {
        let mut con = srv.conn();
        let info = text(&call(&mut con, &["INFO", "server"]));
        let modules = format!("{:?}", call(&mut con, &["MODULE", "LIST"]));
        assert!(modules.contains("lock"), "module not loaded: {modules}");
        Machine {
            model: cpu_model(),
            cpus,
            pinned,
            version: field(&info, "redis_version")
                .unwrap_or_default()
                .to_string(),
            revision: git_revision(),
            module,
        }
    }

    pub(crate) fn pinning(&self) -> &'static str {
        if self.pinned {
            "servers pinned to CPU 1, client threads to CPU 0 by taskset"
        } else {
            "not pinned: client and server share all CPUs"
        }
    }

    /// The line under the summary table.
    pub(crate) fn line(&self) -> String {
        format!(
            "{}, {} CPUs shared by client and server ({}), redis-server {}, commit {}, {}",
            self.model,
            self.cpus,
            self.pinning(),
            self.version,
            self.revision,
            today()
        )
    }

    pub(crate) fn print(&self, srv: &Server, plan: &Plan) {
        let quick = if plan.quick {
            " (BENCH_QUICK: short smoke run, noisy)"
        } else {
            ""
        };
        println!("redis-lock benchmark{quick}");
        println!(
            "  machine:  {}, {} CPUs (nproc), shared by client and server",
            self.model, self.cpus
        );
        println!(
            "  server:   redis-server {} on 127.0.0.1:{}, --save \"\" --appendonly no \
             (workload 10 starts its own)",
            self.version, srv.port
        );
        println!(
            "  module:   {} (git {})",
            self.module.display(),
            self.revision
        );
        println!("  pinning:  {}", self.pinning());
        println!(
            "  phases:   {CONNS} connections; each variant {ROUNDS} rounds interleaved with its \
             baselines, {:.2}s warm-up + {:.2}s measured per round; contended {FEW_ROUNDS} rounds \
             of {:.1}s per scheme, 6b {FEW_ROUNDS} rounds\n  ratios:   the median over rounds of \
             each round's ratio to the baseline round next to it",
            plan.warmup.as_secs_f64(),
            plan.phase.as_secs_f64(),
            plan.contended.as_secs_f64()
        );
        if !plan.only.is_empty() {
            println!("  only:     {}", plan.only.join(", "));
        }
        println!("  command:  {}", command_line());
    }

    pub(crate) fn json(&self, plan: &Plan) -> Vec<(&'static str, Json)> {
        let only = if plan.only.is_empty() {
            Json::Null
        } else {
            Json::Arr(plan.only.iter().map(|w| w.as_str().into()).collect())
        };
        vec![
            ("quick", plan.quick.into()),
            ("only", only),
            ("command", command_line().into()),
            (
                "machine",
                obj(vec![
                    ("cpu_model", self.model.as_str().into()),
                    ("cpus", (self.cpus as u64).into()),
                    ("shared_by_client_and_server", true.into()),
                    ("pinned", self.pinned.into()),
                    ("pinning", self.pinning().into()),
                ]),
            ),
            ("redis_version", self.version.as_str().into()),
            ("module_git", self.revision.as_str().into()),
            ("connections", (CONNS as u64).into()),
            ("warmup_seconds", plan.warmup.as_secs_f64().into()),
            ("phase_seconds", plan.phase.as_secs_f64().into()),
            ("rounds", (ROUNDS as u64).into()),
        ]
    }
}
