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

pub(crate) struct ClientResult {
    pub(crate) acquisitions: u64,
    pub(crate) handoffs: u64,
    pub(crate) max_wait: Duration,
    pub(crate) waits: Histogram<u64>,
    pub(crate) errors: u64,
}

/// One contending client: acquire, check in and out of the resource, release, until `end`.
/// Acquisitions after `end` (clients still queued) are released but not counted.
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
    let mut r = ClientResult {
        acquisitions: 0,
        handoffs: 0,
        max_wait: Duration::ZERO,
        waits: new_hist(),
        errors: 0,
    };
    sleep_until(start);
    'run: loop {
        let began = Instant::now();
        if began >= end {
            break;
        }
        let fence = match kind {
            Contender::Wait => {
                let v = call(
                    &mut con,
                    &["LOCK.ACQUIRE", CONTENDED_KEY, &token, &ttl, "WAIT", "0"],
                );
                match v {
                    Value::Int(f) => Some(f),
                    other => panic!("LOCK.ACQUIRE WAIT 0 replied {other:?}"),
                }
            }
            Contender::Poll(_) | Contender::PubSub => loop {
                let v = call(&mut con, &["SET", CONTENDED_KEY, &token, "NX", "PX", &ttl]);
                if v == Value::Okay {
                    break None;
                }
                if Instant::now() >= end {
                    break 'run;
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
        let got = Instant::now();
        let handoff = res.enter(id, fence);
        res.leave(id);
        let released = match kind {
            Contender::Wait => call(&mut con, &["LOCK.RELEASE", CONTENDED_KEY, &token]),
            Contender::Poll(_) => call(
                &mut con,
                &["EVALSHA", &s.release, "1", CONTENDED_KEY, &token],
            ),
            Contender::PubSub => {
                let sha = &s.release_publish;
                call(
                    &mut con,
                    &[
                        "EVALSHA",
                        sha,
                        "1",
                        CONTENDED_KEY,
                        &token,
                        CONTENDED_CHANNEL,
                    ],
                )
            }
        };
        if released != Value::Int(1) {
            r.errors += 1;
        }
        if got < end {
            r.acquisitions += 1;
            r.handoffs += u64::from(handoff);
            r.max_wait = r.max_wait.max(got - began);
            r.waits.record(micros(got - began)).unwrap();
        }
    }
    r
}

pub(crate) struct Contended {
    pub(crate) label: &'static str,
    pub(crate) short: &'static str,
    pub(crate) secs: f64,
    pub(crate) per_client: Vec<u64>,
    pub(crate) handoffs: u64,
    pub(crate) max_wait: Duration,
    pub(crate) waits: Histogram<u64>,
    pub(crate) violations: u64,
    pub(crate) errors: u64,
    pub(crate) cpu_secs: f64,
    /// Hand-offs/s of each round.
    pub(crate) rounds: Vec<f64>,
}

impl Contended {
    pub(crate) fn absorb(&mut self, round: Contended) {
        self.secs += round.secs;
        for (sum, n) in self.per_client.iter_mut().zip(&round.per_client) {
            *sum += n;
        }
        self.handoffs += round.handoffs;
        self.max_wait = self.max_wait.max(round.max_wait);
        self.waits.add(&round.waits).unwrap();
        self.violations += round.violations;
        self.errors += round.errors;
        self.cpu_secs += round.cpu_secs;
        self.rounds.extend(round.rounds);
    }
    /// Median over rounds of this scheme's hand-offs/s over `b`'s in the same round.
    pub(crate) fn handoff_ratio(&self, b: &Contended) -> f64 {
        paired_median(&self.rounds, &b.rounds)
    }
    pub(crate) fn acquisitions(&self) -> u64 {
        self.per_client.iter().sum()
    }
    pub(crate) fn handoff_rate(&self) -> f64 {
        self.handoffs as f64 / self.secs
    }
    /// Jain's fairness index of the per-client acquisition counts: 1 = perfectly even.
    pub(crate) fn fairness(&self) -> f64 {
        let sum: f64 = self.per_client.iter().map(|&x| x as f64).sum();
        let squares: f64 = self.per_client.iter().map(|&x| (x as f64).powi(2)).sum();
        sum * sum / (self.per_client.len() as f64 * squares)
    }
    pub(crate) fn json(&self, all: &[Contended]) -> Json {
        let vs = all.iter().filter(|b| b.short != self.short).map(|b| {
            obj(vec![
                ("baseline", b.label.into()),
                ("handoff_ratio", self.handoff_ratio(b).into()),
            ])
        });
        obj(vec![
            ("name", self.label.into()),
            ("seconds", self.secs.into()),
            ("handoffs", self.handoffs.into()),
            ("handoffs_per_sec", self.handoff_rate().into()),
            ("acquisitions", self.acquisitions().into()),
            (
                "acquisitions_per_sec",
                (self.acquisitions() as f64 / self.secs).into(),
            ),
            ("max_wait_us", micros(self.max_wait).into()),
            ("wait_p50_us", self.waits.value_at_quantile(0.5).into()),
            ("wait_p99_us", self.waits.value_at_quantile(0.99).into()),
            ("fairness_jain", self.fairness().into()),
            (
                "per_client_acquisitions",
                Json::Arr(self.per_client.iter().map(|&x| x.into()).collect()),
            ),
            ("violations", self.violations.into()),
            ("errors", self.errors.into()),
            ("server_cpu_util", (self.cpu_secs / self.secs).into()),
            ("vs", Json::Arr(vs.collect())),
        ])
    }
}

pub(crate) fn run_contended(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    label: &'static str,
    short: &'static str,
    kind: Contender,
) -> Contended {
    let mut probe = srv.connect();
    flushall(&mut probe);
    let res = Resource::default();
    let clients: Vec<(Connection, Option<Connection>)> = (0..CONTENDED_CLIENTS)
        .map(|_| {
            let sub = matches!(kind, Contender::PubSub).then(|| srv.connect());
            (srv.connect(), sub)
        })
        .collect();
    // Time for every client to subscribe before the start.
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + plan.contended;
    let (results, cpu) = thread::scope(|scope| {
        let res = &res;
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, cons)| {
                scope.spawn(move || contender(kind, i as u64 + 1, cons, res, s, (start, end)))
            })
            .collect();
        sleep_until(start);
        let c0 = server_cpu(&mut probe);
        sleep_until(end);
        let c1 = server_cpu(&mut probe);
        let results: Vec<ClientResult> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, c1 - c0)
    });
    // Everyone has released: nothing may be left of the lock (no holder, no stuck waiter).
    let left = match kind {
        Contender::Wait => call(&mut probe, &["LOCK.INFO", CONTENDED_KEY]),
        _ => call(&mut probe, &["GET", CONTENDED_KEY]),
    };
    let mut c = Contended {
        label,
        short,
        secs: plan.contended.as_secs_f64(),
        per_client: results.iter().map(|r| r.acquisitions).collect(),
        handoffs: results.iter().map(|r| r.handoffs).sum(),
        max_wait: results.iter().map(|r| r.max_wait).max().unwrap_or_default(),
        waits: new_hist(),
        violations: res.violations.load(SeqCst),
        errors: results.iter().map(|r| r.errors).sum::<u64>() + u64::from(left != Value::Nil),
        cpu_secs: cpu,
        rounds: Vec::new(),
    };
    for r in &results {
        c.waits.add(&r.waits).unwrap();
    }
    c.rounds.push(c.handoff_rate());
    eprintln!(
        "  {:<44} {:>10.0} hand-offs/s  (server cpu {:>3.0}%)",
        label,
        c.handoff_rate(),
        c.cpu_secs / c.secs * 100.0
    );
    c
}

pub(crate) fn print_contended(all: &[Contended]) {
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
    println!("  per-client acquisitions:");
    for c in all {
        let counts: Vec<String> = c.per_client.iter().map(|x| x.to_string()).collect();
        println!("    {:<34} {}", c.short, counts.join(" "));
    }
    if all.iter().any(|c| c.errors > 0) {
        for c in all.iter().filter(|c| c.errors > 0) {
            println!(
                "  !! {}: {} failed releases or a lock left behind",
                c.label, c.errors
            );
        }
    }
}
