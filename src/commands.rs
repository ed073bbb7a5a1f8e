//! The `LOCK.*` commands: parse the arguments, run the state machine of `lock.rs`, and turn
//! its outcome into a reply, an entry in the expiry index, and the effect propagated to
//! replicas and the AOF.
//!
//! Effects are propagated as state, never as the command: `LOCK.APPLY key token deadline
//! fence` with the absolute Unix-millisecond deadline, and `DEL key` when a lock goes away.
//! A replica or a replayed AOF so holds exactly what the master held, whatever its clock.

use std::ffi::CStr;

use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::args;
use crate::clock::{self, Now};
use crate::config;
use crate::error::LockError;
use crate::expiry::{self, LeaseEnd};
use crate::fence::server_fences;
use crate::keyspace::{
    self, key_in_db, replicate_state, selected_db, signal_modified, LockKey, TokenArg,
};
use crate::lock::{Acquire, Grant, Lock, Vacated};
use crate::persistence::LOCK_TYPE;
use crate::replication;
use crate::stats;
use crate::waiters::{self, Gone, Outcome};

/// The most arguments after the key that any command reads. A longer call is handed to the
/// parser cut to one more than this, which is enough for it to reject it.
const MAX_REST: usize = 5;

/// The key and the remaining arguments of a call, as byte slices.
struct Call<'a> {
    key: &'a RedisString,
    /// The argument after the key, which is the token wherever a command takes one.
    token: Option<&'a RedisString>,
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
            token: rest.first(),
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

    /// The token as propagated: by reference to the client's argument. Only called after
    /// parsing accepted a token.
    fn token_arg(&self, lock: &'a Lock) -> TokenArg<'a> {
        self.token
            .map_or(TokenArg::Bytes(lock.token()), TokenArg::Arg)
    }
}

/// Puts a new lock at an empty key and returns it at its final address, which the expiry
/// index records.
fn store(key: &LockKey, lock: Lock) -> Result<&mut Lock, LockError> {
    let lock = key.store(lock)?;
    stats::lock_created();
    Ok(lock)
}

/// A change that clients can see: counted in `INFO lock`, and announced as a keyspace event
/// of the module class (`notify-keyspace-events` with `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
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

    fn counter(self) -> &'static stats::Counter {
        match self {
            Event::Acquired => &stats::ACQUIRES,
            Event::Extended => &stats::EXTENDS,
            Event::Fenced => &stats::FENCES,
            Event::Granted => &stats::GRANTS,
            Event::Released => &stats::RELEASES,
            Event::Expired => &stats::LEASE_ENDS,
        }
    }
}

fn record(ctx: &Context, event: Event, key: &RedisString) {
    event.counter().bump();
    keyspace::notify(ctx, event.name(), key);
}

/// How a change reaches replicas and the AOF (`Removal` is the same for removals).
#[derive(Clone, Copy)]
enum Propagation<'a> {
    /// `LOCK.APPLY key token deadline fence`: the state, with the holder's token.
    State(TokenArg<'a>),
    /// The client's command itself, for a change made while nothing reads the stream (see
    /// replication.rs): Redis discards it, but counts it towards `save` points.
    Verbatim,
}

/// After `lock` at `key` changed (its deadline was `old`, or it is new): index the new
/// deadline, propagate it, let WATCH see it, and record `event`.
#[allow(clippy::too_many_arguments)]
fn changed(
    ctx: &Context,
    key: &RedisString,
    lock: &Lock,
    propagation: Propagation,
    old: Option<u64>,
    now: Now,
    event: Event,
) {
    expiry::track(ctx, lock, old, Some(lock.deadline()), now);
    match propagation {
        Propagation::State(token) => {
            let deadline = now.to_wall(lock.deadline());
            replicate_state(ctx, key, token, deadline, lock.fence());
        }
        Propagation::Verbatim => ctx.replicate_verbatim(),
    }
    signal_modified(ctx, key);
    record(ctx, event, key);
}

/// `changed`, for a change a client's command made: the token goes by reference to its
/// argument, and the command itself stands in for the state while nothing reads the stream.
/// (A grant, which timers and disconnects make too, always propagates the state.)
fn command_changed(
    ctx: &Context,
    call: &Call,
    lock: &Lock,
    old: Option<u64>,
    now: Now,
    event: Event,
) {
    let propagation = if replication::stream_is_read() {
        Propagation::State(call.token_arg(lock))
    } else {
        Propagation::Verbatim
    };
    changed(ctx, call.key, lock, propagation, old, now, event);
}

/// Grants are delivered like any other change: indexed, propagated with the new holder's
/// deadline and fence, and replied to the waiter on the next event-loop turn.
fn deliver(
    ctx: &Context,
    key: &RedisString,
    lock: &Lock,
    grant: Grant,
    old: Option<u64>,
    now: Now,
) {
    let state = Propagation::State(TokenArg::Bytes(lock.token()));
    changed(ctx, key, lock, state, old, now, Event::Granted);
    if let Some(Some(wait_deadline)) = waiters::wake(grant.id, Outcome::Granted(grant.fence)) {
        expiry::untrack_wait(grant.id, wait_deadline);
    }
}

/// Ends `lock`'s lease if it is due, exactly as the sweep would: counted and announced, then
/// granted to the head of the queue or the key removed. True if it ended.
fn end_if_due(ctx: &Context, key: &LockKey, name: &RedisString, lock: &mut Lock, now: Now) -> bool {
    let old = lock.deadline();
    let Some(v) = lock.end_lease(now, &mut server_fences()) else {
        return false;
    };
    record(ctx, Event::Expired, name);
    vacated(ctx, key, name, lock, v, old, now, Removal::Del);
    true
}

/// The lock at `key` as of `now`, for a command about to act on it. A lease that ended
/// before the sweep came to it is ended first, so that no command slips in ahead of the
/// queue and every lease end is counted once.
fn current_lock<'k>(
    ctx: &Context,
    key: &'k LockKey,
    name: &RedisString,
    now: Now,
) -> Result<Option<&'k mut Lock>, LockError> {
    let Some(lock) = key.lock()? else {
        return Ok(None);
    };
    if end_if_due(ctx, key, name, lock, now) {
        return key.lock(); // granted to a waiter, or gone
    }
    Ok(Some(lock))
}

/// How a lock's removal reaches replicas and the AOF.
#[derive(Clone, Copy)]
enum Removal {
    /// `DEL key`: for removals no client command asked for (lease end, a withdrawn grant).
    Del,
    /// The `LOCK.RELEASE` itself, which replays to the same removal (see `release`). It
    /// spares `RedisModule_Replicate`'s command lookup, a third of the cost of a release.
    Verbatim,
}

/// What follows a holder leaving (release, lease end, a withdrawn grant).
#[allow(clippy::too_many_arguments)]
fn vacated(
    ctx: &Context,
    key: &LockKey,
    name: &RedisString,
    lock: &Lock,
    v: Vacated,
    old: u64,
    now: Now,
    removal: Removal,
) {
    match v {
        Vacated::Granted(grant) => deliver(ctx, name, lock, grant, Some(old), now),
        Vacated::Free => {
            expiry::remove_and_delete(lock, old, || key.delete());
            match removal {
                Removal::Del => keyspace::replicate_del(ctx, name),
                Removal::Verbatim => ctx.replicate_verbatim(),
            }
            signal_modified(ctx, name);
        }
    }
}

fn from_master_or_aof(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

fn may_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING)
}

/// `LOCK.ACQUIRE key token ttl [WAIT timeout]`
pub fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let a = args::acquire(call.rest(), config::max_ttl())?;
    wake_orphans();
    let now = clock::now();
    let key = LockKey::open(ctx, call.key);
    let Some(lock) = current_lock(ctx, &key, call.key, now)? else {
        let db = selected_db(ctx);
        let (lock, fence) = Lock::acquired(
            call.key.as_slice(),
            db,
            a.token,
            a.ttl,
            now,
            &mut server_fences(),
        );
        let lock = store(&key, lock)?;
        command_changed(ctx, &call, lock, None, now, Event::Acquired);
        return Ok(RedisValue::Integer(fence as i64));
    };
    // Inside MULTI or a script, WAIT does not block: the reply is as without it.
    let wait_as = match a.wait {
        Some(timeout) if lock.must_wait(a.token, now) && may_block(ctx) => {
            let deadline = (timeout > 0).then(|| now.mono + timeout.saturating_mul(1000));
            let id = waiters::block(ctx, selected_db(ctx), call.key.as_slice(), deadline);
            if let Some(deadline) = deadline {
                expiry::track_wait(ctx, id, deadline, now);
            }
            Some(id)
        }
        _ => None,
    };
    let old = lock.deadline();
    let (fence, event) = match lock.acquire(a.token, a.ttl, wait_as, now, &mut server_fences()) {
        Acquire::Busy => {
            stats::CONTENDED.bump();
            return Ok(RedisValue::Null);
        }
        Acquire::Queued => {
            stats::CONTENDED.bump();
            // Blocked: the reply comes when the lock is granted or the wait times out.
            return Ok(RedisValue::NoReply);
        }
        Acquire::Granted(fence) => (fence, Event::Acquired),
        Acquire::Renewed(fence) => (fence, Event::Extended),
    };
    command_changed(ctx, &call, lock, Some(old), now, event);
    Ok(RedisValue::Integer(fence as i64))
}

/// `LOCK.RELEASE key token`
pub fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let token = args::token_only(call.rest())?;
    wake_orphans();
    let now = clock::now();
    let key = LockKey::open(ctx, call.key);
    if replication::may_replay() && from_master_or_aof(ctx) {
        // A release the master propagated: it succeeded there, and this server's clock
        // (a replica's, or a restart's) must not overrule it. Nobody waits here.
        let Some(lock) = key.lock()?.filter(|l| l.token() == token) else {
            return Ok(RedisValue::Integer(0));
        };
        let old = lock.deadline();
        vacated(
            ctx,
            &key,
            call.key,
            lock,
            Vacated::Free,
            old,
            now,
            Removal::Verbatim,
        );
        return Ok(RedisValue::Integer(1));
    }
    let Some(lock) = current_lock(ctx, &key, call.key, now)? else {
        return Ok(RedisValue::Integer(0));
    };
    let old = lock.deadline();
    let Some(v) = lock.release(token, now, &mut server_fences()) else {
        return Ok(RedisValue::Integer(0));
    };
    record(ctx, Event::Released, call.key);
    vacated(ctx, &key, call.key, lock, v, old, now, Removal::Verbatim);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.EXTEND key token ttl`
pub fn extend(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let (token, ttl) = args::extend(call.rest(), config::max_ttl())?;
    wake_orphans();
    let now = clock::now();
    let key = LockKey::open(ctx, call.key);
    let Some(lock) = current_lock(ctx, &key, call.key, now)? else {
        return Ok(RedisValue::Integer(0));
    };
    let old = lock.deadline();
    if !lock.extend(token, ttl, now) {
        return Ok(RedisValue::Integer(0));
    }
    command_changed(ctx, &call, lock, Some(old), now, Event::Extended);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FENCE key token`
pub fn fence(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    let token = args::token_only(call.rest())?;
    wake_orphans();
    let now = clock::now();
    let key = LockKey::open(ctx, call.key);
    let Some(lock) = current_lock(ctx, &key, call.key, now)? else {
        return Ok(RedisValue::Null);
    };
    let old = lock.deadline();
    match lock.new_fence(token, now, &mut server_fences()) {
        Some(fence) => {
            command_changed(ctx, &call, lock, Some(old), now, Event::Fenced);
            Ok(RedisValue::Integer(fence as i64))
        }
        None => Ok(RedisValue::Null),
    }
}

/// `LOCK.INFO key`: a map of holder, fence, ttl and waiters (a flat array under RESP2).
pub fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = Call::split(args)?;
    if call.len != 0 {
        return Err(LockError::Arity.into());
    }
    let key = ctx.open_key(call.key);
    let lock = key
        .get_value::<Lock>(&LOCK_TYPE)
        .map_err(|_| LockError::WrongType)?;
    let now = clock::now();
    // An ended lease with nobody waiting is a removed key, also in the moment before the
    // sweep (or, on a replica, the master's DEL) takes it away.
    let Some(info) = lock
        .filter(|l| l.is_held(now) || l.waiter_count() > 0)
        .map(|l| l.info(now))
    else {
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
        ("waiters", RedisValue::Integer(info.waiters as i64)),
    ];
    for (name, value) in fields {
        // Bulk strings, as HGETALL replies field names.
        raw::reply_with_string_buffer(ctx.ctx, name.as_ptr().cast(), name.len());
        ctx.reply(Ok(value));
    }
    Ok(RedisValue::NoReply)
}

/// `LOCK.APPLY key token deadline fence`: the state a master propagated, replayed from the
/// replication link or the AOF. Clients may not send it: it would bypass the lock.
pub fn apply(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if !from_master_or_aof(ctx) {
        return Err(LockError::InternalCommand.into());
    }
    let call = Call::split(args)?;
    let a = args::apply(call.rest())?;
    let now = clock::now();
    if a.deadline_unix_ms > now.wall().saturating_add(config::MAX_TTL_LIMIT) {
        return Err(LockError::BadApply("deadline").into());
    }
    let deadline = now.to_mono(a.deadline_unix_ms);
    let key = LockKey::open(ctx, call.key);
    let (lock, old) = match key.lock()? {
        Some(lock) => {
            let old = lock.deadline();
            lock.overwrite(a.token, deadline, a.fence);
            (lock, Some(old))
        }
        None => {
            let db = selected_db(ctx);
            let lock = Lock::restored(call.key.as_slice(), db, a.token, deadline, a.fence);
            (store(&key, lock)?, None)
        }
    };
    server_fences().observe(a.fence);
    expiry::track(ctx, lock, old, Some(deadline), now);
    ctx.replicate_verbatim();
    signal_modified(ctx, call.key);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Called by the expiry sweep for the lock at address `lock_at_address`, found under
/// `name`, whose lease deadline came up.
pub fn end_lease(ctx: &Context, name: &RedisString, lock_at_address: usize, now: Now) -> LeaseEnd {
    let key = LockKey::open(ctx, name);
    let Ok(Some(lock)) = key.lock() else {
        return LeaseEnd::Stale;
    };
    if !std::ptr::eq(lock, lock_at_address as *const Lock) || lock.is_held(now) {
        return LeaseEnd::Stale;
    }
    if ctx
        .get_flags()
        .intersects(ContextFlags::SLAVE | ContextFlags::LOADING)
    {
        return LeaseEnd::Deferred;
    }
    end_if_due(ctx, &key, name, lock, now);
    LeaseEnd::Ended
}

/// Takes waiter `id` out of its lock's queue and wakes it with `outcome`; false if it was
/// not waiting any more (granted or gone).
fn dequeue(ctx: &Context, id: u64, outcome: Outcome) -> bool {
    let Some((db, key)) = waiters::key_of(id) else {
        return false;
    };
    if let Some(name) = key_in_db(ctx, db, &key) {
        if let Ok(Some(lock)) = LockKey::open(ctx, &name).lock() {
            lock.remove_waiter(id);
        }
    }
    match waiters::wake(id, outcome) {
        Some(Some(deadline)) => expiry::untrack_wait(id, deadline),
        Some(None) => {}
        None => return false,
    }
    true
}

/// The sweep found waiter `id`'s wait deadline due: it leaves the queue and gets null.
pub fn wait_timed_out(ctx: &Context, id: u64) {
    if dequeue(ctx, id, Outcome::TimedOut) {
        stats::WAIT_TIMEOUTS.bump();
    }
}

/// This server became a replica: nobody can be granted a lock here any more. Redis 7.0
/// unblocks blocked clients itself then; Valkey 9 leaves a module's to the module.
pub fn unblock_all_waiters(ctx: &Context) {
    for id in waiters::waiting() {
        dequeue(ctx, id, Outcome::Demoted);
    }
}

/// A blocked client went away: out of the queue, or, if it had been granted the lock but
/// not told, the grant is withdrawn and passed on.
pub fn waiter_gone(ctx: &Context, gone: Gone) {
    if let Some(deadline) = gone.wait_deadline {
        expiry::untrack_wait(gone.id, deadline);
    }
    let Some(name) = key_in_db(ctx, gone.db, &gone.key) else {
        return;
    };
    let key = LockKey::open(ctx, &name);
    let Ok(Some(lock)) = key.lock() else {
        return;
    };
    let Some(fence) = gone.undelivered else {
        lock.remove_waiter(gone.id);
        return;
    };
    let now = clock::now();
    let old = lock.deadline();
    if let Some(v) = lock.withdraw(fence, now, &mut server_fences()) {
        vacated(ctx, &key, &name, lock, v, old, now, Removal::Del);
    }
}

/// Answers the waiters of locks that were deleted under them with null, at once. They are
/// not granted the key: a deletion may be the source side of a `MIGRATE` or a slot handed to
/// another node, where the lock lives on, and Redis 7.0 tells a module nothing that would set
/// a move apart from a `DEL`. A waiter that retries gets the key if it is free here, or is
/// redirected to where it went.
pub fn wake_orphans() {
    for id in waiters::take_orphans() {
        if let Some(Some(deadline)) = waiters::wake(id, Outcome::TimedOut) {
            expiry::untrack_wait(id, deadline);
        }
    }
}

impl From<LockError> for RedisResult {
    fn from(e: LockError) -> Self {
        Err(RedisError::from(e))
    }
}
