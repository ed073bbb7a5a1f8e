//! The C helpers of `tests/support/` (the wall-clock shifter, the probe module), compiled with
//! `cc` into the target directory, and that directory itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Cargo's target directory, where the tests keep what they build or install.
pub fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => manifest.join(t),
        None => manifest.join("target"),
    }
}

/// Compiles `tests/support/<name>.c` into `<target>/<name>.so`, with `extra` arguments after
/// the source; `needed_by` names the tests that need it, for the error when `cc` is missing.
/// It is built under a private name and renamed into place, so that concurrent test
/// processes never load a half-written library. Once per process is enough (a `OnceLock`).
pub fn build_support_lib(name: &str, extra: &[&str], needed_by: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/support/{name}.c"));
    let dir = target_dir();
    fs::create_dir_all(&dir).expect("create target dir");
    let out = dir.join(format!("{name}.so"));
    let tmp = dir.join(format!("{name}.so.{}", std::process::id()));
    let res = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .output();
    let res = match res {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "{needed_by} need a C compiler: `cc` was not found \
             (install gcc, e.g. `apt-get install gcc`)"
        ),
        Err(e) => panic!("cannot run cc ({needed_by} need gcc): {e}"),
    };
    assert!(
        res.status.success(),
        "cc failed to build {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&res.stderr)
    );
    fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename {name}.so into place: {e}"));
    out.canonicalize().unwrap()
}
