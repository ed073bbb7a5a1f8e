//! A held lock moving with its slot (`CLUSTER SETSLOT` + `MIGRATE … KEYS`): holder, remaining
//! lease and fence arrive intact, the lease ends on time on the new node and its fences go on
//! above the old node's; a client waiting on the source is not granted a lock there.

use std::time::{Duration, Instant};

use crate::cluster_setup::{as_string, owner_in, serial, Cluster};
use crate::cmd;
use crate::common::holds::Pending;
use crate::common::{info, token, wait_until};
use crate::lock_checks::{
    assert_lease_ends_on_time, assert_moved_intact, replica_info, snapshot, wait_replicas,
};
use crate::router::Router;
use crate::slots::key_slot;
use redis::Value;

#[test]
fn a_held_lock_migrates_with_its_slot() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"mig");
    let from = cl.owner(slot);
    let to = *cl.masters().iter().find(|&&m| m != from).unwrap();
    let (lease, held, gone) = ("{mig}:lease", "{mig}:held", "{mig}:gone");

    // On the old node: a released key with fences, a long-held key with fences, and a lease
    // that will end on the new node.
    let mut issued = Vec::new();
    let g = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", gone, &g, "60000"]).unwrap());
    issued.push(r.int_or_nil(&["LOCK.FENCE", gone, &g]).unwrap());
    assert_eq!(r.query(&["LOCK.RELEASE", gone, &g]), Ok(Value::Int(1)));
    let h = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", held, &h, "60000"]).unwrap());
    for _ in 0..3 {
        issued.push(r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap());
    }
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
    let max = *issued.iter().max().unwrap();
    let snaps = [snapshot(&mut r, held), snapshot(&mut r, lease)];

    // Migrate the slot: IMPORTING on the target, MIGRATING on the source, MIGRATE its keys.
    let (from_id, to_id) = (cl.id(from), cl.id(to));
    let mut fc = cl.conn(from);
    let mut tc = cl.conn(to);
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id),
        Ok(Value::Okay)
    );
    let mut in_slot: Vec<String> = match cmd!(&mut fc, "CLUSTER", "GETKEYSINSLOT", slot, 100) {
        Ok(Value::Array(v)) => v.iter().map(as_string).collect(),
        other => panic!("GETKEYSINSLOT: {other:?}"),
    };
    in_slot.sort();
    assert_eq!(in_slot, [held, lease]);
    let t0 = Instant::now();
    assert_eq!(
        cmd!(
            &mut fc,
            "MIGRATE",
            "127.0.0.1",
            to,
            "",
            0,
            5_000,
            "KEYS",
            held,
            lease
        ),
        Ok(Value::Okay)
    );
    eprintln!("MIGRATE of 2 locks: {:?}", t0.elapsed());

    // Mid-migration the source answers ASK for them; the router follows it.
    assert_eq!(
        cmd!(&mut fc, "LOCK.INFO", held),
        Err(format!("ASK {slot} 127.0.0.1:{to}"))
    );
    assert_moved_intact(&mut r, held, &snaps[0]);
    assert_eq!(r.asked, 1);
    assert_eq!(
        r.int_or_nil(&["LOCK.ACQUIRE", lease, "thief", "1000"]),
        None
    );
    assert_eq!(r.asked, 2);

    // Hand the slot over; the router's stale map gets MOVED.
    for port in [to, from] {
        assert_eq!(
            cmd!(
                &mut cl.conn(port),
                "CLUSTER",
                "SETSLOT",
                slot,
                "NODE",
                &to_id
            ),
            Ok(Value::Okay),
            "SETSLOT NODE on {port}"
        );
    }
    cl.wait_stable(|ranges| owner_in(ranges, slot) == to);
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(0))
    );
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(2))
    );
    assert_moved_intact(&mut r, lease, &snaps[1]);
    assert_eq!(r.moved, 1, "the router should have been sent on with MOVED");
    assert_moved_intact(&mut r, held, &snaps[0]);

    // Both replicas follow: the target's has the locks, the source's has none left.
    wait_replicas(&mut tc);
    wait_replicas(&mut fc);
    for k in [held, lease] {
        let (a, b) = (
            r.info(k).unwrap(),
            replica_info(cl.node(cl.replica_of(to)), k),
        );
        let b = b.unwrap_or_else(|| panic!("{k}: not on the target's replica"));
        assert_eq!(
            (&a.holder, a.fence),
            (&b.holder, b.fence),
            "{k} on the replica"
        );
    }
    let mut frc = cl.conn(cl.replica_of(from));
    assert_eq!(
        cmd!(&mut frc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(0))
    );

    // Nobody else gets them; fences go on above every fence issued on the old node.
    assert_eq!(r.int_or_nil(&["LOCK.ACQUIRE", held, "thief", "1000"]), None);
    let f1 = r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap();
    assert!(
        f1 > max,
        "LOCK.FENCE after the move: {f1}, issued before: {issued:?}"
    );
    assert_eq!(r.query(&["LOCK.RELEASE", held, &h]), Ok(Value::Int(1)));
    let f2 = r
        .int_or_nil(&["LOCK.ACQUIRE", held, &token(), "60000"])
        .unwrap();
    assert!(f2 > f1, "fresh acquire after release: {f2} after {f1}");
    let f3 = r
        .int_or_nil(&["LOCK.ACQUIRE", gone, &token(), "60000"])
        .unwrap();
    assert!(
        f3 > f2,
        "the key released on the old node: {f3}, max there {max}"
    );

    // The lease ends on time on the new node, and on its replica with it.
    assert_lease_ends_on_time(&mut tc, lease, lease_ttl, sent, replied);
    let f4 = r
        .int_or_nil(&["LOCK.ACQUIRE", lease, &token(), "60000"])
        .unwrap();
    assert!(f4 > f3, "after the lease ended: {f4}");
    wait_replicas(&mut tc);
}

/// Guarantee 1 across a slot migration: a client waiting on the source node for a lock whose
/// key `MIGRATE` moves away must not be granted a lock there (the migrated lock is held on the
/// target); a null reply or an error is fine.
#[test]
fn a_waiter_on_a_migrating_key_is_not_granted_on_the_old_node() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"wq");
    let from = cl.owner(slot);
    let to = *cl.masters().iter().find(|&&m| m != from).unwrap();
    let key = "{wq}:k";
    let h = token();
    let f = r.int_or_nil(&["LOCK.ACQUIRE", key, &h, "60000"]).unwrap();
    let mut fc = cl.conn(from);
    let waiter = Pending::send_to(from, key, &token(), 10_000, &["WAIT", "3000"]);
    assert!(
        wait_until(Duration::from_secs(10), || info(&mut fc, key)
            .unwrap()
            .waiters
            == 1),
        "waiter did not queue"
    );
    let (from_id, to_id) = (cl.id(from), cl.id(to));
    let mut tc = cl.conn(to);
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(
            &mut fc,
            "MIGRATE",
            "127.0.0.1",
            to,
            "",
            0,
            5_000,
            "KEYS",
            key
        ),
        Ok(Value::Okay)
    );
    let (outcome, _) = waiter
        .reply_within(Duration::from_secs(10))
        .expect("waiter still hangs 10s after MIGRATE, 3s after its WAIT timeout");
    let on_source = cmd!(&mut fc, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(cmd!(&mut tc, "ASKING"), Ok(Value::Okay));
    let on_target = info(&mut tc, key);
    eprintln!(
        "waiter: {outcome:?}; keys left in the slot on the source: {on_source:?}; \
         target: {on_target:?}"
    );
    let t = on_target.expect("the lock did not arrive on the target");
    assert_eq!((t.holder.as_deref(), t.fence), (Some(h.as_bytes()), f));
    assert!(
        !matches!(outcome, Ok(Value::Int(_))),
        "the waiter was granted {outcome:?} on the source while {h} holds the lock (fence {f}) \
         on the target: two holders"
    );
    assert_eq!(
        on_source,
        Ok(Value::Int(0)),
        "a lock was left on the source"
    );
}
