//! A lazy flush answers at once: with a million locks in db 0, `FLUSHDB ASYNC`, a plain
//! `FLUSHDB` and `FLUSHALL ASYNC` answer the flushed databases' waiters null long before the
//! background free, and the locks freed then disturb nothing taken since.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::{
    acquire, conn_in, info, release, wait_until, waiting_clients, Reply, Server, Waiter,
};
use crate::common::{info_int as int_field, stat as lock_stat};
use crate::heavy;
use redis::{Connection, Value};

/// Locks in db 0 (`FLUSH_RACE_LOCKS` overrides).
const LOCKS: usize = 1_000_000;
/// A waiter of a flushed database is answered within this of the flush command being sent
/// (the server answers in the same turn; the background free of a million locks takes far
/// longer).
const PROMPT: Duration = Duration::from_millis(100);
const TTL: u64 = 3_600_000;

fn locks_to_load() -> usize {
    std::env::var("FLUSH_RACE_LOCKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(LOCKS)
}

/// `n` locks `k:0` … in db 0, pipelined; how long it took.
fn load_locks(server: &Server, n: usize) -> Duration {
    let mut con = server.conn();
    let t0 = Instant::now();
    // Below the fence bucket (4,096 fences: src/fence.rs), with a pause that refills it:
    // pipelined acquires outrun the 512 fences a millisecond the module issues sustained.
    const BATCH: usize = 4_000;
    for first in (0..n).step_by(BATCH) {
        std::thread::sleep(Duration::from_millis(9));
        let mut p = redis::pipe();
        for i in first..n.min(first + BATCH) {
            p.cmd("LOCK.ACQUIRE")
                .arg(format!("k:{i}"))
                .arg("h")
                .arg(TTL);
        }
        let fences: Vec<Option<i64>> = p.query(&mut con).expect("pipelined LOCK.ACQUIRE");
        assert!(
            fences.iter().all(Option::is_some),
            "a fresh key was not acquired"
        );
    }
    let took = t0.elapsed();
    assert_eq!(lock_stat(&mut con, "lock_held"), n as i64);
    took
}

fn cmd_ok(con: &mut Connection, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    assert_eq!(c.query::<Value>(con), Ok(Value::Okay), "{args:?}");
}

fn lazyfree_pending(con: &mut Connection) -> i64 {
    int_field(con, "memory", "lazyfree_pending_objects")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flush {
    /// `FLUSHDB ASYNC` in db 0.
    DbAsync,
    /// `FLUSHDB` in db 0, lazy where the server's `lazyfree-lazy-user-flush` says so.
    DbPlain,
    /// `FLUSHALL ASYNC`: both databases.
    AllAsync,
}

/// A million locks in db 0, one waiter on one of them; in db 1 a lock under the same name,
/// with a waiter that hung up, one that timed out and one still waiting. The flush answers
/// the flushed databases' waiters at once; what it did not flush keeps its queue, and what
/// is acquired again under a flushed name while the old locks are still being freed is not
/// touched by their free.
fn flush_race(how: Flush) {
    let _heavy = heavy();
    let server = Server::new();
    let mut c0 = server.conn();
    let mut c1 = conn_in(&server, 1);
    let n = locks_to_load();
    let loaded = load_locks(&server, n);
    let target = format!("k:{}", n / 2);
    let old_fence = info(&mut c0, &target).expect("loaded").fence;
    acquire(&mut c1, &target, "h1", TTL).expect("db 1 is empty");

    let mut w0 = Waiter::join_in(&server, 0, &target, "w0", TTL, 0);
    let dead = Waiter::join_in(&server, 1, &target, "dead", TTL, 0);
    let mut timed = Waiter::join_in(&server, 1, &target, "timed-out", TTL, 300);
    let mut w1 = Waiter::join_in(&server, 1, &target, "w1", TTL, 0);
    drop(dead);
    assert_eq!(
        timed.reply_within(Duration::from_secs(5)),
        Some(Reply::Null),
        "WAIT 300 times out"
    );
    assert!(
        wait_until(Duration::from_secs(5), || info(&mut c1, &target)
            .is_some_and(|i| i.waiters == 1)),
        "db 1: only w1 is left in the queue"
    );

    let lazy = match how {
        Flush::DbAsync | Flush::AllAsync => true,
        Flush::DbPlain => {
            let v: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("lazyfree-lazy-user-flush")
                .query(&mut c0)
                .unwrap();
            v.get(1).is_some_and(|v| v == "yes")
        }
    };
    let words: &[&str] = match how {
        Flush::DbAsync => &["FLUSHDB", "ASYNC"],
        Flush::DbPlain => &["FLUSHDB"],
        Flush::AllAsync => &["FLUSHALL", "ASYNC"],
    };
    assert_eq!(lazyfree_pending(&mut c0), 0);
    let t0 = Instant::now();
    cmd_ok(&mut c0, words);
    let returned = t0.elapsed();
    // A synchronous flush frees everything before it replies; the waiter is answered in
    // the same turn.
    let bound = if lazy { PROMPT } else { returned + PROMPT };
    let r0 = w0.reply_by(t0 + bound);
    let answered = w0.answered.map_or(Duration::MAX, |a| a.duration_since(t0));
    let pending_then = lazyfree_pending(&mut c0);
    assert_eq!(
        r0,
        Some(Reply::Null),
        "{words:?}: the db-0 waiter must be answered null within {bound:?}"
    );
    let r1 = w1.reply_within(if how == Flush::AllAsync {
        bound.saturating_sub(t0.elapsed())
    } else {
        Duration::from_millis(50)
    });
    if how == Flush::AllAsync {
        assert_eq!(r1, Some(Reply::Null), "{words:?}: the db-1 waiter too");
    } else {
        assert_eq!(r1, None, "{words:?}: the db-1 waiter must not be answered");
    }

    // The flushed name taken again (and waited on) while the old locks are being freed.
    let f0 = acquire(&mut c0, &target, "new0", TTL).expect("db 0 was flushed");
    assert!(
        f0 > old_fence,
        "the fence went backwards: {old_fence} -> {f0}"
    );
    let mut w0b = Waiter::join_in(&server, 0, &target, "w0b", TTL, 0);
    // After FLUSHALL, db 1's name is taken again too; w1 was answered and must stay so.
    let (holder1, mut w1_live, mut w1_answered) = if how == Flush::AllAsync {
        acquire(&mut c1, &target, "h2", TTL).expect("db 1 was flushed");
        let w1b = Waiter::join_in(&server, 1, &target, "w1b", TTL, 0);
        ("h2", w1b, Some(w1))
    } else {
        ("h1", w1, None)
    };
    let racing = lazyfree_pending(&mut c0) > 0;
    let mut free_took = None;
    let mut early = Vec::new();
    let deadline = t0 + Duration::from_secs(60);
    while Instant::now() < deadline {
        for w in [&mut w0b, &mut w1_live] {
            if let Some(r) = w.reply_within(Duration::ZERO) {
                early.push(format!(
                    "{} answered {r:?} while the old locks were freed",
                    w.token
                ));
            }
        }
        if lazyfree_pending(&mut c0) == 0 && lock_stat(&mut c0, "lock_held") == 2 {
            free_took = Some(t0.elapsed());
            break;
        }
        sleep(Duration::from_millis(20));
    }
    assert!(early.is_empty(), "{words:?}: {early:#?}");
    let free_took = free_took.unwrap_or_else(|| {
        panic!(
            "{words:?}: background free not done after 60 s (pending {}, lock_held {})",
            lazyfree_pending(&mut c0),
            lock_stat(&mut c0, "lock_held")
        )
    });
    println!(
        "{words:?} on {n} locks (loaded in {loaded:?}; lazy: {lazy}): returned in \
         {returned:?}; db-0 waiter answered after {answered:?} with {pending_then} objects \
         still to free; the free took {free_took:?}; re-acquired while freeing: {racing}"
    );
    assert!(
        !lazy || pending_then > 0 || free_took > bound,
        "{words:?}: the background free ended before the waiter's bound: not a race"
    );

    // Nothing else was said to anyone.
    for w in [&mut w0b, &mut w1_live, &mut timed, &mut w0] {
        assert_eq!(
            w.reply_within(Duration::from_millis(20)),
            None,
            "{words:?}: {} got a reply it should not have",
            w.token
        );
    }
    for (con, db, holder) in [(&mut c0, 0, "new0"), (&mut c1, 1, holder1)] {
        let lock = info(con, &target).unwrap_or_else(|| panic!("db {db}: {target} is gone"));
        assert_eq!(lock.holder.as_deref(), Some(holder.as_bytes()), "db {db}");
        assert_eq!(lock.waiters, 1, "db {db}");
    }

    // The releases grant the live waiters, and nobody else.
    assert_eq!(release(&mut c0, &target, "new0"), 1);
    let g0 = w0b.reply_within(Duration::from_secs(5));
    assert!(
        matches!(g0, Some(Reply::Fence(f)) if f > f0),
        "db 0: w0b must be granted a fence above {f0}: {g0:?}"
    );
    let before1 = info(&mut c1, &target).unwrap().fence;
    assert_eq!(release(&mut c1, &target, holder1), 1);
    let g1 = w1_live.reply_within(Duration::from_secs(5));
    assert!(
        matches!(g1, Some(Reply::Fence(f)) if f > before1),
        "db 1: {} must be granted a fence above {before1}: {g1:?}",
        w1_live.token
    );
    let lock = info(&mut c1, &target).unwrap();
    assert_eq!(lock.holder.as_deref(), Some(w1_live.token.as_bytes()));
    assert_eq!(lock.waiters, 0);
    assert_eq!(waiting_clients(&mut c0), 0);
    for w in std::iter::once(&mut timed).chain(w1_answered.as_mut()) {
        assert_eq!(
            w.reply_within(Duration::from_millis(20)),
            None,
            "{words:?}: {}, answered before, was told again",
            w.token
        );
    }
    assert_eq!(lock_stat(&mut c0, "lock_grants"), 2);
    drop(c0);
    let mut server = server;
    server.assert_alive();
}

#[test]
fn flushdb_async_answers_its_waiters_before_the_background_free() {
    flush_race(Flush::DbAsync);
}

#[test]
fn plain_flushdb_answers_its_waiters_lazy_or_not() {
    flush_race(Flush::DbPlain);
}

#[test]
fn flushall_async_answers_every_database_before_the_background_free() {
    flush_race(Flush::AllAsync);
}
