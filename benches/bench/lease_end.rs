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
}

pub(crate) fn run_lease_end(srv: &Server, plan: &Plan) -> LeaseEnd {
    eprintln!("5. Lease-end hand-off");
    let mut holder = srv.connect();
    let mut waiter = srv.connect();
    flushall(&mut holder);
    let ttl = LEASE_TTL_MS.to_string();
    let mut r = LeaseEnd {
        delays: new_hist(),
        early: 0,
        most_early: Duration::ZERO,
        rtt: new_hist(),
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
    r
}
