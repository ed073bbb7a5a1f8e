//! A holder stopped with SIGSTOP past its lease, end to end: the child that holds, writes
//! through `LOCK.GUARD`, is paused and writes again with its old fence, and the test that
//! its late writes are refused while the new holder's land.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::child_processes::{env_var, Proc};
use crate::cmd;
use crate::common::*;
use crate::SLACK;
use redis::Value;

/// A reply as one line of text: `OK <value>` or the full error.
fn reply_text(r: Result<Value, String>) -> String {
    match r {
        Ok(v) => format!("OK {v:?}"),
        Err(e) => e,
    }
}

/// Waits (polling, 60 s at most) until `path` exists.
fn wait_for_file(path: &Path) {
    assert!(
        wait_until(Duration::from_secs(60), || path.exists()),
        "child: {} never appeared",
        path.display()
    );
}

/// The holder of the paused-holder test: takes the lock (`old`, ttl from the environment),
/// prints `FENCE f`, writes once through `LOCK.GUARD` with it (prints `WROTE reply`), then
/// works until the file `go1` appears — the parent stops it with SIGSTOP meanwhile — and
/// writes with its fence again, as a holder that does not know it was paused: an `RPUSH`
/// and a `SET` (prints `RESULT1 <ms since the grant> | reply | reply`). When `go2` appears it
/// tries once more (prints `RESULT2 reply`).
pub(crate) fn paused_holder(c: &mut redis::Connection) {
    let key = env_var("REDIS_LOCK_CRASH_KEY");
    let list = env_var("REDIS_LOCK_CRASH_LIST");
    let value = env_var("REDIS_LOCK_CRASH_VALUE");
    let ttl: u64 = env_var("REDIS_LOCK_CRASH_TTL").parse().unwrap();
    let dir = env_var("REDIS_LOCK_CRASH_DIR");
    let dir = Path::new(&dir);
    let f = match cmd!(c, "LOCK.ACQUIRE", &key, "old", ttl) {
        Ok(Value::Int(f)) => f,
        other => panic!("child: LOCK.ACQUIRE: {other:?}"),
    };
    let granted = Instant::now();
    println!("\nFENCE {f}");
    let r = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:1")
    );
    println!("WROTE {}", reply_text(r));
    wait_for_file(&dir.join("go1"));
    let since = granted.elapsed().as_millis();
    let push = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:2")
    );
    let set = cmd!(c, "LOCK.GUARD", &key, f, "SET", &value, "old");
    println!(
        "RESULT1 {since} | {} | {}",
        reply_text(push),
        reply_text(set)
    );
    wait_for_file(&dir.join("go2"));
    let push = cmd!(
        c,
        "LOCK.GUARD",
        &key,
        f,
        "RPUSH",
        &list,
        format!("old:{f}:3")
    );
    println!("RESULT2 {}", reply_text(push));
}

#[test]
fn a_holder_paused_past_its_lease_is_refused_by_lock_guard() {
    const TTL: u64 = 2000;
    let (key, list, value) = ("{order:42}:lock", "{order:42}:log", "{order:42}:state");
    let s = Server::new();
    let mut c = s.conn();
    let dir = s.dir.join("paused");
    fs::create_dir_all(&dir).unwrap();
    let stat = |c: &mut redis::Connection, f: &str| lock_stat(c, f).unwrap_or(-1);
    let (runs0, refusals0) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );

    // The old holder takes the lock and writes under its fence.
    let spawned = Instant::now();
    let mut old = Proc::child(
        "paused",
        &[
            ("REDIS_LOCK_CRASH_PORT", s.port.to_string()),
            ("REDIS_LOCK_CRASH_KEY", key.to_string()),
            ("REDIS_LOCK_CRASH_LIST", list.to_string()),
            ("REDIS_LOCK_CRASH_VALUE", value.to_string()),
            ("REDIS_LOCK_CRASH_TTL", TTL.to_string()),
            ("REDIS_LOCK_CRASH_DIR", dir.display().to_string()),
        ],
    );
    let f1 = old.fence(Duration::from_secs(20));
    assert_eq!(
        old.line_after("WROTE ", Duration::from_secs(10)),
        "OK int(1)",
        "the holder's write under its valid fence"
    );

    // Paused (SIGSTOP) while it holds the lock.
    old.signal("STOP");
    assert!(
        wait_until(Duration::from_secs(5), || old.state() == 'T'),
        "the holder is not stopped: state {:?}",
        old.state()
    );

    // A new holder queues and is served when the paused holder's lease ends; it writes.
    let f2 = match cmd!(&mut c, "LOCK.ACQUIRE", key, "new", 60_000, "WAIT", 20_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("new holder: LOCK.ACQUIRE … WAIT: {other:?}"),
    };
    let granted = Instant::now();
    assert!(f2 > f1, "new holder's fence {f2} after {f1}");
    assert!(
        granted >= spawned + Duration::from_millis(TTL),
        "the new holder was granted {:?} after the old one was started, within its {TTL} ms \
         lease",
        granted - spawned
    );
    for n in 1..=2 {
        assert_eq!(
            cmd!(
                &mut c,
                "LOCK.GUARD",
                key,
                f2,
                "RPUSH",
                list,
                format!("new:{f2}:{n}")
            ),
            Ok(Value::Int(n + 1))
        );
    }
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", key, f2, "SET", value, "new"),
        Ok(Value::Okay)
    );
    assert_eq!(
        old.state(),
        'T',
        "the old holder ran while it should be stopped"
    );

    // The old holder resumes and writes with its old fence: refused, nothing changes.
    fs::write(dir.join("go1"), "").unwrap();
    old.signal("CONT");
    let r1 = old.line_after("RESULT1 ", Duration::from_secs(20));
    let parts: Vec<&str> = r1.split(" | ").collect();
    assert_eq!(parts.len(), 3, "RESULT1 {r1}");
    let paused_ms: u64 = parts[0].parse().unwrap();
    // Its lease ended before the new grant (the server's word for it); its own clock, read
    // from its grant reply, agrees within scheduling noise.
    assert!(
        paused_ms + SLACK.as_millis() as u64 >= TTL,
        "the old holder wrote {paused_ms} ms after its grant: it was not paused past its \
         {TTL} ms lease"
    );
    assert_eq!(
        &parts[1..],
        [
            "FENCED the lock is held under a newer fence",
            "FENCED the lock is held under a newer fence"
        ],
        "the paused holder's RPUSH and SET with fence {f1} (the lock is held under {f2})"
    );
    let expected = vec![
        format!("old:{f1}:1"),
        format!("new:{f2}:1"),
        format!("new:{f2}:2"),
    ];
    let lrange = |c: &mut redis::Connection| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(list)
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap()
    };
    assert_eq!(lrange(&mut c), expected);
    assert_eq!(
        cmd!(&mut c, "GET", value),
        Ok(Value::BulkString(b"new".to_vec()))
    );
    let i = info(&mut c, key).unwrap();
    assert_eq!((i.holder.as_deref(), i.fence), (Some(&b"new"[..]), f2));

    // After the new holder releases, the old fence is still refused: nobody holds the lock.
    assert_eq!(release(&mut c, key, "new"), 1);
    fs::write(dir.join("go2"), "").unwrap();
    assert_eq!(
        old.line_after("RESULT2 ", Duration::from_secs(20)),
        "FENCED the lock is not held"
    );
    let st = old
        .wait_exit(Duration::from_secs(20))
        .expect("the old holder did not exit");
    assert!(st.success(), "the old holder failed: {st}");
    assert_eq!(lrange(&mut c), expected);
    assert_eq!(
        cmd!(&mut c, "GET", value),
        Ok(Value::BulkString(b"new".to_vec()))
    );
    let (runs, refusals) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );
    assert_eq!(
        (runs - runs0, refusals - refusals0),
        (4, 3),
        "INFO lock_guarded_runs / lock_guarded_refusals: {runs0} -> {runs}, {refusals0} -> \
         {refusals}"
    );
    eprintln!(
        "paused holder: fence {f1}, stopped, its {TTL} ms lease ended; the new holder was \
         granted {f2} {:?} after the old one was started and wrote; the old one resumed {paused_ms} \
         ms after its grant and was refused (newer fence, then not held)",
        granted - spawned
    );
}
