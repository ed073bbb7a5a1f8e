//! Workload 4: 20 clients contending for one key, by `WAIT`, polling and pub/sub.

#[allow(unused_imports)]
use crate::*;

// Workload 4: 20 clients on one key.

#[derive(Clone, Copy)]
pub(crate) enum Contender {
    /// `LOCK.ACQUIRE … WAIT 0`, `LOCK.RELEASE`.
    Wait,
    /// `SET NX PX`, sleeping this long after a failed try; Lua release.
    Poll(Duration),
    /// `SET NX PX`; on failure wait for a release message (or the fallback); Lua release that
    /// publishes.
    PubSub,
}

pub(crate) const CONTENDED_KEY: &str = "contended";
pub(crate) const CONTENDED_CHANNEL: &str = "contended:released";

/// The resource the lock protects, in this process: it sees every holder come and go and
/// flags any overlap, and any fence that does not increase.
#[derive(Default)]
pub(crate) struct Resource {
    pub(crate) holder: AtomicU64,
    pub(crate) last_holder: AtomicU64,
    pub(crate) last_fence: AtomicU64,
    pub(crate) violations: AtomicU64,
}

impl Resource {
    /// Client `id` (from 1) holds the lock; returns whether it took over from another client.
    pub(crate) fn enter(&self, id: u64, fence: Option<i64>) -> bool {
        if self.holder.swap(id, SeqCst) != 0 {
            self.violations.fetch_add(1, SeqCst);
        }
        if let Some(f) = fence {
            if self.last_fence.fetch_max(f as u64, SeqCst) >= f as u64 {
                self.violations.fetch_add(1, SeqCst);
            }
        }
        self.last_holder.swap(id, SeqCst) != id
    }

    /// Called before the release is sent.
    pub(crate) fn leave(&self, id: u64) {
        if self.holder.swap(0, SeqCst) != id {
            self.violations.fetch_add(1, SeqCst);
        }
    }
}

/// One contending client: acquire, check in and out of the resource, release, until `end`.
pub(crate) fn contender(
    kind: Contender,
    id: u64,
    (mut con, sub): (Connection, Option<Connection>),
    res: &Resource,
    s: &Scripts,
    (start, end): (Instant, Instant),
) -> ClientResult {
    let token = uuid::Uuid::new_v4().to_string();
    let ttl = CONTENDED_TTL_MS.to_string();
    let mut sub = sub;
    let mut pubsub = sub.as_mut().map(|c| {
        let mut p = c.as_pubsub();
        p.subscribe(CONTENDED_CHANNEL).unwrap();
        p.set_read_timeout(Some(PUBSUB_FALLBACK)).unwrap();
        p
    });
    let acquire = |con: &mut Connection, _: &mut ClientResult| match kind {
        Contender::Wait => {
            let args = ["LOCK.ACQUIRE", CONTENDED_KEY, &token, &ttl, "WAIT", "0"];
            match call(con, &args) {
                Value::Int(f) => Some(Some(f)),
                other => panic!("LOCK.ACQUIRE WAIT 0 replied {other:?}"),
            }
        }
        Contender::Poll(_) | Contender::PubSub => loop {
            let args = ["SET", CONTENDED_KEY, &token, "NX", "PX", &ttl];
            if call(con, &args) == Value::Okay {
                break Some(None);
            }
            if Instant::now() >= end {
                break None;
            }
            match (kind, pubsub.as_mut()) {
                (Contender::Poll(every), _) => thread::sleep(every),
                (_, Some(p)) => match p.get_message() {
                    Ok(_) => {}
                    Err(e) if e.is_timeout() => {}
                    Err(e) => panic!("pub/sub: {e}"),
                },
                _ => unreachable!(),
            }
        },
    };
    let hold = |con: &mut Connection, fence: Option<i64>| {
        let handoff = res.enter(id, fence);
        res.leave(id);
        let sha = match kind {
            Contender::PubSub => &s.release_publish,
            _ => &s.release,
        };
        let args: &[&str] = match kind {
            Contender::Wait => &["LOCK.RELEASE", CONTENDED_KEY, &token],
            Contender::Poll(_) => &["EVALSHA", sha, "1", CONTENDED_KEY, &token],
            Contender::PubSub => &[
                "EVALSHA",
                sha,
                "1",
                CONTENDED_KEY,
                &token,
                CONTENDED_CHANNEL,
            ],
        };
        (handoff, call(con, args) == Value::Int(1))
    };
    client_loop(&mut con, (start, end), acquire, hold)
}

/// One round of one scheme.
pub(crate) fn run_contended(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    (label, short, kind): (&'static str, &'static str, Contender),
) -> Contended {
    let mut probe = srv.conn();
    flushall(&mut probe);
    let res = Resource::default();
    let clients: Vec<(Connection, Option<Connection>)> = (0..CONTENDED_CLIENTS)
        .map(|_| {
            let sub = matches!(kind, Contender::PubSub).then(|| srv.conn());
            (srv.conn(), sub)
        })
        .collect();
    // Time for every client to subscribe before the start.
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + plan.contended;
    let client = |i: usize, cons| contender(kind, i as u64 + 1, cons, &res, s, (start, end));
    let (results, c0, c1) = run_clients(&mut probe, clients, (start, end), client, server_cpu);
    // Everyone has released: nothing may be left of the lock (no holder, no stuck waiter).
    let left = match kind {
        Contender::Wait => call(&mut probe, &["LOCK.INFO", CONTENDED_KEY]),
        _ => call(&mut probe, &["GET", CONTENDED_KEY]),
    };
    let mut c = Contended::from_clients((label, short), plan.contended, &results, c1 - c0);
    c.violations = res.violations.load(SeqCst);
    c.errors += u64::from(left != Value::Nil);
    c.close_round();
    eprintln!(
        "  {:<44} {:>10.0} hand-offs/s  (server cpu {:>3.0}%)",
        label,
        c.handoff_rate(),
        c.cpu_secs / c.secs * 100.0
    );
    c
}

/// One connection's `PING` round trips, one measurement per round: the ceiling of any
/// hand-off. Each `WAIT` hand-off waits for one client round trip (the grant's reply goes to
/// a client, whose `LOCK.RELEASE` grants the next), so no scheme can hand off faster than one
/// connection can go to the server and back, whatever the server does.
#[derive(Default)]
pub(crate) struct RoundTrips {
    pub(crate) count: u64,
    pub(crate) secs: f64,
    pub(crate) cpu_secs: f64,
    /// Round trips/s of each round, paired with the schemes' rounds.
    pub(crate) rounds: Vec<f64>,
}

impl RoundTrips {
    pub(crate) fn rate(&self) -> f64 {
        self.count as f64 / self.secs
    }
    /// `c`'s hand-offs/s as a fraction of the round trips/s, by paired rounds.
    pub(crate) fn share(&self, c: &Contended) -> Paired {
        Paired::of(&c.rounds, &self.rounds)
    }
    /// The round trips/s needed for `times` `c`'s hand-offs/s, as a multiple of the ceiling.
    pub(crate) fn needed(&self, c: &Contended, times: f64) -> Paired {
        let p = self.share(c);
        Paired {
            median: p.median * times,
            min: p.min * times,
            max: p.max * times,
        }
    }
}

/// One round of the ceiling: `PING` and wait for the reply, for as long as a scheme's round,
/// on a thread of the bench process (so pinned as the contenders are), through the same
/// `redis` connection and `call`.
pub(crate) fn run_round_trips(srv: &Server, plan: &Plan, rt: &mut RoundTrips) {
    let mut probe = srv.conn();
    let mut con = srv.conn();
    call(&mut con, &["PING"]);
    let c0 = server_cpu(&mut probe);
    let start = Instant::now();
    let end = start + plan.contended;
    let mut n = 0u64;
    while Instant::now() < end {
        match call(&mut con, &["PING"]) {
            Value::SimpleString(s) if s == "PONG" => n += 1,
            other => panic!("PING replied {other:?}"),
        }
    }
    // The last round trip may end past `end`: count the time it took.
    let secs = start.elapsed().as_secs_f64();
    let cpu = server_cpu(&mut probe) - c0;
    rt.count += n;
    rt.secs += secs;
    rt.cpu_secs += cpu;
    rt.rounds.push(n as f64 / secs);
    eprintln!(
        "  {:<44} {:>10.0} round trips/s (server cpu {:>3.0}%)",
        "one connection's PING round trips",
        n as f64 / secs,
        cpu / secs * 100.0
    );
}

/// The schemes of workload 4: `WAIT` first, its baselines after.
const SCHEMES: [(&str, &str, Contender); 4] = [
    (
        "LOCK.ACQUIRE WAIT 0 (blocking FIFO)",
        "WAIT",
        Contender::Wait,
    ),
    (
        "SET NX PX, poll every 100 ms",
        "100ms poll",
        Contender::Poll(SLOW_POLL),
    ),
    (
        "SET NX PX, poll every 1 ms",
        "1ms poll",
        Contender::Poll(FAST_POLL),
    ),
    ("SET NX PX + pub/sub wake-up", "pub/sub", Contender::PubSub),
];

/// The hand-offs/s `WAIT` must reach, as a multiple of the 1 ms poll's (issue #14).
const HANDOFF_GOAL: f64 = 3.0;

/// Workload 4: the round trips (R) and each scheme `FEW_ROUNDS` times, interleaved (R A B C
/// D, D C B A R, …): R sits next to `WAIT` in every round, in the same machine conditions.
pub(crate) fn run_contention(ctx: &Ctx) -> Box<dyn Outcome> {
    eprintln!("4. Contended");
    let mut runs: Vec<Option<Contended>> = SCHEMES.iter().map(|_| None).collect();
    let mut round_trips = RoundTrips::default();
    for round in 0..FEW_ROUNDS {
        // `None`: the round trips.
        let mut order: Vec<Option<usize>> = std::iter::once(None)
            .chain((0..SCHEMES.len()).map(Some))
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let Some(i) = i else {
                run_round_trips(ctx.srv, ctx.plan, &mut round_trips);
                continue;
            };
            let c = run_contended(ctx.srv, ctx.s, ctx.plan, SCHEMES[i]);
            match &mut runs[i] {
                Some(sum) => sum.absorb(c),
                slot => *slot = Some(c),
            }
        }
    }
    Box::new(Contention {
        runs: runs.into_iter().flatten().collect(),
        round_trips,
    })
}

/// Workload 4's results: the schemes in the order of `SCHEMES`, and their ceiling.
struct Contention {
    runs: Vec<Contended>,
    round_trips: RoundTrips,
}

impl Outcome for Contention {
    fn print(&self) {
        print_contended(&self.runs, &self.round_trips);
    }
    fn json(&self) -> (&'static str, Json) {
        let [wait, _, poll, _] = &self.runs[..] else {
            unreachable!()
        };
        let rt = &self.round_trips;
        let runs = self.runs.iter().map(|c| c.json(&self.runs));
        let rounds = rt.rounds.iter().map(|&x| x.into());
        let part = obj(vec![
            ("clients", (CONTENDED_CLIENTS as u64).into()),
            ("runs", Json::Arr(runs.collect())),
            ("round_trips_per_sec", rt.rate().into()),
            ("round_trips_per_sec_rounds", Json::Arr(rounds.collect())),
            (
                "round_trips_server_cpu_util",
                (rt.cpu_secs / rt.secs).into(),
            ),
            ("wait_vs_round_trip", rt.share(wait).json()),
            ("goal_vs_round_trip", rt.needed(poll, HANDOFF_GOAL).json()),
        ]);
        ("contended", part)
    }
    fn targets(&self) -> Vec<Target> {
        let [wait, _, poll, _] = &self.runs[..] else {
            unreachable!()
        };
        let violations: u64 = self.runs.iter().map(|c| c.violations).sum();
        let fair = wait.fairness_rounds();
        vec![
            ratio_target(
                "#14",
                "contended hand-offs/s vs 1 ms poll",
                wait.vs(poll),
                HANDOFF_GOAL,
            ),
            Target {
                range: Some((fair.min, fair.max)),
                ..target(
                    "#14",
                    "contended fairness (Jain) with WAIT",
                    fair.median,
                    ">=",
                    0.999,
                    "",
                )
            },
            target(
                "#4",
                "contended exclusion violations (all schemes)",
                violations as f64,
                "<=",
                0.0,
                "",
            ),
        ]
    }
    fn summary(&self) -> Vec<SummaryRow> {
        let [wait, slow, fast, pubsub] = &self.runs[..] else {
            unreachable!()
        };
        let violations: u64 = self.runs.iter().map(|c| c.violations).sum();
        let fair = wait.fairness_rounds();
        let rt = &self.round_trips;
        let (share, need) = (rt.share(wait), rt.needed(fast, HANDOFF_GOAL));
        vec![
            row(
                format!("{CONTENDED_CLIENTS} clients on one key, `WAIT` vs polling"),
                format!("{} hand-offs/s", thousands(wait.handoff_rate())),
                format!(
                    "{} polling every 1 ms, {} every 100 ms, {} pub/sub wake-ups",
                    wait.vs(fast).show(),
                    wait.vs(slow).show(),
                    wait.vs(pubsub).show()
                ),
            ),
            row(
                "one connection's round trip (the ceiling of any hand-off)",
                format!("{} round trips/s", thousands(rt.rate())),
                format!(
                    "`WAIT`'s hand-offs at {} of it [{}–{}]; {HANDOFF_GOAL}× the 1 ms poll \
                     would need {:.2}× it [{:.2}–{:.2}]",
                    percent(share.median),
                    percent(share.min),
                    percent(share.max),
                    need.median,
                    need.min,
                    need.max
                ),
            ),
            row(
                "fairness (Jain) / exclusion violations",
                format!(
                    "{:.4} [{:.4}–{:.4}] / {violations}",
                    fair.median, fair.min, fair.max
                ),
                format!(
                    "polling 1 ms: {:.4}; 100 ms: {:.4}",
                    fast.fairness(),
                    slow.fairness()
                ),
            ),
            row(
                "longest wait of any client (contended)",
                ms(micros(wait.max_wait)),
                format!(
                    "{} polling every 1 ms, {} every 100 ms",
                    ms(micros(fast.max_wait)),
                    ms(micros(slow.max_wait))
                ),
            ),
        ]
    }
    fn errors(&self) -> u64 {
        self.runs.iter().map(|c| c.errors).sum()
    }
}

pub(crate) fn print_contended(all: &[Contended], rt: &RoundTrips) {
    println!(
        "\n4. Contended: {CONTENDED_CLIENTS} clients on one key, acquire → release, no hold time \
         (hand-off = the lock goes to a different client; wait = from first try to acquisition)"
    );
    println!(
        "  {:<36} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8} {:>5} {:>7}  vs baselines (hand-offs/s)",
        "",
        "hand-offs/s",
        "acquires/s",
        "wait p50",
        "wait p99",
        "max wait",
        "fairness",
        "viol",
        "srv cpu"
    );
    for c in all {
        let vs: Vec<String> = all
            .iter()
            .filter(|b| b.short != c.short)
            .map(|b| format!("{} {}", ratio(c.handoff_ratio(b)), b.short))
            .collect();
        println!(
            "  {:<36} {:>11} {:>11} {:>9} {:>9} {:>10} {:>8.4} {:>5} {:>6.0}%  {}",
            c.label,
            thousands(c.handoff_rate()),
            thousands(c.acquisitions() as f64 / c.secs),
            ms(c.waits.value_at_quantile(0.5)),
            ms(c.waits.value_at_quantile(0.99)),
            ms(micros(c.max_wait)),
            c.fairness(),
            c.violations,
            c.cpu_secs / c.secs * 100.0,
            vs.join(", ")
        );
    }
    print_ceiling(all, rt);
    print_per_client(all);
    if all.iter().any(|c| c.errors > 0) {
        for c in all.iter().filter(|c| c.errors > 0) {
            println!(
                "  !! {}: {} failed releases or a lock left behind",
                c.label, c.errors
            );
        }
    }
}

/// The ceiling beside the table: `WAIT`'s hand-offs and the goal against one connection's
/// round trips, in the same rounds.
fn print_ceiling(all: &[Contended], rt: &RoundTrips) {
    let [wait, _, poll, _] = all else {
        unreachable!()
    };
    let (share, need) = (rt.share(wait), rt.needed(poll, HANDOFF_GOAL));
    println!(
        "  ceiling: one connection's PING round trips {}/s (srv cpu {:.0}%); WAIT hand-offs at \
         {} of it [{}–{}]; {HANDOFF_GOAL}× the 1 ms poll would need {}/s ({} the ceiling [{}–{}])",
        thousands(rt.rate()),
        rt.cpu_secs / rt.secs * 100.0,
        percent(share.median),
        percent(share.min),
        percent(share.max),
        thousands(HANDOFF_GOAL * poll.handoff_rate()),
        ratio(need.median),
        ratio(need.min),
        ratio(need.max)
    );
}
