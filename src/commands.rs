//! The `LOCK.*` commands: parse the arguments, call the engine, and turn its answer into a
//! reply. Every argument is checked here, before the engine touches a key, so that a bad
//! one changes nothing.

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::args;
use crate::clock;
use crate::config;
use crate::describe;
use crate::engine::{self, Acquired, Observed};
use crate::error::LockError;
use crate::guard;
use crate::stats;

/// The time this command judges leases by (see `clock::now_for`).
fn now(ctx: &Context) -> clock::Now {
    clock::now_for(|| {
        ctx.get_flags()
            .intersects(ContextFlags::MULTI | ContextFlags::LUA)
    })
}

/// One more than the most arguments after the key that any command reads
/// (`token ttl SHARED LIMIT n WAIT timeout`): a longer call is handed to the parser cut to
/// this length, which is enough for it to reject it.
const MAX_REST: usize = 8;

/// The key and the remaining arguments of a call. Small on purpose: it is returned through
/// a `Result`, and a larger value (the byte slices themselves) was copied on every command.
struct Call<'a> {
    key: &'a RedisString,
    rest: &'a [RedisString],
}

/// Room for the arguments after the key as byte slices (see `Call::bytes`).
type Slices<'a> = [&'a [u8]; MAX_REST];

impl<'a> Call<'a> {
    fn split(args: &'a [RedisString]) -> Result<Self, LockError> {
        let [_, key, rest @ ..] = args else {
            return Err(LockError::Arity);
        };
        Ok(Call { key, rest })
    }

    /// The arguments after the key as byte slices, in `room`, cut to `MAX_REST`.
    fn bytes<'r>(&self, room: &'r mut Slices<'a>) -> &'r [&'a [u8]] {
        for (slot, arg) in room.iter_mut().zip(self.rest) {
            *slot = arg.as_slice();
        }
        &room[..self.rest.len().min(MAX_REST)]
    }

    /// The argument after the key, which is the token wherever a command takes one, once
    /// parsing accepted one.
    fn token(&self) -> Result<&'a RedisString, LockError> {
        self.rest.first().ok_or(LockError::Arity)
    }
}

fn integer(n: u64) -> RedisValue {
    RedisValue::Integer(n as i64)
}

/// `LOCK.ACQUIRE key token ttl [SHARED [LIMIT n]] [WAIT timeout]`
pub fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let a = args::acquire(call.bytes(&mut Slices::default()), config::max_ttl())?;
    let now = now(ctx);
    let wait = match a.wait {
        Some(timeout) => Some(args::wait_deadline(timeout, now.mono, now.wall())?),
        None => None,
    };
    Ok(
        match engine::acquire(ctx, call.key, call.token()?, &a, wait, now)? {
            Acquired::Fence(fence) => integer(fence),
            Acquired::Null => RedisValue::Null,
            // Blocked: the reply comes when the lock is granted or the wait ends.
            Acquired::Blocked => RedisValue::NoReply,
        },
    )
}

/// `LOCK.RELEASE key token`
pub fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let token = args::token_only(call.bytes(&mut Slices::default()))?;
    let released = engine::release(ctx, call.key, token, now(ctx))?;
    Ok(RedisValue::Integer(released.into()))
}

/// `LOCK.EXTEND key token ttl`
pub fn extend(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let (_, ttl) = args::extend(call.bytes(&mut Slices::default()), config::max_ttl())?;
    let extended = engine::extend(ctx, call.key, call.token()?, ttl, now(ctx))?;
    Ok(RedisValue::Integer(extended.into()))
}

/// `LOCK.FENCE key token`
pub fn fence(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    args::token_only(call.bytes(&mut Slices::default()))?;
    let fence = engine::fence(ctx, call.key, call.token()?, now(ctx))?;
    Ok(fence.map_or(RedisValue::Null, integer))
}

/// `LOCK.INFO key` and `LOCK.HOLDERS key`: no argument after the key.
fn key_only(args: &[RedisString]) -> Result<&RedisString, LockError> {
    let call = Call::split(args)?;
    if !call.rest.is_empty() {
        return Err(LockError::Arity);
    }
    Ok(call.key)
}

/// `LOCK.INFO key`: a map of holder, fence, ttl, waiters, mode and holders (a flat array
/// under RESP2).
pub fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    describe::info(ctx, key_only(args)?, now(ctx))
}

/// `LOCK.HOLDERS key`: `[token, fence, ttl, mode]` for each live hold, in grant order.
pub fn holders(ctx: &Context, args: &[RedisString]) -> RedisResult {
    describe::holders(ctx, key_only(args)?, now(ctx))
}

/// `LOCK.OBSERVE key seen timeout`: the key's `LOCK.INFO` once its state differs from
/// `seen`, at once or at the change; at the timeout in any case.
pub fn observe(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let (seen, timeout) = args::observe(call.bytes(&mut Slices::default()))?;
    let now = now(ctx);
    let timeout_at = args::wait_deadline(timeout, now.mono, now.wall())?;
    match engine::observe(ctx, call.key, seen, timeout_at, now)? {
        Observed::Now => describe::info(ctx, call.key, now),
        // Blocked: the reply comes with the change or the timeout.
        Observed::Blocked => Ok(RedisValue::NoReply),
    }
}

/// `LOCK.GUARD key fence command [arg ...]`: the command's own reply, if `fence` guards the
/// lock; asked for its keys, the lock key and the command's.
pub fn guard(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if ctx.is_keys_position_request() {
        guard::declare_keys(ctx, args);
        return Ok(RedisValue::NoReply);
    }
    let [_, key, fence, inner @ ..] = args else {
        return Err(LockError::Arity.into());
    };
    let fence = args::guard_fence(fence.as_slice())?;
    guard::check(ctx, inner)?;
    engine::guard(ctx, key, fence, now(ctx))?;
    if guard::run(ctx, inner)? {
        stats::GUARDED_RUNS.bump();
    }
    // `run` passed the command's reply on.
    Ok(RedisValue::NoReply)
}

/// `LOCK.APPLY`: the state a master propagated (internal; its syntax is `args::apply`'s).
pub fn apply(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if !engine::is_replay(ctx) {
        return Err(LockError::InternalCommand("LOCK.APPLY").into());
    }
    let call = Call::split(args)?;
    let a = args::apply(call.bytes(&mut Slices::default()))?;
    engine::apply(ctx, call.key, &a)?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// `LOCK.HIGHWATER fence saved_ms [EPOCH epoch]`: the fence high-water mark as saved when an
/// AOF rewrite began or the master was promoted, and the master's epoch (internal).
pub fn highwater(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if !engine::is_replay(ctx) {
        return Err(LockError::InternalCommand("LOCK.HIGHWATER").into());
    }
    let rest: Vec<&[u8]> = args.iter().skip(1).map(RedisString::as_slice).collect();
    let (fence, saved_ms, epoch) = args::highwater(&rest)?;
    engine::highwater(ctx, fence, saved_ms, epoch);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

impl From<LockError> for RedisResult {
    fn from(e: LockError) -> Self {
        Err(RedisError::from(e))
    }
}
