//! Shared holds survive every way a dataset is saved, loaded, moved and replicated (issue 13,
//! "Persistence"; README, "Persistence and replication details"):
//!
//! - the RDB file and the multi-part AOF written by the module before shared holds (lock
//!   encoding version 2, `LOCK.APPLY` without `SHARED`), committed under `tests/fixtures/`
//!   (how they were made: `tests/fixtures/README.md`), still load, with every holder, fence and
//!   lease;
//! - keys with several shared holders, an exclusive key, a `LIMIT` semaphore with waiters, a
//!   downgraded key and a key whose holds were all released go through `SAVE` + restart, the
//!   AOF with and without the RDB preamble (replayed, and rewritten by `BGREWRITEAOF`),
//!   `DEBUG RELOAD`, `DUMP`/`RESTORE` and `MIGRATE` to another server, a replica's full sync,
//!   live replication of each kind of change, and promotion of the replica;
//! - every time, `LOCK.HOLDERS` (tokens, fences, mode, grant order) is the same, each hold's
//!   remaining lease is the one it had (within [`SLACK_MS`] of the time measured between the
//!   readings), `LOCK.INFO` agrees (its fence too: the key's last fence, which may be above
//!   every live hold's), waiters are not carried, and every fence issued afterwards is above
//!   every fence issued before (on that server; for a key moved alone, above that key's).
//!
//! Where two servers must hold the same state (master and replica), the `DUMP` of each key is
//! also decoded and compared hold by hold: the saved layout of encoding version 3 is described
//! at the top of `src/persistence.rs` (save time, mode, the key's last fence, then each hold's
//! token, absolute deadline and fence, in grant order). That is what shows that a shared
//! hold's lease end reached the replica: its reads hide an ended hold by its own clock either
//! way.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::mpsc;
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::holds::{holders, Hold};
use common::*;
use redis::{Connection, Value};

/// How far a remaining lease may be from the one expected, beyond the time measured between
/// the two readings: deadlines travel as Unix milliseconds rounded up (up to 2 ms per move),
/// and each server derives its wall clock from its monotonic one.
const SLACK_MS: i64 = 25;
/// How late a lease end may be observed (loaded machines), and how early (none, beyond the
/// conversion between the wall and the monotonic clock).
const LATE: Duration = Duration::from_millis(500);
const EARLY: Duration = Duration::from_millis(10);

// ------------------------------------------------------------ the fixtures (tests/fixtures/)

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

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
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
        d.encver == 3
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
    // Written again by this module (encoding version 3) and loaded again: the same.
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

// ------------------------------------------------------------ LOCK.HOLDERS and snapshots

fn short(t: &str) -> String {
    if t.len() > 24 {
        format!("{}…({} bytes)", &t[..16], t.len())
    } else {
        t.to_string()
    }
}

/// `LOCK.ACQUIRE key token ttl SHARED [LIMIT n]`: `Some(fence)` or `None`.
fn acquire_shared(
    c: &mut Connection,
    key: &str,
    token: &str,
    ttl: u64,
    limit: Option<u64>,
) -> Option<i64> {
    let r = match limit {
        Some(n) => cmd!(c, "LOCK.ACQUIRE", key, token, ttl, "SHARED", "LIMIT", n),
        None => cmd!(c, "LOCK.ACQUIRE", key, token, ttl, "SHARED"),
    };
    match r {
        Ok(Value::Int(f)) => Some(f),
        Ok(Value::Nil) => None,
        other => panic!("LOCK.ACQUIRE {key} {token} {ttl} SHARED {limit:?}: {other:?}"),
    }
}

/// The state of some keys (db 0), read between `t0` and `t1`.
struct Snap {
    t0: Instant,
    t1: Instant,
    keys: BTreeMap<String, (Option<Vec<Hold>>, Option<LockInfo>)>,
}

fn snap(c: &mut Connection, keys: &[&str]) -> Snap {
    let t0 = Instant::now();
    let keys = keys
        .iter()
        .map(|k| (k.to_string(), (holders(c, k), info(c, k))))
        .collect();
    Snap {
        t0,
        t1: Instant::now(),
        keys,
    }
}

/// Whether a remaining lease read in `after` is the one read in `before`, counted down by the
/// time between the readings.
/// A lease moved alone (`DUMP`/`RESTORE`, `MIGRATE`) does not count down in transit: it may
/// be up to `in_transit` longer.
fn ttl_ok(before: i64, after: i64, b: &Snap, a: &Snap, in_transit: Duration) -> bool {
    let most_elapsed = a.t1.duration_since(b.t0).as_millis() as i64;
    let least_elapsed = a.t0.saturating_duration_since(b.t1).as_millis() as i64;
    let transit = in_transit.as_millis() as i64 + 1;
    after >= before - most_elapsed - SLACK_MS
        && after <= before - least_elapsed + transit + SLACK_MS
}

/// `after` holds what `before` held: the same holds in the same order (token, fence, mode),
/// each lease counted down by the time in between; `LOCK.INFO` agrees, without waiters (they
/// are never carried).
fn compare(before: &Snap, after: &Snap, what: &str, f: &mut Findings) {
    compare_moved(before, after, Duration::ZERO, what, f);
}

/// [`compare`] for keys moved alone, each within `in_transit` from its `DUMP` to its `RESTORE`.
fn compare_moved(before: &Snap, after: &Snap, in_transit: Duration, what: &str, f: &mut Findings) {
    for (key, (bh, bi)) in &before.keys {
        let (ah, ai) = &after.keys[key];
        match (bh, ah) {
            (None, None) => {}
            (Some(bh), Some(ah)) => {
                let same = bh.len() == ah.len()
                    && bh.iter().zip(ah).all(|(b, a)| {
                        a.token == b.token
                            && a.fence == b.fence
                            && a.mode == b.mode
                            && ttl_ok(b.ttl, a.ttl, before, after, in_transit)
                    });
                f.check(same, || {
                    format!(
                        "{what}: {key}: LOCK.HOLDERS {bh:?} became {ah:?} ({}..{} ms later)",
                        after.t0.saturating_duration_since(before.t1).as_millis(),
                        after.t1.duration_since(before.t0).as_millis()
                    )
                });
            }
            _ => f.fail(format!("{what}: {key}: LOCK.HOLDERS {bh:?} became {ah:?}")),
        }
        match (bi, ai) {
            (None, None) => {}
            (Some(b), Some(a)) => {
                f.check(
                    a.holder == b.holder
                        && a.fence == b.fence
                        && a.mode == b.mode
                        && a.holders == b.holders
                        && a.waiters == 0
                        && ttl_ok(b.ttl, a.ttl, before, after, in_transit),
                    || format!("{what}: {key}: LOCK.INFO {b:?} became {a:?}"),
                );
            }
            _ => f.fail(format!("{what}: {key}: LOCK.INFO {bi:?} became {ai:?}")),
        }
    }
}

// ------------------------------------------------------------ DUMP payloads, decoded

#[derive(Debug)]
struct DumpedHold {
    token: Vec<u8>,
    deadline_ms: i64,
    fence: i64,
}

/// A lock's `DUMP` payload, decoded (encoding version 3: `src/persistence.rs`).
#[derive(Debug)]
struct Dumped {
    encver: u64,
    saved_at: i64,
    shared: bool,
    last_fence: i64,
    holds: Vec<DumpedHold>,
}

/// A length as the RDB format writes it, from `p[*at..]`.
fn rdb_len(p: &[u8], at: &mut usize) -> u64 {
    let b = p[*at];
    *at += 1;
    match b >> 6 {
        0 => u64::from(b & 0x3f),
        1 => {
            let v = (u64::from(b & 0x3f) << 8) | u64::from(p[*at]);
            *at += 1;
            v
        }
        _ if b == 0x80 => {
            let v = u32::from_be_bytes(p[*at..*at + 4].try_into().unwrap());
            *at += 4;
            u64::from(v)
        }
        _ if b == 0x81 => {
            let v = u64::from_be_bytes(p[*at..*at + 8].try_into().unwrap());
            *at += 8;
            v
        }
        _ => panic!("unexpected RDB length byte {b:#x} at {}", *at - 1),
    }
}

/// A string as `RedisModule_SaveStringBuffer` writes it: raw, as an integer when it looks
/// like one, or compressed.
fn rdb_string(p: &[u8], at: &mut usize) -> Vec<u8> {
    let b = p[*at];
    if b >> 6 == 3 {
        *at += 1;
        let v: i64 = match b & 0x3f {
            0 => {
                *at += 1;
                i64::from(p[*at - 1] as i8)
            }
            1 => {
                *at += 2;
                i64::from(i16::from_le_bytes(p[*at - 2..*at].try_into().unwrap()))
            }
            2 => {
                *at += 4;
                i64::from(i32::from_le_bytes(p[*at - 4..*at].try_into().unwrap()))
            }
            3 => {
                let clen = rdb_len(p, at) as usize;
                let len = rdb_len(p, at) as usize;
                *at += clen;
                return lzf_decompress(&p[*at - clen..*at], len);
            }
            e => panic!("RDB string encoding {e} at {}", *at - 1),
        };
        return v.to_string().into_bytes();
    }
    let n = rdb_len(p, at) as usize;
    *at += n;
    p[*at - n..*at].to_vec()
}

/// LZF, as the RDB format compresses strings longer than 20 bytes (the 256-byte token).
fn lzf_decompress(mut inp: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while let Some((&ctrl, rest)) = inp.split_first() {
        inp = rest;
        if ctrl < 32 {
            let n = usize::from(ctrl) + 1;
            out.extend_from_slice(&inp[..n]);
            inp = &inp[n..];
        } else {
            let mut n = usize::from(ctrl >> 5);
            if n == 7 {
                n += usize::from(inp[0]);
                inp = &inp[1..];
            }
            let back = (usize::from(ctrl & 0x1f) << 8) + usize::from(inp[0]) + 1;
            inp = &inp[1..];
            let from = out.len() - back;
            for i in 0..n + 2 {
                out.push(out[from + i]);
            }
        }
    }
    assert_eq!(out.len(), len, "LZF string length");
    out
}

/// One value a module saved: its opcode (1 signed, 2 unsigned, 5 string) and the value.
enum Item {
    Int(i64),
    Str(Vec<u8>),
}

fn decode_dump(p: &[u8]) -> Dumped {
    assert_eq!(
        p[0], 7,
        "DUMP of a lock is a module value (RDB type 7): {p:?}"
    );
    let mut at = 1;
    let id = rdb_len(p, &mut at);
    let mut items = Vec::new();
    loop {
        match rdb_len(p, &mut at) {
            0 => break,
            1 | 2 => items.push(Item::Int(rdb_len(p, &mut at) as i64)),
            5 => items.push(Item::Str(rdb_string(p, &mut at))),
            op => panic!("unexpected module opcode {op} in {p:?}"),
        }
    }
    assert_eq!(p.len() - at, 10, "after the value: RDB version and CRC");
    let int = |i: usize| match items.get(i) {
        Some(Item::Int(v)) => *v,
        _ => panic!("DUMP item {i}: not an integer in {p:?}"),
    };
    let count = int(3) as usize;
    assert_eq!(items.len(), 4 + 3 * count, "DUMP items: {p:?}");
    let holds = (0..count)
        .map(|h| {
            let base = 4 + 3 * h;
            DumpedHold {
                token: match &items[base] {
                    Item::Str(s) => s.clone(),
                    Item::Int(_) => panic!("hold {h}: token not a string"),
                },
                deadline_ms: int(base + 1),
                fence: int(base + 2),
            }
        })
        .collect();
    Dumped {
        encver: id & 0x3ff,
        saved_at: int(0),
        shared: int(1) == 1,
        last_fence: int(2),
        holds,
    }
}

fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    match cmd!(c, "DUMP", key) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// The same state saved on two servers: mode, last fence, holds in order with the same
/// tokens and fences, and deadlines within 5 ms.
fn compare_dumps(m: &mut Connection, r: &mut Connection, key: &str, what: &str, f: &mut Findings) {
    let (dm, dr) = match (exists(m, key), exists(r, key)) {
        (false, false) => return,
        (true, true) => (decode_dump(&dump(m, key)), decode_dump(&dump(r, key))),
        (a, b) => {
            f.fail(format!("{what}: {key}: exists on master {a}, replica {b}"));
            return;
        }
    };
    let same = dm.shared == dr.shared
        && dm.last_fence == dr.last_fence
        && dm.holds.len() == dr.holds.len()
        && dm.holds.iter().zip(&dr.holds).all(|(a, b)| {
            a.token == b.token && a.fence == b.fence && (a.deadline_ms - b.deadline_ms).abs() <= 5
        });
    f.check(same, || {
        format!("{what}: {key}: saved state differs\n    master  {dm:?}\n    replica {dr:?}")
    });
}

// ------------------------------------------------------------ the keys that travel

/// A client blocked in `LOCK.ACQUIRE … WAIT`, on its own connection and thread.
struct Blocked {
    rx: mpsc::Receiver<Result<Value, String>>,
}

impl Blocked {
    /// Sends `args` and waits until the server counts one more waiter on `key`.
    fn join(s: &Server, key: &str, args: &[&str]) -> Blocked {
        let mut probe = s.conn();
        let before = info(&mut probe, key).map_or(0, |i| i.waiters);
        let mut c = s.conn();
        let (tx, rx) = mpsc::channel();
        let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        thread::spawn(move || {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            for a in &owned {
                cmd.arg(a);
            }
            let _ = tx.send(cmd.query::<Value>(&mut c).map_err(|e| e.to_string()));
        });
        assert!(
            wait_until(Duration::from_secs(5), || {
                info(&mut probe, key).map_or(0, |i| i.waiters) == before + 1
            }),
            "{args:?} did not queue"
        );
        Blocked { rx }
    }

    fn reply_within(&self, d: Duration) -> Option<Result<Value, String>> {
        self.rx.recv_timeout(d).ok()
    }
}

/// Keys [`populate`] leaves behind (`gone` has no key any more).
const KEYS: [&str; 5] = ["rw", "ex", "sem", "dg", "gone"];

/// What [`populate`] did.
struct Populated {
    /// Every fence the server issued, with its key.
    issued: Vec<(&'static str, i64)>,
    /// (key, token) of each hold left.
    holds: Vec<(&'static str, &'static str)>,
    /// Waiters queued on `sem` (a shared one with `LIMIT 2`, then an exclusive one).
    waiters: Vec<Blocked>,
}

impl Populated {
    fn max(&self) -> i64 {
        self.issued.iter().map(|(_, f)| *f).max().unwrap()
    }

    /// The largest fence issued for `key` (0 if none).
    fn max_of(&self, key: &str) -> i64 {
        self.issued
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, f)| *f)
            .max()
            .unwrap_or(0)
    }
}

/// Where the keys went: the whole dataset (with the server's fence high-water mark: a
/// restart, a reload, a replica), or the keys alone to another server (`RESTORE`, `MIGRATE`),
/// where each key's fences go on above its own (README, "How fences are made": moves).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Went {
    Dataset,
    Moved,
}

/// - `rw`: shared holds s1, s2, s3 with leases of 60, 45 and 30 s, granted in that order;
///   s2 fenced again (its fence is then above s3's); s4 joined, was fenced and released (the
///   key's last fence is above every live hold's);
/// - `ex`: exclusive, fenced again;
/// - `sem`: a `LIMIT 2` semaphore, full (p1, p2), with a shared and an exclusive waiter;
/// - `dg`: taken exclusively and downgraded to shared in place;
/// - `gone`: two shared holds, fenced, both released (no key, only its fences).
fn populate(s: &Server) -> Populated {
    let mut c = s.conn();
    let mut issued = Vec::new();
    // `what` begins with the key.
    let mut got = |f: Option<i64>, what: &'static str| -> i64 {
        let f = f.unwrap_or_else(|| panic!("{what}: not granted"));
        issued.push((what.split(' ').next().unwrap(), f));
        f
    };
    got(acquire_shared(&mut c, "rw", "s1", 60_000, None), "rw s1");
    got(acquire_shared(&mut c, "rw", "s2", 45_000, None), "rw s2");
    got(acquire_shared(&mut c, "rw", "s3", 30_000, None), "rw s3");
    got(fence(&mut c, "rw", "s2"), "rw s2 fence");
    got(acquire_shared(&mut c, "rw", "s4", 50_000, None), "rw s4");
    got(fence(&mut c, "rw", "s4"), "rw s4 fence");
    assert_eq!(release(&mut c, "rw", "s4"), 1);

    got(acquire(&mut c, "ex", "e1", 50_000), "ex e1");
    got(fence(&mut c, "ex", "e1"), "ex e1 fence");

    got(
        acquire_shared(&mut c, "sem", "p1", 40_000, Some(2)),
        "sem p1",
    );
    got(
        acquire_shared(&mut c, "sem", "p2", 35_000, Some(2)),
        "sem p2",
    );
    assert_eq!(
        acquire_shared(&mut c, "sem", "p3", 35_000, Some(2)),
        None,
        "LIMIT 2 with 2 holders"
    );
    let waiters = vec![
        Blocked::join(
            s,
            "sem",
            &["sem", "q1", "40000", "SHARED", "LIMIT", "2", "WAIT", "0"],
        ),
        Blocked::join(s, "sem", &["sem", "q2", "40000", "WAIT", "0"]),
    ];

    let d = got(acquire(&mut c, "dg", "d1", 20_000), "dg d1");
    assert_eq!(
        acquire_shared(&mut c, "dg", "d1", 55_000, None),
        Some(d),
        "downgrade keeps the fence"
    );

    got(
        acquire_shared(&mut c, "gone", "g1", 60_000, None),
        "gone g1",
    );
    got(
        acquire_shared(&mut c, "gone", "g2", 60_000, None),
        "gone g2",
    );
    got(fence(&mut c, "gone", "g1"), "gone g1 fence");
    assert_eq!(release(&mut c, "gone", "g1"), 1);
    assert_eq!(release(&mut c, "gone", "g2"), 1);
    assert!(!exists(&mut c, "gone"));

    // What the interface promises for these keys, before anything travels.
    let rw = holders(&mut c, "rw").expect("rw");
    let tokens: Vec<&str> = rw.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens, ["s1", "s2", "s3"], "grant order: {rw:?}");
    assert!(rw.iter().all(|h| h.mode == "shared"), "{rw:?}");
    assert!(
        rw[1].fence > rw[2].fence,
        "s2 was fenced after s3 joined: {rw:?}"
    );
    let i = info(&mut c, "rw").unwrap();
    assert!(
        i.fence > rw.iter().map(|h| h.fence).max().unwrap(),
        "rw's last fence (s4's) is above every live hold's: {i:?} {rw:?}"
    );
    let i = info(&mut c, "sem").unwrap();
    assert_eq!((i.mode.as_str(), i.holders, i.waiters), ("shared", 2, 2));
    let i = info(&mut c, "dg").unwrap();
    assert_eq!((i.mode.as_str(), i.holders, i.fence), ("shared", 1, d));
    Populated {
        issued,
        holds: vec![
            ("rw", "s1"),
            ("rw", "s2"),
            ("rw", "s3"),
            ("ex", "e1"),
            ("sem", "p1"),
            ("sem", "p2"),
            ("dg", "d1"),
        ],
        waiters,
    }
}

/// After the keys travelled to `s`: the kinds still exclude each other, the semaphore is
/// still full, and every new fence (a hold's `LOCK.FENCE`, a new shared hold, a fresh key) is
/// above every fence issued before: before on that server, or (keys moved alone) for that key.
fn fences_go_on(s: &Server, p: &Populated, went: Went, what: &str, f: &mut Findings) {
    let mut c = s.conn();
    let bound = |key: &str| match went {
        Went::Dataset => p.max(),
        // `gone` did not move (no key): it is a fresh key on the other server.
        Went::Moved if key == "gone" => 0,
        Went::Moved => p.max_of(key),
    };
    f.check(acquire(&mut c, "rw", "x", 1_000).is_none(), || {
        format!("{what}: exclusive acquire of a shared key granted")
    });
    f.check(
        acquire_shared(&mut c, "ex", "x", 1_000, None).is_none(),
        || format!("{what}: shared acquire of an exclusive key granted"),
    );
    f.check(
        acquire_shared(&mut c, "sem", "x", 1_000, Some(2)).is_none(),
        || format!("{what}: LIMIT 2 granted to a third holder"),
    );
    // Also each above the one before: one server's fences only go up.
    let mut last = 0;
    for (key, token) in &p.holds {
        match fence(&mut c, key, token) {
            Some(n) => {
                let max = bound(key);
                f.check(n > last && n > max, || {
                    format!(
                        "{what}: {key} {token}: LOCK.FENCE {n}, the one before {last}, max before {max}"
                    )
                });
                last = last.max(n);
            }
            None => f.fail(format!("{what}: {key} {token}: cannot LOCK.FENCE")),
        }
    }
    for (key, token) in [
        ("rw", "s5"),
        ("dg", "d2"),
        ("gone", "g3"),
        ("never-used", "n"),
    ] {
        match acquire_shared(&mut c, key, token, 10_000, None) {
            Some(n) => {
                let max = bound(key);
                f.check(n > last && n > max, || {
                    format!(
                        "{what}: {key} {token}: new shared hold's fence {n}, the one before \
                         {last}, max before {max}"
                    )
                });
                last = last.max(n);
            }
            None => f.fail(format!("{what}: {key} {token}: shared acquire refused")),
        }
    }
}

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
    // README, "The server around a lock": waiters of a reloaded lock are answered null.
    for (i, w) in p.waiters.iter().enumerate() {
        let r = w.reply_within(Duration::from_secs(2));
        f.check(r == Some(Ok(Value::Nil)), || {
            format!("DEBUG RELOAD: waiter {i} on sem got {r:?}")
        });
    }
    fences_go_on(&s, &p, Went::Dataset, "DEBUG RELOAD", &mut f);
    f.done("DEBUG RELOAD");
}

/// `DUMP`/`RESTORE` to another server carries each hold with the lease it had left, its
/// fence, its place in the order and the key's mode and last fence; so does `MIGRATE`; the
/// other server's fences go on above them, and a restored shared lease ends there on its own.
#[test]
fn dump_restore_and_migrate_carry_every_hold() {
    let a = Server::new();
    let b = Server::new();
    let p = populate(&a);
    let mut ca = a.conn();
    let mut cb = b.conn();
    let before = snap(&mut ca, &KEYS);
    let mut in_transit = Duration::ZERO;
    for k in KEYS {
        if exists(&mut ca, k) {
            let t = Instant::now();
            let payload = dump(&mut ca, k);
            assert_eq!(
                cmd!(&mut cb, "RESTORE", k, 0, payload.as_slice()),
                Ok(Value::Okay),
                "RESTORE {k}"
            );
            in_transit = in_transit.max(t.elapsed());
        }
    }
    let after = snap(&mut cb, &KEYS);
    let mut f = Findings::default();
    compare_moved(&before, &after, in_transit, "DUMP/RESTORE", &mut f);
    fences_go_on(&b, &p, Went::Moved, "DUMP/RESTORE", &mut f);

    // A restored shared hold's lease ends on the other server on its own; the others stay.
    let mut cb = b.conn();
    assert_eq!(extend(&mut cb, "rw", "s3", 300), 1);
    let t0 = Instant::now();
    let ended = wait_until(Duration::from_secs(3), || {
        holders(&mut cb, "rw").is_some_and(|hs| hs.iter().all(|h| h.token != "s3"))
    });
    f.check(
        ended && t0.elapsed() < Duration::from_millis(300) + LATE,
        || {
            format!(
                "restored s3: lease of 300 ms ended {ended} after {:?}",
                t0.elapsed()
            )
        },
    );
    let left: Vec<String> = holders(&mut cb, "rw")
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.token)
        .collect();
    f.check(left == ["s1", "s2", "s5"], || {
        format!("rw on the other server after s3's lease end: {left:?}")
    });

    // MIGRATE to a third server: the same.
    let m = Server::new();
    let mut ca = a.conn();
    let before = snap(&mut ca, &["rw", "dg"]);
    let mut in_transit = Duration::ZERO;
    for k in ["rw", "dg"] {
        let t = Instant::now();
        assert_eq!(
            cmd!(&mut ca, "MIGRATE", "127.0.0.1", m.port, k, 0, 5_000),
            Ok(Value::Okay),
            "MIGRATE {k}"
        );
        in_transit = in_transit.max(t.elapsed());
    }
    let mut cm = m.conn();
    let after = snap(&mut cm, &["rw", "dg"]);
    compare_moved(&before, &after, in_transit, "MIGRATE", &mut f);
    f.check(!exists(&mut ca, "rw") && !exists(&mut ca, "dg"), || {
        "MIGRATE left the keys on the source".into()
    });
    let n = fence(&mut cm, "rw", "s1");
    f.check(n.is_some_and(|n| n > p.max_of("rw")), || {
        format!(
            "MIGRATE: LOCK.FENCE rw s1 on the target {n:?}, max before {}",
            p.max_of("rw")
        )
    });
    f.done("DUMP/RESTORE and MIGRATE");
}

/// Waits until the replica has processed everything the master sent.
fn sync(master: &mut Connection) {
    assert_eq!(
        wait_replicas(master, 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack"
    );
}

/// Master and replica hold the same (snapshots and decoded `DUMP`s).
fn mirrored(m: &Server, r: &Server, keys: &[&str], what: &str, f: &mut Findings) {
    let mut mc = m.conn();
    let mut rc = r.conn();
    sync(&mut mc);
    let a = snap(&mut mc, keys);
    let b = snap(&mut rc, keys);
    compare(&a, &b, what, f);
    for k in keys {
        compare_dumps(&mut mc, &mut rc, k, what, f);
    }
}

#[test]
fn full_sync_carries_every_hold() {
    let m = Server::new();
    let p = populate(&m);
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut f = Findings::default();
    mirrored(&m, &r, &KEYS, "full sync", &mut f);
    // The waiters stay on the master only.
    let mut mc = m.conn();
    f.check(info(&mut mc, "sem").is_some_and(|i| i.waiters == 2), || {
        "master lost its waiters".into()
    });
    // The stream goes on from there.
    assert_eq!(release(&mut mc, "rw", "s2"), 1);
    mirrored(&m, &r, &KEYS, "full sync, then a release", &mut f);
    // Promoted, the replica issues fences above everything the master did.
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let p = Populated {
        holds: p.holds.into_iter().filter(|h| *h != ("rw", "s2")).collect(),
        ..p
    };
    fences_go_on(&r, &p, Went::Dataset, "full sync + promotion", &mut f);
    f.done("full sync");
}

/// Each change to shared holds reaches the replica as it happens: `LOCK.HOLDERS`,
/// `LOCK.INFO` and the decoded `DUMP` agree on master and replica after every step.
#[test]
fn live_replication_mirrors_each_change() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut f = Findings::default();
    let keys = ["L", "D", "G"];
    let step = |what: &str, f: &mut Findings| mirrored(&m, &r, &keys, what, f);

    // Acquire shared, then others join.
    acquire_shared(&mut mc, "L", "s1", 30_000, None).unwrap();
    step("acquire shared", &mut f);
    acquire_shared(&mut mc, "L", "s2", 20_000, None).unwrap();
    let t3 = Instant::now();
    acquire_shared(&mut mc, "L", "s3", 1_000, None).unwrap();
    let replied3 = Instant::now();
    step("two join", &mut f);
    // A shared holder renews its lease: same fence.
    let f1 = holders(&mut mc, "L").unwrap()[0].fence;
    assert_eq!(acquire_shared(&mut mc, "L", "s1", 40_000, None), Some(f1));
    step("renewal", &mut f);
    // One releases.
    assert_eq!(release(&mut mc, "L", "s2"), 1);
    step("release of one", &mut f);
    // One shared hold's lease ends; the others hold on.
    let ended = wait_until(Duration::from_secs(3), || {
        holders(&mut mc, "L").is_some_and(|hs| hs.iter().all(|h| h.token != "s3"))
    });
    assert!(ended, "s3's lease did not end on the master");
    let at = Instant::now();
    f.check(
        at + EARLY >= t3 + Duration::from_secs(1) && at <= replied3 + Duration::from_secs(1) + LATE,
        || format!("s3's lease of 1 s ended {:?} after its acquire", at - t3),
    );
    step("a shared hold's lease end", &mut f);
    let mut rc = r.conn();
    let d = decode_dump(&dump(&mut rc, "L"));
    let toks: Vec<&[u8]> = d.holds.iter().map(|h| h.token.as_slice()).collect();
    f.check(toks == [b"s1".as_slice()], || {
        format!("the replica still keeps an ended or released hold: {d:?}")
    });
    // LOCK.FENCE and LOCK.EXTEND on one hold.
    fence(&mut mc, "L", "s1").unwrap();
    step("LOCK.FENCE of one hold", &mut f);
    acquire_shared(&mut mc, "L", "s4", 25_000, None).unwrap();
    assert_eq!(extend(&mut mc, "L", "s4", 50_000), 1);
    step("LOCK.EXTEND of one hold", &mut f);

    // Downgrade in place, granting the shared waiter at the head at once; an exclusive
    // waiter behind it stays queued.
    let fd = acquire(&mut mc, "D", "x", 30_000).unwrap();
    let y = Blocked::join(&m, "D", &["D", "y", "20000", "SHARED", "WAIT", "0"]);
    let z = Blocked::join(&m, "D", &["D", "z", "20000", "WAIT", "0"]);
    step("exclusive hold with two waiters", &mut f);
    assert_eq!(acquire_shared(&mut mc, "D", "x", 25_000, None), Some(fd));
    let ry = y.reply_within(Duration::from_secs(2));
    f.check(matches!(ry, Some(Ok(Value::Int(n))) if n > fd), || {
        format!("shared waiter y after the downgrade: {ry:?}")
    });
    step("downgrade + grant to a shared waiter", &mut f);
    // Both shared holds go: the exclusive waiter is granted.
    assert_eq!(release(&mut mc, "D", "x"), 1);
    assert_eq!(release(&mut mc, "D", "y"), 1);
    let rz = z.reply_within(Duration::from_secs(2));
    f.check(matches!(rz, Some(Ok(Value::Int(_)))), || {
        format!("exclusive waiter z: {rz:?}")
    });
    step("grant to an exclusive waiter", &mut f);

    // Consecutive shared waiters granted together when the exclusive hold ends.
    acquire(&mut mc, "G", "e", 30_000).unwrap();
    let w1 = Blocked::join(&m, "G", &["G", "w1", "20000", "SHARED", "WAIT", "0"]);
    let w2 = Blocked::join(&m, "G", &["G", "w2", "15000", "SHARED", "WAIT", "0"]);
    assert_eq!(release(&mut mc, "G", "e"), 1);
    for (n, w) in [("w1", &w1), ("w2", &w2)] {
        let got = w.reply_within(Duration::from_secs(2));
        f.check(matches!(got, Some(Ok(Value::Int(_)))), || {
            format!("shared waiter {n}: {got:?}")
        });
    }
    step("grant to two shared waiters", &mut f);
    let g = holders(&mut rc, "G").unwrap_or_default();
    let toks: Vec<&str> = g.iter().map(|h| h.token.as_str()).collect();
    f.check(toks == ["w1", "w2"], || format!("G on the replica: {g:?}"));

    // The last holds go: the keys go on the replica too.
    for (k, t) in [
        ("G", "w1"),
        ("G", "w2"),
        ("D", "z"),
        ("L", "s1"),
        ("L", "s4"),
    ] {
        assert_eq!(release(&mut mc, k, t), 1, "release {k} {t}");
    }
    step("last releases", &mut f);
    for k in keys {
        f.check(!exists(&mut rc, k), || format!("{k} still on the replica"));
    }
    f.done("live replication");
}

/// The master dies; the replica is promoted: its holds are the master's, a shared hold's
/// lease and an exclusive one end on time there (and only that hold), the other holds stay,
/// and every new fence is above every fence the master issued.
#[test]
fn promoted_replica_keeps_holds_ends_leases_on_time_and_fences_go_on() {
    let (mut m, r) = replica_pair();
    let mut p = populate(&m);
    let mut mc = m.conn();
    let t_h1 = Instant::now();
    p.issued.push((
        "P",
        acquire_shared(&mut mc, "P", "h1", 3_000, None).unwrap(),
    ));
    let replied_h1 = Instant::now();
    p.issued.push((
        "P",
        acquire_shared(&mut mc, "P", "h2", 60_000, None).unwrap(),
    ));
    let t_e = Instant::now();
    p.issued
        .push(("E", acquire(&mut mc, "E", "e2", 3_500).unwrap()));
    let replied_e = Instant::now();
    sync(&mut mc);
    let mut keys = KEYS.to_vec();
    keys.extend(["P", "E"]);
    let before = snap(&mut mc, &keys);
    m.kill9();
    let mut rc = r.conn();
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let after = snap(&mut rc, &keys);
    let mut f = Findings::default();
    compare(&before, &after, "promotion", &mut f);
    assert!(
        replied_h1.elapsed() < Duration::from_millis(2_500),
        "test machine too slow: the promotion took until h1's lease end"
    );

    // The leases end on time on the new master, h1 alone on P.
    let (mut h1_end, mut e_end) = (None, None);
    wait_until(Duration::from_secs(8), || {
        if h1_end.is_none()
            && holders(&mut rc, "P").is_some_and(|hs| hs.iter().all(|h| h.token != "h1"))
        {
            h1_end = Some(Instant::now());
        }
        if e_end.is_none() && !exists(&mut rc, "E") {
            e_end = Some(Instant::now());
        }
        h1_end.is_some() && e_end.is_some()
    });
    for (what, end, sent, replied, ttl) in [
        ("P h1 (shared)", h1_end, t_h1, replied_h1, 3_000),
        ("E e2 (exclusive)", e_end, t_e, replied_e, 3_500),
    ] {
        let ttl = Duration::from_millis(ttl);
        match end {
            Some(end) => f.check(
                end + EARLY >= sent + ttl && end <= replied + ttl + LATE,
                || {
                    format!(
                        "{what}: lease of {ttl:?} ended {:?} after its acquire on the new master",
                        end - sent
                    )
                },
            ),
            None => f.fail(format!("{what}: lease did not end on the new master")),
        }
    }
    match holders(&mut rc, "P").as_deref() {
        Some([h]) => f.check(h.token == "h2" && h.mode == "shared", || {
            format!("P: {h:?}")
        }),
        other => f.fail(format!("P after h1's lease end: {other:?}")),
    }
    let d = decode_dump(&dump(&mut rc, "P"));
    f.check(d.holds.len() == 1 && d.holds[0].token == b"h2", || {
        format!("P keeps the ended hold: {d:?}")
    });
    p.holds.push(("P", "h2"));
    fences_go_on(&r, &p, Went::Dataset, "promotion", &mut f);
    let mut rc = r.conn();
    let n = acquire(&mut rc, "E", "new", 1_000);
    f.check(n.is_some_and(|n| n > p.max()), || {
        format!("E after its lease end on the new master: {n:?}")
    });
    f.done("promotion");
}

/// A decoded `DUMP` of a key saved now says when: a sanity check of the decoder itself.
#[test]
fn dump_decoder_reads_what_the_module_saves() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = unix_ms();
    let f1 = acquire_shared(&mut c, "k", "a", 10_000, None).unwrap();
    let f2 = acquire_shared(&mut c, "k", "bb", 20_000, None).unwrap();
    let f3 = fence(&mut c, "k", "a").unwrap();
    let d = decode_dump(&dump(&mut c, "k"));
    let t1 = unix_ms();
    assert_eq!(d.encver, 3, "{d:?}");
    assert!(d.shared && d.last_fence == f3, "{d:?}");
    assert!(d.saved_at >= t0 && d.saved_at <= t1 + 1, "{d:?}");
    assert_eq!(d.holds.len(), 2, "{d:?}");
    assert_eq!(
        (d.holds[0].token.as_slice(), d.holds[0].fence),
        (&b"a"[..], f3)
    );
    assert_eq!(
        (d.holds[1].token.as_slice(), d.holds[1].fence),
        (&b"bb"[..], f2)
    );
    assert!(f2 > f1);
    for (h, ttl) in d.holds.iter().zip([10_000, 20_000]) {
        assert!(
            h.deadline_ms >= t0 + ttl && h.deadline_ms <= t1 + ttl + 2,
            "{h:?}"
        );
    }
}
