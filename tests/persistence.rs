//! Fences never go backwards, and locks survive RDB, AOF, DEBUG RELOAD, DUMP/RESTORE and
//! MIGRATE exactly (holder, remaining lease, fence).

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};
use redis::Value;

/// Checks that `after` (read `elapsed` after `before`) is the same lease.
#[track_caller]
fn assert_survived(before: &LockInfo, after: Option<LockInfo>, elapsed: Duration) {
    let after = after.expect("lock key lost");
    assert_eq!(after.holder, before.holder, "holder");
    assert_eq!(after.fence, before.fence, "fence");
    let expect = before.ttl - elapsed.as_millis() as i64;
    assert!(
        (after.ttl - expect).abs() <= 150,
        "remaining lease {} but expected {expect} (±150) ({} before, {elapsed:?} later)",
        after.ttl,
        before.ttl
    );
}

#[test]
fn fences_increase_across_release_lease_end_and_key_removal() {
    let s = Server::new();
    let mut c = s.conn();
    let mut issued = vec![acquire(&mut c, "k", "a", 10_000).unwrap()];
    issued.push(fence(&mut c, "k", "a").unwrap());
    issued.push(fence(&mut c, "k", "a").unwrap());
    assert_eq!(release(&mut c, "k", "a"), 1);
    issued.push(acquire(&mut c, "k", "b", 100).unwrap());
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut c, "k")));
    issued.push(acquire(&mut c, "k", "c", 10_000).unwrap());
    assert_eq!(cmd!(&mut c, "DEL", "k"), Ok(Value::Int(1)));
    issued.push(acquire(&mut c, "k", "d", 10_000).unwrap());
    assert_eq!(cmd!(&mut c, "UNLINK", "k"), Ok(Value::Int(1)));
    issued.push(acquire(&mut c, "k", "e", 10_000).unwrap());
    issued.push(fence(&mut c, "k", "e").unwrap());
    assert_eq!(cmd!(&mut c, "FLUSHALL"), Ok(Value::Okay));
    issued.push(acquire(&mut c, "k", "f", 10_000).unwrap());
    for w in issued.windows(2) {
        assert!(w[1] > w[0], "fences not strictly increasing: {issued:?}");
    }
    // A fresh key starts above every fence the server issued.
    let fresh = acquire(&mut c, "fresh", "x", 10_000).unwrap();
    assert!(fresh > *issued.last().unwrap(), "{fresh} vs {issued:?}");
}

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

fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    match cmd!(c, "DUMP", key) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

#[test]
fn dump_restore_into_second_server() {
    let a = Server::new();
    let b = Server::new();
    let mut ca = a.conn();
    let mut cb = b.conn();
    acquire(&mut ca, "k", "tok", 30_000).unwrap();
    let fa = fence(&mut ca, "k", "tok").unwrap();
    let payload = dump(&mut ca, "k");
    let before = info(&mut ca, "k").unwrap();
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut cb, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_survived(&before, info(&mut cb, "k"), t0.elapsed());
    // RESTORE without REPLACE onto an existing key is refused.
    assert_err_starts(
        &cmd!(&mut cb, "RESTORE", "k", 0, payload.as_slice()),
        "BUSYKEY",
    );
    let fb = fence(&mut cb, "k", "tok").unwrap();
    assert!(fb > fa, "fence on the second server {fb} <= {fa}");
    let fresh = acquire(&mut cb, "fresh", "x", 1_000).unwrap();
    assert!(fresh > fb);
    // The restored lease still ends on time on the second server.
    assert_eq!(extend(&mut cb, "k", "tok", 200), 1);
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut cb, "k")));
}

#[test]
fn migrate_to_another_server() {
    let a = Server::new();
    let b = Server::new();
    let mut ca = a.conn();
    let mut cb = b.conn();
    acquire(&mut ca, "k", "tok", 30_000).unwrap();
    let fa = fence(&mut ca, "k", "tok").unwrap();
    let before = info(&mut ca, "k").unwrap();
    let t0 = Instant::now();
    let r = cmd!(&mut ca, "MIGRATE", "127.0.0.1", b.port, "k", 0, 5_000);
    assert_eq!(r, Ok(Value::Okay));
    assert!(!exists(&mut ca, "k"));
    assert_survived(&before, info(&mut cb, "k"), t0.elapsed());
    assert!(fence(&mut cb, "k", "tok").unwrap() > fa);
}

#[test]
fn restore_of_an_older_dump_does_not_reissue_fences() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 30_000).unwrap();
    let payload = dump(&mut c, "k");
    let mut max = 0;
    for _ in 0..3 {
        max = fence(&mut c, "k", "tok").unwrap();
    }
    assert_eq!(release(&mut c, "k", "tok"), 1);
    assert_eq!(
        cmd!(&mut c, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_eq!(
        info(&mut c, "k").unwrap().holder.as_deref(),
        Some(&b"tok"[..])
    );
    let f = fence(&mut c, "k", "tok").unwrap();
    assert!(
        f > max,
        "fence {f} after restoring an older dump, but {max} was issued"
    );
    // Same with REPLACE over a newer lock.
    let payload2 = dump(&mut c, "k");
    let newer = fence(&mut c, "k", "tok").unwrap();
    let r = cmd!(&mut c, "RESTORE", "k", 0, payload2.as_slice(), "REPLACE");
    assert_eq!(r, Ok(Value::Okay));
    let f2 = fence(&mut c, "k", "tok").unwrap();
    assert!(
        f2 > newer,
        "fence {f2} after RESTORE REPLACE, but {newer} was issued"
    );
}

/// `RESTORE` gives a lock the time it had left when it was dumped (encoding version 2), as
/// `MIGRATE` carries a key's remaining TTL: an old dump of a lease with 300 ms left holds the
/// key again for at most those 300 ms, then the lease ends on its own and the fences go on
/// above it. (Before version 2 the dumped deadline was absolute, and a dump whose lease had
/// since ended restored as ended.)
#[test]
fn restore_of_an_old_dump_holds_only_the_time_it_had_left() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "tok", 300).unwrap();
    let payload = dump(&mut c, "k");
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut c, "k")));
    let t0 = Instant::now();
    let r = cmd!(&mut c, "RESTORE", "k", 0, payload.as_slice());
    assert_eq!(r, Ok(Value::Okay));
    if let Some(i) = info(&mut c, "k") {
        assert_eq!(i.holder.as_deref(), Some(&b"tok"[..]));
        assert!(
            i.ttl <= 302,
            "restored with {} ms, dumped with 300 at most",
            i.ttl
        );
    }
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "k")),
        "restored lock is never removed"
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(1_300),
        "a restored lease with 300 ms left ended after {took:?}"
    );
    let n = acquire(&mut c, "k", "other", 1_000).expect("key must be free");
    assert!(n > f);
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

// ------------------------------------------------------------ corrupted RESTORE payloads

/// `body` (RDB type + value) + `version` + a correct CRC64.
fn with_crc(body: &[u8], version: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn corrupted_restore_payload_is_refused() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 30_000).unwrap();
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    let payload = dump(&mut c, "k");
    let mut flipped = payload.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x5a;
    assert_err_starts(&cmd!(&mut c, "RESTORE", "x", 0, flipped.as_slice()), "ERR");
    assert_err_starts(
        &cmd!(&mut c, "RESTORE", "x", 0, &payload[..payload.len() - 1]),
        "ERR",
    );
    assert_err_starts(
        &cmd!(&mut c, "RESTORE", "k", 0, flipped.as_slice(), "REPLACE"),
        "ERR",
    );
    assert!(!exists(&mut c, "x"));
    assert_eq!(cmd!(&mut c, "PING"), Ok(Value::SimpleString("PONG".into())));
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
}

#[test]
fn restore_payload_with_valid_checksum_but_bad_module_data() {
    let mut s = Server::new();
    let mut c = s.conn();
    let t_dump = Instant::now();
    acquire(&mut c, "src", "a-token-of-some-length", 1_000).unwrap();
    let payload = dump(&mut c, "src");
    assert_eq!(release(&mut c, "src", "a-token-of-some-length"), 1);
    let n = payload.len();
    assert!(n > 20, "payload {payload:?}");
    // Self-check of the CRC implementation against the server's own.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let crc = u64::from_le_bytes(payload[n - 8..].try_into().unwrap());
    assert_eq!(
        crc64(&payload[..n - 8]),
        crc,
        "crc64 implementation disagrees with DUMP"
    );
    let body = &payload[..n - 10];
    let version = &payload[n - 10..n - 8];
    // RDB_TYPE_MODULE_2, then the 64-bit module id (RDB_64BITLEN marker + 8 bytes BE).
    assert_eq!(
        body[0], 7,
        "DUMP of a lock should be a module value (RDB type 7)"
    );
    assert_eq!(body[1], 0x81, "module id length marker");
    let id = u64::from_be_bytes(body[2..10].try_into().unwrap());
    // The unmodified body with a recomputed CRC restores fine (the harness is right).
    assert_eq!(
        cmd!(
            &mut c,
            "RESTORE",
            "target",
            0,
            with_crc(body, version).as_slice()
        ),
        Ok(Value::Okay)
    );
    cmd!(&mut c, "DEL", "target").unwrap();

    let try_restore = |c: &mut redis::Connection, b: &[u8], what: &str| -> bool {
        let r = cmd!(c, "RESTORE", "target", 0, with_crc(b, version).as_slice());
        let ok = match &r {
            Ok(Value::Okay) => true,
            Err(e) => {
                assert!(e.starts_with("ERR"), "{what}: error without code: {e:?}");
                false
            }
            Ok(v) => panic!("{what}: RESTORE replied {v:?}"),
        };
        assert_eq!(
            cmd!(c, "PING"),
            Ok(Value::SimpleString("PONG".into())),
            "{what}: server not answering"
        );
        if ok {
            // Whatever was accepted must be a sane lock.
            if let Some(i) = info(c, "target") {
                if let Some(h) = &i.holder {
                    assert!(!h.is_empty() && h.len() <= 256, "{what}: token {h:?}");
                }
                assert!(i.fence > 0, "{what}: fence {}", i.fence);
            }
            cmd!(c, "DEL", "target").unwrap();
        }
        ok
    };

    // Unknown encoding versions are refused.
    for encver in [(id & 0x3ff) + 1, 1023] {
        let mut b = body.to_vec();
        b[2..10].copy_from_slice(&((id & !0x3ff) | encver).to_be_bytes());
        assert!(
            !try_restore(&mut c, &b, &format!("encver {encver}")),
            "RESTORE accepted encoding version {encver}"
        );
    }
    // Truncated module data: an error or a sane lock. (Not always an error: RESTORE reads
    // the object from the whole payload, so the 2-byte version and the CRC after a cut are
    // read as module data, and a cut before the last value can parse as a complete lock.)
    for len in 10..body.len() {
        try_restore(&mut c, &body[..len], &format!("truncated to {len}"));
    }
    // Every byte of the module data altered in a few ways: error or a sane lock.
    for i in 10..body.len() {
        for x in [0x00, 0xff, body[i] ^ 0x01, body[i] ^ 0x80, 0x81, 0xc3] {
            if x == body[i] {
                continue;
            }
            let mut b = body.to_vec();
            b[i] = x;
            try_restore(&mut c, &b, &format!("byte {i} := {x:#x}"));
        }
    }
    // Random garbage after the module id.
    let seed = 0x6a6b_2024_u64;
    println!("garbage seed {seed:#x}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for round in 0..300 {
        let mut b = body[..10].to_vec();
        let len = rng.gen_range(0..80);
        b.extend((0..len).map(|_| rng.gen::<u8>()));
        if rng.gen_bool(0.5) {
            b.push(0); // module EOF opcode
        }
        try_restore(&mut c, &b, &format!("garbage round {round}"));
    }
    s.assert_alive();
    // Failed loads must not leave anything behind that touches a later lock of that name:
    // hold "target" past the deadline of the dumped lease.
    assert!(acquire(&mut c, "target", "later", 60_000).is_some());
    sleep(Duration::from_millis(1_600).saturating_sub(t_dump.elapsed()));
    sleep(Duration::from_millis(300));
    let i = info(&mut c, "target").expect("later lock removed by a stale entry");
    assert_eq!(i.holder.as_deref(), Some(&b"later"[..]));
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    s.assert_alive();
}
