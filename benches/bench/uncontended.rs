//! Workloads 1–3: the uncontended cycle (also through a minimal module lock, the module
//! floor), the fenced cycle, and single commands (an acquire of a fresh key; a read of a
//! held lock), each a table against its baselines.

#[allow(unused_imports)]
use crate::*;

const LOCK_CYCLE: &str = "LOCK.ACQUIRE + LOCK.RELEASE";
const LUA_CYCLE: &str = "SET NX PX + EVALSHA del (Lua)";
const FLOOR_CYCLE: &str = "SET PX + DEL (floor)";
const MINIMAL_CYCLE: &str = "MINLOCK.ACQUIRE + MINLOCK.RELEASE (module floor)";
const FENCED_LOCK: &str = "LOCK.ACQUIRE (fence) + LOCK.RELEASE";
const FENCED_LUA: &str = "EVALSHA SET NX PX+INCR, EVALSHA del";

/// Workloads 1–3's results: one table, checked and summed up by the workload's own rules.
struct Uncontended {
    key: &'static str,
    table: Table,
    targets: fn(&Table) -> Vec<Target>,
    summary: fn(&Table) -> Vec<SummaryRow>,
}

impl Outcome for Uncontended {
    fn print(&self) {
        self.table.print();
    }
    fn json(&self) -> (&'static str, Json) {
        (self.key, self.table.json())
    }
    fn targets(&self) -> Vec<Target> {
        (self.targets)(&self.table)
    }
    fn summary(&self) -> Vec<SummaryRow> {
        (self.summary)(&self.table)
    }
    fn errors(&self) -> u64 {
        self.table.errors()
    }
}

/// Issue 4's pair of targets at batch 16: throughput and server CPU/op of `a` against `b`.
fn both(t: &Table, what: &str, (a, b): (&str, &str), goal: f64) -> Vec<Target> {
    let (thr, cpu) = t.vs(a, b, 16);
    vec![
        ratio_target("#4", format!("{what}, batch 16, throughput"), thr, goal),
        ratio_target("#4", format!("{what}, batch 16, server CPU/op"), cpu, goal),
    ]
}

/// 1: acquire then release on random keys vs the Lua way and the floor.
pub(crate) fn run_cycle(ctx: &Ctx) -> Box<dyn Outcome> {
    let table = table(
        ctx.srv,
        ctx.s,
        ctx.plan,
        "1. Uncontended acquire+release cycle on random keys (op = 1 cycle)",
        &[
            (LOCK_CYCLE, "LOCK", Op::LockCycle, &[2, 1, 3]),
            (LUA_CYCLE, "Lua", Op::LuaCycle, &[2]),
            (FLOOR_CYCLE, "floor", Op::FloorCycle, &[]),
            (MINIMAL_CYCLE, "module floor", Op::MinimalCycle, &[2]),
        ],
    );
    Box::new(Uncontended {
        key: "uncontended_cycle",
        table,
        targets: |t| both(t, "cycle vs Lua", (LOCK_CYCLE, LUA_CYCLE), 1.7),
        summary: |t| {
            let (floor, lua, minimal, module_floor) = (
                t.vs(LOCK_CYCLE, FLOOR_CYCLE, 16).0,
                t.vs(LOCK_CYCLE, LUA_CYCLE, 16).0,
                t.vs(LOCK_CYCLE, MINIMAL_CYCLE, 16).0,
                t.vs(MINIMAL_CYCLE, FLOOR_CYCLE, 16).0,
            );
            vec![row(
                "acquire + release cycle, batch 16",
                format!("{} cycles/s", thousands(t.find(LOCK_CYCLE, 16).rate())),
                format!(
                    "{} the native floor, {} the Lua way; {} a minimal module lock \
                     (itself {} the floor)",
                    floor.show(),
                    lua.show(),
                    minimal.show(),
                    module_floor.show()
                ),
            )]
        },
    })
}

/// 2: the module's cycle (whose acquire returns a fence) vs the Lua fenced acquire.
pub(crate) fn run_fenced(ctx: &Ctx) -> Box<dyn Outcome> {
    let table = table(
        ctx.srv,
        ctx.s,
        ctx.plan,
        "2. Fenced cycle (op = 1 cycle that yields a fence)",
        &[
            (FENCED_LOCK, "LOCK", Op::LockCycle, &[1]),
            (FENCED_LUA, "Lua fenced", Op::LuaFencedCycle, &[]),
        ],
    );
    Box::new(Uncontended {
        key: "fenced_cycle",
        table,
        targets: |t| {
            both(
                t,
                "fenced cycle vs Lua fenced",
                (FENCED_LOCK, FENCED_LUA),
                3.0,
            )
        },
        summary: |t| {
            vec![row(
                "fenced cycle, batch 16",
                format!("{} cycles/s", thousands(t.find(FENCED_LOCK, 16).rate())),
                format!(
                    "{} the Lua fenced way",
                    t.vs(FENCED_LOCK, FENCED_LUA, 16).0.show()
                ),
            )]
        },
    })
}

/// 3a: `LOCK.ACQUIRE` vs `SET NX PX` on fresh keys.
pub(crate) fn run_single(ctx: &Ctx) -> Box<dyn Outcome> {
    let table = table(
        ctx.srv,
        ctx.s,
        ctx.plan,
        "3a. Single command: acquire a fresh key (op = 1 command)",
        &[
            ("LOCK.ACQUIRE", "LOCK.ACQUIRE", Op::LockAcquire, &[1]),
            ("SET NX PX", "SET NX PX", Op::SetNx, &[]),
        ],
    );
    Box::new(Uncontended {
        key: "single_acquire",
        table,
        targets: |t| {
            both(
                t,
                "LOCK.ACQUIRE vs SET NX PX",
                ("LOCK.ACQUIRE", "SET NX PX"),
                0.9,
            )
        },
        summary: |t| {
            vec![row(
                "`LOCK.ACQUIRE`, batch 16",
                format!("{} /s", thousands(t.find("LOCK.ACQUIRE", 16).rate())),
                format!(
                    "{} `SET NX PX`",
                    t.vs("LOCK.ACQUIRE", "SET NX PX", 16).0.show()
                ),
            )]
        },
    })
}

/// 3b: `LOCK.INFO` vs `GET` on a held lock.
pub(crate) fn run_info(ctx: &Ctx) -> Box<dyn Outcome> {
    let table = table(
        ctx.srv,
        ctx.s,
        ctx.plan,
        "3b. Single command: read a held lock (op = 1 command)",
        &[
            ("LOCK.INFO", "LOCK.INFO", Op::LockInfo, &[1]),
            ("GET", "GET", Op::Get, &[]),
        ],
    );
    Box::new(Uncontended {
        key: "single_read",
        table,
        targets: |t| {
            let thr = t.vs("LOCK.INFO", "GET", 16).0;
            vec![ratio_target(
                "#14",
                "LOCK.INFO vs GET, batch 16, throughput",
                thr,
                0.95,
            )]
        },
        summary: |t| {
            let m = t.find("LOCK.INFO", 16);
            let (thr, cpu) = t.vs("LOCK.INFO", "GET", 16);
            vec![row(
                "`LOCK.INFO`, batch 16",
                format!(
                    "{} /s (server {} busy)",
                    thousands(m.rate()),
                    percent(m.cpu_util())
                ),
                format!("{} `GET` (server CPU/op: {})", thr.show(), cpu.show()),
            )]
        },
    })
}
