//! What the module counts (shown by `INFO lock`, in `events.rs`), and the changes clients
//! can see: each counted, and announced as a keyspace event of the module class. The event
//! counters change only on the main thread (commands, timers, server events), so a bump is a
//! relaxed load and store: a locked add cost the cycle about 1% (perf), two per cycle. The
//! count of lock values is the exception: a lock can be freed on a background thread
//! (`FLUSHALL ASYNC`), so those frees, and only those, are counted by a true atomic add.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{Context, RedisString};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Main thread only (see the module comment).
    pub fn bump(&self) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed) as i64
    }
}

/// Acquisitions that handed out a new fence (`LOCK.ACQUIRE` on a free lock; grants to
/// waiters are counted apart, under `GRANTS`).
pub static ACQUIRES: Counter = Counter::new();
/// `LOCK.ACQUIRE` calls that found the lock held by another token (null reply or queued).
pub static CONTENDED: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
/// Successful `LOCK.EXTEND`s and renewals by a repeated `LOCK.ACQUIRE`.
pub static EXTENDS: Counter = Counter::new();
pub static FENCES: Counter = Counter::new();
pub static LEASE_ENDS: Counter = Counter::new();
pub static GRANTS: Counter = Counter::new();
/// Waits that ended without the lock: timed out, or `CLIENT UNBLOCK`.
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Blocked `LOCK.OBSERVE` calls answered: by a change, a timeout or `CLIENT UNBLOCK`.
pub static OBSERVERS_ANSWERED: Counter = Counter::new();
/// Locks the server evicted (`maxmemory` with an `allkeys-*` policy).
pub static EVICTIONS: Counter = Counter::new();

/// `LOCK.GUARD` calls whose command ran (whatever it replied).
pub static GUARDED_RUNS: Counter = Counter::new();
/// `LOCK.GUARD` calls refused with `FENCED`.
pub static GUARDED_REFUSALS: Counter = Counter::new();

/// Write pauses this master made when a replica disconnected (`lock.replica-loss-pause-ms`).
pub static REPLICA_LOSS_PAUSES: Counter = Counter::new();
/// Stalls of the event loop this master found (`lock.stall-threshold-ms`), each followed by
/// a write pause.
pub static STALLS: Counter = Counter::new();
/// Lock writes refused because the turn that ran them came after a stall.
pub static STALL_REFUSALS: Counter = Counter::new();

/// Lock values created (by acquire, load, restore, copy: on the main thread), and freed
/// with their key, on the main thread or on one of the server's own.
static LOCKS_CREATED: Counter = Counter::new();
static LOCKS_FREED: Counter = Counter::new();
static LOCKS_FREED_ELSEWHERE: AtomicU64 = AtomicU64::new(0);

pub fn lock_created() {
    LOCKS_CREATED.bump();
}

/// A lock was freed; `by_engine` when the engine deleted its key, which it does on the main
/// thread (a release, a lease end). Any other free may be on another thread.
pub fn lock_freed(by_engine: bool) {
    if by_engine {
        LOCKS_FREED.bump();
    } else {
        LOCKS_FREED_ELSEWHERE.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lock values in memory.
pub fn locks() -> i64 {
    let freed = LOCKS_FREED.get() + LOCKS_FREED_ELSEWHERE.load(Ordering::Relaxed) as i64;
    (LOCKS_CREATED.get() - freed).max(0)
}

/// A change that clients can see: counted in `INFO lock`, and announced as a keyspace event
/// of the module class (`notify-keyspace-events` with `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Acquired,
    Extended,
    Fenced,
    Granted,
    Released,
    Expired,
}

impl Event {
    fn name(self) -> &'static CStr {
        match self {
            Event::Acquired => c"lock.acquired",
            Event::Extended => c"lock.extended",
            Event::Fenced => c"lock.fenced",
            Event::Granted => c"lock.granted",
            Event::Released => c"lock.released",
            Event::Expired => c"lock.expired",
        }
    }

    fn counter(self) -> &'static Counter {
        match self {
            Event::Acquired => &ACQUIRES,
            Event::Extended => &EXTENDS,
            Event::Fenced => &FENCES,
            Event::Granted => &GRANTS,
            Event::Released => &RELEASES,
            Event::Expired => &LEASE_ENDS,
        }
    }
}

pub fn record(ctx: &Context, event: Event, key: &RedisString) {
    event.counter().bump();
    announce(ctx, event, key);
}

/// Announces a change this server applied from its master or its AOF, without counting it:
/// the counters are of what this server did.
pub fn announce(ctx: &Context, event: Event, key: &RedisString) {
    crate::propagate::notify(ctx, event.name(), key);
}
