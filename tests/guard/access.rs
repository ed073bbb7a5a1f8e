//! `LOCK.GUARD` and what checks or wraps its inner command (docs/commands.md, `LOCK.GUARD`, and
//! docs/operations.md, The server around a lock): the inner command is checked as if the caller had
//! sent it.
//!
//! 1. ACL command permissions and key patterns (for the inner keys and the lock key; `%R~`
//!    keys may be read and not written through the guard).
//! 2. `COMMAND GETKEYS`/`GETKEYSANDFLAGS` declare the lock key (read only) and the inner
//!    keys; `COMMAND INFO` gives the arity and flags.
//! 3. `MULTI`/`EXEC`: each guard is checked when `EXEC` runs it.
//! 4. `EVAL`: guarded commands from a script; a refusal is a script error.

use crate::cmd;
use crate::common::guard::*;
use crate::common::*;
use redis::{Connection, Value};

// ----------------------------------------------------------------------------------- ACL

/// Command permissions: a user allowed `LOCK.GUARD` and `GET` but not `SET` is refused an
/// inner `SET` (after the fence check), and may run an inner `GET`.
#[test]
fn acl_command_permissions_apply_to_the_inner_command() {
    let s = Server::new();
    let mut admin = s.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "limited",
            "on",
            ">pw",
            "~*",
            "+lock.guard",
            "+get"
        ),
        Ok(Value::Okay)
    );
    set(&mut admin, "data", "orig");
    let stale = hold(&mut admin, "lk");
    let f = fence(&mut admin, "lk", HOLDER).unwrap();
    let mut user = conn_as(&s, "limited");

    assert_err_starts(&cmd!(&mut user, "SET", "data", "x"), "NOPERM");
    let before = world(&mut admin, "lk", &["data"]);
    let r = guard(&mut user, "lk", f, &["set", "data", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM LOCK.GUARD: this user has no permissions to run 'set' or to touch its keys",
        "inner SET without +set",
    );
    let r = guard(&mut user, "lk", f, &["set", "fresh", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner SET of a new key without +set",
    );
    // The fence is checked first.
    let r = guard(&mut user, "lk", stale, &["set", "data", "new"]);
    assert_refused(&mut admin, &before, &r, NEWER, "a stale fence and no +set");

    let c = counters(&mut admin);
    assert_eq!(
        guard(&mut user, "lk", f, &["GET", "data"]),
        Ok(bulk("orig"))
    );
    assert_counted(&mut admin, c, 1, 0, "an allowed inner GET");
}

/// Key patterns: the server itself refuses keys outside the user's patterns (the inner
/// keys are declared), for the inner key and the lock key; `%R~` keys may be read and not
/// written through the guard.
#[test]
fn acl_key_patterns_apply_to_the_inner_keys() {
    let s = Server::new();
    let mut admin = s.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~lock:*",
            "~allowed:*",
            "+@all"
        ),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "reader", "on", ">pw", "~lock:*", "%R~ro:*", "+@all"),
        Ok(Value::Okay)
    );
    set(&mut admin, "other:1", "orig");
    set(&mut admin, "ro:1", "orig");
    let f = hold(&mut admin, "lock:1");
    let fo = hold(&mut admin, "other:lock");
    let mut app = conn_as(&s, "app");
    let mut reader = conn_as(&s, "reader");
    let data = ["other:1", "ro:1", "ro:2", "allowed:1", "allowed:2"];

    let server_noperm = |r: &Result<Value, String>, what: &str| {
        let e = r.as_ref().expect_err(what);
        assert!(
            e.starts_with("NOPERM") && !e.starts_with("NOPERM LOCK.GUARD"),
            "{what}: expected the server's own NOPERM, got {e:?}"
        );
    };

    let before = world(&mut admin, "lock:1", &data);
    let r = guard(&mut app, "lock:1", f, &["SET", "other:1", "new"]);
    server_noperm(&r, "inner SET outside the key patterns");
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner SET outside the key patterns",
    );
    let r = guard(
        &mut app,
        "lock:1",
        f,
        &["MSET", "allowed:2", "x", "other:1", "new"],
    );
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner MSET with one key outside",
    );

    let before = world(&mut admin, "other:lock", &data);
    let r = guard(&mut app, "other:lock", fo, &["SET", "allowed:1", "new"]);
    server_noperm(&r, "lock key outside the key patterns");
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "lock key outside the key patterns",
    );

    let before = world(&mut admin, "lock:1", &data);
    let r = guard(&mut reader, "lock:1", f, &["SET", "ro:1", "new"]);
    server_noperm(&r, "inner SET of a read-only key");
    assert_refused(&mut admin, &before, &r, "NOPERM", "inner SET of a %R~ key");

    let r = guard(
        &mut reader,
        "lock:1",
        f,
        &["MSET", "ro:1", "new", "ro:2", "new"],
    );
    assert_refused(&mut admin, &before, &r, "NOPERM", "inner MSET of %R~ keys");
    let r = guard(&mut reader, "lock:1", f, &["APPEND", "ro:1", "new"]);
    assert_refused(
        &mut admin,
        &before,
        &r,
        "NOPERM",
        "inner APPEND of a %R~ key",
    );

    let c = counters(&mut admin);
    assert_eq!(
        guard(&mut reader, "lock:1", f, &["GET", "ro:1"]),
        Ok(bulk("orig"))
    );
    assert_eq!(
        guard(&mut app, "lock:1", f, &["SET", "allowed:1", "v"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut admin, "allowed:1"), bulk("v"));
    assert_counted(
        &mut admin,
        c,
        2,
        0,
        "guarded commands inside the key patterns",
    );
}

// ---------------------------------------------------------------------- keys and metadata

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().map(text).collect(),
        other => panic!("expected an array of strings, got {other:?}"),
    }
}

/// `COMMAND GETKEYSANDFLAGS` as (key, flags).
fn keys_and_flags(v: &Value) -> Vec<(String, Vec<String>)> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|e| match e {
                Value::Array(kf) if kf.len() == 2 => (text(&kf[0]), strings(&kf[1])),
                other => panic!("GETKEYSANDFLAGS entry: {other:?}"),
            })
            .collect(),
        other => panic!("GETKEYSANDFLAGS: {other:?}"),
    }
}

#[test]
fn command_getkeys_declares_the_lock_key_and_the_inner_keys() {
    let s = Server::new();
    let mut con = s.conn();
    let f = hold(&mut con, "lk");
    let fs = f.to_string();
    let getkeys = |con: &mut Connection, inner: &[&str]| {
        let mut a = vec!["COMMAND", "GETKEYS", "LOCK.GUARD", "lk", &fs];
        a.extend_from_slice(inner);
        strings(&must(con, &args(&a)))
    };
    assert_eq!(getkeys(&mut con, &["SET", "x", "v"]), ["lk", "x"]);
    assert_eq!(
        getkeys(&mut con, &["MSET", "a", "1", "b", "2"]),
        ["lk", "a", "b"]
    );
    assert_eq!(getkeys(&mut con, &["GET", "x"]), ["lk", "x"]);
    assert_eq!(getkeys(&mut con, &["RENAME", "x", "y"]), ["lk", "x", "y"]);
    assert_eq!(getkeys(&mut con, &["PING"]), ["lk"]);

    // The lock key is only read (RO, access). Each inner key carries the flags the server's key
    // lookup for modules gives (docs/operations.md, `LOCK.GUARD` and the server): the command's own
    // where it has a key-finding function (SET), none otherwise — the guarded command's own ACL
    // check then applies the exact read/write rules (tested with `%R~` in the ACL test).
    let mut problems = Findings::default();
    for inner in [
        &["SET", "x", "v"][..],
        &["MSET", "a", "1", "b", "2"][..],
        &["GET", "x"][..],
        &["RENAME", "x", "y"][..],
        &["DEL", "x", "y"][..],
        &["LMOVE", "x", "y", "LEFT", "RIGHT"][..],
    ] {
        let mut a = vec!["COMMAND", "GETKEYSANDFLAGS", "LOCK.GUARD", "lk", &fs];
        a.extend_from_slice(inner);
        let got = keys_and_flags(&must(&mut con, &args(&a)));
        let mut p = vec!["COMMAND", "GETKEYSANDFLAGS"];
        p.extend_from_slice(inner);
        let plain = keys_and_flags(&must(&mut con, &args(&p)));
        problems.check(got.len() == plain.len() + 1, || {
            format!("{inner:?}: {got:?} is not the lock key and {plain:?}")
        });
        let Some((lock, rest)) = got.split_first() else {
            continue;
        };
        problems.check(lock.0 == "lk" && lock.1.iter().any(|f| f == "RO"), || {
            format!("{inner:?}: the lock key must come first, RO: {got:?}")
        });
        for w in ["RW", "OW", "RM", "insert", "update", "delete"] {
            problems.check(!lock.1.iter().any(|f| f == w), || {
                format!("{inner:?}: the lock key must not be {w}: {got:?}")
            });
        }
        let names = |v: &[(String, Vec<String>)]| v.iter().map(|k| k.0.clone()).collect::<Vec<_>>();
        problems.check(names(rest) == names(&plain), || {
            format!("{inner:?}: inner keys {rest:?}, plainly {plain:?}")
        });
        for (got, want) in rest.iter().zip(&plain) {
            problems.check(got.1.is_empty() || got.1 == want.1, || {
                format!(
                    "{inner:?}: {} has flags {:?}, plainly {:?}",
                    got.0, got.1, want.1
                )
            });
        }
        if inner[0] == "SET" {
            problems.check(rest == &plain[..], || {
                format!("SET: inner keys and flags {rest:?}, plainly {plain:?}")
            });
        }
    }
    problems.done("COMMAND GETKEYSANDFLAGS LOCK.GUARD");

    // COMMAND INFO: arity -4, a write command with movable keys, not deny-oom.
    let info = must(&mut con, &args(&["COMMAND", "INFO", "lock.guard"]));
    let Value::Array(entries) = info else {
        panic!("COMMAND INFO: {info:?}")
    };
    let Some(Value::Array(e)) = entries.first() else {
        panic!("COMMAND INFO lock.guard: {entries:?}")
    };
    assert_eq!(text(&e[0]), "lock.guard");
    assert_eq!(e[1], Value::Int(-4), "arity");
    let flags = strings(&e[2]);
    for want in ["write", "movablekeys"] {
        assert!(
            flags.iter().any(|f| f == want),
            "flags {flags:?} lack {want}"
        );
    }
    assert!(
        !flags.iter().any(|f| f == "denyoom"),
        "flags {flags:?}: must not be denyoom"
    );
}

// --------------------------------------------------------------------- MULTI/EXEC and EVAL

/// Each `LOCK.GUARD` in a transaction is checked when `EXEC` runs it: one passes, one with a
/// stale fence is refused, one whose fence a `LOCK.FENCE` earlier in the same transaction
/// made stale is refused; a fence made stale between queueing and `EXEC` is refused.
#[test]
fn guards_in_a_transaction_are_checked_when_exec_runs_them() {
    let s = Server::new();
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let c = counters(&mut con);
    let r = transaction(
        &mut con,
        &[
            guard_cmd("lk", f, &["SET", "a", "1"]),
            guard_cmd("lk", stale, &["SET", "b", "2"]),
            args(&["LOCK.FENCE", "lk", HOLDER]),
            guard_cmd("lk", f, &["SET", "c", "3"]),
        ],
    );
    assert_eq!(r.len(), 4, "EXEC: {r:?}");
    assert_eq!(r[0], Ok(Value::Okay), "the current fence: {r:?}");
    assert_err_starts(&r[1], NEWER);
    let Ok(Value::Int(f2)) = r[2] else {
        panic!("LOCK.FENCE in EXEC: {r:?}")
    };
    assert!(f2 > f);
    assert_err_starts(&r[3], NEWER);
    assert_eq!(get(&mut con, "a"), bulk("1"));
    assert!(
        !exists(&mut con, "b") && !exists(&mut con, "c"),
        "a refused guard ran in EXEC"
    );
    assert_counted(&mut con, c, 1, 2, "MULTI with one run and two refusals");

    // Queued under the current fence, made stale before EXEC by another client.
    let mut other = s.conn();
    assert_eq!(cmd!(&mut con, "MULTI"), Ok(Value::Okay));
    let q = run_raw(&mut con, &guard_cmd("lk", f2, &["SET", "d", "4"]));
    assert_eq!(q, Ok(Value::SimpleString("QUEUED".into())));
    let q = run_raw(&mut con, &guard_cmd("lk", f2, &["GET", "a"]));
    assert_eq!(q, Ok(Value::SimpleString("QUEUED".into())));
    let f3 = fence(&mut other, "lk", HOLDER).unwrap();
    match exec_raw(&mut con) {
        Ok(Value::Array(items)) => {
            assert_eq!(items.len(), 2, "EXEC: {items:?}");
            for i in &items {
                assert_err_starts(&item(i), NEWER);
            }
        }
        other => panic!("EXEC: {other:?}"),
    }
    assert!(!exists(&mut con, "d"));
    assert_eq!(
        transaction(&mut con, &[guard_cmd("lk", f3, &["SET", "d", "5"])]),
        vec![Ok(Value::Okay)]
    );
    assert_eq!(get(&mut con, "d"), bulk("5"));
}

const PCALL_SCRIPT: &str = "local r = redis.pcall('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', \
                            KEYS[2], ARGV[2]) \
                            if type(r) == 'table' and r.err then return 'caught: ' .. r.err end \
                            return 'ran'";

#[test]
fn eval_runs_guarded_commands_and_a_refusal_is_a_script_error() {
    let s = Server::new();
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let c = counters(&mut con);
    assert_eq!(
        cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "data", f, "v1"),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "data"), bulk("v1"));
    assert_eq!(
        cmd!(
            &mut con,
            "EVAL",
            "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'INCRBY', KEYS[2], 5)",
            2,
            "lk",
            "n",
            f
        ),
        Ok(Value::Int(5))
    );
    assert_counted(&mut con, c, 2, 0, "two guarded commands from EVAL");

    let before = world(&mut con, "lk", &["data"]);
    let r = cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "data", stale, "v2");
    assert_refused(&mut con, &before, &r, NEWER, "EVAL with a stale fence");

    let before = world(&mut con, "lk", &["data"]);
    let r = cmd!(&mut con, "EVAL", PCALL_SCRIPT, 2, "lk", "data", stale, "v3");
    match &r {
        Ok(Value::BulkString(b)) => {
            let t = String::from_utf8_lossy(b);
            assert!(
                t.starts_with(&format!("caught: {NEWER}")),
                "redis.pcall: {t}"
            );
        }
        other => panic!("redis.pcall: {other:?}"),
    }
    assert_nothing_ran(
        &mut con,
        &before,
        0,
        1,
        "EVAL with redis.pcall and a stale fence",
    );
    assert_eq!(
        cmd!(&mut con, "EVAL", PCALL_SCRIPT, 2, "lk", "data", f, "v4"),
        Ok(bulk("ran"))
    );
    assert_eq!(get(&mut con, "data"), bulk("v4"));
}
