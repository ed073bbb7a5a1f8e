//! Fence issuance. A fence is a hybrid-logical-clock value: the Unix time in milliseconds
//! shifted left by [`COUNTER_BITS`], plus a counter. Every new fence is the largest of
//!
//! - one more than the key's last fence (fences of a key never go backwards),
//! - one more than the server's high-water mark (a fresh key starts above every fence this
//!   server issued, although the key that held them is gone), and
//! - the clock floor `unix_ms << COUNTER_BITS`.
//!
//! The floor keeps fences unique when the high-water mark is lost: after a crash and a
//! restart from an older snapshot, every fence issued before the crash is below the floor of
//! any later millisecond, and a restart takes longer than one. That holds by construction:
//! the issuer hands out at most [`PER_MS`] fences in one millisecond of the wall clock and
//! refuses more (a retryable error), so a fence issued while the high-water mark is below the
//! floor never reaches the next millisecond's floor. One server thread issues about 1.5
//! million fences a second at most (`LOCK.FENCE` pipelined); the limit is 2.048 million.
//!
//! Fences above the floor (a key that came from a node whose clock is ahead) grow by at most
//! [`PER_MS`] a millisecond too, so a snapshot's high-water mark plus [`PER_MS`] for every
//! millisecond since it was saved is above anything issued after it ([`FenceIssuer::reload`]).
//!
//! Eleven counter bits keep fences below 2^53, exact for clients that hold integers as
//! doubles (JavaScript, Lua), until the year 2109; a fence that would not be is refused.

use std::fmt;

pub const COUNTER_BITS: u32 = 11;

/// The most fences issued in one millisecond of the wall clock.
pub const PER_MS: u64 = 1 << COUNTER_BITS;

/// The largest fence: the largest integer a double holds exactly.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// True for a fence this module could have issued.
pub fn is_valid(fence: u64) -> bool {
    (1..=MAX_FENCE).contains(&fence)
}

/// Why no fence was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceError {
    /// [`PER_MS`] fences were issued in this millisecond already: retry in the next.
    RateLimited,
    /// The next fence would not be exact as a double.
    Exhausted,
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::RateLimited => write!(
                f,
                "TRYAGAIN {PER_MS} fences were issued in this millisecond; retry"
            ),
            FenceError::Exhausted => f.write_str("ERR no fence left below 2^53 for this key"),
        }
    }
}

/// The server-wide high-water mark of fences, and the count issued in the current
/// millisecond.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceIssuer {
    high_water: u64,
    /// The wall-clock millisecond the count is for.
    ms: i64,
    issued: u64,
}

impl FenceIssuer {
    pub const fn new() -> Self {
        FenceIssuer {
            high_water: 0,
            ms: 0,
            issued: 0,
        }
    }

    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    /// Issues a fence for a key whose last fence was `last` (0 for a fresh key), at Unix
    /// millisecond `wall_ms`.
    pub fn issue(&mut self, last: u64, wall_ms: i64) -> Result<u64, FenceError> {
        if wall_ms != self.ms {
            self.ms = wall_ms;
            self.issued = 0;
        }
        if self.issued >= PER_MS {
            return Err(FenceError::RateLimited);
        }
        let fence = (last + 1).max(self.high_water + 1).max(floor(wall_ms));
        if fence > MAX_FENCE {
            return Err(FenceError::Exhausted);
        }
        self.high_water = fence;
        self.issued += 1;
        Ok(fence)
    }

    /// Takes note of a fence issued elsewhere (loaded, restored or replicated), so that fresh
    /// keys start above it.
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
    }

    /// Takes note of a snapshot's high-water mark, saved at Unix millisecond `saved_ms` and
    /// loaded at `now_ms`: whatever this server issued after the save (and lost in a crash)
    /// is at most [`PER_MS`] a millisecond above it.
    pub fn reload(&mut self, high_water: u64, saved_ms: i64, now_ms: i64) {
        let elapsed = (now_ms.saturating_sub(saved_ms).max(0) as u64).saturating_add(1);
        let bound = high_water.saturating_add(elapsed.saturating_mul(PER_MS));
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

    #[test]
    fn fences_increase_per_key_and_server_wide() {
        let mut f = FenceIssuer::default();
        let a = f.issue(0, T).unwrap();
        let b = f.issue(a, T).unwrap();
        let c = f.issue(0, T).unwrap(); // a fresh key
        assert!(a < b && b < c);
        assert!(a >= floor(T));
    }

    #[test]
    fn a_key_from_elsewhere_continues_above_its_last_fence() {
        let mut f = FenceIssuer::default();
        let far = floor(T) + 10_000_000;
        assert_eq!(f.issue(far, T), Ok(far + 1));
    }

    #[test]
    fn the_clock_floor_moves_fences_on_each_millisecond() {
        let mut f = FenceIssuer::default();
        let a = f.issue(0, T).unwrap();
        let b = f.issue(a, T + 1).unwrap();
        assert_eq!(b, floor(T + 1));
    }

    #[test]
    fn no_more_than_per_ms_fences_in_one_millisecond() {
        let mut f = FenceIssuer::default();
        let mut last = 0;
        for _ in 0..PER_MS {
            last = f.issue(last, T).unwrap();
        }
        assert_eq!(
            last,
            floor(T + 1) - 1,
            "the whole millisecond, not one more"
        );
        assert_eq!(f.issue(last, T), Err(FenceError::RateLimited));
        assert_eq!(f.issue(0, T), Err(FenceError::RateLimited));
        assert_eq!(f.issue(last, T + 1), Ok(floor(T + 1)));
    }

    #[test]
    fn a_burst_lost_in_a_crash_is_below_every_fence_after_the_restart() {
        // As many fences as the issuer allows, over several milliseconds.
        let mut before_crash = FenceIssuer::default();
        let mut last = 0;
        for ms in 0..5 {
            while let Ok(f) = before_crash.issue(last, T + ms) {
                last = f;
            }
        }
        // Restart from a snapshot that knew none of them, in a later millisecond.
        let mut after = FenceIssuer::default();
        assert!(after.issue(0, T + 5).unwrap() > last);
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
            while let Ok(n) = f.issue(last, T + ms) {
                last = n;
            }
        }
        let mut restarted = FenceIssuer::default();
        restarted.reload(saved.0, saved.1, T + 4);
        assert!(restarted.issue(0, T + 4).unwrap() > last);
    }

    #[test]
    fn no_fence_is_issued_past_two_to_the_53() {
        let mut f = FenceIssuer::default();
        assert_eq!(f.issue(MAX_FENCE - 1, T), Ok(MAX_FENCE));
        assert_eq!(f.issue(MAX_FENCE, T), Err(FenceError::Exhausted));
        let mut g = FenceIssuer::default();
        g.reload(MAX_FENCE - 5, T - 1000, T);
        assert_eq!(g.high_water(), MAX_FENCE);
    }

    #[test]
    fn only_fences_exact_as_doubles_are_valid() {
        assert!(!is_valid(0));
        assert!(is_valid(1));
        assert!(is_valid(MAX_FENCE));
        assert!(!is_valid(MAX_FENCE + 1));
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
