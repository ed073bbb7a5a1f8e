//! Client library for redis-lock, the Redis module (in this repository) that makes a
//! distributed lock a native data type.
//!
//! [`Mutex`], [`RwLock`] and [`Semaphore`] (blocking) and their [`aio`] counterparts (tokio)
//! take a hold with a fresh token, waiting in the key's first-come-first-served queue
//! (`LOCK.ACQUIRE … WAIT`), and return a guard that:
//!
//! - carries the hold's fence and writes through `LOCK.GUARD` ([`Guard::guard`]), with a
//!   refusal apart from every other error ([`GuardError::Fenced`]);
//! - extends the lease in the background (every third of the ttl by default);
//! - reports the hold lost through a [`LossSignal`]: when an extend answers 0 or fails with
//!   any error, and in any case no later than the lease's end on this client's monotonic
//!   clock, counted from the send time of the last confirmed acquire or extend;
//! - releases the hold when dropped.
//!
//! [`Election`] (and [`aio::Election`]) is leader election on a lock key: a candidate
//! campaigns by taking the key with its identity as the token, leads under a guard like any
//! other, and followers see every change of leader through `LOCK.OBSERVE`
//! ([`Election::observe`]).
//!
//! Standalone servers ([`redis::Client`], RESP2 or RESP3) and clusters
//! ([`redis::cluster::ClusterClient`]) both work. See `clients/rust/README.md`.

#![warn(missing_docs)]

mod blocking;
mod commands;
mod durable;
mod election;
mod error;
mod guard;
mod info;
mod options;
mod pool;
mod signal;
mod sync_conn;

pub mod aio;

pub use blocking::{Mutex, RwLock, Semaphore};
pub use election::{Election, Leader, Leadership, Observer};
pub use error::{Error, Fenced, GuardError, LossReason};
pub use guard::Guard;
pub use info::{Holder, LockInfo, Mode};
pub use options::{Kind, Target};
pub use signal::LossSignal;

// The README's examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
