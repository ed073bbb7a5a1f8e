//! Fence issuance. A fence is a hybrid-logical-clock value: the Unix time in milliseconds
//! shifted left by [`COUNTER_BITS`], plus a counter. Every new fence is the largest of
//!
//! - one more than the key's last fence (fences of a key never go backwards),
//! - one more than the server's high-water mark (a fresh key starts above every fence this
//!   server issued, although the key that held them is gone), and
//! - the clock floor `unix_ms << COUNTER_BITS`.
//!
//! The floor is what keeps fences unique when the high-water mark is lost: after a crash and
//! a restart from an older snapshot, every fence issued before the crash is below the floor
//! of any later millisecond, and a restart takes longer than one. That holds while the
//! server issues fewer than 2^10 fences in a millisecond (a million a second, more than one
//! Redis thread can do) and while the wall clock at restart is not behind the wall clock at
//! the crash.
//!
//! Ten counter bits keep fences below 2^53 until the year 2248, so that clients that hold
//! integers as doubles (JavaScript, Lua) compare them exactly.

pub const COUNTER_BITS: u32 = 10;

/// The largest fence accepted from outside (RDB, `RESTORE`, replication, AOF). A fence near
/// 2^63 would leave no room to issue larger ones before the signed 64-bit reply wrapped
/// negative; the clock floor stays below 2^53 for two centuries, so no honest fence comes
/// near this.
pub const MAX_FENCE: u64 = 1 << 62;

/// True for a fence this module could have issued.
pub fn is_valid(fence: u64) -> bool {
    (1..=MAX_FENCE).contains(&fence)
}

/// The server-wide high-water mark of fences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceIssuer {
    high_water: u64,
}

impl FenceIssuer {
    pub const fn new() -> Self {
        FenceIssuer { high_water: 0 }
    }

    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    /// Issues a fence for a key whose last fence was `last` (0 for a fresh key).
    pub fn issue(&mut self, last: u64, wall_ms: i64) -> u64 {
        let fence = (last + 1).max(self.high_water + 1).max(floor(wall_ms));
        self.high_water = fence;
        fence
    }

    /// Takes note of a fence issued elsewhere (loaded, restored or replicated), so that fresh
    /// keys start above it.
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
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
        let a = f.issue(0, T);
        let b = f.issue(a, T);
        let c = f.issue(0, T); // a fresh key
        assert!(a < b && b < c);
        assert!(a >= floor(T));
    }

    #[test]
    fn a_key_from_elsewhere_continues_above_its_last_fence() {
        let mut f = FenceIssuer::default();
        let far = floor(T) + 10_000;
        assert_eq!(f.issue(far, T), far + 1);
    }

    #[test]
    fn the_clock_floor_moves_fences_on_each_millisecond() {
        let mut f = FenceIssuer::default();
        let a = f.issue(0, T);
        let b = f.issue(a, T + 1);
        assert_eq!(b, floor(T + 1));
    }

    #[test]
    fn a_restart_that_lost_the_high_water_mark_starts_above_it() {
        // A busy millisecond before the crash: as many fences as one can issue.
        let mut before_crash = FenceIssuer::default();
        let mut last = 0;
        for _ in 0..(1 << COUNTER_BITS) - 1 {
            last = before_crash.issue(last, T);
        }
        // Restart from a snapshot that knew none of them, one millisecond later.
        let mut after = FenceIssuer::default();
        assert!(after.issue(0, T + 1) > last);
    }

    #[test]
    fn only_fences_with_room_above_them_are_valid() {
        assert!(!is_valid(0));
        assert!(is_valid(1));
        assert!(is_valid(MAX_FENCE));
        assert!(!is_valid(MAX_FENCE + 1));
        assert!(!is_valid(i64::MAX as u64));
    }

    #[test]
    fn fences_stay_exact_as_doubles() {
        let year_2200_ms = 7_258_118_400_000;
        assert!(floor(year_2200_ms) < 1 << 53);
    }
}
