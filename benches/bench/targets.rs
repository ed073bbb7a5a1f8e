//! The targets the results are checked against (issue 4; issue 12's are in `guard`, issue
//! 13's in `shared` and `semaphore`).

#[allow(unused_imports)]
use crate::*;

// Targets of issues 4 and 12, checked against the measurements.

pub(crate) struct Target {
    pub(crate) what: String,
    pub(crate) measured: f64,
    pub(crate) goal: f64,
    /// true: measured ≥ goal is met; false: measured ≤ goal is met.
    pub(crate) at_least: bool,
    pub(crate) unit: &'static str,
}

impl Target {
    pub(crate) fn met(&self) -> bool {
        if self.at_least {
            self.measured >= self.goal
        } else {
            self.measured <= self.goal
        }
    }
}

pub(crate) fn target(
    what: impl Into<String>,
    measured: f64,
    cmp: &str,
    goal: f64,
    unit: &'static str,
) -> Target {
    Target {
        what: what.into(),
        measured,
        goal,
        at_least: cmp == ">=",
        unit,
    }
}

/// Issue 4's targets: `tables` are workloads 1, 2, 3a and 6b.
pub(crate) fn issue4_targets(
    plan: &Plan,
    [cycle, fenced, acquire, held]: [&Table; 4],
    contended: &[Contended],
    lease: &LeaseEnd,
    memory: &[MemRow],
) -> Vec<Target> {
    let string_bytes = memory[0].bytes_per_lock;
    let lock_memory = memory[2].bytes_per_lock;
    let wait = &contended[0];
    let cycle_lock = cycle.find("LOCK.ACQUIRE + LOCK.RELEASE", 16);
    let cycle_lua = cycle.find("SET NX PX + EVALSHA del (Lua)", 16);
    let cycle_floor = cycle.find("SET PX + DEL (floor)", 16);
    let fenced_lock = fenced.find("LOCK.ACQUIRE (fence) + LOCK.RELEASE", 16);
    let fenced_lua = fenced.find("EVALSHA SET NX PX+INCR, EVALSHA del", 16);
    let acq_lock = acquire.find("LOCK.ACQUIRE", 16);
    let acq_set = acquire.find("SET NX PX", 16);
    let thr = throughput_ratio;
    let cpu = cpu_ratio;
    let violations: u64 = contended.iter().map(|c| c.violations).sum();
    vec![
        target(
            "cycle, batch 16, throughput vs floor",
            thr(cycle_lock, cycle_floor),
            ">=",
            0.90,
            "×",
        ),
        target(
            "cycle, batch 16, server CPU/op vs floor",
            cpu(cycle_lock, cycle_floor),
            ">=",
            0.90,
            "×",
        ),
        target(
            "cycle, batch 16, throughput vs Lua",
            thr(cycle_lock, cycle_lua),
            ">=",
            1.7,
            "×",
        ),
        target(
            "cycle, batch 16, server CPU/op vs Lua",
            cpu(cycle_lock, cycle_lua),
            ">=",
            1.7,
            "×",
        ),
        target(
            "fenced cycle, batch 16, throughput vs Lua fenced",
            thr(fenced_lock, fenced_lua),
            ">=",
            3.0,
            "×",
        ),
        target(
            "fenced cycle, batch 16, server CPU/op vs Lua fenced",
            cpu(fenced_lock, fenced_lua),
            ">=",
            3.0,
            "×",
        ),
        target(
            "LOCK.ACQUIRE, batch 16, throughput vs SET NX PX",
            thr(acq_lock, acq_set),
            ">=",
            0.90,
            "×",
        ),
        target(
            "LOCK.ACQUIRE, batch 16, server CPU/op vs SET NX PX",
            cpu(acq_lock, acq_set),
            ">=",
            0.90,
            "×",
        ),
        target(
            "contended hand-offs/s vs 1 ms poll",
            wait.handoff_ratio(&contended[2]),
            ">=",
            3.0,
            "×",
        ),
        target(
            "contended hand-offs/s vs pub/sub",
            wait.handoff_ratio(&contended[3]),
            ">=",
            150.0,
            "×",
        ),
        target(
            "contended fairness (Jain) with WAIT",
            wait.fairness(),
            ">=",
            0.999,
            "",
        ),
        target(
            "contended exclusion violations (all schemes)",
            violations as f64,
            "<=",
            0.0,
            "",
        ),
        target(
            "lease-end hand-off p99",
            lease.delays.value_at_quantile(0.99) as f64 / 1000.0,
            "<=",
            5.0,
            " ms",
        ),
        target(
            "memory per held lock vs string lock",
            lock_memory / string_bytes,
            "<=",
            1.3,
            "×",
        ),
        target(
            format!(
                "cycle throughput, {} held vs {} held",
                thousands(plan.many_held as f64),
                thousands(plan.few_held as f64)
            ),
            held.ratios(1, 0).0,
            ">=",
            0.90,
            "×",
        ),
    ]
}

pub(crate) fn print_targets(title: &str, targets: &[Target]) {
    println!("\n{title}");
    for t in targets {
        println!(
            "  {:<58} {:>9.3}{:<3} (goal {} {}{})  {}",
            t.what,
            t.measured,
            t.unit,
            if t.at_least { "≥" } else { "≤" },
            t.goal,
            t.unit,
            if t.met() { "met" } else { "MISSED" }
        );
    }
}

pub(crate) fn targets_json(targets: &[Target]) -> Json {
    Json::Arr(
        targets
            .iter()
            .map(|t| {
                obj(vec![
                    ("what", t.what.as_str().into()),
                    ("measured", t.measured.into()),
                    ("goal", t.goal.into()),
                    ("at_least", t.at_least.into()),
                    ("met", t.met().into()),
                ])
            })
            .collect(),
    )
}
