//! The few keyspace calls the crate has no safe wrapper for: which database a context has
//! selected, selecting one from a callback, telling `WATCH` a key changed, and propagating
//! a lock's state without building Rust strings for it.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong};

use redis_module::{raw, Context, RedisString};

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx.ctx is the live context of the running command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

/// Selects `db` in a callback's context and names `key` in it, for a callback (timer,
/// disconnect) that acts on a key it remembered. `None` if the database no longer exists
/// (a restart with fewer `databases`).
pub fn key_in_db(ctx: &Context, db: i32, key: &[u8]) -> Option<RedisString> {
    // SAFETY: ctx.ctx is the live context of this callback; SelectDb only fails for a
    // database index out of range.
    let status = unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) };
    (status == raw::REDISMODULE_OK as i32).then(|| RedisString::create_from_slice(ctx.ctx, key))
}

/// The module sets NO_IMPLICIT_SIGNAL_MODIFIED (a command that changes nothing must not
/// abort a `WATCH`), so every change is signalled here.
pub fn signal_modified(ctx: &Context, key: &RedisString) {
    // SAFETY: both pointers are live for this call.
    unsafe {
        raw::RedisModule_SignalModifiedKey.unwrap()(ctx.ctx, key.inner);
    }
}

/// Propagates `LOCK.APPLY key token deadline fence` to replicas and the AOF. The crate's
/// `replicate` wants every argument as a `RedisString`; formatting the numbers through it
/// cost several allocations per command on the hot path (measured), so this lets Redis
/// format them.
pub fn replicate_state(ctx: &Context, key: &RedisString, token: &[u8], deadline: i64, fence: u64) {
    // SAFETY: the format "sbll" matches the arguments that follow: a RedisModuleString, a
    // buffer as pointer and length, and two long longs. Redis copies them before returning.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"LOCK.APPLY".as_ptr(),
            c"sbll".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            deadline as c_longlong,
            fence as c_longlong,
        );
    }
}

/// Propagates `DEL key`.
pub fn replicate_del(ctx: &Context, key: &RedisString) {
    // SAFETY: the format "s" matches the one RedisModuleString argument.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
    }
}

/// A keyspace event of the module class. The crate's wrapper allocates a C string for the
/// event name on every call; these names are static.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: ctx.ctx and key.inner are live; `event` is NUL-terminated and outlives the
    // call (Redis copies what it publishes).
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
            ctx.ctx,
            raw::NotifyEvent::MODULE.bits() as c_int,
            event.as_ptr(),
            key.inner,
        );
    }
}
