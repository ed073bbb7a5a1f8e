//! What the server tells the module, passed on to the engine: server events (the cron tick,
//! flushes, `SWAPDB`, role changes, loads and forks, replicas that go offline, the edges of
//! the loop's sleep), keyspace events, the callbacks of blocked clients, and the `INFO lock`
//! section. Each is a thin adapter.

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{
    raw, Context, ContextFlags, InfoContext, NotifyEvent, RedisResult, RedisString, RedisValue,
};
use redis_module_macros::{
    cron_event_handler, info_command_handler, loading_event_handler, role_changed_event_handler,
};

use crate::blocked::{self, HandleKey};
use crate::engine::{self, Arrival, Reply, Unblocked};
use crate::keyspace::{self, selected_db};
use crate::pause::{self, Cause};
use crate::{clock, describe, guard, replication, stall, stats};

/// Subscribes to what the crate has no handler list for: `FLUSHDB` (with the database it
/// flushes), `SWAPDB`, `FORK_CHILD`, modules loaded and unloaded, replicas that go offline,
/// the loop going to sleep and waking up, and the keyspace events that move a key or evict
/// it.
pub fn subscribe(ctx: &Context) -> Result<(), &'static str> {
    let events: [(u64, raw::RedisModuleEventCallback, &str); 7] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush), "FLUSHDB"),
        (
            raw::REDISMODULE_EVENT_PERSISTENCE,
            Some(on_persistence),
            "PERSISTENCE",
        ),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb), "SWAPDB"),
        (
            raw::REDISMODULE_EVENT_FORK_CHILD,
            Some(on_fork),
            "FORK_CHILD",
        ),
        (
            raw::REDISMODULE_EVENT_MODULE_CHANGE,
            Some(on_module_change),
            "MODULE_CHANGE",
        ),
        (
            raw::REDISMODULE_EVENT_REPLICA_CHANGE,
            Some(on_replica_change),
            "REPLICA_CHANGE",
        ),
        (
            raw::REDISMODULE_EVENT_EVENTLOOP,
            Some(on_event_loop),
            "EVENTLOOP",
        ),
    ];
    for (id, callback, _name) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        if raw::subscribe_to_server_event(ctx.ctx, event, callback) == raw::Status::Err {
            return Err("failed to subscribe to a server event");
        }
    }
    // A lock leaving its key is seen through the type's unlink callback; these events only
    // tell where a moved lock arrived, and which removals were evictions.
    let classes = NotifyEvent::GENERIC | NotifyEvent::EVICTED;
    // SAFETY: ctx.ctx is the OnLoad context; the callback has the signature the API expects.
    let status = unsafe {
        raw::RedisModule_SubscribeToKeyspaceEvents.unwrap()(
            ctx.ctx,
            classes.bits(),
            Some(on_key_event),
        )
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err("failed to subscribe to keyspace events");
    }
    // SAFETY: ctx.ctx is the OnLoad context; the callback has the signature the API expects.
    // NOSELF: the module's own calls are not scripts.
    let filter = unsafe {
        raw::RedisModule_RegisterCommandFilter.unwrap()(
            ctx.ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    if filter.is_null() {
        return Err("failed to register the command filter");
    }
    blocked::install(blocked::Callbacks {
        reply: Some(on_reply),
        timeout: Some(on_unblock),
        disconnect: Some(on_disconnect),
    });
    Ok(())
}

/// The backstop for a lease-end timer that a wall-clock step delayed (the cron runs on the
/// event loop's monotonic timers).
#[cron_event_handler]
fn on_cron(ctx: &Context, _hz: u64) {
    crate::clock::sync_wall();
    engine::on_cron(ctx);
    replication::on_cron(ctx);
}

/// A master that becomes a replica answers its waiters, as Redis does for its own blocked
/// clients; a replica that becomes a master takes a new fence epoch (fence.rs, "Epochs").
#[role_changed_event_handler]
fn on_role_change(ctx: &Context, role: ServerRole) {
    replication::role_changed(role == ServerRole::Replica);
    if role == ServerRole::Replica {
        engine::demoted();
    } else {
        engine::promoted(ctx);
    }
}

#[loading_event_handler]
fn on_loading(_ctx: &Context, subevent: LoadingSubevent) {
    replication::loading(matches!(
        subevent,
        LoadingSubevent::RdbStarted | LoadingSubevent::AofStarted | LoadingSubevent::ReplStarted
    ));
}

/// A flush is starting (`FLUSHDB`, `FLUSHALL`, `DEBUG RELOAD`, a replica's full sync): its
/// waiters are answered now, before any background free of the values.
unsafe extern "C" fn on_flush(
    _: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START {
        return;
    }
    // SAFETY: for the FlushDB event Redis passes a RedisModuleFlushInfoV1 that lives for the
    // duration of the callback.
    let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfoV1>() };
    engine::flushed((info.dbnum >= 0).then_some(info.dbnum));
}

/// An AOF file is being written in this process (at startup, when the AOF is created).
/// A background rewrite announces itself in its child, so the fork stands for it.
unsafe extern "C" fn on_persistence(
    ctx: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    subevent: u64,
    _: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_AOF_START {
        let ctx = Context::new(ctx);
        if !rdb_preamble(&ctx) {
            engine::aof_rewrite_started(&ctx);
        }
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
    engine::swapped(info.dbnum_first, info.dbnum_second);
}

/// A child was forked: a replica's full synchronisation or an AOF rewrite may have begun.
/// Redis fires this in the parent right after the fork, before it runs another command, and
/// after it opened the new AOF file a rewrite appends to.
unsafe extern "C" fn on_fork(
    ctx: *mut raw::RedisModuleCtx,
    _: raw::RedisModuleEvent,
    subevent: u64,
    _: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        replication::reader_may_have_appeared();
        let ctx = Context::new(ctx);
        if aof_rewrite_without_preamble(&ctx) {
            engine::aof_rewrite_started(&ctx);
        }
    }
}

/// Whether the child just forked rewrites the AOF, which is on, without an RDB preamble:
/// the one file that starts with no aux data, so the high-water mark must follow it (see
/// `engine::aof_rewrite_started`). An RDB (`BGSAVE`, a save point, a replica's full sync)
/// and a preamble carry the mark in their aux data already, and a mark propagated for them
/// would count as a change: an idle server would save, and fork, for ever. Asked of the
/// server on forks only, which are rare: the context flags (AOF on), `INFO persistence`
/// (the child is an AOF rewrite: Redis sets the child's type before this event), and the
/// configuration.
fn aof_rewrite_without_preamble(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::AOF)
        && info_persistence(ctx, c"aof_rewrite_in_progress") == Some(1)
        && !rdb_preamble(ctx)
}

/// A numeric field of `INFO persistence`; `None` where the server has no such field.
fn info_persistence(ctx: &Context, field: &CStr) -> Option<i64> {
    // SAFETY: ctx.ctx is the live context of the event; the section name is NUL-terminated.
    let data = unsafe { raw::RedisModule_GetServerInfo.unwrap()(ctx.ctx, c"persistence".as_ptr()) };
    if data.is_null() {
        return None;
    }
    let mut err: c_int = 0;
    // SAFETY: data is live until it is freed below; the field name is NUL-terminated.
    let value = unsafe {
        raw::RedisModule_ServerInfoGetFieldSigned.unwrap()(data, field.as_ptr(), &mut err)
    };
    // SAFETY: data came from GetServerInfo with this context and is freed once.
    unsafe { raw::RedisModule_FreeServerInfo.unwrap()(ctx.ctx, data) };
    (err == 0).then_some(value)
}

/// `aof-use-rdb-preamble` is on (the default; also if the server does not say).
fn rdb_preamble(ctx: &Context) -> bool {
    match ctx.call("CONFIG", &["GET", "aof-use-rdb-preamble"][..]) {
        Ok(RedisValue::Array(pair)) => {
            !matches!(pair.get(1), Some(RedisValue::SimpleString(v)) if v == "no")
        }
        _ => true,
    }
}

/// A generic or eviction keyspace event: a lock may have arrived under a new name, or been
/// evicted.
unsafe extern "C" fn on_key_event(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: Redis passes a NUL-terminated event name and a live key name for the duration
    // of the callback; the key is borrowed, not released.
    let (event, name) = unsafe {
        (
            CStr::from_ptr(event).to_bytes(),
            ManuallyDrop::new(RedisString::from_redis_module_string(ctx, key)),
        )
    };
    let ctx = Context::new(ctx);
    match event {
        b"rename_to" => engine::relocated(&ctx, &name, Arrival::Moved),
        b"restore" => engine::relocated(&ctx, &name, Arrival::Restored),
        b"move_from" => keyspace::remember_source_db(selected_db(&ctx)),
        b"move_to" | b"copy_to" => {
            let arrival = match event {
                b"move_to" => Arrival::Moved,
                _ => Arrival::New,
            };
            engine::relocated(&ctx, &name, arrival);
            keyspace::restore_source_db(&ctx);
        }
        b"evicted" => engine::evicted(selected_db(&ctx), name.as_slice()),
        _ => {}
    }
    raw::REDISMODULE_OK as c_int
}

/// Every command the server is about to run: the start of a script or transaction is noted,
/// so that leases are judged inside it at the time it began.
unsafe extern "C" fn on_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: Redis passes a live filter context; argument 0 is the command name, valid for
    // the duration of the callback.
    let name = unsafe { raw::RedisModule_CommandFilterArgGet.unwrap()(filter, 0) };
    if name.is_null() {
        return;
    }
    let name = RedisString::string_as_slice(name);
    const UNITS: [&[u8]; 7] = [
        b"exec",
        b"eval",
        b"evalsha",
        b"eval_ro",
        b"evalsha_ro",
        b"fcall",
        b"fcall_ro",
    ];
    if name.len() <= 10 && UNITS.iter().any(|u| u.eq_ignore_ascii_case(name)) {
        crate::clock::unit_starts();
    }
}

/// A waiter's reply is due: granted, null, or the error of a demoted master. Or an
/// observer's: the key's `LOCK.INFO` now.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let id = blocked::woken_id(ctx);
    if engine::is_observer(id) {
        match engine::deliver_observation(id) {
            Some(key) => reply_observed(&Context::new(ctx), &key),
            None => {
                raw::reply_with_null(ctx);
            }
        }
        return raw::REDISMODULE_OK as c_int;
    }
    match engine::deliver(id) {
        Reply::Granted(fence) => {
            raw::reply_with_long_long(ctx, fence as i64);
        }
        Reply::Null => {
            raw::reply_with_null(ctx);
        }
        Reply::Demoted => raw::reply_with_error(
            ctx,
            c"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
                .as_ptr(),
        ),
    }
    raw::REDISMODULE_OK as c_int
}

/// `CLIENT UNBLOCK` (without `ERROR`): a waiter gets null, as a `BLPOP` does; an observer
/// gets the key's `LOCK.INFO`, as at its timeout.
unsafe extern "C" fn on_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    match engine::unblocked_by_client(&context, blocked::handle_of(ctx)) {
        Unblocked::Observer(key) => reply_observed(&context, &key),
        Unblocked::Waiter => {
            raw::reply_with_null(ctx);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// An observer's reply: the `LOCK.INFO` of the key it observed, in the database its client
/// has selected (it cannot select another while blocked).
fn reply_observed(ctx: &Context, key: &[u8]) {
    let name = RedisString::create_from_slice(ctx.ctx, key);
    let reply = describe::info(ctx, &name, crate::clock::now());
    if !matches!(reply, Ok(RedisValue::NoReply)) {
        ctx.reply(reply);
    }
}

/// A waiter disconnected, or `CLIENT UNBLOCK … ERROR` ended its wait (the server replies
/// the error itself).
unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    engine::blocked_client_left(&Context::new(ctx), HandleKey::from_raw(bc));
}

/// A module was loaded or unloaded: the commands `LOCK.GUARD` may run can have changed.
unsafe extern "C" fn on_module_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    guard::forget_commands();
}

/// A replica of this server came online or went offline. The server fires `OFFLINE` from
/// inside `freeClient`, only for a replica that was online (one promoted, killed, or
/// reconfigured to follow another master). `CLIENT PAUSE` called from there takes effect
/// (tests/replication/replica_loss.rs, on Redis 7.0.15).
unsafe extern "C" fn on_replica_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_REPLICA_CHANGE_OFFLINE {
        pause::writes(&Context::new(ctx), Cause::ReplicaLoss);
    }
}

/// The loop is about to sleep, or woke up: a stall since the last of these pauses writes at
/// once, before the turn runs a command (`stall.rs`).
unsafe extern "C" fn on_event_loop(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    if let Some(ms) = stall::edge(|| clock::now().mono) {
        pause::writes(&Context::new(ctx), Cause::Stall(ms));
    }
}

/// `INFO lock`: the module's default section, so its fields read `lock_held`, `lock_acquires`…
#[info_command_handler]
fn info_section(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let fields = [
        ("held", stats::locks()),
        ("waiting_clients", engine::waiting_clients() as i64),
        ("observing_clients", engine::observing_clients() as i64),
        ("acquires", stats::ACQUIRES.get()),
        ("contended_acquires", stats::CONTENDED.get()),
        ("releases", stats::RELEASES.get()),
        ("extends", stats::EXTENDS.get()),
        ("fences", stats::FENCES.get()),
        ("fence_epoch", engine::with_fences(|f| f.epoch()) as i64),
        ("lease_ends", stats::LEASE_ENDS.get()),
        ("grants", stats::GRANTS.get()),
        ("wait_timeouts", stats::WAIT_TIMEOUTS.get()),
        ("observers_answered", stats::OBSERVERS_ANSWERED.get()),
        ("evictions", stats::EVICTIONS.get()),
        ("guarded_runs", stats::GUARDED_RUNS.get()),
        ("guarded_refusals", stats::GUARDED_REFUSALS.get()),
        ("replica_loss_pauses", stats::REPLICA_LOSS_PAUSES.get()),
        ("stalls", stats::STALLS.get()),
        ("stall_refusals", stats::STALL_REFUSALS.get()),
        // 0 on a master with no replica, backlog or AOF (see replication.rs).
        ("propagating", i64::from(replication::stream_is_read())),
    ];
    // An empty section name is the module's default section, `# lock`.
    let mut section = ctx.builder().add_section("");
    for (name, value) in fields {
        section = section.field(name, value)?;
    }
    section.build_section()?.build_info()?;
    Ok(())
}
