//! The lease index: every lock in the keyspace, ordered by the monotonic deadline of its
//! lease, so that one timer for the earliest deadline ends them all on time.
//!
//! An entry is (deadline, address of the `Lock` value). Every lock in the keyspace has
//! exactly one entry: added when the lock is created (load, restore, copy here; a new lock
//! by the key handle that stored it), moved when its deadline moves, and removed by the type's
//! free callback before the value's memory is released. A lock in a key is changed only
//! through `keyspace::LockKey`, which moves its entry when it closes: no caller keeps the
//! entry in step by hand. The lock carries its key's name and database, so an entry costs 16
//! bytes and no copy of the key.
//!
//! This is the one part of the engine's state that another thread touches: a flush with
//! `ASYNC` (or a lazy server) frees locks on a background thread, whose free callback
//! removes their entries. So it has its own lock, and an address is dereferenced only
//! while that lock is held: a lock being freed elsewhere is never read after it is gone.
//!
//! That lock is a spin lock: it is taken on every acquire and release, and let go with a
//! plain store, where a `std` mutex spends a second locked instruction to see whether a
//! sleeper needs waking. Only a background free ever contends for it, holding it for one
//! entry at a time; a thread that finds it taken yields a few times, then sleeps in short
//! naps. It must not spin without end: with the server pinned to one CPU, a main thread of
//! higher priority (real-time, say) would keep being chosen over the holder.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use spin::mutex::{SpinMutex, SpinMutexGuard};

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

static LEASES: SpinMutex<BlockSet<Entry>> = SpinMutex::new(BlockSet::new());

fn leases() -> SpinMutexGuard<'static, BlockSet<Entry>> {
    LEASES.try_lock().unwrap_or_else(wait_for_leases)
}

/// Yields before this many tries fail, then naps (see the module comment).
const YIELDS: u32 = 16;
const NAP: Duration = Duration::from_micros(20);

#[cold]
#[inline(never)]
fn wait_for_leases() -> SpinMutexGuard<'static, BlockSet<Entry>> {
    let mut tries = 0;
    loop {
        if tries < YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
        if let Some(guard) = LEASES.try_lock() {
            return guard;
        }
        tries += 1;
    }
}

pub fn address(lock: &Lock) -> usize {
    lock as *const Lock as usize
}

/// Moves the entry of the lock at `lock` from deadline `old` to `new` (either may be
/// absent); the earliest deadline afterwards. A new earliest deadline is noted for the
/// engine's timer (`take_new_earliest`).
pub fn update(lock: usize, old: Option<u64>, new: Option<u64>) -> Option<u64> {
    let mut l = leases();
    if let Some(old) = old {
        let found = l.remove(&Entry::new(old, lock));
        debug_assert!(found, "the lease index has no entry for {lock:#x} at {old}");
    }
    let earliest = l.first().map(Entry::deadline);
    if let Some(new) = new {
        l.insert(Entry::new(new, lock));
        if earliest.is_none_or(|e| new < e) {
            NEW_EARLIEST.store(new, Ordering::Relaxed);
            return Some(new);
        }
    }
    earliest
}

/// A deadline that became the earliest since the last call, for the engine to arm its timer
/// by: 0 for none. Written on the main thread only (the free callback only removes).
static NEW_EARLIEST: AtomicU64 = AtomicU64::new(0);

/// The deadline that became the earliest since the last call, if one did.
pub fn take_new_earliest() -> Option<u64> {
    if NEW_EARLIEST.load(Ordering::Relaxed) == 0 {
        return None;
    }
    Some(NEW_EARLIEST.swap(0, Ordering::Relaxed)).filter(|&at| at != 0)
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
/// thread. Compares addresses only: the free callback asks before the lock is its own.
pub fn is_being_deleted(lock: *const Lock) -> bool {
    DELETING.load(Ordering::Relaxed) == lock as usize
}

/// Removes the entry of the lock at `lock`; the type's free callback calls this before the
/// memory goes, unless `is_being_deleted` (then `remove_and_delete` took it out already).
/// The lock is read only under the index's lock: until its entry is gone, the main thread
/// may still reach it through the index (the sweep, `SWAPDB`), also while a background
/// thread frees it.
pub fn forget(lock: *const Lock) {
    let mut l = leases();
    // SAFETY: the lock is alive until its free callback, the caller, returns; under the
    // index's lock no other thread reaches it (see above).
    let deadline = unsafe { (*lock).deadline() };
    l.remove(&Entry::new(deadline, lock as usize));
}

/// Takes out the entry of the lock at `lock` (indexed under `filed`; none if the sweep took
/// it out), then runs `delete`, which deletes its key. The free callback that runs inside
/// `delete` then has nothing to look for, which spares every release a second lock of the
/// index. A free that the server defers to a background thread does not see the mark and
/// looks (in vain).
pub fn remove_and_delete(lock: usize, filed: Option<u64>, delete: impl FnOnce()) {
    if filed.is_some() {
        update(lock, filed, None);
    }
    DELETING.store(lock, Ordering::Relaxed);
    delete();
    DELETING.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::{leases, Entry};
    use std::time::{Duration, Instant};

    /// A thread that finds the index taken gets it once it is let go, not before, and
    /// without waiting much longer (it naps in short steps). The only test here that takes
    /// the index.
    #[test]
    fn a_waiter_gets_the_index_soon_after_its_holder_lets_go() {
        let held = leases();
        let waiter = std::thread::spawn(|| {
            let _index = leases();
            Instant::now()
        });
        // Long enough for the waiter to be past its yields and napping.
        std::thread::sleep(Duration::from_millis(30));
        let released = Instant::now();
        drop(held);
        let got = waiter.join().expect("the waiter");
        assert!(
            got >= released,
            "the waiter took the index while it was held"
        );
        // Generous for a shared machine: a nap is 20 µs.
        assert!(
            got - released < Duration::from_millis(20),
            "{:?}",
            got - released
        );
    }

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
