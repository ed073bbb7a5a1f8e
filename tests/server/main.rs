//! The lock inside the server, against a real server: `keyspace` (every keyspace operation on
//! a lock key, held or with waiters: the keyspace-operation matrix and its reproductions),
//! `rules` (blocked clients, `CLIENT PAUSE`, memory limits and eviction) and `integration`
//! (ACL, `INFO lock`, keyspace notifications).

#[path = "../common/mod.rs"]
mod common;

mod integration;
mod keyspace;
mod rules;
