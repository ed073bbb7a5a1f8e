//! Throughput phases (workloads 1, 2, 3 and 6): ops, driving threads, measuring, tables.

#[allow(unused_imports)]
use crate::*;

// Throughput phases (workloads 1, 2, 3, 6): CONNS threads, one connection each.

/// What one op of a throughput phase sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    /// `LOCK.ACQUIRE key token ttl`, then `LOCK.RELEASE key token`.
    LockCycle,
    /// `SET key token NX PX ttl`, then `EVALSHA` compare-and-delete.
    LuaCycle,
    /// `SET key token PX ttl`, then `DEL key`.
    FloorCycle,
    /// `EVALSHA` (`SET NX PX` + `INCR key:fence`), then `EVALSHA` compare-and-delete.
    LuaFencedCycle,
    /// `LOCK.ACQUIRE` on a fresh key.
    LockAcquire,
    /// `SET NX PX` on a fresh key.
    SetNx,
    /// `LOCK.INFO` of a held lock.
    LockInfo,
    /// `GET` of a string lock.
    Get,
}

impl Op {
    pub(crate) fn steps(self) -> usize {
        match self {
            Op::LockCycle | Op::LuaCycle | Op::FloorCycle | Op::LuaFencedCycle => 2,
            Op::LockAcquire | Op::SetNx | Op::LockInfo | Op::Get => 1,
        }
    }

    /// The key of op number `n` of connection `t`: cycles go round a keyspace, fresh-key ops
    /// never repeat a key, reads read one key.
    pub(crate) fn key(self, t: usize, n: u64) -> String {
        let i = match self {
            Op::LockAcquire | Op::SetNx => n,
            Op::LockInfo | Op::Get => 0,
            _ => n % KEYSPACE,
        };
        format!("lk:{t}:{i:09}")
    }

    pub(crate) fn encode(
        self,
        step: usize,
        key: &str,
        token: &str,
        s: &Scripts,
        buf: &mut Vec<u8>,
    ) {
        let ttl = TTL_MS.to_string();
        match (self, step) {
            (Op::LockCycle | Op::LockAcquire, 0) => {
                push_cmd(buf, &["LOCK.ACQUIRE", key, token, &ttl])
            }
            (Op::LockCycle, _) => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            (Op::LuaCycle | Op::SetNx, 0) => push_cmd(buf, &["SET", key, token, "NX", "PX", &ttl]),
            (Op::FloorCycle, 0) => push_cmd(buf, &["SET", key, token, "PX", &ttl]),
            (Op::FloorCycle, _) => push_cmd(buf, &["DEL", key]),
            (Op::LuaFencedCycle, 0) => {
                let fence_key = format!("{key}:fence");
                let sha = &s.fenced_acquire;
                push_cmd(buf, &["EVALSHA", sha, "2", key, &fence_key, token, &ttl])
            }
            (Op::LuaCycle | Op::LuaFencedCycle, _) => {
                push_cmd(buf, &["EVALSHA", &s.release, "1", key, token])
            }
            (Op::LockInfo, _) => push_cmd(buf, &["LOCK.INFO", key]),
            (Op::Get, _) => push_cmd(buf, &["GET", key]),
            (Op::SetNx, _) | (Op::LockAcquire, _) => unreachable!(),
        }
    }

    /// Whether `v` is the reply of a successful step (a lock taken, released, read).
    pub(crate) fn accepts(self, step: usize, v: &Value) -> bool {
        match (self, step) {
            (Op::LockCycle | Op::LockAcquire | Op::LuaFencedCycle, 0) => {
                matches!(v, Value::Int(f) if *f > 0)
            }
            (Op::LuaCycle | Op::FloorCycle | Op::SetNx, 0) => matches!(v, Value::Okay),
            // RESP2 flat array: 6 fields since shared holds (issue 13), 4 before.
            (Op::LockInfo, _) => matches!(v, Value::Array(a) if a.len() == 12 || a.len() == 8),
            (Op::Get, _) => matches!(v, Value::BulkString(_)),
            (_, _) => matches!(v, Value::Int(1)),
        }
    }

    /// How to remove the keys a fresh-key op left behind.
    pub(crate) fn cleanup(self, key: &str, token: &str, buf: &mut Vec<u8>) {
        match self {
            Op::LockAcquire => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            Op::SetNx => push_cmd(buf, &["DEL", key]),
            _ => {}
        }
    }
}

/// One measured phase.
pub(crate) struct Measured {
    pub(crate) label: String,
    pub(crate) depth: usize,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) cpu_secs: f64,
    pub(crate) errors: u64,
    /// ops/s of each round.
    pub(crate) rounds: Vec<f64>,
    /// Server CPU µs per op of each round.
    pub(crate) round_cpu: Vec<f64>,
}

impl Measured {
    pub(crate) fn empty(label: &str, depth: usize) -> Measured {
        Measured {
            label: label.to_string(),
            depth,
            ops: 0,
            secs: 0.0,
            hist: new_hist(),
            cpu_secs: 0.0,
            errors: 0,
            rounds: Vec::new(),
            round_cpu: Vec::new(),
        }
    }
    /// Adds one more round of the same phase.
    pub(crate) fn absorb(&mut self, round: Measured) {
        self.ops += round.ops;
        self.secs += round.secs;
        self.cpu_secs += round.cpu_secs;
        self.errors += round.errors;
        self.hist.add(&round.hist).unwrap();
        self.rounds.extend(round.rounds);
        self.round_cpu.extend(round.round_cpu);
    }
    /// (max − min) / mean of the rounds' ops/s: how far one round can be trusted (NaN for
    /// a single round).
    pub(crate) fn spread(&self) -> f64 {
        if self.rounds.len() < 2 {
            return f64::NAN;
        }
        let max = self.rounds.iter().cloned().fold(f64::MIN, f64::max);
        let min = self.rounds.iter().cloned().fold(f64::MAX, f64::min);
        let mean = self.rounds.iter().sum::<f64>() / self.rounds.len() as f64;
        (max - min) / mean
    }
    pub(crate) fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    pub(crate) fn cpu_us_per_op(&self) -> f64 {
        self.cpu_secs * 1e6 / self.ops as f64
    }
    pub(crate) fn cpu_util(&self) -> f64 {
        self.cpu_secs / self.secs
    }
    pub(crate) fn json(&self) -> Json {
        obj(vec![
            ("name", self.label.as_str().into()),
            ("pipeline", (self.depth as u64).into()),
            ("ops", self.ops.into()),
            ("seconds", self.secs.into()),
            ("ops_per_sec", self.rate().into()),
            ("p50_us", self.hist.value_at_quantile(0.5).into()),
            ("p99_us", self.hist.value_at_quantile(0.99).into()),
            ("p999_us", self.hist.value_at_quantile(0.999).into()),
            ("max_us", self.hist.max().into()),
            ("server_cpu_us_per_op", self.cpu_us_per_op().into()),
            ("server_cpu_util", self.cpu_util().into()),
            ("errors", self.errors.into()),
            ("spread", self.spread().into()),
            (
                "round_ops_per_sec",
                Json::Arr(self.rounds.iter().map(|&r| r.into()).collect()),
            ),
        ])
    }
}

/// The measurement window, shared by every thread of a phase.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

pub(crate) struct ThreadResult {
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    pub(crate) hist: Histogram<u64>,
}

/// One connection's loop: batches of `depth` ops until the window ends.
pub(crate) fn drive(
    op: Op,
    depth: usize,
    t: usize,
    mut con: Connection,
    s: &Scripts,
    w: Window,
) -> ThreadResult {
    let token = uuid::Uuid::new_v4().to_string();
    let hold = HOLD_TTL_MS.to_string();
    let key0 = op.key(t, 0);
    match op {
        Op::LockInfo => drop(call(&mut con, &["LOCK.ACQUIRE", &key0, &token, &hold])),
        Op::Get => drop(call(&mut con, &["SET", &key0, &token, "PX", &hold])),
        _ => {}
    }
    let mut r = ThreadResult {
        ops: 0,
        errors: 0,
        hist: new_hist(),
    };
    let mut buf = Vec::with_capacity(4096);
    let mut keys: Vec<String> = Vec::with_capacity(depth);
    let mut n = 0u64;
    loop {
        let began = Instant::now();
        if began >= w.end {
            break;
        }
        keys.clear();
        keys.extend((0..depth as u64).map(|i| op.key(t, n + i)));
        n += depth as u64;
        for step in 0..op.steps() {
            buf.clear();
            for k in &keys {
                op.encode(step, k, &token, s, &mut buf);
            }
            let replies = pipeline(&mut con, &buf, depth);
            r.errors += replies.iter().filter(|v| !op.accepts(step, v)).count() as u64;
        }
        let done = Instant::now();
        if done >= w.start && done < w.end {
            r.ops += depth as u64;
            r.hist.record(micros(done - began)).unwrap();
        }
    }
    // Fresh-key ops leave their keys behind: remove them, unmeasured, so that the next phase
    // starts from an empty keyspace and an empty lease index.
    if matches!(op, Op::LockAcquire | Op::SetNx) {
        let token = &token;
        load(
            &mut con,
            0..n as usize,
            1,
            |i, buf| op.cleanup(&op.key(t, i as u64), token, buf),
            |v| matches!(v, Value::Int(1)),
        );
    }
    r
}

/// Runs `op` on `CONNS` connections for one warm-up and a measurement window of `phase`.
pub(crate) fn run_phase(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    phase: Duration,
    (label, op, depth): (&str, Op, usize),
) -> Measured {
    run_threads(srv, plan, phase, (label, depth), |t, con, w| {
        drive(op, depth, t, con, s, w)
    })
}

/// Runs `drive(t, connection, window)` on `CONNS` connections, one thread each, for one
/// warm-up and a measurement window of `phase`, and measures the server's CPU over the window.
pub(crate) fn run_threads(
    srv: &Server,
    plan: &Plan,
    phase: Duration,
    (label, depth): (&str, usize),
    drive: impl Fn(usize, Connection, Window) -> ThreadResult + Sync,
) -> Measured {
    let mut probe = srv.connect();
    let conns: Vec<Connection> = (0..CONNS).map(|_| srv.connect()).collect();
    let t0 = Instant::now();
    let w = Window {
        start: t0 + plan.warmup,
        end: t0 + plan.warmup + phase,
    };
    let drive = &drive;
    let (results, cpu) = thread::scope(|scope| {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(t, con)| scope.spawn(move || drive(t, con, w)))
            .collect();
        sleep_until(w.start);
        let c0 = server_cpu(&mut probe);
        sleep_until(w.end);
        let c1 = server_cpu(&mut probe);
        let results: Vec<ThreadResult> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, c1 - c0)
    });
    let mut m = Measured::empty(label, depth);
    m.secs = (w.end - w.start).as_secs_f64();
    m.cpu_secs = cpu;
    for r in results {
        m.ops += r.ops;
        m.errors += r.errors;
        m.hist.add(&r.hist).unwrap();
    }
    m.rounds.push(m.rate());
    m.round_cpu.push(m.cpu_us_per_op());
    eprintln!(
        "  {:<44} batch {:>2}: {:>10.0} ops/s  (server cpu {:>3.0}%)",
        label,
        depth,
        m.rate(),
        m.cpu_util() * 100.0
    );
    m
}

/// The median over rounds of `a`'s ops/s over `b`'s in the same round. Rounds of a variant
/// and its baselines run next to each other, so a slow spell of a shared machine shows in
/// both halves of a pair; one long aggregate would carry it into the ratio.
pub(crate) fn throughput_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&a.rounds, &b.rounds)
}

/// As `throughput_ratio`, for server CPU per op (`b`'s over `a`'s: above 1 means `a` costs less).
pub(crate) fn cpu_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&b.round_cpu, &a.round_cpu)
}

pub(crate) fn paired_median(a: &[f64], b: &[f64]) -> f64 {
    let r = paired_ratios(a, b);
    match r.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => r[n / 2],
        n => (r[n / 2 - 1] + r[n / 2]) / 2.0,
    }
}

/// Each round's `a` over `b`'s round next to it, sorted.
pub(crate) fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    assert_eq!(a.len(), b.len(), "rounds to pair");
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(f64::total_cmp);
    r
}

/// A table row: a measurement, its short name for ratios, and the rows it is compared to.
pub(crate) struct Row {
    pub(crate) m: Measured,
    pub(crate) short: &'static str,
    pub(crate) vs: Vec<usize>,
}

/// Rows of one workload that share a table.
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) rows: Vec<Row>,
}

impl Table {
    /// This row's throughput and server-CPU ratios to row `j`.
    pub(crate) fn ratios(&self, i: usize, j: usize) -> (f64, f64) {
        let (a, b) = (&self.rows[i].m, &self.rows[j].m);
        (throughput_ratio(a, b), cpu_ratio(a, b))
    }

    pub(crate) fn print(&self) {
        println!("\n{}", self.title);
        println!(
            "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9} {:>7} {:>4}  vs baselines: throughput | server CPU/op",
            "", "batch", "ops/s", "spread", "p50µs", "p99µs", "p999µs", "srv µs/op", "srv cpu", "err"
        );
        for (i, row) in self.rows.iter().enumerate() {
            let m = &row.m;
            let (thr, cpu): (Vec<String>, Vec<String>) = row
                .vs
                .iter()
                .map(|&j| {
                    let (t, c) = self.ratios(i, j);
                    let name = self.rows[j].short;
                    (format!("{t:.2}× {name}"), format!("{c:.2}× {name}"))
                })
                .unzip();
            let ratios = if thr.is_empty() {
                String::new()
            } else {
                format!("{} | {}", thr.join(", "), cpu.join(", "))
            };
            println!(
                "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9.2} {:>6.0}% {:>4}  {}",
                m.label,
                m.depth,
                thousands(m.rate()),
                percent(m.spread()),
                m.hist.value_at_quantile(0.5),
                m.hist.value_at_quantile(0.99),
                m.hist.value_at_quantile(0.999),
                m.cpu_us_per_op(),
                m.cpu_util() * 100.0,
                m.errors,
                ratios
            );
        }
    }

    pub(crate) fn json(&self) -> Json {
        let rows = self.rows.iter().enumerate().map(|(i, row)| {
            let mut j = row.m.json();
            let ratios = row.vs.iter().map(|&k| {
                let (t, c) = self.ratios(i, k);
                obj(vec![
                    ("baseline", self.rows[k].m.label.as_str().into()),
                    ("throughput_ratio", t.into()),
                    ("server_cpu_ratio", c.into()),
                ])
            });
            if let Json::Obj(fields) = &mut j {
                fields.push(("vs".into(), Json::Arr(ratios.collect())));
            }
            j
        });
        obj(vec![
            ("title", self.title.as_str().into()),
            ("rows", Json::Arr(rows.collect())),
        ])
    }

    pub(crate) fn find(&self, label: &str, depth: usize) -> &Measured {
        &self
            .rows
            .iter()
            .find(|r| r.m.label == label && r.m.depth == depth)
            .unwrap_or_else(|| panic!("no row {label} at batch {depth}"))
            .m
    }
}

/// Runs each (label, short name, op, compared-to) at each depth, `ROUNDS` times interleaved.
pub(crate) fn table(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    title: &str,
    variants: &[(&str, &'static str, Op, &[usize])],
) -> Table {
    let names: Vec<_> = variants.iter().map(|&(l, sh, _, vs)| (l, sh, vs)).collect();
    table_with(srv, title, &names, |i, depth| {
        let (label, _, op, _) = variants[i];
        run_phase(srv, s, plan, plan.phase, (label, op, depth))
    })
}

/// Runs `run(variant, depth)` for each (label, short name, compared-to) at each depth,
/// `ROUNDS` times interleaved (A B C, C B A, ...), each from an emptied keyspace.
pub(crate) fn table_with(
    srv: &Server,
    title: &str,
    variants: &[(&str, &'static str, &[usize])],
    mut run: impl FnMut(usize, usize) -> Measured,
) -> Table {
    eprintln!("{title}");
    let mut flush = srv.connect();
    let mut rows = Vec::new();
    for depth in DEPTHS {
        let base = rows.len();
        for &(label, short, vs) in variants {
            let m = Measured::empty(label, depth);
            let vs = vs.iter().map(|j| base + j).collect();
            rows.push(Row { m, short, vs });
        }
        for round in 0..ROUNDS {
            let mut order: Vec<usize> = (0..variants.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                flushall(&mut flush);
                let m = run(i, depth);
                rows[base + i].m.absorb(m);
            }
        }
    }
    Table {
        title: title.to_string(),
        rows,
    }
}
