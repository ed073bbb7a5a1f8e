//! Shared holds and the queue (docs/commands.md, `LOCK.ACQUIRE … SHARED [LIMIT n]`, and
//! [The server around a lock](../../docs/operations.md#the-server-around-a-lock)), against a
//! real server: FIFO order across kinds, no writer starvation under a stream of readers,
//! `LIMIT n` under contention (an in-process counter proves that no more than `n` hold at once,
//! also when holders abandon their permits), and the server's keyspace rules for shared keys
//! (deletion, `RENAME`, `COPY`, `CLIENT UNBLOCK`, `CLIENT PAUSE WRITE`, `EXPIRE`, a full
//! server). One key's semantics are in `tests/commands/shared/`.
//!
//! Files: `queue_order` holds the tests of the queue's order (FIFO across kinds, no writer
//! starvation), `limit_under_load` those of `LIMIT n` under contention, `keyspace_rules`
//! those of the server around a shared key; the constants and helpers they share are here.

mod keyspace_rules;
mod limit_under_load;
mod queue_order;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::holds::acquire_with;
use redis::{Connection, Value};

/// "At once": a reply caused by a change made just now arrives within this.
const AT_ONCE: Duration = Duration::from_millis(300);
/// A change due at a deadline (a lease end) is seen within this after it.
const LATE: Duration = Duration::from_millis(250);
/// How long a request that must stay queued is watched for a reply it must not get.
const QUIET: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;

// ------------------------------------------------------------------------------- helpers

/// Sets the flag when dropped, so that threads looping on it stop even when the test fails.
struct SetOnDrop<'a>(&'a AtomicBool, bool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, Ordering::SeqCst);
    }
}

/// An acquire with `opts` that must be granted at once: its fence.
#[track_caller]
fn granted(con: &mut Connection, key: &str, token: &str, ttl: u64, opts: &[&str]) -> i64 {
    match acquire_with(con, key, token, ttl, opts) {
        Ok(Value::Int(f)) if f > 0 => f,
        other => {
            panic!("LOCK.ACQUIRE {key} {token} {ttl} {opts:?}: must be granted, got {other:?}")
        }
    }
}
