//! Every keyspace operation of the waiters' matrix (docs/guarantees.md, guarantee 3;
//! docs/commands.md, "A waiter waits for a (db, key name)") answers the observers of the
//! name at once, as it answers waiters: a lock deleted, moved away, replaced, or arriving
//! under the name. The reply is the name's `LOCK.INFO` after the operation: null where the
//! lock went, the arriving lock's where one came. Observers of the names the operation does
//! not touch stay blocked.

use std::time::{Duration, Instant};

use redis::Value;

use crate::common::{
    acquire, args, conn_in, findings_of, must, parse_info, run_raw, server_error_text, LockInfo,
    Server,
};
use crate::observer::{Answer, Observer};
use crate::{observing, same_info, AT_ONCE, QUIET, TTL};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Del,
    Unlink,
    /// `RENAME k k2`.
    RenameAway,
    /// `RENAME src k`.
    RenameOnto,
    /// `MOVE k 1`.
    MoveAway,
    /// `MOVE k 0` from db 1, k free in db 0.
    MoveOnto,
    /// `SWAPDB 0 1`, db 1 without k.
    SwapDb,
    /// `SWAPDB 0 1`, k held in db 1 too.
    SwapDbBothHeld,
    FlushDb,
    FlushDbAsync,
    FlushAllSync,
    FlushAllAsync,
    /// `COPY src k REPLACE`.
    CopyReplaceOnto,
    /// `RESTORE k 0 <DUMP src> REPLACE`.
    RestoreReplaceOnto,
    /// `SET k v`.
    Overwrite,
    /// `PEXPIRE k 100`, then the key expires.
    Expire,
    /// `maxmemory 1` under allkeys-lru, then back to 0.
    EvictLru,
}

const OPS: [Op; 17] = [
    Op::Del,
    Op::Unlink,
    Op::RenameAway,
    Op::RenameOnto,
    Op::MoveAway,
    Op::MoveOnto,
    Op::SwapDb,
    Op::SwapDbBothHeld,
    Op::FlushDb,
    Op::FlushDbAsync,
    Op::FlushAllSync,
    Op::FlushAllAsync,
    Op::CopyReplaceOnto,
    Op::RestoreReplaceOnto,
    Op::Overwrite,
    Op::Expire,
    Op::EvictLru,
];

const EXPIRE_MS: u64 = 100;

/// What the observer of k in db 0 is answered.
#[derive(Debug)]
enum Expect {
    Null,
    /// A lock held by this token.
    HeldBy(&'static str),
    WrongType,
}

impl Op {
    fn commands(self, dump: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let one = |parts: &[&str]| vec![args(parts)];
        match self {
            Op::Del => one(&["DEL", "k"]),
            Op::Unlink => one(&["UNLINK", "k"]),
            Op::RenameAway => one(&["RENAME", "k", "k2"]),
            Op::RenameOnto => one(&["RENAME", "src", "k"]),
            Op::MoveAway => one(&["MOVE", "k", "1"]),
            Op::MoveOnto => vec![args(&["SELECT", "1"]), args(&["MOVE", "k", "0"])],
            Op::SwapDb | Op::SwapDbBothHeld => one(&["SWAPDB", "0", "1"]),
            Op::FlushDb => one(&["FLUSHDB"]),
            Op::FlushDbAsync => one(&["FLUSHDB", "ASYNC"]),
            Op::FlushAllSync => one(&["FLUSHALL", "SYNC"]),
            Op::FlushAllAsync => one(&["FLUSHALL", "ASYNC"]),
            Op::CopyReplaceOnto => one(&["COPY", "src", "k", "REPLACE"]),
            Op::RestoreReplaceOnto => {
                let mut c = args(&["RESTORE", "k", "0"]);
                c.push(dump.to_vec());
                c.push(b"REPLACE".to_vec());
                vec![c]
            }
            Op::Overwrite => one(&["SET", "k", "v"]),
            Op::Expire => one(&["PEXPIRE", "k", &EXPIRE_MS.to_string()]),
            Op::EvictLru => vec![
                args(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
                args(&["CONFIG", "SET", "maxmemory", "1"]),
                args(&["CONFIG", "SET", "maxmemory", "0"]),
            ],
        }
    }

    fn expect(self) -> Expect {
        match self {
            Op::RenameOnto | Op::CopyReplaceOnto | Op::RestoreReplaceOnto => {
                Expect::HeldBy("src-holder")
            }
            Op::MoveOnto | Op::SwapDbBothHeld => Expect::HeldBy("db1-holder"),
            Op::Overwrite => Expect::WrongType,
            _ => Expect::Null,
        }
    }

    /// Where k's own lock goes, if somewhere observed: (db, name).
    fn destination(self) -> Option<(i64, &'static str)> {
        match self {
            Op::RenameAway => Some((0, "k2")),
            Op::MoveAway | Op::SwapDb | Op::SwapDbBothHeld => Some((1, "k")),
            _ => None,
        }
    }

    /// Whether the operation reaches z in db 1 too (a bystander otherwise).
    fn touches_db1(self) -> bool {
        matches!(
            self,
            Op::SwapDb | Op::SwapDbBothHeld | Op::FlushAllSync | Op::FlushAllAsync | Op::EvictLru
        )
    }
}

/// An observer of (db, key) that saw the key's state, blocked.
fn observe_in(s: &Server, db: i64, key: &str, seen: i64) -> Observer {
    let mut o = Observer::connect(s, crate::observer::Proto::Resp2);
    if db != 0 {
        assert_eq!(o.call(&["SELECT", &db.to_string()]), Value::Okay);
    }
    o.observe(key, seen, 0);
    o.wait_blocked(s);
    o
}

fn lock_info_in(s: &Server, db: i64, key: &str) -> Result<Option<LockInfo>, String> {
    let mut c = conn_in(s, db);
    crate::cmd!(&mut c, "LOCK.INFO", key).map(|v| parse_info(&v))
}

fn run_op(op: Op) -> Vec<String> {
    let mut f = Vec::new();
    let s = Server::new();
    let mut c = s.conn();
    let mut db1 = conn_in(&s, 1);
    let mut seen = 0;
    if op != Op::MoveOnto {
        seen = acquire(&mut c, "k", "holder", TTL).expect("k is free");
    }
    let mut dump = Vec::new();
    if matches!(
        op,
        Op::RenameOnto | Op::CopyReplaceOnto | Op::RestoreReplaceOnto
    ) {
        acquire(&mut c, "src", "src-holder", TTL).expect("src is free");
        if let Value::BulkString(b) = must(&mut c, &args(&["DUMP", "src"])) {
            dump = b;
        }
    }
    let mut db1_fence = 0;
    if matches!(op, Op::MoveOnto | Op::SwapDbBothHeld) {
        db1_fence = acquire(&mut db1, "k", "db1-holder", TTL).expect("k is free in db 1");
    }
    let zf = acquire(&mut db1, "z", "z-holder", TTL).expect("z is free in db 1");

    let mut o = observe_in(&s, 0, "k", seen);
    let mut dest = op.destination().map(|(db, key)| {
        let seen = if db == 1 { db1_fence } else { 0 };
        (observe_in(&s, db, key, seen), db, key)
    });
    let mut z = observe_in(&s, 1, "z", zf);
    let own_fence = seen;

    let t0 = Instant::now();
    for cmd in op.commands(&dump) {
        if let Err(e) = run_raw(&mut c, &cmd) {
            f.push(format!("{}: {e}", String::from_utf8_lossy(&cmd[0])));
        }
    }
    let (within, earliest) = match op {
        // The server's active expiry finds the key within one of its 100 ms cycles.
        Op::Expire => (Duration::from_millis(EXPIRE_MS + 200), EXPIRE_MS),
        _ => (AT_ONCE, 0),
    };
    let answer = o.reply_within(within + Duration::from_secs(1));
    let after = o.answered.map(|a| a.saturating_duration_since(t0));
    match after {
        None => f.push(format!("k's observer not answered ({answer:?})")),
        Some(a) if a > within || a < Duration::from_millis(earliest) => {
            f.push(format!("k's observer answered {a:?} after the operation"))
        }
        Some(_) => {}
    }
    let now = lock_info_in(&s, 0, "k");
    if let Some(v) = &answer {
        let got = match server_error_text(v) {
            Some(e) => Answer::Error(e),
            None => Answer::Info(parse_info(v)),
        };
        match (op.expect(), &got) {
            (Expect::Null, Answer::Info(None)) => {}
            (Expect::HeldBy(t), Answer::Info(Some(i)))
                if i.holder.as_deref() == Some(t.as_bytes()) =>
            {
                if !matches!(&now, Ok(n) if same_info(&Some(i.clone()), n, 100)) {
                    f.push(format!("k's observer got {i:?}, LOCK.INFO k says {now:?}"));
                }
            }
            (Expect::WrongType, Answer::Error(e)) if e.starts_with("WRONGTYPE") => {}
            (e, got) => f.push(format!("k's observer: expected {e:?}, got {got:?}")),
        }
    }
    if let Some((d, db, key)) = dest.as_mut() {
        match d.reply_within(AT_ONCE).map(|v| parse_info(&v)) {
            Some(Some(i))
                if i.holder.as_deref() == Some(&b"holder"[..])
                    && i.fence == own_fence
                    && d.answered_after(t0) <= AT_ONCE => {}
            other => f.push(format!(
                "the observer of {key} in db {db}, where k's lock went: {other:?} after {:?}",
                d.answered.map(|a| a.saturating_duration_since(t0))
            )),
        }
    }
    if op.touches_db1() {
        if z.reply_within(AT_ONCE + within).is_none() {
            f.push("z's observer in db 1 not answered".into());
        }
    } else if let Some(v) = z.reply_within(QUIET) {
        f.push(format!(
            "z's observer in db 1, untouched, was answered {v:?}"
        ));
    }
    let left = observing(&mut c);
    let expected_left = i64::from(!op.touches_db1());
    if left != expected_left {
        f.push(format!(
            "observing_clients {left}, expected {expected_left}"
        ));
    }
    f.into_iter().map(|m| format!("{op:?}: {m}")).collect()
}

#[test]
fn every_keyspace_operation_answers_observers_at_once() {
    let mut findings = Vec::new();
    for op in OPS {
        let found = findings_of(|| run_op(op));
        findings.extend(found.into_iter().map(|m| {
            if m.starts_with("stopped") {
                format!("{op:?}: {m}")
            } else {
                m
            }
        }));
    }
    assert!(
        findings.is_empty(),
        "{} findings:\n{}",
        findings.len(),
        findings.join("\n")
    );
}

/// A name that is observed but was never a lock: another type put there and removed again is
/// no change of the state, which stays 0 (the state follows holds, not the key).
#[test]
fn another_type_under_an_observed_free_name_is_no_change() {
    let s = Server::new();
    let mut c = s.conn();
    let mut o = Observer::join(&s, "k", 0, 0);
    must(&mut c, &args(&["SET", "k", "v"]));
    must(&mut c, &args(&["DEL", "k"]));
    o.silent_for(QUIET, "SET then DEL of a string at k");
    let t0 = Instant::now();
    acquire(&mut c, "k", "a", TTL).expect("k is free");
    let got = crate::answered_at_once(&mut o, t0, "then a lock");
    assert_eq!(got.and_then(|i| i.holder), Some(b"a".to_vec()));
}
