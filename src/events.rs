//! Server and keyspace events the lock type needs to hear of: the cron tick that backs up
//! the lease-end timer, `SWAPDB`, the forks, loads and role changes after which something
//! may read the propagated effects (`replication.rs`), and the generic keyspace events that
//! move a lock to a key name the expiry index does not know yet.

use std::os::raw::c_void;

use redis_module::server_events::{FlushSubevent, LoadingSubevent, ServerRole};
use redis_module::{raw, Context, NotifyEvent};
use redis_module_macros::{
    cron_event_handler, flush_event_handler, loading_event_handler, role_changed_event_handler,
};

use crate::expiry;
use crate::keyspace::LockKey;
use crate::replication;
use crate::waiters;

/// `SWAPDB` and `FORK_CHILD` are the server events the crate has no handler list for.
pub fn subscribe(ctx: &Context) -> Result<(), &'static str> {
    let swapdb = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_SWAPDB,
        dataver: 1,
    };
    if raw::subscribe_to_server_event(ctx.ctx, swapdb, Some(on_swapdb)) == raw::Status::Err {
        return Err("failed to subscribe to the SWAPDB event");
    }
    let fork = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FORK_CHILD,
        dataver: 1,
    };
    if raw::subscribe_to_server_event(ctx.ctx, fork, Some(on_fork)) == raw::Status::Err {
        return Err("failed to subscribe to the FORK_CHILD event");
    }
    Ok(())
}

/// The backstop for a lease-end timer that a wall-clock step delayed (the cron runs on the
/// event loop's monotonic timers), and the replica's pruning of the expiry index.
#[cron_event_handler]
fn on_cron(ctx: &Context, _hz: u64) {
    crate::clock::sync_wall();
    expiry::on_cron(ctx);
    replication::on_cron(ctx);
}

/// A master that becomes a replica answers its waiters, as Redis does for its own blocked
/// clients: none of them can be granted a lock here any more.
#[role_changed_event_handler]
fn on_role_change(ctx: &Context, role: ServerRole) {
    replication::role_changed(role == ServerRole::Replica);
    if role == ServerRole::Replica {
        crate::commands::unblock_all_waiters(ctx);
    }
}

/// A flush freed locks that clients waited on: answer them on the next turn.
#[flush_event_handler]
fn on_flush(ctx: &Context, subevent: FlushSubevent) {
    if subevent == FlushSubevent::Ended && waiters::has_orphans() {
        expiry::wake_soon(ctx);
    }
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, subevent: LoadingSubevent) {
    replication::loading(matches!(
        subevent,
        LoadingSubevent::RdbStarted | LoadingSubevent::AofStarted | LoadingSubevent::ReplStarted
    ));
}

/// A child was forked: a replica's full synchronisation or an AOF rewrite may have begun.
/// Redis fires this in the parent right after the fork, before it runs another command.
unsafe extern "C" fn on_fork(
    _: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    subevent: u64,
    _: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        replication::reader_may_have_appeared();
    }
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

/// `RENAME`, `MOVE` and `COPY` put a lock under a name or database it does not know yet; it
/// keeps its own, for the lease-end sweep to find it by.
pub fn on_keyspace_event(ctx: &Context, _: NotifyEvent, event: &str, key: &[u8]) {
    if event == "del" && waiters::has_orphans() {
        // A deleted lock had waiters; they are answered from the event loop, not from here.
        expiry::wake_soon(ctx);
        return;
    }
    if !matches!(event, "rename_to" | "move_to" | "copy_to" | "restore") {
        return;
    }
    let name = redis_module::RedisString::create_from_slice(ctx.ctx, key);
    let handle = LockKey::open(ctx, &name);
    if let Ok(Some(lock)) = handle.lock() {
        lock.relocate(key, crate::keyspace::selected_db(ctx));
        expiry::ensure_armed(ctx);
    }
}
