//! Seeded fuzzing of `RESTORE` with lock payloads (docs/guarantees.md, guarantee 6: bad input costs
//! nothing), and checks that long fuzzed runs do not grow the server's `used_memory`.
//!
//! `cargo fuzz` needs a nightly toolchain, which this project does not use; these tests
//! generate inputs from a seeded RNG instead, so that any failure replays exactly:
//! `FUZZ_SEED=<n>` replays a run and `FUZZ_RESTORES=<n>` changes its length.
//!
//! How a lock is written in a DUMP payload, in each encoding version, is in
//! `tests/common/dump/`, which reads and builds them. In short: RDB type 7, the 64-bit
//! module type id (encoding version in the low 10 bits), the saved values behind opcodes
//! (5: string, 2: unsigned; signed values as unsigned), EOF, then the RDB version and a
//! CRC-64. Version 3 (what the module writes): saved_at, mode (0 exclusive, 1 shared), the
//! key's last fence, a count of holds (at least 1; exactly 1 when exclusive), then each hold
//! as token, deadline, fence (at most the last fence). Version 2: token, deadline, fence,
//! saved_at. On `RESTORE` each lease is the time it had left then (deadline - saved_at), and
//! more than ten years of it is refused. Version 1 (still loaded): token, absolute deadline,
//! fence. A token is 1 to 256 bytes; a fence from outside is valid from 1 to 2^53-1-2^32.
//!
//! Every generated payload gets a correct CRC (unless a test means otherwise), so it reaches
//! the module's `rdb_load`. Every reply must be `OK` or an `ERR` error; an accepted value
//! must be a sane lock, whose `LOCK.INFO` and `LOCK.HOLDERS` agree, that behaves like one,
//! with the holds, fences and leases the payload gives it; the server must stay up; fences
//! must stay positive and increasing; and after thousands of iterations (with `FLUSHALL`
//! between batches) `used_memory` must be where it was.
//!
//! Layout: `rules` (what must load), `fuzz_server` with `restored_lock_checks` and
//! `memory_runs` (the server under fuzz and its checks), `interesting_values`,
//! `random_bodies`, `mutations` and `samples` (the generators); the tests are in
//! `fuzz_runs`, `leases_by_version` and `refused_payloads`.

mod fuzz_runs;
mod fuzz_server;
mod interesting_values;
mod leases_by_version;
mod memory_runs;
mod mutations;
mod random_bodies;
mod refused_payloads;
mod restored_lock_checks;
mod rules;
mod samples;

use crate::common::dump::Width;
use rand::rngs::StdRng;
use rand::Rng;

const DEFAULT_SEED: u64 = 0x7265_7374_6f72;
const DEFAULT_RESTORES: u64 = 5_000;
const BATCH: u64 = 250;
/// How much the memory figure may grow over a run: a leak of one byte per iteration
/// exceeds it. (The servers run with `latency-tracking no`; see `Fuzz::new`.)
const MEMORY_NOISE: i64 = 4 * 1024;
/// A batch whose figure exceeds every earlier one by more than this is a "new high".
const NEW_HIGH: i64 = 1024;
/// New highs allowed in a run (a steady leak makes one after almost every batch).
const MAX_NEW_HIGHS: usize = 3;
/// A restored lease shorter than this is only watched until it ends: the checks that use the
/// lock could outlast it.
const SHORT_LEASE_MS: i64 = 200;
use crate::common::env::env_u64;

/// The largest fence issued: 2^53-1.
const MAX_FENCE: u64 = (1 << 53) - 1;
/// The largest fence accepted from outside: 2^32 below the largest issued, so that one key
/// cannot leave the server without fences.
const TOP: u64 = MAX_FENCE - (1 << 32);
/// The longest lease a `RESTORE` may bring: ten years, in ms.
const MAX_LEFT_MS: i64 = 315_360_000_000;
/// The longest token.
const MAX_TOKEN: usize = 256;

use crate::common::unix_ms as now_ms;

/// Any width that can hold `n`.
fn some_width(rng: &mut StdRng, n: u64) -> Width {
    let widths = Width::holding(n);
    widths[rng.gen_range(0..widths.len())]
}
