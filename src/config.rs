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

/// Off: a stall of the event loop pauses nothing.
pub const DEFAULT_STALL_THRESHOLD_MS: i64 = 0;
/// An hour: a failure detector slower than that is no failure detector.
pub const STALL_THRESHOLD_LIMIT: i64 = 3_600_000;

/// `lock.stall-threshold-ms`: a master whose event loop stood still longer than this may
/// have been failed over meanwhile, and pauses writes as after a replica loss (`stall.rs`);
/// 0 turns it off.
pub static STALL_THRESHOLD_MS: AtomicI64 = AtomicI64::new(DEFAULT_STALL_THRESHOLD_MS);

/// The stall threshold in force: the setting, or 0 (off) while `replica-loss-pause-ms` is 0,
/// since the pause after a stall is that long.
pub fn stall_threshold_ms() -> i64 {
    if replica_loss_pause_ms() > 0 {
        STALL_THRESHOLD_MS.load(Ordering::Relaxed)
    } else {
        0
    }
}

/// Every setting a load-time argument may name, with its range (as `CONFIG SET` checks it).
const SETTINGS: [(&str, std::ops::RangeInclusive<i64>); 3] = [
    ("max-ttl", 1..=MAX_TTL_LIMIT),
    ("replica-loss-pause-ms", 0..=REPLICA_LOSS_PAUSE_LIMIT),
    ("stall-threshold-ms", 0..=STALL_THRESHOLD_LIMIT),
];

/// Load-time arguments are not checked by the server: the crate hands each over as its
/// setting's default, and ignores a name it does not know. So `init` refuses, with the
/// reason, a name that is no setting (a typo would leave the setting at its default), a
/// name without a value, and a value outside the range `CONFIG SET` allows.
pub fn check_load_args(args: &[&[u8]]) -> Result<(), String> {
    for pair in args.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]);
        let Some((_, range)) = SETTINGS.iter().find(|(n, _)| name.eq_ignore_ascii_case(n)) else {
            let known: Vec<&str> = SETTINGS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown argument {name:?} (arguments are settings and their values: {})",
                known.join(", ")
            ));
        };
        let Some(value) = pair.get(1) else {
            return Err(format!("{name} needs a value"));
        };
        let in_range = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|v| range.contains(&v));
        if !in_range {
            return Err(format!(
                "{name} must be between {} and {}, not {:?}",
                range.start(),
                range.end(),
                String::from_utf8_lossy(value)
            ));
        }
    }
    Ok(())
}

/// How long to pause writes, if at all, when a replica that was online disconnects, or the
/// event loop stood still past `lock.stall-threshold-ms` (`stall.rs`). A master
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
    fn load_time_arguments_are_known_settings_with_values_in_range() {
        let ok: [&[&[u8]]; 5] = [
            &[],
            &[b"max-ttl", b"60000"],
            &[b"replica-loss-pause-ms", b"0", b"MAX-TTL", b"1"],
            &[b"replica-loss-pause-ms", b"60000"],
            &[b"stall-threshold-ms", b"3600000"],
        ];
        for args in ok {
            assert_eq!(check_load_args(args), Ok(()), "{args:?}");
        }
        let bad: [(&[&[u8]], &str); 8] = [
            (
                &[b"stall-threshold-ms", b"3600001"],
                "stall-threshold-ms must be between 0 and 3600000",
            ),
            (
                &[b"replica-loss-pause-ms", b"-1"],
                "between 0 and 60000, not \"-1\"",
            ),
            (&[b"replica-loss-pause-ms", b"60001"], "between 0 and 60000"),
            (
                &[b"max-ttl", b"0"],
                "max-ttl must be between 1 and 315360000000",
            ),
            (&[b"max-ttl", b"1e3"], "not \"1e3\""),
            (&[b"max-ttl"], "max-ttl needs a value"),
            (
                &[b"replica-loss-pause", b"3000"],
                "unknown argument \"replica-loss-pause\"",
            ),
            (&[b"max-ttl", b"5", b"5"], "unknown argument \"5\""),
        ];
        for (args, want) in bad {
            let e = check_load_args(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
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
        // init refuses a load-time value out of range (check_load_args); the decision stays
        // in range anyway.
        assert_eq!(replica_loss_pause(i64::MAX, true), Some(60_000));
    }

    #[test]
    fn a_replica_never_pauses() {
        for setting in [0, 1, 1_500, 60_000] {
            assert_eq!(replica_loss_pause(setting, false), None);
        }
    }
}
