//! The server killed with SIGKILL and restarted: from its AOF under `appendfsync always`
//! (every acknowledged fence is kept) and from an older RDB snapshot (no fence is issued
//! twice). Both check that fences go on above every fence issued before the crash.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::cmd;
use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

// ---------------------------------------------------- server SIGKILL under appendfsync always

#[derive(Clone, Debug, Default)]
struct KeyModel {
    holder: Option<String>,
    /// The last acknowledged fence of the key (0: none yet).
    fence: i64,
    /// Every fence acknowledged for the key.
    issued: Vec<i64>,
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(String),
    Renew,
    Fence,
    Extend,
    Release,
}

/// What one writer thread saw before the server died.
struct WriterLog {
    keys: HashMap<String, KeyModel>,
    /// The command sent but never answered.
    in_flight: Option<(String, Op)>,
    acked: usize,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Runs random lock operations on its own keys until the connection dies.
fn aof_writer(port: u16, thread: usize, acked: Arc<AtomicUsize>) -> WriterLog {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rng = StdRng::seed_from_u64(thread as u64 * 7919 + 1);
    let mut log = WriterLog {
        keys: HashMap::new(),
        in_flight: None,
        acked: 0,
    };
    let mut gen = 0;
    loop {
        let key = format!("aof:{thread}:{}", rng.gen_range(0..8));
        let m = log.keys.entry(key.clone()).or_default().clone();
        let op = match &m.holder {
            None => {
                gen += 1;
                Op::Acquire(format!("t{thread}-{gen}"))
            }
            Some(_) => match rng.gen_range(0..20) {
                0..=9 => Op::Fence,
                10..=12 => Op::Extend,
                13..=14 => Op::Renew,
                _ => Op::Release,
            },
        };
        let holder = m.holder.clone().unwrap_or_default();
        let cmd = match &op {
            Op::Acquire(t) => redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg(t)
                .arg(600_000)
                .to_owned(),
            Op::Renew => redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg(&holder)
                .arg(600_000)
                .to_owned(),
            Op::Fence => redis::cmd("LOCK.FENCE").arg(&key).arg(&holder).to_owned(),
            Op::Extend => redis::cmd("LOCK.EXTEND")
                .arg(&key)
                .arg(&holder)
                .arg(600_000)
                .to_owned(),
            Op::Release => redis::cmd("LOCK.RELEASE").arg(&key).arg(&holder).to_owned(),
        };
        log.in_flight = Some((key.clone(), op.clone()));
        let v = match cmd.query::<Value>(&mut c) {
            Ok(v) => v,
            Err(e) if e.code().is_none() => return log, // the server is gone
            Err(e) => panic!("{op:?} on {key}: {e}"),
        };
        log.in_flight = None;
        let m = log.keys.get_mut(&key).unwrap();
        match op {
            Op::Acquire(t) => {
                let f = int(&v);
                assert!(f > m.fence, "fence {f} after {}", m.fence);
                m.holder = Some(t);
                m.fence = f;
                m.issued.push(f);
            }
            Op::Renew => assert_eq!(int(&v), m.fence, "renewal"),
            Op::Fence => {
                let f = int(&v);
                assert!(f > m.fence, "fence {f} after {}", m.fence);
                m.fence = f;
                m.issued.push(f);
            }
            Op::Extend => assert_eq!(int(&v), 1),
            Op::Release => {
                assert_eq!(int(&v), 1);
                m.holder = None;
            }
        }
        log.acked += 1;
        acked.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn server_sigkill_with_appendfsync_always_keeps_every_acknowledged_fence() {
    const THREADS: usize = 4;
    const KILL_AFTER: usize = 400;
    let mut s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (port, acked) = (s.port, acked.clone());
            thread::spawn(move || aof_writer(port, t, acked))
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), || acked.load(Ordering::SeqCst)
            >= KILL_AFTER),
        "writers too slow: {} acknowledged",
        acked.load(Ordering::SeqCst)
    );
    // Mid-stream: the writers are still sending.
    s.kill9();
    let logs: Vec<WriterLog> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    s.start_again();
    let mut c = s.conn();

    let total: usize = logs.iter().map(|l| l.acked).sum();
    let in_flight = logs.iter().filter(|l| l.in_flight.is_some()).count();
    let max_acked = logs
        .iter()
        .flat_map(|l| l.keys.values())
        .flat_map(|m| m.issued.iter().copied())
        .max()
        .unwrap();
    let mut checked = 0;
    let mut new_fences = Vec::new();
    for log in &logs {
        for (key, m) in &log.keys {
            let got = info(&mut c, key);
            let flying = match &log.in_flight {
                Some((k, op)) if k == key => Some(op),
                _ => None,
            };
            match (flying, &m.holder, &got) {
                // Exactly as acknowledged.
                (_, Some(h), Some(i)) if i.holder.as_deref() == Some(h.as_bytes()) => {
                    if matches!(flying, Some(Op::Fence)) {
                        assert!(i.fence >= m.fence, "{key}: fence {} < {}", i.fence, m.fence);
                    } else {
                        assert_eq!(i.fence, m.fence, "{key}: acknowledged fence lost");
                    }
                    assert!(i.ttl > 500_000, "{key}: lease {i:?}");
                }
                (_, None, None) => {}
                // The unanswered command may have been applied.
                (Some(Op::Release), Some(_), None) => {}
                (Some(Op::Acquire(t)), None, Some(i))
                    if i.holder.as_deref() == Some(t.as_bytes()) =>
                {
                    assert!(i.fence > m.fence, "{key}: {i:?} after {}", m.fence);
                }
                _ => panic!(
                    "{key}: after the crash {got:?}, but acknowledged {m:?} (in flight: {flying:?})"
                ),
            }
            checked += 1;
            // Fences continue above every acknowledged fence.
            let next = match got.as_ref().and_then(|i| i.holder.clone()) {
                Some(h) => fence(&mut c, key, std::str::from_utf8(&h).unwrap()).unwrap(),
                None => acquire(&mut c, key, "after-crash", 60_000).unwrap(),
            };
            assert!(
                next > max_acked,
                "{key}: fence {next} after the crash, but {max_acked} was acknowledged"
            );
            new_fences.push(next);
        }
    }
    for i in 0..20 {
        let f = acquire(&mut c, &format!("fresh:{i}"), "x", 60_000).unwrap();
        assert!(f > max_acked, "fresh key: fence {f} <= {max_acked}");
        new_fences.push(f);
    }
    for w in new_fences.windows(2) {
        assert!(w[1] > w[0]);
    }
    eprintln!(
        "appendfsync always: {total} operations acknowledged by {THREADS} clients, SIGKILL with \
         {in_flight} in flight; {checked} keys checked, {} fences issued after the restart, all \
         above {max_acked}",
        new_fences.len()
    );
}

// ------------------------------------------------------------ restart from an older RDB

#[test]
fn sigkill_and_restart_from_an_older_rdb_never_reissues_a_fence() {
    let mut s = Server::new();
    let mut c = s.conn();
    let mut issued: Vec<i64> = Vec::new();
    let mut snapshot = Vec::new();
    for i in 0..40 {
        let key = format!("snap:{i}");
        let tok = format!("t{i}");
        issued.push(acquire(&mut c, &key, &tok, 600_000).unwrap());
        for _ in 0..i % 3 {
            issued.push(fence(&mut c, &key, &tok).unwrap());
        }
    }
    // A key that is gone at the snapshot: its fences must not come back either.
    issued.push(acquire(&mut c, "gone", "g", 600_000).unwrap());
    assert_eq!(release(&mut c, "gone", "g"), 1);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    for i in 0..40 {
        snapshot.push(info(&mut c, &format!("snap:{i}")).unwrap());
    }
    let at_save = *issued.iter().max().unwrap();

    // After the snapshot: more fences, releases, new holders, new keys.
    for i in 0..40 {
        let key = format!("snap:{i}");
        let tok = format!("t{i}");
        for _ in 0..3 {
            issued.push(fence(&mut c, &key, &tok).unwrap());
        }
        if i % 4 == 0 {
            assert_eq!(release(&mut c, &key, &tok), 1);
            issued.push(acquire(&mut c, &key, &format!("u{i}"), 600_000).unwrap());
            issued.push(fence(&mut c, &key, &format!("u{i}")).unwrap());
        }
    }
    for i in 0..30 {
        let key = format!("late:{i}");
        issued.push(acquire(&mut c, &key, "l", 600_000).unwrap());
        issued.push(fence(&mut c, &key, "l").unwrap());
        if i % 2 == 0 {
            assert_eq!(release(&mut c, &key, "l"), 1);
        }
    }
    issued.push(acquire(&mut c, "gone", "g2", 600_000).unwrap());
    let max = *issued.iter().max().unwrap();
    assert!(max > at_save);
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();

    // The server is back at the snapshot...
    for (i, before) in snapshot.iter().enumerate() {
        let now = info(&mut c, &format!("snap:{i}")).expect("lock from the snapshot lost");
        assert_eq!(now.holder, before.holder, "snap:{i}");
        assert_eq!(
            now.fence, before.fence,
            "snap:{i}: not the snapshot's fence"
        );
    }
    for i in 0..30 {
        assert!(!exists(&mut c, &format!("late:{i}")));
    }
    // ...but every fence it issues now is above every fence issued before the crash.
    let mut after = Vec::new();
    for i in 0..40 {
        after.push(fence(&mut c, &format!("snap:{i}"), &format!("t{i}")).unwrap());
    }
    for i in 0..30 {
        after.push(acquire(&mut c, &format!("late:{i}"), "m", 60_000).unwrap());
    }
    after.push(acquire(&mut c, "gone", "g3", 60_000).unwrap());
    for i in 0..30 {
        after.push(acquire(&mut c, &format!("fresh:{i}"), "f", 60_000).unwrap());
    }
    for f in &after {
        assert!(
            *f > max,
            "fence {f} after the restart from an older RDB: {max} was issued before the crash"
        );
    }
    for w in after.windows(2) {
        assert!(w[1] > w[0]);
    }
    eprintln!(
        "older RDB: {} fences issued ({} after the SAVE) on 71 keys, then SIGKILL; {} fences \
         after the restart on 101 keys, all above the pre-crash maximum",
        issued.len(),
        issued.iter().filter(|f| **f > at_save).count(),
        after.len()
    );
}
