//! Lease ends without a timer per lease: one ordered index of (deadline, db, key) for all
//! locks, one module timer armed for the earliest deadline, and the server's cron event as a
//! backstop. Redis 7.0 keys module timers on the wall clock, so a timer may fire early or
//! late after a clock step; the sweep therefore judges every entry on the monotonic clock,
//! and the cron event (driven by the event loop's monotonic timers) catches a late timer.
//!
//! Entries are not removed when a lock is deleted by `DEL`, `FLUSHALL` or a rename: such an
//! entry is stale, and the sweep drops it when it finds no lock with that deadline under that
//! name. Release and extend, the common cases, remove their entry at once, so the index holds
//! about one entry per live lock.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use redis_module::{raw, Context, ContextFlags};

use crate::clock::{self, Now};

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    deadline: u64,
    db: i32,
    key: Box<[u8]>,
}

/// Lets the index be searched by borrowed parts, so that removing an entry does not copy
/// the key.
trait EntryKey {
    fn parts(&self) -> (u64, i32, &[u8]);
}

impl EntryKey for Entry {
    fn parts(&self) -> (u64, i32, &[u8]) {
        (self.deadline, self.db, &self.key)
    }
}

impl EntryKey for (u64, i32, &[u8]) {
    fn parts(&self) -> (u64, i32, &[u8]) {
        *self
    }
}

impl<'a> Borrow<dyn EntryKey + 'a> for Entry {
    fn borrow(&self) -> &(dyn EntryKey + 'a) {
        self
    }
}

impl PartialEq for dyn EntryKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn EntryKey + '_ {}

impl PartialOrd for dyn EntryKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn EntryKey + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// The ordered index of lease deadlines and wait deadlines (monotonic milliseconds).
#[derive(Debug, Default)]
pub struct ExpiryIndex {
    entries: BTreeSet<Entry>,
    /// (deadline, waiter id) of clients blocked with a `WAIT` timeout.
    waits: BTreeSet<(u64, u64)>,
}

impl ExpiryIndex {
    pub fn insert(&mut self, deadline: u64, db: i32, key: &[u8]) {
        if !self.entries.contains(&(deadline, db, key) as &dyn EntryKey) {
            self.entries.insert(Entry {
                deadline,
                db,
                key: key.into(),
            });
        }
    }

    pub fn remove(&mut self, deadline: u64, db: i32, key: &[u8]) {
        self.entries.remove(&(deadline, db, key) as &dyn EntryKey);
    }

    pub fn earliest(&self) -> Option<u64> {
        let lease = self.entries.first().map(|e| e.deadline);
        let wait = self.waits.first().map(|w| w.0);
        lease.into_iter().chain(wait).min()
    }

    /// The next lease entry whose deadline is at or before `now`, taken out of the index.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, i32, Box<[u8]>)> {
        if self.entries.first()?.deadline > now {
            return None;
        }
        let e = self.entries.pop_first()?;
        Some((e.deadline, e.db, e.key))
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

    /// `SWAPDB a b` moved every key of `a` to `b` and back.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        let entries = std::mem::take(&mut self.entries);
        self.entries = entries
            .into_iter()
            .map(|mut e| {
                e.db = match e.db {
                    db if db == a => b,
                    db if db == b => a,
                    db => db,
                };
                e
            })
            .collect();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

// ---------------------------------------------------------------------------------------
// The driver: the index of this server, its timer and the sweep.

static INDEX: Mutex<ExpiryIndex> = Mutex::new(ExpiryIndex {
    entries: BTreeSet::new(),
    waits: BTreeSet::new(),
});

/// The deadline and id of the armed timer, if one is armed.
static TIMER: Mutex<Option<(u64, raw::RedisModuleTimerID)>> = Mutex::new(None);

/// How many entries one sweep handles before it yields to the event loop.
const SWEEP_BATCH: usize = 1000;

fn index() -> std::sync::MutexGuard<'static, ExpiryIndex> {
    INDEX.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records that the lock at `key` in `db` changed its deadline from `old` to `new` (either
/// may be absent), and makes sure a timer fires by the earliest deadline.
pub fn track(ctx: &Context, db: i32, key: &[u8], old: Option<u64>, new: Option<u64>) {
    if old == new {
        return;
    }
    {
        let mut index = index();
        if let Some(old) = old {
            index.remove(old, db, key);
        }
        if let Some(new) = new {
            index.insert(new, db, key);
        }
    }
    if new.is_some() {
        arm(ctx, clock::now());
    }
}

/// Adds an entry without arming a timer, for callers with no context (RDB loading); the
/// next cron tick arms it.
pub fn track_without_timer(db: i32, key: &[u8], deadline: u64) {
    index().insert(deadline, db, key);
}

/// Indexes the wait deadline of waiter `id`.
pub fn track_wait(ctx: &Context, id: u64, deadline: u64) {
    index().insert_wait(deadline, id);
    arm(ctx, clock::now());
}

pub fn untrack_wait(id: u64, deadline: u64) {
    index().remove_wait(deadline, id);
}

/// Makes the sweep run on the next event-loop turn (for work queued where no key may be
/// written, such as a deleted key's waiters).
pub fn wake_soon(ctx: &Context) {
    let mut timer = TIMER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, id)) = timer.take() {
        let _ = ctx.stop_timer::<()>(id);
    }
    let id = ctx.create_timer(Duration::from_millis(1), on_timer, ());
    *timer = Some((0, id));
}

pub fn swap_dbs(a: i32, b: i32) {
    index().swap_dbs(a, b);
}

/// What the command layer did with a lock whose deadline came up in the sweep.
pub enum LeaseEnd {
    /// Nothing there to end (gone, renamed, or extended since): the entry is dropped.
    Stale,
    /// The lease ended and the key was removed.
    Ended,
    /// The lease ended but this server may not act on it (a replica, or while loading):
    /// keep the entry until the master's removal arrives.
    Deferred,
}

/// Arms the timer for the earliest deadline, unless one is armed that fires no later. On a
/// replica nothing is armed: it never ends leases on its own, and its cron prunes the index.
fn arm(ctx: &Context, now: Now) {
    let Some(earliest) = index().earliest() else {
        return;
    };
    let mut timer = TIMER.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*timer, Some((at, _)) if at <= earliest) {
        return;
    }
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return;
    }
    if let Some((_, id)) = timer.take() {
        // The old timer may have fired already; its data is `()`, so nothing is lost.
        let _ = ctx.stop_timer::<()>(id);
    }
    let delay = earliest.saturating_sub(now.mono).max(1);
    let id = ctx.create_timer(Duration::from_millis(delay), on_timer, ());
    *timer = Some((earliest, id));
}

fn on_timer(ctx: &Context, _: ()) {
    *TIMER.lock().unwrap_or_else(|e| e.into_inner()) = None;
    sweep(ctx);
}

/// Called on every cron tick: the backstop for a timer that a wall-clock step delayed, and
/// the replica's pruning of entries whose keys the master removed.
pub fn on_cron(ctx: &Context) {
    sweep(ctx);
}

/// Ends every lease that is due, in deadline order, and re-arms the timer.
pub fn sweep(ctx: &Context) {
    crate::commands::adopt_orphans(ctx);
    let now = clock::now();
    for _ in 0..SWEEP_BATCH {
        let Some(id) = index().pop_due_wait(now.mono) else {
            break;
        };
        crate::commands::wait_timed_out(ctx, id);
    }
    let mut deferred = Vec::new();
    for _ in 0..SWEEP_BATCH {
        let Some((deadline, db, key)) = index().pop_due(now.mono) else {
            break;
        };
        let Some(name) = crate::keyspace::key_in_db(ctx, db, &key) else {
            continue;
        };
        if let LeaseEnd::Deferred = crate::commands::end_lease(ctx, &name, now) {
            deferred.push((deadline, db, key));
        }
    }
    if !deferred.is_empty() {
        let mut index = index();
        for (deadline, db, key) in deferred {
            index.insert(deadline, db, &key);
        }
        return; // entries already due would re-arm the timer at once; cron comes back
    }
    arm(ctx, clock::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_due_entries_in_deadline_order() {
        let mut ix = ExpiryIndex::default();
        ix.insert(30, 0, b"c");
        ix.insert(10, 0, b"a");
        ix.insert(20, 1, b"b");
        assert_eq!(ix.earliest(), Some(10));
        assert_eq!(ix.pop_due(5), None);
        assert_eq!(ix.pop_due(20).map(|e| e.2), Some(b"a"[..].into()));
        assert_eq!(ix.pop_due(20).map(|e| e.1), Some(1));
        assert_eq!(ix.pop_due(20), None);
        assert_eq!(ix.len(), 1);
    }

    #[test]
    fn remove_finds_the_entry_by_borrowed_parts() {
        let mut ix = ExpiryIndex::default();
        ix.insert(10, 0, b"a");
        ix.insert(10, 0, b"a");
        ix.insert(10, 2, b"a");
        assert_eq!(ix.len(), 2);
        ix.remove(10, 0, b"a");
        ix.remove(11, 2, b"a");
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.pop_due(10).map(|e| e.1), Some(2));
    }

    #[test]
    fn swapdb_moves_entries() {
        let mut ix = ExpiryIndex::default();
        ix.insert(10, 0, b"a");
        ix.insert(11, 1, b"b");
        ix.insert(12, 5, b"c");
        ix.swap_dbs(0, 1);
        let dbs: Vec<i32> = std::iter::from_fn(|| ix.pop_due(100).map(|e| e.1)).collect();
        assert_eq!(dbs, vec![1, 0, 5]);
    }
}
