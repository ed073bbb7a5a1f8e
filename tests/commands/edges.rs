//! Edge cases a mutation check found uncovered: a withdrawn grant passed on at once (not at
//! the next cron tick), a flush of one database keeping another's withdrawals, a key that
//! expires inside an engine operation answering its waiters, a replayed release reaching a
//! replica's AOF, and a DUMP's deadline never earlier than the one the AOF holds.

use crate::cmd;
use std::fs;
use std::thread::sleep;
use std::time::Duration;

use crate::common::*;
use redis::Value;

/// How soon a waiter must be answered when the server has all it needs to answer it.
const AT_ONCE: Duration = Duration::from_millis(300);

/// A granted waiter disconnects inside the `MULTI` that granted it: the grant is withdrawn
/// and passed to the next waiter by a timer of its own, not left to the cron (with `--hz 1`,
/// up to a second later). Several rounds, so that a round that happens to meet a cron tick
/// is followed by one that starts just after it.
#[test]
fn withdrawn_grant_is_passed_on_without_waiting_for_the_cron() {
    let s = Server::start(Opts::new().extra(&["--hz", "1"]));
    let mut c = s.conn();
    for round in 0..3 {
        let key = format!("h5:{round}");
        assert!(acquire(&mut c, &key, "holder", 60_000).is_some());
        let a = Waiter::join(&s, &key, "a", 60_000, 0);
        let mut b = Waiter::join(&s, &key, "b", 60_000, 0);
        let id = a.id.to_string();
        exec(
            &mut c,
            &[
                args(&["LOCK.RELEASE", &key, "holder"]),
                args(&["CLIENT", "KILL", "ID", &id]),
            ],
        );
        let r = b.reply_within(AT_ONCE);
        assert!(
            matches!(r, Some(Reply::Fence(_))),
            "round {round}: waiter b got {} within {AT_ONCE:?} of the withdrawal",
            got(&r)
        );
        let l = lock_info(&mut c, &key).expect("lock after the hand-off");
        assert_eq!(l.holder.as_deref(), Some(&b"b"[..]), "round {round}: {l:?}");
        drop(a);
    }
}

/// `FLUSHDB` of db 1 must not drop a withdrawal pending in db 0.
#[test]
fn flush_of_another_db_keeps_pending_withdrawals() {
    let s = Server::new();
    let mut c = s.conn();
    assert!(acquire(&mut c, "s2", "holder", 60_000).is_some());
    let a = Waiter::join(&s, "s2", "a", 60_000, 0);
    let mut b = Waiter::join(&s, "s2", "b", 60_000, 0);
    let id = a.id.to_string();
    exec(
        &mut c,
        &[
            args(&["LOCK.RELEASE", "s2", "holder"]),
            args(&["CLIENT", "KILL", "ID", &id]),
            args(&["SELECT", "1"]),
            args(&["FLUSHDB"]),
            args(&["SELECT", "0"]),
        ],
    );
    let r = b.reply_within(AT_ONCE);
    assert!(
        matches!(r, Some(Reply::Fence(_))),
        "waiter b got {} within {AT_ONCE:?} of the withdrawal",
        got(&r)
    );
    let l = lock_info(&mut c, "s2").expect("lock after the hand-off");
    assert_eq!(l.holder.as_deref(), Some(&b"b"[..]), "{l:?}");
    drop(a);
}

/// A lock that expires when the engine opens it (lazy expiry inside `LOCK.ACQUIRE`) answers
/// its waiters null once the operation ends.
#[test]
fn key_expiring_inside_an_engine_operation_answers_its_waiters() {
    let s = Server::new();
    let mut c = s.conn();
    cmd!(&mut c, "DEBUG", "SET-ACTIVE-EXPIRE", 0).unwrap();
    assert!(acquire(&mut c, "s5", "holder", 60_000).is_some());
    let mut w = Waiter::join(&s, "s5", "w", 60_000, 0);
    assert_eq!(cmd!(&mut c, "PEXPIRE", "s5", 50), Ok(Value::Int(1)));
    sleep(Duration::from_millis(100));
    let f = acquire(&mut c, "s5", "other", 1000);
    let r = w.reply_within(AT_ONCE);
    cmd!(&mut c, "DEBUG", "SET-ACTIVE-EXPIRE", 1).unwrap();
    assert_eq!(
        r,
        Some(Reply::Null),
        "the waiter of the expired lock got {}",
        got(&r)
    );
    assert!(f.is_some(), "`other` was not granted the expired lock");
}

/// A release the master propagated reaches the replica's own AOF: restarted from it alone,
/// the replica does not bring the lock back.
#[test]
fn replayed_release_reaches_the_replica_aof() {
    let m = Server::new();
    let mut r = Server::start(Opts::new().appendonly().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    assert!(
        wait_until(Duration::from_secs(10), || {
            info_field(&mut rc, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
                && info_field(&mut rc, "persistence", "aof_rewrite_scheduled").as_deref()
                    == Some("0")
        }),
        "the replica's AOF rewrite after its sync did not end"
    );
    let mut mc = m.conn();
    assert!(acquire(&mut mc, "o2", "holder", 60_000).is_some());
    assert!(acquire(&mut mc, "kept", "holder", 60_000).is_some());
    assert_eq!(release(&mut mc, "o2", "holder"), 1);
    assert_eq!(cmd!(&mut mc, "WAIT", 1, 1000), Ok(Value::Int(1)));
    assert!(!exists(&mut rc, "o2"));
    drop(rc);

    r.stop();
    r.opts.replicaof = None;
    r.start_again();
    let mut rc = r.conn();
    assert!(
        exists(&mut rc, "kept"),
        "the restarted replica did not load its AOF"
    );
    assert!(
        !exists(&mut rc, "o2"),
        "the released lock came back from the replica's AOF: {:?}",
        lock_info(&mut rc, "o2")
    );
}

// ------------------------------------------------------------- DUMP vs AOF deadlines

/// The DUMP of a lock and the `LOCK.APPLY` of each acquire in the AOF give each hold's
/// deadline from the same monotonic one, both rounded up to the millisecond: the DUMP's is
/// never earlier, nor more than 1 ms later. Exclusive locks and locks of two shared holds.
#[test]
fn dump_deadline_is_never_earlier_than_the_aof_deadline() {
    let s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let mut c = s.conn();
    const KEYS: usize = 20;
    let mut dumps = Vec::new();
    for i in 0..KEYS {
        let key = format!("p2:{i}");
        let ttl = 30_000 + i as u64 * 7;
        let shared = i % 2 == 1;
        // One pipeline, so that every command reads the clock in the same turn of the
        // server.
        let mut p = redis::pipe();
        let tokens: &[&str] = if shared {
            &["holder-x", "holder-y"]
        } else {
            &["holder-x"]
        };
        for (n, t) in tokens.iter().enumerate() {
            let c = p.cmd("LOCK.ACQUIRE").arg(&key).arg(*t).arg(ttl + n as u64);
            if shared {
                c.arg("SHARED");
            }
        }
        p.cmd("DUMP").arg(&key);
        let mut replies: Vec<Value> = p.query(&mut c).expect("LOCK.ACQUIRE + DUMP");
        let Some(Value::BulkString(payload)) = replies.pop() else {
            panic!("DUMP {key}: {replies:?}");
        };
        let fences: Vec<u64> = replies
            .iter()
            .map(|r| match r {
                Value::Int(f) if *f > 0 => *f as u64,
                other => panic!("{key}: LOCK.ACQUIRE replied {other:?}"),
            })
            .collect();
        let d = dump::Dump::read(&payload);
        let (_, mode, last_fence, holds) = d.v3();
        let want_mode = if shared {
            dump::SHARED
        } else {
            dump::EXCLUSIVE
        };
        assert_eq!(mode, want_mode, "{key}: mode in {:?}", d.lock());
        assert_eq!(
            holds
                .iter()
                .map(|h| (&h.token[..], h.fence))
                .collect::<Vec<_>>(),
            tokens
                .iter()
                .map(|t| t.as_bytes())
                .zip(fences.iter().copied())
                .collect::<Vec<_>>(),
            "{key}: the holds the DUMP carries, in grant order"
        );
        assert_eq!(Some(last_fence), fences.iter().max().copied(), "{key}");
        dumps.push((key, holds.to_vec()));
        sleep(Duration::from_micros(137));
    }
    let incr = aof::incr_path(&s);
    let cmds = aof::commands(&fs::read(&incr).unwrap());
    let mut problems = Findings::default();
    for (key, holds) in &dumps {
        for h in holds {
            let token = String::from_utf8_lossy(&h.token);
            let apply = cmds
                .iter()
                .find(|c| {
                    c[0].eq_ignore_ascii_case(b"LOCK.APPLY")
                        && c[1] == key.as_bytes()
                        && c[2] == h.token
                })
                .unwrap_or_else(|| panic!("no LOCK.APPLY of {key} {token} in {}", incr.display()));
            let applied: i64 = String::from_utf8_lossy(&apply[3]).parse().unwrap();
            let dumped = h.deadline;
            problems.check(dumped >= applied, || {
                format!("{key} {token}: DUMP deadline {dumped} is earlier than the AOF's {applied}")
            });
            problems.check(dumped <= applied + 1, || {
                format!("{key} {token}: DUMP deadline {dumped} is past the AOF's {applied} + 1")
            });
        }
    }
    problems.done("DUMP deadlines against the AOF");
}
