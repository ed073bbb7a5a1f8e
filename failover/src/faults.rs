//! The faults: from `--seed`, one every `--fault-min-ms`..`--fault-max-ms` after a warm-up,
//! cycling through kill -9 of the master, SIGSTOP of the master, `SENTINEL FAILOVER` and
//! SIGSTOP of a replica; resuming paused servers and restarting killed ones, and at the end
//! putting every server back.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::Node;
use crate::servers::{connect, Servers, MASTER_NAME};
use crate::shared::Shared;

/// A paused process (master or replica) stays stopped this long: past
/// `down-after-milliseconds` (1000), so that a paused master is failed over.
const PAUSE: Duration = Duration::from_secs(3);
/// Faults start after this, once clients run.
const WARMUP: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
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

const CYCLE: [Fault; 4] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Failover,
    Fault::PauseReplica,
];

enum Pending {
    Resume(usize),
    Restart(usize, Node, Instant),
}

pub struct Faults {
    log: Vec<String>,
    /// Faults injected, by kind.
    pub counts: BTreeMap<&'static str, usize>,
    pending: Vec<(Instant, Pending)>,
}

impl Faults {
    /// Injects faults for `--seconds`, then resumes what is paused and restarts what was
    /// killed (once Sentinel names another master, or at the latest after 25 s).
    pub fn run(servers: &mut Servers, shared: &Shared) -> Result<Faults, String> {
        let args = &shared.args;
        let mut rng = StdRng::seed_from_u64(args.seed);
        let mut faults = Faults {
            log: Vec::new(),
            counts: BTreeMap::new(),
            pending: Vec::new(),
        };
        let end = Instant::now() + Duration::from_secs(args.seconds);
        let mut next_fault = Instant::now() + WARMUP;
        let mut cycle = CYCLE.iter().cycle();
        while Instant::now() < end {
            faults.due(servers, shared, false)?;
            if Instant::now() >= next_fault {
                let fault = *cycle.next().expect("the cycle never ends");
                faults.inject(fault, servers, shared, &mut rng)?;
                next_fault +=
                    Duration::from_millis(rng.gen_range(args.fault_min_ms..=args.fault_max_ms));
            }
            thread::sleep(Duration::from_millis(20));
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
        println!("{line}");
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
            return Ok(());
        }
        let name = match fault {
            Fault::Kill => {
                servers.data[mi].kill();
                self.pending.push((
                    Instant::now() + Duration::from_secs(1),
                    Pending::Restart(mi, master, Instant::now()),
                ));
                self.note(shared, format!("kill -9 master :{master}"));
                "kill -9 master"
            }
            Fault::Pause => {
                servers.data[mi].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(mi)));
                self.note(shared, format!("SIGSTOP master :{master} for {PAUSE:?}"));
                "SIGSTOP master 3 s"
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
                if reply.is_err() {
                    "SENTINEL FAILOVER (refused)"
                } else {
                    "SENTINEL FAILOVER"
                }
            }
            Fault::PauseReplica => {
                let up: Vec<usize> = (0..servers.data.len())
                    .filter(|&i| {
                        i != mi && servers.data[i].child.is_some() && !servers.data[i].stopped
                    })
                    .collect();
                if up.is_empty() {
                    self.note(shared, "SIGSTOP replica skipped: none up".into());
                    return Ok(());
                }
                let ri = up[rng.gen_range(0..up.len())];
                servers.data[ri].signal(libc::SIGSTOP);
                self.pending
                    .push((Instant::now() + PAUSE, Pending::Resume(ri)));
                let port = servers.data[ri].port;
                self.note(shared, format!("SIGSTOP replica :{port} for {PAUSE:?}"));
                "SIGSTOP replica 3 s"
            }
        };
        *self.counts.entry(name).or_default() += 1;
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
