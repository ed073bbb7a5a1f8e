//! How the clients take their locks and what the servers run with: the one place where a
//! mode (durable grants, module settings, `min-replicas-to-write`) changes the run.

use std::time::Duration;

use redis_lock_client::Mutex;

/// How long a durable mode's `WAIT` waits for replicas, after a grant or a guarded write.
const WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// How the clients take their locks, and what the servers run with.
///
/// In a durable mode, the rule for a guarded write is the grant's: the library's
/// `durable(n, t)` covers grants only, so the harness sends the guarded write itself
/// (`LOCK.GUARD`, then `WAIT n t` on the same connection) and counts it acknowledged only
/// when `n` replicas confirmed it; a write they did not confirm is of unknown outcome (it
/// ran on the master and may survive or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The client library's defaults, the module's defaults: the baseline.
    Plain,
    /// The library's durable mode, `WAIT 1 500` after each grant (and guarded write); no
    /// server setting. Issue 26's second column.
    Durable1,
    /// `min-replicas-to-write 1`, `min-replicas-max-lag 1` on every data server, and
    /// `WAIT 2 500` (every replica) after each grant and guarded write: issue 26's third run.
    Settings,
    /// `min-replicas-to-write 1`, `min-replicas-max-lag 1`, and `WAIT 1 500`. The candidate
    /// for safety at half of plain's grants: `WAIT 2` pays for every moment one replica is
    /// missing (a killed master until it resyncs, a paused replica, a deposed master until
    /// Sentinel converts it, 8-10 s), which is most of the run at a fault every 7 s. `WAIT 1`
    /// keeps grants going with one replica, and `min-replicas-to-write` shuts the commonest
    /// split brain: a master resuming from a pause with both replicas gone refuses every
    /// write (`NOREPLICAS`) within a second, instead of granting and then failing `WAIT`.
    /// What it cannot shut: a deposed master with a replica Sentinel has not reconfigured
    /// yet, which confirms `WAIT 1`, or Sentinel promoting the replica that did not confirm.
    /// Measured: 0 in two 60 s runs at 62-64% of plain's grants, then 431 lost acknowledged
    /// guarded writes in a 180 s run (a double failover): not a safe deployment.
    MinReplicas1,
}

impl Mode {
    /// Every mode, in the order `--mode all` runs them.
    pub const ALL: [Mode; 4] = [
        Mode::Plain,
        Mode::Durable1,
        Mode::Settings,
        Mode::MinReplicas1,
    ];

    pub fn parse(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode {s:?} (known: {}, all)", known.join(", "))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Durable1 => "durable1",
            Mode::Settings => "settings",
            Mode::MinReplicas1 => "minreplicas1",
        }
    }

    /// Extra arguments for every data server.
    pub fn server_args(self) -> Vec<String> {
        match self {
            Mode::Plain | Mode::Durable1 => Vec::new(),
            Mode::Settings | Mode::MinReplicas1 => [
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "1",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        }
    }

    /// The replicas a grant and a guarded write must reach (`WAIT n timeout`), if any.
    pub fn durable(self) -> Option<(u32, Duration)> {
        match self {
            Mode::Plain => None,
            Mode::Durable1 | Mode::MinReplicas1 => Some((1, WAIT_TIMEOUT)),
            Mode::Settings => Some((2, WAIT_TIMEOUT)),
        }
    }

    /// The lock as the clients take it.
    pub fn lock(self, mutex: Mutex) -> Mutex {
        match self.durable() {
            None => mutex,
            Some((replicas, timeout)) => mutex.durable(replicas, timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn every_mode_parses_by_its_name() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Ok(m));
        }
        assert!(Mode::parse("durable").is_err());
    }
}
