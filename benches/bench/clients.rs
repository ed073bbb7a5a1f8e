//! Contending clients, shared by workloads 4 (one lock) and 9 (a semaphore): each client's
//! loop, the threads of a round, and a scheme's results summed over rounds.

#[allow(unused_imports)]
use crate::*;

pub(crate) struct ClientResult {
    pub(crate) acquisitions: u64,
    pub(crate) handoffs: u64,
    pub(crate) max_wait: Duration,
    pub(crate) waits: Histogram<u64>,
    pub(crate) errors: u64,
}

/// One contending client's loop on connection `con`, shared by workloads 4 and 9, until
/// `end`: `acquire` tries until it holds (`Some`, with what `hold` needs) or gives up at
/// `end` (`None`); `hold` does the work under the lock and releases, returning (whether it
/// was a hand-off, whether the release succeeded). Acquisitions after `end` (clients still queued) are released but not
/// counted; a wait cut off by `end` counts in the max wait only, as `end` − its start.
pub(crate) fn client_loop<C, A>(
    con: &mut C,
    (start, end): (Instant, Instant),
    mut acquire: impl FnMut(&mut C, &mut ClientResult) -> Option<A>,
    mut hold: impl FnMut(&mut C, A) -> (bool, bool),
) -> ClientResult {
    let mut r = ClientResult {
        acquisitions: 0,
        handoffs: 0,
        max_wait: Duration::ZERO,
        waits: new_hist(),
        errors: 0,
    };
    sleep_until(start);
    loop {
        let began = Instant::now();
        if began >= end {
            break;
        }
        let Some(held) = acquire(con, &mut r) else {
            r.max_wait = r.max_wait.max(end - began);
            break;
        };
        let got = Instant::now();
        let (handoff, released) = hold(con, held);
        r.errors += u64::from(!released);
        if got < end {
            r.acquisitions += 1;
            r.handoffs += u64::from(handoff);
            r.max_wait = r.max_wait.max(got - began);
            r.waits.record(micros(got - began)).unwrap();
        } else {
            r.max_wait = r.max_wait.max(end - began);
        }
    }
    r
}

/// Runs `client(i, connections)` for each of `clients` on a thread of its own, and
/// `sample(probe)` at `start` and at `end`: (the clients' results, the two samples).
pub(crate) fn run_clients<C: Send, S>(
    probe: &mut Connection,
    clients: Vec<C>,
    (start, end): (Instant, Instant),
    client: impl Fn(usize, C) -> ClientResult + Sync,
    mut sample: impl FnMut(&mut Connection) -> S,
) -> (Vec<ClientResult>, S, S) {
    thread::scope(|scope| {
        let client = &client;
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, c)| scope.spawn(move || client(i, c)))
            .collect();
        sleep_until(start);
        let s0 = sample(probe);
        sleep_until(end);
        let s1 = sample(probe);
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, s0, s1)
    })
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
    /// Jain's fairness index of each round.
    pub(crate) round_fairness: Vec<f64>,
}

impl Contended {
    /// One round from its clients' results; `close_round` once its counts are final.
    pub(crate) fn from_clients(
        (label, short): (&'static str, &'static str),
        secs: Duration,
        results: &[ClientResult],
        cpu_secs: f64,
    ) -> Contended {
        let mut c = Contended {
            label,
            short,
            secs: secs.as_secs_f64(),
            per_client: results.iter().map(|r| r.acquisitions).collect(),
            handoffs: results.iter().map(|r| r.handoffs).sum(),
            max_wait: results.iter().map(|r| r.max_wait).max().unwrap_or_default(),
            waits: new_hist(),
            violations: 0,
            errors: results.iter().map(|r| r.errors).sum(),
            cpu_secs,
            rounds: Vec::new(),
            round_fairness: Vec::new(),
        };
        for r in results {
            c.waits.add(&r.waits).unwrap();
        }
        c
    }
    /// Records the round's hand-off rate and fairness.
    pub(crate) fn close_round(&mut self) {
        self.rounds.push(self.handoff_rate());
        self.round_fairness.push(self.fairness());
    }
    /// Hand-offs/s against `b`'s, by paired rounds.
    pub(crate) fn vs(&self, b: &Contended) -> Paired {
        Paired::of(&self.rounds, &b.rounds)
    }
    /// The fairness index over all rounds, with its lowest and highest round.
    pub(crate) fn fairness_rounds(&self) -> Paired {
        let fold = |f: fn(f64, f64) -> f64, init| self.round_fairness.iter().copied().fold(init, f);
        Paired {
            median: self.fairness(),
            min: fold(f64::min, f64::INFINITY),
            max: fold(f64::max, f64::NEG_INFINITY),
        }
    }
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
        self.round_fairness.extend(round.round_fairness);
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

/// Each scheme's acquisitions per client, one line a scheme.
pub(crate) fn print_per_client<'a>(runs: impl IntoIterator<Item = &'a Contended>) {
    println!("  per-client acquisitions:");
    for c in runs {
        let counts: Vec<String> = c.per_client.iter().map(|x| x.to_string()).collect();
        println!("    {:<34} {}", c.short, counts.join(" "));
    }
}
