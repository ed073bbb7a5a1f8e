//! The reported reproductions, step by step: `RENAME`, `MOVE` and `SWAPDB` of a lock with a
//! waiter that then times out, disconnects or waits on, and a left waiter's grant that must
//! never reach a client blocked on another key.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::{
    acquire, args, client_connected, conn_in, got, lock_info, must, release, wait_until,
    waiting_clients, Findings, Reply, Server, Waiter,
};
use crate::keyspace::answer_checks::{block_sentinels, check_sentinels};
use crate::keyspace::{AT_ONCE, HOLDER, SENTINELS};

/// Reproduction 1: `RENAME`, then the waiter times out. w1 must be answered null at the
/// rename (not at its 300 ms timeout), k2 counts no waiter, and releasing k2 leaves it free.
#[test]
fn repro1_rename_then_the_waiter_times_out() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w1 = Waiter::join(&server, "k", "w1", 60_000, 300);
    let at = Instant::now();
    must(&mut con, &args(&["RENAME", "k", "k2"]));
    let r = w1.reply_within(Duration::from_secs(2));
    let took = w1.answered.map(|t| t - at);
    f.check(
        r == Some(Reply::Null) && took.is_some_and(|t| t < AT_ONCE),
        || {
            format!(
                "w1 must get null at once after RENAME k k2, not at its 300 ms timeout; got {} \
                 after {took:?}",
                got(&r)
            )
        },
    );
    sleep((w1.sent + Duration::from_millis(400)).saturating_duration_since(Instant::now()));
    let k2 = lock_info(&mut con, "k2");
    f.check(
        k2.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence && i.waiters == 0
        }),
        || format!("LOCK.INFO k2 should show holder {HOLDER}, fence {fence}, 0 waiters: {k2:?}"),
    );
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    let released = release(&mut con, "k2", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k2 holder replied {released}")
    });
    let after = lock_info(&mut con, "k2");
    f.check(after.is_none(), || {
        format!(
            "after LOCK.RELEASE k2 holder, k2 must be free (w1 never becomes holder): {after:?}"
        )
    });
    let again = w1.reply_within(Duration::from_millis(50));
    f.check(again.is_none(), || {
        format!("w1 got a second reply: {again:?}")
    });
    f.done("RENAME, then the waiter times out");
}

/// Reproduction 2: after reproduction 1, with 30 clients blocked on another held key `o`,
/// `LOCK.RELEASE k2 holder` must answer none of them (a timed-out waiter's id, left behind
/// in k2's queue, must not name one of them); `o` keeps its one holder.
#[test]
fn repro2_a_left_waiter_is_never_granted_to_a_client_blocked_on_another_key() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w1 = Waiter::join(&server, "k", "w1", 60_000, 300);
    must(&mut con, &args(&["RENAME", "k", "k2"]));
    let first = w1.reply_within(Duration::from_secs(2));
    f.check(first == Some(Reply::Null), || {
        format!("w1: {}", got(&first))
    });
    sleep((w1.sent + Duration::from_millis(400)).saturating_duration_since(Instant::now()));
    let mut sentinels = block_sentinels(&server, &mut con, 30);
    let released = release(&mut con, "k2", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k2 holder replied {released}")
    });
    check_sentinels(&mut f, &mut con, &mut sentinels);
    let counted = waiting_clients(&mut con);
    f.check(counted == 30, || {
        format!("lock_waiting_clients is {counted}, not 30")
    });
    let k2 = lock_info(&mut con, "k2");
    f.check(k2.is_none(), || {
        format!("k2 must be free after its holder released it: {k2:?}")
    });
    let again = w1.reply_within(Duration::ZERO);
    f.check(again.is_none(), || {
        format!("w1 got a second reply: {again:?}")
    });
    f.done("a left waiter's grant reached another client");
}

/// Reproduction 3: `MOVE`, then the waiter disconnects: it is never granted the lock in db 1.
#[test]
fn repro3_move_then_the_waiter_disconnects() {
    let server = Server::new();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let w = Waiter::join(&server, "k", "w", 60_000, 0);
    let id = w.id;
    must(&mut con, &args(&["MOVE", "k", "1"]));
    drop(w);
    assert!(
        wait_until(Duration::from_secs(5), || !client_connected(&mut con, id)),
        "the server did not see the waiter disconnect"
    );
    let mut sentinels = block_sentinels(&server, &mut con, SENTINELS);
    let moved = lock_info(&mut db1, "k");
    f.check(
        moved.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence && i.waiters == 0
        }),
        || {
            format!(
                "LOCK.INFO k in db 1 should show holder {HOLDER}, fence {fence}, 0 waiters: \
                 {moved:?}"
            )
        },
    );
    let released = release(&mut db1, "k", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k holder in db 1 replied {released}")
    });
    let after = lock_info(&mut db1, "k");
    f.check(after.is_none(), || {
        format!("the disconnected waiter must never be granted the lock in db 1: {after:?}")
    });
    check_sentinels(&mut f, &mut con, &mut sentinels);
    let counted = waiting_clients(&mut con);
    f.check(counted == SENTINELS as i64, || {
        format!("lock_waiting_clients is {counted}; only the {SENTINELS} sentinels wait")
    });
    f.done("MOVE, then the waiter disconnects");
}

/// Reproduction 4: `SWAPDB`: a waiter on db 0's key is answered null at once, and is not
/// handed the fence of the lock that moved to db 1 when that lock is released.
#[test]
fn repro4_swapdb_does_not_hand_the_moved_lock_to_the_waiter() {
    let server = Server::new();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w = Waiter::join(&server, "k", "w", 60_000, 0);
    let at = Instant::now();
    must(&mut con, &args(&["SWAPDB", "0", "1"]));
    let first = w.reply_by(at + AT_ONCE);
    let released = release(&mut db1, "k", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k holder in db 1 replied {released}")
    });
    let later = w.reply_within(Duration::from_millis(300));
    f.check(first == Some(Reply::Null), || {
        format!(
            "the waiter on db 0's k must be answered null within {AT_ONCE:?} of SWAPDB; got {}",
            got(&first)
        )
    });
    for r in [&first, &later] {
        if let Some(Reply::Fence(g)) = r {
            f.fail(format!(
                "the waiter on db 0's k was handed fence {g} of the lock that moved to db 1 \
                 (its fence was {fence})"
            ));
        }
    }
    let after = lock_info(&mut db1, "k");
    f.check(after.is_none(), || {
        format!("db 1's k must be free after its release: {after:?}")
    });
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    f.done("SWAPDB");
}
