//! Workload 8: the shared acquire+release cycle (issue 13). `LOCK.ACQUIRE k t ttl SHARED` +
//! `LOCK.RELEASE k t` against the native floor of workload 1 (`SET k t PX ttl` + `DEL k`), on
//! keys of the connection's own (each cycle creates and removes a key, as the floor does) and
//! on ONE key for all connections (every op of a batch with a token of its own, so up to
//! `CONNS` × 16 shared holds coexist), with the exclusive cycle for reference; batches of 1
//! and 16, `ROUNDS` paired rounds.

#[allow(unused_imports)]
use crate::*;

/// What one op of the shared-cycle workload sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SharedOp {
    /// `LOCK.ACQUIRE key token ttl SHARED`, `LOCK.RELEASE key token` on the connection's keys.
    Own,
    /// The same on one key shared by every connection, a token per op of a batch.
    One,
    /// `LOCK.ACQUIRE key token ttl`, `LOCK.RELEASE key token` on the connection's keys.
    Exclusive,
    /// `SET key token PX ttl`, `DEL key` on the connection's keys (workload 1's floor).
    Floor,
}

/// (label, short name, op, compared-to) of the table's rows.
pub(crate) const SHARED_VARIANTS: [(&str, &str, SharedOp, &[usize]); 4] = [
    (
        "ACQUIRE SHARED + RELEASE, own keys",
        "SHARED",
        SharedOp::Own,
        &[3],
    ),
    (
        "ACQUIRE SHARED + RELEASE, one key",
        "SHARED 1 key",
        SharedOp::One,
        &[3],
    ),
    (
        "ACQUIRE + RELEASE (exclusive, ref.)",
        "LOCK",
        SharedOp::Exclusive,
        &[3],
    ),
    ("SET PX + DEL (floor)", "floor", SharedOp::Floor, &[]),
];

/// The key every connection shares in `SharedOp::One`.
pub(crate) const SHARED_ONE_KEY: &str = "shared:one";

impl SharedOp {
    /// The key of op number `n` of connection `t`.
    fn key(self, t: usize, n: u64) -> String {
        match self {
            SharedOp::One => SHARED_ONE_KEY.to_string(),
            _ => format!("sh:{t}:{:09}", n % KEYSPACE),
        }
    }

    /// Step 0 (acquire) or 1 (release) of every op of a batch.
    fn encode(self, step: usize, keys: &[String], tokens: &[String], buf: &mut Vec<u8>) {
        let ttl = TTL_MS.to_string();
        for (key, token) in keys.iter().zip(tokens) {
            let (key, token) = (key.as_str(), token.as_str());
            match (self, step) {
                (SharedOp::Own | SharedOp::One, 0) => {
                    push_cmd(buf, &["LOCK.ACQUIRE", key, token, &ttl, "SHARED"])
                }
                (SharedOp::Exclusive, 0) => push_cmd(buf, &["LOCK.ACQUIRE", key, token, &ttl]),
                (SharedOp::Floor, 0) => push_cmd(buf, &["SET", key, token, "PX", &ttl]),
                (SharedOp::Floor, _) => push_cmd(buf, &["DEL", key]),
                (_, _) => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            }
        }
    }

    /// The replies of a step that are not what a working lock replies: an acquire a fence
    /// (on one key, each above the one before, as every new hold gets a new fence; the floor
    /// `OK`), a release 1.
    fn unexpected(self, step: usize, replies: &[Value]) -> u64 {
        let mut last = 0;
        let mut bad = 0;
        for v in replies {
            let ok = match (self, step, v) {
                (SharedOp::Floor, 0, v) => *v == Value::Okay,
                (_, 0, Value::Int(f)) => {
                    let increasing = self != SharedOp::One || *f > last;
                    last = *f;
                    *f > 0 && increasing
                }
                (_, 0, _) => false,
                (_, _, v) => *v == Value::Int(1),
            };
            bad += u64::from(!ok);
        }
        bad
    }
}

/// The tokens of a batch of `depth`: one per op on the shared key (holds that coexist), the
/// connection's one token elsewhere (each op its own key).
fn batch_tokens(op: SharedOp, depth: usize) -> Vec<String> {
    let token = uuid::Uuid::new_v4().to_string();
    (0..depth)
        .map(|j| match op {
            SharedOp::One => format!("{token}:{j}"),
            _ => token.clone(),
        })
        .collect()
}

/// One batch: every acquire pipelined, then every release; the count of unexpected replies.
fn batch(con: &mut Connection, op: SharedOp, keys: &[String], tokens: &[String]) -> u64 {
    let mut buf = Vec::with_capacity(4096);
    let mut bad = 0;
    for step in 0..2 {
        buf.clear();
        op.encode(step, keys, tokens, &mut buf);
        bad += op.unexpected(step, &pipeline(con, &buf, keys.len()));
    }
    bad
}

/// One connection's loop: batches of `depth` cycles until the window ends.
pub(crate) fn drive_shared(
    op: SharedOp,
    depth: usize,
    t: usize,
    mut con: Connection,
    w: Window,
) -> ThreadResult {
    let tokens = batch_tokens(op, depth);
    let mut r = ThreadResult {
        ops: 0,
        errors: 0,
        hist: new_hist(),
    };
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
        r.errors += batch(&mut con, op, &keys, &tokens);
        let done = Instant::now();
        if done >= w.start && done < w.end {
            r.ops += depth as u64;
            r.hist.record(micros(done - began)).unwrap();
        }
    }
    r
}

/// `LOCK.INFO`'s reply (a flat array in RESP2, a map in RESP3) as (field, value) pairs.
pub(crate) fn info_fields(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Array(a) => a
            .chunks(2)
            .map(|kv| (text(&kv[0]), kv[1].clone()))
            .collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        other => panic!("LOCK.INFO replied {other:?}"),
    }
}

/// `LOCK.INFO key`'s mode and holder count; ("none", 0) when the key does not exist.
pub(crate) fn mode_and_holders(con: &mut Connection, key: &str) -> (String, i64) {
    let v = call(con, &["LOCK.INFO", key]);
    if v == Value::Nil {
        return ("none".into(), 0);
    }
    let fields = info_fields(&v);
    let get = |name: &str| {
        let f = fields.iter().find(|(k, _)| k == name);
        f.unwrap_or_else(|| panic!("LOCK.INFO has no {name}: {v:?}"))
            .1
            .clone()
    };
    let holders = match get("holders") {
        Value::Int(n) => n,
        other => panic!("LOCK.INFO holders: {other:?}"),
    };
    (text(&get("mode")), holders)
}

/// Checks, once, that the cycles measured are the real thing, and returns (what, reply)
/// steps: a shared acquire on a free key replies a fence and the key is then held shared by
/// one holder, its release replies 1 and removes the key; two tokens on one key both hold it
/// (the second fence above the first) and each release replies 1; a batch of 16 of each
/// variant, through the very code the phases run, gets only expected replies. Panics
/// otherwise.
pub(crate) fn check_shared(srv: &Server) -> Vec<(String, String)> {
    let mut con = srv.connect();
    flushall(&mut con);
    let ttl = TTL_MS.to_string();
    let mut steps = Vec::new();
    let fence = |v: Value, what: &str| match v {
        Value::Int(f) if f > 0 => f,
        other => panic!("{what}: expected a fence, got {other:?}"),
    };
    let exists = |con: &mut Connection, key: &str| call(con, &["EXISTS", key]) == Value::Int(1);

    let f = fence(
        call(&mut con, &["LOCK.ACQUIRE", "sh:check", "a", &ttl, "SHARED"]),
        "SHARED on a free key",
    );
    let mh = mode_and_holders(&mut con, "sh:check");
    assert_eq!(
        mh,
        ("shared".into(), 1),
        "LOCK.INFO after one shared acquire"
    );
    steps.push(("ACQUIRE SHARED on a free key".into(), format!("fence {f}")));
    steps.push((
        "  LOCK.INFO mode, holders".into(),
        format!("{}, {}", mh.0, mh.1),
    ));
    let released = call(&mut con, &["LOCK.RELEASE", "sh:check", "a"]);
    assert_eq!(released, Value::Int(1), "LOCK.RELEASE of the shared hold");
    assert!(
        !exists(&mut con, "sh:check"),
        "the key after its last release"
    );
    steps.push(("  LOCK.RELEASE; EXISTS".into(), "1; 0".into()));

    let k = SHARED_ONE_KEY;
    let f1 = fence(
        call(&mut con, &["LOCK.ACQUIRE", k, "a", &ttl, "SHARED"]),
        "first SHARED",
    );
    let f2 = fence(
        call(&mut con, &["LOCK.ACQUIRE", k, "b", &ttl, "SHARED"]),
        "second SHARED",
    );
    assert!(f2 > f1, "the second shared hold's fence {f2} after {f1}");
    let mh = mode_and_holders(&mut con, k);
    assert_eq!(mh, ("shared".into(), 2), "LOCK.INFO with two shared holds");
    for token in ["a", "b"] {
        let released = call(&mut con, &["LOCK.RELEASE", k, token]);
        assert_eq!(released, Value::Int(1), "LOCK.RELEASE {k} {token}");
    }
    assert!(!exists(&mut con, k), "the key after both releases");
    steps.push((
        "two tokens ACQUIRE SHARED one key".into(),
        format!("fences {f1} < {f2}; mode {}, holders {}", mh.0, mh.1),
    ));
    steps.push(("  LOCK.RELEASE each; EXISTS".into(), "1, 1; 0".into()));

    for (label, _, op, _) in SHARED_VARIANTS {
        let tokens = batch_tokens(op, 16);
        let keys: Vec<String> = (0..16).map(|i| op.key(0, i)).collect();
        let bad = batch(&mut con, op, &keys, &tokens);
        assert_eq!(bad, 0, "{label}: unexpected replies in a batch of 16");
        let left = call(&mut con, &["DBSIZE"]);
        assert_eq!(left, Value::Int(0), "{label}: keys left after a batch");
        let acquired = if op == SharedOp::Floor {
            "16 OK"
        } else if op == SharedOp::One {
            "16 increasing fences"
        } else {
            "16 fences"
        };
        steps.push((
            format!("batch of 16: {label}"),
            format!("{acquired}, then 16 × 1; no key left"),
        ));
    }
    flushall(&mut con);
    steps
}

/// Workload 8's results: the table and the check.
pub(crate) struct SharedCycle {
    pub(crate) table: Table,
    pub(crate) check: Vec<(String, String)>,
}

/// The check, then `SHARED_VARIANTS` at each depth, `ROUNDS` rounds interleaved.
pub(crate) fn run_shared(srv: &Server, plan: &Plan) -> SharedCycle {
    let title = "8. Shared acquire+release cycle vs the floor (op = 1 cycle)";
    let check = check_shared(srv);
    let names: Vec<_> = SHARED_VARIANTS
        .iter()
        .map(|&(label, short, _, vs)| (label, short, vs))
        .collect();
    let table = table_with(srv, title, &names, |i, depth| {
        let (label, _, op, _) = SHARED_VARIANTS[i];
        run_threads(srv, plan, plan.phase, (label, depth), |t, con, w| {
            drive_shared(op, depth, t, con, w)
        })
    });
    SharedCycle { table, check }
}

impl SharedCycle {
    /// Variant `i` against the floor at `depth`: (throughput, server CPU per op).
    pub(crate) fn vs_floor(&self, i: usize, depth: usize) -> (Paired, Paired) {
        let a = self.table.find(SHARED_VARIANTS[i].0, depth);
        let b = self.table.find(SHARED_VARIANTS[3].0, depth);
        (
            Paired::of(&a.rounds, &b.rounds),
            Paired::of(&b.round_cpu, &a.round_cpu),
        )
    }

    pub(crate) fn print(&self) {
        self.table.print();
        println!(
            "  (own keys: each cycle creates and removes a key of the connection's, as the floor \
             does; one key: all {CONNS} connections on one key, a token per op of a batch, so \
             up to {} shared holds coexist)",
            CONNS * 16
        );
        println!("  check (once, before the phases):");
        for (what, reply) in &self.check {
            println!("    {what:<54} -> {reply}");
        }
        println!(
            "  vs floor, median of paired rounds [lowest–highest round] (spread of the ratio):"
        );
        for depth in DEPTHS {
            for (i, &(_, short, _, _)) in SHARED_VARIANTS[..3].iter().enumerate() {
                let (thr, cpu) = self.vs_floor(i, depth);
                println!(
                    "    {:<12} batch {depth:>2}: throughput {:.2}× [{:.2}–{:.2}] ({}), \
                     server CPU/op {:.2}× [{:.2}–{:.2}]",
                    short,
                    thr.median,
                    thr.min,
                    thr.max,
                    percent(thr.spread()),
                    cpu.median,
                    cpu.min,
                    cpu.max,
                );
            }
        }
    }

    pub(crate) fn json(&self) -> Json {
        let check = self.check.iter().map(|(what, reply)| {
            obj(vec![
                ("step", what.as_str().into()),
                ("reply", reply.as_str().into()),
            ])
        });
        let mut ratios = Vec::new();
        for depth in DEPTHS {
            for (i, &(label, _, _, _)) in SHARED_VARIANTS[..3].iter().enumerate() {
                let (thr, cpu) = self.vs_floor(i, depth);
                ratios.push(obj(vec![
                    ("variant", label.into()),
                    ("baseline", SHARED_VARIANTS[3].0.into()),
                    ("pipeline", (depth as u64).into()),
                    ("throughput", thr.json()),
                    ("server_cpu", cpu.json()),
                ]));
            }
        }
        obj(vec![
            ("table", self.table.json()),
            ("check", Json::Arr(check.collect())),
            ("ratios_to_floor", Json::Arr(ratios)),
        ])
    }

    /// Issue 13's target for the shared cycle, at batch 16, on both kinds of key.
    pub(crate) fn targets(&self) -> Vec<Target> {
        vec![
            target(
                "shared cycle, own keys, batch 16, throughput vs floor",
                self.vs_floor(0, 16).0.median,
                ">=",
                0.90,
                "×",
            ),
            target(
                "shared cycle, one key, batch 16, throughput vs floor",
                self.vs_floor(1, 16).0.median,
                ">=",
                0.90,
                "×",
            ),
        ]
    }
}
