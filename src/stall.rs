//! Stalls of the event loop: a master that stood still (SIGSTOP, a paused VM, swapping, a
//! slow command) long enough for Sentinel to promote a replica meanwhile.
//!
//! Such a master wakes up believing it is still master, with every replica still attached as
//! it last saw them. The kernel hands it the clients' commands that queued while it stood
//! still before the closed connections of the replicas that left it, in the order they
//! arrived, and the server reads its replicas' departures only at the end of the turn (it
//! frees them asynchronously). So the first turn after a stall runs those commands on the
//! old picture: a grant, an extend or a guarded write runs, and `WAIT 1` is then confirmed by
//! a replica Sentinel has not moved yet, which drops it when it follows the new master
//! (failover/README.md, "The stall"). `lock.replica-loss-pause-ms` comes too late for them: it
//! starts when the departures are read.
//!
//! So the module watches the turns of the loop. It marks the time at each edge of the
//! loop's sleep (the `EVENTLOOP` server event, before and after it sleeps): a gap between two
//! marks longer than `lock.stall-threshold-ms` is a stall. Found at the wake-up, before the
//! turn reads any command, the master pauses writes then (`pause.rs`), so every write of that
//! turn waits for the pause, by when the departures were read. A stall inside a turn (the
//! process stopped while it ran commands) is found by the next lock write or sweep of the
//! turn, which pauses and is refused, and at the latest by the mark before the next sleep,
//! which pauses the next turn. One stall is reported once: whoever finds it moves the mark.
//!
//! The loop sleeps at most until its next timer (the server cron: 1000/`hz` ms, 100 ms at the
//! default `hz`), so the threshold must be above that; Sentinel's `down-after-milliseconds`
//! is the natural value, since a shorter stall cannot have let it fail the master over.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config;

/// Monotonic microseconds at the last mark; 0 before the first, so that a stall is never
/// measured from the module's load.
static MARK_US: AtomicU64 = AtomicU64::new(0);

/// How long the loop stood still between a mark at `mark_us` and `now_us`, in whole
/// milliseconds, if that is longer than `threshold_ms`; `None` otherwise, and always when the
/// threshold is 0 (off) or there was no mark yet.
pub fn stalled(mark_us: u64, now_us: u64, threshold_ms: i64) -> Option<u64> {
    if threshold_ms <= 0 || mark_us == 0 {
        return None;
    }
    let gap_us = now_us.saturating_sub(mark_us);
    (gap_us > threshold_ms as u64 * 1000).then_some(gap_us / 1000)
}

/// Whether stalls are looked for at all (a relaxed load: the commands' fast path).
pub fn watching() -> bool {
    config::stall_threshold_ms() > 0
}

/// An edge of the loop's sleep (before it, after it): the stall since the last mark, if any.
/// The mark moves to now (read from `mono_us` only while stalls are looked for). While they
/// are not, there is no mark, so that turning the setting on later does not measure a gap
/// from the moment it was turned off.
pub fn edge(mono_us: impl FnOnce() -> u64) -> Option<u64> {
    let threshold = config::stall_threshold_ms();
    if threshold <= 0 {
        MARK_US.store(0, Ordering::Relaxed);
        return None;
    }
    let now = mono_us();
    stalled(MARK_US.swap(now, Ordering::Relaxed), now, threshold)
}

/// Inside a turn (a command, a timer): the stall since the last mark, if any; the mark moves
/// only when one is found, so that the rest of the turn does not report it again.
pub fn within(now_us: u64) -> Option<u64> {
    let found = stalled(
        MARK_US.load(Ordering::Relaxed),
        now_us,
        config::stall_threshold_ms(),
    );
    if found.is_some() {
        MARK_US.store(now_us, Ordering::Relaxed);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::stalled;

    const MS: u64 = 1000;

    #[test]
    fn off_at_zero_and_before_the_first_mark() {
        assert_eq!(stalled(1, 10_000_000 * MS, 0), None);
        assert_eq!(stalled(1, 10_000_000 * MS, -5), None);
        assert_eq!(stalled(0, 10_000_000 * MS, 1000), None);
    }

    #[test]
    fn a_gap_longer_than_the_threshold_is_a_stall_in_whole_milliseconds() {
        let mark = 7_000 * MS;
        assert_eq!(
            stalled(mark, mark + 1000 * MS, 1000),
            None,
            "equal is not longer"
        );
        assert_eq!(stalled(mark, mark + 1000 * MS + 1, 1000), Some(1000));
        assert_eq!(stalled(mark, mark + 3012 * MS + 999, 1000), Some(3012));
        assert_eq!(stalled(mark, mark + 99 * MS, 100), None);
    }

    #[test]
    fn a_clock_reading_before_the_mark_is_no_stall() {
        assert_eq!(stalled(9_000 * MS, 8_000 * MS, 1), None);
    }
}
