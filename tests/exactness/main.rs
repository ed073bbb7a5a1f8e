//! How exactly a lease keeps its time where it leaves one command's hands:
//!
//! 1. Moved to another server (`DUMP`/`RESTORE`, `MIGRATE`) whose wall clock differs by
//!    ±30 s or ±1 h (`tests/support/wallshift.c`, a constant offset from start), a lease
//!    travels as the time it had left: it arrives with about that, never more, never less
//!    than it had minus the test's latency, and another token cannot take it there until
//!    then. A `SET … PX` key in the same `MIGRATE` is the control. On the destination's
//!    replica and across its AOF restart, such a lock keeps the deadline it arrived with.
//! 2. Where the same dataset is replicated or reloaded (the replication stream, the AOF, an
//!    RDB restart, a replica's full sync, `DEBUG RELOAD`), the deadline is the master's, never
//!    shorter. Deadlines are bracketed to the microsecond from `LOCK.INFO` samples, so that a
//!    deadline propagated 5 ms short fails. What the module writes there replays without an
//!    error.
//! 3. A writable replica ends the leases its own clients took (also by `RESTORE` or `COPY`),
//!    on time, hands them to its own waiters, and counts them out of `INFO lock`; its
//!    master's locks it leaves to the master's `DEL`.
//! 4. Inside a script or `MULTI`/`EXEC` a lease is judged at the time the unit began, as the
//!    server judges key expiry there; the next command, script or transaction is not.
//! 5. A replica announces the lock events of the changes it applies from its master.
//! 6. Each lease ends within milliseconds of its deadline while the module timer is armed for
//!    a later one (a timer that is not re-armed leaves it to the 100 ms cron).
//! 7. While the server's wall clock is stepped an hour forward and back, leases and `WAIT`
//!    timeouts run on its monotonic clock and fences do not go backwards.
//!
//! (`CLIENT PAUSE … WRITE` is in `tests/server/rules/`.)
//!
//! Files, by the numbers above: `moved_leases` (1), `replicated_deadlines` (2),
//! `writable_replica` (3), `scripts_and_transactions` (4), `replica_events` (5),
//! `lease_end_timer` (6), `clock_steps` (7); `shifted_clock` starts a server whose wall clock is shifted, and
//! `deadlines` brackets a lock's deadline from `LOCK.INFO` samples.

#[path = "../common/mod.rs"]
mod common;

mod clock_steps;
mod deadlines;
mod lease_end_timer;
mod moved_leases;
mod replica_events;
mod replicated_deadlines;
mod scripts_and_transactions;
mod shifted_clock;
mod writable_replica;

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::*;

/// Whether the replica has processed everything so far.
use crate::common::sync_replica as sync;

/// A waiter's reply and when it came, read on its own thread.
fn watch(mut w: Waiter, within: Duration) -> JoinHandle<(Option<Reply>, Option<Instant>)> {
    thread::spawn(move || {
        let r = w.reply_within(within);
        (r, w.answered)
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
