//! Workload 11 (issue 22): many shared holds on one key, on servers of its own. 11a: 50,000
//! shared leases that end at the same instant, and how long the server keeps other clients
//! waiting while it ends them (the worst `PING` round trip); 11b (`hold_cost.rs`): one
//! command on a key with 1, 1,000 and 50,000 holds.
//!
//! 11a's holds are acquired with long leases, then all moved to the same deadline by one
//! `MULTI` of `LOCK.EXTEND`s: within a transaction time stands still, so the deadlines are
//! equal. (Acquiring them in the `MULTI` is not possible: a transaction gets at most 16,384
//! fences, the fence bucket's burst; the rest are refused with `TRYAGAIN`.)

#[allow(unused_imports)]
use crate::*;

/// The key of 11a.
const STALL_KEY: &str = "stall";

/// One round of 11a, on a fresh server.
struct StallRound {
    /// How long the `EXEC` of the extends took (client clock).
    exec: Duration,
    /// From `EXEC`'s reply to the deadline (ms; negative: the reply came after it).
    margin_ms: f64,
    /// `LOCK.INFO`'s holders after `EXEC`.
    holders: i64,
    /// `LOCK.INFO`'s ttl (the longest lease left) after `EXEC` was at most the new lease:
    /// every hold's lease was moved.
    moved: bool,
    /// Round trips of the `PING`s that ended before the deadline (less `STALL_SLACK`): what
    /// the machine does to a round trip without the sweep, for reference.
    quiet: Histogram<u64>,
    /// Round trips of the `PING`s that ended later, until the key was gone: the stall.
    sweep: Histogram<u64>,
    /// When the sweep's worst round trip was sent, from the deadline (ms).
    worst_at_ms: f64,
    /// From the deadline to the reply that found the key gone (µs).
    gone_after_us: u64,
    /// The key was gone before the deadline: a lease ended early.
    early: bool,
}

/// `a − b` in ms, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(b - a).as_secs_f64() * 1e3,
    }
}

/// One round of 11a: on a fresh server, `n` × `LOCK.ACQUIRE stall h<i> <long ttl> SHARED`
/// (pipelined), then `MULTI`, `n` × `LOCK.EXTEND stall h<i> ttl`, `EXEC`; then from
/// `STALL_LEAD` before the deadline a second connection sends `PING` with `EXISTS stall`
/// pipelined behind it, one pair per round trip, until the key is gone. The round trips that
/// end from `STALL_SLACK` before the deadline on may have waited for the sweep: they measure
/// the stall; the earlier ones, the machine without it.
fn stall_round(plan: &Plan, pinned: bool, ttl_ms: u64) -> StallRound {
    let srv = Server::start(if pinned {
        Opts::new().cpu(1)
    } else {
        Opts::new()
    });
    let mut con = srv.conn();
    let mut pipe = Pipe::open(&srv);
    let n = plan.many_holds;
    let (hold, ttl) = (HOLD_TTL_MS.to_string(), ttl_ms.to_string());
    let acquire = |i: usize, b: &mut Vec<u8>| {
        let token = format!("h{i}");
        push_cmd(b, &["LOCK.ACQUIRE", STALL_KEY, &token, &hold, "SHARED"])
    };
    load(&mut pipe, 0..n, 1, acquire, |r| r.is_fence());
    pipe.expect(&["MULTI"], |r| r.is_ok());
    let extend = |i: usize, b: &mut Vec<u8>| {
        push_cmd(b, &["LOCK.EXTEND", STALL_KEY, &format!("h{i}"), &ttl])
    };
    load(&mut pipe, 0..n, 1, extend, |r| {
        r.kind == b'+' && r.line == b"QUEUED"
    });
    let began = Instant::now();
    pipe.expect(&["EXEC"], |r| r.array_len() == Some(n as i64));
    let replied = Instant::now();
    let asked = Instant::now();
    let info = lock_info(&mut con, STALL_KEY).expect("the key is held after EXEC");
    let answered = Instant::now();
    assert_eq!(info.mode, "shared", "LOCK.INFO {STALL_KEY} after EXEC");
    // `ttl` is the whole ms left, rounded up, at some instant between `asked` and `answered`.
    let left = Duration::from_micros((info.ttl_ms.max(0) as u64 * 1000).saturating_sub(500));
    let deadline = asked + (answered - asked) / 2 + left;

    let mut probe = Pipe::open(&srv).spinning(plan.spin);
    let mut cmds = Vec::new();
    push_cmd(&mut cmds, &["PING"]);
    push_cmd(&mut cmds, &["EXISTS", STALL_KEY]);
    let (mut quiet, mut sweep) = (new_hist(), new_hist());
    let (mut worst, mut worst_at_ms) = (0, 0.0);
    let sweep_from = deadline.checked_sub(STALL_SLACK).unwrap_or(deadline);
    sleep_until(deadline.checked_sub(STALL_LEAD).unwrap_or(deadline));
    let gone = loop {
        let sent = Instant::now();
        probe.send(&cmds);
        let pong = probe.next();
        let rtt = micros(sent.elapsed());
        assert!(
            pong.kind == b'+' && pong.line == b"PONG",
            "PING: {}",
            pong.show()
        );
        let exists = probe.next().int();
        let got = Instant::now();
        if got < sweep_from {
            quiet.record(rtt).unwrap();
        } else {
            sweep.record(rtt).unwrap();
            if rtt > worst {
                (worst, worst_at_ms) = (rtt, signed_ms(sent, deadline));
            }
        }
        match exists {
            Some(0) => break got,
            Some(1) => {}
            other => panic!("EXISTS {STALL_KEY}: {other:?}"),
        }
        assert!(
            got < deadline + STALL_GIVE_UP,
            "{STALL_KEY} still exists {STALL_GIVE_UP:?} after its leases' deadline"
        );
    };
    StallRound {
        exec: replied - began,
        margin_ms: signed_ms(deadline, replied),
        holders: info.holders,
        moved: info.ttl_ms <= ttl_ms as i64,
        quiet,
        sweep,
        worst_at_ms,
        gone_after_us: micros(gone.saturating_duration_since(deadline)),
        early: gone < deadline,
    }
}

/// Workload 11's results.
struct ManyHolds {
    holds: usize,
    ttl_ms: u64,
    rounds: Vec<StallRound>,
    cost: HoldCost,
}

pub(crate) fn run_many_holds(ctx: &Ctx) -> Box<dyn Outcome> {
    let plan = ctx.plan;
    eprintln!("11. Many shared holds on one key");
    // 11b first: how long its load of the most holds took sets 11a's lease, so that EXEC
    // (as much work) ends well before the deadline on a slower build too.
    let cost = run_hold_cost(plan, ctx.pinned);
    let ttl_ms = STALL_TTL_MS.max(2 * cost.load.as_millis() as u64 + 1_000);
    let n = plan.many_holds;
    eprintln!(
        "11a. {} shared leases ending at one instant ({STALL_ROUNDS} rounds, {ttl_ms} ms lease)",
        thousands(n as f64)
    );
    let rounds = (0..STALL_ROUNDS)
        .map(|_| stall_round(plan, ctx.pinned, ttl_ms))
        .collect();
    Box::new(ManyHolds {
        holds: n,
        ttl_ms,
        rounds,
        cost,
    })
}

impl ManyHolds {
    /// (median, worst) over rounds of `f`.
    fn over_rounds(&self, f: impl Fn(&StallRound) -> f64) -> (f64, f64) {
        let v: Vec<f64> = self.rounds.iter().map(f).collect();
        (median(&v), v.iter().copied().fold(f64::NAN, f64::max))
    }
    /// The worst PING round trip of the sweep (ms): (median, worst) over rounds.
    fn worst_ping(&self) -> (f64, f64) {
        self.over_rounds(|r| r.sweep.max() as f64 / 1e3)
    }
    /// The worst PING round trip before the deadline (ms).
    fn worst_quiet(&self) -> (f64, f64) {
        self.over_rounds(|r| r.quiet.max() as f64 / 1e3)
    }
    /// The p99 round trip of the sweep's PINGs (ms).
    fn p99(&self) -> (f64, f64) {
        self.over_rounds(|r| r.sweep.value_at_quantile(0.99) as f64 / 1e3)
    }
    /// From the deadline to the key gone (ms).
    fn gone(&self) -> (f64, f64) {
        self.over_rounds(|r| r.gone_after_us as f64 / 1e3)
    }
    fn problems(&self) -> u64 {
        let bad = |r: &&StallRound| {
            r.early || !r.moved || r.holders != self.holds as i64 || r.margin_ms < 0.0
        };
        self.rounds.iter().filter(bad).count() as u64
    }
}

impl Outcome for ManyHolds {
    fn print(&self) {
        println!("\n11. Many shared holds on one key (issue 22), on servers of its own");
        println!(
            "  11a. {n} shared leases ending at one instant, on a fresh server each round \
             ({STALL_ROUNDS}): {n} × LOCK.ACQUIRE {STALL_KEY} h<i> <long ttl> SHARED, then \
             MULTI, {n} × LOCK.EXTEND {STALL_KEY} h<i> {}, EXEC; from {} ms before the \
             deadline a second connection sends PING (EXISTS {STALL_KEY} pipelined behind it) \
             until the key is gone. sweep: the PINGs whose reply came from {} ms before the \
             deadline on; quiet: the earlier ones (the machine alone)",
            self.ttl_ms,
            STALL_LEAD.as_millis(),
            STALL_SLACK.as_millis(),
            n = thousands(self.holds as f64),
        );
        println!(
            "    {:>5} {:>9} {:>13} {:>8} {:>13} {:>12} {:>9} {:>8} {:>8} {:>15}",
            "round",
            "EXEC",
            "EXEC→deadl.",
            "holders",
            "PINGs q/sweep",
            "worst sweep",
            "(sent at)",
            "p99",
            "quiet",
            "deadline→gone"
        );
        for (i, r) in self.rounds.iter().enumerate() {
            println!(
                "    {:>5} {:>9} {:>11.1}ms {:>8} {:>13} {:>12} {:>7.1}ms {:>8} {:>8} {:>15}",
                i + 1,
                ms(micros(r.exec)),
                r.margin_ms,
                r.holders,
                format!("{}/{}", r.quiet.len(), r.sweep.len()),
                ms(r.sweep.max()),
                r.worst_at_ms,
                ms(r.sweep.value_at_quantile(0.99)),
                ms(r.quiet.max()),
                ms(r.gone_after_us),
            );
        }
        let ((wm, ww), (pm, pw), (gm, gw)) = (self.worst_ping(), self.p99(), self.gone());
        let (qm, qw) = self.worst_quiet();
        println!(
            "    median (worst) of rounds: worst PING round trip {wm:.2} ms ({ww:.2}), p99 \
             {pm:.2} ms ({pw:.2}); key gone {gm:.1} ms ({gw:.1}) after the deadline (from \
             LOCK.INFO's ttl, ±1 ms); before the deadline the worst was {qm:.2} ms ({qw:.2})"
        );
        if self.problems() > 0 {
            println!(
                "    !! {} rounds where the key was gone before the deadline, held fewer than \
                 {} holds, kept a lease that EXTEND did not move, or EXEC replied after the \
                 deadline",
                self.problems(),
                self.holds
            );
        }
        self.cost.print();
    }

    fn json(&self) -> (&'static str, Json) {
        let rounds = self.rounds.iter().map(|r| {
            obj(vec![
                ("exec_ms", (r.exec.as_secs_f64() * 1e3).into()),
                ("exec_reply_before_deadline_ms", r.margin_ms.into()),
                ("holders", (r.holders.max(0) as u64).into()),
                ("sweep_pings", r.sweep.len().into()),
                ("worst_ping_us", r.sweep.max().into()),
                ("worst_ping_sent_after_deadline_ms", r.worst_at_ms.into()),
                ("sweep_p50_us", r.sweep.value_at_quantile(0.5).into()),
                ("sweep_p99_us", r.sweep.value_at_quantile(0.99).into()),
                ("quiet_pings", r.quiet.len().into()),
                ("quiet_worst_ping_us", r.quiet.max().into()),
                ("deadline_to_gone_us", r.gone_after_us.into()),
                ("gone_before_deadline", r.early.into()),
            ])
        });
        let both = |(m, w): (f64, f64)| obj(vec![("median", m.into()), ("worst", w.into())]);
        let stall = obj(vec![
            ("holds", (self.holds as u64).into()),
            ("ttl_ms", self.ttl_ms.into()),
            (
                "probing_from_ms_before_deadline",
                (STALL_LEAD.as_millis() as u64).into(),
            ),
            (
                "sweep_from_ms_before_deadline",
                (STALL_SLACK.as_millis() as u64).into(),
            ),
            ("worst_ping_ms", both(self.worst_ping())),
            ("quiet_worst_ping_ms", both(self.worst_quiet())),
            ("sweep_p99_ms", both(self.p99())),
            ("deadline_to_gone_ms", both(self.gone())),
            ("rounds", Json::Arr(rounds.collect())),
        ]);
        let part = obj(vec![("stall", stall), ("cost", self.cost.json())]);
        ("many_holds", part)
    }

    fn targets(&self) -> Vec<Target> {
        let n = thousands(self.holds as f64);
        let (worst, highest) = self.worst_ping();
        let lowest = self
            .rounds
            .iter()
            .map(|r| r.sweep.max() as f64 / 1e3)
            .fold(f64::NAN, f64::min);
        let cycle = self.cost.row(CostOp::Cycle, self.holds);
        let (cmd, _) = self.cost.vs_one(cycle);
        vec![
            Target {
                range: Some((lowest, highest)),
                ..target(
                    "#22",
                    format!("worst PING round trip, {n} leases ending at once"),
                    worst,
                    "<=",
                    STALL_GOAL_MS,
                    " ms",
                )
            },
            Target {
                range: Some((cmd.min, cmd.max)),
                ..target(
                    "#22",
                    format!("acquire + release command time, {n} holds vs 1"),
                    cmd.median,
                    "<=",
                    COST_GOAL,
                    "×",
                )
            },
        ]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let n = thousands(self.holds as f64);
        let ((wm, ww), (pm, _), (gm, _)) = (self.worst_ping(), self.p99(), self.gone());
        let (qm, _) = self.worst_quiet();
        let per = |op: CostOp| {
            let rows: Vec<&CostRow> = self.cost.rows.iter().filter(|r| r.op == op).collect();
            let holds: Vec<String> = rows.iter().map(|r| thousands(r.holds as f64)).collect();
            let us = |f: fn(&CostRow) -> &Vec<f64>| {
                let v: Vec<String> = rows
                    .iter()
                    .map(|r| format!("{:.2}", median(f(r))))
                    .collect();
                v.join(" / ")
            };
            let last = rows.last().expect("rows");
            let (cmd, client) = self.cost.vs_one(last);
            row(
                format!(
                    "{} on a key with {} shared holds",
                    op.label(),
                    holds.join(" / ")
                ),
                format!(
                    "{} µs per op in the commands (server); {} µs at the client, a round trip \
                     per command",
                    us(|r| &r.cmd),
                    us(|r| &r.client)
                ),
                format!(
                    "{} holds: {} 1 hold's command time; at the client {}",
                    thousands(last.holds as f64),
                    cmd.show(),
                    client.show()
                ),
            )
        };
        vec![
            row(
                format!("{n} shared leases ending at one instant"),
                format!(
                    "worst `PING` round trip {wm:.2} ms (worst of {STALL_ROUNDS} rounds {ww:.2} \
                     ms), p99 {pm:.2} ms; the key gone {gm:.1} ms after the deadline"
                ),
                format!("the worst round trip in the {STALL_LEAD:?} before: {qm:.2} ms"),
            ),
            per(CostOp::Cycle),
            per(CostOp::Extend),
        ]
    }

    fn errors(&self) -> u64 {
        self.cost.errors() + self.problems()
    }
}
