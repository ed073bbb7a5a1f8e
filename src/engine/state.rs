//! The engine's state, and the only way to reach it. Everything but the lease index
//! (`leases.rs`) lives here, touched by the main thread only: the server runs commands,
//! timers, blocked-client callbacks, server events and loading there, and a thread of its
//! own only to free values (which reaches the lease index alone). So the state is
//! thread-local rather than behind a mutex: a mutex that is never contended still costs two
//! locked instructions each time it is taken, about 1% of an acquire + release cycle here.

use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use redis_module::{raw, Context};

use super::observers::Observers;
use super::waiters::Registry;
use crate::blocked::Handle;
use crate::clock;
use crate::error::LockError;
use crate::fence::FenceIssuer;
use crate::leases;

/// A grant whose client left before it was told, to be taken back by the sweep.
#[derive(Debug)]
pub(super) struct Withdrawal {
    pub(super) db: i32,
    pub(super) key: Box<[u8]>,
    pub(super) token: Box<[u8]>,
    pub(super) fence: u64,
}

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

/// Keys that changed under the engine while it was busy (see the module comment).
pub(super) static PENDING: Mutex<Vec<(i32, Vec<u8>)>> = Mutex::new(Vec::new());
pub(super) static HAS_PENDING: AtomicBool = AtomicBool::new(false);

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

/// Runs `f` on the engine. Never from inside it: the adapters call in once, and what the
/// server calls back while the engine works goes through `try_with`.
pub(super) fn with<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    ENGINE.with(|cell| run(&mut cell.borrow_mut(), f))
}

/// `with`, for an operation that may fail. The error crosses the engine's bookkeeping
/// (`run`, `settle_pending`) boxed: a `Result` holding a `LockError` is too large for
/// registers, and copying it around that code stalled the CPU on every command; with the
/// error boxed the `Result` fits in two registers, and errors are rare.
pub(super) fn with_result<T>(
    f: impl FnOnce(&mut Engine) -> Result<T, LockError>,
) -> Result<T, LockError> {
    with(|e| f(e).map_err(Box::new)).map_err(|e| *e)
}

/// Runs `f` on the engine unless this thread is inside it already; `None` then.
pub(super) fn try_with<R>(f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
    ENGINE.with(|cell| Some(run(&mut *cell.try_borrow_mut().ok()?, f)))
}

fn run<R>(slot: &mut Option<Engine>, f: impl FnOnce(&mut Engine) -> R) -> R {
    let engine = slot.get_or_insert_with(new_engine);
    let r = f(engine);
    // A lease filed by a key handle as the new earliest: the timer fires for it.
    if let Some(at) = leases::take_new_earliest() {
        engine.arm_for(at);
    }
    engine.settle_pending();
    r
}

/// A context of the module's own, for timers armed where no other is at hand (see `run`).
/// Made once at load, never freed: it lives as long as the module.
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the timers' context, at load.
pub fn init(ctx: &Context) {
    // SAFETY: ctx.ctx is the OnLoad context; a detached context may be used on the main
    // thread, as timers are.
    let own = unsafe { raw::RedisModule_GetDetachedThreadSafeContext.unwrap()(ctx.ctx) };
    TIMER_CTX.store(own, Ordering::Relaxed);
}

impl Engine {
    /// Arms the timer for the lease deadline `at` (monotonic). A timer armed no later serves
    /// (the usual case: a lock taken again after its release finds its timer still armed).
    fn arm_for(&mut self, at: u64) {
        if matches!(self.timer, Some((armed, _)) if armed <= at) {
            return;
        }
        let own = TIMER_CTX.load(Ordering::Relaxed);
        if !own.is_null() {
            self.arm(&Context::new(own), Some(at), clock::now());
        }
    }

    /// Handles key events that arrived while the engine was busy, then publishes the
    /// counts others read. Inlined, with the rare work apart: called after every operation,
    /// it would otherwise make the operation's result be copied around the call.
    #[inline(always)]
    fn settle_pending(&mut self) {
        // A plain load first: the swap is a locked instruction, and nothing is pending on
        // almost every call.
        if HAS_PENDING.load(Ordering::Acquire) && HAS_PENDING.swap(false, Ordering::AcqRel) {
            self.handle_pending();
        }
        if !self.observed.is_empty() {
            self.answer_observed();
        }
        QUEUED.store(self.waiters.queued(), Ordering::Relaxed);
        OBSERVING.store(self.observers.blocked(), Ordering::Relaxed);
        let anyone = !self.waiters.is_empty() || !self.observers.is_empty();
        ANYONE_WAITS.store(anyone, Ordering::Relaxed);
    }

    /// Out of line, so that the inlined part stays small.
    #[cold]
    #[inline(never)]
    fn handle_pending(&mut self) {
        let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
        for (db, key) in pending {
            self.key_gone(db, &key);
        }
    }
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
