//! Fences across masters (README, "Deploying for failover"; src/fence.rs, "Epochs"): a
//! replica promoted while its master still runs (a deposed master that has not learned it was
//! deposed) never issues a fence its old master issues, and its fences are above every fence
//! a grant confirmed by `WAIT` reported, even when its wall clock is a minute behind the old
//! master's. The epoch reaches a replica by a full synchronisation (the RDB's aux data) and by
//! `LOCK.HIGHWATER`, which a master sends when it is promoted.

use std::collections::HashSet;

use redis::{Connection, Value};

use crate::cmd;
use crate::common::wallclock::WallClock;
use crate::common::*;

/// Fence epochs are told apart modulo this (src/fence.rs, `EPOCHS`).
const EPOCHS: i64 = 4;
/// How far behind the promoted replica's wall clock runs.
const BEHIND_MS: i64 = -60_000;

fn epoch(c: &mut Connection) -> i64 {
    stat(c, "lock_fence_epoch")
}

fn promote(c: &mut Connection) {
    assert_eq!(cmd!(c, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
}

fn follow(c: &mut Connection, master: &Server) {
    assert_eq!(
        cmd!(c, "REPLICAOF", "127.0.0.1", master.port),
        Ok(Value::Okay)
    );
    wait_link_up(c);
}

/// Fences taken and given back on `keys` fresh keys named `prefix:N`, one round each.
fn fences(c: &mut Connection, prefix: &str, keys: usize) -> Vec<i64> {
    (0..keys)
        .map(|i| {
            let key = format!("{prefix}:{i}");
            let tok = token();
            let f = acquire(c, &key, &tok, 10_000).expect("acquire");
            assert_eq!(release(c, &key, &tok), 1);
            f
        })
        .collect()
}

#[test]
fn a_promoted_replica_with_its_clock_behind_issues_above_confirmed_fences_and_apart_from_its_old_master(
) {
    let old = Server::new();
    let clock = WallClock::at("epochs", BEHIND_MS);
    let new = clock.start_checked(Opts::new().replicaof(old.port), BEHIND_MS);
    let (mut oc, mut nc) = (old.conn(), new.conn());
    wait_link_up(&mut nc);

    // Grants confirmed by the replica, on keys that stay held and on keys given back
    // (a released key's fence survives only in the high-water mark).
    let mut confirmed = fences(&mut oc, "released", 20);
    for i in 0..20 {
        confirmed.push(acquire(&mut oc, &format!("held:{i}"), &token(), 60_000).unwrap());
    }
    sync_replica(&mut oc);
    let top = *confirmed.iter().max().unwrap();
    assert_eq!((epoch(&mut oc), epoch(&mut nc)), (0, 0));
    assert!(confirmed.iter().all(|f| f % EPOCHS == 0), "{confirmed:?}");

    promote(&mut nc);
    assert!(
        wait_until(std::time::Duration::from_secs(5), || epoch(&mut nc) == 1),
        "the promoted replica's epoch is {}",
        epoch(&mut nc)
    );
    assert_eq!(epoch(&mut oc), 0, "the old master knows nothing of it");

    // Split brain: both masters take fences on the same key names, each from its own state.
    let from_new = fences(&mut nc, "both", 200);
    let from_old = fences(&mut oc, "both", 200);
    assert!(
        from_new.iter().all(|&f| f > top),
        "the new master's clock is {BEHIND_MS} ms behind; its fences must still be above \
         {top}: {:?}",
        from_new.iter().filter(|&&f| f <= top).collect::<Vec<_>>()
    );
    assert!(from_new.iter().all(|f| f % EPOCHS == 1));
    let old_set: HashSet<i64> = from_old.iter().copied().collect();
    assert!(
        from_new.iter().all(|f| !old_set.contains(f)),
        "a fence issued by both masters"
    );
    // A held key's next fence on the new master, its holder's own `LOCK.FENCE`.
    let held = info(&mut nc, "held:0").expect("the confirmed hold survived");
    let tok = String::from_utf8(held.holder.unwrap()).unwrap();
    assert!(fence(&mut nc, "held:0", &tok).unwrap() > top);
}

#[test]
fn the_epoch_reaches_replicas_by_full_sync_and_by_the_promotion_record() {
    // a is the master, b and c its replicas.
    let a = Server::new();
    let b = Server::start(Opts::new().replicaof(a.port));
    let c = Server::start(Opts::new().replicaof(a.port));
    let (mut ac, mut bc, mut cc) = (a.conn(), b.conn(), c.conn());
    wait_link_up(&mut bc);
    wait_link_up(&mut cc);
    fences(&mut ac, "before", 5);

    // b promoted; c follows it (a partial synchronisation from b's backlog, which holds the
    // LOCK.HIGHWATER b sent when promoted) before b issues any fence.
    promote(&mut bc);
    follow(&mut cc, &b);
    assert!(
        wait_until(std::time::Duration::from_secs(5), || epoch(&mut cc) == 1),
        "c's epoch after following b: {}",
        epoch(&mut cc)
    );

    // a, deposed, follows b too: a full synchronisation (a's history diverged), whose RDB
    // carries the epoch.
    fences(&mut ac, "diverged", 5);
    follow(&mut ac, &b);
    assert!(
        wait_until(std::time::Duration::from_secs(5), || epoch(&mut ac) == 1),
        "a's epoch after a full sync from b: {}",
        epoch(&mut ac)
    );

    // c promoted while b still runs: epoch 2, apart from b's 1.
    promote(&mut cc);
    assert!(wait_until(std::time::Duration::from_secs(5), || epoch(
        &mut cc
    ) == 2));
    let from_c = fences(&mut cc, "k", 50);
    let from_b = fences(&mut bc, "k", 50);
    assert!(from_c.iter().all(|f| f % EPOCHS == 2), "{from_c:?}");
    assert!(from_b.iter().all(|f| f % EPOCHS == 1), "{from_b:?}");
}

#[test]
fn a_restarted_master_keeps_its_epoch_from_its_snapshot() {
    let mut m = Server::new();
    let mut r = Server::start(Opts::new().save());
    let mut rc = r.conn();
    follow(&mut rc, &m);
    promote(&mut rc);
    assert!(wait_until(std::time::Duration::from_secs(5), || epoch(
        &mut rc
    ) == 1));
    assert_eq!(cmd!(&mut rc, "SAVE"), Ok(Value::Okay));
    r.restart();
    let mut rc = r.conn();
    assert_eq!(epoch(&mut rc), 1, "the epoch after a restart from the RDB");
    assert!(fences(&mut rc, "after", 5).iter().all(|f| f % EPOCHS == 1));
    m.stop();
}
