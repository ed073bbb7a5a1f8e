//! A `redis-server` whose wall clock runs at an offset from ours: `tests/support/wallshift.c`,
//! an `LD_PRELOAD` library that offsets only the realtime clocks (`clock_gettime(CLOCK_REALTIME*)`,
//! `gettimeofday`, `time`) by a number of milliseconds read from a file ([`WallClock`]) that a
//! test may rewrite while the server runs. (libfaketime deadlocks Debian's jemalloc-linked
//! redis-server at start-up, hence a library of our own, and the server runs with
//! `jemalloc-bg-thread no`.)

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use redis::Connection;

use super::clock::unix_ms;
use super::support_lib::build_support_lib;
use super::{wait_until, Opts, Server};

/// `tests/support/wallshift.c`, compiled once per test process.
pub fn wallshift_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| build_support_lib("wallshift", &["-ldl"], "the clock tests"))
}

/// The server's wall clock (`TIME`) minus ours, in ms.
pub fn server_offset_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).expect("TIME");
    s * 1000 + us / 1000 - unix_ms()
}

/// The control file of one server's wall-clock offset; removed on drop (the server keeps the
/// last value).
pub struct WallClock {
    pub path: PathBuf,
}

impl WallClock {
    /// A control file at offset `offset_ms`; `prefix` names it in the temporary directory.
    pub fn at(prefix: &str, offset_ms: i64) -> WallClock {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join("redis-lock-tests");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!(
            "{prefix}-{}-{}.offset",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let c = WallClock { path };
        c.write(offset_ms);
        c
    }

    /// Sets the offset (atomically: the server never reads half a file).
    pub fn write(&self, offset_ms: i64) {
        let tmp = self.path.with_extension("tmp");
        fs::write(&tmp, format!("{offset_ms}\n")).unwrap();
        fs::rename(&tmp, &self.path).unwrap();
    }

    /// A server started with `opts` whose wall clock is offset by this file.
    pub fn start(&self, opts: Opts) -> Server {
        let env = [
            (
                "LD_PRELOAD".to_string(),
                wallshift_so().display().to_string(),
            ),
            (
                "WALLSHIFT_FILE".to_string(),
                self.path.display().to_string(),
            ),
        ];
        Server::start_with_env(opts.extra(&["--jemalloc-bg-thread", "no"]), &env)
    }

    /// [`WallClock::start`], checked: the server's `TIME` is `offset_ms` from ours.
    pub fn start_checked(&self, opts: Opts, offset_ms: i64) -> Server {
        let s = self.start(opts);
        let server = server_offset_ms(&mut s.conn());
        assert!(
            (server - offset_ms).abs() < 1000,
            "server wall clock at {server} ms from ours, expected {offset_ms} (LD_PRELOAD?)"
        );
        s
    }

    /// Steps the server's wall clock to `offset_ms` from the real one and waits until the
    /// server's `TIME` shows it (3 s at most).
    pub fn step(&self, c: &mut Connection, offset_ms: i64) {
        self.write(offset_ms);
        assert!(
            wait_until(Duration::from_secs(3), || (server_offset_ms(c) - offset_ms)
                .abs()
                < 1000),
            "server wall clock did not move to offset {offset_ms} ms (LD_PRELOAD not effective?)"
        );
    }
}

impl Drop for WallClock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
