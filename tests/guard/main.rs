//! `LOCK.GUARD` (docs/commands.md, `LOCK.GUARD`), against a real server: `refusals` (when a
//! guarded command is refused and nothing runs), `replies` (the guarded command's own reply,
//! in RESP2 and RESP3), `access` (ACL rules apply to the inner command), `persistence`
//! (guarded writes in the AOF and on replicas), `server` (the command table, scripts,
//! transactions, modules) and `shared_holds` (a shared key is never guarded).

#[path = "../common/mod.rs"]
mod common;

mod access;
mod persistence;
mod refusals;
mod replies;
mod server;
mod shared_holds;
