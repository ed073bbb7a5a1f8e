//! What the server does around a lock's key, and blocked clients that leave.
//!
//! A waiter waits for a (db, key name). When the lock under that name is deleted,
//! replaced or moved away — `DEL`, `UNLINK`, a flush, `RENAME` or `MOVE` of either side,
//! `SWAPDB`, `COPY … REPLACE`, `RESTORE … REPLACE`, an overwrite, expiry, eviction,
//! `MIGRATE`, a cluster slot handed away, `DEBUG RELOAD` — its waiters are answered null
//! at once, and a grant not yet delivered is answered null instead.
//!
//! The server tells the module of each on the main thread, in the same turn, before any
//! background free of the value: every removal of one key through the data type's unlink
//! callback (Redis 7.0 sends no keyspace event for some, such as a slot's keys deleted),
//! flushes and `SWAPDB` through server events.

use std::cell::RefCell;

use redis_module::{Context, ContextFlags, RedisString};

use super::effects::{try_with, wake, with};
use super::observers;
use super::rules::Withdrawal;
use super::state::{self, anyone_waits};
use super::waiters::{Left, Reply, WaiterId};
use crate::blocked::{self, HandleKey};
use crate::keyspace::{selected_db, LockKey};
use crate::leases;
use crate::lock::Lock;
use crate::propagate::{self, TokenArg};
use crate::stats;

/// `RENAME`, `MOVE`, `COPY` and `RESTORE` put a lock under a name or database it may not
/// know yet; it keeps its own, for the lease-end sweep to find it by.
pub fn relocated(ctx: &Context, name: &RedisString, arrived: Arrival) {
    // Opened for writing: the lock's own record of its name and database changes, though
    // the keyspace does not.
    let mut key = LockKey::open(ctx, name);
    let Ok(Some(lock)) = key.lock() else {
        return;
    };
    let db = selected_db(ctx);
    lock.relocate(name.as_slice(), db);
    if arrived == Arrival::Restored {
        // Landed: its fences are this server's to stay above (see `persistence::rdb_load`).
        super::state::with_fences(|f| f.observe(lock.last_fence()));
    }
    let flags = ctx.get_flags();
    let replica = flags.contains(ContextFlags::SLAVE);
    let now = crate::clock::now();
    if arrived != Arrival::Moved && replica && !flags.contains(ContextFlags::READONLY) {
        // Restored or copied on a writable replica: its master knows nothing of it.
        lock.set_replica_write(true);
    }
    if arrived == Arrival::Restored && !replica && !flags.contains(ContextFlags::LOADING) {
        // `RESTORE` replays with the dump's own notion of the lease (the time it had left
        // when dumped); the state follows it, with this server's absolute deadline, as core
        // rewrites a restored TTL to an absolute one.
        for hold in lock.holds() {
            let (wall, token) = (now.to_wall(hold.deadline), TokenArg::Bytes(hold.token));
            propagate::replicate_state(ctx, name, token, wall, hold.fence, lock.mode());
        }
    }
    // A copy or a restored lock was indexed where no timer could be armed.
    let earliest = leases::earliest();
    with(|e| {
        e.arm(ctx, earliest, now);
        // A lock arrived under the name: a change for whoever observes it.
        e.answer_observers_of(db, name.as_slice());
    });
}

/// How a lock came to a name (see `relocated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Moved from another name or database (`RENAME`, `MOVE`).
    Moved,
    /// A new lock: `COPY`.
    New,
    /// A new lock from a dump: `RESTORE`, `MIGRATE`.
    Restored,
}

/// `SWAPDB a b`: every lock in one database is in the other now, and every waiter of
/// either database lost the lock it waited for.
pub fn swapped(a: i32, b: i32) {
    if a == b {
        return;
    }
    leases::swap_dbs(a, b);
    with(|e| {
        wake(e.waiters.answer_db(Some(a), Reply::Null));
        wake(e.waiters.answer_db(Some(b), Reply::Null));
        e.answer_observers_in(Some(a));
        e.answer_observers_in(Some(b));
        for w in &mut e.withdrawals {
            w.db = if w.db == a {
                b
            } else if w.db == b {
                a
            } else {
                w.db
            };
        }
    });
}

/// `FLUSHDB`/`FLUSHALL` (and every other emptying: `DEBUG RELOAD`, a replica's full sync)
/// of database `db`, or of all for `None`. Called as the flush starts, so that waiters are
/// answered in this turn even when the values are freed in the background.
pub fn flushed(db: Option<i32>) {
    with(|e| {
        wake(e.waiters.answer_db(db, Reply::Null));
        e.answer_observers_in(db);
        e.withdrawals.retain(|w| db.is_some_and(|db| db != w.db));
    });
}

/// This server became a replica: nobody can be granted a lock here any more, and waiters
/// get the error the server gives its own blocked clients then.
pub fn demoted() {
    with(|e| {
        wake(e.waiters.answer_db(None, Reply::Demoted));
        e.withdrawals.clear();
    });
}

/// The reply of waiter `id` is going out: what to tell it.
pub fn deliver(id: WaiterId) -> Reply {
    with(|e| e.waiters.deliver(id)).unwrap_or(Reply::Null)
}

/// A blocked client disconnected (or was unblocked with an error): out of its queue, or, if
/// it had been granted the lock but not told, the grant is taken back and passed on.
pub fn blocked_client_left(ctx: &Context, client: HandleKey) {
    with(|e| {
        if let Some(id) = e.observers.id_of(client) {
            if let Some((observers::Left::Blocked(handle), ..)) = e.observers.leave(id) {
                blocked::let_go(handle);
            }
            return;
        }
        let Some(id) = e.waiters.id_of(client) else {
            return;
        };
        match e.waiters.leave(id) {
            Some(Left::Queued(handle)) => {
                blocked::let_go(handle);
                e.note_heads_left();
                if !e.regrants.is_empty() {
                    e.timer_soon(ctx);
                }
            }
            Some(Left::Granted {
                db,
                key,
                token,
                fence,
            }) => {
                // A write: made by the sweep, which obeys write pauses.
                e.withdrawals.push(Withdrawal {
                    db,
                    key,
                    token,
                    fence,
                });
                e.timer_soon(ctx);
            }
            Some(Left::Answered) | None => {}
        }
    });
}

/// Who `CLIENT UNBLOCK` reached (see `unblocked_by_client`).
pub enum Unblocked {
    /// A waiter, answered null as a timed-out `BLPOP` is.
    Waiter,
    /// An observer, answered as at its timeout: the `LOCK.INFO` of this key.
    Observer(Box<[u8]>),
}

/// `CLIENT UNBLOCK` reached a waiter or an observer (the server's timeout callback): it
/// leaves.
pub fn unblocked_by_client(ctx: &Context, client: HandleKey) -> Unblocked {
    with(|e| {
        if let Some(id) = e.observers.id_of(client) {
            if let Some((left, _, key)) = e.observers.leave(id) {
                if let observers::Left::Blocked(handle) = left {
                    blocked::let_go(handle);
                    stats::OBSERVERS_ANSWERED.bump();
                }
                return Unblocked::Observer(key);
            }
        }
        let Some(id) = e.waiters.id_of(client) else {
            return Unblocked::Waiter;
        };
        match e.waiters.leave(id) {
            Some(Left::Queued(handle)) => {
                // The server frees the handle only once the module lets go of it.
                blocked::let_go(handle);
                stats::WAIT_TIMEOUTS.bump();
                e.note_heads_left();
                if !e.regrants.is_empty() {
                    e.timer_soon(ctx);
                }
                Unblocked::Waiter
            }
            _ => Unblocked::Waiter,
        }
    })
}

thread_local! {
    /// The key of the last lock the server took out of the keyspace, so that the
    /// `evicted` event that follows an eviction can tell a lock from another key.
    static UNLINKED: RefCell<(i32, Vec<u8>)> = const { RefCell::new((-1, Vec::new())) };
}

/// The type's unlink callback: `lock` is leaving its key (deleted, replaced, moved away),
/// on the main thread. Its waiters are answered.
pub fn unlinked(lock: &Lock) {
    // The engine's own delete (a release) is no eviction: only the server's are noted.
    if !leases::is_being_deleted(lock) {
        UNLINKED.with_borrow_mut(|(db, key)| {
            *db = lock.db();
            key.clear();
            key.extend_from_slice(lock.key());
        });
    }
    if !anyone_waits() {
        return;
    }
    let (db, key) = (lock.db(), lock.key());
    if try_with(|e| e.key_gone(db, key)).is_none() {
        // Inside an engine operation (its own delete, or a key it opened expired): handled
        // when it ends.
        state::note_pending(db, key);
    }
}

/// The server evicted `key` in `db`: counted if it was a lock (the unlink just before it).
pub fn evicted(db: i32, key: &[u8]) {
    let was_lock = UNLINKED.with_borrow_mut(|(last_db, last)| {
        let hit = *last_db == db && last == key;
        *last_db = -1;
        hit
    });
    if was_lock {
        stats::EVICTIONS.bump();
    }
}
