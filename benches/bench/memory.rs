//! Workloads 6a and 6b: memory per held lock, and the cycle with many locks held.

#[allow(unused_imports)]
use crate::*;

pub(crate) struct MemRow {
    pub(crate) label: &'static str,
    pub(crate) bytes_per_lock: f64,
}

/// Workload 6a's results: the rows (string lock first, the module's last), and what FLUSHALL
/// leaves of the module's locks, per lock.
struct Memory {
    rows: Vec<MemRow>,
    residual: f64,
    locks: usize,
}

pub(crate) fn run_memory(ctx: &Ctx) -> Box<dyn Outcome> {
    let n = ctx.plan.mem_locks;
    eprintln!("6a. Memory per held lock ({n} locks)");
    let mut con = ctx.srv.conn();
    let mut pipe = Pipe::open(ctx.srv);
    let hold = HOLD_TTL_MS.to_string();
    let tokens: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let key = |i: usize| format!("lock:{i:012}");
    let mut measure = |label: &'static str, per_item: usize, make: &dyn Fn(usize, &mut Vec<u8>)| {
        flushall(&mut con);
        let before = used_memory(&mut con);
        load(&mut pipe, 0..n, per_item, make, held_reply);
        let after = used_memory(&mut con);
        MemRow {
            label,
            bytes_per_lock: (after - before) / n as f64,
        }
    };
    let rows = vec![
        measure("SET NX PX string lock", 1, &|i, b| {
            push_cmd(b, &["SET", &key(i), &tokens[i], "NX", "PX", &hold])
        }),
        measure("SET NX PX + INCR fence key", 2, &|i, b| {
            let k = key(i);
            push_cmd(b, &["SET", &k, &tokens[i], "NX", "PX", &hold]);
            push_cmd(b, &["INCR", &format!("{k}:fence")]);
        }),
        measure("LOCK.ACQUIRE", 1, &|i, b| {
            push_cmd(b, &["LOCK.ACQUIRE", &key(i), &tokens[i], &hold])
        }),
    ];
    // What FLUSHALL leaves of the module's locks (lease-index entries are dropped only when
    // their deadline comes up).
    let before_flush = used_memory(&mut con);
    let held = rows[2].bytes_per_lock * n as f64;
    flushall(&mut con);
    let after_flush = used_memory(&mut con);
    let residual = (after_flush - (before_flush - held)) / n as f64;
    Box::new(Memory {
        rows,
        residual,
        locks: n,
    })
}

impl Memory {
    /// Row `i` over the string lock.
    fn ratio(&self, i: usize) -> f64 {
        self.rows[i].bytes_per_lock / self.rows[0].bytes_per_lock
    }
}

impl Outcome for Memory {
    fn print(&self) {
        println!(
            "\n6a. Memory per held lock ({} locks, used_memory delta)",
            thousands(self.locks as f64)
        );
        for (i, m) in self.rows.iter().enumerate() {
            println!(
                "  {:<36} {:>8.1} bytes/lock  {:.2}× string lock",
                m.label,
                m.bytes_per_lock,
                self.ratio(i)
            );
        }
        println!(
            "  left after FLUSHALL of the module's locks: {:.1} bytes/lock (until their lease \
             deadlines)",
            self.residual
        );
    }

    fn json(&self) -> (&'static str, Json) {
        let rows = self.rows.iter().enumerate().map(|(i, m)| {
            obj(vec![
                ("name", m.label.into()),
                ("bytes_per_lock", m.bytes_per_lock.into()),
                ("ratio_to_string_lock", self.ratio(i).into()),
            ])
        });
        let part = obj(vec![
            ("locks", (self.locks as u64).into()),
            ("rows", Json::Arr(rows.collect())),
            ("left_after_flushall_bytes_per_lock", self.residual.into()),
        ]);
        ("memory", part)
    }

    fn targets(&self) -> Vec<Target> {
        let what = "memory per held lock vs string lock";
        vec![target("#14", what, self.ratio(2), "<=", 1.0, "×")]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        vec![row(
            format!("memory per held lock ({})", thousands(self.locks as f64)),
            format!("{:.1} bytes", self.rows[2].bytes_per_lock),
            format!(
                "{:.2}× a `SET NX PX` string lock (string lock + fence key: {:.2}×)",
                self.ratio(2),
                self.ratio(1)
            ),
        )]
    }

    fn errors(&self) -> u64 {
        0
    }
}

/// Workload 6b's results: LOCK few, LOCK many, floor few, floor many.
struct Held(Table);

/// The cycle at batch 16 with few, then many, locks held: module cycles among held module
/// locks, and (for reference: how much Redis itself slows down with a bigger keyspace) floor
/// cycles among as many held string locks, each from an emptied keyspace.
pub(crate) fn run_held(ctx: &Ctx) -> Box<dyn Outcome> {
    let (srv, s, plan) = (ctx.srv, ctx.s, ctx.plan);
    let title = format!(
        "6b. Cycle at batch 16 with {} vs {} locks held",
        thousands(plan.few_held as f64),
        thousands(plan.many_held as f64)
    );
    eprintln!("{title}");
    let mut con = srv.conn();
    let mut pipe = Pipe::open(srv);
    let hold = HOLD_TTL_MS.to_string();
    let token = uuid::Uuid::new_v4().to_string();
    let mut measure = |label: &str, op: Op, few: &mut Measured, many: &mut Measured| {
        flushall(&mut con);
        let mut hold_locks = |range: std::ops::Range<usize>| {
            let make = |i: usize, b: &mut Vec<u8>| {
                let key = format!("held:{i:09}");
                match op {
                    Op::LockCycle => push_cmd(b, &["LOCK.ACQUIRE", &key, &token, &hold]),
                    _ => push_cmd(b, &["SET", &key, &token, "NX", "PX", &hold]),
                }
            };
            load(&mut pipe, range, 1, make, held_reply);
        };
        hold_locks(0..plan.few_held);
        let label_few = format!("{label}, {} held", thousands(plan.few_held as f64));
        few.absorb(run_phase(srv, s, plan, plan.phase, (&label_few, op, 16)));
        hold_locks(plan.few_held..plan.many_held);
        let label_many = format!("{label}, {} held", thousands(plan.many_held as f64));
        many.absorb(run_phase(srv, s, plan, plan.phase, (&label_many, op, 16)));
    };
    // Rounds alternate the module and the floor, each loaded afresh, as in the other tables:
    // on a shared machine one long phase each was as noisy as the effect measured.
    let names = |label: &str| {
        (
            format!("{label}, {} held", thousands(plan.few_held as f64)),
            format!("{label}, {} held", thousands(plan.many_held as f64)),
        )
    };
    let (lf, lm) = names("LOCK cycle");
    let (ff, fm) = names("floor cycle");
    let (mut lock_few, mut lock_many) = (Measured::empty(&lf, 16), Measured::empty(&lm, 16));
    let (mut floor_few, mut floor_many) = (Measured::empty(&ff, 16), Measured::empty(&fm, 16));
    for _ in 0..FEW_ROUNDS {
        measure("LOCK cycle", Op::LockCycle, &mut lock_few, &mut lock_many);
        measure(
            "floor cycle",
            Op::FloorCycle,
            &mut floor_few,
            &mut floor_many,
        );
    }
    flushall(&mut con);
    let row = |m, short, vs| Row { m, short, vs };
    Box::new(Held(Table {
        title,
        rows: vec![
            row(lock_few, "LOCK few", vec![]),
            row(lock_many, "LOCK few", vec![0]),
            row(floor_few, "floor few", vec![]),
            row(floor_many, "floor few", vec![2]),
        ],
    }))
}

impl Held {
    /// Many held against few, module (0) or floor (2), by paired rounds.
    fn many_vs_few(&self, first: usize) -> Paired {
        let rows = &self.0.rows;
        Paired::of(&rows[first + 1].m.rounds, &rows[first].m.rounds)
    }
    fn sizes(&self) -> String {
        let held = |i: usize| self.0.rows[i].m.label.rsplit(", ").next().unwrap_or("");
        format!("{} vs {}", held(1), held(0))
    }
}

impl Outcome for Held {
    fn print(&self) {
        self.0.print();
    }
    fn json(&self) -> (&'static str, Json) {
        ("held_locks", self.0.json())
    }
    fn targets(&self) -> Vec<Target> {
        let what = format!("cycle throughput, {}", self.sizes());
        vec![ratio_target("#14", what, self.many_vs_few(0), 0.90)]
    }
    fn summary(&self) -> Vec<SummaryRow> {
        vec![row(
            format!("cycle with {}", self.sizes()),
            self.many_vs_few(0).show(),
            format!("the floor: {}", self.many_vs_few(2).show()),
        )]
    }
    fn errors(&self) -> u64 {
        self.0.errors()
    }
}
