//! 1,000 observers on one key, with waiters queued among them: one change answers every
//! observer with the new state, and the queue is as if nobody observed (observers are not
//! waiters: not counted in `waiters`, never granted, never ahead of anyone).

use std::time::{Duration, Instant};

use crate::common::{acquire, info, release, stat, Server, Waiter};
use crate::observer::Observer;
use crate::{answered, observing, wait_observing, AT_ONCE, TTL};

const OBSERVERS: usize = 1_000;
const WAITERS: usize = 10;

/// Raises this process's soft limit of open files to `needed` (the server, started after,
/// inherits it): each observer is a socket here and one in the server.
fn raise_open_files(needed: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write to.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur >= needed {
        return;
    }
    assert!(
        lim.rlim_max >= needed,
        "{needed} open files needed, hard limit {}",
        lim.rlim_max
    );
    lim.rlim_cur = needed;
    // SAFETY: `lim` is a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

#[test]
fn a_thousand_observers_answered_on_one_change_beside_the_queue() {
    raise_open_files(4 * OBSERVERS as u64 + 256);
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut observers = Vec::with_capacity(OBSERVERS);
    let mut waiters = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        for _ in 0..OBSERVERS / WAITERS {
            observers.push(Observer::send(&s, "k", fa, 0));
        }
        wait_observing(&mut c, observers.len() as i64);
        waiters.push(Waiter::join(&s, "k", &format!("w{i}"), TTL, 0));
    }
    let held = info(&mut c, "k").expect("held");
    assert_eq!(
        held.waiters, WAITERS as i64,
        "observers are not waiters: {held:?}"
    );
    assert_eq!(stat(&mut c, "lock_waiting_clients"), WAITERS as i64);
    assert_eq!(observing(&mut c), OBSERVERS as i64);
    let before = answered(&mut c);

    let t0 = Instant::now();
    assert_eq!(release(&mut c, "k", "a"), 1);
    let f0 = waiters[0].reply().expect("w0 is granted");
    let w0_at = waiters[0].answered.expect("answered") - t0;
    assert!(w0_at <= AT_ONCE, "w0 granted {w0_at:?} after the release");
    let mut last = Duration::ZERO;
    for o in &mut observers {
        let got = o
            .info_within(Duration::from_secs(5), "the one change")
            .expect("handed to w0, not null");
        assert_eq!(
            (got.holder.as_deref(), got.fence, got.waiters),
            (Some(&b"w0"[..]), f0, WAITERS as i64 - 1),
            "observer {}",
            o.id
        );
        last = last.max(o.answered_after(t0));
    }
    // Read one after the other here, so this bounds their arrival from above.
    assert!(
        last <= Duration::from_millis(500),
        "the last observer read {last:?} after"
    );
    assert_eq!(observing(&mut c), 0);
    assert_eq!(answered(&mut c), before + OBSERVERS as i64);

    // The queue is granted in the order it joined, each at once.
    let mut fence = f0;
    for i in 1..WAITERS {
        let t0 = Instant::now();
        assert_eq!(release(&mut c, "k", &format!("w{}", i - 1)), 1);
        let f = waiters[i]
            .reply()
            .unwrap_or_else(|| panic!("w{i} is granted"));
        let at = waiters[i].answered.expect("answered") - t0;
        assert!(at <= AT_ONCE, "w{i} granted {at:?} after the release");
        assert!(f > fence);
        fence = f;
        for later in &mut waiters[i + 1..] {
            assert!(
                !later.has_reply(),
                "{} answered before w{i}'s turn",
                later.token
            );
        }
    }
    assert_eq!(stat(&mut c, "lock_waiting_clients"), 0);
    assert_eq!(answered(&mut c), before + OBSERVERS as i64);
}

/// Round after round of changes to a key that hundreds of observers follow, each of them
/// observing again from the state it was given, as a follower does: every round answers
/// every observer, with the state the round left. (One benchmark run once saw a change
/// answer nobody; this looks for it.)
#[test]
fn every_round_of_changes_answers_every_follower() {
    const FOLLOWERS: usize = 300;
    const ROUNDS: usize = 30;
    raise_open_files(4 * FOLLOWERS as u64 + 256);
    let s = Server::new();
    let mut c = s.conn();
    let mut fence = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut followers: Vec<Observer> = (0..FOLLOWERS)
        .map(|_| Observer::send(&s, "k", fence, 0))
        .collect();
    let mut holder = "a".to_string();
    for round in 0..ROUNDS {
        wait_observing(&mut c, FOLLOWERS as i64);
        // Alternate the kinds of change: a new fence, a hand-over to another token.
        let expected = if round % 2 == 0 {
            let f: Option<i64> = redis::cmd("LOCK.FENCE")
                .arg("k")
                .arg(&holder)
                .query(&mut c)
                .expect("LOCK.FENCE");
            f.expect("the holder takes a new fence")
        } else {
            assert_eq!(release(&mut c, "k", &holder), 1);
            holder = format!("t{round}");
            acquire(&mut c, "k", &holder, TTL).expect("free again")
        };
        assert!(expected > fence, "round {round}: fences grow");
        for (i, o) in followers.iter_mut().enumerate() {
            // A release then an acquire are two changes: the follower may be answered with
            // the key free (null) first, and then, observing from 0, with the new holder.
            let mut got = o.info_within(Duration::from_secs(5), "a round's change");
            if got.is_none() && round % 2 == 1 {
                o.observe("k", 0, 0);
                got = o.info_within(Duration::from_secs(5), "the new holder");
            }
            let seen = got.map(|g| g.fence);
            assert_eq!(seen, Some(expected), "round {round}: follower {i}");
            o.observe("k", expected, 0);
        }
        fence = expected;
    }
    wait_observing(&mut c, FOLLOWERS as i64);
    assert_eq!(release(&mut c, "k", &holder), 1);
    for o in &mut followers {
        assert!(o
            .info_within(Duration::from_secs(5), "the last release")
            .is_none());
    }
    assert_eq!(observing(&mut c), 0);
}
