//! Fence issuance. A fence is a hybrid-logical-clock value: the Unix time in seconds shifted
//! left by [`COUNTER_BITS`], plus a counter. Every new fence is the largest of
//!
//! - one more than the key's last fence (fences of a key never go backwards),
//! - one more than the server's high-water mark (a fresh key starts above every fence this
//!   server issued, although the key that held them is gone), and
//! - the clock floor `unix_seconds << COUNTER_BITS`.
//!
//! The floor is what keeps fences unique when the high-water mark is lost: after a crash and
//! a restart from an older snapshot, the fences issued after the snapshot are below the
//! floor of the second in which the server comes back ([`FenceIssuer::starting_at`]). It holds
//! while fewer than 2^20 fences are issued per second (a Redis server issues well under that)
//! and while the wall clock at restart is not behind the wall clock at the crash.
//!
//! Seconds rather than milliseconds keep fences below 2^53 (until the year 2242), so that
//! clients that hold integers as doubles (JavaScript, Lua) compare them exactly.

pub const COUNTER_BITS: u32 = 20;

/// The server-wide high-water mark of fences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceIssuer {
    high_water: u64,
}

impl FenceIssuer {
    /// An issuer for a server started at `wall_ms`: its first fence is above every fence that
    /// could have been issued in that second or before, on this server or its lost past.
    pub fn starting_at(wall_ms: i64) -> Self {
        FenceIssuer {
            high_water: floor(wall_ms + 1000) - 1,
        }
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
    (wall_ms.max(0) as u64 / 1000) << COUNTER_BITS
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
    fn the_clock_floor_moves_fences_on_each_second() {
        let mut f = FenceIssuer::default();
        let a = f.issue(0, T);
        let b = f.issue(a, T + 1000);
        assert_eq!(b, floor(T + 1000));
    }

    #[test]
    fn a_restart_in_the_same_second_starts_above_that_second() {
        let mut before_crash = FenceIssuer::default();
        let mut last = 0;
        for i in 0..1000 {
            last = before_crash.issue(last, T + i % 1000);
        }
        // Restart from a snapshot that knew none of those fences, within the same second.
        let mut after = FenceIssuer::starting_at(T + 999);
        assert!(after.issue(0, T + 999) > last);
    }

    #[test]
    fn fences_stay_exact_as_doubles() {
        let year_2200_ms = 7_258_118_400_000;
        assert!(floor(year_2200_ms) < 1 << 53);
    }
}

static SERVER_FENCES: std::sync::Mutex<FenceIssuer> =
    std::sync::Mutex::new(FenceIssuer { high_water: 0 });

/// This server's issuer. Only the main thread touches it (commands, callbacks, loading), so
/// the lock is never contended; it is a `Mutex` only to make the static safe.
pub fn server_fences() -> std::sync::MutexGuard<'static, FenceIssuer> {
    SERVER_FENCES.lock().unwrap_or_else(|e| e.into_inner())
}
