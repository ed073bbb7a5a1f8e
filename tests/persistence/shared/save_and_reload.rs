//! Shared holds saved and loaded back on the same server: `SAVE` + restart, the AOF with and
//! without the RDB preamble (replayed, then rewritten by `BGREWRITEAOF`), and `DEBUG
//! RELOAD`; with the restart harness and the `mix` key whose short lease ends while the
//! server is down.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::holds::holders;
use crate::common::*;
use crate::shared::acquire_shared;
use crate::shared::snapshots::{compare, snap, Snap};
use crate::shared::travelling_keys::{fences_go_on, populate, Populated, Went, KEYS};
use redis::{Connection, Value};

/// A key `mix` with shared holds of 1 s (m1) and 60 s (m2), granted at `t0`: once the server
/// has been down past 1.2 s, m1's lease ended while it was down.
fn add_mix(c: &mut Connection) -> (Instant, i64) {
    let t0 = Instant::now();
    acquire_shared(c, "mix", "m1", 1_000, None).expect("mix m1");
    let f2 = acquire_shared(c, "mix", "m2", 60_000, None).expect("mix m2");
    (t0, f2)
}

/// After a restart past m1's lease: only m2 holds `mix`, shared, and the key stays.
fn check_mix(c: &mut Connection, m2_fence: i64, what: &str, f: &mut Findings) {
    match holders(c, "mix").as_deref() {
        Some([h]) => f.check(
            h.token == "m2" && h.fence == m2_fence && h.mode == "shared" && h.ttl > 50_000,
            || format!("{what}: mix: {h:?}"),
        ),
        other => f.fail(format!(
            "{what}: mix after m1's lease ended while down: LOCK.HOLDERS {other:?}"
        )),
    }
    match info(c, "mix") {
        Some(i) => f.check(i.mode == "shared" && i.holders == 1, || {
            format!("{what}: mix: LOCK.INFO {i:?}")
        }),
        None => f.fail(format!("{what}: mix lost")),
    }
    f.check(release(c, "mix", "m1") == 0, || {
        format!("{what}: mix: m1 released a lease that had ended")
    });
}

fn down_past_mix(t0: Instant) {
    sleep(Duration::from_millis(1_300).saturating_sub(t0.elapsed()));
}

/// A server stopped and started again by [`restarted`].
struct Restarted {
    s: Server,
    p: Populated,
    c: Connection,
    /// The fence of the mix's long hold.
    m2: i64,
    /// The keys before the restart.
    before: Snap,
    /// The findings so far.
    f: Findings,
}

/// Populates `s` and adds the mix, runs `persist`, stops the server and starts it again once
/// the mix's leases are over, and compares the keys before and after under `what`.
fn restarted(mut s: Server, what: &str, persist: impl FnOnce(&mut Connection)) -> Restarted {
    let p = populate(&s);
    let mut c = s.conn();
    let (t_mix, m2) = add_mix(&mut c);
    persist(&mut c);
    let before = snap(&mut c, &KEYS);
    drop(c);
    s.stop();
    down_past_mix(t_mix);
    s.start_again();
    let mut c = s.conn();
    let after = snap(&mut c, &KEYS);
    let mut f = Findings::default();
    compare(&before, &after, what, &mut f);
    check_mix(&mut c, m2, what, &mut f);
    Restarted {
        s,
        p,
        c,
        m2,
        before,
        f,
    }
}

// ------------------------------------------------------------ round trips

#[test]
fn shared_holds_survive_rdb_save_and_restart() {
    let Restarted { s, p, mut f, .. } = restarted(Server::new(), "SAVE + restart", |c| {
        assert_eq!(cmd!(c, "SAVE"), Ok(Value::Okay));
    });
    fences_go_on(&s, &p, Went::Dataset, "SAVE + restart", &mut f);
    f.done("RDB");
}

/// The AOF with its RDB preamble: replayed as written (the incremental file's `LOCK.APPLY …
/// SHARED` and `LOCK.RELEASE`), then rewritten by `BGREWRITEAOF` (the preamble carries the
/// keys) and loaded again.
#[test]
fn shared_holds_survive_aof_with_rdb_preamble() {
    let Restarted {
        mut s,
        p,
        mut c,
        m2,
        mut f,
        ..
    } = restarted(
        Server::start(Opts::new().appendonly()),
        "AOF replay",
        |_| {},
    );

    assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
    wait_persistence_idle(&mut c);
    assert!(
        is_rdb(&aof::latest_base(&s)),
        "the base file has an RDB preamble"
    );
    let before = snap(&mut c, &KEYS);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after = snap(&mut c, &KEYS);
    compare(&before, &after, "BGREWRITEAOF (preamble) + restart", &mut f);
    check_mix(&mut c, m2, "BGREWRITEAOF (preamble) + restart", &mut f);
    fences_go_on(&s, &p, Went::Dataset, "AOF with preamble", &mut f);
    f.done("AOF with RDB preamble");
}

/// Whether a file is an RDB file (Valkey 9 writes its own magic).
fn is_rdb(b: &[u8]) -> bool {
    b.starts_with(b"REDIS") || b.starts_with(b"VALKEY")
}

/// The AOF without the RDB preamble: replayed as written, then rewritten as text (one
/// `LOCK.APPLY key token deadline fence [SHARED]` per hold, in grant order), changed after
/// the rewrite (the incremental file on top of the text base), and loaded again.
#[test]
fn shared_holds_survive_aof_without_rdb_preamble() {
    let Restarted {
        mut s,
        p,
        mut c,
        m2,
        before,
        mut f,
    } = restarted(
        Server::start(Opts::new().appendonly().no_rdb_preamble()),
        "AOF replay",
        |_| {},
    );

    assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
    wait_persistence_idle(&mut c);
    assert_eq!(
        info_field(&mut c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    let base = aof::latest_base(&s);
    assert!(!is_rdb(&base), "text base file expected");
    let applies: Vec<Vec<String>> = aof::text_commands(&base)
        .into_iter()
        .filter(|c| c[0].eq_ignore_ascii_case("LOCK.APPLY"))
        .collect();
    let of = |key: &str| -> Vec<String> {
        applies
            .iter()
            .filter(|c| c[1] == key)
            .map(|c| [&c[2..3], &c[5..]].concat().join(" "))
            .collect()
    };
    // `rw`'s last fence went with a released hold: its first hold carries it (`LAST`).
    let rw_fence = before.keys["rw"].1.as_ref().map_or(0, |i| i.fence);
    let rw_last = format!("s1 SHARED LAST {rw_fence}");
    f.check(
        of("rw") == [rw_last.as_str(), "s2 SHARED", "s3 SHARED"]
            && of("ex") == ["e1"]
            && of("sem") == ["p1 SHARED", "p2 SHARED"]
            && of("dg") == ["d1 SHARED"]
            && of("mix") == ["m2 SHARED"]
            && of("gone").is_empty(),
        || format!("rewritten AOF: LOCK.APPLY commands {applies:?}"),
    );
    // The text base alone (with the high-water mark the rewrite appends): the same, down to
    // `rw`'s last fence, which no live hold has (s4 was fenced, then released).
    let before = snap(&mut c, &KEYS);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after = snap(&mut c, &KEYS);
    compare(&before, &after, "BGREWRITEAOF (text) + restart", &mut f);
    // After the rewrite, changes go to the incremental file on top of the text base.
    let mut issued = p.issued.clone();
    assert_eq!(release(&mut c, "rw", "s2"), 1);
    issued.push((
        "rw",
        acquire_shared(&mut c, "rw", "s6", 20_000, None).unwrap(),
    ));
    issued.push(("rw", fence(&mut c, "rw", "s1").unwrap()));
    assert_eq!(release(&mut c, "sem", "p1"), 1);
    let before = snap(&mut c, &KEYS);
    let rw = &before.keys["rw"].0;
    let tokens: Vec<&str> = rw.iter().flatten().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens, ["s1", "s3", "s6"], "{rw:?}");
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after = snap(&mut c, &KEYS);
    compare(
        &before,
        &after,
        "BGREWRITEAOF (text) + changes + restart",
        &mut f,
    );
    check_mix(&mut c, m2, "BGREWRITEAOF (text) + restart", &mut f);
    let p = Populated {
        issued,
        holds: vec![
            ("rw", "s1"),
            ("rw", "s3"),
            ("rw", "s6"),
            ("ex", "e1"),
            ("dg", "d1"),
        ],
        waiters: Vec::new(),
    };
    let mut c2 = s.conn();
    // The semaphore has one holder now (p2): one more with LIMIT 2 fits.
    let n = acquire_shared(&mut c2, "sem", "p7", 10_000, Some(2));
    f.check(n.is_some_and(|n| n > p.max()), || {
        format!("sem: p7 LIMIT 2 beside p2 got {n:?}")
    });
    fences_go_on(&s, &p, Went::Dataset, "AOF without preamble", &mut f);
    f.done("AOF without RDB preamble");
}

#[test]
fn shared_holds_survive_debug_reload() {
    let s = Server::new();
    let p = populate(&s);
    let mut c = s.conn();
    let before = snap(&mut c, &KEYS);
    assert_eq!(cmd!(&mut c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    let after = snap(&mut c, &KEYS);
    let mut f = Findings::default();
    compare(&before, &after, "DEBUG RELOAD", &mut f);
    // docs/operations.md, "The server around a lock": waiters of a reloaded lock are answered null.
    for (i, w) in p.waiters.iter().enumerate() {
        let r = w.reply_within(Duration::from_secs(2)).map(|(r, _)| r);
        f.check(r == Some(Ok(Value::Nil)), || {
            format!("DEBUG RELOAD: waiter {i} on sem got {r:?}")
        });
    }
    fences_go_on(&s, &p, Went::Dataset, "DEBUG RELOAD", &mut f);
    f.done("DEBUG RELOAD");
}
