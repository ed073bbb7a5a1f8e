//! Server rules a blocking, writing module command has to follow, as core commands do:
//!
//! 1. `CLIENT UNBLOCK` (plain and `ERROR`) works on a client blocked in `LOCK.ACQUIRE … WAIT`,
//!    and the unblocked client has left the queue (reproduction 7).
//! 2. A `WAIT` timeout too large to add to the server's clock is refused, as `BLPOP`'s is
//!    (reproduction 5).
//! 3. On a full server (`maxmemory` reached, `noeviction`) the commands that free or keep memory
//!    (`LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE`) work like `DEL` and `EXPIRE`; only a new
//!    acquire is refused with OOM (reproduction 6).
//! 4. `COMMAND INFO` says so: no `denyoom` on those three.
//! 5. Eviction: evicted locks answer their waiters at once, and `INFO lock` counts them in
//!    `lock_evictions` (reproduction 9).
//! 6. `CLIENT PAUSE … WRITE` stops lease ends (and so grants and key removals) until writes
//!    resume, as it stops core key expiry (reproduction 8).
//!
//! Files: `blocked_clients` (rules 1 and 2), `memory_limits` (rules 3 to 5) and
//! `client_pause` (rule 6).

mod blocked_clients;
mod client_pause;
mod memory_limits;

use std::time::Duration;

/// "At once" / "within a few ms".
const AT_ONCE: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;
const HOLDER: &str = "holder";
