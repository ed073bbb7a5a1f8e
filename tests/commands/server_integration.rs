//! How the lock commands sit in the server around them: `LOCK.APPLY` refused from clients,
//! `MULTI`/`EXEC` and `WATCH` over lock keys, and what `COMMAND INFO`/`COMMAND DOCS` and
//! `MODULE LIST` say of the commands.

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::*;
use redis::Value;

/// `LOCK.APPLY` is what a replica or an AOF load replays; from a client it is refused by its
/// origin alone. Every vector sent here is well formed (a token, a deadline a minute ahead,
/// a valid fence above the lock's), so that `LOCK.APPLY` replayed from the master link would
/// create or overwrite the lock: only the origin check stands between it and the lock.
#[test]
fn lock_apply_is_refused_from_a_normal_client() {
    const REFUSED: &str =
        "ERR LOCK.APPLY is internal: only the master link and the AOF may send it";
    let s = Server::new();
    let mut c = s.conn();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let deadline = now_ms + 60_000;
    let r = cmd!(&mut c, "LOCK.APPLY", "free", "t", deadline, 12_345);
    assert_eq!(r, Err(REFUSED.to_string()), "LOCK.APPLY on a free key");
    assert!(
        !exists(&mut c, "free"),
        "LOCK.APPLY from a client created a key"
    );

    // A held lock: an accepted APPLY would hand it to "intruder" with a new fence and lease.
    acquire(&mut c, "held", "owner", 30_000).unwrap();
    let before = info(&mut c, "held");
    let fence = before.as_ref().unwrap().fence;
    let t0 = Instant::now();
    let r = cmd!(
        &mut c,
        "LOCK.APPLY",
        "held",
        "intruder",
        deadline,
        fence + 1
    );
    assert_eq!(r, Err(REFUSED.to_string()), "LOCK.APPLY on a held key");
    let after = info(&mut c, "held");
    assert_eq!(
        after.as_ref().and_then(|i| i.holder.as_deref()),
        Some(&b"owner"[..]),
        "the refused APPLY changed the holder: {after:?}"
    );
    assert_same_lock(&before, &after, t0.elapsed(), 100);
    assert!(
        after.as_ref().unwrap().ttl <= 30_000,
        "the refused APPLY's 60 s deadline was taken: {after:?}"
    );

    // Not from MULTI either: EXEC runs it, and it is refused there alike (read as raw
    // bytes: the client library turns an error inside EXEC into an error for all of it).
    let mut raw = s.raw();
    assert_eq!(raw.call(&[b"MULTI"]), b"+OK\r\n");
    let (deadline, next) = (deadline.to_string(), (fence + 2).to_string());
    let queued = raw.call(&[
        b"LOCK.APPLY",
        b"held",
        b"intruder",
        deadline.as_bytes(),
        next.as_bytes(),
    ]);
    assert_eq!(queued, b"+QUEUED\r\n");
    assert_eq!(raw.call(&[b"LOCK.INFO", b"held"]), b"+QUEUED\r\n");
    let exec = String::from_utf8_lossy(&raw.call(&[b"EXEC"])).into_owned();
    let refused = format!("*2\r\n-{REFUSED}\r\n");
    assert!(
        exec.starts_with(&refused),
        "EXEC must refuse LOCK.APPLY: {exec:?}"
    );
    // Within the transaction too, the lock was still the owner's, under its fence.
    let inside = &exec[refused.len()..];
    assert!(
        inside.starts_with("*12\r\n$6\r\nholder\r\n$5\r\nowner\r\n$5\r\nfence\r\n")
            && inside.contains(&format!(":{fence}\r\n")),
        "LOCK.INFO inside EXEC: {inside:?}"
    );
    assert_same_lock(&before, &info(&mut c, "held"), t0.elapsed(), 100);
    assert_eq!(release(&mut c, "held", "owner"), 1, "owner still holds it");
}

#[test]
fn multi_exec_with_lock_commands() {
    let s = Server::new();
    let mut c = s.conn();
    assert_eq!(cmd!(&mut c, "MULTI"), Ok(Value::Okay));
    for r in [
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 10_000),
        cmd!(&mut c, "LOCK.FENCE", "k", "t"),
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "other", 10_000),
        cmd!(&mut c, "LOCK.ACQUIRE", "k2", "t", 10_000, "WAIT", 100),
        cmd!(&mut c, "LOCK.INFO", "k"),
    ] {
        assert_eq!(r, Ok(Value::SimpleString("QUEUED".into())));
    }
    let v = cmd!(&mut c, "EXEC").unwrap();
    let items = match v {
        Value::Array(items) => items,
        other => panic!("EXEC: {other:?}"),
    };
    assert_eq!(items.len(), 5, "{items:?}");
    let f1 = match items[0] {
        Value::Int(f) => f,
        ref o => panic!("ACQUIRE in MULTI: {o:?}"),
    };
    let f2 = match items[1] {
        Value::Int(f) => f,
        ref o => panic!("FENCE in MULTI: {o:?}"),
    };
    assert!(f2 > f1);
    assert_eq!(items[2], Value::Nil);
    assert!(matches!(items[3], Value::Int(_)), "{:?}", items[3]);
    let i = parse_info(&items[4]).unwrap();
    assert_eq!(i.fence, f2);
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
    // Errors inside EXEC are reported per command and change nothing (raw socket: the
    // client library would turn the whole EXEC reply into its first error).
    let mut raw = s.raw();
    assert_eq!(raw.call(&[b"MULTI"]), b"+OK\r\n");
    assert_eq!(
        raw.call(&[b"LOCK.EXTEND", b"k", b"t", b"nope"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(raw.call(&[b"LOCK.FENCE", b"k", b"t",]), b"+QUEUED\r\n");
    let r = raw.call(&[b"EXEC"]);
    let text = String::from_utf8_lossy(&r).into_owned();
    assert!(
        text.starts_with("*2\r\n-ERR ttl is not an integer or out of range\r\n:"),
        "EXEC with a bad argument: {text:?}"
    );
    let i = info(&mut c, "k").unwrap();
    assert!(i.fence > f2, "the command after the failed one ran");
    assert_eq!(i.holder.as_deref(), Some(&b"t"[..]));
}

fn watch_then_exec(
    s: &Server,
    setup: impl FnOnce(&mut redis::Connection),
    other: impl FnOnce(&mut redis::Connection),
) -> Value {
    let mut a = s.conn();
    let mut b = s.conn();
    setup(&mut b);
    assert_eq!(cmd!(&mut a, "WATCH", "k"), Ok(Value::Okay));
    other(&mut b);
    assert_eq!(cmd!(&mut a, "MULTI"), Ok(Value::Okay));
    let _ = cmd!(&mut a, "SET", "marker", "1");
    cmd!(&mut a, "EXEC").unwrap()
}

#[test]
fn watch_sees_lock_changes() {
    let s = Server::new();
    // Control: nothing touches the key, EXEC runs.
    let v = watch_then_exec(&s, |_| {}, |_| {});
    assert!(matches!(v, Value::Array(_)), "unmodified WATCH: {v:?}");
    let v = watch_then_exec(
        &s,
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
        |_| {},
    );
    assert!(
        matches!(v, Value::Array(_)),
        "unmodified WATCH on lock key: {v:?}"
    );

    let mut c = s.conn();
    release(&mut c, "k", "t");
    // Acquire by another client aborts EXEC.
    let v = watch_then_exec(
        &s,
        |_| {},
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched key was acquired");
    // Release.
    let v = watch_then_exec(&s, |_| {}, |b| assert_eq!(release(b, "k", "t"), 1));
    assert_eq!(v, Value::Nil, "EXEC after a watched key was released");
    // Extend and fence.
    let v = watch_then_exec(
        &s,
        |b| {
            acquire(b, "k", "t", 10_000).unwrap();
        },
        |b| assert_eq!(extend(b, "k", "t", 20_000), 1),
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched key was extended");
    let v = watch_then_exec(&s, |_| {}, |b| assert!(fence(b, "k", "t").is_some()));
    assert_eq!(v, Value::Nil, "EXEC after a watched key got a new fence");
    // Lease end.
    let v = watch_then_exec(
        &s,
        |b| {
            assert_eq!(release(b, "k", "t"), 1);
            acquire(b, "k", "t", 150).unwrap();
        },
        |b| assert!(wait_until(Duration::from_secs(3), || !exists(b, "k"))),
    );
    assert_eq!(v, Value::Nil, "EXEC after a watched lock's lease ended");
}

#[test]
fn command_info_flags_and_key_positions() {
    let s = Server::new();
    let mut c = s.conn();
    // Flags by core counterpart: only the command that allocates refuses on a full server
    // (like SET); releasing, extending and fencing work there, as DEL and EXPIRE do.
    let with_oom: &[&str] = &["write", "denyoom", "fast"];
    let without_oom: &[&str] = &["write", "fast"];
    let cases = [
        ("lock.acquire", with_oom, true),
        ("lock.release", without_oom, false),
        ("lock.extend", without_oom, false),
        ("lock.fence", without_oom, false),
        ("lock.info", &["readonly", "fast"][..], false),
        // Not denyoom: the guarded command's own flag decides (docs/operations.md, the flags under
        // The server around a lock).
        ("lock.guard", &["write", "movablekeys"][..], false),
        // O(holders): not fast.
        ("lock.holders", &["readonly"][..], false),
    ];
    for (name, want, denyoom) in cases {
        let v = cmd!(&mut c, "COMMAND", "INFO", name).unwrap();
        let entry = match v {
            Value::Array(mut items) if items.len() == 1 => items.remove(0),
            other => panic!("COMMAND INFO {name}: {other:?}"),
        };
        let fields = match entry {
            Value::Array(f) => f,
            other => panic!("COMMAND INFO {name}: {other:?}"),
        };
        let flags: Vec<String> = match &fields[2] {
            Value::Array(fl) => fl
                .iter()
                .map(|f| match f {
                    Value::SimpleString(s) => s.clone(),
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    o => panic!("flag {o:?}"),
                })
                .collect(),
            other => panic!("{name} flags: {other:?}"),
        };
        assert_eq!(
            flags.iter().any(|f| f == "denyoom"),
            denyoom,
            "{name} flags {flags:?}: denyoom"
        );
        for w in want {
            assert!(
                flags.iter().any(|f| f == w),
                "{name} flags {flags:?} lack {w}"
            );
        }
        assert_eq!(
            (&fields[3], &fields[4], &fields[5]),
            (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
            "{name} first/last/step"
        );
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.ACQUIRE")
        .arg("thekey")
        .arg("t")
        .arg(100)
        .arg("WAIT")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["thekey"]);
    // MODULE LIST shows the module as `lock`.
    let v = cmd!(&mut c, "MODULE", "LIST").unwrap();
    assert!(format!("{v:?}").contains("\"lock\""), "MODULE LIST: {v:?}");
}

/// docs/operations.md, Observability: "`COMMAND INFO` and `COMMAND DOCS` describe every command".
#[test]
fn command_info_arity_and_command_docs() {
    let s = Server::new();
    let mut c = s.conn();
    let mut problems = Vec::new();
    for (name, arity) in [
        ("lock.acquire", -4),
        ("lock.release", 3),
        ("lock.extend", 4),
        ("lock.fence", 3),
        ("lock.info", 2),
        ("lock.guard", -4),
        ("lock.holders", 2),
    ] {
        match cmd!(&mut c, "COMMAND", "INFO", name) {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::Array(f)) if f.get(1) == Some(&Value::Int(arity)) => {}
                Some(Value::Array(f)) => problems.push(format!(
                    "{name}: COMMAND INFO arity {:?}, want {arity}",
                    f[1]
                )),
                other => problems.push(format!("{name}: COMMAND INFO {other:?}")),
            },
            other => problems.push(format!("{name}: COMMAND INFO {other:?}")),
        }
        let docs = format!("{:?}", cmd!(&mut c, "COMMAND", "DOCS", name));
        for field in ["summary", "arguments"] {
            if !docs.contains(&format!("\"{field}\"")) {
                problems.push(format!("{name}: COMMAND DOCS has no {field}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
