//! redis-lock: a Redis module that makes the distributed lock a native data type.
//!
//! - `lock.rs`: the lock as a pure state machine (holder, deadline, fence, queue).
//! - `fence.rs`: how fences are issued so that they never go backwards.
//! - `args.rs`, `error.rs`: argument parsing and the error replies.
//! - `commands.rs`: the `LOCK.*` commands over the state machine.
//! - `command_table.rs`: the commands' names and flags, and how Redis calls them.
//! - `waiters.rs`: clients blocked in `LOCK.ACQUIRE … WAIT`.
//! - `persistence.rs`: the data type's RDB, AOF and memory callbacks.
//! - `expiry.rs`: lease and wait deadlines, from one index, one timer and the cron backstop;
//!   `block_set.rs` is the ordered set the index keeps leases in.
//! - `keyspace.rs`: keyspace and propagation calls the crate has no safe wrapper for.
//! - `replication.rs`: whether anything reads the propagated effects.
//! - `command_info.rs`, `stats.rs`: `COMMAND INFO`/`DOCS`, and `INFO lock`.
//! - `events.rs`, `config.rs`, `clock.rs`: server events, configuration, the two clocks.

mod args;
mod block_set;
mod clock;
mod command_info;
mod command_table;
mod commands;
mod config;
mod error;
mod events;
mod expiry;
mod fence;
mod keyspace;
mod lock;
mod persistence;
mod replication;
mod stats;
mod waiters;

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

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // HANDLE_IO_ERRORS: a corrupt RESTORE payload must be an error reply, not a crash.
    // NO_IMPLICIT_SIGNAL_MODIFIED: a command that changes nothing must not abort a WATCH.
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    replication::init(ctx);
    if let Err(e) = events::subscribe(ctx) {
        ctx.log_warning(e);
        return Status::Err;
    }
    if let Err(e) = command_table::register(ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    if let Err(e) = command_info::describe(ctx) {
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
    event_handlers: [
        [@GENERIC: events::on_keyspace_event],
    ],
    configurations: [
        i64: [
            ["max-ttl", &config::MAX_TTL, config::DEFAULT_MAX_TTL, 1, config::MAX_TTL_LIMIT, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
