//! # redis-lock benchmark (`make bench`, i.e. `cargo bench --bench bench`)
//!
//! Measures the module side by side with the ways clients lock with plain Redis today, in
//! one run, against one redis-server that this program starts itself (127.0.0.1, a free port,
//! `--save "" --appendonly no`, the module from `target/release/libredis_lock.so` — build it
//! first with `cargo build --release`; `cargo bench` does not rebuild the cdylib — or from
//! `$REDIS_LOCK_MODULE`, as in the tests).
//!
//! ## Workloads (each against its baselines, with the same number of connections)
//!
//! 1. **Uncontended cycle** — acquire then release on random keys, 4 connections, batches of
//!    1 and 16 cycles: `LOCK.ACQUIRE`+`LOCK.RELEASE` vs `SET NX PX` + `EVALSHA`
//!    compare-and-delete ("Lua") vs `SET PX` + `DEL` (two native commands: the "floor").
//! 2. **Fenced cycle** — the module's acquire returns a fence anyway; the baseline is an
//!    `EVALSHA` acquire doing `SET NX PX` + `INCR` of a fence key, and the Lua release.
//! 3. **Single command**, batches of 1 and 16: `LOCK.ACQUIRE` vs `SET NX PX` on fresh keys
//!    (every op succeeds; the keys are removed after each phase, outside the measurement), and
//!    `LOCK.INFO` vs `GET` on an existing key.
//! 4. **Contended** — 20 clients on one key, each looping acquire → release with no hold
//!    time: `LOCK.ACQUIRE … WAIT 0` (blocking FIFO) vs polling `SET NX PX` every 100 ms and
//!    every 1 ms vs a pub/sub wake-up (the release script PUBLISHes; waiters sit on a
//!    SUBSCRIBE and retry on a message, or after a fallback timeout).
//! 5. **Lease-end hand-off** — a holder takes a 50 ms lease and never releases; a waiter
//!    blocked with `WAIT 0` measures from the lease deadline (send time of the holder's
//!    acquire + ttl, on the client's clock) to its grant.
//! 6. **Scale** — memory per held lock (`INFO memory` `used_memory` delta over 200k locks) for
//!    the module, a `SET NX PX` string lock and a string lock plus a fence key (module memory
//!    is counted: the module allocates through Redis); and the cycle at batch 16 with 1M
//!    module locks held vs 1k held (and, for reference, the floor cycle among 1M vs 1k held
//!    string locks: how much Redis itself slows down with a bigger keyspace).
//! 7. **Guarded write** (issue 12), batches of 1 and 16: `LOCK.GUARD lock fence SET x v`
//!    (each connection holds its lock, from `LOCK.ACQUIRE` with a long lease, and sends that
//!    acquire's fence) vs a plain `SET x v` vs the Lua guarded write: an `EVALSHA` that GETs
//!    the lock's string key (`SET NX PX`) and its fence key (the fence integer, from the Lua
//!    fenced acquire), compares the fence argument and SETs, else returns an error. Every
//!    reply must be `OK`. Before the phases it checks once that a guarded write with the
//!    current fence replies OK and writes, that a stale fence (after `LOCK.FENCE`, after
//!    `LOCK.RELEASE`; for Lua after an `INCR` of the fence key) gets `FENCED` and writes
//!    nothing, and that `INFO lock` counts both; the run fails otherwise.
//! 8. **Shared cycle** (issue 13), batches of 1 and 16: `LOCK.ACQUIRE k t ttl SHARED` +
//!    `LOCK.RELEASE k t` on the connection's own keys (each cycle creates and removes a key)
//!    and on one key for all connections (a token per op of a batch, so the holds coexist),
//!    and the exclusive cycle for reference, each against workload 1's floor (`SET PX` +
//!    `DEL`). Before the phases it checks once that a shared acquire replies a fence, the
//!    key is then shared with 1 holder (2 with a second token, its fence higher), each release
//!    replies 1 and the last removes the key, and a batch of 16 of each variant gets only the
//!    expected replies (on one key, increasing fences).
//! 9. **Semaphore** (issue 13): 20 clients on one `LIMIT 4` semaphore, each looping acquire →
//!    hold 1 ms → release: `LOCK.ACQUIRE sem t ttl SHARED LIMIT 4 WAIT timeout` +
//!    `LOCK.RELEASE` vs a Redisson-style Lua semaphore (permits in a ZSET scored by expiry: a
//!    script drops expired permits and adds the token while fewer than 4 remain; a refused
//!    client polls every 1 ms; release = `ZREM`). A *hand-off* is a permit granted to a client
//!    that had waited for it (the module's `lock_grants`; for Lua an acquire after a refused
//!    try): a Lua releaser that takes a permit straight back while others wait is not one.
//!    Reports hand-offs/s, grants/s, waits, Jain fairness over clients' acquisitions, and
//!    violations from an in-process counter (raised after an acquire, lowered before the
//!    release) above 4. Before the rounds it checks once, for both, that 4 acquire and a 5th
//!    is refused until one releases, and that in a short contended run the in-process count
//!    reaches 4 and never exceeds it, nor does the server's (sampled) holder count.
//!
//! ## How to read the output
//!
//! - An *op* is what the row names: a whole cycle (acquire + release) in 1–2, one command in
//!   3. A batch of 16 is one pipelined round trip per step (16 acquires, then 16 releases);
//!   a batch of 1 is one command per round trip, so a cycle there is two round trips.
//! - `ops/s` = ops completed in the measurement windows / their length (each window follows a
//!   warm-up). A variant runs in 5 rounds interleaved with its baselines (A B C, C B A,
//!   A B C, …); `spread` is (max − min) / mean of its rounds' ops/s, a gauge of the noise.
//!   The contended schemes and 6b run in 3 rounds the same way.
//!   `p50/p99/p999` are the latencies of one whole batch in µs (hdrhistogram).
//! - `srv µs/op` is the server's CPU time (user + sys from `INFO cpu`) over the window divided
//!   by the ops; `srv cpu` is that CPU time over the window's length (100% = one core busy).
//!   Client and server share a 2-core machine: when `srv cpu` is well below 100% the client
//!   is the bottleneck, and `srv µs/op` is the fairer comparison.
//! - Ratios are "this row relative to that baseline", higher = better for the row: for
//!   throughput `ops/s ÷ baseline ops/s`, for CPU `baseline µs/op ÷ row µs/op`, each taken
//!   per round against the baseline's round next to it, and the median over rounds reported
//!   (a slow spell of the shared machine then hits both halves of a pair).
//! - 7 also prints each GUARD ratio as the median of the paired rounds with the lowest and
//!   highest round's ratio, and their spread ((highest − lowest) / median).
//! - 8 prints each variant's ratios to the floor, 9 WAIT's ratios to Lua, the same way.
//! - At the end, each target of issues 4, 12 and 13 is checked against the measurements.
//! - Everything is also written to `bench-results.json` at the crate root (or `$BENCH_JSON`).
//!
//! Set `BENCH_QUICK=1` for a smoke run about 10× shorter (numbers are then noisy), and
//! `BENCH_NO_PIN=1` to run without `taskset` pinning (server on CPU 1, client on CPU 0).
//! `BENCH_ONLY=guard`, `shared` or `semaphore` runs workload 7, 8 or 9 alone (its check, table
//! and targets; the results file then holds only that), e.g.
//! `BENCH_ONLY=semaphore cargo bench --bench bench`.
//! `BENCH_PROFILE` repeats one op for a profiler (see `profile.rs`).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use redis::{Connection, ConnectionLike, Value};

mod conn;
mod contended;
mod guard;
mod lease_end;
mod machine;
mod memory;
mod plan;
mod profile;
mod report;
mod semaphore;
mod server;
mod shared;
mod targets;
mod throughput;

use conn::*;
use contended::*;
use guard::*;
use lease_end::*;
use machine::*;
use memory::*;
use plan::*;
use profile::*;
use report::*;
use semaphore::*;
use server::*;
use shared::*;
use targets::*;
use throughput::*;

// ---------------------------------------------------------------------------------------

fn main() {
    let began = Instant::now();
    let plan = Plan::from_env();
    let module = module_path();
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = pin_client(cpus);
    let srv = Server::start(&module, pinned);
    let mut con = srv.connect();
    let version = text(&call(&mut con, &["INFO", "server"]))
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        .unwrap_or_default();
    let modules = format!("{:?}", call(&mut con, &["MODULE", "LIST"]));
    assert!(modules.contains("lock"), "module not loaded: {modules}");
    let scripts = Scripts::load(&mut con);
    let s = &scripts;
    let model = cpu_model();
    let revision = git_revision();
    let pinning = if pinned {
        "server pinned to CPU 1, client threads to CPU 0 (taskset)".to_string()
    } else {
        "not pinned: client and server share all CPUs".to_string()
    };

    println!(
        "redis-lock benchmark{}",
        if plan.quick {
            " (BENCH_QUICK: short smoke run, noisy)"
        } else {
            ""
        }
    );
    println!("  machine:  {model}, {cpus} CPUs (nproc), shared by client and server");
    println!(
        "  server:   redis-server {version} on 127.0.0.1:{}, --save \"\" --appendonly no",
        srv.port
    );
    println!("  module:   {} (git {revision})", module.display());
    println!("  pinning:  {pinning}");
    println!(
        "  phases:   {CONNS} connections; each variant {ROUNDS} rounds interleaved with its \
         baselines, {:.2}s warm-up + {:.2}s measured per round; contended {FEW_ROUNDS} rounds of \
         {:.1}s per scheme, 6b {FEW_ROUNDS} rounds\n  ratios:   the median over rounds of each \
         round's ratio to the baseline round next to it",
        plan.warmup.as_secs_f64(),
        plan.phase.as_secs_f64(),
        plan.contended.as_secs_f64()
    );
    eprintln!();

    if let Ok(which) = std::env::var("BENCH_PROFILE") {
        profile(&srv, s, &plan, &which);
        return;
    }

    // bench-results.json: this header, then each workload's part.
    let mut json = vec![
        ("quick", plan.quick.into()),
        ("only", plan.only.clone().map_or(Json::Null, Json::from)),
        (
            "machine",
            obj(vec![
                ("cpu_model", model.into()),
                ("cpus", (cpus as u64).into()),
                ("shared_by_client_and_server", true.into()),
                ("pinned", pinned.into()),
                ("pinning", pinning.into()),
            ]),
        ),
        ("redis_version", version.into()),
        ("module_git", revision.into()),
        ("connections", (CONNS as u64).into()),
        ("warmup_seconds", plan.warmup.as_secs_f64().into()),
        ("phase_seconds", plan.phase.as_secs_f64().into()),
        ("rounds", (ROUNDS as u64).into()),
    ];

    // BENCH_ONLY=guard|shared|semaphore: workload 7, 8 or 9 alone.
    if let Some(only) = plan.only.as_deref() {
        let (part, title, targets, errors) = match only {
            "guard" => {
                let guarded = run_guard(&srv, s, &plan);
                guarded.print();
                let errors = unexpected(&[&guarded.table], &[]);
                let part = ("guarded_write", guarded.json());
                (part, "Targets (issue 12)", guarded.targets(), errors)
            }
            "shared" => {
                let shared = run_shared(&srv, &plan);
                shared.print();
                let errors = unexpected(&[&shared.table], &[]);
                let part = ("shared_cycle", shared.json());
                (part, "Targets (issue 13)", shared.targets(), errors)
            }
            _ => {
                let sem = run_semaphore(&srv, &plan);
                sem.print();
                let part = ("semaphore", sem.json());
                (part, "Targets (issue 13)", sem.targets(), sem.errors())
            }
        };
        print_targets(title, &targets);
        json.push(part);
        json.push(("targets", targets_json(&targets)));
        json.push(("unexpected_replies", errors.into()));
        write_results(json, began);
        return;
    }

    // 1–3: uncontended.
    let cycle = table(
        &srv,
        s,
        &plan,
        "1. Uncontended acquire+release cycle on random keys (op = 1 cycle)",
        &[
            (
                "LOCK.ACQUIRE + LOCK.RELEASE",
                "LOCK",
                Op::LockCycle,
                &[2, 1],
            ),
            ("SET NX PX + EVALSHA del (Lua)", "Lua", Op::LuaCycle, &[2]),
            ("SET PX + DEL (floor)", "floor", Op::FloorCycle, &[]),
        ],
    );
    let fenced = table(
        &srv,
        s,
        &plan,
        "2. Fenced cycle (op = 1 cycle that yields a fence)",
        &[
            (
                "LOCK.ACQUIRE (fence) + LOCK.RELEASE",
                "LOCK",
                Op::LockCycle,
                &[1],
            ),
            (
                "EVALSHA SET NX PX+INCR, EVALSHA del",
                "Lua fenced",
                Op::LuaFencedCycle,
                &[],
            ),
        ],
    );
    let acquire = table(
        &srv,
        s,
        &plan,
        "3a. Single command: acquire a fresh key (op = 1 command)",
        &[
            ("LOCK.ACQUIRE", "LOCK.ACQUIRE", Op::LockAcquire, &[1]),
            ("SET NX PX", "SET NX PX", Op::SetNx, &[]),
        ],
    );
    let read = table(
        &srv,
        s,
        &plan,
        "3b. Single command: read a held lock (op = 1 command)",
        &[
            ("LOCK.INFO", "LOCK.INFO", Op::LockInfo, &[1]),
            ("GET", "GET", Op::Get, &[]),
        ],
    );

    // 4: contended.
    eprintln!("4. Contended");
    let schemes: [(&'static str, &'static str, Contender); 4] = [
        (
            "LOCK.ACQUIRE WAIT 0 (blocking FIFO)",
            "WAIT",
            Contender::Wait,
        ),
        (
            "SET NX PX, poll every 100 ms",
            "100ms poll",
            Contender::Poll(SLOW_POLL),
        ),
        (
            "SET NX PX, poll every 1 ms",
            "1ms poll",
            Contender::Poll(FAST_POLL),
        ),
        ("SET NX PX + pub/sub wake-up", "pub/sub", Contender::PubSub),
    ];
    let mut contended: Vec<Option<Contended>> = schemes.iter().map(|_| None).collect();
    for round in 0..FEW_ROUNDS {
        let mut order: Vec<usize> = (0..schemes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, short, kind) = schemes[i];
            let c = run_contended(&srv, s, &plan, label, short, kind);
            match &mut contended[i] {
                Some(sum) => sum.absorb(c),
                slot => *slot = Some(c),
            }
        }
    }
    let contended: Vec<Contended> = contended.into_iter().flatten().collect();

    // 5, 6, 7.
    let lease = run_lease_end(&srv, &plan);
    let (memory, residual) = run_memory(&srv, &plan);
    let held = run_held(&srv, s, &plan);
    let guarded = run_guard(&srv, s, &plan);
    let shared = run_shared(&srv, &plan);
    let semaphore = run_semaphore(&srv, &plan);

    // Tables.
    for t in [&cycle, &fenced, &acquire, &read] {
        t.print();
    }
    print_contended(&contended);
    println!(
        "\n5. Lease-end hand-off: {}-ms lease never released, a waiter blocked with WAIT 0 \
         ({} times; delay from lease deadline to grant, client clock)",
        LEASE_TTL_MS, plan.lease_reps
    );
    println!(
        "  p50 {}  p99 {}  max {}   (round trip of an acquire: p50 {})",
        ms(lease.delays.value_at_quantile(0.5)),
        ms(lease.delays.value_at_quantile(0.99)),
        ms(lease.delays.max()),
        ms(lease.rtt.value_at_quantile(0.5)),
    );
    if lease.early > 0 {
        println!(
            "  !! {} of {} grants came before send time + ttl, up to {} early: the lease ended \
             before its ttl had passed since the server received the acquire",
            lease.early,
            plan.lease_reps,
            ms(micros(lease.most_early))
        );
    }
    println!(
        "\n6a. Memory per held lock ({} locks, used_memory delta)",
        thousands(plan.mem_locks as f64)
    );
    let string_bytes = memory[0].bytes_per_lock;
    for m in &memory {
        println!(
            "  {:<36} {:>8.1} bytes/lock  {:.2}× string lock",
            m.label,
            m.bytes_per_lock,
            m.bytes_per_lock / string_bytes
        );
    }
    println!("  left after FLUSHALL of the module's locks: {residual:.1} bytes/lock (until their lease deadlines)");
    held.print();
    guarded.print();
    shared.print();
    semaphore.print();

    // Targets.
    let tables = [&cycle, &fenced, &acquire, &held];
    let mut targets = issue4_targets(&plan, tables, &contended, &lease, &memory);
    targets.extend(guarded.targets());
    targets.extend(shared.targets());
    targets.extend(semaphore.targets());
    print_targets("Targets (issues 4, 12 and 13)", &targets);
    let tables = [
        &cycle,
        &fenced,
        &acquire,
        &read,
        &held,
        &guarded.table,
        &shared.table,
    ];
    let errors = unexpected(&tables, &contended) + semaphore.errors();

    json.extend([
        ("uncontended_cycle", cycle.json()),
        ("fenced_cycle", fenced.json()),
        ("single_acquire", acquire.json()),
        ("single_read", read.json()),
        (
            "contended",
            obj(vec![
                ("clients", (CONTENDED_CLIENTS as u64).into()),
                (
                    "runs",
                    Json::Arr(contended.iter().map(|c| c.json(&contended)).collect()),
                ),
            ]),
        ),
        (
            "lease_end_handoff",
            obj(vec![
                ("ttl_ms", LEASE_TTL_MS.into()),
                ("reps", (plan.lease_reps as u64).into()),
                ("p50_us", lease.delays.value_at_quantile(0.5).into()),
                ("p99_us", lease.delays.value_at_quantile(0.99).into()),
                ("max_us", lease.delays.max().into()),
                ("grants_before_deadline", lease.early.into()),
                ("most_early_us", micros(lease.most_early).into()),
                (
                    "acquire_rtt_p50_us",
                    lease.rtt.value_at_quantile(0.5).into(),
                ),
            ]),
        ),
        (
            "memory",
            obj(vec![
                ("locks", (plan.mem_locks as u64).into()),
                (
                    "rows",
                    Json::Arr(
                        memory
                            .iter()
                            .map(|m| {
                                obj(vec![
                                    ("name", m.label.into()),
                                    ("bytes_per_lock", m.bytes_per_lock.into()),
                                    (
                                        "ratio_to_string_lock",
                                        (m.bytes_per_lock / string_bytes).into(),
                                    ),
                                ])
                            })
                            .collect(),
                    ),
                ),
                ("left_after_flushall_bytes_per_lock", residual.into()),
            ]),
        ),
        ("held_locks", held.json()),
        ("guarded_write", guarded.json()),
        ("shared_cycle", shared.json()),
        ("semaphore", semaphore.json()),
        ("targets", targets_json(&targets)),
        ("unexpected_replies", errors.into()),
    ]);
    write_results(json, began);
}

/// Unexpected replies (failed acquires, releases, writes) in these tables and contended runs,
/// flagged on the output.
fn unexpected(tables: &[&Table], contended: &[Contended]) -> u64 {
    let errors: u64 = tables
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| r.m.errors))
        .chain(contended.iter().map(|c| c.errors))
        .sum();
    if errors > 0 {
        println!(
            "\n!! {errors} unexpected replies (failed acquires/releases/writes): see the err columns"
        );
    }
    errors
}
