//! `CLUSTER FAILOVER` of a master's replica: the new master has holder, lease and fence as they
//! were, its fences go on above the old master's, and the old master's waiter is answered.

use std::time::{Duration, Instant};

use crate::cluster_setup::{owner_in, serial, Cluster};
use crate::cmd;
use crate::common::holds::Pending;
use crate::common::{info, info_field, token, wait_until};
use crate::lock_checks::{
    assert_lease_ends_on_time, assert_moved_intact, replica_info, snapshot, wait_replicas,
};
use crate::router::Router;
use crate::slots::key_slot;
use redis::Value;

#[test]
fn cluster_failover_keeps_holder_lease_and_fence() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"fo");
    let old = cl.owner(slot);
    let new = cl.replica_of(old);
    let (lease, held, gone) = ("{fo}:lease", "{fo}:held", "{fo}:gone");

    let mut issued = Vec::new();
    let g = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", gone, &g, "60000"]).unwrap());
    assert_eq!(r.query(&["LOCK.RELEASE", gone, &g]), Ok(Value::Int(1)));
    let h = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", held, &h, "60000"]).unwrap());
    issued.push(r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap());
    let l = token();
    // Long enough to outlast a failover on a loaded machine (6 s seen), short enough to wait
    // out at the end.
    let lease_ttl = 12_000;
    let sent = Instant::now();
    issued.push(
        r.int_or_nil(&["LOCK.ACQUIRE", lease, &l, &lease_ttl.to_string()])
            .unwrap(),
    );
    let replied = Instant::now();
    let mut oc = cl.conn(old);
    wait_replicas(&mut oc);
    let max = *issued.iter().max().unwrap();
    let waiter = Pending::send_to(old, held, &token(), 10_000, &["WAIT", "0"]);
    assert!(
        wait_until(Duration::from_secs(10), || info(&mut oc, held)
            .unwrap()
            .waiters
            == 1),
        "waiter did not queue"
    );
    let snaps = [snapshot(&mut r, held), snapshot(&mut r, lease)];

    let mut nc = cl.conn(new);
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut nc, "CLUSTER", "FAILOVER"), Ok(Value::Okay));
    cl.wait_stable(|ranges| owner_in(ranges, slot) == new);
    eprintln!("CLUSTER FAILOVER took {:?}", t0.elapsed());
    assert_eq!(
        info_field(&mut oc, "replication", "role").as_deref(),
        Some("slave")
    );
    match waiter.reply_within(Duration::from_secs(10)).map(|(r, _)| r) {
        Some(Err(e)) => eprintln!("waiter of the old master: {e:?}"),
        Some(Ok(v)) => panic!("waiter of the old master got a reply: {v:?}"),
        None => panic!("waiter of the old master still hangs 10s after the failover"),
    }

    // The router is sent on to the new master, which has the locks as they were.
    assert_moved_intact(&mut r, held, &snaps[0]);
    assert!(r.moved >= 1);
    assert_moved_intact(&mut r, lease, &snaps[1]);
    assert_eq!(r.info(held).unwrap().waiters, 0);
    assert_eq!(r.int_or_nil(&["LOCK.ACQUIRE", held, "thief", "1000"]), None);
    let f1 = r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap();
    assert!(
        f1 > max,
        "fence after failover {f1}, issued before: {issued:?}"
    );
    let f2 = r
        .int_or_nil(&["LOCK.ACQUIRE", gone, &token(), "60000"])
        .unwrap();
    assert!(f2 > f1);
    assert_eq!(
        info_field(&mut oc, "lock", "lock_waiting_clients").as_deref(),
        Some("0")
    );

    // The lease ends on time on the new master; the old one, now its replica, follows.
    assert_lease_ends_on_time(&mut nc, lease, lease_ttl, sent, replied);
    wait_replicas(&mut nc);
    assert_eq!(replica_info(cl.node(old), lease), None);
    let a = r.info(held).unwrap();
    let b = replica_info(cl.node(old), held).expect("old master mirrors the new one");
    assert_eq!((&a.holder, a.fence), (&b.holder, b.fence));
}
