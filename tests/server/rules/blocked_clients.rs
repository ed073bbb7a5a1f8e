//! Rules 1 and 2, for a client blocked in `LOCK.ACQUIRE … WAIT`: `CLIENT UNBLOCK` answers it
//! and it leaves the queue; a `WAIT` timeout too large for the server's clock is refused.

use std::thread::sleep;
use std::time::Duration;

use crate::common::{
    acquire, client_unblock, exists, got, lock_info, lock_stat, release, waiting_clients, Findings,
    Reply, Server, Waiter,
};
use crate::rules::{AT_ONCE, HOLDER, TTL};
use redis::Connection;

// ------------------------------------------------------------------------ CLIENT UNBLOCK

/// Reproduction 7: `CLIENT UNBLOCK <id>` on a client blocked in `LOCK.ACQUIRE … WAIT` (with
/// a timeout, and with `WAIT 0`) returns 1 and the client gets null; with `ERROR`, an error
/// starting with `UNBLOCKED`. It has left the queue: not counted, and a release does not
/// grant to it (the lock goes to the next real waiter, or is free).
#[test]
fn repro7_client_unblock_answers_a_waiter_and_it_leaves_the_queue() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let mut case = 0;
    for timeout in [5000u64, 0] {
        for error in [false, true] {
            for with_next in [false, true] {
                case += 1;
                let label = format!(
                    "[WAIT {timeout}, CLIENT UNBLOCK{}, {}]",
                    if error { " … ERROR" } else { "" },
                    if with_next {
                        "another waiter behind it"
                    } else {
                        "alone in the queue"
                    }
                );
                let key = format!("k{case}");
                let fence0 = acquire(&mut con, &key, HOLDER, TTL).unwrap();
                let mut u = Waiter::join(&server, &key, "u", TTL, timeout);
                let mut next = with_next.then(|| Waiter::join(&server, &key, "n", TTL, 0));
                let n = client_unblock(&mut con, u.id, error);
                f.check(n == 1, || {
                    format!("{label} CLIENT UNBLOCK {} replied {n}, not 1", u.id)
                });
                let r = u.reply_within(AT_ONCE);
                let answered_right = match &r {
                    Some(Reply::Null) => !error,
                    Some(Reply::Error(e)) => error && e.starts_with("UNBLOCKED"),
                    _ => false,
                };
                f.check(answered_right, || {
                    format!(
                        "{label} the unblocked client must get {} at once; got {}",
                        if error {
                            "an error starting with UNBLOCKED"
                        } else {
                            "null"
                        },
                        got(&r)
                    )
                });
                let now = lock_info(&mut con, &key);
                let want = i64::from(with_next);
                f.check(now.as_ref().is_some_and(|i| i.waiters == want), || {
                    format!("{label} LOCK.INFO {key} should count {want} waiters: {now:?}")
                });
                let counted = waiting_clients(&mut con);
                f.check(counted == want, || {
                    format!("{label} lock_waiting_clients is {counted}, not {want}")
                });
                if answered_right {
                    // Unblocked for good: its connection serves commands again.
                    let pong = u.call_now(&["PING"]);
                    f.check(pong == Reply::Status("PONG".into()), || {
                        format!("{label} PING on the unblocked connection: {pong:?}")
                    });
                }
                assert_eq!(release(&mut con, &key, HOLDER), 1, "{label} release");
                if let Some(n) = next.as_mut() {
                    let r = n.reply_within(AT_ONCE);
                    let now = lock_info(&mut con, &key);
                    f.check(
                        matches!(r, Some(Reply::Fence(g)) if g > fence0)
                            && now
                                .as_ref()
                                .is_some_and(|i| i.holder.as_deref() == Some(&b"n"[..])),
                        || {
                            format!(
                                "{label} after the release, the next waiter must hold the lock; \
                                 it got {}, LOCK.INFO {key}: {now:?}",
                                got(&r)
                            )
                        },
                    );
                } else {
                    let now = lock_info(&mut con, &key);
                    f.check(now.is_none(), || {
                        format!(
                            "{label} after the release nobody waits: {key} must be free: {now:?}"
                        )
                    });
                }
                let late = u.reply_within(Duration::from_millis(30));
                f.check(late.is_none(), || {
                    format!("{label} the unblocked client got another reply: {late:?}")
                });
                if let Some(n) = next.as_ref() {
                    release(&mut con, &key, &n.token);
                }
            }
        }
    }
    f.done("CLIENT UNBLOCK");
}

// ------------------------------------------------------------------ WAIT out of range

/// Reproduction 5: `WAIT` timeouts too large to add to the server's clock in ms are refused
/// at once with `timeout is out of range` (as `BLPOP`'s), on a held and on a free key, and
/// change nothing. `WAIT 0`, and a large timeout that fits, still wait.
#[test]
fn repro5_wait_timeouts_out_of_range_are_refused_at_once() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let fence0 = acquire(&mut con, "k", HOLDER, TTL).unwrap();
    let stat = |con: &mut Connection, name: &str| lock_stat(con, name).unwrap_or(-1);
    let before = (
        stat(&mut con, "lock_acquires"),
        stat(&mut con, "lock_contended_acquires"),
        stat(&mut con, "lock_held"),
    );
    for timeout in [
        "9223372036854775807",
        "9223372036854775000",
        "9223372035854775807",
    ] {
        for key in ["k", "free"] {
            let mut w = Waiter::send_args(&server, 0, key, "t", "1000", timeout);
            let r = w.reply_within(Duration::from_millis(500));
            let took = w.answered.map(|t| t - w.sent);
            match &r {
                Some(Reply::Error(e)) if e.contains("timeout is out of range") => {
                    f.check(took.is_some_and(|t| t < AT_ONCE), || {
                        format!("WAIT {timeout} on {key}: refused only after {took:?}")
                    });
                }
                other => f.fail(format!(
                    "LOCK.ACQUIRE {key} t 1000 WAIT {timeout} must be refused at once with an \
                     error containing 'timeout is out of range'; got {}",
                    got(other)
                )),
            }
        }
    }
    let k = lock_info(&mut con, "k");
    f.check(
        k.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence0 && i.waiters == 0
        }),
        || format!("k must be unchanged (holder {HOLDER}, fence {fence0}, 0 waiters): {k:?}"),
    );
    let free = exists(&mut con, "free");
    f.check(!free, || {
        "the refused acquires must not create the free key".to_string()
    });
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    let after = (
        stat(&mut con, "lock_acquires"),
        stat(&mut con, "lock_contended_acquires"),
        stat(&mut con, "lock_held"),
    );
    f.check(after == before, || {
        format!(
            "refused acquires must change no counter: (acquires, contended, held) {before:?} \
             -> {after:?}"
        )
    });

    // WAIT 0 waits without limit, and so does a large timeout that fits (about 3 years).
    let mut zero = Waiter::join(&server, "k", "zero", TTL, 0);
    let mut large = Waiter::join(&server, "k", "large", TTL, 100_000_000_000);
    sleep(Duration::from_millis(300));
    for w in [&mut zero, &mut large] {
        let early = w.reply_within(Duration::ZERO);
        f.check(early.is_none(), || {
            format!(
                "{} must still be waiting after 300 ms; got {early:?}",
                w.token
            )
        });
    }
    assert_eq!(release(&mut con, "k", HOLDER), 1);
    let r = zero.reply_within(AT_ONCE);
    f.check(matches!(r, Some(Reply::Fence(_))), || {
        format!(
            "the WAIT 0 waiter must be granted on release; got {}",
            got(&r)
        )
    });
    assert_eq!(release(&mut con, "k", "zero"), 1);
    let r = large.reply_within(AT_ONCE);
    f.check(matches!(r, Some(Reply::Fence(_))), || {
        format!(
            "the WAIT 100000000000 waiter must be granted on release; got {}",
            got(&r)
        )
    });
    f.done("WAIT timeout out of range");
}
