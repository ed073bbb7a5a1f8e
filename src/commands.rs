//! The `LOCK.*` commands: parse the arguments, run the state machine of `lock.rs`, and turn
//! its outcome into a reply, an entry in the expiry index, and the effect propagated to
//! replicas and the AOF.
//!
//! Effects are propagated as state, never as the command: `LOCK.APPLY key token deadline
//! fence` with the absolute Unix-millisecond deadline, and `DEL key` when a lock goes away.
//! A replica or a replayed AOF so holds exactly what the master held, whatever its clock.

use redis_module::key::RedisKeyWritable;
use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::args;
use crate::clock::{self, Now};
use crate::config;
use crate::error::LockError;
use crate::expiry::{self, LeaseEnd};
use crate::fence::server_fences;
use crate::lock::{Acquire, Lock};
use crate::persistence::LOCK_TYPE;

/// The most arguments after the key that any command reads. A longer call is handed to the
/// parser cut to one more than this, which is enough for it to reject it.
const MAX_REST: usize = 5;

/// The key and the remaining arguments of a call, as byte slices.
struct Call<'a> {
    key: &'a RedisString,
    rest: [&'a [u8]; MAX_REST],
    len: usize,
}

impl<'a> Call<'a> {
    fn split(args: &'a [RedisString]) -> Result<Self, LockError> {
        let [_, key, rest @ ..] = args else {
            return Err(LockError::Arity);
        };
        let mut call = Call {
            key,
            rest: [&[]; MAX_REST],
            len: rest.len().min(MAX_REST),
        };
        for (slot, arg) in call.rest.iter_mut().zip(rest) {
            *slot = arg.as_slice();
        }
        Ok(call)
    }

    fn rest(&self) -> &[&'a [u8]] {
        &self.rest[..self.len]
    }
}

fn lock_at(key: &RedisKeyWritable) -> Result<Option<&mut Lock>, LockError> {
    key.get_value::<Lock>(&LOCK_TYPE)
        .map_err(|_| LockError::WrongType)
}

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx.ctx is the live context of the running command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

fn signal_modified(ctx: &Context, key: &RedisString) {
    // SAFETY: both pointers are live for this call. The module sets
    // NO_IMPLICIT_SIGNAL_MODIFIED, so this is what makes WATCH see a change.
    unsafe {
        raw::RedisModule_SignalModifiedKey.unwrap()(ctx.ctx, key.inner);
    }
}

/// After `lock` at `key` changed (its deadline was `old`, or it is new): index the new
/// deadline, propagate the new state, and let WATCH see it.
fn changed(ctx: &Context, key: &RedisString, lock: &Lock, old: Option<u64>, now: Now) {
    expiry::track(
        ctx,
        selected_db(ctx),
        key.as_slice(),
        old,
        Some(lock.deadline()),
    );
    let token = RedisString::create_from_slice(ctx.ctx, lock.token());
    let deadline = number(ctx, now.to_wall(lock.deadline()));
    let fence = number(ctx, lock.fence() as i64);
    ctx.replicate("LOCK.APPLY", &[key, &token, &deadline, &fence]);
    signal_modified(ctx, key);
}

/// After the lock at `key`, whose deadline was `old`, was deleted.
fn removed(ctx: &Context, key: &RedisString, old: u64) {
    expiry::track(ctx, selected_db(ctx), key.as_slice(), Some(old), None);
    ctx.replicate("DEL", &[key]);
    signal_modified(ctx, key);
}

fn number(ctx: &Context, n: i64) -> RedisString {
    RedisString::create_from_slice(ctx.ctx, n.to_string().as_bytes())
}

/// `LOCK.ACQUIRE key token ttl [WAIT timeout]`
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let call = Call::split(&args)?;
    let a = args::acquire(call.rest(), config::max_ttl())?;
    let now = clock::now();
    let key = ctx.open_key_writable(call.key);
    let fence = match lock_at(&key)? {
        Some(lock) => {
            let old = lock.deadline();
            match lock.acquire(a.token, a.ttl, now, &mut server_fences()) {
                Acquire::Busy => return Ok(RedisValue::Null),
                Acquire::Granted(fence) | Acquire::Renewed(fence) => {
                    changed(ctx, call.key, lock, Some(old), now);
                    fence
                }
            }
        }
        None => {
            let (lock, fence) = Lock::acquired(a.token, a.ttl, now, &mut server_fences());
            changed(ctx, call.key, &lock, None, now);
            key.set_value(&LOCK_TYPE, lock)?;
            fence
        }
    };
    Ok(RedisValue::Integer(fence as i64))
}

/// `LOCK.RELEASE key token`
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let call = Call::split(&args)?;
    let token = args::token_only(call.rest())?;
    let now = clock::now();
    let key = ctx.open_key_writable(call.key);
    let Some(lock) = lock_at(&key)? else {
        return Ok(RedisValue::Integer(0));
    };
    let old = lock.deadline();
    if !lock.release(token, now) {
        return Ok(RedisValue::Integer(0));
    }
    key.delete()?;
    removed(ctx, call.key, old);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.EXTEND key token ttl`
pub fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let call = Call::split(&args)?;
    let (token, ttl) = args::extend(call.rest(), config::max_ttl())?;
    let now = clock::now();
    let key = ctx.open_key_writable(call.key);
    let Some(lock) = lock_at(&key)? else {
        return Ok(RedisValue::Integer(0));
    };
    let old = lock.deadline();
    if !lock.extend(token, ttl, now) {
        return Ok(RedisValue::Integer(0));
    }
    changed(ctx, call.key, lock, Some(old), now);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FENCE key token`
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let call = Call::split(&args)?;
    let token = args::token_only(call.rest())?;
    let now = clock::now();
    let key = ctx.open_key_writable(call.key);
    let Some(lock) = lock_at(&key)? else {
        return Ok(RedisValue::Null);
    };
    let old = lock.deadline();
    match lock.new_fence(token, now, &mut server_fences()) {
        Some(fence) => {
            changed(ctx, call.key, lock, Some(old), now);
            Ok(RedisValue::Integer(fence as i64))
        }
        None => Ok(RedisValue::Null),
    }
}

/// `LOCK.INFO key`: a map of holder, fence, ttl and waiters (a flat array under RESP2).
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let call = Call::split(&args)?;
    if call.len != 0 {
        return Err(LockError::Arity.into());
    }
    let key = ctx.open_key(call.key);
    let lock = key
        .get_value::<Lock>(&LOCK_TYPE)
        .map_err(|_| LockError::WrongType)?;
    let now = clock::now();
    // A lease that has ended is a removed key, also in the moment before the sweep (or, on a
    // replica, the master's DEL) takes it away.
    let Some(info) = lock.filter(|l| l.is_held(now)).map(|l| l.info(now)) else {
        return Ok(RedisValue::Null);
    };
    raw::reply_with_map(ctx.ctx, 4);
    let holder = match info.holder {
        Some(token) => RedisValue::StringBuffer(token.to_vec()),
        None => RedisValue::Null,
    };
    let fields = [
        ("holder", holder),
        ("fence", RedisValue::Integer(info.fence as i64)),
        ("ttl", RedisValue::Integer(info.ttl)),
        ("waiters", RedisValue::Integer(0)),
    ];
    for (name, value) in fields {
        ctx.reply(Ok(RedisValue::SimpleStringStatic(name)));
        ctx.reply(Ok(value));
    }
    Ok(RedisValue::NoReply)
}

/// `LOCK.APPLY key token deadline fence`: the state a master propagated, replayed from the
/// replication link or the AOF. Clients may not send it: it would bypass the lock.
pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let from_master_or_aof = ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING);
    if !from_master_or_aof {
        return Err(LockError::InternalCommand.into());
    }
    let call = Call::split(&args)?;
    let a = args::apply(call.rest())?;
    let now = clock::now();
    let deadline = now.to_mono(a.deadline_unix_ms);
    let key = ctx.open_key_writable(call.key);
    let old = match lock_at(&key)? {
        Some(lock) => {
            let old = lock.deadline();
            *lock = Lock::restored(a.token, deadline, a.fence);
            Some(old)
        }
        None => {
            key.set_value(&LOCK_TYPE, Lock::restored(a.token, deadline, a.fence))?;
            None
        }
    };
    server_fences().observe(a.fence);
    expiry::track(
        ctx,
        selected_db(ctx),
        call.key.as_slice(),
        old,
        Some(deadline),
    );
    ctx.replicate_verbatim();
    signal_modified(ctx, call.key);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Called by the expiry sweep for a key whose lease deadline came up.
pub fn end_lease(ctx: &Context, name: &RedisString, now: Now) -> LeaseEnd {
    let key = ctx.open_key_writable(name);
    let Ok(Some(lock)) = lock_at(&key) else {
        return LeaseEnd::Stale;
    };
    if lock.is_held(now) {
        return LeaseEnd::Stale;
    }
    if ctx
        .get_flags()
        .intersects(ContextFlags::SLAVE | ContextFlags::LOADING)
    {
        return LeaseEnd::Deferred;
    }
    if key.delete().is_err() {
        return LeaseEnd::Deferred;
    }
    ctx.replicate("DEL", &[name]);
    signal_modified(ctx, name);
    LeaseEnd::Ended
}

impl From<LockError> for RedisResult {
    fn from(e: LockError) -> Self {
        Err(RedisError::from(e))
    }
}
