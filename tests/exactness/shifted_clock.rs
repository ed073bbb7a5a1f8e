//! A server with another clock: a `redis-server` started under `tests/support/wallshift.c`
//! (`LD_PRELOAD`), whose wall clock, its module's included, runs a constant offset from ours;
//! the moved-lease tests move locks between it and a server on the real clock.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Connection;

use crate::common::support_lib::build_support_lib;
use crate::common::*;

/// `tests/support/wallshift.c`, compiled once per test process.
fn wallshift_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| build_support_lib("wallshift", &["-ldl"], "the clock tests"))
}

/// The offset file of a shifted server; removed on drop (the server keeps the last value).
pub(crate) struct OffsetFile(PathBuf);

impl Drop for OffsetFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn real_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The server's wall clock (`TIME`) minus ours, in ms.
fn server_offset_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).expect("TIME");
    s * 1000 + us / 1000 - real_ms()
}

/// The module's wall clock minus ours, in ms, read from the fence of a fresh key on a server
/// that has seen no fence from elsewhere (a fence is `unix_ms << 11` plus a counter).
fn module_offset_ms(c: &mut Connection) -> i64 {
    let f = acquire(c, "clock-probe", "p", 1000).expect("probe acquire");
    assert_eq!(release(c, "clock-probe", "p"), 1);
    (f >> 11) - real_ms()
}

pub(crate) fn is_valkey(c: &mut Connection) -> bool {
    info_field(c, "server", "valkey_version").is_some()
}

/// A server whose wall clock runs `offset_ms` from the real one from its start, its module
/// included (checked through a fence).
pub(crate) fn shifted_server(offset_ms: i64, opts: Opts) -> (Server, OffsetFile) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join("redis-lock-tests");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!(
        "exactness-{}-{}.offset",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, format!("{offset_ms}\n")).unwrap();
    fs::rename(&tmp, &path).unwrap();
    let env = [
        (
            "LD_PRELOAD".to_string(),
            wallshift_so().display().to_string(),
        ),
        ("WALLSHIFT_FILE".to_string(), path.display().to_string()),
    ];
    let s = Server::start_with_env(opts.extra(&["--jemalloc-bg-thread", "no"]), &env);
    let mut c = s.conn();
    let server = server_offset_ms(&mut c);
    assert!(
        (server - offset_ms).abs() < 1000,
        "server wall clock at {server} ms from ours, expected {offset_ms} (LD_PRELOAD?)"
    );
    let module = module_offset_ms(&mut c);
    assert!(
        (module - offset_ms).abs() < 1000,
        "the module's wall clock is at {module} ms from ours, the server's at {server}: \
         the shim does not reach the module"
    );
    (s, OffsetFile(path))
}
