//! The engine's state, and the only way to reach it (through `effects::with`, the frame of
//! every operation). Everything but the lease index
//! (`leases.rs`) lives here, touched by the main thread only: the server runs commands,
//! timers, blocked-client callbacks, server events and loading there, and a thread of its
//! own only to free values (which reaches the lease index alone). So the state is
//! thread-local rather than behind a mutex: a mutex that is never contended still costs two
//! locked instructions each time it is taken, about 1% of an acquire + release cycle here.

use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::observers::Observers;
use super::rules::Withdrawal;
use super::waiters::Registry;
use crate::blocked::Handle;
use crate::fence::FenceIssuer;

pub(super) struct Engine {
    pub(super) waiters: Registry<Handle>,
    pub(super) observers: Observers<Handle>,
    /// Observed keys the running operation changed, with the state each was left in: their
    /// observers are answered when the operation ends, after every waiter it granted.
    pub(super) observed: Vec<(i32, Box<[u8]>, u64)>,
    /// The deadline and id of the armed timer, if one is armed.
    pub(super) timer: Option<(u64, raw::RedisModuleTimerID)>,
    pub(super) withdrawals: Vec<Withdrawal>,
    /// Locks whose admitted waiters wait for a fence (see `handoff.rs`).
    pub(super) regrants: Vec<(i32, Box<[u8]>)>,
    /// An AOF rewrite began: the high-water mark is to be written after it (see
    /// `handoff.rs`).
    pub(super) highwater_due: bool,
}

thread_local! {
    /// Never dropped: a thread-local's destructor would run at exit, after the server has
    /// let go of the clients the registry names.
    static ENGINE: ManuallyDrop<RefCell<Option<Engine>>> =
        const { ManuallyDrop::new(RefCell::new(None)) };
}

/// Keys that changed under the engine while it was busy (see the engine's module comment).
static PENDING: Mutex<Vec<(i32, Vec<u8>)>> = Mutex::new(Vec::new());
static HAS_PENDING: AtomicBool = AtomicBool::new(false);

/// Mirrors of the registry, for readers that must not take the engine: `INFO`, and the key
/// event callback, which runs on every write in the server and returns at once while
/// nobody waits.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
static OBSERVING: AtomicUsize = AtomicUsize::new(0);
static ANYONE_WAITS: AtomicBool = AtomicBool::new(false);

fn new_engine() -> Engine {
    Engine {
        waiters: Registry::default(),
        observers: Observers::default(),
        observed: Vec::new(),
        timer: None,
        withdrawals: Vec::new(),
        regrants: Vec::new(),
        highwater_due: false,
    }
}

/// Runs `f` on the engine (see `effects::with`, the only caller).
pub(super) fn borrow<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    ENGINE.with(|cell| f(cell.borrow_mut().get_or_insert_with(new_engine)))
}

/// Runs `f` on the engine unless this thread is inside it already; `None` then.
pub(super) fn try_borrow<R>(f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
    ENGINE.with(|cell| {
        Some(f(cell
            .try_borrow_mut()
            .ok()?
            .get_or_insert_with(new_engine)))
    })
}

/// Notes that the value at (db, key) went while the engine was busy.
pub(super) fn note_pending(db: i32, key: &[u8]) {
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((db, key.to_vec()));
    HAS_PENDING.store(true, Ordering::Release);
}

/// Whether key events are pending, clearing the flag. A plain load first: the swap is a
/// locked instruction, and nothing is pending after almost every operation.
#[inline(always)]
pub(super) fn take_pending_flag() -> bool {
    HAS_PENDING.load(Ordering::Acquire) && HAS_PENDING.swap(false, Ordering::AcqRel)
}

/// The key events that arrived while the engine was busy.
pub(super) fn take_pending() -> Vec<(i32, Vec<u8>)> {
    std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Publishes the counts that readers outside the engine take.
#[inline(always)]
pub(super) fn publish(engine: &Engine) {
    QUEUED.store(engine.waiters.queued(), Ordering::Relaxed);
    OBSERVING.store(engine.observers.blocked(), Ordering::Relaxed);
    let anyone = !engine.waiters.is_empty() || !engine.observers.is_empty();
    ANYONE_WAITS.store(anyone, Ordering::Relaxed);
}

/// Clients waiting right now, for `INFO lock`.
pub fn waiting_clients() -> usize {
    QUEUED.load(Ordering::Relaxed)
}

/// Clients observing right now, for `INFO lock`.
pub fn observing_clients() -> usize {
    OBSERVING.load(Ordering::Relaxed)
}

/// True while some client waits or observes, or has a reply from either still to come.
pub fn anyone_waits() -> bool {
    ANYONE_WAITS.load(Ordering::Relaxed)
}

thread_local! {
    /// The server-wide fence issuer. Kept apart from the engine because loading (RDB,
    /// `RESTORE`) notes the fences it reads here, outside any engine operation. On the main
    /// thread like the engine (see the module comment).
    static FENCES: RefCell<FenceIssuer> = const { RefCell::new(FenceIssuer::new()) };
}

/// Runs `f` on the fence issuer.
pub fn with_fences<R>(f: impl FnOnce(&mut FenceIssuer) -> R) -> R {
    FENCES.with_borrow_mut(f)
}
