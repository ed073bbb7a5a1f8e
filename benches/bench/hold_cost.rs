//! Workload 11b (issue 22): one command on a key with 1, 1,000 and 50,000 shared holds, one
//! connection, no pipelining: `LOCK.ACQUIRE k t ttl SHARED` + `LOCK.RELEASE k t` with a fresh
//! token each cycle, and `LOCK.EXTEND` of a holder, timed by the client, by the server's CPU
//! and by the server's own count of the commands' time (`INFO commandstats`).

#[allow(unused_imports)]
use crate::*;

/// What a phase of 11b sends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CostOp {
    /// `LOCK.ACQUIRE k c<n> ttl SHARED`, then `LOCK.RELEASE k c<n>`: a new hold, then its end.
    Cycle,
    /// `LOCK.EXTEND k h<H/2> ttl`: a holder's lease moved.
    Extend,
}

impl CostOp {
    pub(crate) fn label(self) -> &'static str {
        match self {
            CostOp::Cycle => "ACQUIRE SHARED + RELEASE",
            CostOp::Extend => "EXTEND of a holder",
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            CostOp::Cycle => "acquire_release",
            CostOp::Extend => "extend",
        }
    }
}

/// One row of 11b (a number of holds and an op), each figure per round.
pub(crate) struct CostRow {
    pub(crate) holds: usize,
    pub(crate) op: CostOp,
    /// Client wall time per op (µs): the round trips.
    pub(crate) client: Vec<f64>,
    /// Server CPU (user + sys) per op (µs).
    pub(crate) cpu: Vec<f64>,
    /// The server's time in the op's commands per op (µs, `INFO commandstats` `usec`).
    pub(crate) cmd: Vec<f64>,
    /// Ops measured, over all rounds.
    pub(crate) ops: u64,
    pub(crate) errors: u64,
}

/// Workload 11b's results.
pub(crate) struct HoldCost {
    pub(crate) rows: Vec<CostRow>,
    /// How long loading the most holds took (pipelined, `LOAD_BATCH` per round trip).
    pub(crate) load: Duration,
    pub(crate) phase: Duration,
}

/// The key with `h` holds.
fn key_of(h: usize) -> String {
    format!("holds:{h}")
}

/// The server's CPU time (s) and (calls, usec) of `LOCK.ACQUIRE`, `LOCK.RELEASE`,
/// `LOCK.EXTEND` so far.
struct Stats {
    cpu: f64,
    cmds: [(f64, f64); 3],
}

const COUNTED: [&str; 3] = ["lock.acquire", "lock.release", "lock.extend"];

fn stats(con: &mut Connection) -> Stats {
    let info = text(&call(con, &["INFO", "cpu", "commandstats"]));
    let num = |name: &str| {
        field(&info, name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cmd = |name: &str| {
        let line = field(&info, &format!("cmdstat_{name}")).unwrap_or("");
        let part = |p: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(p)?.strip_prefix('='))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (part("calls"), part("usec"))
    };
    Stats {
        cpu: num("used_cpu_user") + num("used_cpu_sys"),
        cmds: COUNTED.map(cmd),
    }
}

/// Runs 11b on a server of its own (the run's pinning): loads the holds, then `FEW_ROUNDS`
/// rounds, each every op at every number of holds (in turn, the order reversed every other
/// round), a warm-up and a window of `plan.phase` each.
pub(crate) fn run_hold_cost(plan: &Plan, pinned: bool) -> HoldCost {
    let counts = [1, FEW_HELD, plan.many_holds];
    eprintln!(
        "11b. One command on a key with {} shared holds",
        counts.map(|h| thousands(h as f64)).join(", ")
    );
    let srv = Server::start(if pinned {
        Opts::new().cpu(1)
    } else {
        Opts::new()
    });
    let mut con = srv.conn();
    let mut pipe = Pipe::open(&srv);
    let hold = HOLD_TTL_MS.to_string();
    let mut load_time = Duration::ZERO;
    for h in counts {
        let key = key_of(h);
        let began = Instant::now();
        let make = |i: usize, b: &mut Vec<u8>| {
            push_cmd(
                b,
                &["LOCK.ACQUIRE", &key, &format!("h{i}"), &hold, "SHARED"],
            )
        };
        load(&mut pipe, 0..h, 1, make, |r| r.is_fence());
        load_time = load_time.max(began.elapsed());
        let info = lock_info(&mut con, &key).expect("the loaded key holds");
        assert_eq!(info.holders, h as i64, "holds loaded on {key}");
    }
    let mut pipe = pipe.spinning(plan.spin);
    let mut rows: Vec<CostRow> = [CostOp::Cycle, CostOp::Extend]
        .iter()
        .flat_map(|&op| {
            counts.map(|holds| CostRow {
                holds,
                op,
                client: Vec::new(),
                cpu: Vec::new(),
                cmd: Vec::new(),
                ops: 0,
                errors: 0,
            })
        })
        .collect();
    let mut next_token = 0u64;
    for round in 0..FEW_ROUNDS {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (kind, holds) = (rows[i].op, rows[i].holds);
            let mut op = |n: &mut u64| cost_op(&mut pipe, kind, holds, n, &hold);
            let mut errors = run_for(plan.warmup, || op(&mut next_token));
            let s0 = stats(&mut con);
            let began = Instant::now();
            let mut ops = 0u64;
            errors += run_for(plan.phase, || {
                ops += 1;
                op(&mut next_token)
            });
            let wall = began.elapsed();
            let s1 = stats(&mut con);
            let ops_f = ops as f64;
            let row = &mut rows[i];
            let usec: f64 = (0..COUNTED.len())
                .map(|c| s1.cmds[c].1 - s0.cmds[c].1)
                .sum();
            row.client.push(wall.as_secs_f64() * 1e6 / ops_f);
            row.cpu.push((s1.cpu - s0.cpu) * 1e6 / ops_f);
            row.cmd.push(usec / ops_f);
            row.ops += ops;
            row.errors += errors;
        }
    }
    HoldCost {
        rows,
        load: load_time,
        phase: plan.phase,
    }
}

/// Runs `op` until `len` has passed: the unexpected replies.
fn run_for(len: Duration, mut op: impl FnMut() -> u64) -> u64 {
    let end = Instant::now() + len;
    let mut errors = 0;
    while Instant::now() < end {
        errors += op();
    }
    errors
}

/// One op on the key with `holds` holds, each command its own round trip: unexpected
/// replies (an acquire must reply a fence, a release and an extend 1).
fn cost_op(pipe: &mut Pipe, op: CostOp, holds: usize, n: &mut u64, ttl: &str) -> u64 {
    let key = key_of(holds);
    let mut one = |args: &[&str], ok: fn(Reply) -> bool| {
        let mut buf = Vec::with_capacity(96);
        push_cmd(&mut buf, args);
        pipe.send(&buf);
        u64::from(!ok(pipe.next()))
    };
    match op {
        CostOp::Cycle => {
            *n += 1;
            let token = format!("c{n}");
            one(&["LOCK.ACQUIRE", &key, &token, ttl, "SHARED"], |r| {
                r.is_fence()
            }) + one(&["LOCK.RELEASE", &key, &token], |r| r.int() == Some(1))
        }
        CostOp::Extend => {
            let holder = format!("h{}", holds / 2);
            one(&["LOCK.EXTEND", &key, &holder, ttl], |r| r.int() == Some(1))
        }
    }
}

/// The fields of `LOCK.INFO` that 11 reads; `None` when there is no lock at `key`.
pub(crate) struct LockInfo {
    pub(crate) ttl_ms: i64,
    pub(crate) holders: i64,
    pub(crate) mode: String,
}

pub(crate) fn lock_info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    let pairs: Vec<(Value, Value)> = match call(con, &["LOCK.INFO", key]) {
        Value::Nil => return None,
        Value::Map(m) => m,
        Value::Array(a) => a.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect(),
        other => panic!("LOCK.INFO {key}: {other:?}"),
    };
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| text(k) == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("LOCK.INFO {key}: no {name}"))
    };
    let int = |name: &str| match get(name) {
        Value::Int(i) => i,
        other => panic!("LOCK.INFO {key}: {name} is {other:?}"),
    };
    Some(LockInfo {
        ttl_ms: int("ttl"),
        holders: int("holders"),
        mode: text(&get("mode")),
    })
}

pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl HoldCost {
    /// The row of `op` at the fewest holds (1).
    fn base(&self, op: CostOp) -> &CostRow {
        self.rows.iter().find(|r| r.op == op).expect("a row per op")
    }

    /// Row `r`'s command time against the same op's at 1 hold, by paired rounds (above 1:
    /// dearer), and the same for the client's time per op.
    pub(crate) fn vs_one(&self, r: &CostRow) -> (Paired, Paired) {
        let b = self.base(r.op);
        (Paired::of(&r.cmd, &b.cmd), Paired::of(&r.client, &b.client))
    }

    pub(crate) fn row(&self, op: CostOp, holds: usize) -> &CostRow {
        self.rows
            .iter()
            .find(|r| r.op == op && r.holds == holds)
            .expect("a row per op and count")
    }

    pub(crate) fn print(&self) {
        println!(
            "\n  11b. One command on a key with H shared holds: one connection, no pipelining \
             ({FEW_ROUNDS} rounds of {:.1} s per row, rows interleaved; loading {} holds took \
             {:.2} s); medians over rounds",
            self.phase.as_secs_f64(),
            thousands(self.rows.iter().map(|r| r.holds).max().unwrap_or(0) as f64),
            self.load.as_secs_f64()
        );
        println!(
            "    {:<26} {:>7} {:>9} {:>10} {:>11} {:>4}  vs 1 hold: command µs/op | µs/op",
            "", "holds", "µs/op", "srv µs/op", "command µs", "err"
        );
        for r in &self.rows {
            let (cmd, client) = self.vs_one(r);
            println!(
                "    {:<26} {:>7} {:>9.1} {:>10.2} {:>11.2} {:>4}  {} | {}",
                r.op.label(),
                thousands(r.holds as f64),
                median(&r.client),
                median(&r.cpu),
                median(&r.cmd),
                r.errors,
                cmd.show(),
                client.show()
            );
        }
        println!(
            "    (µs/op: the client's wall time, round trips included; srv: the server's CPU; \
             command: the server's time in the commands, INFO commandstats)"
        );
    }

    pub(crate) fn json(&self) -> Json {
        let rows = self.rows.iter().map(|r| {
            let (cmd, client) = self.vs_one(r);
            let rounds = |v: &[f64]| Json::Arr(v.iter().map(|&x| x.into()).collect());
            obj(vec![
                ("op", r.op.name().into()),
                ("holds", (r.holds as u64).into()),
                ("ops", r.ops.into()),
                ("client_us_per_op", median(&r.client).into()),
                ("server_cpu_us_per_op", median(&r.cpu).into()),
                ("command_us_per_op", median(&r.cmd).into()),
                ("client_us_per_op_rounds", rounds(&r.client)),
                ("server_cpu_us_per_op_rounds", rounds(&r.cpu)),
                ("command_us_per_op_rounds", rounds(&r.cmd)),
                ("command_vs_one_hold", cmd.json()),
                ("client_vs_one_hold", client.json()),
                ("unexpected_replies", r.errors.into()),
            ])
        });
        obj(vec![
            ("rounds", (FEW_ROUNDS as u64).into()),
            ("phase_seconds", self.phase.as_secs_f64().into()),
            ("load_most_holds_seconds", self.load.as_secs_f64().into()),
            ("rows", Json::Arr(rows.collect())),
        ])
    }

    pub(crate) fn errors(&self) -> u64 {
        self.rows.iter().map(|r| r.errors).sum()
    }
}
