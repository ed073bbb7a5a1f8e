//! Shared holds survive every way a dataset is saved, loaded, moved and replicated (issue 13,
//! "Persistence"; docs/operations.md, "Persistence and replication details"):
//!
//! - the RDB file and the multi-part AOF written by the module before shared holds (lock
//!   encoding version 2, `LOCK.APPLY` without `SHARED`), committed under `tests/fixtures/`
//!   (how they were made: `tests/fixtures/README.md`), still load, with every holder, fence and
//!   lease;
//! - keys with several shared holders, an exclusive key, a `LIMIT` semaphore with waiters, a
//!   downgraded key and a key whose holds were all released go through `SAVE` + restart, the
//!   AOF with and without the RDB preamble (replayed, and rewritten by `BGREWRITEAOF`),
//!   `DEBUG RELOAD`, `DUMP`/`RESTORE` and `MIGRATE` to another server, a replica's full sync,
//!   live replication of each kind of change, and promotion of the replica;
//! - every time, `LOCK.HOLDERS` (tokens, fences, mode, grant order) is the same, each hold's
//!   remaining lease is the one it had (within [`SLACK_MS`] of the time measured between the
//!   readings), `LOCK.INFO` agrees (its fence too: the key's last fence, which may be above
//!   every live hold's), waiters are not carried, and every fence issued afterwards is above
//!   every fence issued before (on that server; for a key moved alone, above that key's).
//!
//! Where two servers must hold the same state (master and replica), the `DUMP` of each key is
//! also decoded and compared hold by hold: the saved layout of encoding version 3 is described
//! at the top of `src/persistence.rs` (save time, mode, the key's last fence, then each hold's
//! token, absolute deadline and fence, in grant order). That is what shows that a shared
//! hold's lease end reached the replica: its reads hide an ended hold by its own clock either
//! way.
//!
//! Submodules: `v2_fixtures`, `dump_decoder` (checks `common::dump::decoded`), and the trips:
//! `save_and_reload` and `dump_restore_migrate`; the replication trip is
//! `tests/replication/shared_holds.rs`. The populated keys are `common::travelling_keys`,
//! the compared readings `common::snapshots`.

mod dump_decoder;
mod dump_restore_migrate;
mod save_and_reload;
mod v2_fixtures;

use std::time::Duration;

/// How late a lease end may be observed (loaded machines).
pub(crate) const LATE: Duration = Duration::from_millis(500);

pub(crate) use crate::common::holds::acquire_shared;
pub(crate) use crate::common::snapshots::SLACK_MS;
pub(crate) use crate::common::unix_ms;
pub(crate) use crate::common::{snapshots, travelling_keys};
