//! Workload 5: from a lease deadline to the next waiter's grant.

#[allow(unused_imports)]
use crate::*;

// Workload 5: lease end → grant to the head waiter.

pub(crate) struct LeaseEnd {
    pub(crate) delays: Histogram<u64>,
    /// Grants that arrived before the lease deadline as the client measures it (send time of
    /// the acquire + ttl, which is no later than the server's receipt + ttl): the lease
    /// ended early. They count as a delay of 0 in `delays`.
    pub(crate) early: u64,
    pub(crate) most_early: Duration,
    pub(crate) rtt: Histogram<u64>,
    pub(crate) reps: usize,
}

pub(crate) fn run_lease_end(ctx: &Ctx) -> Box<dyn Outcome> {
    eprintln!("5. Lease-end hand-off");
    let (srv, plan) = (ctx.srv, ctx.plan);
    let mut holder = srv.conn();
    let mut waiter = srv.conn();
    flushall(&mut holder);
    let ttl = LEASE_TTL_MS.to_string();
    let mut r = LeaseEnd {
        delays: new_hist(),
        early: 0,
        most_early: Duration::ZERO,
        rtt: new_hist(),
        reps: plan.lease_reps,
    };
    for _ in 0..plan.lease_reps {
        let sent = Instant::now();
        let v = call(&mut holder, &["LOCK.ACQUIRE", "lease", "holder", &ttl]);
        assert!(matches!(v, Value::Int(_)), "holder's acquire: {v:?}");
        r.rtt.record(micros(sent.elapsed())).unwrap();
        let deadline = sent + Duration::from_millis(LEASE_TTL_MS);
        let v = call(
            &mut waiter,
            &["LOCK.ACQUIRE", "lease", "waiter", "10000", "WAIT", "0"],
        );
        let granted = Instant::now();
        assert!(matches!(v, Value::Int(_)), "waiter's acquire: {v:?}");
        match granted.checked_duration_since(deadline) {
            Some(d) => r.delays.record(micros(d)).unwrap(),
            None => {
                r.early += 1;
                r.most_early = r.most_early.max(deadline - granted);
                r.delays.record(1).unwrap();
            }
        }
        assert_eq!(
            call(&mut waiter, &["LOCK.RELEASE", "lease", "waiter"]),
            Value::Int(1)
        );
    }
    Box::new(r)
}

impl Outcome for LeaseEnd {
    fn print(&self) {
        println!(
            "\n5. Lease-end hand-off: {}-ms lease never released, a waiter blocked with WAIT 0 \
             ({} times; delay from lease deadline to grant, client clock)",
            LEASE_TTL_MS, self.reps
        );
        println!(
            "  p50 {}  p99 {}  max {}   (round trip of an acquire: p50 {})",
            ms(self.delays.value_at_quantile(0.5)),
            ms(self.delays.value_at_quantile(0.99)),
            ms(self.delays.max()),
            ms(self.rtt.value_at_quantile(0.5)),
        );
        if self.early > 0 {
            println!(
                "  !! {} of {} grants came before send time + ttl, up to {} early: the lease \
                 ended before its ttl had passed since the server received the acquire",
                self.early,
                self.reps,
                ms(micros(self.most_early))
            );
        }
    }

    fn json(&self) -> (&'static str, Json) {
        let part = obj(vec![
            ("ttl_ms", LEASE_TTL_MS.into()),
            ("reps", (self.reps as u64).into()),
            ("p50_us", self.delays.value_at_quantile(0.5).into()),
            ("p99_us", self.delays.value_at_quantile(0.99).into()),
            ("max_us", self.delays.max().into()),
            ("grants_before_deadline", self.early.into()),
            ("most_early_us", micros(self.most_early).into()),
            ("acquire_rtt_p50_us", self.rtt.value_at_quantile(0.5).into()),
        ]);
        ("lease_end_handoff", part)
    }

    fn targets(&self) -> Vec<Target> {
        let p99 = self.delays.value_at_quantile(0.99) as f64 / 1000.0;
        vec![target(
            "#14",
            "lease-end hand-off p99",
            p99,
            "<=",
            5.0,
            " ms",
        )]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        vec![row(
            "lease end to the next waiter's grant",
            format!(
                "p50 {}, p99 {}",
                ms(self.delays.value_at_quantile(0.5)),
                ms(self.delays.value_at_quantile(0.99))
            ),
            "",
        )]
    }

    fn errors(&self) -> u64 {
        0
    }
}
