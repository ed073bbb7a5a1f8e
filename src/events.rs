//! Server and keyspace events the lock type needs to hear of: the cron tick that backs up
//! the lease-end timer, `SWAPDB`, and the generic keyspace events that move a lock to a key
//! name the expiry index does not know yet.

use std::os::raw::c_void;

use redis_module::{raw, Context, NotifyEvent};

use crate::expiry;
use crate::lock::Lock;
use crate::persistence::LOCK_TYPE;
use crate::waiters;

pub fn subscribe(ctx: &Context) -> Result<(), &'static str> {
    let events = [
        (raw::REDISMODULE_EVENT_CRON_LOOP, on_cron as Callback),
        (raw::REDISMODULE_EVENT_SWAPDB, on_swapdb as Callback),
        (raw::REDISMODULE_EVENT_FLUSHDB, on_flush as Callback),
    ];
    for (id, callback) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        if raw::subscribe_to_server_event(ctx.ctx, event, Some(callback)) == raw::Status::Err {
            return Err("failed to subscribe to a server event");
        }
    }
    Ok(())
}

type Callback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

unsafe extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    _: u64,
    _: *mut c_void,
) {
    expiry::on_cron(&Context::new(ctx));
}

unsafe extern "C" fn on_swapdb(
    _: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    _: u64,
    data: *mut c_void,
) {
    // SAFETY: for the SwapDB event Redis passes a RedisModuleSwapDbInfo that lives for the
    // duration of the callback.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    expiry::swap_dbs(info.dbnum_first, info.dbnum_second);
}

/// A flush freed locks that clients waited on: serve them on the next turn.
unsafe extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    _: u64,
    _: *mut c_void,
) {
    if waiters::has_orphans() {
        expiry::wake_soon(&Context::new(ctx));
    }
}

/// `RENAME`, `MOVE` and `COPY` put a lock under a name (or database) that its expiry entry
/// does not name; index it there, so that its lease still ends on time. The stale entry
/// under the old name is dropped by the sweep.
pub fn on_keyspace_event(ctx: &Context, _: NotifyEvent, event: &str, key: &[u8]) {
    if event == "del" && waiters::has_orphans() {
        // A deleted lock had waiters; the keyspace may not be written from here.
        expiry::wake_soon(ctx);
        return;
    }
    if !matches!(event, "rename_to" | "move_to" | "copy_to" | "restore") {
        return;
    }
    let name = redis_module::RedisString::create_from_slice(ctx.ctx, key);
    let handle = ctx.open_key(&name);
    if let Ok(Some(lock)) = handle.get_value::<Lock>(&LOCK_TYPE) {
        expiry::track(
            ctx,
            crate::commands::selected_db(ctx),
            key,
            None,
            Some(lock.deadline()),
        );
    }
}
