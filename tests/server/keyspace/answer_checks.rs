//! Checks of what waiters were answered, shared by the matrix and the reproductions: clients
//! blocked on another key ("sentinels") that must be handed nothing, and a waiter that must
//! be answered null at once.

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::common::{acquire, got, info, lock_info, wait_until, Findings, Reply, Server, Waiter};
use crate::keyspace::{AT_ONCE, TTL};

/// Blocks `n` clients on key `o` (held by `o-holder`, taken here), in db 0.
pub(crate) fn block_sentinels(server: &Server, con: &mut Connection, n: usize) -> Vec<Waiter> {
    acquire(con, "o", "o-holder", TTL).expect("key o is free");
    let ws: Vec<Waiter> = (0..n)
        .map(|i| Waiter::send(server, "o", &format!("s{i}"), TTL, 0))
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || info(con, "o")
            .map_or(0, |i| i.waiters)
            == n as i64),
        "the {n} sentinels did not all block on o"
    );
    ws
}

/// The sentinels on `o` were handed nothing, and `o` has its one holder and all of them
/// queued.
pub(crate) fn check_sentinels(f: &mut Findings, con: &mut Connection, sentinels: &mut [Waiter]) {
    sleep(Duration::from_millis(30));
    for s in sentinels.iter_mut() {
        if let Some(r) = s.reply_within(Duration::ZERO) {
            f.fail(format!(
                "sentinel {} (client {}), blocked on another key o, was answered {r:?}: a grant \
                 or answer meant for a waiter that had left reached another client",
                s.token, s.id
            ));
        }
    }
    let o = lock_info(con, "o");
    f.check(
        o.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(&b"o-holder"[..]) && i.waiters == sentinels.len() as i64
        }),
        || {
            format!(
                "LOCK.INFO o should show holder o-holder and {} waiters, got {o:?}",
                sentinels.len()
            )
        },
    );
}

/// Reads the answer that must be null and at once (by `deadline`; `from` is the instant
/// the operation happened, for the message).
pub(crate) fn expect_null_at_once(
    f: &mut Findings,
    w: &mut Waiter,
    who: &str,
    from: Instant,
    deadline: Instant,
) {
    let r = w.reply_by(deadline);
    if r == Some(Reply::Null) {
        return;
    }
    let late = w
        .reply_by(deadline + Duration::from_millis(1200))
        .map(|late| {
            format!(
                " (then, {:?} after the operation: {late:?})",
                from.elapsed()
            )
        });
    f.fail(format!(
        "{who} must be answered null within {AT_ONCE:?}; got {}{}",
        got(&r),
        late.unwrap_or_default()
    ));
}
