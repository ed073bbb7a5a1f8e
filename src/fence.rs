//! Fence issuance. A fence is a hybrid-logical-clock value: the Unix time in milliseconds
//! shifted left by [`COUNTER_BITS`], plus a counter. Every new fence is the largest of
//!
//! - one more than the key's last fence (fences of a key never go backwards),
//! - one more than the server's high-water mark (a fresh key starts above every fence this
//!   server issued, although the key that held them is gone), and
//! - the clock floor `unix_ms << COUNTER_BITS`.
//!
//! The floor keeps fences unique when the high-water mark is lost: after a crash and a
//! restart from an older snapshot, every fence issued before the crash must be below the
//! floor of the restart. That holds by construction. The issuer hands out fences from a
//! bucket that holds [`BURST_MS`] milliseconds' worth ([`PER_MS`] each) and refills at
//! [`PER_MS`] a millisecond of the wall clock, and refuses when it is empty (a retryable
//! error); so a fence issued while the high-water mark tracks the floor is never more than
//! [`BURST_MS`] milliseconds ahead of it. After a (re)start the issuer waits until its clock
//! is [`BURST_MS`] + 1 milliseconds past the moment it loaded, so its first fence is above
//! every fence issued before the crash, provided the wall clock did not go back across it
//! (the module spends that wait at load, sleeping, so that no client meets it). One
//! server thread issues up to about 2 million fences a second in bursts (`LOCK.FENCE`
//! pipelined on 8 connections); the bucket lets bursts of [`BURST_MS`] milliseconds' worth
//! through and holds a sustained rate to 512,000 a second (below, "Epochs").
//!
//! Fences above the floor (a key that came from a node whose clock is ahead) grow no faster,
//! so a snapshot's high-water mark plus a full bucket plus [`PER_MS`] for every millisecond
//! since it was saved is above anything issued after it ([`FenceIssuer::reload`]).
//!
//! Eleven counter bits keep fences below 2^53, exact for clients that hold integers as
//! doubles (JavaScript, Lua), until May 2109; a fence that would not be is refused.
//!
//! **Epochs.** The low [`EPOCH_BITS`] of a fence name the epoch of the master that issued it
//! (its epoch modulo [`EPOCHS`]), so two masters alive at once, a deposed one that has not
//! yet learned it was deposed and the replica promoted in its place, never issue the same
//! fence: a promotion raises the epoch to one above every epoch the replica has seen. A
//! server learns its master's epoch from a full synchronisation (the RDB's aux data) and from
//! `LOCK.HIGHWATER`, which a master propagates when it is promoted and when an AOF rewrite
//! begins. Two masters' fences collide only if [`EPOCHS`] promotions happen while the older
//! one still issues fences (README, "Deploying for failover"). Every fence takes
//! [`EPOCHS`] of the counter's slots, so the sustained rate is [`PER_MS`] = 2048 / [`EPOCHS`]
//! a millisecond; bursts, the high-water mark and the crash bounds above count slots
//! ([`SLOTS_PER_MS`]), and they are unchanged.

use std::fmt;

pub const COUNTER_BITS: u32 = 11;

/// Fence values a millisecond of the wall clock moves the floor by.
pub const SLOTS_PER_MS: u64 = 1 << COUNTER_BITS;

/// The low bits of a fence that carry the issuing master's epoch (module comment, "Epochs").
pub const EPOCH_BITS: u32 = 2;

/// Epochs are told apart modulo this.
pub const EPOCHS: u64 = 1 << EPOCH_BITS;

/// Fences a millisecond of the wall clock, sustained: each takes [`EPOCHS`] slots.
pub const PER_MS: u64 = SLOTS_PER_MS / EPOCHS;

/// How many milliseconds' worth of fences a burst may take ahead of the clock.
pub const BURST_MS: u64 = 8;

/// Fences in a full bucket.
const CAPACITY: u64 = PER_MS * BURST_MS;

/// Fences within this distance of [`MAX_FENCE`] are not accepted in one key from another
/// server (`RESTORE`): one such key would leave the whole server no fence to issue.
const HEADROOM: u64 = 1 << 32;

/// The largest fence: the largest integer a double holds exactly.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// True for a fence this module could have issued (an RDB file, the AOF, the replication
/// stream carry what it did issue).
pub fn is_valid(fence: u64) -> bool {
    (1..=MAX_FENCE).contains(&fence)
}

/// True for a fence accepted in one key from another server (`RESTORE`, `MIGRATE`): valid,
/// with room above it.
pub fn is_valid_from_elsewhere(fence: u64) -> bool {
    (1..=MAX_FENCE - HEADROOM).contains(&fence)
}

/// Why no fence was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceError {
    /// The bucket is empty (or the server started less than [`BURST_MS`] + 1 ms ago):
    /// retry in the next millisecond.
    RateLimited,
    /// The next fence would not be exact as a double.
    Exhausted,
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::RateLimited => write!(
                f,
                "TRYAGAIN fences are issued at most {PER_MS} a millisecond; retry"
            ),
            FenceError::Exhausted => f.write_str("ERR no fence left below 2^53"),
        }
    }
}

/// The server-wide high-water mark of fences, and the bucket that paces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceIssuer {
    high_water: u64,
    tokens: u64,
    /// The monotonic millisecond the bucket was last refilled at: it refills with time as it
    /// passes, so a wall clock stepped back cannot stall it.
    refilled_ms: i64,
    /// No fence before this monotonic millisecond (see the module comment): a burst's length
    /// after the start, by a clock that a step of the wall clock does not move.
    not_before_ms: i64,
    /// This server's epoch as a master, or the highest epoch it has seen as a replica.
    epoch: u64,
}

impl Default for FenceIssuer {
    fn default() -> Self {
        FenceIssuer::new()
    }
}

impl FenceIssuer {
    pub const fn new() -> Self {
        FenceIssuer {
            high_water: 0,
            tokens: CAPACITY,
            refilled_ms: 0,
            not_before_ms: 0,
            epoch: 0,
        }
    }

    /// The server (or the module) started at monotonic millisecond `mono_ms`.
    pub fn start(&mut self, mono_ms: i64) {
        self.not_before_ms = mono_ms + BURST_MS as i64 + 1;
        self.refilled_ms = mono_ms;
        self.tokens = CAPACITY;
    }

    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Takes note of an epoch a master reached (its RDB, its `LOCK.HIGHWATER`).
    pub fn learn_epoch(&mut self, epoch: u64) {
        self.epoch = self.epoch.max(epoch);
    }

    /// This server became a master: its fences leave the residue of every epoch it has
    /// seen, its old master's included.
    pub fn promoted(&mut self) {
        self.epoch += 1;
    }

    /// Issues a fence for a key whose last fence was `last` (0 for a fresh key), at Unix
    /// millisecond `wall_ms` and monotonic millisecond `mono_ms`.
    pub fn issue(&mut self, last: u64, wall_ms: i64, mono_ms: i64) -> Result<u64, FenceError> {
        if mono_ms < self.not_before_ms {
            return Err(FenceError::RateLimited);
        }
        if mono_ms > self.refilled_ms {
            let elapsed = (mono_ms - self.refilled_ms) as u64;
            self.tokens = self
                .tokens
                .saturating_add(elapsed.saturating_mul(PER_MS))
                .min(CAPACITY);
            self.refilled_ms = mono_ms;
        }
        if self.tokens == 0 {
            return Err(FenceError::RateLimited);
        }
        let base = (last + 1).max(self.high_water + 1).max(floor(wall_ms));
        let fence = in_epoch(base, self.epoch);
        if fence > MAX_FENCE {
            return Err(FenceError::Exhausted);
        }
        self.high_water = fence;
        self.tokens -= 1;
        Ok(fence)
    }

    /// Takes note of a fence issued elsewhere (loaded, restored or replicated), so that fresh
    /// keys start above it.
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
    }

    /// Takes note of a snapshot's high-water mark, saved at Unix millisecond `saved_ms` and
    /// loaded at `now_ms`: whatever this server issued after the save (and lost in a crash)
    /// is at most a full bucket's slots plus [`SLOTS_PER_MS`] a millisecond above it.
    pub fn reload(&mut self, high_water: u64, saved_ms: i64, now_ms: i64) {
        let elapsed = (now_ms.saturating_sub(saved_ms).max(0) as u64).saturating_add(1);
        let bound = high_water
            .saturating_add(CAPACITY * EPOCHS)
            .saturating_add(elapsed.saturating_mul(SLOTS_PER_MS));
        self.observe(bound.min(MAX_FENCE));
    }
}

fn floor(wall_ms: i64) -> u64 {
    (wall_ms.max(0) as u64) << COUNTER_BITS
}

/// The least value from `base` up whose low bits are `epoch`'s.
fn in_epoch(base: u64, epoch: u64) -> u64 {
    let want = epoch % EPOCHS;
    base + (want + EPOCHS - base % EPOCHS) % EPOCHS
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_764_000_000_000;

    impl FenceIssuer {
        /// `issue` with both clocks at `ms` (no wall-clock step).
        fn at(&mut self, last: u64, ms: i64) -> Result<u64, FenceError> {
            self.issue(last, ms, ms)
        }
    }

    #[test]
    fn a_wall_clock_stepped_back_does_not_stall_the_bucket() {
        let mut f = FenceIssuer::default();
        let mut last = 0;
        while let Ok(n) = f.at(last, T) {
            last = n;
        }
        // An hour back on the wall, time going on: fences go on at the sustained rate,
        // above the last (the high-water mark is in memory).
        for ms in 1..=3 {
            let n = f.issue(last, T - 3_600_000 + ms, T + ms).unwrap();
            assert!(n > last);
            last = n;
        }
    }

    #[test]
    fn fences_increase_per_key_and_server_wide() {
        let mut f = FenceIssuer::default();
        let a = f.at(0, T).unwrap();
        let b = f.at(a, T).unwrap();
        let c = f.at(0, T).unwrap(); // a fresh key
        assert!(a < b && b < c);
        assert!(a >= floor(T));
    }

    #[test]
    fn a_key_from_elsewhere_continues_above_its_last_fence() {
        let mut f = FenceIssuer::default();
        let far = floor(T) + 10_000_000 + 1;
        let next = f.at(far, T).unwrap();
        assert!(
            (far + 1..=far + EPOCHS).contains(&next),
            "{next} after {far}"
        );
    }

    #[test]
    fn the_clock_floor_moves_fences_on_each_millisecond() {
        let mut f = FenceIssuer::default();
        let a = f.at(0, T).unwrap();
        let b = f.at(a, T + 1).unwrap();
        assert_eq!(b, floor(T + 1));
    }

    #[test]
    fn a_burst_takes_at_most_burst_ms_of_fences_ahead_then_the_sustained_rate() {
        let mut f = FenceIssuer::default();
        let mut last = 0;
        let mut n = 0;
        while let Ok(fence) = f.at(last, T) {
            last = fence;
            n += 1;
        }
        assert_eq!(n, CAPACITY);
        assert_eq!(
            last,
            floor(T + BURST_MS as i64) - EPOCHS,
            "never more ahead of the clock"
        );
        assert_eq!(f.at(0, T), Err(FenceError::RateLimited));
        for _ in 0..PER_MS {
            last = f.at(last, T + 1).unwrap();
        }
        assert_eq!(f.at(last, T + 1), Err(FenceError::RateLimited));
    }

    #[test]
    fn no_fence_until_the_burst_window_after_a_start_has_passed() {
        let mut f = FenceIssuer::default();
        f.start(T);
        for ms in T..=T + BURST_MS as i64 {
            assert_eq!(f.at(0, ms), Err(FenceError::RateLimited), "{}", ms - T);
        }
        assert_eq!(
            f.at(0, T + BURST_MS as i64 + 1),
            Ok(floor(T + BURST_MS as i64 + 1))
        );
    }

    #[test]
    fn a_burst_lost_in_a_crash_is_below_every_fence_after_the_restart() {
        // As many fences as the issuer allows, over several milliseconds; the crash comes
        // in millisecond T + 4.
        let mut before_crash = FenceIssuer::default();
        let mut last = 0;
        for ms in 0..5 {
            while let Ok(f) = before_crash.at(last, T + ms) {
                last = f;
            }
        }
        // Restart from a snapshot that knew none of them, loaded in a later millisecond.
        let mut after = FenceIssuer::default();
        after.start(T + 5);
        let first = (T + 5..T + 100)
            .find_map(|ms| after.at(0, ms).ok())
            .unwrap();
        assert!(first > last, "{first} after {last}");
    }

    #[test]
    fn fences_ahead_of_the_clock_stay_above_a_reloaded_snapshot() {
        // A key from a node an hour ahead, then a burst on top of it after the snapshot.
        let ahead = floor(T + 3_600_000);
        let mut f = FenceIssuer::default();
        f.observe(ahead);
        let saved = (f.high_water(), T);
        let mut last = ahead;
        for ms in 0..4 {
            while let Ok(n) = f.at(last, T + ms) {
                last = n;
            }
        }
        let mut restarted = FenceIssuer::default();
        restarted.reload(saved.0, saved.1, T + 4);
        assert!(restarted.at(0, T + 4).unwrap() > last);
    }

    #[test]
    fn no_fence_is_issued_past_two_to_the_53() {
        let mut f = FenceIssuer::default();
        let top = MAX_FENCE - MAX_FENCE % EPOCHS; // the last fence of epoch 0
        assert_eq!(f.at(top - 1, T), Ok(top));
        assert_eq!(f.at(top, T), Err(FenceError::Exhausted));
        assert_eq!(f.at(0, T), Err(FenceError::Exhausted), "server-wide");
        let mut g = FenceIssuer::default();
        g.reload(MAX_FENCE - 5, T - 1000, T);
        assert_eq!(g.high_water(), MAX_FENCE);
    }

    #[test]
    fn a_fence_carries_its_masters_epoch_in_its_low_bits() {
        let mut f = FenceIssuer::default();
        let mut last = 0;
        for epoch in 0..2 * EPOCHS {
            for _ in 0..5 {
                last = f.at(last, T).unwrap();
                assert_eq!(last % EPOCHS, epoch % EPOCHS);
            }
            f.promoted();
        }
        assert_eq!(f.epoch(), 2 * EPOCHS);
    }

    #[test]
    fn a_promoted_replica_and_its_deposed_master_never_issue_the_same_fence() {
        // Both saw the same fences, run on the same clock, and issue to the same keys, the
        // replica once promoted: the case of a master paused past Sentinel's patience.
        let mut master = FenceIssuer::default();
        master.learn_epoch(5);
        let mut replica = master;
        replica.promoted();
        // Neither sees the other's fences (split brain): each key goes on from its own last.
        let (mut a, mut b) = (0, 0);
        let mut seen = std::collections::HashSet::new();
        for ms in 0..50 {
            for _ in 0..100 {
                a = master.at(a, T + ms).unwrap();
                b = replica.at(b, T + ms).unwrap();
                assert!(seen.insert(a) && seen.insert(b), "{a} or {b} twice");
            }
        }
    }

    #[test]
    fn an_epoch_learned_never_goes_back() {
        let mut f = FenceIssuer::default();
        f.learn_epoch(7);
        f.learn_epoch(3);
        assert_eq!(f.epoch(), 7);
        f.promoted();
        assert_eq!(f.epoch(), 8);
    }

    #[test]
    fn only_fences_exact_as_doubles_with_room_above_are_valid() {
        assert!(!is_valid(0));
        assert!(is_valid(1));
        assert!(is_valid(MAX_FENCE));
        assert!(!is_valid(MAX_FENCE + 1));
        assert!(is_valid_from_elsewhere(MAX_FENCE - HEADROOM));
        assert!(
            !is_valid_from_elsewhere(MAX_FENCE - HEADROOM + 1),
            "no room above it"
        );
        assert!(!is_valid_from_elsewhere(0));
        assert!(!is_valid(i64::MAX as u64));
    }

    #[test]
    fn the_floor_stays_exact_as_a_double_until_2109() {
        let jan_2109_ms = 4_386_268_800_000;
        assert!(floor(jan_2109_ms) < MAX_FENCE);
        let jan_2110_ms = 4_417_804_800_000;
        assert!(floor(jan_2110_ms) > MAX_FENCE);
    }
}
