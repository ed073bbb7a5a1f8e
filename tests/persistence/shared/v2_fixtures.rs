//! The RDB file and the multi-part AOF written by the module before shared holds (lock
//! encoding version 2), committed under `tests/fixtures/`: what was recorded for each lock,
//! servers started on them, and the checks that every holder, fence and lease loaded, is
//! saved again in the new encoding, and that fences go on above the recorded ones.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::cmd;
use crate::common::dump::{decode_dump, dump};
use crate::common::holds::holders;
use crate::common::*;
use crate::shared::{acquire_shared, unix_ms, SLACK_MS};
use redis::Value;

/// What `tests/fixtures/make-v2-fixtures.sh` recorded for one lock (tests/fixtures/README.md).
struct FixLock {
    db: i64,
    key: &'static str,
    token: fn() -> String,
    /// Absolute deadline, Unix milliseconds, as saved.
    deadline_ms: i64,
    fence: i64,
}

fn tok_a() -> String {
    "holder-a".into()
}
fn tok_b() -> String {
    "6f1c2a9e-5b7d-4c3e-9a41-2d8f0b7e6c15".into()
}
/// 256 bytes, the longest token.
fn tok_c() -> String {
    format!("long-token-{:0245}", 7)
}
fn tok_db2() -> String {
    "holder-db2".into()
}
fn tok_short() -> String {
    "holder-short".into()
}
fn tok_new() -> String {
    "holder-new".into()
}
fn tok_aof_short() -> String {
    "holder-as".into()
}

/// `tests/fixtures/v2-exclusive.rdb` (Redis 7.0.15, module at commit c0cc4e9, saved at Unix
/// ms 1796154784568): locks whose leases run for years.
const RDB_LONG: [FixLock; 4] = [
    FixLock {
        db: 0,
        key: "fixture:long-a",
        token: tok_a,
        deadline_ms: 2_111_514_784_473,
        fence: 3_678_524_998_612_992,
    },
    FixLock {
        db: 0,
        key: "fixture:long-b",
        token: tok_b,
        deadline_ms: 1_953_834_784_483,
        fence: 3_678_524_998_619_136,
    },
    FixLock {
        db: 0,
        key: "fixture:long-c",
        token: tok_c,
        deadline_ms: 2_111_514_784_486,
        fence: 3_678_524_998_625_280,
    },
    FixLock {
        db: 2,
        key: "fixture:db2",
        token: tok_db2,
        deadline_ms: 2_111_514_784_489,
        fence: 3_678_524_998_631_424,
    },
];
/// In the RDB fixture, held with a 60 s lease that ended on 2026-12-01.
const RDB_SHORT: FixLock = FixLock {
    db: 0,
    key: "fixture:short",
    token: tok_short,
    deadline_ms: 1_796_154_844_493,
    fence: 3_678_524_998_639_616,
};
/// The last fence the fixture's server issued before `SAVE` (to `fixture:released`, which was
/// released: it is only in the saved high-water mark).
const RDB_MAX_FENCE: i64 = 3_678_524_998_651_904;

/// `tests/fixtures/v2-aof/` (the same server: a text base file from `BGREWRITEAOF` with
/// `aof-use-rdb-preamble no`, then commands appended to the incremental file).
const AOF_LONG: [FixLock; 5] = [
    FixLock {
        db: 0,
        key: "fixture:long-a",
        token: tok_a,
        deadline_ms: 2_111_514_784_473,
        fence: 3_678_524_998_612_992,
    },
    // Fenced again after the rewrite.
    FixLock {
        db: 0,
        key: "fixture:long-b",
        token: tok_b,
        deadline_ms: 1_953_834_784_483,
        fence: 3_678_524_999_260_160,
    },
    FixLock {
        db: 0,
        key: "fixture:long-c",
        token: tok_c,
        deadline_ms: 2_111_514_784_486,
        fence: 3_678_524_998_625_280,
    },
    // Extended (to five years) after the rewrite.
    FixLock {
        db: 2,
        key: "fixture:db2",
        token: tok_db2,
        deadline_ms: 1_953_834_784_804,
        fence: 3_678_524_998_631_424,
    },
    // Acquired after the rewrite.
    FixLock {
        db: 0,
        key: "fixture:aof-new",
        token: tok_new,
        deadline_ms: 2_111_514_784_809,
        fence: 3_678_524_999_286_784,
    },
];
/// Leases in the AOF fixture that have ended since (60 s each).
const AOF_ENDED: [FixLock; 2] = [
    RDB_SHORT,
    FixLock {
        db: 0,
        key: "fixture:aof-short",
        token: tok_aof_short,
        deadline_ms: 1_796_154_845_832,
        fence: 3_678_525_001_381_888,
    },
];
/// Keys of the AOF fixture that were acquired and then released (`LOCK.RELEASE`) or ended
/// (`DEL`) while its server ran.
const AOF_GONE: [&str; 3] = [
    "fixture:released",
    "fixture:aof-released",
    "fixture:aof-ended",
];
/// The last fence the AOF fixture's server issued.
const AOF_MAX_FENCE: i64 = 3_678_525_001_381_888;

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A server started on `rdb` as its `dump.rdb`.
fn server_on_rdb(rdb: &Path) -> Server {
    let mut s = Server::new();
    s.stop();
    fs::copy(rdb, s.dir.join("dump.rdb")).expect("copy RDB fixture");
    s.start_again();
    s
}

/// A server with `appendonly yes` started on `aof_dir` as its `appendonlydir`.
fn server_on_aof(aof_dir: &Path, opts: Opts) -> Server {
    let mut s = Server::start(opts.appendonly());
    s.stop();
    let dir = s.dir.join("appendonlydir");
    fs::remove_dir_all(&dir).expect("remove the fresh appendonlydir");
    copy_dir(aof_dir, &dir);
    s.start_again();
    s
}

/// Checks one fixture lock on a loaded server: exclusive, its holder and fence, and its lease
/// still running to the recorded deadline; also in the key's `DUMP`, which the new module
/// writes in its own encoding.
fn check_fixture_lock(s: &Server, l: &FixLock, f: &mut Findings) {
    let mut c = conn_in(s, l.db);
    let token = (l.token)();
    let t0 = unix_ms();
    let hs = holders(&mut c, l.key);
    let inf = info(&mut c, l.key);
    let t1 = unix_ms();
    let (least, most) = (l.deadline_ms - t1 - SLACK_MS, l.deadline_ms - t0 + SLACK_MS);
    match hs.as_deref() {
        Some([h]) => {
            f.check(h.token == token, || {
                format!("{}: holder {:?}", l.key, short(&h.token))
            });
            f.check(h.fence == l.fence, || {
                format!("{}: fence {} expected {}", l.key, h.fence, l.fence)
            });
            f.check(h.mode == "exclusive", || {
                format!("{}: mode {}", l.key, h.mode)
            });
            f.check(h.ttl >= least && h.ttl <= most, || {
                format!("{}: ttl {} expected in {least}..={most}", l.key, h.ttl)
            });
        }
        other => f.fail(format!("{} (db {}): LOCK.HOLDERS {other:?}", l.key, l.db)),
    }
    match inf {
        Some(i) => {
            f.check(
                i.holder.as_deref() == Some(token.as_bytes())
                    && i.fence == l.fence
                    && i.mode == "exclusive"
                    && i.holders == 1
                    && i.waiters == 0
                    && i.ttl >= least
                    && i.ttl <= most,
                || format!("{}: LOCK.INFO {i:?}", l.key),
            );
        }
        None => f.fail(format!("{} (db {}): LOCK.INFO null", l.key, l.db)),
    }
    let d = decode_dump(&dump(&mut c, l.key));
    f.check(
        d.encver == 4
            && !d.shared
            && d.last_fence == l.fence
            && d.holds.len() == 1
            && d.holds[0].token == token.as_bytes()
            && d.holds[0].fence == l.fence
            && (d.holds[0].deadline_ms - l.deadline_ms).abs() <= 2,
        || format!("{}: DUMP decodes as {d:?}", l.key),
    );
}

/// A lease that ended before the server started is not held, and its key goes soon.
fn check_fixture_ended(s: &Server, l: &FixLock, f: &mut Findings) {
    let mut c = conn_in(s, l.db);
    if let Some(hs) = holders(&mut c, l.key) {
        f.check(hs.is_empty(), || {
            format!("{}: ended lease still listed: {hs:?}", l.key)
        });
    }
    if let Some(i) = info(&mut c, l.key) {
        f.check(i.mode == "none" && i.holder.is_none(), || {
            format!("{}: ended lease reported held: {i:?}", l.key)
        });
    }
    f.check(
        wait_until(Duration::from_secs(3), || !exists(&mut c, l.key)),
        || format!("{}: key of an ended lease still there after 3 s", l.key),
    );
    f.check(release(&mut c, l.key, &(l.token)()) == 0, || {
        format!("{}: the ended holder could release", l.key)
    });
}

/// New fences on the fixture's keys and on fresh ones are above every fence it recorded.
fn check_fixture_fences_go_on(
    s: &Server,
    long: &[FixLock],
    free: &[&str],
    max: i64,
    f: &mut Findings,
) {
    let mut last = max;
    for l in long {
        let mut c = conn_in(s, l.db);
        match fence(&mut c, l.key, &(l.token)()) {
            Some(n) => {
                f.check(n > last, || {
                    format!("{}: LOCK.FENCE {n} not above {last}", l.key)
                });
                last = last.max(n);
            }
            None => f.fail(format!("{}: its holder cannot LOCK.FENCE", l.key)),
        }
        // Held exclusively: nobody else gets in, shared or not.
        let mut c = conn_in(s, l.db);
        f.check(acquire(&mut c, l.key, "intruder", 1_000).is_none(), || {
            format!("{}: another token acquired it", l.key)
        });
        f.check(
            acquire_shared(&mut c, l.key, "intruder", 1_000, None).is_none(),
            || format!("{}: another token acquired it shared", l.key),
        );
    }
    let mut c = s.conn();
    for k in free {
        match acquire_shared(&mut c, k, "fresh", 60_000, None) {
            Some(n) => {
                f.check(n > last, || {
                    format!("{k}: fresh fence {n} not above {last}")
                });
                last = last.max(n);
            }
            None => f.fail(format!("{k}: not free")),
        }
    }
}

fn short(t: &str) -> String {
    if t.len() > 24 {
        format!("{}…({} bytes)", &t[..16], t.len())
    } else {
        t.to_string()
    }
}

#[test]
fn v2_rdb_fixture_loads_with_holders_fences_and_leases() {
    let mut s = server_on_rdb(&fixtures().join("v2-exclusive.rdb"));
    let mut f = Findings::default();
    for l in &RDB_LONG {
        check_fixture_lock(&s, l, &mut f);
    }
    check_fixture_ended(&s, &RDB_SHORT, &mut f);
    let mut c = s.conn();
    f.check(!exists(&mut c, "fixture:released"), || {
        "fixture:released exists".into()
    });
    f.check(
        cmd!(&mut c, "GET", "fixture:plain") == Ok(Value::BulkString(b"plain value".to_vec())),
        || "fixture:plain lost".into(),
    );
    f.check(cmd!(&mut c, "DBSIZE") == Ok(Value::Int(4)), || {
        format!("db 0 size {:?}", cmd!(&mut c, "DBSIZE"))
    });
    // Written again by this module (encoding version 4, the layout of 3) and loaded again: the same.
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    drop(c);
    s.restart();
    for l in &RDB_LONG {
        check_fixture_lock(&s, l, &mut f);
    }
    check_fixture_fences_go_on(
        &s,
        &RDB_LONG,
        &["fixture:released", "fixture:short", "never-used"],
        RDB_MAX_FENCE,
        &mut f,
    );
    f.done("v2 RDB fixture");
}

#[test]
fn v2_aof_fixture_loads_and_is_rewritten() {
    let mut s = server_on_aof(&fixtures().join("v2-aof"), Opts::new().no_rdb_preamble());
    let mut f = Findings::default();
    for l in &AOF_LONG {
        check_fixture_lock(&s, l, &mut f);
    }
    for l in &AOF_ENDED {
        check_fixture_ended(&s, l, &mut f);
    }
    let mut c = s.conn();
    for k in AOF_GONE {
        f.check(!exists(&mut c, k), || format!("{k} exists"));
    }
    f.check(
        cmd!(&mut c, "GET", "fixture:plain") == Ok(Value::BulkString(b"plain value".to_vec())),
        || "fixture:plain lost".into(),
    );
    f.check(cmd!(&mut c, "DBSIZE") == Ok(Value::Int(5)), || {
        format!("db 0 size {:?}", cmd!(&mut c, "DBSIZE"))
    });
    // Rewritten by this module (text, no preamble) and replayed again: the same.
    assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
    wait_persistence_idle(&mut c);
    drop(c);
    s.restart();
    for l in &AOF_LONG {
        check_fixture_lock(&s, l, &mut f);
    }
    let mut free: Vec<&str> = AOF_GONE.to_vec();
    free.extend(AOF_ENDED.iter().map(|l| l.key));
    free.push("never-used");
    check_fixture_fences_go_on(&s, &AOF_LONG, &free, AOF_MAX_FENCE, &mut f);
    f.done("v2 AOF fixture");
}
