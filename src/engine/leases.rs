//! The lease index: every lock in the keyspace, ordered by the monotonic deadline of its
//! lease, so that one timer for the earliest deadline ends them all on time.
//!
//! An entry is (deadline, address of the `Lock` value). Every lock in the keyspace has
//! exactly one entry: added when the lock is created (acquire, load, restore, copy), moved
//! when its deadline moves, and removed by the type's free callback before the value's
//! memory is released. The lock carries its key's name and database, so an entry costs 16
//! bytes and no copy of the key.
//!
//! This is the one part of the engine's state that another thread touches: a flush with
//! `ASYNC` (or a lazy server) frees locks on a background thread, whose free callback
//! removes their entries. So it has its own lock, and an address is dereferenced only
//! while that lock is held: a lock being freed elsewhere is never read after it is gone.
//!
//! That lock is a spin lock that yields while it waits: it is taken on every acquire and
//! release, is contended only by a background free (which holds it for one entry at a
//! time), and is let go with a plain store, where a `std` mutex spends a second locked
//! instruction. Yielding rather than spinning matters when the server is pinned to one CPU
//! and the freeing thread shares it.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::block_set::BlockSet;
use crate::lock::Lock;

/// An entry, (deadline, address) packed into one integer in that order, so that the set
/// orders entries with one comparison rather than a tuple's two.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Entry(u128);

impl Entry {
    fn new(deadline: u64, lock: usize) -> Entry {
        Entry(u128::from(deadline) << 64 | lock as u128)
    }
    fn deadline(self) -> u64 {
        (self.0 >> 64) as u64
    }
    fn lock(self) -> usize {
        self.0 as u64 as usize
    }
}

type Index = spin::mutex::SpinMutex<BlockSet<Entry>, spin::relax::Yield>;

static LEASES: Index = Index::new(BlockSet::new());

fn leases() -> spin::mutex::SpinMutexGuard<'static, BlockSet<Entry>> {
    LEASES.lock()
}

pub fn address(lock: &Lock) -> usize {
    lock as *const Lock as usize
}

/// Moves the entry of the lock at `lock` from deadline `old` to `new` (either may be
/// absent); the earliest deadline afterwards.
pub fn update(lock: usize, old: Option<u64>, new: Option<u64>) -> Option<u64> {
    let mut l = leases();
    if let Some(old) = old {
        l.remove(&Entry::new(old, lock));
    }
    if let Some(new) = new {
        l.insert(Entry::new(new, lock));
    }
    l.first().map(Entry::deadline)
}

/// Adds a new lock's entry (loaded, restored or copied, outside any command).
pub fn track(lock: &Lock) {
    update(address(lock), None, Some(lock.deadline()));
}

pub fn earliest() -> Option<u64> {
    leases().first().map(Entry::deadline)
}

/// A lock whose deadline came up: where to find it.
pub struct Due {
    pub deadline: u64,
    pub lock: usize,
    /// Made by a client of this server while it is a replica (see `Lock::is_replica_write`).
    pub replica_write: bool,
    pub db: i32,
    pub key: Vec<u8>,
}

/// The next entry due at `now`, taken out of the index, with its lock's name.
pub fn pop_due(now: u64) -> Option<Due> {
    let mut l = leases();
    if l.first()?.deadline() > now {
        return None;
    }
    let entry = l.pop_first()?;
    let (deadline, lock) = (entry.deadline(), entry.lock());
    // SAFETY: the index holds only live locks (the free callback removes an entry under this
    // lock before the value is freed), and that lock is held while the name is copied out.
    let value = unsafe { &*(lock as *const Lock) };
    Some(Due {
        deadline,
        lock,
        replica_write: value.is_replica_write(),
        db: value.db(),
        key: value.key().to_vec(),
    })
}

/// Puts back entries the sweep took out but may not act on (a replica's locks that its
/// master ends).
pub fn put_back(entries: &[(u64, usize)]) {
    let mut l = leases();
    for &(deadline, lock) in entries {
        l.insert(Entry::new(deadline, lock));
    }
}

/// `SWAPDB a b` swapped the contents of two databases: every lock in one is in the other.
pub fn swap_dbs(a: i32, b: i32) {
    let l = leases();
    for lock in l.iter().map(Entry::lock) {
        // SAFETY: as in pop_due; SWAPDB runs on the main thread, which is the only one that
        // changes live locks, and the index lock keeps a background free from racing the write.
        let lock = unsafe { &mut *(lock as *mut Lock) };
        let db = match lock.db() {
            db if db == a => b,
            db if db == b => a,
            db => db,
        };
        if db != lock.db() {
            let key = lock.key().to_vec();
            lock.relocate(&key, db);
        }
    }
}

/// The address of the lock whose key `remove_and_delete` is deleting, or 0. Set and cleared
/// on the main thread; a free on another thread may read it, and never matches, because
/// the lock it frees is not the live one being deleted here. (A static rather than a
/// thread-local: in a shared library each thread-local access is a call.)
static DELETING: AtomicUsize = AtomicUsize::new(0);

/// True while the engine itself deletes `lock`'s key (`remove_and_delete`), on the main
/// thread.
pub fn is_being_deleted(lock: &Lock) -> bool {
    DELETING.load(Ordering::Relaxed) == address(lock)
}

/// Removes a lock's entry; the type's free callback calls this before the memory goes,
/// unless `is_being_deleted` (then `remove_and_delete` took it out already).
pub fn forget(lock: &Lock) {
    update(address(lock), Some(lock.deadline()), None);
}

/// Takes out the entry of the lock at `lock` (indexed under `deadline`), then runs
/// `delete`, which deletes its key. The free callback that runs inside `delete` then has
/// nothing to look for, which spares every release a second lock of the index. A free that
/// the server defers to a background thread does not see the mark and looks (in vain).
pub fn remove_and_delete(lock: usize, deadline: u64, delete: impl FnOnce()) {
    update(lock, Some(deadline), None);
    DELETING.store(lock, Ordering::Relaxed);
    delete();
    DELETING.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::Entry;

    #[test]
    fn entries_order_as_deadline_then_address_and_unpack() {
        let pairs = [
            (0, 0),
            (0, usize::MAX),
            (1, 0),
            (7, 42),
            (u64::MAX, 1),
            (u64::MAX, usize::MAX),
        ];
        for &(d1, a1) in &pairs {
            let e = Entry::new(d1, a1);
            assert_eq!((e.deadline(), e.lock()), (d1, a1));
            for &(d2, a2) in &pairs {
                assert_eq!(e.cmp(&Entry::new(d2, a2)), (d1, a1).cmp(&(d2, a2)));
            }
        }
    }
}
