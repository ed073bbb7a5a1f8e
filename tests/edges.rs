//! Edge cases a mutation check found uncovered: a withdrawn grant passed on at once (not at
//! the next cron tick), a flush of one database keeping another's withdrawals, a key that
//! expires inside an engine operation answering its waiters, a replayed release reaching a
//! replica's AOF, and a DUMP's deadline never earlier than the one the AOF holds.

mod common;

use std::fs;
use std::thread::sleep;
use std::time::Duration;

use common::*;
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

/// The commands of an AOF (RESP arrays of bulk strings), in order.
fn aof_commands(b: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line(b: &[u8], at: &mut usize) -> String {
        let end = *at + b[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let s = String::from_utf8_lossy(&b[*at..end]).into_owned();
        *at = end + 2;
        s
    }
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let head = line(b, &mut at);
        let n: usize = head
            .strip_prefix('*')
            .unwrap_or_else(|| panic!("AOF: expected an array, got {head:?}"))
            .parse()
            .unwrap();
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(b, &mut at)
                .strip_prefix('$')
                .expect("AOF: bulk string")
                .parse()
                .unwrap();
            cmd.push(b[at..at + len].to_vec());
            at += len + 2;
        }
        out.push(cmd);
    }
    out
}

/// Decodes an RDB length at `at`: (value, bytes used).
fn dec_len(b: &[u8], at: usize) -> (u64, usize) {
    let first = b[at];
    match first >> 6 {
        0 => ((first & 0x3f) as u64, 1),
        1 => ((((first & 0x3f) as u64) << 8) | b[at + 1] as u64, 2),
        _ if first == 0x80 => (
            u32::from_be_bytes(b[at + 1..at + 5].try_into().unwrap()) as u64,
            5,
        ),
        _ if first == 0x81 => (u64::from_be_bytes(b[at + 1..at + 9].try_into().unwrap()), 9),
        _ => panic!("special RDB encoding {first:#x} at {at}"),
    }
}

/// The deadline (Unix ms) in a version-2 lock DUMP: type 7, the module id, the token (a
/// plain string), then unsigned deadline, fence and save time, and EOF.
fn dump_deadline(p: &[u8]) -> i64 {
    let n = p.len();
    assert_eq!(
        crc64(&p[..n - 8]),
        u64::from_le_bytes(p[n - 8..].try_into().unwrap())
    );
    let b = &p[..n - 10];
    assert_eq!(b[0], 7, "RDB_TYPE_MODULE_2");
    let (module_id, used) = dec_len(b, 1);
    assert_eq!(used, 9);
    assert_eq!(module_id & 0x3ff, 2, "encoding version 2");
    let mut at = 10;
    assert_eq!(b[at], 5, "token opcode");
    let (len, used) = dec_len(b, at + 1);
    at += 1 + used + len as usize;
    let mut uints = Vec::new();
    while b[at] == 2 {
        let (v, used) = dec_len(b, at + 1);
        uints.push(v);
        at += 1 + used;
    }
    assert_eq!(b[at], 0, "EOF opcode");
    assert_eq!(uints.len(), 3, "deadline, fence, saved_at");
    uints[0] as i64
}

/// The DUMP of a lock and the `LOCK.APPLY` of its acquire in the AOF give its deadline from
/// the same monotonic one, both rounded up to the millisecond: the DUMP's is never earlier.
#[test]
fn dump_deadline_is_never_earlier_than_the_aof_deadline() {
    let s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let mut c = s.conn();
    const KEYS: usize = 20;
    let mut dumps = Vec::new();
    for i in 0..KEYS {
        let key = format!("p2:{i}");
        // One pipeline, so that both read the clock in the same turn of the server.
        let (fence, dump): (Value, Value) = redis::pipe()
            .cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("holder-x")
            .arg(30_000 + i as u64 * 7)
            .cmd("DUMP")
            .arg(&key)
            .query(&mut c)
            .expect("LOCK.ACQUIRE + DUMP");
        assert!(matches!(fence, Value::Int(_)), "{key}: {fence:?}");
        let Value::BulkString(p) = dump else {
            panic!("DUMP {key}: {dump:?}");
        };
        dumps.push((key, dump_deadline(&p)));
        sleep(Duration::from_micros(137));
    }
    let dir = s.dir.join("appendonlydir");
    let incr = fs::read_dir(&dir)
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file");
    let cmds = aof_commands(&fs::read(&incr).unwrap());
    let mut problems = Findings::default();
    for (key, dumped) in &dumps {
        let apply = cmds
            .iter()
            .find(|c| c[0].eq_ignore_ascii_case(b"LOCK.APPLY") && c[1] == key.as_bytes())
            .unwrap_or_else(|| panic!("no LOCK.APPLY of {key} in {}", incr.display()));
        let applied: i64 = String::from_utf8_lossy(&apply[3]).parse().unwrap();
        problems.check(*dumped >= applied, || {
            format!("{key}: DUMP deadline {dumped} is earlier than the AOF's {applied}")
        });
        problems.check(*dumped <= applied + 1, || {
            format!("{key}: DUMP deadline {dumped} is past the AOF's {applied} + 1")
        });
    }
    problems.done("DUMP deadlines against the AOF");
}
