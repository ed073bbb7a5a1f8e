//! `BENCH_PROFILE`: one workload, repeated for a profiler.

#[allow(unused_imports)]
use crate::*;

/// `BENCH_PROFILE=lock|lua|floor|minimal|lua-fenced|acquire|setnx|guard|set|lua-guard`: one
/// op at batch 16 (`minimal`: the module floor's cycle; the last three: workload 7's
/// `LOCK.GUARD … SET`, `SET`, Lua guarded `SET`), repeated for `BENCH_PROFILE_SECS` (default
/// 20) so that `perf record -p <server pid>` or a before/after comparison can watch it.
/// Prints the server's PID first.
pub(crate) fn profile(srv: &Server, s: &Scripts, plan: &Plan, which: &str) {
    let secs: u64 = std::env::var("BENCH_PROFILE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    if let Some(op) = GuardOp::from_name(which) {
        println!("server pid {}", srv.pid().unwrap_or(0));
        let phase = Duration::from_secs(secs);
        let m = run_guard_phase(srv, s, plan, phase, (which, op, 16));
        println!(
            "{which}: {:.0} ops/s, server {:.3} µs CPU/op",
            m.rate(),
            m.cpu_us_per_op()
        );
        return;
    }
    let op = match which {
        "lock" => Op::LockCycle,
        "lua" => Op::LuaCycle,
        "floor" => Op::FloorCycle,
        "minimal" => Op::MinimalCycle,
        "lua-fenced" => Op::LuaFencedCycle,
        "acquire" => Op::LockAcquire,
        "setnx" => Op::SetNx,
        other => {
            panic!(
                "BENCH_PROFILE={other}: expected lock, lua, floor, minimal, lua-fenced, acquire, \
                 setnx, guard, set or lua-guard"
            )
        }
    };
    // BENCH_PROFILE_HELD=n: n long-held locks (or string locks) in place first, as in 6b.
    let held: usize = std::env::var("BENCH_PROFILE_HELD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if held > 0 {
        let mut pipe = Pipe::open(srv);
        let hold = HOLD_TTL_MS.to_string();
        let make = |i: usize, b: &mut Vec<u8>| {
            let key = format!("held:{i:09}");
            match op {
                Op::LockCycle | Op::LockAcquire => {
                    push_cmd(b, &["LOCK.ACQUIRE", &key, "holder", &hold])
                }
                _ => push_cmd(b, &["SET", &key, "holder", "NX", "PX", &hold]),
            }
        };
        load(&mut pipe, 0..held, 1, make, held_reply);
    }
    println!("server pid {}", srv.pid().unwrap_or(0));
    let m = run_phase(srv, s, plan, Duration::from_secs(secs), (which, op, 16));
    println!(
        "{which}: {:.0} ops/s, server {:.3} µs CPU/op",
        m.rate(),
        m.cpu_us_per_op()
    );
}
