//! ACL key patterns on every lock command, commands granted one by one, the `lock` ACL
//! category where the server supports it, and `COMMAND GETKEYS`.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::*;
use redis::{Connection, Value};

/// A note that `cargo test` does not swallow.
fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Each LOCK.* command (but the internal LOCK.APPLY) with `key` as its key.
fn every_command(key: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        s(&["LOCK.ACQUIRE", key, "t", "10000"]),
        s(&["LOCK.ACQUIRE", key, "t", "10000", "WAIT", "100"]),
        s(&["LOCK.EXTEND", key, "t", "10000"]),
        s(&["LOCK.FENCE", key, "t"]),
        s(&["LOCK.INFO", key]),
        s(&["LOCK.RELEASE", key, "t"]),
    ]
}

fn run_args(con: &mut Connection, args: &[String]) -> Result<Value, String> {
    let raw: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    run_raw(con, &raw)
}

/// The whole flow on `key` as the user of `con`: acquire, fence, extend, info, release.
#[track_caller]
fn flow_allowed(con: &mut Connection, key: &str) {
    let f = acquire(con, key, "t", 10_000).expect("free");
    assert!(fence(con, key, "t").unwrap() > f);
    assert_eq!(extend(con, key, "t", 10_000), 1);
    assert!(info(con, key).is_some());
    assert_eq!(release(con, key, "t"), 1);
}

#[test]
fn acl_key_patterns_apply_to_every_lock_command() {
    let server = Server::new();
    let mut admin = server.conn();
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"),
        Ok(Value::Okay)
    );
    let mut app = conn_as(&server, "app");
    for args in every_command("other:1") {
        let t0 = Instant::now();
        let r = run_args(&mut app, &args);
        assert_err_starts(&r, "NOPERM");
        assert!(
            t0.elapsed() < Duration::from_millis(90),
            "a refused WAIT must not block"
        );
    }
    assert!(!exists(&mut admin, "other:1"), "a refused command wrote");
    flow_allowed(&mut app, "app:1");

    // ACL LOG names the key and the user.
    let log = cmd!(&mut admin, "ACL", "LOG", 1).unwrap();
    let text = format!("{log:?}");
    assert!(
        text.contains("other:1") && text.contains("app") && text.contains("key"),
        "ACL LOG: {text}"
    );
    // ACL DRYRUN agrees.
    match cmd!(
        &mut admin,
        "ACL",
        "DRYRUN",
        "app",
        "LOCK.ACQUIRE",
        "other:1",
        "t",
        10
    ) {
        Ok(Value::BulkString(b)) => {
            let s = String::from_utf8_lossy(&b);
            assert!(s.contains("other:1"), "ACL DRYRUN: {s}");
        }
        other => panic!("ACL DRYRUN: {other:?}"),
    }
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "DRYRUN",
            "app",
            "LOCK.ACQUIRE",
            "app:1",
            "t",
            10
        ),
        Ok(Value::Okay)
    );

    // Read-only key permission (%R~) allows LOCK.INFO and nothing that writes.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "viewer", "on", ">pw", "%R~app:*", "+@all"),
        Ok(Value::Okay)
    );
    acquire(&mut admin, "app:2", "owner", 10_000).unwrap();
    let mut viewer = conn_as(&server, "viewer");
    assert!(info(&mut viewer, "app:2").is_some());
    for args in every_command("app:2")
        .into_iter()
        .filter(|a| a[0] != "LOCK.INFO")
    {
        assert_err_starts(&run_args(&mut viewer, &args), "NOPERM");
    }
}

#[test]
fn acl_commands_granted_one_by_one() {
    let server = Server::new();
    let mut admin = server.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "worker",
            "on",
            ">pw",
            "~*",
            "+lock.acquire",
            "+lock.release",
            "+lock.info"
        ),
        Ok(Value::Okay)
    );
    let mut w = conn_as(&server, "worker");
    acquire(&mut w, "job:1", "t", 10_000).unwrap();
    assert!(info(&mut w, "job:1").is_some());
    assert_err_starts(&cmd!(&mut w, "LOCK.FENCE", "job:1", "t"), "NOPERM");
    assert_err_starts(&cmd!(&mut w, "LOCK.EXTEND", "job:1", "t", 1000), "NOPERM");
    assert_err_starts(&cmd!(&mut w, "GET", "job:1"), "NOPERM");
    assert_eq!(release(&mut w, "job:1", "t"), 1);
}

#[test]
fn command_getkeys_returns_the_lock_key() {
    let server = Server::new();
    let mut con = server.conn();
    for args in every_command("orders:42") {
        let mut c = redis::cmd("COMMAND");
        c.arg("GETKEYS").arg(&args);
        assert_eq!(
            run(&c, &mut con),
            Ok(Value::Array(vec![Value::BulkString(b"orders:42".to_vec())])),
            "COMMAND GETKEYS {args:?}"
        );
        // The key spec's access flags: LOCK.INFO reads, every other command writes.
        let mut c = redis::cmd("COMMAND");
        c.arg("GETKEYSANDFLAGS").arg(&args);
        let v = run(&c, &mut con).unwrap();
        let flags = format!("{v:?}");
        let (want, not) = if args[0] == "LOCK.INFO" {
            ("\"RO\"", "\"RW\"")
        } else {
            ("\"RW\"", "\"RO\"")
        };
        assert!(
            flags.contains("orders:42") && flags.contains(want) && !flags.contains(not),
            "COMMAND GETKEYSANDFLAGS {args:?}: {flags}"
        );
    }
}

/// `(server, major, minor)` from `INFO server`: `("valkey", 8, 1)`, `("redis", 7, 0)`.
fn server_version(con: &mut Connection) -> (String, u32, u32) {
    let (name, version) = match info_field(con, "server", "valkey_version") {
        Some(v) => ("valkey", v),
        None => (
            "redis",
            info_field(con, "server", "redis_version").expect("redis_version"),
        ),
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        name.to_string(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn lock_acl_category_where_the_server_supports_it() {
    let server = Server::new();
    let mut admin = server.conn();
    let (name, major, minor) = server_version(&mut admin);
    // Module ACL categories came with Redis 7.4 (RedisModule_AddACLCategory); Valkey has
    // them from 8.0.
    let supported = match name.as_str() {
        "valkey" => major >= 8,
        _ => (major, minor) >= (7, 4),
    };
    let cats: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    assert_eq!(
        cats.iter().any(|c| c == "lock"),
        supported,
        "{name} {major}.{minor}: ACL CAT {cats:?}"
    );
    let modules = format!("{:?}", cmd!(&mut admin, "MODULE", "LIST").unwrap());
    assert!(modules.contains("lock"), "MODULE LIST: {modules}");

    if !supported {
        note(&format!(
            "{name} {major}.{minor} has no module ACL categories: checked that the module \
             loaded and said so, and that +@lock is refused"
        ));
        let log = std::fs::read_to_string(server.log_path()).unwrap();
        assert!(
            log.contains("does not support adding new ACL categories"),
            "the module should log why it has no category; log:\n{log}"
        );
        assert_err_starts(
            &cmd!(&mut admin, "ACL", "SETUSER", "locker", "+@lock"),
            "ERR",
        );
        flow_allowed(&mut admin, "app:1");
        return;
    }

    let mut in_cat: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("lock")
        .query(&mut admin)
        .unwrap();
    in_cat.sort();
    for c in [
        "lock.acquire",
        "lock.extend",
        "lock.fence",
        "lock.info",
        "lock.release",
    ] {
        assert!(in_cat.iter().any(|x| x == c), "ACL CAT lock: {in_cat:?}");
    }
    assert!(
        in_cat.iter().all(|c| c.starts_with("lock.")),
        "ACL CAT lock: {in_cat:?}"
    );

    // +@lock alone: the lock commands on the user's keys, nothing else.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "locker", "on", ">pw", "~app:*", "+@lock"),
        Ok(Value::Okay)
    );
    let mut locker = conn_as(&server, "locker");
    flow_allowed(&mut locker, "app:1");
    assert_err_starts(&cmd!(&mut locker, "GET", "app:1"), "NOPERM");
    assert_err_starts(
        &cmd!(&mut locker, "LOCK.ACQUIRE", "other:1", "t", 1000),
        "NOPERM",
    );

    // +@all -@lock: everything but the lock commands.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "nolock", "on", ">pw", "~*", "+@all", "-@lock"),
        Ok(Value::Okay)
    );
    let mut nolock = conn_as(&server, "nolock");
    assert_eq!(cmd!(&mut nolock, "GET", "app:1"), Ok(Value::Nil));
    for args in every_command("app:1") {
        assert_err_starts(&run_args(&mut nolock, &args), "NOPERM");
    }
}
