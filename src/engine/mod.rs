//! The engine: the one owner of the module's state and the only code that changes a lock.
//!
//! It holds the lease index (`leases.rs`), the registry of waiting clients
//! (`waiters.rs`), the fence issuer and the timer, and it makes every hand-off: a grant,
//! a release, a lease end, a wait timeout, a disconnect, `CLIENT UNBLOCK`, and a key
//! deleted, moved, swapped or replaced under its waiters. Commands (`commands.rs`), the
//! timer, blocked-client callbacks and server events (`events.rs`, `persistence.rs`) are
//! thin adapters that call in here; nothing in here calls back up into them.
//!
//! - `ops.rs`: what the commands do.
//! - `handoff.rs`: how a free lock passes on, the sweep of due deadlines, and the timer.
//! - `server.rs`: what the server does around a key, and blocked clients that leave.
//!
//! Everything but the lease index is touched by the main thread only, under one mutex that
//! is never contended. The server can call back into the module while a command holds it
//! (opening a key with a TTL may expire it, and the expiry is announced to the module at
//! once), so a key event that finds the engine busy is queued and handled when the running
//! operation ends.

mod handoff;
pub mod leases;
mod ops;
mod server;
pub mod waiters;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use redis_module::raw;

use crate::blocked::Handle;
use crate::fence::FenceIssuer;

pub use ops::Acquired;
pub use waiters::Reply;

/// A grant whose client left before it was told, to be taken back by the sweep.
#[derive(Debug)]
struct Withdrawal {
    db: i32,
    key: Box<[u8]>,
    token: Box<[u8]>,
    fence: u64,
}

pub struct Engine {
    waiters: waiters::Registry<Handle>,
    /// The deadline and id of the armed timer, if one is armed.
    timer: Option<(u64, raw::RedisModuleTimerID)>,
    withdrawals: Vec<Withdrawal>,
}

static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);

/// Keys that changed under the engine while it was busy (see the module comment).
static PENDING: Mutex<Vec<(i32, Vec<u8>)>> = Mutex::new(Vec::new());
static HAS_PENDING: AtomicBool = AtomicBool::new(false);

/// Mirrors of the registry, for readers that must not take the engine: `INFO`, and the key
/// event callback, which runs on every write in the server and returns at once while
/// nobody waits.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
static ANYONE_WAITS: AtomicBool = AtomicBool::new(false);

fn lock_engine() -> MutexGuard<'static, Option<Engine>> {
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_engine() -> Engine {
    Engine {
        waiters: waiters::Registry::default(),
        timer: None,
        withdrawals: Vec::new(),
    }
}

/// Runs `f` on the engine.
fn with<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    let mut guard = lock_engine();
    let engine = guard.get_or_insert_with(new_engine);
    let r = f(engine);
    engine.settle_pending();
    r
}

/// Runs `f` on the engine unless this thread is inside it already; `None` then.
fn try_with<R>(f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
    let mut guard = match ENGINE.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let engine = guard.get_or_insert_with(new_engine);
    let r = f(engine);
    engine.settle_pending();
    Some(r)
}

impl Engine {
    /// Handles key events that arrived while the engine was busy, then publishes the
    /// counts others read.
    fn settle_pending(&mut self) {
        if HAS_PENDING.swap(false, Ordering::AcqRel) {
            let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
            for (db, key) in pending {
                self.key_gone(db, &key);
            }
        }
        QUEUED.store(self.waiters.queued(), Ordering::Relaxed);
        ANYONE_WAITS.store(!self.waiters.is_empty(), Ordering::Relaxed);
    }
}

/// Clients waiting right now, for `INFO lock`.
pub fn waiting_clients() -> usize {
    QUEUED.load(Ordering::Relaxed)
}

/// True while some client waits, or has a reply from a wait still to come.
pub fn anyone_waits() -> bool {
    ANYONE_WAITS.load(Ordering::Relaxed)
}

/// The server-wide fence issuer. Kept apart from the engine's mutex because loading (RDB,
/// `RESTORE`) notes the fences it reads here, outside any engine operation.
static FENCES: Mutex<FenceIssuer> = Mutex::new(FenceIssuer::new());

pub fn fences() -> MutexGuard<'static, FenceIssuer> {
    FENCES.lock().unwrap_or_else(|e| e.into_inner())
}

// The adapters' entry points.
pub use handoff::on_cron;
pub use ops::{acquire, apply, extend, fence, is_replay, queued_at, release};
pub use server::{
    blocked_client_left, deliver, demoted, evicted, flushed, relocated, swapped,
    unblocked_by_client, unlinked,
};
