//! Guarantee 3 against everything the keyspace can do to a lock's key. A waiter waits for a
//! *(db, key name)*; whatever happens to that key (`DEL`, `UNLINK`, the flushes, `RENAME` and
//! `RENAMENX` on either side, `MOVE`, `SWAPDB`, `COPY … REPLACE`, `RESTORE … REPLACE`, an
//! overwrite, expiry, eviction, `MIGRATE`, `DEBUG RELOAD`):
//!
//! - a client told it holds the lock holds it at the db and key it asked for at that instant;
//! - a waiter that has left (timed out, disconnected, `CLIENT UNBLOCK`ed) is never granted and
//!   never counted (`LOCK.INFO` waiters, `INFO lock` `lock_waiting_clients`);
//! - nobody waits past their timeout;
//! - waiters whose lock is deleted, replaced or moved away are answered null at once, in the
//!   same turn; a moved lock keeps holder, fence and lease at its new place, with no waiters;
//! - waiter ids are never reused: a grant goes only to a client blocked, at that moment, on
//!   that (db, key).
//!
//! The matrix (`matrix_*`) runs every operation against a waiter in each state (queued,
//! timing out later, timed out, disconnected, unblocked, granted but not yet told); each
//! failure names the operation and the state. After each scenario, clients blocked on another
//! key ("sentinels") must not be handed anything when the lock is released at its new place:
//! that is how a ghost waiter whose id was reused would show. The `repro*` tests are the
//! reported reproductions, step by step.
//!
//! Files: `matrix` holds the `matrix_*` tests, which run `matrix_scenario` over the operations
//! and waiter states of `matrix_cases`; `lock_left_in_place`, `grant_to_killed_client` and
//! `reproductions` hold the other tests; `answer_checks` the checks they share.

mod answer_checks;
mod grant_to_killed_client;
mod lock_left_in_place;
mod matrix;
mod matrix_cases;
mod matrix_scenario;
mod reproductions;

use std::time::Duration;

/// "At once": a waiter whose lock is deleted, replaced or moved away is answered within this
/// (the module should take a few ms; a waiter answered by a timer or the cron would not).
const AT_ONCE: Duration = Duration::from_millis(200);
/// Lease of every lock the tests take (it never ends during a test).
const TTL: u64 = 60_000;
const HOLDER: &str = "holder";
const SRC_HOLDER: &str = "src-holder";
const DB1_HOLDER: &str = "db1-holder";
/// Clients blocked on another key after each scenario, to catch a ghost waiter's grant.
const SENTINELS: usize = 8;
/// The `WAIT` timeout of a waiter still queued when the operation runs, that would time out
/// later (well above `AT_ONCE`, so that being answered by the timeout is told apart).
const LATER_TIMEOUT: u64 = 800;
/// The `WAIT` timeout of a waiter that times out before the operation.
const SHORT_TIMEOUT: u64 = 120;
