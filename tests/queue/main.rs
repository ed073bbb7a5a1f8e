//! The queue of `LOCK.ACQUIRE … WAIT` (docs/guarantees.md, guarantee 3), against a real server:
//! `wait` holds the FIFO queue of exclusive requests and its hand-offs, with waiters on plain
//! sockets so that a test controls exactly when each one joins; `shared` holds the one queue
//! across kinds (shared and exclusive), `LIMIT` under contention, and the server's keyspace
//! rules for queued shared requests.

#[path = "../common/mod.rs"]
mod common;

mod shared;
mod wait;
