//! The two clocks of the module. Leases and waits run on the monotonic clock, so that a step of the
//! wall clock neither ends them early nor stretches them (docs/guarantees.md, guarantee 2). The
//! wall clock appears only where a deadline leaves the process (RDB, AOF and replication carry
//! absolute Unix-millisecond deadlines, converted back to monotonic ones when read) and in the
//! floor under fences.
//!
//! Each command reads the monotonic clock once. The wall clock is derived from it, through
//! the offset between the two that the cron re-reads ten times a second: a clock read costs
//! as much as a tenth of an acquire here (perf), and a derived wall clock also moves
//! smoothly between two reads. A step of the wall clock reaches fences and propagated
//! deadlines at the next cron tick, within 100 ms.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One reading of both clocks, in microseconds (fine enough that rounding never shortens a
/// lease): `mono` of CLOCK_MONOTONIC plus a fixed offset, `wall_us` of Unix time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono: u64,
    pub wall_us: i64,
}

/// Unix microseconds minus `mono` at the last `sync_wall`; `UNSET` before the first.
static WALL_OFFSET_US: AtomicI64 = AtomicI64::new(UNSET);
const UNSET: i64 = i64::MIN;

pub fn now() -> Now {
    let mono = mono_us();
    let mut offset = WALL_OFFSET_US.load(Ordering::Relaxed);
    if offset == UNSET {
        offset = sync_wall();
    }
    Now {
        mono,
        wall_us: mono as i64 + offset,
    }
}

/// The time at which the running script or transaction began (`EXEC`, `EVAL`, `FCALL` and
/// their variants), noted by the command filter: its monotonic reading, 0 once a command
/// outside one has seen that it ended, and its wall reading. Only the main thread runs
/// commands and filters, so relaxed loads and stores (plain moves) are enough; a
/// thread-local would cost a call into the dynamic linker per command in a shared library.
static UNIT_MONO: AtomicU64 = AtomicU64::new(0);
static UNIT_WALL_US: AtomicI64 = AtomicI64::new(0);

/// A script or transaction is about to run.
pub fn unit_starts() {
    let start = now();
    UNIT_WALL_US.store(start.wall_us, Ordering::Relaxed);
    UNIT_MONO.store(start.mono, Ordering::Relaxed);
}

/// The time a command judges leases by: within a script or `MULTI`/`EXEC`, the time it
/// began, as the server judges key expiry there; elsewhere, now. `nested` says whether the
/// running command is inside one; it is asked only after a script or transaction began.
pub fn now_for(nested: impl FnOnce() -> bool) -> Now {
    match UNIT_MONO.load(Ordering::Relaxed) {
        0 => now(),
        mono if nested() => Now {
            mono,
            wall_us: UNIT_WALL_US.load(Ordering::Relaxed),
        },
        _ => {
            UNIT_MONO.store(0, Ordering::Relaxed);
            now()
        }
    }
}

/// Re-reads the wall clock's offset from the monotonic one (the cron calls this every tick).
pub fn sync_wall() -> i64 {
    let mono = mono_us();
    let wall_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        d.as_secs() as i64 * 1_000_000 + i64::from(d.subsec_micros())
    });
    let offset = wall_us - mono as i64;
    WALL_OFFSET_US.store(offset, Ordering::Relaxed);
    offset
}

fn mono_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid place for the result; CLOCK_MONOTONIC exists on every system
    // Redis runs on, so the call cannot fail. (std's Instant adds checked subtraction and a
    // lazily set origin to every read: a sixth of this function's cost per command.)
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // Offset well above zero, so that a deadline converted from a wall time in the past
    // stays a positive number rather than saturating at 0.
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000 + MONO_BASE
}

/// Far enough above zero that a deadline converted from a wall time long past (ten years of
/// microseconds) stays positive.
const MONO_BASE: u64 = 1 << 49;

impl Now {
    /// Unix milliseconds.
    pub fn wall(self) -> i64 {
        self.wall_us.div_euclid(1000)
    }

    /// Monotonic milliseconds.
    pub fn mono_ms(self) -> i64 {
        (self.mono / 1000) as i64
    }

    /// The Unix-millisecond time at which monotonic `deadline` falls, as seen now; rounded
    /// up, so that a lease carried to a replica or a restart is never shorter.
    pub fn to_wall(self, deadline: u64) -> i64 {
        let at_us = self.wall_us + (deadline as i64 - self.mono as i64);
        at_us.div_euclid(1000) + i64::from(at_us.rem_euclid(1000) != 0)
    }

    /// The monotonic deadline for Unix-millisecond time `wall_deadline`, as seen now.
    pub fn to_mono(self, wall_deadline: i64) -> u64 {
        let delta_us = wall_deadline
            .saturating_mul(1000)
            .saturating_sub(self.wall_us);
        (self.mono as i64).saturating_add(delta_us).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Now = Now {
        mono: 5_000_000,
        wall_us: 1_700_000_000_000_000,
    };

    #[test]
    fn round_trip() {
        assert_eq!(NOW.to_wall(6_000_000), 1_700_000_001_000);
        assert_eq!(NOW.to_mono(1_700_000_001_000), 6_000_000);
        // A deadline already past stays in the past.
        assert_eq!(NOW.to_mono(1_699_999_999_000), 4_000_000);
        assert_eq!(NOW.to_mono(i64::MIN), 0);
    }

    #[test]
    fn wall_deadlines_round_up() {
        assert_eq!(NOW.to_wall(5_000_001), 1_700_000_000_001);
        assert_eq!(NOW.to_wall(4_999_999), 1_700_000_000_000);
        assert_eq!(NOW.to_wall(4_998_500), 1_699_999_999_999);
        // Sub-millisecond wall time counts: 1.5 ms into a millisecond plus 0.6 ms of lease
        // ends 2.1 ms in, which rounds up to 3, not to 1 + 1.
        let mid = Now {
            mono: 5_000_000,
            wall_us: 1_700_000_000_001_500,
        };
        assert_eq!(mid.to_wall(5_000_600), 1_700_000_000_003);
        assert_eq!(mid.wall(), 1_700_000_000_001);
        assert_eq!(mid.to_mono(1_700_000_000_003), 5_001_500);
    }

    #[test]
    fn a_script_or_transaction_keeps_the_time_it_began() {
        assert!(now_for(|| panic!("asked outside a unit")).mono >= MONO_BASE);
        unit_starts();
        let start = now_for(|| true);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(now_for(|| true), start, "inside: the start");
        assert!(now().mono > start.mono + 1000);
        assert!(now_for(|| false).mono > start.mono, "after it: now");
        assert_eq!(UNIT_MONO.load(Ordering::Relaxed), 0, "and forgotten");
    }

    #[test]
    fn both_clocks_advance_with_real_time_and_the_wall_one_is_unix_time() {
        let a = now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now();
        let mono_ms = (b.mono - a.mono) / 1000;
        assert!(
            (20..200).contains(&mono_ms),
            "monotonic clock moved {mono_ms} ms"
        );
        assert_eq!(
            b.wall_us - a.wall_us,
            (b.mono - a.mono) as i64,
            "wall derived from it"
        );
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(
            (unix_ms - b.wall()).abs() < 100,
            "wall {} vs {unix_ms}",
            b.wall()
        );
        assert!(a.mono >= MONO_BASE);
    }
}
