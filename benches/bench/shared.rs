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

    /// Reads the `n` replies of a step; returns those that are not what a working lock
    /// replies: an acquire a fence (on one key, each above the one before, as every new hold
    /// gets a new fence; the floor `OK`), a release 1.
    fn unexpected(self, step: usize, pipe: &mut Pipe, n: usize) -> u64 {
        let mut last = 0;
        pipe.replies(n, |_, r| match (self, step, r.int()) {
            (SharedOp::Floor, 0, _) => r.is_ok(),
            (_, 0, Some(f)) => {
                let increasing = self != SharedOp::One || f > last;
                last = f;
                f > 0 && increasing
            }
            (_, 0, None) => false,
            (_, _, v) => v == Some(1),
        })
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
fn batch(pipe: &mut Pipe, op: SharedOp, keys: &[String], tokens: &[String]) -> u64 {
    let mut buf = Vec::with_capacity(4096);
    let mut bad = 0;
    for step in 0..2 {
        buf.clear();
        op.encode(step, keys, tokens, &mut buf);
        pipe.send(&buf);
        bad += op.unexpected(step, pipe, keys.len());
    }
    bad
}

/// One connection's loop: batches of `depth` cycles until the window ends.
pub(crate) fn drive_shared(
    op: SharedOp,
    depth: usize,
    t: usize,
    mut pipe: Pipe,
    w: Window,
) -> ThreadResult {
    let tokens = batch_tokens(op, depth);
    let mut keys: Vec<String> = Vec::with_capacity(depth);
    let mut n = 0u64;
    ThreadResult::run(w, depth, || {
        keys.clear();
        keys.extend((0..depth as u64).map(|i| op.key(t, n + i)));
        n += depth as u64;
        batch(&mut pipe, op, &keys, &tokens)
    })
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
    let mut con = srv.conn();
    let mut pipe = Pipe::open(srv);
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
        let bad = batch(&mut pipe, op, &keys, &tokens);
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
pub(crate) fn run_shared(ctx: &Ctx) -> Box<dyn Outcome> {
    let (srv, plan) = (ctx.srv, ctx.plan);
    let title = "8. Shared acquire+release cycle vs the floor (op = 1 cycle)";
    let check = check_shared(srv);
    let table = table_with(srv, title, &DEPTHS, &SHARED_VARIANTS, |op, label, depth| {
        run_threads(srv, plan, plan.phase, (label, depth), |t, pipe, w| {
            drive_shared(op, depth, t, pipe, w)
        })
    });
    Box::new(SharedCycle { table, check })
}

const OWN: &str = SHARED_VARIANTS[0].0;
const ONE: &str = SHARED_VARIANTS[1].0;
const FLOOR: &str = SHARED_VARIANTS[3].0;

impl SharedCycle {
    fn comparisons(&self) -> Comparisons<'_> {
        Comparisons {
            table: &self.table,
            pairs: &[(OWN, FLOOR), (ONE, FLOOR), (SHARED_VARIANTS[2].0, FLOOR)],
            depths: &DEPTHS,
        }
    }
}

impl Outcome for SharedCycle {
    fn print(&self) {
        self.table.print();
        println!(
            "  (own keys: each cycle creates and removes a key of the connection's, as the floor \
             does; one key: all {CONNS} connections on one key, a token per op of a batch, so \
             up to {} shared holds coexist)",
            CONNS * 16
        );
        print_check("the phases", &self.check);
        self.comparisons().print();
    }

    fn json(&self) -> (&'static str, Json) {
        let part = obj(vec![
            ("table", self.table.json()),
            ("check", check_json(&self.check, "reply")),
            ("ratios_to_floor", self.comparisons().json()),
        ]);
        ("shared_cycle", part)
    }

    /// Issue 14's target for the shared cycle (issue 13's), at batch 16, on both kinds of key.
    fn targets(&self) -> Vec<Target> {
        vec![
            ratio_target(
                "#14",
                "shared cycle, own keys, batch 16, throughput vs floor",
                self.table.vs(OWN, FLOOR, 16).0,
                0.90,
            ),
            ratio_target(
                "#14",
                "shared cycle, one key, batch 16, throughput vs floor",
                self.table.vs(ONE, FLOOR, 16).0,
                0.90,
            ),
        ]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let (own, one) = (self.table.find(OWN, 16), self.table.find(ONE, 16));
        vec![row(
            "`LOCK.ACQUIRE … SHARED` + `LOCK.RELEASE`, batch 16",
            format!(
                "{} cycles/s on its own keys; {} with all connections on one key (up to {} \
                 holds at once)",
                thousands(own.rate()),
                thousands(one.rate()),
                CONNS * 16
            ),
            format!(
                "{} and {} the native floor",
                self.table.vs(OWN, FLOOR, 16).0.show(),
                self.table.vs(ONE, FLOOR, 16).0.show()
            ),
        )]
    }

    fn errors(&self) -> u64 {
        self.table.errors()
    }
}
