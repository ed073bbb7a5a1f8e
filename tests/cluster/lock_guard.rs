//! `LOCK.GUARD` in a cluster: it declares the lock key and the guarded command's keys, so they
//! must share a slot (`CROSSSLOT` otherwise), the wrong node answers `MOVED`, and the guarded
//! write reaches the owner's replica as the write itself.

use crate::cluster_setup::{owner_in, serial, Cluster};
use crate::cmd;
use crate::common::{assert_err_starts, exists, info, lock_stat, run, token};
use crate::lock_checks::{replica_info, wait_replicas};
use crate::router::Router;
use crate::slots::{key_per_slot, key_slot, SLOTS};
use redis::{Connection, Value};

/// `LOCK.GUARD` in a cluster: it declares the lock key and the guarded command's keys, so the
/// cluster checks them as one command's keys: all in the slot of the node that runs it
/// (`CROSSSLOT` otherwise, whoever gets it), sent to another node it is answered `MOVED` to
/// the slot's owner, and the guarded write reaches the owner's replica (as the write itself,
/// not as `LOCK.GUARD`).
#[test]
fn lock_guard_keys_share_the_lock_slot_and_the_write_reaches_the_replica() {
    let _serial = serial();
    let cl = Cluster::start();
    let ranges = cl.ranges();
    let masters = cl.masters();
    let (lock, data) = ("{t}:lock", "{t}:data");
    let slot = key_slot(b"t");
    assert_eq!(key_slot(lock.as_bytes()), slot);
    assert_eq!(key_slot(data.as_bytes()), slot);
    let owner = owner_in(&ranges, slot);
    let replica = cl.replica_of(owner);
    let mut oc = cl.conn(owner);
    let guarded_runs = |c: &mut Connection| lock_stat(c, "lock_guarded_runs");

    // (d) COMMAND GETKEYS on a cluster node: the lock key, then the guarded command's keys.
    let getkeys = |c: &mut Connection, words: &[&str]| -> Result<Value, String> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS");
        for w in words {
            cmd.arg(*w);
        }
        run(&cmd, c)
    };
    let bulks = |keys: &[&str]| {
        Value::Array(
            keys.iter()
                .map(|k| Value::BulkString(k.as_bytes().to_vec()))
                .collect(),
        )
    };
    for &port in &masters {
        let mut c = cl.conn(port);
        assert_eq!(
            getkeys(&mut c, &["LOCK.GUARD", lock, "5", "SET", data, "v"]),
            Ok(bulks(&[lock, data])),
            "COMMAND GETKEYS on {port}"
        );
        assert_eq!(
            getkeys(
                &mut c,
                &["LOCK.GUARD", lock, "5", "MSET", "{t}:x", "1", "{t}:y", "2"]
            ),
            Ok(bulks(&[lock, "{t}:x", "{t}:y"])),
            "COMMAND GETKEYS on {port}"
        );
        assert_eq!(
            getkeys(&mut c, &["LOCK.GUARD", "a:lock", "5", "SET", "b:data", "v"]),
            Ok(bulks(&["a:lock", "b:data"])),
            "COMMAND GETKEYS on {port}"
        );
    }

    // (a) On the owner, under the fence of a real acquire, the guarded SET runs.
    let t = token();
    let f = match cmd!(&mut oc, "LOCK.ACQUIRE", lock, &t, 60_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("LOCK.ACQUIRE {lock}: {other:?}"),
    };
    let runs0 = guarded_runs(&mut oc);
    assert_eq!(
        cmd!(&mut oc, "LOCK.GUARD", lock, f, "SET", data, "v1"),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v1".to_vec()))
    );
    assert_eq!(guarded_runs(&mut oc), runs0.map(|r| r + 1));

    // (c) Sent to a node that does not own the slot (another master, or the owner's replica,
    //     also after READONLY: it is a write), it is answered MOVED to the owner; nothing runs.
    let moved = format!("MOVED {slot} 127.0.0.1:{owner}");
    for &port in masters.iter().filter(|&&m| m != owner).chain([&replica]) {
        let mut c = cl.conn(port);
        let runs = guarded_runs(&mut c);
        assert_eq!(
            cmd!(&mut c, "LOCK.GUARD", lock, f, "SET", data, "wrong-node"),
            Err(moved.clone()),
            "LOCK.GUARD sent to {port}"
        );
        assert_eq!(guarded_runs(&mut c), runs, "LOCK.GUARD ran on {port}");
    }
    let mut rc = cl.conn(replica);
    assert_eq!(cmd!(&mut rc, "READONLY"), Ok(Value::Okay));
    assert_eq!(
        cmd!(&mut rc, "LOCK.GUARD", lock, f, "SET", data, "wrong-node"),
        Err(moved.clone()),
        "LOCK.GUARD sent to the replica after READONLY"
    );
    // A router that knows no slot yet follows the MOVED and the write runs on the owner.
    let seed = *masters.iter().find(|&&m| m != owner).unwrap();
    let mut r = Router::new(seed);
    let fs = f.to_string();
    assert_eq!(
        r.query(&["LOCK.GUARD", lock, &fs, "SET", data, "v2"]),
        Ok(Value::Okay)
    );
    assert_eq!(r.moved, 1, "the router was not sent on to the owner");
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v2".to_vec()))
    );

    // (b) Keys in two slots: CROSSSLOT, whichever node gets it; nothing changes.
    let (la, db) = ("a:lock", "b:data");
    let (sa, sb) = (key_slot(la.as_bytes()), key_slot(db.as_bytes()));
    assert_ne!(sa, sb);
    let a_owner = owner_in(&ranges, sa);
    let mut ac = cl.conn(a_owner);
    let fa = match cmd!(&mut ac, "LOCK.ACQUIRE", la, &t, 60_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("LOCK.ACQUIRE {la}: {other:?}"),
    };
    let before = info(&mut ac, la);
    for &port in &masters {
        let mut c = cl.conn(port);
        let (runs, refusals) = (
            guarded_runs(&mut c),
            lock_stat(&mut c, "lock_guarded_refusals"),
        );
        assert_err_starts(
            &cmd!(&mut c, "LOCK.GUARD", la, fa, "SET", db, "v"),
            "CROSSSLOT",
        );
        assert_eq!(
            (
                guarded_runs(&mut c),
                lock_stat(&mut c, "lock_guarded_refusals")
            ),
            (runs, refusals),
            "a CROSSSLOT refusal on {port} counted"
        );
    }
    // Two slots of the same node: CROSSSLOT too (not only a slot another node owns).
    let other_slot = (0..SLOTS)
        .find(|&s| s != sa && owner_in(&ranges, s) == a_owner)
        .unwrap();
    let same_node = format!("x{{{}}}", key_per_slot()[other_slot]);
    assert_eq!(key_slot(same_node.as_bytes()), other_slot);
    assert_err_starts(
        &cmd!(&mut ac, "LOCK.GUARD", la, fa, "SET", &same_node, "v"),
        "CROSSSLOT",
    );
    assert_err_starts(
        &cmd!(
            &mut oc,
            "LOCK.GUARD",
            lock,
            f,
            "MSET",
            data,
            "v3",
            &same_node,
            "v"
        ),
        "CROSSSLOT",
    );
    let b_owner = owner_in(&ranges, sb);
    assert!(!exists(&mut cl.conn(b_owner), db), "{db} was written");
    assert!(!exists(&mut ac, &same_node), "{same_node} was written");
    let after = info(&mut ac, la);
    assert_eq!(
        after.as_ref().map(|i| (&i.holder, i.fence)),
        before.as_ref().map(|i| (&i.holder, i.fence)),
        "the lock of a refused LOCK.GUARD changed"
    );
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v2".to_vec()))
    );

    // (e) The guarded write reaches the owner's replica: WAIT 1, then read it there.
    assert_eq!(
        cmd!(&mut oc, "LOCK.GUARD", lock, f, "SET", data, "v4"),
        Ok(Value::Okay)
    );
    wait_replicas(&mut oc);
    assert_eq!(
        cmd!(&mut rc, "GET", data),
        Ok(Value::BulkString(b"v4".to_vec())),
        "the guarded write on the replica"
    );
    // The replica applied the SET itself, never LOCK.GUARD (it only refused, with MOVED,
    // the ones sent to it above).
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut rc)
        .unwrap();
    let calls = |name: &str| -> i64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    assert!(
        calls("set") >= 3 && calls("lock.guard") == 0,
        "the replica's INFO commandstats: {stats}"
    );
    let ri = replica_info(cl.node(replica), lock).expect("the lock on the replica");
    assert_eq!(ri.fence, f);
    eprintln!(
        "LOCK.GUARD in the cluster: slot {slot} on {owner}, MOVED from the others, CROSSSLOT \
         for {la} + {db} (slots {sa}, {sb}) and for two slots of {a_owner}; the write on \
         replica {replica}"
    );
}
