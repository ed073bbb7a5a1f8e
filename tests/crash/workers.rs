//! What the worker tests share: the workers' lease and work bounds, and the loop that keeps
//! worker child processes running on one lock while it kills them at random.

use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use crate::child_processes::{wall_us, Proc};
use crate::common::*;
use rand::rngs::StdRng;
use rand::Rng;

pub(crate) const WORK_TTL: u64 = 500;
pub(crate) const WORK_MAX_MS: u64 = 20;

/// Keeps `workers` child processes in `role` (each told `dir` and `until`, wall-clock
/// microseconds) running on `s` until shortly before `until`, SIGKILLing one every 100-300 ms
/// (half the time the current holder of `key`, whose token is `<worker id>-<n>`, else any,
/// most likely a waiter) and starting a fresh one in its place; then waits for the survivors
/// to finish, each with success. Returns the number of kills and of processes started.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_workers_killing_at_random(
    s: &Server,
    c: &mut redis::Connection,
    role: &str,
    key: &str,
    dir: &Path,
    until: i64,
    workers: usize,
    rng: &mut StdRng,
) -> (usize, usize) {
    let spawn = |id: usize| {
        Proc::child(
            role,
            &[
                ("REDIS_LOCK_CRASH_PORT", s.port.to_string()),
                ("REDIS_LOCK_CRASH_WORKER", id.to_string()),
                ("REDIS_LOCK_CRASH_DIR", dir.display().to_string()),
                ("REDIS_LOCK_CRASH_UNTIL", until.to_string()),
            ],
        )
    };
    let mut live: Vec<(usize, Proc)> = (0..workers).map(|id| (id, spawn(id))).collect();
    let mut next_id = workers;
    let mut kills = 0;
    while wall_us() < until - 400_000 {
        sleep(Duration::from_millis(rng.gen_range(100..300)));
        // Half the time the current holder, else anyone (most likely a waiter).
        let holder = info(c, key)
            .and_then(|i| i.holder)
            .and_then(|h| String::from_utf8(h).ok())
            .and_then(|h| h.split('-').next().and_then(|w| w.parse::<usize>().ok()));
        let victim = match holder.and_then(|h| live.iter().position(|(id, _)| *id == h)) {
            Some(at) if rng.gen_bool(0.5) => at,
            _ => rng.gen_range(0..live.len()),
        };
        let (_, mut p) = live.remove(victim);
        p.kill9();
        kills += 1;
        live.push((next_id, spawn(next_id)));
        next_id += 1;
    }
    for (id, p) in &mut live {
        let st = p
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{role} {id} did not finish"));
        assert!(st.success(), "{role} {id} failed: {st}");
    }
    (kills, next_id)
}
