//! Redis Cluster: three masters with one replica each on loopback, made with
//! `redis-cli --cluster create`, the module loaded on every node.
//!
//! - Locks on a key in every one of the 16384 slots through a small cluster-aware client
//!   (the redis crate is built without its `cluster` feature, so [`Router`] does the routing:
//!   CRC16 slots, `CLUSTER SLOTS`, following `MOVED` and `ASK`).
//! - Every `LOCK.*` command sent to the wrong node is answered `MOVED <slot> <owner>`;
//!   `COMMAND GETKEYS` names the key; hash tags put `{user1}:a` and `{user1}:b` in one slot;
//!   a transaction over two slots is refused with `CROSSSLOT`.
//! - A slot holding held locks migrated with `CLUSTER SETSLOT` + `MIGRATE … KEYS`: holder,
//!   remaining lease and fence arrive intact, the lease ends on time on the new node, and its
//!   next fences are above every fence issued for the keys on the old one (guarantee 4).
//! - `CLUSTER FAILOVER` of a master's replica keeps holder, lease and fence (guarantee 5).
//!
//! - A client waiting on the source node for a key that `MIGRATE` moves away is not granted
//!   a lock there (guarantee 1): it is answered null and retries where the key went.
//! - `LOCK.GUARD` declares its keys: `COMMAND GETKEYS` names the lock key and the guarded
//!   command's; keys in two slots get `CROSSSLOT`, the wrong node answers `MOVED`, and the
//!   guarded write reaches the replica as the write itself.
//!
//! The tests run one at a time (each makes its own six-node cluster).
//!
//! The tests by concern: `routing`, `slot_migration`, `failover` and `lock_guard`; the cluster
//! they make in `cluster_setup`, `slots` and `router`, what they check on it in `lock_checks`.

#[path = "../common/mod.rs"]
mod common;

mod cluster_setup;
mod failover;
mod lock_checks;
mod lock_guard;
mod router;
mod routing;
mod slot_migration;
mod slots;
