//! Each lease on time, timer or not (point 6 of the crate doc): a lease ends within
//! milliseconds of its deadline while the module timer is armed for a later one, not at the
//! next 100 ms cron.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::{ms, watch};

/// Acquires a 60 s lease (the module timer is armed for it), then 20 leases of 400 to 495 ms,
/// 5 ms apart, each with a waiter: each grant comes within milliseconds of its deadline. A
/// timer not re-armed for the earlier deadlines leaves them to the 100 ms cron, which grants
/// them 0 to 100 ms late, spread evenly over the period: a median near 50 ms.
#[test]
fn each_lease_ends_on_time_while_the_timer_is_armed_for_a_later_one() {
    const N: u64 = 20;
    const MEDIAN_BOUND_MS: f64 = 30.0;
    let s = Server::new();
    let mut c = s.conn();
    let mut medians = Vec::new();
    for round in 0..2 {
        acquire(&mut c, &format!("later{round}"), "l", 60_000).unwrap();
        let mut leases = Vec::new();
        for i in 0..N {
            let key = format!("r{round}k{i}");
            let ttl = 400 + 5 * i;
            let sent = Instant::now();
            let f = acquire(&mut c, &key, "h", ttl).unwrap();
            leases.push((key, ttl, sent, f));
        }
        let mut watchers = Vec::new();
        for (key, ..) in &leases {
            let w = Waiter::send(&s, key, "w", 60_000, 0);
            watchers.push(watch(w, Duration::from_secs(10)));
        }
        for (key, ttl, sent, _) in &leases {
            let joined = wait_until(Duration::from_millis(300), || {
                info(&mut c, key).is_some_and(|i| i.waiters == 1)
            });
            assert!(
                joined && sent.elapsed() < Duration::from_millis(*ttl - 50),
                "round {round}: the waiter of {key} was not queued well before its lease's end \
                 (machine too slow?)"
            );
        }
        let mut lateness = Vec::new();
        for ((key, ttl, sent, f), h) in leases.iter().zip(watchers) {
            let (reply, at) = h.join().unwrap();
            match (reply, at) {
                (Some(Reply::Fence(g)), Some(at)) if g > *f => {
                    let due = *sent + Duration::from_millis(*ttl);
                    assert!(
                        at >= due,
                        "{key}: granted {:.1} ms before its lease's end",
                        ms(due - at)
                    );
                    lateness.push(ms(at - due));
                }
                (r, _) => panic!("{key}: waiter got {}", got(&r)),
            }
        }
        lateness.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let median = (lateness[N as usize / 2 - 1] + lateness[N as usize / 2]) / 2.0;
        eprintln!(
            "round {round}: grants late by (ms, sorted) {:?}; median {median:.1}",
            lateness
                .iter()
                .map(|l| (l * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        medians.push(median);
        let i = info(&mut c, &format!("later{round}")).expect("the 60 s lease");
        assert!(i.ttl > 55_000, "{:?}", Lock(i));
    }
    let best = medians.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        best <= MEDIAN_BOUND_MS,
        "median lateness of lease ends {medians:?} ms, bound {MEDIAN_BOUND_MS}: the timer armed \
         for the 60 s lease is not re-armed for earlier deadlines (the cron ends them)"
    );
}
