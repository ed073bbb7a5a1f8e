//! Workload 10 (issue 14): the cycle at batch 16 against the floor in three settings, each on
//! fresh servers: no persistence; `appendonly yes` with `appendfsync everysec`; one replica
//! attached. In the last two every cycle is also written to the AOF or to the replication
//! stream, and the module then builds what it propagates (without a reader it skips that);
//! the floor's `SET PX` + `DEL` is written there too, so each setting has its own floor.

#[allow(unused_imports)]
use crate::*;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Setting {
    Plain,
    Aof,
    Replica,
}

/// The settings: a short name, what they are, and where a cycle's bytes go.
const SETTINGS: [(Setting, &str, &str, &str); 3] = [
    (Setting::Plain, "no persistence", "no persistence", ""),
    (
        Setting::Aof,
        "AOF everysec",
        "appendonly yes, appendfsync everysec",
        "the AOF",
    ),
    (
        Setting::Replica,
        "one replica",
        "one replica attached",
        "the replication stream",
    ),
];

const LOCK: &str = "LOCK.ACQUIRE + LOCK.RELEASE";
const FLOOR: &str = "SET PX + DEL (floor)";
const MINIMAL: &str = "MINLOCK.ACQUIRE + MINLOCK.RELEASE (module floor)";
const VARIANTS: [Variant<Op>; 2] = [
    (LOCK, "LOCK", Op::LockCycle, &[1]),
    (FLOOR, "floor", Op::FloorCycle, &[]),
];
/// Without persistence, also the module floor: the cycle through a minimal module lock
/// (`tests/support/minimal_lock.c`), to show how much of the gap to the floor comes from
/// being a module data type. (It propagates nothing, so it has no place in the other
/// settings.)
const PLAIN_VARIANTS: [Variant<Op>; 3] = [
    (LOCK, "LOCK", Op::LockCycle, &[1, 2]),
    (FLOOR, "floor", Op::FloorCycle, &[]),
    (MINIMAL, "module floor", Op::MinimalCycle, &[1]),
];

/// How long a server may take to settle between phases (a rewrite, a replica catching up).
const SETTLE: Duration = Duration::from_secs(60);

/// The servers of one setting: the one measured, and its replica.
struct Servers {
    main: Server,
    replica: Option<Server>,
    /// Where they run, for the output.
    placement: String,
}

fn start(setting: Setting, pinned: bool) -> Servers {
    let pin = |o: Opts, cpu| if pinned { o.cpu(cpu) } else { o };
    let opts = match setting {
        Setting::Plain => Opts::new().extra(&minimal_lock_module()),
        // No rewrite during a phase: the size would drop. `settle` rewrites between phases.
        Setting::Aof => Opts::new().appendonly().extra(&[
            "--appendfsync",
            "everysec",
            "--auto-aof-rewrite-percentage",
            "0",
        ]),
        // A replica that falls behind must not be disconnected (a full resync mid-phase).
        Setting::Replica => Opts::new().extra(&["--client-output-buffer-limit", "replica 0 0 0"]),
    };
    let main = Server::start(pin(opts, 1));
    let replica = (setting == Setting::Replica).then(|| {
        // On the master's CPU: the client keeps CPU 0 to itself as in the other settings (it
        // busy-polls there, and a replica beside it would starve or slow it), and what is
        // measured is the servers' side, the master's work and the replica's together.
        let r = Server::start(pin(Opts::new().replicaof(main.port), 1));
        let mut con = r.conn();
        let up = wait_for(|| {
            let info = text(&call(&mut con, &["INFO", "replication"]));
            field(&info, "master_link_status") == Some("up")
        });
        assert!(up, "the replica's link to its master is not up");
        r
    });
    let placement = match (pinned, setting) {
        (false, _) => "not pinned",
        (true, Setting::Replica) => "master and replica on CPU 1, client on CPU 0",
        (true, _) => "server on CPU 1, client on CPU 0",
    };
    let s = Servers {
        main,
        replica,
        placement: placement.to_string(),
    };
    s.settle(setting);
    s
}

/// Polls `done` every 5 ms until it holds or `SETTLE` has passed: whether it held.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SETTLE;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    true
}

impl Servers {
    /// Before a phase (the keyspace just emptied): the AOF rewritten to its small base, the
    /// replica caught up with everything its master sent, so that no phase pays for the one
    /// before it.
    fn settle(&self, setting: Setting) {
        let mut con = self.main.conn();
        if setting == Setting::Aof {
            // An error reply means a rewrite is already under way: wait for it as well.
            reply(&mut con, &["BGREWRITEAOF"]);
            let done = wait_for(|| {
                let info = text(&call(&mut con, &["INFO", "persistence"]));
                let idle = |f| field(&info, f) == Some("0");
                idle("aof_rewrite_in_progress") && idle("aof_rewrite_scheduled")
            });
            assert!(done, "the AOF rewrite did not finish");
        }
        if let Some(replica) = &self.replica {
            let mut rcon = replica.conn();
            let caught_up = wait_for(|| {
                let sent = info_field(&mut con, "replication", "master_repl_offset");
                let applied = info_field(&mut rcon, "replication", "slave_repl_offset");
                applied >= sent
            });
            assert!(caught_up, "the replica did not catch up with its master");
        }
    }
}

/// One setting's results.
struct SettingRun {
    name: &'static str,
    about: &'static str,
    /// Where a cycle's bytes go ("" without persistence or replica).
    stream: &'static str,
    placement: String,
    table: Table,
}

impl SettingRun {
    fn vs_floor(&self) -> (Paired, Paired) {
        self.table.vs(LOCK, FLOOR, 16)
    }
    /// Bytes a cycle of `label` added to the AOF or the replication stream.
    fn bytes(&self, label: &str) -> f64 {
        let m = self.table.find(label, 16);
        (m.aof_bytes + m.repl_bytes) / m.ops as f64
    }
    /// The replica's CPU µs per cycle of `label` (0 without one).
    fn replica_cpu(&self, label: &str) -> f64 {
        let m = self.table.find(label, 16);
        m.other_cpu_secs * 1e6 / m.ops as f64
    }
    /// The module's cycle against the module floor, and the module floor against the floor
    /// (without persistence only).
    fn vs_module_floor(&self) -> Option<(Paired, Paired)> {
        self.table
            .rows
            .iter()
            .any(|r| r.m.label == MINIMAL)
            .then(|| {
                (
                    self.table.vs(LOCK, MINIMAL, 16).0,
                    self.table.vs(MINIMAL, FLOOR, 16).0,
                )
            })
    }
    fn has_replica(&self) -> bool {
        self.table.rows.iter().any(|r| r.m.other_cpu_secs > 0.0)
    }
}

/// Workload 10's results, one per setting.
struct Settings(Vec<SettingRun>);

/// Each setting on fresh servers: the module's cycle and the floor at batch 16, `ROUNDS`
/// rounds interleaved as in workload 1.
pub(crate) fn run_settings(ctx: &Ctx) -> Box<dyn Outcome> {
    let plan = ctx.plan;
    let mut runs = Vec::new();
    for (i, (setting, name, about, stream)) in SETTINGS.into_iter().enumerate() {
        let servers = start(setting, ctx.pinned);
        let title = format!(
            "10{}. Cycle at batch 16 vs the floor: {about} ({})",
            (b'a' + i as u8) as char,
            servers.placement
        );
        let srv = &servers.main;
        let scripts = Scripts::load(&mut srv.conn());
        let probed: Vec<&Server> = std::iter::once(srv).chain(&servers.replica).collect();
        let variants: &[Variant<Op>] = match setting {
            Setting::Plain => &PLAIN_VARIANTS,
            _ => &VARIANTS,
        };
        let table = table_with(srv, &title, &[16], variants, |op, label, depth| {
            servers.settle(setting);
            run_threads_on(&probed, plan, plan.phase, (label, depth), |t, pipe, w| {
                drive(op, depth, t, pipe, &scripts, w)
            })
        });
        let placement = servers.placement.clone();
        drop(servers);
        runs.push(SettingRun {
            name,
            about,
            stream,
            placement,
            table,
        });
    }
    Box::new(Settings(runs))
}

impl Outcome for Settings {
    fn print(&self) {
        println!(
            "\n10. The cycle at batch 16 in three settings (issue 14), each on fresh servers and \
             against the floor in the same setting"
        );
        for run in &self.0 {
            run.table.print();
            let (thr, cpu) = run.vs_floor();
            println!(
                "  LOCK/floor, median of paired rounds [lowest–highest round]: throughput {} \
                 ({}), server CPU/op {}",
                thr.show(),
                percent(thr.spread()),
                cpu.show()
            );
            if let Some((lock, minimal)) = run.vs_module_floor() {
                println!(
                    "  module floor/floor {} ({}); LOCK/module floor {} ({})",
                    minimal.show(),
                    percent(minimal.spread()),
                    lock.show(),
                    percent(lock.spread())
                );
            }
            if !run.stream.is_empty() {
                println!(
                    "  bytes per cycle to {}: LOCK {:.1}, floor {:.1}",
                    run.stream,
                    run.bytes(LOCK),
                    run.bytes(FLOOR)
                );
            }
            if run.has_replica() {
                println!(
                    "  replica CPU µs per cycle (srv columns: the master's): LOCK {:.2}, floor {:.2}",
                    run.replica_cpu(LOCK),
                    run.replica_cpu(FLOOR)
                );
            }
        }
    }

    fn json(&self) -> (&'static str, Json) {
        let runs = self.0.iter().map(|run| {
            let (thr, cpu) = run.vs_floor();
            let bytes = |label| {
                if run.stream.is_empty() {
                    Json::Null
                } else {
                    run.bytes(label).into()
                }
            };
            obj(vec![
                ("setting", run.about.into()),
                ("placement", run.placement.as_str().into()),
                ("stream", run.stream.into()),
                ("table", run.table.json()),
                ("throughput_vs_floor", thr.json()),
                ("server_cpu_vs_floor", cpu.json()),
                (
                    "module_floor_vs_floor",
                    run.vs_module_floor().map_or(Json::Null, |(_, m)| m.json()),
                ),
                (
                    "throughput_vs_module_floor",
                    run.vs_module_floor().map_or(Json::Null, |(l, _)| l.json()),
                ),
                ("lock_bytes_per_cycle", bytes(LOCK)),
                ("floor_bytes_per_cycle", bytes(FLOOR)),
                (
                    "lock_replica_cpu_us_per_cycle",
                    run.replica_cpu(LOCK).into(),
                ),
                (
                    "floor_replica_cpu_us_per_cycle",
                    run.replica_cpu(FLOOR).into(),
                ),
            ])
        });
        ("settings", Json::Arr(runs.collect()))
    }

    fn targets(&self) -> Vec<Target> {
        let target = |run: &SettingRun| {
            let what = format!("cycle, batch 16, vs floor: {}", run.name);
            ratio_target("#14", what, run.vs_floor().0, 0.95)
        };
        self.0.iter().map(target).collect()
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let summary = |run: &SettingRun| {
            let (lock, floor) = (run.table.find(LOCK, 16), run.table.find(FLOOR, 16));
            let (mut measured, mut vs) = (
                format!(
                    "{} cycles/s, {:.2} µs server CPU/cycle",
                    thousands(lock.rate()),
                    lock.cpu_us_per_op()
                ),
                format!(
                    "{} the floor in the same setting ({} /s",
                    run.vs_floor().0.show(),
                    thousands(floor.rate())
                ),
            );
            if run.has_replica() {
                write!(measured, " (+ {:.2} on the replica)", run.replica_cpu(LOCK)).unwrap();
            }
            if !run.stream.is_empty() {
                let stream = run.stream;
                write!(measured, ", {:.0} bytes/cycle to {stream}", run.bytes(LOCK)).unwrap();
                write!(vs, ", {:.0} bytes/cycle", run.bytes(FLOOR)).unwrap();
            }
            vs.push(')');
            if let Some((lock, minimal)) = run.vs_module_floor() {
                write!(
                    vs,
                    "; a minimal module lock at {} the floor, LOCK at {} it",
                    minimal.show(),
                    lock.show()
                )
                .unwrap();
            }
            row(
                format!("acquire + release cycle, batch 16, {}", run.about),
                measured,
                vs,
            )
        };
        self.0.iter().map(summary).collect()
    }

    fn errors(&self) -> u64 {
        self.0.iter().map(|run| run.table.errors()).sum()
    }
}
