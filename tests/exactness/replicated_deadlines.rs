//! Replicated and reloaded exactly (point 2 of the crate doc): the replication stream, the
//! AOF, an RDB restart, a replica's full sync and `DEBUG RELOAD` keep the master's deadline,
//! never shorter, and what the module writes to the AOF and the replication stream replays
//! without an error.

use std::fs;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::cmd;
use crate::common::*;
use crate::deadlines::{base, deadline, same_deadline, us, TOL_US};
use crate::sync;

/// Acquire, extend, renew, fence and a grant to a waiter on a master with the AOF on: after
/// each, `WAIT 1` and the replica's deadline is the master's (never shorter, at most the
/// millisecond of rounding longer) and within the ttl the test sent; after an AOF restart
/// the master's deadlines are the ones it had.
#[test]
fn replica_and_aof_deadlines_are_the_masters_never_shorter() {
    base();
    let mut m = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    let mut findings = Findings::default();
    let mut last = Vec::new();

    // Each step: the change, then the replica's deadline against the master's and the ttl.
    let mut step = |mc: &mut Connection,
                    what: &str,
                    key: &str,
                    holder: &str,
                    ttl: Option<u64>,
                    change: &mut dyn FnMut(&mut Connection)| {
        let sent = Instant::now();
        change(mc);
        let replied = Instant::now();
        sync(mc);
        let rs = deadline(&mut rc, key, holder, 10);
        let ms_ = deadline(mc, key, holder, 10).expect("master");
        let rs = match rs {
            Ok(rs) => rs,
            Err(e) => {
                findings.fail(format!("{what}: replica: {e}"));
                return ms_;
            }
        };
        if let Some(p) = same_deadline(&format!("{what}: replica vs master"), ms_, rs) {
            findings.fail(p);
        }
        if let Some(ttl) = ttl {
            // ttl - (elapsed since the command was sent) - 1 ms <= remaining <= ttl.
            let ttl_us = ttl as i64 * 1000;
            let (lo, hi) = (us(sent) + ttl_us - 1000, us(replied) + ttl_us + 1000);
            if rs.hi < lo - TOL_US {
                findings.fail(format!(
                    "{what}: replica's lease {:.3} ms shorter than the {ttl} ms sent \
                     (deadline {rs})",
                    (lo - rs.hi) as f64 / 1e3
                ));
            }
            if rs.lo > hi + TOL_US {
                findings.fail(format!(
                    "{what}: replica's lease {:.3} ms longer than the {ttl} ms sent (deadline {rs})",
                    (rs.lo - hi) as f64 / 1e3
                ));
            }
        }
        ms_
    };

    step(&mut mc, "acquire", "a", "tok", Some(30_000), &mut |c| {
        acquire(c, "a", "tok", 30_000).unwrap();
    });
    step(&mut mc, "extend", "a", "tok", Some(45_000), &mut |c| {
        assert_eq!(extend(c, "a", "tok", 45_000), 1);
    });
    step(
        &mut mc,
        "renewing acquire",
        "a",
        "tok",
        Some(50_000),
        &mut |c| {
            acquire(c, "a", "tok", 50_000).unwrap();
        },
    );
    let a = step(&mut mc, "fence", "a", "tok", None, &mut |c| {
        fence(c, "a", "tok").unwrap();
    });
    last.push(("a", "tok", a));
    acquire(&mut mc, "g", "first", 60_000).unwrap();
    let mut w = Waiter::join(&m, "g", "second", 40_000, 0);
    let g = step(&mut mc, "grant", "g", "second", Some(40_000), &mut |c| {
        assert_eq!(release(c, "g", "first"), 1);
    });
    assert!(w.reply().is_some(), "waiter not granted");
    last.push(("g", "second", g));

    // The AOF holds the same deadlines.
    drop(rc);
    drop(r);
    m.restart();
    let mut mc = m.conn();
    for (key, holder, before) in last {
        match deadline(&mut mc, key, holder, 10) {
            Ok(after) => {
                if let Some(p) =
                    same_deadline(&format!("{key}: after an AOF restart"), before, after)
                {
                    findings.fail(p);
                }
            }
            Err(e) => findings.fail(format!("{key}: after an AOF restart: {e}")),
        }
    }
    findings.done("replica and AOF deadlines");
}

/// Lines of a server log where the server reports an error reply to its AOF or master
/// client: a command the module wrote there that it refuses to replay.
fn replay_errors(s: &Server) -> Vec<String> {
    fs::read_to_string(s.log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("CRITICAL") || l.contains("sending an error to its"))
        .map(str::to_string)
        .collect()
}

/// What the module writes to the AOF and the replication stream replays without an error,
/// from a fresh server on (whose AOF is created at start), and the lock is back.
#[test]
fn the_aof_and_the_replication_stream_replay_without_errors() {
    let mut m = Server::start(Opts::new().appendonly());
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    let f = fence(&mut mc, "k", "tok").unwrap();
    sync(&mut mc);
    assert_eq!(info(&mut rc, "k").map(|i| i.fence), Some(f));
    let on_replica = replay_errors(&r);
    drop(rc);
    drop(r);
    m.restart();
    let mut mc = m.conn();
    assert_eq!(info(&mut mc, "k").map(|i| i.fence), Some(f));
    let on_master = replay_errors(&m);
    assert!(
        on_replica.is_empty() && on_master.is_empty(),
        "replayed commands were refused:\n  replica: {on_replica:#?}\n  master after an AOF \
         restart: {on_master:#?}"
    );
}

/// An RDB restart, a replica's full sync and `DEBUG RELOAD` keep the absolute deadline.
#[test]
fn rdb_restart_full_sync_and_debug_reload_keep_the_deadline() {
    base();
    let mut m = Server::new();
    let mut mc = m.conn();
    acquire(&mut mc, "k", "tok", 30_000).unwrap();
    let orig = deadline(&mut mc, "k", "tok", 10).unwrap();
    let mut findings = Findings::default();
    let mut check = |what: &str, c: &mut Connection| match deadline(c, "k", "tok", 10) {
        Ok(s) => {
            if let Some(p) = same_deadline(what, orig, s) {
                findings.fail(p);
            }
        }
        Err(e) => findings.fail(format!("{what}: {e}")),
    };
    // A replica that attaches now gets it in the full sync (an RDB transfer).
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    assert!(wait_until(Duration::from_secs(5), || exists(&mut rc, "k")));
    check("after a full sync, on the replica", &mut rc);
    drop(rc);
    drop(r);
    // The full sync's background save may still be finishing: DEBUG RELOAD refuses to run
    // beside it.
    assert!(
        wait_until(Duration::from_secs(10), || {
            info_field(&mut mc, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
        }),
        "the full sync's background save did not finish"
    );
    assert_eq!(cmd!(&mut mc, "DEBUG", "RELOAD"), Ok(Value::Okay));
    check("after DEBUG RELOAD", &mut mc);
    assert_eq!(cmd!(&mut mc, "SAVE"), Ok(Value::Okay));
    m.restart();
    let mut mc = m.conn();
    check("after an RDB restart", &mut mc);
    findings.done("RDB, full sync and DEBUG RELOAD deadlines");
}
