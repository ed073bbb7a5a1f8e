//! Workload 12 (issue 25): a change to many observers, against the same change to as many
//! keyspace subscribers; and what a blocked observer costs in memory.
//!
//! 12a, on a server of its own with `notify-keyspace-events Kd` (the module's events are of
//! the module class): 1,000 connections blocked in `LOCK.OBSERVE observed <state> 0`, and
//! 1,000 others `SUBSCRIBE`d to `__keyspace@0__:subscribed`. One more connection makes a
//! change to the key the variant watches (the other key's channel has no subscriber and the
//! other key no observer, so a change reaches one group only): `LOCK.RELEASE` of the
//! holder (an observer's reply is then null, a subscriber gets `lock.released`), or
//! `LOCK.FENCE` (an observer gets the key's `LOCK.INFO`, a subscriber `lock.fenced`). Each
//! change is timed from just before it is written to the arrival of the first and the last
//! of the 1,000 replies or messages at their sockets (the kernel's receive timestamps), and
//! of the changer's own reply. Before each change the key is held and, for the observers,
//! all 1,000 block again with the new state (`blocked_clients` reaches 1,000 before the
//! change is sent); for the subscribers, the `lock.acquired` of a new hold is read first.
//! `OBSERVE_CHANGES` changes per variant in each of `ROUNDS` rounds, the variants
//! interleaved (A B C D, D C B A, …); a ratio is the median over rounds of the round's p50
//! against the subscribers' round next to it.
//!
//! 12b, on a fresh server: `used_memory` with 1,000 idle connections (each has sent a
//! `PING`), then blocked in `LOCK.OBSERVE mem <fence> 0`, then answered (idle again), then
//! blocked in `BLPOP` of a missing list, then `SUBSCRIBE`d to the key's keyspace channel,
//! each state once the server's per-client buffers have settled (reply-buffer resizing off,
//! idle query buffers trimmed by the server's cron after 2 s).

#[allow(unused_imports)]
use crate::*;

const OBS_KEY: &str = "observed";
const SUB_KEY: &str = "subscribed";
const SUB_CHANNEL: &str = "__keyspace@0__:subscribed";
pub(crate) const HOLDER: &str = "holder";

/// How long the observers may take to block before the run fails.
const BLOCK_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Observe,
    Subscribe,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Release,
    Fence,
}

impl Change {
    fn command(self) -> &'static str {
        match self {
            Change::Release => "LOCK.RELEASE",
            Change::Fence => "LOCK.FENCE",
        }
    }
}

/// The variants of 12a, in the order of a round.
const VARIANTS: [(Scheme, Change); 4] = [
    (Scheme::Observe, Change::Release),
    (Scheme::Subscribe, Change::Release),
    (Scheme::Observe, Change::Fence),
    (Scheme::Subscribe, Change::Fence),
];

fn label(scheme: Scheme, change: Change) -> &'static str {
    match (scheme, change) {
        (Scheme::Observe, Change::Release) => "LOCK.OBSERVE, reply null",
        (Scheme::Subscribe, Change::Release) => "SUBSCRIBE keyspace, lock.released",
        (Scheme::Observe, Change::Fence) => "LOCK.OBSERVE, reply LOCK.INFO",
        (Scheme::Subscribe, Change::Fence) => "SUBSCRIBE keyspace, lock.fenced",
    }
}

/// One variant's changes, in µs from the change's send.
struct Latency {
    scheme: Scheme,
    change: Change,
    /// The first of the replies (messages) at its socket.
    first: Histogram<u64>,
    /// The last of them at its socket.
    last: Histogram<u64>,
    /// The last of them read by the bench.
    last_read: Histogram<u64>,
    /// The changer's own reply at its socket.
    changer: Histogram<u64>,
    /// The server's CPU time (user + sys) from just before the change until every reply had
    /// come, one `INFO cpu` included.
    srv_cpu: Histogram<u64>,
    /// Each round's p50 of `last` (µs), paired with the other scheme's.
    rounds: Vec<f64>,
    /// Each round's p50 of `srv_cpu` (µs).
    cpu_rounds: Vec<f64>,
    errors: u64,
}

impl Latency {
    fn new(scheme: Scheme, change: Change) -> Latency {
        Latency {
            scheme,
            change,
            first: new_hist(),
            last: new_hist(),
            last_read: new_hist(),
            changer: new_hist(),
            srv_cpu: new_hist(),
            rounds: Vec::new(),
            cpu_rounds: Vec::new(),
            errors: 0,
        }
    }
    fn p(h: &Histogram<u64>, q: f64) -> f64 {
        h.value_at_quantile(q) as f64 / 1e3
    }
}

/// ns between two `CLOCK_REALTIME` readings, as µs for a histogram.
fn us_between(from: i64, to: i64) -> u64 {
    assert!(to > 0, "a reply without a kernel receive timestamp");
    (((to - from).max(0) as u64) / 1_000).max(1)
}

/// A fence from an integer reply.
pub(crate) fn fence_of(reply: &[u8]) -> i64 {
    std::str::from_utf8(reply)
        .ok()
        .and_then(|s| s.strip_prefix(':')?.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("expected a fence, got {:?}", String::from_utf8_lossy(reply)))
}

pub(crate) fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A null reply, whichever protocol.
fn is_null(r: &[u8]) -> bool {
    matches!(r, b"$-1\r\n" | b"*-1\r\n" | b"_\r\n")
}

/// `LOCK.INFO`'s reply: 6 fields, as a flat array (RESP2) or a map (RESP3).
fn is_info(r: &[u8]) -> bool {
    r.starts_with(b"*12\r\n") || r.starts_with(b"%6\r\n")
}

/// Waits until the server counts `n` blocked clients.
pub(crate) fn wait_blocked(probe: &mut Connection, n: usize) {
    let began = Instant::now();
    loop {
        let blocked = info_field(probe, "clients", "blocked_clients") as usize;
        if blocked >= n {
            return;
        }
        assert!(
            began.elapsed() < BLOCK_LIMIT,
            "only {blocked} of {n} clients blocked after {BLOCK_LIMIT:?}"
        );
        thread::sleep(Duration::from_micros(500));
    }
}

/// 12a's server and connections: observers `0..n`, subscribers `n..2n`, the changer `2n`.
struct Bench {
    fleet: Fleet,
    probe: Connection,
    n: usize,
    /// The fence of each key's current hold (observed, subscribed), if held.
    held: [Option<i64>; 2],
}

impl Bench {
    fn changer(&self) -> usize {
        2 * self.n
    }
    fn group(&self, scheme: Scheme) -> std::ops::Range<usize> {
        match scheme {
            Scheme::Observe => 0..self.n,
            Scheme::Subscribe => self.n..2 * self.n,
        }
    }
    fn key(scheme: Scheme) -> (&'static str, usize) {
        match scheme {
            Scheme::Observe => (OBS_KEY, 0),
            Scheme::Subscribe => (SUB_KEY, 1),
        }
    }

    /// The changer takes the key (untimed); subscribers read its `lock.acquired`.
    fn hold(&mut self, scheme: Scheme) -> i64 {
        let (key, k) = Bench::key(scheme);
        if let Some(f) = self.held[k] {
            return f;
        }
        let c = self.changer();
        let ttl = HOLD_TTL_MS.to_string();
        let f = fence_of(&self.fleet.call(c, &["LOCK.ACQUIRE", key, HOLDER, &ttl]));
        if scheme == Scheme::Subscribe {
            let group = self.group(scheme);
            let bad = self
                .fleet
                .collect(group, |_, r| contains(r, "lock.acquired"));
            assert_eq!(bad, 0, "subscribers' lock.acquired");
        }
        self.held[k] = Some(f);
        f
    }

    /// The changer lets the key go (untimed); subscribers read its `lock.released`.
    fn free(&mut self, scheme: Scheme) {
        let (key, k) = Bench::key(scheme);
        if self.held[k].take().is_none() {
            return;
        }
        let c = self.changer();
        assert_eq!(
            self.fleet.call(c, &["LOCK.RELEASE", key, HOLDER]),
            b":1\r\n"
        );
        if scheme == Scheme::Subscribe {
            let group = self.group(scheme);
            let bad = self
                .fleet
                .collect(group, |_, r| contains(r, "lock.released"));
            assert_eq!(bad, 0, "subscribers' lock.released");
        }
    }

    /// One timed change: the key held, the observers blocked on its state; then the change,
    /// and every reply (message) of the group and the changer's.
    fn change(&mut self, lat: &mut Latency, round: &mut [Histogram<u64>; 2]) {
        let (scheme, change) = (lat.scheme, lat.change);
        let (key, k) = Bench::key(scheme);
        let group = self.group(scheme);
        let c = self.changer();
        let fence = self.hold(scheme);
        if scheme == Scheme::Observe {
            let mut cmd = Vec::new();
            push_cmd(&mut cmd, &["LOCK.OBSERVE", key, &fence.to_string(), "0"]);
            self.fleet.send(group.clone(), &cmd);
            wait_blocked(&mut self.probe, self.n);
        }
        let mut cmd = Vec::new();
        push_cmd(&mut cmd, &[change.command(), key, HOLDER]);
        self.fleet.expect(group.clone());
        self.fleet.expect(c..c + 1);
        let cpu = server_cpu(&mut self.probe);
        let sent = realtime_ns();
        self.fleet.send(c..c + 1, &cmd);
        let bad = self.fleet.wait(|i, r| match (i == c, scheme, change) {
            (true, _, Change::Release) => r == b":1\r\n",
            (true, _, Change::Fence) => r.first() == Some(&b':'),
            (false, Scheme::Observe, Change::Release) => is_null(r),
            (false, Scheme::Observe, Change::Fence) => is_info(r),
            (false, Scheme::Subscribe, Change::Release) => contains(r, "lock.released"),
            (false, Scheme::Subscribe, Change::Fence) => contains(r, "lock.fenced"),
        });
        lat.errors += bad;
        let cpu = server_cpu(&mut self.probe) - cpu;
        let cpu_us = ((cpu * 1e6) as u64).max(1);
        lat.srv_cpu.record(cpu_us).unwrap();
        round[1].record(cpu_us).unwrap();
        let arrivals: Vec<Arrival> = group.map(|i| self.fleet.arrival(i)).collect();
        let first = arrivals.iter().map(|a| a.kernel).min().expect("observers");
        let last = arrivals.iter().map(|a| a.kernel).max().expect("observers");
        let last_read = arrivals.iter().map(|a| a.read).max().expect("observers");
        let mine = self.fleet.arrival(c).kernel;
        lat.first.record(us_between(sent, first)).unwrap();
        lat.last.record(us_between(sent, last)).unwrap();
        round[0].record(us_between(sent, last)).unwrap();
        lat.last_read.record(us_between(sent, last_read)).unwrap();
        lat.changer.record(us_between(sent, mine)).unwrap();
        self.held[k] = match change {
            Change::Release => None,
            Change::Fence => Some(fence_of(self.fleet.last(c))),
        };
    }
}

/// Workload 12's results.
struct Observers {
    n: usize,
    changes: usize,
    runs: Vec<Latency>,
    memory: MemoryStates,
}

pub(crate) fn run_observers(ctx: &Ctx) -> Box<dyn Outcome> {
    let plan = ctx.plan;
    let n = plan.observers;
    eprintln!(
        "12. A change to {} observers vs as many keyspace subscribers",
        thousands(n as f64)
    );
    // Both groups, the changer, the probe, the server's own: the server inherits the limit.
    raise_open_files(2 * n as u64 + 256);
    let opts = Opts::new().extra(&["--notify-keyspace-events", "Kd"]);
    let srv = Server::start(if ctx.pinned { opts.cpu(1) } else { opts });
    let mut b = Bench {
        fleet: Fleet::open(&srv, 2 * n + 1, plan.spin),
        probe: srv.conn(),
        n,
        held: [None, None],
    };
    assert_eq!(b.fleet.len(), 2 * n + 1);
    let mut cmd = Vec::new();
    push_cmd(&mut cmd, &["SUBSCRIBE", SUB_CHANNEL]);
    b.fleet.send(b.group(Scheme::Subscribe), &cmd);
    let bad = b
        .fleet
        .collect(b.group(Scheme::Subscribe), |_, r| contains(r, "subscribe"));
    assert_eq!(bad, 0, "SUBSCRIBE {SUB_CHANNEL}");

    let mut runs: Vec<Latency> = VARIANTS.iter().map(|&(s, c)| Latency::new(s, c)).collect();
    for round in 0..ROUNDS {
        let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let lat = &mut runs[i];
            let mut this_round = [new_hist(), new_hist()];
            for _ in 0..plan.observe_changes {
                b.change(lat, &mut this_round);
            }
            b.free(lat.scheme);
            lat.rounds.push(this_round[0].value_at_quantile(0.5) as f64);
            lat.cpu_rounds
                .push(this_round[1].value_at_quantile(0.5) as f64);
            eprintln!(
                "  round {} {:<36} last reply p50 {:>8}, p99 {:>8}",
                round + 1,
                label(lat.scheme, lat.change),
                ms(this_round[0].value_at_quantile(0.5)),
                ms(this_round[0].value_at_quantile(0.99))
            );
        }
    }
    drop(b);
    drop(srv);
    eprintln!("12b. Memory of a blocked observer");
    let memory = run_memory_states(plan, ctx.pinned);
    let m = &memory;
    eprintln!(
        "  used_memory: idle {}, observing {}, answered {}, BLPOP {}, answered {}, subscribed {}",
        m.idle, m.observing, m.answered, m.blpop, m.after_blpop, m.subscribed
    );
    Box::new(Observers {
        n,
        changes: plan.observe_changes * ROUNDS,
        runs,
        memory,
    })
}

impl Observers {
    fn run(&self, scheme: Scheme, change: Change) -> &Latency {
        self.runs
            .iter()
            .find(|l| l.scheme == scheme && l.change == change)
            .expect("variant")
    }
    /// Observers' last-reply p50 over the subscribers' last-message p50, by paired rounds
    /// (above 1: the observers are slower).
    fn vs(&self, change: Change) -> Paired {
        let (o, s) = (
            self.run(Scheme::Observe, change),
            self.run(Scheme::Subscribe, change),
        );
        Paired::of(&o.rounds, &s.rounds)
    }
    /// The same for the server's CPU time per change (p50 of each round).
    fn vs_cpu(&self, change: Change) -> Paired {
        let (o, s) = (
            self.run(Scheme::Observe, change),
            self.run(Scheme::Subscribe, change),
        );
        Paired::of(&o.cpu_rounds, &s.cpu_rounds)
    }
    /// The same for the pooled p99.
    fn vs_p99(&self, change: Change) -> f64 {
        let (o, s) = (
            self.run(Scheme::Observe, change),
            self.run(Scheme::Subscribe, change),
        );
        Latency::p(&o.last, 0.99) / Latency::p(&s.last, 0.99)
    }
}

impl Outcome for Observers {
    fn print(&self) {
        let n = thousands(self.n as f64);
        println!(
            "\n12. A change to {n} observers (issue 25), on a server of its own: {n} \
             connections blocked in LOCK.OBSERVE, against {n} SUBSCRIBEd to the key's \
             keyspace channel (notify-keyspace-events Kd); {} changes per variant ({ROUNDS} \
             rounds interleaved); ms from the change's send to the reply (message) at its \
             socket (kernel receive time); 'read' = when the bench had read the last one; \
             'srv cpu' = the server's CPU time from the change to the last reply",
            self.changes
        );
        println!(
            "  {:<12} {:<36} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>4}",
            "change",
            "",
            "first p50",
            "last p50",
            "last p99",
            "last max",
            "read p50",
            "read p99",
            "changer p50",
            "srv cpu p50",
            "err"
        );
        for l in &self.runs {
            println!(
                "  {:<12} {:<36} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>4}",
                l.change.command(),
                label(l.scheme, l.change),
                ms(l.first.value_at_quantile(0.5)),
                ms(l.last.value_at_quantile(0.5)),
                ms(l.last.value_at_quantile(0.99)),
                ms(l.last.max()),
                ms(l.last_read.value_at_quantile(0.5)),
                ms(l.last_read.value_at_quantile(0.99)),
                ms(l.changer.value_at_quantile(0.5)),
                ms(l.srv_cpu.value_at_quantile(0.5)),
                l.errors
            );
        }
        for change in [Change::Release, Change::Fence] {
            println!(
                "  {}: observers' last reply {} the subscribers' last message (p50, median \
                 of paired rounds [lowest–highest]); p99 {}; server CPU per change {}",
                change.command(),
                self.vs(change).show(),
                ratio(self.vs_p99(change)),
                self.vs_cpu(change).show()
            );
        }
        let m = &self.memory;
        println!(
            "  12b. used_memory per client, {n} clients (each state settled): blocked in \
             LOCK.OBSERVE {:.1} bytes more than idle; in BLPOP of a missing list {:.1}; \
             SUBSCRIBEd to a keyspace channel {:.1}; left after the observers were answered \
             {:.1}",
            m.observer(),
            m.blpop(),
            m.subscriber(),
            m.left()
        );
    }

    fn json(&self) -> (&'static str, Json) {
        let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q).into();
        let runs = self.runs.iter().map(|l| {
            obj(vec![
                ("change", l.change.command().into()),
                ("variant", label(l.scheme, l.change).into()),
                ("first_p50_us", us(&l.first, 0.5)),
                ("first_p99_us", us(&l.first, 0.99)),
                ("last_p50_us", us(&l.last, 0.5)),
                ("last_p99_us", us(&l.last, 0.99)),
                ("last_max_us", l.last.max().into()),
                ("last_read_p50_us", us(&l.last_read, 0.5)),
                ("last_read_p99_us", us(&l.last_read, 0.99)),
                ("changer_reply_p50_us", us(&l.changer, 0.5)),
                ("server_cpu_per_change_p50_us", us(&l.srv_cpu, 0.5)),
                (
                    "last_p50_us_rounds",
                    Json::Arr(l.rounds.iter().map(|&x| x.into()).collect()),
                ),
                ("errors", l.errors.into()),
            ])
        });
        let vs = [Change::Release, Change::Fence].map(|c| {
            obj(vec![
                ("change", c.command().into()),
                ("observers_over_subscribers_p50", self.vs(c).json()),
                ("observers_over_subscribers_p99", self.vs_p99(c).into()),
                (
                    "observers_over_subscribers_server_cpu",
                    self.vs_cpu(c).json(),
                ),
            ])
        });
        let m = &self.memory;
        let memory = obj(vec![
            ("clients", (m.n as u64).into()),
            ("used_memory_idle", m.idle.into()),
            ("used_memory_observing", m.observing.into()),
            ("used_memory_answered", m.answered.into()),
            ("used_memory_blpop", m.blpop.into()),
            ("used_memory_after_blpop", m.after_blpop.into()),
            ("used_memory_subscribed", m.subscribed.into()),
            ("bytes_per_observer", m.observer().into()),
            ("bytes_per_blpop_client", m.blpop().into()),
            ("bytes_per_subscriber", m.subscriber().into()),
            ("bytes_left_per_answered_observer", m.left().into()),
        ]);
        let part = obj(vec![
            ("observers", (self.n as u64).into()),
            ("changes_per_variant", (self.changes as u64).into()),
            ("runs", Json::Arr(runs.collect())),
            ("ratios", Json::Arr(vs.into_iter().collect())),
            ("memory", memory),
        ]);
        ("observers", part)
    }

    fn targets(&self) -> Vec<Target> {
        Vec::new()
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let n = thousands(self.n as f64);
        let mut rows: Vec<SummaryRow> = [Change::Release, Change::Fence]
            .iter()
            .map(|&c| {
                let (o, s) = (self.run(Scheme::Observe, c), self.run(Scheme::Subscribe, c));
                row(
                    format!(
                        "`{}`: from the change to the last of {n} `LOCK.OBSERVE` replies",
                        c.command()
                    ),
                    format!(
                        "p50 {:.2} ms, p99 {:.2} ms (first reply p50 {:.2} ms; the changer's \
                         reply p50 {:.2} ms); server CPU {:.2} ms per change",
                        Latency::p(&o.last, 0.5),
                        Latency::p(&o.last, 0.99),
                        Latency::p(&o.first, 0.5),
                        Latency::p(&o.changer, 0.5),
                        Latency::p(&o.srv_cpu, 0.5)
                    ),
                    format!(
                        "{} the time to the last of {n} keyspace subscribers' messages (p50 \
                         {:.2} ms, p99 {:.2} ms; p99 {}); server CPU {} ({:.2} ms)",
                        self.vs(c).show(),
                        Latency::p(&s.last, 0.5),
                        Latency::p(&s.last, 0.99),
                        ratio(self.vs_p99(c)),
                        self.vs_cpu(c).show(),
                        Latency::p(&s.srv_cpu, 0.5)
                    ),
                )
            })
            .collect();
        let m = &self.memory;
        rows.push(row(
            "memory of a client blocked in `LOCK.OBSERVE` (over an idle one)",
            format!("{:.0} bytes", m.observer()),
            format!(
                "`BLPOP` of a missing list {:.0} bytes; `SUBSCRIBE` {:.0} bytes",
                m.blpop(),
                m.subscriber()
            ),
        ));
        rows
    }

    fn errors(&self) -> u64 {
        self.runs.iter().map(|l| l.errors).sum()
    }
}
