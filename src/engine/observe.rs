//! `LOCK.OBSERVE`, and the one path by which a change to a lock reaches its observers.
//!
//! Every change the engine makes to a lock ends in [`Engine::modified`], which tells
//! `WATCH` and notes the key's new state if anybody observes it. The observers are answered
//! when the operation ends (`state.rs`), so that a hand-off's waiters are granted, and
//! woken, before them. A key the server deletes, moves or replaces answers its observers
//! at once (`server.rs`), as it answers its waiters.

use redis_module::{Context, RedisString};

use super::observers::{self, state_of};
use super::ops::may_block;
use super::state::{with, Engine};
use crate::blocked;
use crate::clock::Now;
use crate::error::LockError;
use crate::keyspace::{selected_db, signal_modified, ReadKey};
use crate::lock::Lock;

/// What `LOCK.OBSERVE` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The state differs from the caller's (or the call may not block): the key's
    /// `LOCK.INFO`, now.
    Now,
    /// The client waits; its reply comes with the next change or the timeout.
    Blocked,
}

/// `LOCK.OBSERVE key seen timeout`; `timeout_at` is the monotonic deadline of the wait
/// (`None` waits without limit).
pub fn observe(
    ctx: &Context,
    name: &RedisString,
    seen: u64,
    timeout_at: Option<u64>,
    now: Now,
) -> Result<Observed, LockError> {
    let db = selected_db(ctx);
    let state = {
        let key = ReadKey::open(ctx, name);
        state_of(key.lock()?, now)
    };
    // Inside MULTI or a script it never blocks: the reply is as for a change.
    if state != seen || !may_block(ctx) {
        return Ok(Observed::Now);
    }
    with(|e| {
        let handle = blocked::block(ctx);
        e.observers
            .observe(handle, db, name.as_slice(), seen, timeout_at);
        if timeout_at.is_some() {
            e.arm(ctx, timeout_at, now);
        }
    });
    Ok(Observed::Blocked)
}

impl Engine {
    /// The lock at `name` in `db` changed: it is now `lock` (`None`: the key is gone). The
    /// one way a change is made known: `WATCH` sees it, and the key's observers learn its
    /// new state when the operation ends.
    pub(super) fn modified(
        &mut self,
        ctx: &Context,
        name: &RedisString,
        db: i32,
        lock: Option<&Lock>,
        now: Now,
    ) {
        signal_modified(ctx, name);
        if !self.observers.is_empty() && self.observers.watches(db, name.as_slice()) {
            self.observed
                .push((db, name.as_slice().into(), state_of(lock, now)));
        }
    }

    /// Answers the observers of every key the operation changed whose state is not the one
    /// they saw. Out of line: most operations change no observed key.
    #[cold]
    #[inline(never)]
    pub(super) fn answer_observed(&mut self) {
        for (db, key, state) in std::mem::take(&mut self.observed) {
            wake(self.observers.changed(db, &key, state));
        }
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
}

fn wake(woken: Vec<(blocked::Handle, u64)>) {
    for (handle, id) in woken {
        blocked::wake(handle, id);
    }
}

/// Whether the id a woken client carries is an observer's.
pub fn is_observer(id: u64) -> bool {
    observers::is_observer(id)
}

/// The reply of observer `id` is going out: the key whose `LOCK.INFO` it gets, in the
/// database its client has selected.
pub fn deliver_observation(id: u64) -> Option<Box<[u8]>> {
    let delivered = with(|e| e.observers.deliver(id)).map(|(_, key)| key);
    if delivered.is_some() {
        crate::stats::OBSERVERS_ANSWERED.bump();
    }
    delivered
}
