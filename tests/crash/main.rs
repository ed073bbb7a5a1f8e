//! Guarantees 1, 2 and 4 under crashes: client processes (holders and waiters) killed with
//! SIGKILL, the server killed with SIGKILL under `appendfsync always` and restarted from its
//! AOF, the server killed and restarted from an older RDB snapshot, and several worker
//! processes contending for one lock while some are killed at random.
//!
//! Guarded writes (`LOCK.GUARD`): the same workers with a Redis list as the resource, written
//! only through `LOCK.GUARD`, where no stale write may land; and a holder stopped with SIGSTOP
//! past its lease, whose writes after it resumes are refused while the new holder's land.
//!
//! Client processes are `redis-cli` (`$REDIS_CLI` overrides it) and this test binary itself,
//! re-run as a child on the ignored test `crash_child` with the role in an environment
//! variable.
//!
//! Submodules: `child_processes` (`Proc`), `killed_clients`, `killed_server`, `workers` (the
//! random-kill loop) with `file_resource_workers` and `guarded_workers`, and `paused_holder`;
//! `exclusion` (mutual exclusion under contention, in threads: clients that retry and clients
//! that queue).
//! `crash_child` stays here, at the crate root, as children run it with `--exact`.

#[path = "../common/mod.rs"]
mod common;

mod child_processes;
mod exclusion;
mod file_resource_workers;
mod guarded_workers;
mod killed_clients;
mod killed_server;
mod paused_holder;
mod workers;

use std::thread::sleep;
use std::time::Duration;

use child_processes::{env_var, ROLE};
use file_resource_workers::worker;
use guarded_workers::guarded_worker;
use paused_holder::paused_holder;

/// How late a lease end or grant may be observed (noisy CI).
pub(crate) const SLACK: Duration = Duration::from_millis(500);

/// The entry point of the child processes (a no-op when run by hand).
#[test]
#[ignore = "entry point of the child processes that the crash tests start and kill"]
fn crash_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let port = env_var("REDIS_LOCK_CRASH_PORT");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().expect("child: connect");
    match role.as_str() {
        "hold" => {
            let f: i64 = redis::cmd("LOCK.ACQUIRE")
                .arg(env_var("REDIS_LOCK_CRASH_KEY"))
                .arg(env_var("REDIS_LOCK_CRASH_TOKEN"))
                .arg(env_var("REDIS_LOCK_CRASH_TTL"))
                .arg("WAIT")
                .arg(0)
                .query(&mut c)
                .expect("child: LOCK.ACQUIRE");
            println!("\nFENCE {f}");
            // Hold on, doing nothing, until killed (bounded, should the parent vanish).
            sleep(Duration::from_secs(60));
        }
        "worker" => worker(&mut c),
        "guarded" => guarded_worker(&mut c),
        "paused" => paused_holder(&mut c),
        other => panic!("unknown child role {other}"),
    }
}
