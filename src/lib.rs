//! redis-lock: a Redis module that makes the distributed lock a native data type.
//!
//! Four floors; imports run downwards only (docs/architecture.md draws them and says which
//! file owns what).
//!
//! - Pure logic, no server: `lock/` (the lock as a state machine given the time), `fence.rs`
//!   (fences that never go backwards), `args.rs` and `error.rs` (arguments and error
//!   replies), `clock.rs` (the two clocks), `stall.rs` (the event loop's stalls),
//!   `block_set.rs`, `hashing.rs`, `config.rs`, and the engine's bookkeeping:
//!   `engine/rules.rs` (the hand-off rules), `engine/waiters.rs`, `engine/observers.rs`.
//! - Server primitives: `keyspace.rs` (`ReadKey`, and `LockKey`, the one way to change a
//!   lock, which keeps its lease-index entry in step), `leases.rs` (the lease index),
//!   `blocked.rs` (blocked clients, woken once), `propagate.rs`, `replication.rs`, `stats.rs`,
//!   `pause.rs` (the write pauses of a master that may have been replaced), `panic_log.rs`.
//! - `engine/`: owns all module state and makes every change to a lock and every hand-off:
//!   `state.rs`, then `effects.rs` (an operation's frame and effects), then `handoff.rs`,
//!   then the entry points `ops.rs`, `observe.rs`, `server.rs`.
//! - Adapters the server calls: `command_table.rs` (each command described once),
//!   `commands.rs`, `describe.rs` (`LOCK.INFO`/`LOCK.HOLDERS` replies), `events.rs` (server
//!   and keyspace events, blocked-client callbacks, `INFO lock`), `persistence.rs` (the data
//!   type's callbacks), `guard.rs` (`LOCK.GUARD`'s inner command).

mod args;
mod block_set;
mod blocked;
mod clock;
mod command_table;
mod commands;
mod config;
mod describe;
mod engine;
mod error;
mod events;
mod fence;
mod guard;
mod hashing;
mod keyspace;
mod leases;
mod lock;
mod panic_log;
mod pause;
mod persistence;
mod propagate;
mod replication;
mod stall;
mod stats;

use redis_module::configuration::ConfigurationFlags;
use redis_module::{redis_module, AclCategory, Context, ModuleOptions, RedisString, Status};

use crate::persistence::LOCK_TYPE;

// Unit tests run without a server, where the Redis allocator does not exist.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    panic_log::install();
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    if let Err(e) = config::check_load_args(&args) {
        // The crate hands the message to the log as its format string: no `%` from a user.
        ctx.log_warning(&format!("lock: {e}").replace(['%', '\0'], "?"));
        return Status::Err;
    }
    // HANDLE_IO_ERRORS: a corrupt RESTORE payload must be an error reply, not a crash.
    // NO_IMPLICIT_SIGNAL_MODIFIED: a command that changes nothing must not abort a WATCH.
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    replication::init(ctx);
    engine::init(ctx);
    // No fence for a burst's length after a (re)start (see fence.rs): spent here, once, so
    // that no client ever meets it.
    engine::with_fences(|f| f.start(clock::now().mono_ms()));
    std::thread::sleep(std::time::Duration::from_millis(fence::BURST_MS + 1));
    keyspace::set_lock_type(*LOCK_TYPE.raw_type.borrow());
    if let Err(e) = events::subscribe(ctx) {
        ctx.log_warning(e);
        return Status::Err;
    }
    if let Err(e) = command_table::register(ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    Status::Ok
}

redis_module! {
    name: "lock",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    // A `lock` ACL category where the server supports module categories (7.4 and later);
    // older servers log that they do not and load the module all the same.
    acl_categories: ["lock",],
    init: init,
    // The commands are registered by init, from command_table.rs.
    commands: [],
    event_handlers: [],
    configurations: [
        i64: [
            ["max-ttl", &config::MAX_TTL, config::DEFAULT_MAX_TTL, 1, config::MAX_TTL_LIMIT, ConfigurationFlags::DEFAULT, None],
            ["replica-loss-pause-ms", &config::REPLICA_LOSS_PAUSE_MS, config::DEFAULT_REPLICA_LOSS_PAUSE_MS, 0, config::REPLICA_LOSS_PAUSE_LIMIT, ConfigurationFlags::DEFAULT, None],
            ["stall-threshold-ms", &config::STALL_THRESHOLD_MS, config::DEFAULT_STALL_THRESHOLD_MS, 0, config::STALL_THRESHOLD_LIMIT, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
