//! `LOCK.OBSERVE`: blocking an observer, its timeout, and its reply.
//!
//! Every change the engine makes to a lock ends in `Engine::modified` (`effects.rs`), which
//! tells `WATCH` and notes the key's new state if anybody observes it. The observers are
//! answered when the operation ends, so that a hand-off's waiters are granted, and woken,
//! before them. A key the server deletes, moves or replaces answers its observers at once
//! (`server.rs`), as it answers its waiters.

use redis_module::{Context, RedisString};

use super::effects::{may_block, with};
use super::observers::{self, state_of};
use crate::blocked;
use crate::clock::Now;
use crate::error::LockError;
use crate::keyspace::{selected_db, ReadKey};

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
