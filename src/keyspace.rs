//! The few keyspace calls the crate has no safe wrapper for: which database a context has
//! selected, selecting one from a callback, and telling `WATCH` a key changed.

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
