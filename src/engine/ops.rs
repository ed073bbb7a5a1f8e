//! What the `LOCK.*` commands do to a lock, once their arguments are parsed: the adapters'
//! entry points. Each runs as one engine operation (`effects::with`) on one key, with the
//! hand-off rules below it (`handoff.rs`) and its effects below those (`effects.rs`).

use redis_module::{Context, RedisString};

use super::effects::{is_replay, may_block, with, with_result, Op, Propagation, Removal};
use super::state::{with_fences, Engine};
use crate::args::{AcquireArgs, ApplyArgs};
use crate::blocked;
use crate::clock::{self, Now};
use crate::config;
use crate::error::LockError;
use crate::keyspace::{selected_db, LockKey, ReadKey};
use crate::lock::{Acquire, Fenced, HoldRef, Lock, Mode};
use crate::replication;
use crate::stats::{self, Event};

/// What `LOCK.ACQUIRE` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    Fence(u64),
    Null,
    /// The client waits; its reply comes with the grant or the timeout.
    Blocked,
}

/// The operation of the running command on the key `name`.
fn op<'a>(ctx: &'a Context, name: &'a RedisString, now: Now) -> Op<'a> {
    Op {
        ctx,
        name,
        db: selected_db(ctx),
        now,
    }
}

/// `LOCK.ACQUIRE key token ttl [SHARED [LIMIT n]] [WAIT timeout]`; `wait_until` is the monotonic deadline of
/// the wait (`Some(None)` waits without limit).
pub fn acquire(
    ctx: &Context,
    name: &RedisString,
    token_arg: &RedisString,
    a: &AcquireArgs,
    wait_until: Option<Option<u64>>,
    now: Now,
) -> Result<Acquired, LockError> {
    with_result(|e| e.acquire(&op(ctx, name, now), token_arg, a, wait_until))
}

impl Engine {
    fn acquire(
        &mut self,
        op: &Op,
        token_arg: &RedisString,
        a: &AcquireArgs,
        wait_until: Option<Option<u64>>,
    ) -> Result<Acquired, LockError> {
        let Op { ctx, name, db, now } = *op;
        let mut key = LockKey::open(ctx, name);
        self.settle(op, &mut key)?;
        let Some(lock) = key.lock()? else {
            let (lock, fence) = with_fences(|f| {
                Lock::acquired(name.as_slice(), db, a.token, a.ttl, a.want.mode, now, f)
            })?;
            let lock = key.store(lock)?;
            stats::lock_created();
            let propagation = Propagation::of_command(token_arg);
            self.changed(op, lock, propagation, Event::Acquired);
            return Ok(Acquired::Fence(fence));
        };
        let queued =
            super::state::waiting_clients() > 0 && self.waiters.head(db, name.as_slice()).is_some();
        let acquired = with_fences(|f| lock.acquire(a.token, a.ttl, a.want, queued, now, f))?;
        let (fence, event) = match acquired {
            Acquire::Granted(fence) => (fence, Event::Acquired),
            Acquire::Renewed(fence) | Acquire::Downgraded(fence) => (fence, Event::Extended),
            Acquire::Busy => {
                stats::CONTENDED.bump();
                // Inside MULTI or a script, WAIT does not block: the reply is as without it.
                let Some(timeout_at) = wait_until.filter(|_| may_block(ctx)) else {
                    return Ok(Acquired::Null);
                };
                let handle = blocked::block(ctx);
                let waits_for = name.as_slice();
                let asks = (a.token, a.ttl, a.want);
                self.waiters
                    .enqueue(handle, db, waits_for, asks, timeout_at);
                if let Some(at) = timeout_at {
                    self.arm(ctx, Some(at), now);
                }
                return Ok(Acquired::Blocked);
            }
        };
        if event == Event::Extended {
            self.adopt(db, name.as_slice(), a.token);
        }
        let propagation = Propagation::of_command(token_arg);
        self.changed(op, lock, propagation, event);
        if matches!(acquired, Acquire::Downgraded(_)) {
            // Shared now: the shared requests at the head of the queue join at once.
            self.grant_queued(op, lock, true);
        }
        Ok(Acquired::Fence(fence))
    }
}

/// `LOCK.RELEASE key token`: whether `token` held the lock.
pub fn release(
    ctx: &Context,
    name: &RedisString,
    token: &[u8],
    now: Now,
) -> Result<bool, LockError> {
    with_result(|e| {
        let op = op(ctx, name, now);
        let mut key = LockKey::open(ctx, name);
        if replication::may_replay() && is_replay(ctx) {
            // A release the master propagated (or a shared hold's end): it happened there, and
            // this server's clock (a replica's, or a restart's) must not overrule it. Nobody
            // waits here.
            let Some(lock) = key.lock()? else {
                return Ok(false);
            };
            match lock.drop_hold(token, now.mono) {
                None => return Ok(false),
                Some(true) => key.delete(),
                Some(false) => {}
            }
            ctx.replicate_verbatim();
            let lock = key.lock()?;
            e.modified(&op, lock.as_deref());
            stats::announce(ctx, Event::Released, name);
            return Ok(true);
        }
        e.settle(&op, &mut key)?;
        let Some(lock) = key.lock()? else {
            return Ok(false);
        };
        if !lock.release(token, now) {
            return Ok(false);
        }
        stats::record(ctx, Event::Released, name);
        e.pass_on(&op, &mut key, Removal::Verbatim);
        Ok(true)
    })
}

/// `LOCK.EXTEND key token ttl`: whether `token` held the lock.
pub fn extend(
    ctx: &Context,
    name: &RedisString,
    token_arg: &RedisString,
    ttl: u64,
    now: Now,
) -> Result<bool, LockError> {
    let token = token_arg.as_slice();
    let extended = by_holder(ctx, name, token_arg, now, Event::Extended, |lock| {
        Ok(lock.extend(token, ttl, now).then_some(()))
    })?;
    Ok(extended.is_some())
}

/// `LOCK.FENCE key token`: the new fence, or `None` if `token` does not hold the lock.
pub fn fence(
    ctx: &Context,
    name: &RedisString,
    token_arg: &RedisString,
    now: Now,
) -> Result<Option<u64>, LockError> {
    let token = token_arg.as_slice();
    by_holder(ctx, name, token_arg, now, Event::Fenced, |lock| {
        Ok(with_fences(|f| lock.new_fence(token, now, f))?)
    })
}

/// A change only the holder may make (`change` returns `None` when `token` does not hold
/// the lock, or an error and changes nothing), propagated and announced as `event`.
fn by_holder<R>(
    ctx: &Context,
    name: &RedisString,
    token_arg: &RedisString,
    now: Now,
    event: Event,
    change: impl FnOnce(&mut Lock) -> Result<Option<R>, LockError>,
) -> Result<Option<R>, LockError> {
    with_result(|e| {
        let op = op(ctx, name, now);
        let mut key = LockKey::open(ctx, name);
        e.settle(&op, &mut key)?;
        let Some(lock) = key.lock()? else {
            return Ok(None);
        };
        let Some(r) = change(lock)? else {
            return Ok(None);
        };
        e.adopt(op.db, name.as_slice(), token_arg.as_slice());
        let propagation = Propagation::of_command(token_arg);
        e.changed(&op, lock, propagation, event);
        Ok(Some(r))
    })
}

/// `LOCK.GUARD`'s check, which changes nothing: whether `fence` guards the lock at `name`
/// (see `Lock::guards`). The key is closed again before the guarded command runs, which may
/// delete or replace it.
pub fn guard(ctx: &Context, name: &RedisString, fence: u64, now: Now) -> Result<(), LockError> {
    let key = ReadKey::open(ctx, name);
    let verdict = match key.lock()? {
        Some(lock) => lock.guards(fence, now),
        None => Err(Fenced::NotHeld),
    };
    verdict.map_err(|why| {
        stats::GUARDED_REFUSALS.bump();
        LockError::Fenced(why)
    })
}

/// Clients queued for `key` in database `db` (for `LOCK.INFO`).
pub fn queued_at(db: i32, key: &[u8]) -> usize {
    if super::state::waiting_clients() == 0 {
        return 0;
    }
    with(|e| e.waiters.queued_at(db, key))
}

/// `LOCK.APPLY`: the state a master propagated, replayed from the
/// replication link or the AOF. Clients may not send it: it would bypass the lock.
pub fn apply(ctx: &Context, name: &RedisString, a: &ApplyArgs) -> Result<(), LockError> {
    let now = clock::now();
    if a.deadline_unix_ms > now.wall().saturating_add(config::MAX_TTL_LIMIT) {
        return Err(LockError::BadInternal("LOCK.APPLY", "deadline"));
    }
    let deadline = now.to_mono(a.deadline_unix_ms);
    with_result(|e| {
        let mut key = LockKey::open(ctx, name);
        let event = match key.lock()? {
            Some(lock) => {
                let event = applied_event(lock, a);
                lock.apply(a.token, deadline, a.fence, a.mode);
                lock.note_fence(a.last_fence.unwrap_or(0));
                event
            }
            None => {
                let db = selected_db(ctx);
                let hold = HoldRef {
                    token: a.token,
                    deadline,
                    fence: a.fence,
                };
                let last_fence = a.last_fence.unwrap_or(0).max(a.fence);
                let lock = Lock::restored(name.as_slice(), db, a.mode, &[hold], last_fence)
                    .ok_or(LockError::BadInternal("LOCK.APPLY", "state"))?;
                key.store(lock)?;
                stats::lock_created();
                Event::Acquired
            }
        };
        with_fences(|f| f.observe(a.last_fence.unwrap_or(0).max(a.fence)));
        let lock = key.lock()?.ok_or(LockError::WrongType)?;
        ctx.replicate_verbatim();
        e.modified(&op(ctx, name, now), Some(lock));
        stats::announce(ctx, event, name);
        Ok(())
    })
}

/// The change a master made, as its state tells it: a replica announces the same events
/// as its master. (A new exclusive holder of a key that still exists can only be a grant:
/// a master removes a lock whose lease ended before anyone acquires it afresh. A new shared
/// holder joining shared holds may be either; it is announced as acquired.)
fn applied_event(lock: &Lock, a: &ApplyArgs) -> Event {
    match lock.hold_of(a.token) {
        Some(h) if h.fence != a.fence => Event::Fenced,
        Some(_) => Event::Extended,
        None if a.mode == Mode::Shared && lock.mode() == Mode::Shared => Event::Acquired,
        None => Event::Granted,
    }
}
