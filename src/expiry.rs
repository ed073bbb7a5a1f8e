//! Lease ends without a timer per lease: one ordered index of lease deadlines for all locks,
//! one module timer armed for the earliest, and the server's cron event as a backstop.
//! Redis 7.0 keys module timers on the wall clock, so a timer may fire early or late after a
//! clock step; the sweep judges every entry on the monotonic clock, and the cron event
//! (driven by the event loop's monotonic timers) catches a late timer. Wait deadlines of
//! blocked clients live in the same index.
//!
//! An entry is (deadline, address of the `Lock` value). Every lock in the keyspace has
//! exactly one entry: it is added when the lock is created (acquire, load, restore, copy)
//! and moved when its deadline moves, and the type's free callback removes it before the
//! value's memory is released. The lock carries its key's name and database, so an entry
//! costs 16 bytes and no copy of the key. A lock's address is dereferenced only while the
//! index's mutex is held, which the free callback also takes: a lock freed on a background
//! thread (`FLUSHALL ASYNC`) is never read after it is gone.

use std::cell::Cell;
use std::collections::BTreeSet;

use crate::block_set::BlockSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis_module::{raw, Context, ContextFlags};

use crate::clock::{self, Now};
use crate::lock::Lock;

/// The ordered deadlines (monotonic microseconds) of leases and of waits.
#[derive(Debug, Default)]
pub struct ExpiryIndex {
    /// (deadline, lock address).
    leases: BlockSet<(u64, usize)>,
    /// (deadline, waiter id) of clients blocked with a `WAIT` timeout.
    waits: BTreeSet<(u64, u64)>,
}

impl ExpiryIndex {
    pub const fn new() -> Self {
        ExpiryIndex {
            leases: BlockSet::new(),
            waits: BTreeSet::new(),
        }
    }

    pub fn move_lease(&mut self, lock: usize, old: Option<u64>, new: Option<u64>) {
        if let Some(old) = old {
            self.leases.remove(&(old, lock));
        }
        if let Some(new) = new {
            self.leases.insert((new, lock));
        }
    }

    pub fn earliest(&self) -> Option<u64> {
        let lease = self.leases.first().map(|e| e.0);
        let wait = self.waits.first().map(|w| w.0);
        lease.into_iter().chain(wait).min()
    }

    /// The next lease entry due at `now`, taken out of the index.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, usize)> {
        if self.leases.first()?.0 > now {
            return None;
        }
        self.leases.pop_first()
    }

    pub fn insert_wait(&mut self, deadline: u64, id: u64) {
        self.waits.insert((deadline, id));
    }

    pub fn remove_wait(&mut self, deadline: u64, id: u64) {
        self.waits.remove(&(deadline, id));
    }

    /// The next waiter whose wait deadline is at or before `now`, taken out of the index.
    pub fn pop_due_wait(&mut self, now: u64) -> Option<u64> {
        if self.waits.first()?.0 > now {
            return None;
        }
        self.waits.pop_first().map(|(_, id)| id)
    }

    pub fn leases(&self) -> impl Iterator<Item = usize> + '_ {
        self.leases.iter().map(|e| e.1)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.leases.len() + self.waits.len()
    }
}

// ---------------------------------------------------------------------------------------
// The driver: this server's index, its timer and the sweep.

struct Driver {
    index: ExpiryIndex,
    /// The deadline and id of the armed timer, if one is armed.
    timer: Option<(u64, raw::RedisModuleTimerID)>,
}

static DRIVER: Mutex<Driver> = Mutex::new(Driver {
    index: ExpiryIndex::new(),
    timer: None,
});

/// How many entries one sweep handles before it yields to the event loop.
const SWEEP_BATCH: usize = 1000;

fn driver() -> MutexGuard<'static, Driver> {
    DRIVER.lock().unwrap_or_else(|e| e.into_inner())
}

fn address(lock: &Lock) -> usize {
    lock as *const Lock as usize
}

/// Records that `lock` (in the keyspace, at its final address) moved its deadline from `old`
/// to `new` (either may be absent), and makes sure a timer fires by the earliest deadline.
pub fn track(ctx: &Context, lock: &Lock, old: Option<u64>, new: Option<u64>, now: Now) {
    if old == new {
        return;
    }
    let mut d = driver();
    d.index.move_lease(address(lock), old, new);
    match (new, d.timer) {
        // The common case: a timer fires before this deadline anyway.
        (Some(new), Some((at, _))) if at <= new => {}
        (Some(_), _) => arm(ctx, &mut d, now),
        (None, _) => {}
    }
}

/// Adds a lock's entry without arming a timer, for callers with no context (RDB loading,
/// `COPY`); the next command or cron tick arms it.
pub fn track_without_timer(lock: &Lock) {
    driver()
        .index
        .move_lease(address(lock), None, Some(lock.deadline()));
}

/// Arms the timer for entries added without one.
pub fn ensure_armed(ctx: &Context) {
    let mut d = driver();
    arm(ctx, &mut d, clock::now());
}

/// Removes a lock's entry; the type's free callback calls this before the memory goes.
pub fn forget(lock: &Lock) {
    if DELETING.get() == address(lock) {
        return; // taken out by `remove_and_delete`, which is deleting its key right now
    }
    driver()
        .index
        .move_lease(address(lock), Some(lock.deadline()), None);
}

thread_local! {
    /// The lock whose key `remove_and_delete` is deleting on this thread, if any.
    static DELETING: Cell<usize> = const { Cell::new(0) };
}

/// Takes out the entry of `lock` (indexed under `deadline`), then runs `delete`, which
/// deletes its key. The free callback that runs inside `delete` then has nothing to look
/// for, which spares every release a second lock of the index. A free that Redis defers to
/// a background thread does not see the mark and looks (in vain) as before.
pub fn remove_and_delete(lock: &Lock, deadline: u64, delete: impl FnOnce()) {
    let at = address(lock);
    driver().index.move_lease(at, Some(deadline), None);
    DELETING.set(at);
    delete();
    DELETING.set(0);
}

/// Indexes the wait deadline of waiter `id`.
pub fn track_wait(ctx: &Context, id: u64, deadline: u64, now: Now) {
    let mut d = driver();
    d.index.insert_wait(deadline, id);
    arm(ctx, &mut d, now);
}

pub fn untrack_wait(id: u64, deadline: u64) {
    driver().index.remove_wait(deadline, id);
}

/// `SWAPDB a b` swapped the keyspaces of two databases: every lock in one is in the other.
pub fn swap_dbs(a: i32, b: i32) {
    let d = driver();
    for lock in d.index.leases() {
        // SAFETY: the index holds only live locks (the free callback removes an entry under
        // this mutex before the lock is freed), and the mutex is held. SWAPDB runs on the
        // main thread, which is the only one that mutates live locks.
        let lock = unsafe { &mut *(lock as *mut Lock) };
        let db = match lock.db() {
            db if db == a => b,
            db if db == b => a,
            db => db,
        };
        let key = lock.key().to_vec();
        lock.relocate(&key, db);
    }
}

/// Makes the sweep run on the next event-loop turn (for work queued where no key may be
/// written, such as a deleted key's waiters).
pub fn wake_soon(ctx: &Context) {
    let mut d = driver();
    if let Some((_, id)) = d.timer.take() {
        let _ = ctx.stop_timer::<()>(id);
    }
    let id = ctx.create_timer(Duration::from_millis(1), on_timer, ());
    d.timer = Some((0, id));
}

/// What the command layer did with a lock whose deadline came up in the sweep.
pub enum LeaseEnd {
    /// Nothing there to end (gone, or extended since): the entry is dropped.
    Stale,
    /// The lease ended: the key was removed, or granted to a waiter (which has its own
    /// entry now).
    Ended,
    /// The lease ended but this server may not act on it (a replica, or while loading):
    /// keep the entry until the master's removal arrives.
    Deferred,
}

/// Arms the timer for the earliest deadline, unless one is armed that fires no later. On a
/// replica nothing is armed: it never ends leases on its own, and its cron prunes the index.
fn arm(ctx: &Context, d: &mut Driver, now: Now) {
    let Some(earliest) = d.index.earliest() else {
        return;
    };
    if matches!(d.timer, Some((at, _)) if at <= earliest) {
        return;
    }
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return;
    }
    if let Some((_, id)) = d.timer.take() {
        // The old timer may have fired already; its data is `()`, so nothing is lost.
        let _ = ctx.stop_timer::<()>(id);
    }
    // Timers count whole milliseconds: round up, and let the sweep re-arm if it is early.
    let delay = earliest.saturating_sub(now.mono).div_ceil(1000).max(1);
    let id = ctx.create_timer(Duration::from_millis(delay), on_timer, ());
    d.timer = Some((earliest, id));
}

fn on_timer(ctx: &Context, _: ()) {
    driver().timer = None;
    sweep(ctx);
}

/// Called on every cron tick: the backstop for a timer that a wall-clock step delayed, and
/// the replica's pruning of entries whose keys the master removed.
pub fn on_cron(ctx: &Context) {
    sweep(ctx);
}

/// Ends every lease that is due, in deadline order, times out due waits, and re-arms.
pub fn sweep(ctx: &Context) {
    crate::commands::wake_orphans();
    let now = clock::now();
    for _ in 0..SWEEP_BATCH {
        let Some(id) = driver().index.pop_due_wait(now.mono) else {
            break;
        };
        crate::commands::wait_timed_out(ctx, id);
    }
    let mut deferred = Vec::new();
    for _ in 0..SWEEP_BATCH {
        let due = {
            let mut d = driver();
            d.index.pop_due(now.mono).map(|(deadline, lock)| {
                // SAFETY: as in swap_dbs; the name is copied out before the mutex is let go.
                let lock = unsafe { &*(lock as *const Lock) };
                (deadline, address(lock), lock.db(), lock.key().to_vec())
            })
        };
        let Some((deadline, lock, db, key)) = due else {
            break;
        };
        let Some(name) = crate::keyspace::key_in_db(ctx, db, &key) else {
            continue;
        };
        if let LeaseEnd::Deferred = crate::commands::end_lease(ctx, &name, lock, now) {
            deferred.push((deadline, lock));
        }
    }
    let mut d = driver();
    if !deferred.is_empty() {
        for (deadline, lock) in deferred {
            d.index.move_lease(lock, None, Some(deadline));
        }
        return; // entries already due would re-arm the timer at once; cron comes back
    }
    arm(ctx, &mut d, clock::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_due_entries_in_deadline_order() {
        let mut ix = ExpiryIndex::default();
        ix.move_lease(3, None, Some(30));
        ix.move_lease(1, None, Some(10));
        ix.move_lease(2, None, Some(20));
        ix.insert_wait(15, 9);
        assert_eq!(ix.earliest(), Some(10));
        assert_eq!(ix.pop_due(5), None);
        assert_eq!(ix.pop_due(20), Some((10, 1)));
        assert_eq!(ix.pop_due(20), Some((20, 2)));
        assert_eq!(ix.pop_due(20), None);
        assert_eq!(ix.earliest(), Some(15));
        assert_eq!(ix.pop_due_wait(20), Some(9));
        assert_eq!(ix.len(), 1);
    }

    #[test]
    fn moving_a_lease_replaces_its_entry() {
        let mut ix = ExpiryIndex::default();
        ix.move_lease(1, None, Some(10));
        ix.move_lease(1, Some(10), Some(50));
        ix.move_lease(2, None, Some(10));
        ix.move_lease(2, Some(10), None);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.pop_due(100), Some((50, 1)));
    }

    #[test]
    fn waits_are_removed_by_deadline_and_id() {
        let mut ix = ExpiryIndex::default();
        ix.insert_wait(10, 1);
        ix.insert_wait(10, 2);
        ix.remove_wait(10, 1);
        assert_eq!(ix.pop_due_wait(10), Some(2));
        assert_eq!(ix.pop_due_wait(10), None);
    }
}
