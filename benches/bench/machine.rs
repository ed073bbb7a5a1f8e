//! The machine: which module, which CPU, pinning, the git revision.

#[allow(unused_imports)]
use crate::*;

// Setup: the module, the machine, pinning.

pub(crate) fn module_path() -> PathBuf {
    // As in the tests: an explicit module, e.g. an older build to compare against.
    if let Ok(p) = std::env::var("REDIS_LOCK_MODULE") {
        return PathBuf::from(p);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(|t| manifest.join(t))
        .unwrap_or_else(|_| manifest.join("target"));
    let p = target.join("release").join("libredis_lock.so");
    assert!(
        p.exists(),
        "module not found at {}: run `cargo build --release` first (`make bench` does)",
        p.display()
    );
    let p = p.canonicalize().unwrap();
    // `cargo bench` does not rebuild the cdylib: warn when the sources are newer.
    let built = fs::metadata(&p).and_then(|m| m.modified()).ok();
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
                p.display()
            );
        }
    }
    p
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
