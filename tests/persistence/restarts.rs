//! Locks saved and loaded back on the same server: `SAVE` and `BGSAVE` + restart, the AOF
//! rewritten without the RDB preamble and replayed without a rewrite, `DEBUG RELOAD`, a lease
//! that ended while the server was down, and a crash back to an older RDB; holder, remaining
//! lease and fence survive, and no fence is issued twice.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::assert_survived;
use crate::cmd;
use crate::common::*;
use redis::Value;

#[test]
fn rdb_save_restart_keeps_holder_ttl_and_fence() {
    let mut s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 60_000).unwrap();
    let f = fence(&mut c, "k", "tok").unwrap();
    // A key whose lock is gone before SAVE: its fences must still not come back.
    acquire(&mut c, "gone", "g", 60_000).unwrap();
    let g = fence(&mut c, "gone", "g").unwrap();
    assert_eq!(release(&mut c, "gone", "g"), 1);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
    assert!(!exists(&mut c, "gone"));
    let max = f.max(g);
    let f2 = fence(&mut c, "k", "tok").unwrap();
    assert!(f2 > max, "FENCE after restart {f2} <= {max}");
    let g2 = acquire(&mut c, "gone", "g2", 1_000).unwrap();
    assert!(g2 > f2, "fresh fence after restart {g2} <= {f2}");
    assert_eq!(release(&mut c, "k", "tok"), 1);
    let f3 = acquire(&mut c, "k", "other", 1_000).unwrap();
    assert!(f3 > g2);
}

#[test]
fn bgsave_restart_keeps_lock() {
    let mut s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 60_000).unwrap();
    let f = fence(&mut c, "k", "tok").unwrap();
    assert!(cmd!(&mut c, "BGSAVE").is_ok());
    wait_persistence_idle(&mut c);
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_last_bgsave_status").as_deref(),
        Some("ok")
    );
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
    assert!(fence(&mut c, "k", "tok").unwrap() > f);
}

#[test]
fn aof_rewrite_without_rdb_preamble_then_restart() {
    let mut s = Server::start(Opts::new().appendonly().no_rdb_preamble());
    let mut c = s.conn();
    acquire(&mut c, "k1", "t1", 60_000).unwrap();
    let f1 = fence(&mut c, "k1", "t1").unwrap();
    acquire(&mut c, "k2", "t2", 60_000).unwrap();
    acquire(&mut c, "short", "t3", 1_000).unwrap();
    assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
    wait_persistence_idle(&mut c);
    assert_eq!(
        info_field(&mut c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    let base = aof::latest_base(&s);
    assert!(
        !base.starts_with(b"REDIS"),
        "aof-use-rdb-preamble no must give a text base file"
    );
    let text = String::from_utf8_lossy(&base).to_lowercase();
    assert!(
        text.contains("k1") && text.contains("t1"),
        "rewritten AOF lacks the lock"
    );
    // After the rewrite: changes go to the incremental file.
    let f1b = fence(&mut c, "k1", "t1").unwrap();
    assert!(f1b > f1);
    assert_eq!(release(&mut c, "k2", "t2"), 1);
    let max = f1b;
    let before = info(&mut c, "k1").unwrap();
    let t0 = Instant::now();
    drop(c);
    // Let the short lease end while the server is down.
    sleep(Duration::from_millis(1_100));
    s.restart();
    let mut c = s.conn();
    assert_survived(&before, info(&mut c, "k1"), t0.elapsed());
    assert!(
        !exists(&mut c, "k2"),
        "released lock came back from the AOF"
    );
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "short")),
        "lease that ended while the server was down is still there"
    );
    let n = acquire(&mut c, "k2", "x", 1_000).unwrap();
    assert!(n > max, "fresh fence after AOF restart {n} <= {max}");
    assert!(fence(&mut c, "k1", "t1").unwrap() > n);
}

#[test]
fn aof_replay_without_rewrite_keeps_deadline_and_fence() {
    let mut s = Server::start(Opts::new().appendonly());
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 5_000).unwrap();
    let f = fence(&mut c, "k", "tok").unwrap();
    acquire(&mut c, "r", "t", 60_000).unwrap();
    assert_eq!(release(&mut c, "r", "t"), 1);
    acquire(&mut c, "e", "t", 100).unwrap();
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut c, "e")));
    // Let time pass: a verbatim replay of LOCK.ACQUIRE would restart the lease at 5000ms
    // and issue a new fence.
    sleep(Duration::from_millis(1_500));
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
    assert_eq!(before.fence, f);
    assert!(!exists(&mut c, "r"));
    assert!(!exists(&mut c, "e"));
    let n = acquire(&mut c, "r", "t2", 1_000).unwrap();
    assert!(n > f);
}

#[test]
fn debug_reload_keeps_lock_and_fences_increase() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 10_000).unwrap();
    let f = fence(&mut c, "k", "tok").unwrap();
    acquire(&mut c, "gone", "g", 10_000).unwrap();
    let g = fence(&mut c, "gone", "g").unwrap();
    assert_eq!(release(&mut c, "gone", "g"), 1);
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
    let f2 = fence(&mut c, "k", "tok").unwrap();
    assert!(f2 > f.max(g));
    let n = acquire(&mut c, "gone", "g2", 1_000).unwrap();
    assert!(n > f2);
    assert_eq!(release(&mut c, "k", "tok"), 1);
    assert!(acquire(&mut c, "k", "x", 1_000).unwrap() > n);
}

#[test]
fn lease_that_ended_while_down_is_ended_after_restart() {
    let mut s = Server::new();
    let mut c = s.conn();
    let t0 = Instant::now();
    let f = acquire(&mut c, "short", "t", 1_000).unwrap();
    acquire(&mut c, "long", "t", 60_000).unwrap();
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    drop(c);
    s.stop();
    sleep(Duration::from_millis(1_500).saturating_sub(t0.elapsed()));
    s.start_again();
    let mut c = s.conn();
    // Watched with EXISTS only: the server must end it by itself.
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "short")),
        "lease that ended while the server was down is still there after restart"
    );
    assert_eq!(release(&mut c, "short", "t"), 0);
    let i = info(&mut c, "long").expect("long lease lost");
    assert!(i.ttl > 50_000, "long lease ttl {}", i.ttl);
    assert!(acquire(&mut c, "short", "t2", 1_000).unwrap() > f);
}

#[test]
fn crash_and_restart_from_older_rdb_never_reissues_fences() {
    let mut s = Server::new();
    let mut c = s.conn();
    let f1 = acquire(&mut c, "k", "tok", 60_000).unwrap();
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    let mut after_save = Vec::new();
    for _ in 0..5 {
        after_save.push(fence(&mut c, "k", "tok").unwrap());
    }
    after_save.push(acquire(&mut c, "k2", "t2", 60_000).unwrap());
    after_save.push(fence(&mut c, "k2", "t2").unwrap());
    let max = *after_save.iter().max().unwrap();
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    let i = info(&mut c, "k").expect("lock from the snapshot");
    assert_eq!(i.fence, f1, "snapshot state");
    assert_eq!(i.holder.as_deref(), Some(&b"tok"[..]));
    assert!(!exists(&mut c, "k2"));
    let n1 = fence(&mut c, "k", "tok").unwrap();
    assert!(
        n1 > max,
        "fence {n1} after crash reissues one of {after_save:?}"
    );
    let n2 = acquire(&mut c, "k2", "t3", 1_000).unwrap();
    assert!(
        n2 > max && n2 > n1,
        "fence {n2} after crash vs {after_save:?}"
    );
}
