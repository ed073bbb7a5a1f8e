//! The server's `INFO lock` counters after a client's flows, pattern or shared holds, the same
//! for every client: a client that skipped a step cannot pass.

use std::collections::HashMap;

use crate::common::Server;

pub(crate) fn lock_counters(server: &Server) -> (String, HashMap<String, i64>) {
    let mut con = server.conn();
    let text: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
    let fields = text
        .lines()
        .filter_map(|l| l.strip_prefix("lock_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect();
    (text, fields)
}

/// What the server counted for the recommended pattern (with_lock / withLock): three
/// acquisitions, two releases, the stalled holder's lease end, at least the extends that
/// carried a 500 ms lease through 1 s of work, and the guarded writes: the two holders'
/// landed, the stalled holder's and one after the release were refused.
#[track_caller]
pub(crate) fn assert_pattern_counts(server: &Server) {
    let (text, f) = lock_counters(server);
    for (name, want) in [
        ("guarded_runs", 2),
        ("guarded_refusals", 2),
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 3),
        ("contended_acquires", 0),
        ("releases", 2),
        ("lease_ends", 1),
        ("grants", 0),
        ("wait_timeouts", 0),
        ("fences", 0),
    ] {
        assert_eq!(f[name], want, "lock_{name} after the pattern:\n{text}");
    }
    assert!(f["extends"] >= 3, "the keep-alive must extend:\n{text}");
}

/// What the server counted for `flows` runs of the scripted flow, so a script that skipped a
/// step cannot pass: per flow one acquire, three contended acquires (busy, timed-out WAIT,
/// granted WAIT), one fence, one guarded write run and one refused, one extend plus the
/// holder's renewal, two releases, one grant and one wait timeout.
#[track_caller]
pub(crate) fn assert_flow_counts(server: &Server, flows: i64) {
    let (text, f) = lock_counters(server);
    let field = |name: &str| -> i64 {
        *f.get(name)
            .unwrap_or_else(|| panic!("no lock_{name} in INFO lock:\n{text}"))
    };
    let expect = [
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 1),
        ("contended_acquires", 3),
        ("fences", 1),
        ("guarded_runs", 1),
        ("guarded_refusals", 1),
        ("extends", 2),
        ("releases", 2),
        ("grants", 1),
        ("wait_timeouts", 1),
        ("lease_ends", 0),
    ];
    for (name, per_flow) in expect {
        let want = if name == "held" || name == "waiting_clients" {
            0
        } else {
            per_flow * flows
        };
        assert_eq!(
            field(name),
            want,
            "lock_{name} after {flows} flow(s):\n{text}"
        );
    }
}

/// What the server counted for `runs` runs of the shared-hold scenarios (the same in every
/// client), so a client that skipped a step cannot pass. Per run, counted per hold: a
/// reader's renewal and a downgrade (2 extends; the refused upgrade counts nowhere); six holds
/// taken at once (the same-token checks' shared and exclusive holds, readers a and b, permits 1
/// and 2) and three granted from the queue (the writer, reader c, permit 3), after four
/// contended acquires (those three and the caller that gave up: one wait timeout); nine
/// releases; the writer's guarded write run and a reader's refused.
#[track_caller]
pub(crate) fn assert_shared_counts(server: &Server, runs: i64) {
    let (text, f) = lock_counters(server);
    for (name, per_run) in [
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 6),
        ("contended_acquires", 4),
        ("grants", 3),
        ("wait_timeouts", 1),
        ("extends", 2),
        ("releases", 9),
        ("fences", 0),
        ("lease_ends", 0),
        ("guarded_runs", 1),
        ("guarded_refusals", 1),
    ] {
        assert_eq!(
            f[name],
            per_run * runs,
            "lock_{name} after {runs} shared run(s):\n{text}"
        );
    }
}

/// The `INFO lock` counters of `LOCK.GUARD`: inner commands run (their own errors included)
/// and `FENCED` refusals.
#[track_caller]
pub(crate) fn assert_guarded_counts(server: &Server, runs: i64, refusals: i64) {
    let (text, f) = lock_counters(server);
    assert_eq!(
        (f.get("guarded_runs"), f.get("guarded_refusals")),
        (Some(&runs), Some(&refusals)),
        "lock_guarded_runs and lock_guarded_refusals:\n{text}"
    );
}
