//! How a lock is described to clients: `LOCK.INFO`'s map, which `LOCK.OBSERVE` answers
//! too, and `LOCK.HOLDERS`' array. Written straight to the reply API, as `GET` is: a
//! `RedisValue` per field cost a third more.

use std::os::raw::c_long;

use redis_module::{raw, Context, RedisResult, RedisString, RedisValue};

use crate::clock::Now;
use crate::engine;
use crate::keyspace::{selected_db, ReadKey};
use crate::lock::{Lock, Mode};

/// Replies with what `reply` says of the lock at `name`, given the time and the clients
/// queued for it; null if there is none.
fn describe(
    ctx: &Context,
    name: &RedisString,
    now: Now,
    reply: impl FnOnce(&Lock, usize),
) -> RedisResult {
    let key = ReadKey::open(ctx, name);
    let Some(lock) = key.lock()? else {
        return Ok(RedisValue::Null);
    };
    let waiters = engine::queued_at(selected_db(ctx), name.as_slice());
    // A lock nobody holds and nobody waits for is a removed key, also in the moment before
    // the sweep (or, on a replica, the master's DEL) takes it away.
    if !lock.is_held(now) && waiters == 0 {
        return Ok(RedisValue::Null);
    }
    reply(lock, waiters);
    Ok(RedisValue::NoReply)
}

/// `LOCK.INFO`'s reply for the lock at `name`: holder, fence, ttl, waiters, mode and holders,
/// a map (a flat array under RESP2).
pub fn info(ctx: &Context, name: &RedisString, now: Now) -> RedisResult {
    describe(ctx, name, now, |lock, waiters| {
        let info = lock.info(now);
        raw::reply_with_map(ctx.ctx, 6);
        // Bulk strings, as HGETALL replies field names (and the mode).
        bulk(ctx, b"holder");
        match info.holder {
            Some(token) => bulk(ctx, token),
            None => {
                raw::reply_with_null(ctx.ctx);
            }
        }
        bulk(ctx, b"fence");
        int(ctx, info.fence as i64);
        bulk(ctx, b"ttl");
        int(ctx, info.ttl);
        bulk(ctx, b"waiters");
        int(ctx, waiters as i64);
        bulk(ctx, b"mode");
        bulk(ctx, info.mode.map_or("none", Mode::name).as_bytes());
        bulk(ctx, b"holders");
        int(ctx, info.holders as i64);
    })
}

/// `LOCK.HOLDERS`' reply: `[token, fence, ttl, mode]` for each live hold, in grant order.
pub fn holders(ctx: &Context, name: &RedisString, now: Now) -> RedisResult {
    describe(ctx, name, now, |lock, _| {
        let mode = lock.mode().name();
        let live: Vec<_> = lock.holds().filter(|h| h.is_live(now)).collect();
        raw::reply_with_array(ctx.ctx, live.len() as c_long);
        for h in live {
            raw::reply_with_array(ctx.ctx, 4);
            bulk(ctx, h.token);
            int(ctx, h.fence as i64);
            int(ctx, h.ttl_ms(now));
            bulk(ctx, mode.as_bytes());
        }
    })
}

fn bulk(ctx: &Context, bytes: &[u8]) {
    raw::reply_with_string_buffer(ctx.ctx, bytes.as_ptr().cast(), bytes.len());
}

fn int(ctx: &Context, n: i64) {
    raw::reply_with_long_long(ctx.ctx, n);
}
