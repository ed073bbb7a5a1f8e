//! Module configuration: `CONFIG GET/SET lock.*`, and the same names as load-time arguments
//! (`loadmodule libredis_lock.so max-ttl 60000`).

use std::sync::atomic::{AtomicI64, Ordering};

pub const DEFAULT_MAX_TTL: i64 = 86_400_000;
/// Ten years: any larger lease is a mistake, and the bound keeps deadline arithmetic far
/// from overflow.
pub const MAX_TTL_LIMIT: i64 = 315_360_000_000;

/// `lock.max-ttl`: the longest lease, in milliseconds, that `LOCK.ACQUIRE` and
/// `LOCK.EXTEND` accept.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// Off: a replica that disconnects pauses nothing.
pub const DEFAULT_REPLICA_LOSS_PAUSE_MS: i64 = 0;
/// A minute: far longer than Sentinel needs to reconfigure the other replicas, and short
/// enough that a mistyped value cannot stop a master's writes for long.
pub const REPLICA_LOSS_PAUSE_LIMIT: i64 = 60_000;

/// `lock.replica-loss-pause-ms`: how long a master pauses writes (`CLIENT PAUSE … WRITE`)
/// when a replica that was online disconnects; 0 turns it off. See [`replica_loss_pause`].
pub static REPLICA_LOSS_PAUSE_MS: AtomicI64 = AtomicI64::new(DEFAULT_REPLICA_LOSS_PAUSE_MS);

pub fn replica_loss_pause_ms() -> i64 {
    REPLICA_LOSS_PAUSE_MS.load(Ordering::Relaxed)
}

/// The load-time argument is not range-checked by the server (the crate hands it over as
/// the setting's default), so `init` refuses a value outside the range `CONFIG SET` allows.
pub fn check_replica_loss_pause(ms: i64) -> Result<(), String> {
    if (0..=REPLICA_LOSS_PAUSE_LIMIT).contains(&ms) {
        Ok(())
    } else {
        Err(format!(
            "replica-loss-pause-ms must be between 0 and {REPLICA_LOSS_PAUSE_LIMIT}, not {ms}"
        ))
    }
}

/// How long to pause writes, if at all, when a replica that was online disconnects. A master
/// cannot tell a replica promoted in its place (Sentinel's failover) from one that died, and
/// until the other replicas follow the new master their acknowledgements (`WAIT`) prove
/// nothing: writes wait for `setting_ms`, as the server's own `FAILOVER` makes them wait.
/// A replica (`master` false) never pauses: the replicas it loses are its own, it grants
/// nothing, and a pause would only delay its first writes if it were promoted next.
///
/// The pause is `CLIENT PAUSE <ms> WRITE` each time, which never shortens a pause in force:
/// on Redis 7.0.15 a second pause keeps the later end and the stricter type (a `WRITE` pause
/// inside an operator's longer `ALL` pause leaves reads paused to its end), so a second loss
/// re-arms the pause and an operator's longer pause stays as it was
/// (tests/replication/replica_loss.rs).
pub fn replica_loss_pause(setting_ms: i64, master: bool) -> Option<u64> {
    (master && setting_ms > 0).then(|| setting_ms.min(REPLICA_LOSS_PAUSE_LIMIT) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_time_value_is_range_checked() {
        for ok in [0, 1, 1_500, 60_000] {
            assert_eq!(check_replica_loss_pause(ok), Ok(()));
        }
        for bad in [-1, 60_001, i64::MIN, i64::MAX] {
            let e = check_replica_loss_pause(bad).unwrap_err();
            assert!(e.contains("between 0 and 60000"), "{e}");
        }
    }

    #[test]
    fn off_by_default_and_at_zero() {
        assert_eq!(DEFAULT_REPLICA_LOSS_PAUSE_MS, 0);
        assert_eq!(replica_loss_pause(0, true), None);
        assert_eq!(replica_loss_pause(-1, true), None);
    }

    #[test]
    fn a_master_pauses_for_the_setting() {
        assert_eq!(replica_loss_pause(1, true), Some(1));
        assert_eq!(replica_loss_pause(1_500, true), Some(1_500));
        assert_eq!(
            replica_loss_pause(REPLICA_LOSS_PAUSE_LIMIT, true),
            Some(60_000)
        );
        // init refuses a load-time value out of range; the decision stays in range anyway.
        assert_eq!(replica_loss_pause(i64::MAX, true), Some(60_000));
    }

    #[test]
    fn a_replica_never_pauses() {
        for setting in [0, 1, 1_500, 60_000] {
            assert_eq!(replica_loss_pause(setting, false), None);
        }
    }
}
