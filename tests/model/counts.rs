//! What a run counts (and prints at its end): every op, and of the keyspace operations
//! how many met waiters (`Tally`), so that the test can require a full-length run to have
//! exercised each.

use std::fmt;

/// Runs of one keyspace operation: `runs (w with waiters)`, where `w` counts the runs that
/// answered at least one waiter null (for `COPY`/`RESTORE`: that replaced a destination with
/// waiters).
#[derive(Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) runs: u64,
    pub(crate) with_waiters: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, answered: usize) {
        self.runs += 1;
        if answered > 0 {
            self.with_waiters += 1;
        }
    }
}

impl fmt::Debug for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}w)", self.runs, self.with_waiters)
    }
}

#[derive(Default, Debug)]
pub(crate) struct Counts {
    pub(crate) acquire: u64,
    pub(crate) acquire_wait: u64,
    pub(crate) blocked: u64,
    pub(crate) release: u64,
    pub(crate) extend: u64,
    pub(crate) fence: u64,
    pub(crate) info: u64,
    pub(crate) del: u64,
    pub(crate) disconnect: u64,
    pub(crate) short_leases: u64,
    pub(crate) short_waits: u64,
    pub(crate) lease_ends: u64,
    pub(crate) grants: u64,
    pub(crate) wait_timeouts: u64,
    pub(crate) ticks: u64,
    pub(crate) restarts: u64,
    pub(crate) reloads: u64,
    pub(crate) sleeps: u64,
    /// Waiters answered null because their key was deleted, reloaded, renamed, replaced,
    /// swapped out, flushed or expired.
    pub(crate) answered_null: u64,
    // Keyspace operations (see `Tally`).
    pub(crate) rename: Tally,
    pub(crate) renamenx: Tally,
    /// `RENAME`/`RENAMENX` of a missing key: `ERR no such key`.
    pub(crate) rename_no_such_key: u64,
    /// `RENAMENX` onto an existing key: 0, nothing changed.
    pub(crate) renamenx_refused: u64,
    pub(crate) swapdb: Tally,
    /// Of those, the two `SWAPDB`s sent in one pipeline (waiters read after both).
    pub(crate) swapdb_pipelined: u64,
    pub(crate) flushdb: Tally,
    pub(crate) flushdb_async: Tally,
    pub(crate) flushall_async: Tally,
    pub(crate) copy: Tally,
    pub(crate) dump_restore: Tally,
    /// `COPY`/`DUMP` of a missing key: nothing copied.
    pub(crate) copy_no_source: u64,
    /// `COPY`/`RESTORE` whose source had waiters: they keep waiting, in order.
    pub(crate) copy_source_kept_waiters: u64,
    pub(crate) set_del: Tally,
    pub(crate) pexpireat: Tally,
    pub(crate) pexpireat_missing: u64,
    /// Time spent waiting for pending deadlines, and in restarts.
    pub(crate) tick_wait_ms: u64,
    pub(crate) restart_ms: u64,
    // Crashes at full fence rate (see `op_crash`).
    pub(crate) crashes: u64,
    /// Fences acknowledged in the bursts before the crashes, and `TRYAGAIN` replies there.
    pub(crate) crash_burst_fences: u64,
    pub(crate) crash_burst_tryagain: u64,
    /// The fastest burst, in fences acknowledged per millisecond.
    pub(crate) crash_burst_peak_per_ms: u64,
    /// Bursts on two keys at once (else one), and bursts on `BURST_CONNS` connections at
    /// once (else one).
    pub(crate) crash_two_key_bursts: u64,
    pub(crate) crash_parallel_bursts: u64,
    /// Fences taken right after the restarts (held burst keys and fresh keys), each checked
    /// against the pre-crash maximum, and the `TRYAGAIN` replies met while taking them.
    pub(crate) crash_first_fences: u64,
    pub(crate) crash_first_fresh: u64,
    pub(crate) crash_restart_tryagain: u64,
    /// Waiters whose connection the crash closed.
    pub(crate) crash_waiters_dropped: u64,
    /// Locks in the snapshot whose short lease ran out while the server was down.
    pub(crate) crash_lapsed: u64,
    /// Fences issued after a crash and checked against the highest one acknowledged before
    /// it, by any op (later bursts included).
    pub(crate) above_crash_floor: u64,
    pub(crate) crash_ms: u64,
    // Shared holds.
    /// Requests asking `SHARED`, and of those with `LIMIT n`.
    pub(crate) shared_requests: u64,
    pub(crate) limit_requests: u64,
    /// Shared holds taken next to other shared holds at once (`AcqExpect::Join`).
    pub(crate) joins: u64,
    /// Renewals by a holder asking for the kind it holds (with a `LIMIT` already reached).
    pub(crate) renewals: u64,
    pub(crate) renewals_over_limit: u64,
    /// Exclusive holders asking `SHARED`, and waiters those downgrades granted.
    pub(crate) downgrades: u64,
    pub(crate) downgrade_grants: u64,
    /// Shared holders asking for the lock exclusively: refused, the hold kept.
    pub(crate) upgrades_refused: u64,
    /// Shared requests refused (or queued) only because of their `LIMIT`.
    pub(crate) limit_refused: u64,
    /// Shared requests the holds had room for, refused (or queued) because somebody waits
    /// (an exclusive request first in the queue, or a shared one at its own limit).
    pub(crate) held_back: u64,
    /// Instants at which two or more waiters were granted together.
    pub(crate) group_grants: u64,
    /// Waiters granted because a waiter before them left the queue (timeout, hang-up).
    pub(crate) withdraw_grants: u64,
    /// Lease ends of a shared hold while other holds remained.
    pub(crate) shared_lease_ends: u64,
    /// Queues of mixed kinds built by `op_contend`.
    pub(crate) contends: u64,
    /// The most holds seen on one key.
    pub(crate) max_holders: u64,
    /// `LOCK.HOLDERS` replies checked (ops and key checks).
    pub(crate) holders_checked: u64,
    // Repeated tokens (`queue_rules`; queued only by the reachability run).
    /// Queued requests whose token held the key when they reached the head: renewed under
    /// the same fence, or downgraded.
    pub(crate) queue_renewals: u64,
    pub(crate) queue_downgrades: u64,
    /// Requests queued by a token already queued for the key (from another connection),
    /// and of those the same request again (a retry).
    pub(crate) repeat_waits: u64,
    pub(crate) retries: u64,
    /// Fences of holds whose grant was never told (its client killed), learnt from
    /// another request of the token told of the hold.
    pub(crate) fences_learnt: u64,
    /// Transactions that killed granted waiters before their replies (`withdrawn_grants`),
    /// and the killed: new holds taken back, new holds kept (another request of the token
    /// was told of them), renewals and downgrades (kept).
    pub(crate) kills: u64,
    pub(crate) killed_taken_back: u64,
    pub(crate) killed_kept: u64,
    pub(crate) killed_renewals: u64,
}
