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
//! pipelined on 8 connections); the bucket lets such bursts through and holds a sustained
//! rate to 2.048 million a second.
//!
//! Fences above the floor (a key that came from a node whose clock is ahead) grow no faster,
//! so a snapshot's high-water mark plus a full bucket plus [`PER_MS`] for every millisecond
//! since it was saved is above anything issued after it ([`FenceIssuer::reload`]).
//!
//! Eleven counter bits keep fences below 2^53, exact for clients that hold integers as
//! doubles (JavaScript, Lua), until May 2109; a fence that would not be is refused.

use std::fmt;

pub const COUNTER_BITS: u32 = 11;

/// Fences a millisecond of the wall clock, sustained.
pub const PER_MS: u64 = 1 << COUNTER_BITS;

/// How many milliseconds' worth of fences a burst may take ahead of the clock.
pub const BURST_MS: u64 = 8;

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
        let fence = (last + 1).max(self.high_water + 1).max(floor(wall_ms));
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
    /// is at most a full bucket plus [`PER_MS`] a millisecond above it.
    pub fn reload(&mut self, high_water: u64, saved_ms: i64, now_ms: i64) {
        let elapsed = (now_ms.saturating_sub(saved_ms).max(0) as u64).saturating_add(1);
        let bound = high_water
            .saturating_add(CAPACITY)
            .saturating_add(elapsed.saturating_mul(PER_MS));
        self.observe(bound.min(MAX_FENCE));
    }
}

fn floor(wall_ms: i64) -> u64 {
    (wall_ms.max(0) as u64) << COUNTER_BITS
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
        let far = floor(T) + 10_000_000;
        assert_eq!(f.at(far, T), Ok(far + 1));
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
            floor(T + BURST_MS as i64) - 1,
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
        assert_eq!(f.at(MAX_FENCE - 1, T), Ok(MAX_FENCE));
        assert_eq!(f.at(MAX_FENCE, T), Err(FenceError::Exhausted));
        assert_eq!(f.at(0, T), Err(FenceError::Exhausted), "server-wide");
        let mut g = FenceIssuer::default();
        g.reload(MAX_FENCE - 5, T - 1000, T);
        assert_eq!(g.high_water(), MAX_FENCE);
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
