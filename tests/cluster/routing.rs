//! How the module's commands route in a cluster: a lock on a key in every slot through
//! [`Router`], `MOVED` from every wrong node for every `LOCK.*` command (a replica's too),
//! `COMMAND GETKEYS`, hash tags sharing a slot, and `CROSSSLOT` for a transaction over two.

use std::collections::HashMap;
use std::time::Instant;

use crate::cluster_setup::{as_int, owner_in, serial, Cluster};
use crate::cmd;
use crate::common::dbsize;
use crate::common::{assert_err_starts, exists, info, info_field, parse_info, run, run_raw};
use crate::lock_checks::wait_replicas;
use crate::router::Router;
use crate::slots::{key_per_slot, key_slot, SLOTS};
use redis::Value;

#[test]
fn locks_route_across_all_slots_and_the_wrong_node_answers_moved() {
    let _serial = serial();
    let cl = Cluster::start();
    let ranges = cl.ranges();
    let masters = cl.masters();
    let mut c0 = cl.conn(masters[0]);

    // The client's hash is the server's, hash tags included.
    let mut samples: Vec<String> = [
        "",
        "a",
        "orders:42",
        "{user1}:a",
        "{user1}:b",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "{}x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    samples.extend((0..50).map(|i| format!("lock:{}", i * 7919)));
    for k in &samples {
        assert_eq!(
            cmd!(&mut c0, "CLUSTER", "KEYSLOT", k),
            Ok(Value::Int(key_slot(k.as_bytes()) as i64)),
            "slot of {k:?}"
        );
    }
    let keys = key_per_slot();
    let tok = |slot: usize| format!("t{slot}");

    // 1. Key by key, a router that knows nothing: everything goes to one node first and the
    //    others are found through MOVED, once per slot.
    let mut r = Router::new(masters[0]);
    let sample: Vec<usize> = (0..SLOTS).step_by(61).collect();
    let mut first = HashMap::new();
    for &s in &sample {
        let f = r
            .int_or_nil(&["LOCK.ACQUIRE", &keys[s], &tok(s), "60000"])
            .expect("free key");
        first.insert(s, f);
    }
    let elsewhere = sample
        .iter()
        .filter(|&&s| owner_in(&ranges, s) != masters[0])
        .count();
    assert!(elsewhere > sample.len() / 3);
    assert_eq!(r.moved, elsewhere, "one MOVED per slot not on the seed");
    for &s in &sample {
        r.query(&["LOCK.INFO", &keys[s]]).unwrap();
    }
    assert_eq!(r.moved, elsewhere, "the router did not learn from MOVED");

    // 2. A lock on a key in every slot, pipelined per node.
    r.refresh();
    let acquires: Vec<Vec<String>> = (0..SLOTS)
        .map(|s| {
            vec![
                "LOCK.ACQUIRE".into(),
                keys[s].clone(),
                tok(s),
                "60000".into(),
            ]
        })
        .collect();
    let t0 = Instant::now();
    let fences = r.pipeline(&acquires);
    for (s, f) in fences.iter().enumerate() {
        let f = as_int(f);
        assert!(f > 0, "slot {s}: fence {f}");
        if let Some(&f0) = first.get(&s) {
            assert_eq!(
                f, f0,
                "slot {s}: a retried acquire by the holder keeps its fence"
            );
        }
    }
    eprintln!("{SLOTS} locks, one per slot, in {:?}", t0.elapsed());
    let infos = r.pipeline(
        &(0..SLOTS)
            .map(|s| vec!["LOCK.INFO".into(), keys[s].clone()])
            .collect::<Vec<_>>(),
    );
    for (s, v) in infos.iter().enumerate() {
        let i = parse_info(v).unwrap_or_else(|| panic!("slot {s}: no lock"));
        assert_eq!(i.holder.as_deref(), Some(tok(s).as_bytes()), "slot {s}");
        assert_eq!(i.fence, as_int(&fences[s]), "slot {s}");
    }
    for rg in &ranges {
        let owned: i64 = ranges
            .iter()
            .filter(|x| x.master == rg.master)
            .map(|x| (x.end - x.start + 1) as i64)
            .sum();
        let mut mc = cl.conn(rg.master);
        assert_eq!(dbsize(&mut mc), owned, "locks on master {}", rg.master);
        assert_eq!(
            info_field(&mut mc, "lock", "lock_held"),
            Some(owned.to_string())
        );
        for s in [rg.start, (rg.start + rg.end) / 2, rg.end] {
            assert_eq!(
                cmd!(&mut mc, "CLUSTER", "COUNTKEYSINSLOT", s),
                Ok(Value::Int(1))
            );
        }
        wait_replicas(&mut mc);
        assert_eq!(
            dbsize(&mut cl.conn(rg.replicas[0])),
            owned,
            "locks on replica {}",
            rg.replicas[0]
        );
    }

    // 3. Every LOCK.* command at the wrong node: MOVED naming the slot and its owner. A
    //    replica answers MOVED too, and with READONLY it serves LOCK.INFO, not the writes.
    let s = SLOTS / 2;
    let (key, t) = (keys[s].clone(), tok(s));
    let owner = owner_in(&ranges, s);
    let owner_replica = cl.replica_of(owner);
    let held = r.info(&key).unwrap();
    let moved = format!("MOVED {s} 127.0.0.1:{owner}");
    let forms: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", &key, "other", "1000"],
        vec!["LOCK.ACQUIRE", &key, "other", "1000", "WAIT", "100"],
        vec!["LOCK.ACQUIRE", &key, &t, "1000"],
        vec!["LOCK.RELEASE", &key, &t],
        vec!["LOCK.EXTEND", &key, &t, "1000"],
        vec!["LOCK.FENCE", &key, &t],
        vec!["LOCK.INFO", &key],
    ];
    let wrong: Vec<u16> = masters
        .iter()
        .copied()
        .filter(|&m| m != owner)
        .chain([owner_replica])
        .collect();
    for &port in &wrong {
        let mut c = cl.conn(port);
        for f in &forms {
            let raw: Vec<Vec<u8>> = f.iter().map(|a| a.as_bytes().to_vec()).collect();
            assert_eq!(
                run_raw(&mut c, &raw),
                Err(moved.clone()),
                "{f:?} sent to {port}"
            );
        }
    }
    let mut ro = cl.conn(owner_replica);
    assert_eq!(cmd!(&mut ro, "READONLY"), Ok(Value::Okay));
    let ri = info(&mut ro, &key).expect("replica serves LOCK.INFO after READONLY");
    assert_eq!((ri.holder, ri.fence), (held.holder.clone(), held.fence));
    assert_err_starts(&cmd!(&mut ro, "LOCK.FENCE", &key, &t), &moved);
    assert_err_starts(&cmd!(&mut ro, "LOCK.RELEASE", &key, &t), &moved);
    let after = r.info(&key).unwrap();
    assert_eq!((after.holder, after.fence), (held.holder, held.fence));

    // 4. COMMAND GETKEYS names the key of every form; hash tags share a slot.
    for f in &forms {
        let mut args = vec!["GETKEYS"];
        args.extend(f.iter().map(|a| if *a == key { "{user1}:a" } else { *a }));
        let mut c = redis::cmd("COMMAND");
        for a in &args {
            c.arg(*a);
        }
        assert_eq!(
            run(&c, &mut c0),
            Ok(Value::Array(vec![Value::BulkString(b"{user1}:a".to_vec())])),
            "COMMAND {args:?}"
        );
    }
    let tag = key_slot(b"user1");
    for k in ["{user1}:a", "{user1}:b"] {
        assert_eq!(
            cmd!(&mut c0, "CLUSTER", "KEYSLOT", k),
            Ok(Value::Int(tag as i64))
        );
        r.int_or_nil(&["LOCK.ACQUIRE", k, "u1", "60000"]).unwrap();
    }
    let mut tc = cl.conn(owner_in(&ranges, tag));
    assert_eq!(
        cmd!(&mut tc, "EXISTS", "{user1}:a", "{user1}:b"),
        Ok(Value::Int(2))
    );
    // One transaction over both keys of the tag runs; one over two slots is refused.
    assert_eq!(cmd!(&mut tc, "MULTI"), Ok(Value::Okay));
    cmd!(&mut tc, "LOCK.RELEASE", "{user1}:a", "u1").unwrap();
    cmd!(&mut tc, "LOCK.FENCE", "{user1}:b", "u1").unwrap();
    match cmd!(&mut tc, "EXEC") {
        Ok(Value::Array(v)) => {
            assert_eq!(v[0], Value::Int(1));
            assert!(as_int(&v[1]) > 0);
        }
        other => panic!("EXEC over one hash tag: {other:?}"),
    }
    let port = owner_in(&ranges, tag);
    let two: Vec<&String> = keys
        .iter()
        .enumerate()
        .filter(|&(s, _)| owner_in(&ranges, s) == port && s != tag)
        .map(|(_, k)| k)
        .take(2)
        .collect();
    let (k1, k2) = (format!("x{{{}}}", two[0]), format!("x{{{}}}", two[1]));
    assert_ne!(key_slot(k1.as_bytes()), key_slot(k2.as_bytes()));
    assert_eq!(cmd!(&mut tc, "MULTI"), Ok(Value::Okay));
    cmd!(&mut tc, "LOCK.ACQUIRE", &k1, "x", "60000").unwrap();
    cmd!(&mut tc, "LOCK.ACQUIRE", &k2, "x", "60000").unwrap();
    assert_err_starts(&cmd!(&mut tc, "EXEC"), "CROSSSLOT");
    assert!(!exists(&mut tc, &k1) && !exists(&mut tc, &k2));

    // 5. Every lock released through the router; nothing is left on any node.
    let releases: Vec<Vec<String>> = (0..SLOTS)
        .map(|s| vec!["LOCK.RELEASE".into(), keys[s].clone(), tok(s)])
        .collect();
    for (s, v) in r.pipeline(&releases).iter().enumerate() {
        assert_eq!(*v, Value::Int(1), "release of slot {s}");
    }
    assert_eq!(
        r.query(&["LOCK.RELEASE", "{user1}:b", "u1"]),
        Ok(Value::Int(1))
    );
    for &m in &masters {
        let mut mc = cl.conn(m);
        assert_eq!(dbsize(&mut mc), 0, "master {m}");
        wait_replicas(&mut mc);
        assert_eq!(dbsize(&mut cl.conn(cl.replica_of(m))), 0);
    }
}
