//! On a master that nothing replicates from and with the AOF off, the module skips building
//! the `LOCK.APPLY` that Redis would discard (`src/replication.rs`). These tests bring a
//! reader in while locks change and check that it misses nothing: a replica attaching
//! mid-traffic, the AOF switched on mid-traffic, a restarted master's replica resuming.

use crate::cmd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::*;
use redis::Value;

const KEYS: usize = 50;

fn propagating(con: &mut redis::Connection) -> Option<String> {
    info_field(con, "lock", "lock_propagating")
}

/// Waits until the module has seen that nothing reads the stream.
fn wait_not_propagating(con: &mut redis::Connection) {
    let idle = wait_until(Duration::from_secs(10), || {
        propagating(con).as_deref() == Some("0")
    });
    assert!(
        idle,
        "lock_propagating still {:?} after 10s",
        propagating(con)
    );
}

/// Acquires, extends, fences and releases locks on `KEYS` keys until `stop`, as fast as
/// one connection goes. Every reply is checked, so a failure shows here, not later.
fn churn(port: u16, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let i = n as usize % KEYS;
            let key = format!("k{i}");
            // One token per key: every acquire succeeds, as a new lease or a renewal.
            let tok = format!("t{i}");
            let f = acquire(&mut con, &key, &tok, 60_000).expect("acquire with the holder's token");
            match (n / KEYS as u64) % 4 {
                0 => assert_eq!(release(&mut con, &key, &tok), 1),
                1 => assert_eq!(extend(&mut con, &key, &tok, 90_000), 1),
                2 => assert!(fence(&mut con, &key, &tok).unwrap() > f),
                _ => {}
            }
            n += 1;
        }
        n
    })
}

/// Every key's lock is the same on both servers (holder, fence; the lease within 2 s).
#[track_caller]
fn assert_same_locks(a: &mut redis::Connection, b: &mut redis::Connection) {
    for i in 0..KEYS {
        let key = format!("k{i}");
        let (x, y) = (info(a, &key), info(b, &key));
        match (&x, &y) {
            (None, None) => {}
            (Some(x), Some(y)) => {
                assert_eq!((&x.holder, x.fence), (&y.holder, y.fence), "{key}");
                assert!((x.ttl - y.ttl).abs() <= 2_000, "{key}: {x:?} vs {y:?}");
            }
            _ => panic!("{key}: {x:?} vs {y:?}"),
        }
    }
}

#[test]
fn a_replica_attached_mid_traffic_misses_nothing() {
    let m = Server::new();
    let mut mc = m.conn();
    wait_not_propagating(&mut mc);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = churn(m.port, stop.clone());
    thread::sleep(Duration::from_millis(300));

    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    assert_eq!(propagating(&mut mc).as_deref(), Some("1"));
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let ops = writer.join().unwrap();
    assert!(ops > 100, "only {ops} operations ran");

    assert_eq!(wait_replicas(&mut mc, 1, 5_000), Ok(Value::Int(1)));
    assert_same_locks(&mut mc, &mut rc);
    // With a replica attached the module keeps propagating.
    thread::sleep(Duration::from_millis(1_500));
    assert_eq!(propagating(&mut mc).as_deref(), Some("1"));
}

#[test]
fn the_aof_switched_on_mid_traffic_misses_nothing() {
    let mut s = Server::new();
    let mut c = s.conn();
    wait_not_propagating(&mut c);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = churn(s.port, stop.clone());
    thread::sleep(Duration::from_millis(300));
    cmd!(&mut c, "CONFIG", "SET", "appendonly", "yes").unwrap();
    let rewritten = wait_until(Duration::from_secs(15), || {
        info_field(&mut c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    assert!(rewritten, "AOF rewrite did not finish");
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    // What the AOF holds, compared with what the server held (SHUTDOWN NOSAVE: no RDB).
    let before = Server::start(Opts::new());
    let mut bc = before.conn();
    for i in 0..KEYS {
        let key = format!("k{i}");
        if let Some(dump) = cmd!(&mut c, "DUMP", &key).ok().filter(|v| *v != Value::Nil) {
            let Value::BulkString(bytes) = dump else {
                panic!("DUMP {key}: {dump:?}")
            };
            cmd!(&mut bc, "RESTORE", &key, 0, bytes).unwrap();
        }
    }
    s.opts.appendonly = true;
    s.restart();
    let mut c = s.conn();
    assert_same_locks(&mut c, &mut bc);
}

#[test]
fn a_restarted_masters_replica_resumes_without_missing_a_change() {
    let mut m = Server::start(Opts::new().save());
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut mc = m.conn();
    acquire(&mut mc, "k0", "before", 60_000).unwrap();
    // SHUTDOWN with save points set writes an RDB with the replication offset, which lets
    // the replica resume with a partial resynchronisation after the restart.
    let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut mc);
    m.stop();
    m.start_again();
    let mut mc = m.conn();
    wait_link_up(&mut rc);
    let f = acquire(&mut mc, "k1", "after", 60_000).unwrap();
    thread::sleep(Duration::from_millis(1_500)); // past the module's next look at INFO
    let g = acquire(&mut mc, "k2", "later", 60_000).unwrap();
    assert_eq!(wait_replicas(&mut mc, 1, 5_000), Ok(Value::Int(1)));
    assert_eq!(info(&mut rc, "k1").map(|i| i.fence), Some(f));
    assert_eq!(info(&mut rc, "k2").map(|i| i.fence), Some(g));
    assert_same_locks(&mut mc, &mut rc);
}

#[test]
fn changes_count_towards_save_points_when_nothing_reads_the_stream() {
    let s = Server::new();
    let mut c = s.conn();
    wait_not_propagating(&mut c);
    let changes = |c: &mut redis::Connection| -> i64 {
        info_field(c, "persistence", "rdb_changes_since_last_save")
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let before = changes(&mut c);
    acquire(&mut c, "k", "tok", 60_000).unwrap();
    extend(&mut c, "k", "tok", 60_000);
    fence(&mut c, "k", "tok").unwrap();
    release(&mut c, "k", "tok");
    assert_eq!(changes(&mut c) - before, 4);
}

/// In cluster mode the module never stops building its effects: slot migration (Valkey 9,
/// Redis 8.4) streams them to another node, which `INFO` does not show as a replica.
#[test]
fn cluster_mode_keeps_propagating() {
    let s = Server::start(Opts::new().extra(&["--cluster-enabled", "yes"]));
    let mut c = s.conn();
    // The module looks at INFO once a second; give it three looks.
    thread::sleep(Duration::from_millis(3_000));
    assert_eq!(propagating(&mut c).as_deref(), Some("1"));
    let plain = Server::new();
    wait_not_propagating(&mut plain.conn());
}
