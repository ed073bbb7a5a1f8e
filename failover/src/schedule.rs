//! The fault schedule's pure parts: the kinds of fault and their cycle, the count of what
//! was injected (and whether `--faults-per-kind` is reached), and `Together`, which has modes
//! run in parallel (`--parallel`) start their clients at one moment and stop their faults at
//! one moment, so that their grants are counted over the same time on the same machine.

use std::sync::{Condvar, Mutex, PoisonError};

/// A kind of fault, injected in turn (`CYCLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the master; restarted (empty) as a replica of the new master once
    /// Sentinel names one.
    Kill,
    /// SIGSTOP of the master for 3 s, past down-after-milliseconds: a failover, and an old
    /// master that comes back still believing it is master.
    Pause,
    /// `SENTINEL FAILOVER`: a graceful switch.
    Failover,
    /// SIGSTOP of a replica for 3 s: it lags, and may be the one promoted next.
    PauseReplica,
}

pub const CYCLE: [Fault; 4] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Failover,
    Fault::PauseReplica,
];

impl Fault {
    /// Its name in the log and the table.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill -9 master",
            Fault::Pause => "SIGSTOP master 3 s",
            Fault::Failover => "SENTINEL FAILOVER",
            Fault::PauseReplica => "SIGSTOP replica 3 s",
        }
    }
}

/// The faults of a run: injected, by kind (a `SENTINEL FAILOVER` Sentinel refused is not
/// injected, and is counted apart), and skipped (no master named, or it was down already).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Injected, in `CYCLE`'s order.
    pub injected: [usize; 4],
    pub refused_failovers: usize,
    pub skipped: usize,
}

impl FaultCounts {
    /// One fault of `kind` injected, or (`refused`) a `SENTINEL FAILOVER` refused.
    pub fn record(&mut self, kind: Fault, refused: bool) {
        if refused && kind == Fault::Failover {
            self.refused_failovers += 1;
        } else {
            self.injected[kind as usize] += 1;
        }
    }

    pub fn of(&self, kind: Fault) -> usize {
        self.injected[kind as usize]
    }

    /// Whether every kind was injected `per_kind` times or more.
    pub fn reached(&self, per_kind: usize) -> bool {
        self.injected.iter().all(|&n| n >= per_kind)
    }

    /// Kills and pauses of the master: each must bring a failover.
    pub fn master_faults(&self) -> usize {
        self.of(Fault::Kill) + self.of(Fault::Pause)
    }

    /// The table's rows: one per kind, then the refused and the skipped.
    pub fn rows(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = CYCLE
            .iter()
            .map(|&f| (format!("faults: {}", f.name()), self.of(f).to_string()))
            .collect();
        rows.push((
            "faults: SENTINEL FAILOVER refused".into(),
            self.refused_failovers.to_string(),
        ));
        rows.push((
            "faults skipped (no master up)".into(),
            self.skipped.to_string(),
        ));
        rows
    }
}

/// Where one mode of a `Together` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Starting,
    /// Servers up, waiting for the others to start the clients.
    Ready,
    /// Its faults reached `--faults-per-kind` (it injects on until every mode has).
    Reached,
    /// Done, or failed: no longer waited for.
    Gone,
}

/// Modes run in parallel, each in a thread of its own (`slot`): they start their clients
/// together (`ready`), once every mode that has not failed has its servers up, and stop
/// their faults together (`all_reached`), once every mode has injected `--faults-per-kind`
/// of each kind. A mode that fails or ends (`leave`) is waited for no longer. In a
/// sequential run each mode has a `Together` of its own, of one.
pub struct Together {
    stages: Mutex<Vec<Stage>>,
    changed: Condvar,
}

impl Together {
    pub fn new(modes: usize) -> Together {
        Together {
            stages: Mutex::new(vec![Stage::Starting; modes]),
            changed: Condvar::new(),
        }
    }

    fn set(&self, slot: usize, stage: Stage) {
        let mut stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        // Never back: a mode that has left stays gone.
        stages[slot] = stages[slot].max(stage);
        self.changed.notify_all();
    }

    /// Servers up: waits until every other mode is up too, or has left.
    pub fn ready(&self, slot: usize) {
        self.set(slot, Stage::Ready);
        let stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        let _all = self
            .changed
            .wait_while(stages, |s| s.contains(&Stage::Starting))
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// This mode's faults reached `--faults-per-kind`.
    pub fn reach(&self, slot: usize) {
        self.set(slot, Stage::Reached);
    }

    /// Every mode still running has reached `--faults-per-kind`.
    pub fn all_reached(&self) -> bool {
        let stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        stages.iter().all(|&s| s >= Stage::Reached)
    }

    /// This mode is done or failed: the others wait for it no longer.
    pub fn leave(&self, slot: usize) {
        self.set(slot, Stage::Gone);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

    use super::{Fault, FaultCounts, Together, CYCLE};

    #[test]
    fn faults_are_counted_by_kind_and_a_refused_failover_is_not_injected() {
        let mut c = FaultCounts::default();
        for _ in 0..2 {
            for f in CYCLE {
                c.record(f, false);
            }
        }
        c.record(Fault::Failover, true);
        c.record(Fault::Kill, true); // only a failover can be refused
        c.skipped += 1;
        assert_eq!(c.injected, [3, 2, 2, 2]);
        assert_eq!(c.refused_failovers, 1);
        assert_eq!(c.master_faults(), 5);
        let rows = c.rows();
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0], ("faults: kill -9 master".into(), "3".into()));
        assert_eq!(
            rows[4],
            ("faults: SENTINEL FAILOVER refused".into(), "1".into())
        );
        assert_eq!(rows[5].1, "1");
    }

    #[test]
    fn faults_per_kind_is_reached_when_every_kind_has_it() {
        let mut c = FaultCounts::default();
        assert!(c.reached(0));
        assert!(!c.reached(1));
        for f in [Fault::Kill, Fault::Pause, Fault::PauseReplica] {
            c.record(f, false);
        }
        c.record(Fault::Failover, true);
        assert!(!c.reached(1), "a refused failover is not one injected");
        c.record(Fault::Failover, false);
        assert!(c.reached(1));
        c.record(Fault::Kill, false);
        assert!(c.reached(1) && !c.reached(2));
    }

    #[test]
    fn modes_together_start_when_all_are_up_and_stop_when_all_reached() {
        let t = Together::new(1);
        t.ready(0); // alone: does not wait
        assert!(!t.all_reached());
        t.reach(0);
        assert!(t.all_reached());

        let t = Arc::new(Together::new(3));
        let waiters: Vec<_> = (0..2)
            .map(|slot| {
                let t = Arc::clone(&t);
                thread::spawn(move || t.ready(slot))
            })
            .collect();
        // The third mode fails before it is up: the others start without it.
        t.leave(2);
        for w in waiters {
            w.join().unwrap();
        }
        t.reach(0);
        assert!(!t.all_reached());
        t.reach(1);
        assert!(t.all_reached());
        // A mode that leaves after reaching is still not waited for, and never comes back.
        t.leave(0);
        t.ready(0);
        assert!(t.all_reached());
    }

    #[test]
    fn a_mode_that_leaves_unreached_stops_no_one_and_blocks_no_one() {
        let t = Together::new(2);
        t.reach(0);
        assert!(!t.all_reached());
        t.leave(1);
        assert!(t.all_reached());
    }
}
