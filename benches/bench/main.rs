//! # redis-lock benchmark (`make bench`, i.e. `cargo bench --bench bench`)
//!
//! Measures the module side by side with the ways clients lock with plain Redis today, in
//! one run, against a redis-server that this program starts itself (127.0.0.1, through the
//! tests' harness `tests/common/server.rs`, `--save ""`, no AOF, the module from
//! `target/release/libredis_lock.so` — build it first with `cargo build --release`; `cargo
//! bench` does not rebuild the cdylib — or from `$REDIS_LOCK_MODULE`, and `$REDIS_SERVER`
//! for another server binary, as in the tests). Workloads 10, 11 and 12 start servers of
//! their own.
//!
//! ## Workloads (each against its baselines, with the same number of connections)
//!
//! Each has a short name (in brackets) for `BENCH_ONLY`.
//!
//! 1. **Uncontended cycle** [`cycle`] — acquire then release on random keys, 4 connections,
//!    batches of 1 and 16 cycles: `LOCK.ACQUIRE`+`LOCK.RELEASE` vs `SET NX PX` + `EVALSHA`
//!    compare-and-delete ("Lua") vs `SET PX` + `DEL` (two native commands: the "floor") vs
//!    `MINLOCK.ACQUIRE` + `MINLOCK.RELEASE`, a minimal lock in a C module loaded beside
//!    redis-lock (`tests/support/minimal_lock.c`: a module value holding the token, the
//!    key's TTL as its lease, a fence reply; no waiters, index or replication): the "module
//!    floor", what the same cycle costs through the module API.
//! 2. **Fenced cycle** [`fenced`] — the module's acquire returns a fence anyway; the baseline
//!    is an `EVALSHA` acquire doing `SET NX PX` + `INCR` of a fence key, and the Lua release.
//! 3. **Single command**, batches of 1 and 16: [`single`] `LOCK.ACQUIRE` vs `SET NX PX` on
//!    fresh keys (every op succeeds; the keys are removed after each phase, outside the
//!    measurement), and [`info`] `LOCK.INFO` vs `GET` on an existing key.
//! 4. **Contended** [`contended`] — 20 clients on one key, each looping acquire → release
//!    with no hold time: `LOCK.ACQUIRE … WAIT 0` (blocking FIFO) vs polling `SET NX PX` every
//!    100 ms and every 1 ms vs a pub/sub wake-up (the release script PUBLISHes; waiters sit on
//!    a SUBSCRIBE and retry on a message, or after a fallback timeout).
//! 5. **Lease-end hand-off** [`lease`] — a holder takes a 50 ms lease and never releases; a
//!    waiter blocked with `WAIT 0` measures from the lease deadline (send time of the holder's
//!    acquire + ttl, on the client's clock) to its grant.
//! 6. **Scale** — [`memory`] 6a: memory per held lock (`INFO memory` `used_memory` delta over
//!    200k locks) for the module, a `SET NX PX` string lock and a string lock plus a fence key
//!    (module memory is counted: the module allocates through Redis); [`held`] 6b: the cycle
//!    at batch 16 with 1M module locks held vs 1k held (and, for reference, the floor cycle
//!    among 1M vs 1k held string locks: how much Redis itself slows down with a bigger
//!    keyspace).
//! 7. **Guarded write** [`guard`] (issue 12), batches of 1 and 16: `LOCK.GUARD lock fence SET
//!    x v` (each connection holds its lock, from `LOCK.ACQUIRE` with a long lease, and sends
//!    that acquire's fence) vs a plain `SET x v` vs the Lua guarded write: an `EVALSHA` that
//!    GETs the lock's string key (`SET NX PX`) and its fence key (the fence integer, from the
//!    Lua fenced acquire), compares the fence argument and SETs, else returns an error. Every
//!    reply must be `OK`. Before the phases it checks once that a guarded write with the
//!    current fence replies OK and writes, that a stale fence (after `LOCK.FENCE`, after
//!    `LOCK.RELEASE`; for Lua after an `INCR` of the fence key) gets `FENCED` and writes
//!    nothing, and that `INFO lock` counts both; the run fails otherwise.
//! 8. **Shared cycle** [`shared`] (issue 13), batches of 1 and 16: `LOCK.ACQUIRE k t ttl
//!    SHARED` + `LOCK.RELEASE k t` on the connection's own keys (each cycle creates and
//!    removes a key) and on one key for all connections (a token per op of a batch, so the
//!    holds coexist), and the exclusive cycle for reference, each against workload 1's floor
//!    (`SET PX` + `DEL`). Before the phases it checks once that a shared acquire replies a
//!    fence, the key is then shared with 1 holder (2 with a second token, its fence higher),
//!    each release replies 1 and the last removes the key, and a batch of 16 of each variant
//!    gets only the expected replies (on one key, increasing fences).
//! 9. **Semaphore** [`semaphore`] (issue 13): 20 clients on one `LIMIT 4` semaphore, each
//!    looping acquire → hold 1 ms → release: `LOCK.ACQUIRE sem t ttl SHARED LIMIT 4 WAIT
//!    timeout` + `LOCK.RELEASE` vs a Redisson-style Lua semaphore (permits in a ZSET scored by
//!    expiry: a script drops expired permits and adds the token while fewer than 4 remain; a
//!    refused client polls every 1 ms; release = `ZREM`). A *hand-off* is a permit granted to
//!    a client that had waited for it (the module's `lock_grants`; for Lua an acquire after a
//!    refused try): a Lua releaser that takes a permit straight back while others wait is not
//!    one. Reports hand-offs/s, grants/s, waits, Jain fairness over clients' acquisitions, and
//!    violations from an in-process counter (raised after an acquire, lowered before the
//!    release) above 4. Before the rounds it checks once, for both, that 4 acquire and a 5th
//!    is refused until one releases, and that in a short contended run the in-process count
//!    reaches 4 and never exceeds it, nor does the server's (sampled) holder count.
//!    `BENCH_SEM_WORK_US` sets the hold (µs).
//! 10. **Settings** [`settings`] (issue 14): the cycle at batch 16 (`LOCK.ACQUIRE` +
//!     `LOCK.RELEASE` vs the floor, paired rounds as in 1) in three settings, each on fresh
//!     servers and against the floor measured in the same setting: 10a no persistence
//!     (with workload 1's module floor as a third variant); 10b `appendonly yes`,
//!     `appendfsync everysec` (automatic rewrites off; the AOF is rewritten to its small
//!     base between phases); 10c one replica attached (a second redis-server
//!     with the module, `replicaof` the first, link up before the phases, caught up between
//!     them). The replica runs on CPU 1 beside its master, so that the client keeps CPU 0 to
//!     itself as everywhere else: 10c's throughput covers the master's and the replica's
//!     work together; its `srv` columns are the master's, and the replica's CPU per cycle is
//!     printed beside. Reports ops/s, server CPU/op and the bytes each cycle adds to the AOF
//!     (`aof_current_size`) or to the replication stream (`master_repl_offset`) over the
//!     measurement windows.
//! 11. **Many holds** [`many-holds`] (issue 22), on servers of its own: 11a, the stall of
//!     50,000 shared leases on one key ending at one instant, on a fresh server each round:
//!     50,000 × `LOCK.ACQUIRE k h<i> <long ttl> SHARED`, then `MULTI`, 50,000 ×
//!     `LOCK.EXTEND k h<i> 3000`, `EXEC` (a transaction reads the clock once, so the
//!     deadlines are equal; acquiring them inside it is not possible: a transaction gets at
//!     most 16,384 fences). From 50 ms before the deadline a second connection sends `PING`
//!     (with `EXISTS k` pipelined behind it) one round trip after another until the key is
//!     gone: the worst round trip and the p99 of those that end from 1 ms before the deadline
//!     on (from `LOCK.INFO`'s ttl, ±1 ms), the worst before it (the machine alone), the time
//!     from the deadline to the key gone; 3 rounds, median and worst. 11b, one command on a
//!     key with 1, 1,000 and 50,000 holds (long leases), one connection, no pipelining:
//!     `LOCK.ACQUIRE k t ttl SHARED` + `LOCK.RELEASE k t` with a fresh token, and
//!     `LOCK.EXTEND` of a holder, in µs per op at the client, in server CPU and in the
//!     server's own time in the commands (`INFO commandstats`), against 1 hold by paired
//!     rounds (3, the counts interleaved). 11a's lease is longer if 11b's load of 50,000
//!     holds took over a second (an older build).
//! 12. **Observers** [`observers`] (issue 25), on servers of its own (`observers.rs`): 12a,
//!     1,000 connections blocked in `LOCK.OBSERVE k <state> 0` against 1,000 `SUBSCRIBE`d
//!     to the keyspace channel of another key (`notify-keyspace-events Kd`), each group
//!     sent the same change (`LOCK.RELEASE` of the holder; `LOCK.FENCE`): the time from
//!     the change's send to the first and the last of the 1,000 replies (messages) at their
//!     sockets, by the kernel's receive timestamps (`fleet.rs`: one thread, non-blocking
//!     sockets in one epoll set), and to the changer's own reply; the observers block again
//!     before every change. `OBSERVE_CHANGES` changes per variant in each of `ROUNDS`
//!     rounds, interleaved; the ratio is the median over rounds of the observers' p50
//!     against the subscribers' round next to it. 12b, `used_memory` per client with the
//!     same 1,000 connections idle, blocked in `LOCK.OBSERVE`, in `BLPOP` of a missing
//!     list, and `SUBSCRIBE`d, each state settled.
//!
//! ## How to read the output
//!
//! - An *op* is what the row names: a whole cycle (acquire + release) in 1, 2, 6b, 8, 10 and
//!   11b, one command in 3, 7 and 11b's `LOCK.EXTEND`. A batch of 16 is one pipelined round
//!   trip per step (16 acquires, then 16 releases); a batch of 1 is one command per round
//!   trip, so a cycle there is two round trips.
//! - The pipelined phases (1–3, 6b, 7, 8, 10) read replies with a small RESP scanner over the
//!   socket (`resp.rs`) that finds each reply's end and checks its type and first line (a
//!   fence, `OK`, 1, a 12-element `LOCK.INFO` array, a bulk string) without building values,
//!   so the client stays cheap; any other reply, errors included, counts in `err`. When
//!   pinned, their connections busy-poll the socket instead of sleeping in `read`: on a VM
//!   the wake-ups, not the server, otherwise set the pace of cheap commands. The server is
//!   then the bottleneck (`srv cpu` near 100%) and the ratios are the server's.
//! - `ops/s` = ops completed in the measurement windows / their length (each window follows a
//!   warm-up). A variant runs in 5 rounds interleaved with its baselines (A B C, C B A,
//!   A B C, …); `spread` is (max − min) / mean of its rounds' ops/s, a gauge of the noise.
//!   The contended schemes, the semaphore and 6b run in 3 rounds the same way.
//!   `p50/p99/p999` are the latencies of one whole batch in µs (hdrhistogram).
//! - `srv µs/op` is the server's CPU time (user + sys from `INFO cpu`) over the window divided
//!   by the ops; `srv cpu` is that CPU time over the window's length (100% = one core busy).
//!   Client and server share a 2-core machine: when `srv cpu` is well below 100% (unpinned,
//!   or the contended workloads) the client side sets the pace, and `srv µs/op` is the
//!   fairer comparison.
//! - Ratios are "this row relative to that baseline", higher = better for the row: for
//!   throughput `ops/s ÷ baseline ops/s`, for CPU `baseline µs/op ÷ row µs/op`, each taken
//!   per round against the baseline's round next to it, and the median over rounds reported
//!   (a slow spell of the shared machine then hits both halves of a pair), with the lowest
//!   and highest round's ratio as [lowest–highest] where it matters (7–10, the targets, the
//!   summary).
//! - In 4 and 9 a wait runs from a client's first try to its grant; the max wait includes
//!   waits cut off by the end of the run.
//! - In 12 the times are in ms from the change's send (lower is better), and its ratio is
//!   the observers' time over the subscribers' (above 1: the observers are slower).
//! - At the end: the targets of issue #14 (with issue 4's for the Lua, fenced and
//!   `LOCK.ACQUIRE` comparisons, the exclusion checks of issues 4 and 13, and issue 22's for
//!   many holds), each with its [lowest–highest round]; then a summary table in Markdown (workload | measured | vs
//!   baseline [spread]) for docs/performance.md, with the machine and the command.
//! - Everything is also written to `bench-results.json` at the crate root (or `$BENCH_JSON`).
//!
//! ## Running part of it
//!
//! `BENCH_ONLY` takes a comma-separated list of the short names above and runs those
//! workloads alone (each with its table, targets and part of the results file), e.g.
//! `BENCH_ONLY=settings cargo bench --bench bench` or `BENCH_ONLY=cycle,info …`.
//! `BENCH_QUICK=1` makes a smoke run about 10× shorter (numbers are then noisy), and
//! `BENCH_NO_PIN=1` runs without pinning (by default `taskset` puts the servers on CPU 1 and
//! the client on CPU 0) and so without busy-polling.
//! `BENCH_PROFILE` repeats one op for a profiler (see `profile.rs`).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use redis::{Connection, ConnectionLike, Value};

mod clients;
mod conn;
mod contended;
mod fleet;
mod guard;
mod hold_cost;
mod lease_end;
mod machine;
mod many_holds;
mod memory;
mod observer_memory;
mod observers;
mod paired;
mod plan;
mod profile;
mod report;
mod resp;
mod semaphore;
// The tests' server harness, shared (the bench uses part of it).
#[allow(dead_code)]
#[path = "../../tests/common/server.rs"]
mod server;
mod settings;
mod shared;
#[path = "../../tests/common/support_lib.rs"]
mod support_lib;
mod table;
mod targets;
mod throughput;
mod uncontended;
mod workload;

use clients::*;
use conn::*;
use contended::*;
use fleet::*;
use guard::*;
use hold_cost::*;
use lease_end::*;
use machine::*;
use many_holds::*;
use memory::*;
use observer_memory::*;
use observers::*;
use paired::*;
use plan::*;
use profile::*;
use report::*;
use resp::*;
use semaphore::*;
use server::*;
use settings::*;
use shared::*;
use table::*;
use targets::*;
use throughput::*;
use uncontended::*;
use workload::*;

/// Every workload by the name `BENCH_ONLY` knows it by, in the order of a full run.
const WORKLOADS: [(&str, Runner); 14] = [
    ("cycle", run_cycle),
    ("fenced", run_fenced),
    ("single", run_single),
    ("info", run_info),
    ("contended", run_contention),
    ("lease", run_lease_end),
    ("memory", run_memory),
    ("held", run_held),
    ("guard", run_guard),
    ("shared", run_shared),
    ("semaphore", run_semaphore),
    ("settings", run_settings),
    ("many-holds", run_many_holds),
    ("observers", run_observers),
];

fn main() {
    let began = Instant::now();
    let mut plan = Plan::from_env(&WORKLOADS.map(|(name, _)| name));
    let module = module_path();
    warn_if_stale(&module);
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = pin_client(cpus);
    plan.spin = pinned;
    // Pub/sub waiters that do not read for a while must not be disconnected.
    let opts = Opts::new()
        .extra(&["--client-output-buffer-limit", "pubsub 0 0 0"])
        .extra(&minimal_lock_module());
    let srv = Server::start(if pinned { opts.cpu(1) } else { opts });
    let machine = Machine::read(&srv, module, cpus, pinned);
    machine.print(&srv, &plan);
    eprintln!();
    let scripts = Scripts::load(&mut srv.conn());
    if let Ok(which) = std::env::var("BENCH_PROFILE") {
        profile(&srv, &scripts, &plan, &which);
        return;
    }

    let ctx = Ctx {
        srv: &srv,
        s: &scripts,
        plan: &plan,
        pinned,
    };
    let outcomes: Vec<Box<dyn Outcome>> = WORKLOADS
        .iter()
        .filter(|(name, _)| plan.runs(name))
        .map(|(_, run)| run(&ctx))
        .collect();
    for o in &outcomes {
        o.print();
    }
    let targets: Vec<Target> = outcomes.iter().flat_map(|o| o.targets()).collect();
    print_targets(&targets);
    let errors: u64 = outcomes.iter().map(|o| o.errors()).sum();
    if errors > 0 {
        println!(
            "\n!! {errors} unexpected replies (failed acquires/releases/writes): see the err columns"
        );
    }
    let summary: Vec<SummaryRow> = outcomes.iter().flat_map(|o| o.summary()).collect();
    print_summary(&summary, &machine, &plan);

    let mut json = machine.json(&plan);
    json.extend(outcomes.iter().map(|o| o.json()));
    json.push(("targets", targets_json(&targets)));
    json.push(("unexpected_replies", errors.into()));
    write_results(json, began);
}
