//! Every command row, reply shape and bad-input class of docs/commands.md, against a real
//! server.
//!
//! The tests, by concern: `lock_commands` (each `LOCK.*` command's row, and lease end),
//! `reply_shapes` (RESP2/RESP3 replies, byte-exact), `bad_input` (`WRONGTYPE` and refused
//! arguments), `max_ttl_config`, `server_integration` (`LOCK.APPLY` from clients,
//! `MULTI`/`EXEC`, `WATCH`, `COMMAND INFO`/`DOCS`) and `keyspace_operations`; `shared/`, the
//! same for shared holds on one key; `edges` (cases a mutation check found uncovered); and
//! `minimal_lock` (the bench's module floor is a lock).

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod edges;
mod keyspace_operations;
mod lock_commands;
mod max_ttl_config;
mod minimal_lock;
mod reply_shapes;
mod server_integration;
mod shared;

const DEFAULT_MAX_TTL: i64 = 86_400_000;
