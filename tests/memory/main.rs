//! Memory that waiters take, and the lazy free of a flush.
//!
//! 1. **Memory for waiters returns to its baseline.** Tens of thousands of clients wait in
//!    `LOCK.ACQUIRE … WAIT` on held keys and leave (time out, disconnect, `CLIENT UNBLOCK`),
//!    a thousand at a time; once the server has settled, `used_memory` must be where the same
//!    shape done with `BLPOP` (same counts, same rounds, on a fresh server) leaves it. A
//!    module-blocked client borrows two "temp clients" (about 17 KiB each) from a pool that
//!    the server's module cron shrinks by at most 50 every 100 ms, down to 8 spare: so memory
//!    is read only once it has stopped falling. What stays after the first thousand (the 8
//!    spare temp clients, the registry's tables sized for the peak) is reported, and is
//!    compared against a bound; what stays per departed waiter must be nothing.
//! 2. **A lazy flush answers at once.** With a million locks in db 0, `FLUSHDB ASYNC` (and a
//!    plain `FLUSHDB` where the server's user flushes are lazy, as on Valkey; `FLUSHALL ASYNC`
//!    for every database) answers the flushed database's waiters null within
//!    [`PROMPT`], long before the background thread has freed the locks; a waiter in another
//!    database is not answered, and its lock is later granted to it, never to a waiter that
//!    left; a lock taken again under the flushed name while the old ones are still being freed
//!    is not disturbed by their free.
//!
//! These tests take a lot of memory and CPU: the tests of this file run one at a time.
//!
//! 3. **What shared holds cost** (`shared_holds`): a key with one shared holder costs no more
//!    than an exclusive lock, and each further holder at most 64 bytes plus its token.
//!
//! Files: `waiter_memory` holds the test of memory for waiters, run over the clients and
//! phases of `waiter_runs`; `lazy_flush` holds the tests of a lazy flush; `shared_holds` the
//! tests of what shared holds cost.

#[path = "../common/mod.rs"]
mod common;

mod lazy_flush;
mod shared_holds;
mod waiter_memory;
mod waiter_runs;

use std::sync::{Mutex, MutexGuard};

static HEAVY: Mutex<()> = Mutex::new(());

/// One heavy test at a time (they measure memory and time on a small machine).
fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}
