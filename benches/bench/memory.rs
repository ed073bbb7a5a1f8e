//! Workloads 6a and 6b: memory per held lock, and the cycle with many locks held.

#[allow(unused_imports)]
use crate::*;

// Workload 6: memory per held lock, and throughput with many locks held.

pub(crate) struct MemRow {
    pub(crate) label: &'static str,
    pub(crate) bytes_per_lock: f64,
}

pub(crate) fn run_memory(srv: &Server, plan: &Plan) -> (Vec<MemRow>, f64) {
    eprintln!("6. Memory per held lock ({} locks)", plan.mem_locks);
    let mut con = srv.connect();
    let n = plan.mem_locks;
    let hold = HOLD_TTL_MS.to_string();
    let tokens: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let key = |i: usize| format!("lock:{i:012}");
    let mut measure = |label: &'static str, per_item: usize, make: &dyn Fn(usize, &mut Vec<u8>)| {
        flushall(&mut con);
        let before = used_memory(&mut con);
        load(&mut con, 0..n, per_item, make, |v| {
            matches!(v, Value::Okay | Value::Int(_))
        });
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
    (rows, residual)
}

/// The cycle at batch 16 with few, then many, locks held: module cycles among held module
/// locks, and (for reference: how much Redis itself slows down with a bigger keyspace) floor
/// cycles among as many held string locks, each from an emptied keyspace.
pub(crate) fn run_held(srv: &Server, s: &Scripts, plan: &Plan) -> Table {
    let title = format!(
        "6b. Cycle at batch 16 with {} vs {} locks held",
        thousands(plan.few_held as f64),
        thousands(plan.many_held as f64)
    );
    eprintln!("{title}");
    let mut con = srv.connect();
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
            load(&mut con, range, 1, make, |v| {
                matches!(v, Value::Okay | Value::Int(_))
            });
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
    Table {
        title,
        rows: vec![
            Row {
                m: lock_few,
                short: "LOCK few",
                vs: vec![],
            },
            Row {
                m: lock_many,
                short: "LOCK few",
                vs: vec![0],
            },
            Row {
                m: floor_few,
                short: "floor few",
                vs: vec![],
            },
            Row {
                m: floor_many,
                short: "floor few",
                vs: vec![2],
            },
        ],
    }
}
