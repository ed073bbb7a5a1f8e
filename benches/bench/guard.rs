//! Workload 7: guarded writes (issue 12). `LOCK.GUARD lock fence SET x v` against a plain
//! `SET x v` and against the Lua way of guarding a write (an `EVALSHA` that reads the lock's
//! string key and its fence key, compares the fence and SETs), at batches of 1 and 16.

#[allow(unused_imports)]
use crate::*;

/// What one op of the guarded-write workload sends (the same command every time).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GuardOp {
    /// `LOCK.GUARD lock fence SET data value`: the lock is held by this connection
    /// (`LOCK.ACQUIRE`, a long lease) and `fence` is the fence that acquire returned.
    Guard,
    /// `SET data value`.
    Set,
    /// `EVALSHA` of `LUA_GUARDED_SET` on the lock string, its fence key and the data key: the
    /// lock is held by this connection (the Lua fenced acquire: `SET NX PX` + `INCR`).
    Lua,
}

/// (label, short name, op, compared-to) of the table's rows.
pub(crate) const GUARD_VARIANTS: [(&str, &str, GuardOp, &[usize]); 3] = [
    ("LOCK.GUARD k f SET x v", "GUARD", GuardOp::Guard, &[1, 2]),
    ("SET x v", "SET", GuardOp::Set, &[]),
    ("EVALSHA guarded SET (Lua)", "Lua", GuardOp::Lua, &[]),
];

impl GuardOp {
    /// `BENCH_PROFILE` names.
    pub(crate) fn from_name(name: &str) -> Option<GuardOp> {
        match name {
            "guard" => Some(GuardOp::Guard),
            "set" => Some(GuardOp::Set),
            "lua-guard" => Some(GuardOp::Lua),
            _ => None,
        }
    }
}

/// Connection `t`'s lock key, Lua fence key and data key (one hash slot, as in a cluster).
fn guard_keys(t: usize) -> (String, String, String) {
    (
        format!("{{guard:{t}}}:lock"),
        format!("{{guard:{t}}}:lock:fence"),
        format!("{{guard:{t}}}:data"),
    )
}

/// One connection's loop: takes its lock (for `Guard` and `Lua`), then sends batches of
/// `depth` identical writes until the window ends; every reply must be `OK`.
pub(crate) fn drive_guard(
    op: GuardOp,
    depth: usize,
    t: usize,
    mut pipe: Pipe,
    s: &Scripts,
    w: Window,
) -> ThreadResult {
    let token = uuid::Uuid::new_v4().to_string();
    let hold = HOLD_TTL_MS.to_string();
    let (lock, fence_key, data) = guard_keys(t);
    let fence = match op {
        GuardOp::Guard => pipe.int(&["LOCK.ACQUIRE", &lock, &token, &hold]),
        GuardOp::Lua => {
            let sha = &s.fenced_acquire;
            pipe.int(&["EVALSHA", sha, "2", &lock, &fence_key, &token, &hold])
        }
        GuardOp::Set => 0,
    }
    .to_string();
    let args: Vec<&str> = match op {
        GuardOp::Guard => vec!["LOCK.GUARD", &lock, &fence, "SET", &data, &token],
        GuardOp::Set => vec!["SET", &data, &token],
        GuardOp::Lua => {
            let sha = &s.guarded_set;
            vec![
                "EVALSHA", sha, "3", &lock, &fence_key, &data, &fence, &token,
            ]
        }
    };
    let mut buf = Vec::new();
    for _ in 0..depth {
        push_cmd(&mut buf, &args);
    }
    let mut r = ThreadResult::run(w, depth, || pipe.round_trip(&buf, depth, |_, r| r.is_ok()));
    if op == GuardOp::Guard && pipe.int(&["LOCK.RELEASE", &lock, &token]) != 1 {
        r.errors += 1;
    }
    r
}

/// One phase of `op` at `depth` on `CONNS` connections.
pub(crate) fn run_guard_phase(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    phase: Duration,
    (label, op, depth): (&str, GuardOp, usize),
) -> Measured {
    run_threads(srv, plan, phase, (label, depth), |t, pipe, w| {
        drive_guard(op, depth, t, pipe, s, w)
    })
}

/// The replies of the correctness check, each as (what was sent, what came back).
pub(crate) struct GuardCheck {
    pub(crate) steps: Vec<(String, String)>,
}

/// A reply as text: `OK`, an error's code and message, or the value.
fn reply_text(v: &Value) -> String {
    match v {
        Value::Okay => "OK".into(),
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or("")),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// Checks, once, that the writes measured are the real thing: a guarded write with the
/// current fence replies OK and writes; one with a stale fence replies FENCED and writes
/// nothing; the same for the Lua guarded write; and `INFO lock` counts the runs and refusals.
/// Panics otherwise.
pub(crate) fn check_guard(srv: &Server, s: &Scripts) -> GuardCheck {
    let mut con = srv.conn();
    flushall(&mut con);
    let hold = HOLD_TTL_MS.to_string();
    let (lock, _, data) = guard_keys(0);
    let mut steps = Vec::new();
    // Sends `args`; the reply must be OK (`ok`) or a FENCED error, and the data `value` after.
    let mut step = |con: &mut Connection, what: String, args: Vec<String>, ok: bool, value| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = reply(con, &args);
        let fenced = matches!(&v, Value::ServerError(e) if e.code() == "FENCED");
        assert!(
            if ok { v == Value::Okay } else { fenced },
            "{what}: {args:?} replied {v:?}, expected {}",
            if ok { "OK" } else { "a FENCED error" }
        );
        let now = text(&call(con, &["GET", &data]));
        assert_eq!(now, value, "{what}: the data after {args:?}");
        steps.push((what, reply_text(&v)));
    };
    let fence = |v: Value| match v {
        Value::Int(f) if f > 0 => f.to_string(),
        other => panic!("expected a fence, got {other:?}"),
    };
    let strings = |args: &[&str]| -> Vec<String> { args.iter().map(|a| a.to_string()).collect() };
    let guard = |f: &str, v: &str| strings(&["LOCK.GUARD", &lock, f, "SET", &data, v]);
    // The Lua lock on keys of its own (the module's key may outlive its release).
    let (lua_lock, fence_key, _) = guard_keys(1);
    let lua = |f: &str, v: &str| {
        let sha = &s.guarded_set;
        strings(&["EVALSHA", sha, "3", &lua_lock, &fence_key, &data, f, v])
    };
    let info = |con: &mut Connection| {
        (
            info_field(con, "lock", "lock_guarded_runs"),
            info_field(con, "lock", "lock_guarded_refusals"),
        )
    };
    let (runs0, refusals0) = info(&mut con);

    // The module: acquire, write; a newer fence (LOCK.FENCE): the old one refused, the new one
    // accepted; released: the last fence refused.
    let f1 = fence(call(&mut con, &["LOCK.ACQUIRE", &lock, "holder", &hold]));
    let what = format!("LOCK.GUARD, the acquire's fence {f1}");
    step(&mut con, what, guard(&f1, "v1"), true, "v1");
    let f2 = fence(call(&mut con, &["LOCK.FENCE", &lock, "holder"]));
    let what = format!("  same fence, after LOCK.FENCE gave {f2}");
    step(&mut con, what, guard(&f1, "v2"), false, "v1");
    let what = format!("LOCK.GUARD, LOCK.FENCE's fence {f2}");
    step(&mut con, what, guard(&f2, "v3"), true, "v3");
    let released = call(&mut con, &["LOCK.RELEASE", &lock, "holder"]);
    assert_eq!(released, Value::Int(1), "LOCK.RELEASE");
    let what = "  same fence, after LOCK.RELEASE".to_string();
    step(&mut con, what, guard(&f2, "v4"), false, "v3");
    let (runs1, refusals1) = info(&mut con);
    assert_eq!(
        (runs1 - runs0, refusals1 - refusals0),
        (2.0, 2.0),
        "INFO lock: lock_guarded_runs and lock_guarded_refusals after 2 runs and 2 refusals"
    );

    // The Lua way: acquire (SET NX PX + INCR), write; a newer fence (INCR): refused.
    let acquire = [
        "EVALSHA",
        &s.fenced_acquire,
        "2",
        &lua_lock,
        &fence_key,
        "holder",
        &hold,
    ];
    let l1 = fence(call(&mut con, &acquire));
    let what = format!("Lua guarded SET, the acquire's fence {l1}");
    step(&mut con, what, lua(&l1, "v5"), true, "v5");
    let l2 = fence(call(&mut con, &["INCR", &fence_key]));
    let what = format!("  same fence, after INCR gave {l2}");
    step(&mut con, what, lua(&l1, "v6"), false, "v5");
    flushall(&mut con);
    GuardCheck { steps }
}

/// Workload 7's results: the table and the check.
pub(crate) struct Guarded {
    pub(crate) table: Table,
    pub(crate) check: GuardCheck,
}

/// The check, then `GUARD_VARIANTS` at each depth, `ROUNDS` rounds interleaved.
pub(crate) fn run_guard(ctx: &Ctx) -> Box<dyn Outcome> {
    let (srv, s, plan) = (ctx.srv, ctx.s, ctx.plan);
    let title = "7. Guarded write: LOCK.GUARD vs SET vs Lua (op = 1 write; lock held, long lease)";
    let check = check_guard(srv, s);
    let table = table_with(srv, title, &DEPTHS, &GUARD_VARIANTS, |op, label, depth| {
        run_guard_phase(srv, s, plan, plan.phase, (label, op, depth))
    });
    Box::new(Guarded { table, check })
}

const GUARD: &str = GUARD_VARIANTS[0].0;
const SET: &str = GUARD_VARIANTS[1].0;
const LUA: &str = GUARD_VARIANTS[2].0;

impl Guarded {
    fn comparisons(&self) -> Comparisons<'_> {
        Comparisons {
            table: &self.table,
            pairs: &[(GUARD, SET), (GUARD, LUA)],
            depths: &DEPTHS,
        }
    }
}

impl Outcome for Guarded {
    fn print(&self) {
        self.table.print();
        print_check("the phases", &self.check.steps);
        self.comparisons().print();
    }

    fn json(&self) -> (&'static str, Json) {
        let part = obj(vec![
            ("table", self.table.json()),
            ("check", check_json(&self.check.steps, "reply")),
            ("guard_ratios", self.comparisons().json()),
        ]);
        ("guarded_write", part)
    }

    /// Issue 14's targets (issue 12's), at batch 16.
    fn targets(&self) -> Vec<Target> {
        vec![
            ratio_target(
                "#14",
                "LOCK.GUARD SET, batch 16, throughput vs SET",
                self.table.vs(GUARD, SET, 16).0,
                0.75,
            ),
            ratio_target(
                "#14",
                "LOCK.GUARD SET, batch 16, throughput vs Lua guarded SET",
                self.table.vs(GUARD, LUA, 16).0,
                2.0,
            ),
        ]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let (set16, lua16) = (
            self.table.vs(GUARD, SET, 16).0,
            self.table.vs(GUARD, LUA, 16).0,
        );
        let (set1, lua1) = (
            self.table.vs(GUARD, SET, 1).0,
            self.table.vs(GUARD, LUA, 1).0,
        );
        vec![row(
            "`LOCK.GUARD k f SET x v`, batch 16",
            format!("{} /s", thousands(self.table.find(GUARD, 16).rate())),
            format!(
                "{} a plain `SET`, {} the Lua guarded write (batch 1: {:.2}× and {:.2}×)",
                set16.show(),
                lua16.show(),
                set1.median,
                lua1.median
            ),
        )]
    }

    fn errors(&self) -> u64 {
        self.table.errors()
    }
}
