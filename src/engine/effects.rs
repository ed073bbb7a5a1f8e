//! What an engine operation leaves behind besides the lock itself, and the frame every
//! operation runs in.
//!
//! An operation ([`with`]) runs on the engine; when it ends, key events that arrived while
//! it ran are handled, observers of the keys it changed are answered (after every waiter it
//! granted), the timer is armed for a lease it filed as the earliest, and the counts that
//! `INFO` and the key-event callback read are published.
//!
//! Within an operation, a change to a lock has these effects, and only through here: it is
//! propagated to replicas and the AOF ([`Propagation`], [`Removal`]), made known to `WATCH`
//! and to observers ([`Engine::modified`]), counted and announced as a keyspace event. The
//! hand-off rules (`handoff.rs`) and the commands (`ops.rs`) sit above this file and call
//! down into it; nothing here calls up.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use redis_module::{raw, Context, ContextFlags, RedisString};

use super::observers::state_of;
use super::state::{self, Engine};
use crate::blocked::{self, Handle};
use crate::clock::{self, Now};
use crate::error::LockError;
use crate::keyspace::signal_modified;
use crate::leases;
use crate::lock::{HoldRef, Lock, Mode};
use crate::propagate::{self, TokenArg};
use crate::replication;
use crate::stats::{self, Event};

/// One operation on one key: the context it runs in, the key's name and database, and the
/// time it judges leases by.
#[derive(Clone, Copy)]
pub(super) struct Op<'a> {
    pub(super) ctx: &'a Context,
    pub(super) name: &'a RedisString,
    pub(super) db: i32,
    pub(super) now: Now,
}

/// How a change reaches replicas and the AOF. Effects are propagated as state, never as
/// the command: `LOCK.APPLY` (syntax in `args::apply`) with the absolute Unix-millisecond
/// deadline, and `DEL key` when a lock goes away, so that a replica or a replayed AOF holds
/// exactly what the master held, whatever its clock. While nothing reads the stream
/// (`replication.rs`), a client's command stands in for its state, which the server then
/// discards unbuilt.
#[derive(Clone, Copy)]
pub(super) enum Propagation<'a> {
    /// `LOCK.APPLY`: the state of this token's hold.
    State(TokenArg<'a>),
    /// The client's command itself.
    Verbatim,
}

impl<'a> Propagation<'a> {
    /// For a change a client's command made: the token by reference to its argument.
    pub(super) fn of_command(token: &'a RedisString) -> Self {
        if replication::stream_is_read() {
            Propagation::State(TokenArg::Arg(token))
        } else {
            Propagation::Verbatim
        }
    }
}

/// How a lock's removal reaches replicas and the AOF.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal<'a> {
    /// The holds of these tokens ended without a client asking (lease ends, a withdrawn
    /// grant): `DEL key` when the key goes, `LOCK.RELEASE key token` for each shared hold.
    Ended(&'a [Box<[u8]>]),
    /// The `LOCK.RELEASE` itself, which replays to the same removal. It spares
    /// `RedisModule_Replicate`'s command lookup, a third of the cost of a release.
    Verbatim,
}

/// True for a command the master link or the AOF sent.
pub fn is_replay(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// Whether the running command may block its client: not inside `MULTI`, a script or
/// wherever the server denies blocking.
pub(super) fn may_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING)
}

impl Engine {
    /// After the lock changed under `op`: propagate it, make it known, and record `event`.
    /// (Its key handle re-files its lease when it closes.)
    pub(super) fn changed(
        &mut self,
        op: &Op,
        lock: &mut Lock,
        propagation: Propagation,
        event: Event,
    ) {
        // A client's change on a writable replica is this server's to end; on a master all are.
        lock.set_replica_write(replication::is_replica());
        match propagation {
            Propagation::State(token) => {
                if let Some(hold) = lock.hold_of(token.bytes()) {
                    replicate_hold(op, token, hold, lock.mode());
                }
            }
            Propagation::Verbatim => op.ctx.replicate_verbatim(),
        }
        self.modified(op, Some(lock));
        stats::record(op.ctx, event, op.name);
    }

    /// The lock under `op` changed: it is now `lock` (`None`: the key is gone). `WATCH`
    /// sees it, and the key's observers learn its new state when the operation ends.
    pub(super) fn modified(&mut self, op: &Op, lock: Option<&Lock>) {
        signal_modified(op.ctx, op.name);
        if !self.observers.is_empty() && self.observers.watches(op.db, op.name.as_slice()) {
            let state = state_of(lock, op.now);
            self.observed
                .push((op.db, op.name.as_slice().into(), state));
        }
    }

    /// The value at (db, key) was deleted, replaced or moved away: its waiters are answered
    /// null, its observers with what is there now.
    pub(super) fn key_gone(&mut self, db: i32, key: &[u8]) {
        wake(self.waiters.answer_key(db, key));
        self.answer_observers_of(db, key);
    }

    /// Every observer of (db, key) is answered: its lock was deleted, moved or replaced,
    /// or a lock arrived under the name.
    pub(super) fn answer_observers_of(&mut self, db: i32, key: &[u8]) {
        if !self.observers.is_empty() {
            wake(self.observers.answer_key(db, key));
        }
    }

    /// Every observer in database `db` (all for `None`) is answered.
    pub(super) fn answer_observers_in(&mut self, db: Option<i32>) {
        if !self.observers.is_empty() {
            wake(self.observers.answer_db(db));
        }
    }

    /// Observers whose wait is due at `now` are answered.
    pub(super) fn end_due_observations(&mut self, now: u64) {
        while let Some((handle, id)) = self.observers.pop_timed_out(now) {
            blocked::wake(handle, id);
        }
    }

    /// Arms the timer to fire by `deadline` (monotonic), unless one is armed that fires no
    /// later.
    pub(super) fn arm(&mut self, ctx: &Context, deadline: Option<u64>, now: Now) {
        let Some(deadline) = deadline else {
            return;
        };
        if matches!(self.timer, Some((at, _)) if at <= deadline) {
            return;
        }
        if let Some((_, id)) = self.timer.take() {
            // The old timer may have fired already; its data is `()`, so nothing is lost.
            let _ = ctx.stop_timer::<()>(id);
        }
        // Timers count whole milliseconds: round up, and let the sweep re-arm if early.
        let delay = deadline.saturating_sub(now.mono).div_ceil(1000).max(1);
        let id = ctx.create_timer(Duration::from_millis(delay), fire, ());
        self.timer = Some((deadline, id));
    }

    /// Makes the timer fire on the next turn of the event loop.
    pub(super) fn timer_soon(&mut self, ctx: &Context) {
        if let Some((_, id)) = self.timer.take() {
            let _ = ctx.stop_timer::<()>(id);
        }
        let id = ctx.create_timer(Duration::from_millis(1), fire, ());
        self.timer = Some((0, id));
    }

    /// Arms the timer for the lease deadline `at`, filed as the earliest by a key handle. A
    /// timer armed no later serves (the usual case: a lock taken again after its release
    /// finds its timer still armed).
    fn arm_for(&mut self, at: u64) {
        if matches!(self.timer, Some((armed, _)) if armed <= at) {
            return;
        }
        let own = TIMER_CTX.load(Ordering::Relaxed);
        if !own.is_null() {
            self.arm(&Context::new(own), Some(at), clock::now());
        }
    }

    /// What every operation leaves behind (see the module comment). Inlined, with the rare
    /// work apart: called after every operation, it would otherwise make the operation's
    /// result be copied around the call.
    #[inline(always)]
    fn finish(&mut self) {
        if let Some(at) = leases::take_new_earliest() {
            self.arm_for(at);
        }
        if state::take_pending_flag() {
            self.handle_pending();
        }
        if !self.observed.is_empty() {
            self.answer_observed();
        }
        state::publish(self);
    }

    /// Key events that arrived while the engine was busy. Out of line, so that the inlined
    /// part stays small.
    #[cold]
    #[inline(never)]
    fn handle_pending(&mut self) {
        for (db, key) in state::take_pending() {
            self.key_gone(db, &key);
        }
    }

    /// Answers the observers of every key the operation changed whose state is not the one
    /// they saw. Out of line: most operations change no observed key.
    #[cold]
    #[inline(never)]
    fn answer_observed(&mut self) {
        for (db, key, state) in std::mem::take(&mut self.observed) {
            wake(self.observers.changed(db, &key, state));
        }
    }
}

/// Propagates one hold as `LOCK.APPLY`.
pub(super) fn replicate_hold(op: &Op, token: TokenArg, hold: HoldRef, mode: Mode) {
    let wall = op.now.to_wall(hold.deadline);
    propagate::replicate_state(op.ctx, op.name, token, wall, hold.fence, mode);
}

/// Wakes each client, once: waking consumes its handle.
pub(super) fn wake(woken: Vec<(Handle, u64)>) {
    for (handle, id) in woken {
        blocked::wake(handle, id);
    }
}

/// The timer's callback, given by the layer that owns the sweep (`handoff.rs`) at load:
/// this file arms the timer but does not know what it runs.
static ON_TIMER: OnceLock<fn(&Context, ())> = OnceLock::new();

/// What every timer runs: the callback given at load. The timer is given this function
/// itself, which takes no room, never the pointer in `ON_TIMER`: the `redis-module` crate's
/// `stop_timer` frees a stopped timer's data as if it were only the `()` it carried, so a
/// callback that took room would leak it (8 bytes a stopped timer, which
/// `tests/memory/waiter_memory.rs` caught).
fn fire(ctx: &Context, _: ()) {
    if let Some(on_timer) = ON_TIMER.get() {
        on_timer(ctx, ());
    }
}

/// A context of the module's own, for timers armed where no other is at hand (`finish`).
/// Made once at load, never freed: it lives as long as the module.
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the timers' context and notes their callback, at load.
pub(super) fn init(ctx: &Context, on_timer: fn(&Context, ())) {
    // SAFETY: ctx.ctx is the OnLoad context; a detached context may be used on the main
    // thread, as timers are.
    let own = unsafe { raw::RedisModule_GetDetachedThreadSafeContext.unwrap()(ctx.ctx) };
    TIMER_CTX.store(own, Ordering::Relaxed);
    let _ = ON_TIMER.set(on_timer);
}

/// Runs `f` on the engine as one operation. Never from inside it: the adapters call in
/// once, and what the server calls back while the engine works goes through `try_with`.
pub(super) fn with<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    state::borrow(|engine| {
        let r = f(engine);
        engine.finish();
        r
    })
}

/// `with`, for an operation that may fail. The error crosses the engine's bookkeeping
/// (`finish`) boxed: a `Result` holding a `LockError` is too large for registers, and
/// copying it around that code stalled the CPU on every command; with the error boxed the
/// `Result` fits in two registers, and errors are rare.
pub(super) fn with_result<T>(
    f: impl FnOnce(&mut Engine) -> Result<T, LockError>,
) -> Result<T, LockError> {
    with(|e| f(e).map_err(Box::new)).map_err(|e| *e)
}

/// Runs `f` on the engine unless this thread is inside it already; `None` then.
pub(super) fn try_with<R>(f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
    state::try_borrow(|engine| {
        let r = f(engine);
        engine.finish();
        r
    })
}
