//! The faults: from `--seed`, one every `--fault-min-ms`..`--fault-max-ms` after a warm-up,
//! cycling through kill -9 of the master, SIGSTOP of the master, `SENTINEL FAILOVER` and
//! SIGSTOP of a replica (`schedule`); resuming paused servers and restarting killed ones, and
//! at the end putting every server back. The faults stop at `--seconds`, or sooner once every
//! kind was injected `--faults-per-kind` times (in every mode run in parallel).

use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{Nanos, Node};
use crate::schedule::{Fault, FaultCounts, Together, CYCLE};
use crate::servers::{connect, Servers, MASTER_NAME};
use crate::shared::Shared;

/// A paused process (master or replica) stays stopped this long: past
/// `down-after-milliseconds` (1000), so that a paused master is failed over.
const PAUSE: Duration = Duration::from_secs(3);
/// Faults start after this, once clients run.
const WARMUP: Duration = Duration::from_secs(3);

enum Pending {
    Resume(usize),
    Restart(usize, Node, Instant),
}

pub struct Faults {
    log: Vec<String>,
    /// Faults injected, by kind.
    pub counts: FaultCounts,
    /// The fault period, on the history's clock: from the first fault (the end of the
    /// warm-up) to the moment faults stopped.
    pub began: Nanos,
    pub stopped: Nanos,
    pending: Vec<(Instant, Pending)>,
}

impl Faults {
    /// Injects faults for `--seconds`, or until every kind was injected `--faults-per-kind`
    /// times here and in every other mode of `together` (this one is `slot`), then resumes
    /// what is paused and restarts what was killed (once Sentinel names another master, or
    /// at the latest after 25 s).
    pub fn run(
        servers: &mut Servers,
        shared: &Shared,
        together: &Together,
        slot: usize,
    ) -> Result<Faults, String> {
        let args = &shared.args;
        let mut rng = StdRng::seed_from_u64(args.seed);
        let mut faults = Faults {
            log: Vec::new(),
            counts: FaultCounts::default(),
            began: 0,
            stopped: 0,
            pending: Vec::new(),
        };
        let end = Instant::now() + Duration::from_secs(args.seconds);
        let mut next_fault = Instant::now() + WARMUP;
        let mut cycle = CYCLE.iter().cycle();
        let per_kind = args.faults_per_kind;
        while Instant::now() < end {
            faults.due(servers, shared, false)?;
            if per_kind > 0 && faults.counts.reached(per_kind) {
                together.reach(slot);
            }
            if Instant::now() >= next_fault {
                // Stop when the next fault is due, not at once: the last one has its spacing
                // to play out, as every other had.
                if per_kind > 0 && together.all_reached() {
                    break;
                }
                if faults.began == 0 {
                    faults.began = shared.now();
                }
                let fault = *cycle.next().expect("the cycle never ends");
                faults.inject(fault, servers, shared, &mut rng)?;
                next_fault +=
                    Duration::from_millis(rng.gen_range(args.fault_min_ms..=args.fault_max_ms));
            }
            thread::sleep(Duration::from_millis(20));
        }
        faults.stopped = shared.now();
        if faults.began == 0 {
            faults.began = faults.stopped;
        }
        faults.note(shared, "faults stopped".into());
        // Resume what is paused; a killed master comes back once Sentinel names another.
        let restart_by = Instant::now() + Duration::from_secs(25);
        while !faults.pending.is_empty() && Instant::now() < restart_by {
            faults.due(servers, shared, false)?;
            if faults
                .pending
                .iter()
                .all(|(_, p)| matches!(p, Pending::Resume(_)))
            {
                faults.due(servers, shared, true)?;
            }
            thread::sleep(Duration::from_millis(50));
        }
        faults.due(servers, shared, true)?;
        Ok(faults)
    }

    fn note(&mut self, shared: &Shared, what: String) {
        let line = format!("{:>8.3}s  {what}", shared.now() as f64 / 1e9);
        if shared.args.parallel {
            println!("[{}] {line}", shared.args.mode.name());
        } else {
            println!("{line}");
        }
        self.log.push(line);
    }

    fn inject(
        &mut self,
        fault: Fault,
        servers: &mut Servers,
        shared: &Shared,
        rng: &mut StdRng,
    ) -> Result<(), String> {
        let Some(master) = shared.current_master() else {
            self.note(shared, format!("{fault:?} skipped: no master named"));
            self.counts.skipped += 1;
            return Ok(());
        };
        let Some(mi) = servers.data_index(master) else {
            return Err(format!("Sentinel names {master}, not one of ours"));
        };
        if servers.data[mi].child.is_none() || servers.data[mi].stopped {
            self.note(
                shared,
                format!("{fault:?} skipped: master :{master} is down already"),
            );
            self.counts.skipped += 1;
            return Ok(());
        }
        let refused = match fault {
            Fault::Kill => {
                servers.data[mi].kill();
                self.pending.push((
                    Instant::now() + Duration::from_secs(1),
                    Pending::Restart(mi, master, Instant::now()),
                ));
                self.note(shared, format!("kill -9 master :{master}"));
                false
            }
            Fault::Pause => {
                servers.data[mi].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(mi)));
                self.note(shared, format!("SIGSTOP master :{master} for {PAUSE:?}"));
                false
            }
            Fault::Failover => {
                let s = servers.sentinels[rng.gen_range(0..servers.sentinels.len())].port;
                let reply = connect(s, Duration::from_secs(1)).and_then(|mut c| {
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(MASTER_NAME)
                        .query::<String>(&mut c)
                });
                self.note(
                    shared,
                    format!("SENTINEL FAILOVER via :{s} (master :{master}): {reply:?}"),
                );
                reply.is_err()
            }
            Fault::PauseReplica => {
                let up: Vec<usize> = (0..servers.data.len())
                    .filter(|&i| {
                        i != mi && servers.data[i].child.is_some() && !servers.data[i].stopped
                    })
                    .collect();
                if up.is_empty() {
                    self.note(shared, "SIGSTOP replica skipped: none up".into());
                    self.counts.skipped += 1;
                    return Ok(());
                }
                let ri = up[rng.gen_range(0..up.len())];
                servers.data[ri].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(ri)));
                let port = servers.data[ri].port;
                self.note(shared, format!("SIGSTOP replica :{port} for {PAUSE:?}"));
                false
            }
        };
        self.counts.record(fault, refused);
        Ok(())
    }

    /// Resumes paused servers and restarts killed ones whose time has come; `now_all` does
    /// every one at once (the end of the run), a restart still waiting for a new master.
    fn due(&mut self, servers: &mut Servers, shared: &Shared, now_all: bool) -> Result<(), String> {
        let mut later = Vec::new();
        for (at, p) in std::mem::take(&mut self.pending) {
            if !now_all && at > Instant::now() {
                later.push((at, p));
                continue;
            }
            match p {
                Pending::Resume(i) => {
                    servers.data[i].signal(libc::SIGCONT);
                    let port = servers.data[i].port;
                    self.note(shared, format!("SIGCONT :{port}"));
                }
                Pending::Restart(i, old, killed) => {
                    let named = shared.current_master();
                    let waited = killed.elapsed();
                    match named {
                        Some(m) if m != old => {
                            servers.start_data(i, Some(m))?;
                            self.note(shared, format!("restarted :{old} as a replica of :{m}"));
                        }
                        // No failover after 20 s (or none to wait for at the end): back as
                        // it would come back by itself, an empty master.
                        _ if waited > Duration::from_secs(20) => {
                            servers.start_data(i, None)?;
                            self.note(shared, format!("restarted :{old} (no failover seen)"));
                        }
                        _ => later.push((
                            Instant::now() + Duration::from_millis(200),
                            Pending::Restart(i, old, killed),
                        )),
                    }
                }
            }
        }
        self.pending = later;
        Ok(())
    }
}
