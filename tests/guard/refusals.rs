//! `LOCK.GUARD key fence command [arg ...]` refused (docs/commands.md, `LOCK.GUARD` and
//! Errors): every
//! refusal and its error, in the order they are checked (arity, fence, the inner command, the
//! key's type, the fence itself). Each refused call changes nothing and counts only where
//! `INFO lock` says (`lock_guarded_refusals` for `FENCED` replies).
//!
//! 1. Each reason a fence is refused (not held, a newer fence, an older one), a lease that
//!    ended before the sweep removed its key, and a holder that slept past its lease.
//! 2. Bad arguments: the arity, a fence that is not an integer, or not a positive one.
//! 3. The checks in their documented order.
//! 4. Inner commands that cannot be guarded (unknown, their own arity, blocking, `noscript`,
//!    `LOCK.*`), refused before the fence and the key's type are looked at; a container
//!    command (`CONFIG`, `CLIENT`, `ACL`, `SCRIPT`, `OBJECT`) by its subcommand's own arity
//!    and flags.

use crate::cmd;
use std::thread::sleep;
use std::time::Duration;

use crate::common::guard::*;
use crate::common::*;
use redis::{Connection, ConnectionLike, Value};

/// A fence that is an integer, but not a positive one (0, or below).
const NOT_POSITIVE: &str = "ERR fence must be a positive integer";

// ------------------------------------------------------------------------ fence refusals

/// Each reason the fence is refused, with its error; the inner command (which would change
/// `data`) does not run, nothing else changes, and each counts one refusal, no run.
#[test]
fn every_fence_refusal_names_its_reason_and_changes_nothing() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let inner = ["SET", "data", "new"];
    let check = |con: &mut Connection, key: &str, fence: i64, expected: &str, what: &str| {
        // The same refusal whatever the inner command.
        for inner in [
            &inner[..],
            &["DEL", "data"][..],
            &["INCR", "fresh-counter"][..],
            &["GET", "data"][..],
        ] {
            let before = world(con, key, &["data"]);
            let r = guard(con, key, fence, inner);
            assert_refused(
                con,
                &before,
                &r,
                expected,
                &format!("{what}, inner {inner:?}"),
            );
        }
    };

    // Not held: no key at all (a real fence, of another key).
    let f_other = hold(&mut con, "other");
    check(&mut con, "nokey", f_other, NOT_HELD, "no lock at the key");

    // Not held: released.
    let f = hold(&mut con, "released");
    assert_eq!(release(&mut con, "released", HOLDER), 1);
    check(&mut con, "released", f, NOT_HELD, "after LOCK.RELEASE");

    // Not held: the lease ended (the sweep has most likely removed the key by now; the key
    // still there is a_lease_that_ended_is_refused_before_the_sweep_removes_its_key).
    let f = acquire(&mut con, "ended", HOLDER, 50).unwrap();
    sleep(Duration::from_millis(120));
    check(&mut con, "ended", f, NOT_HELD, "after the lease ended");

    // Newer: LOCK.FENCE issued a new fence to the same hold.
    let f0 = hold(&mut con, "fenced");
    let f1 = fence(&mut con, "fenced", HOLDER).unwrap();
    assert!(f1 > f0);
    check(&mut con, "fenced", f0, NEWER, "the fence before LOCK.FENCE");

    // Newer: released, then acquired by another token.
    let f0 = hold(&mut con, "reacquired");
    assert_eq!(release(&mut con, "reacquired", HOLDER), 1);
    let f1 = acquire(&mut con, "reacquired", "second", TTL).unwrap();
    assert!(f1 > f0);
    check(
        &mut con,
        "reacquired",
        f0,
        NEWER,
        "the first holder's fence after a re-acquire",
    );

    // Newer: the lease ended, then another token acquired it.
    let f0 = acquire(&mut con, "expired", HOLDER, 50).unwrap();
    sleep(Duration::from_millis(120));
    let f1 = acquire(&mut con, "expired", "second", TTL).unwrap();
    assert!(f1 > f0);
    check(
        &mut con,
        "expired",
        f0,
        NEWER,
        "a fence whose lease ended, after a re-acquire",
    );

    // Newer: a smaller fence, issued to another key.
    let f_before = hold(&mut con, "earlier");
    let f = hold(&mut con, "current");
    assert!(f > f_before);
    check(
        &mut con,
        "current",
        f_before,
        NEWER,
        "a smaller fence of another key",
    );

    // Older: a fence never issued to this hold.
    check(&mut con, "current", f + 1, OLDER, "fence + 1");
    let f_later = hold(&mut con, "later");
    assert!(f_later > f);
    check(
        &mut con,
        "current",
        f_later,
        OLDER,
        "a larger fence of another key",
    );

    // The key holds another type: WRONGTYPE, counted as no refusal.
    set(&mut con, "str", "a string");
    check(&mut con, "str", f, WRONGTYPE, "a string key");

    // And with the right fence, the same command runs.
    assert_eq!(guard(&mut con, "current", f, &inner), Ok(Value::Okay));
    assert_eq!(get(&mut con, "data"), bulk("new"));
}

/// A lease that has ended refuses the guard even while its key is still there: the sweep
/// removes an ended lock within milliseconds, so the guard must come first. `DEBUG SLEEP`
/// holds the server past the lease's end, and the commands after it were written in the
/// same write, so the server runs them from its input buffer one after the other, with no
/// turn of its event loop (where the sweep runs) in between. `EXISTS` shows that the key was
/// still there when the guard ran; should the sweep have run before the sleep (the test
/// process stalled for the whole lease), the round is tried again on a fresh key.
#[test]
fn a_lease_that_ended_is_refused_before_the_sweep_removes_its_key() {
    let s = Server::new();
    let mut con = s.conn();
    for round in 0..5 {
        let lk = format!("ended-unswept-{round}");
        let f = acquire(&mut con, &lk, HOLDER, 100).expect("a fresh key is free");
        let c = counters(&mut con);
        let mut p = redis::pipe();
        p.cmd("DEBUG").arg("SLEEP").arg("0.2");
        p.cmd("EXISTS").arg(&lk);
        p.cmd("LOCK.GUARD")
            .arg(&lk)
            .arg(f)
            .arg("SET")
            .arg("data")
            .arg("new");
        p.cmd("GET").arg("data");
        // One write: the four commands reach the server's input buffer together.
        let replies = con
            .req_packed_commands(&p.get_packed_pipeline(), 0, 4)
            .expect("the pipeline's replies");
        let replies: Vec<Result<Value, String>> = replies.iter().map(item).collect();
        assert_eq!(replies[0], Ok(Value::Okay), "DEBUG SLEEP 0.2");
        assert_eq!(
            replies[2],
            Err(NOT_HELD.to_string()),
            "LOCK.GUARD {lk} <fence> SET data new, 100 ms after a lease of 100 ms ended"
        );
        assert_eq!(
            replies[3],
            Ok(Value::Nil),
            "GET data after the refused guard"
        );
        assert_counted(&mut con, c, 0, 1, "a guard after the lease ended");
        match &replies[1] {
            Ok(Value::Int(1)) => return,
            Ok(Value::Int(0)) => continue,
            other => panic!("EXISTS {lk}: {other:?}"),
        }
    }
    panic!("the sweep removed the lock before DEBUG SLEEP in every round: the test proved nothing");
}

/// A holder that slept past its lease while another took the lock and wrote: its write
/// with its old fence is refused, and the data shows only the new holder's writes.
#[test]
fn a_holder_that_slept_past_its_lease_is_refused() {
    let s = Server::new();
    let mut a = s.conn();
    let mut b = s.conn();
    let fa = acquire(&mut a, "lk", "a", 100).unwrap();
    assert_eq!(
        guard(&mut a, "lk", fa, &["RPUSH", "log", "a1"]),
        Ok(Value::Int(1))
    );
    sleep(Duration::from_millis(180));
    let fb = acquire(&mut b, "lk", "b", TTL).expect("the lease of a ended");
    assert!(fb > fa);
    assert_eq!(
        guard(&mut b, "lk", fb, &["RPUSH", "log", "b1"]),
        Ok(Value::Int(2))
    );
    let before = world(&mut a, "lk", &["log"]);
    let r = guard(&mut a, "lk", fa, &["RPUSH", "log", "a2"]);
    assert_refused(&mut a, &before, &r, NEWER, "the woken holder's write");
    assert_eq!(
        guard(&mut b, "lk", fb, &["RPUSH", "log", "b2"]),
        Ok(Value::Int(3))
    );
    assert_eq!(
        cmd!(&mut a, "LRANGE", "log", 0, -1),
        Ok(Value::Array(vec![bulk("a1"), bulk("b1"), bulk("b2")]))
    );
}

// ------------------------------------------------------------------------- bad arguments

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let f = hold(&mut con, "lk");
    let fs = f.to_string();

    for a in [
        vec!["LOCK.GUARD"],
        vec!["LOCK.GUARD", "lk"],
        vec!["LOCK.GUARD", "lk", &fs],
        vec!["lock.guard", "lk", &fs],
    ] {
        let before = world(&mut con, "lk", &["data"]);
        let r = run_raw(&mut con, &args(&a));
        assert_refused(&mut con, &before, &r, ARITY, &format!("{a:?}"));
    }

    for (bad, expected) in [
        ("0", NOT_POSITIVE),
        ("-1", NOT_POSITIVE),
        ("-9223372036854775808", NOT_POSITIVE),
        ("abc", BAD_FENCE),
        ("18446744073709551616", BAD_FENCE),
        ("1.5", BAD_FENCE),
        ("", BAD_FENCE),
        ("-0", BAD_FENCE),
    ] {
        let before = world(&mut con, "lk", &["data"]);
        let r = guard_text(&mut con, "lk", bad, &["SET", "data", "new"]);
        assert_eq!(r, Err(expected.to_string()), "fence {bad:?}");
        assert_refused(&mut con, &before, &r, expected, &format!("fence {bad:?}"));
    }
    assert_eq!(get(&mut con, "data"), bulk("orig"));
}

/// The checks run in their documented order: arity, fence, inner command, the key's type,
/// the fence against the hold.
#[test]
fn checks_run_in_order() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    set(&mut con, "str", "x");
    let f = hold(&mut con, "lk");
    let cases: Vec<(&str, String, Vec<&str>, &str, &str)> = vec![
        (
            "str",
            "abc".into(),
            vec!["NoSuchCmd"],
            BAD_FENCE,
            "bad fence before inner, type",
        ),
        (
            "lk",
            "0".into(),
            vec!["SET", "data"],
            NOT_POSITIVE,
            "bad fence before inner arity",
        ),
        (
            "str",
            f.to_string(),
            vec!["NoSuchCmd"],
            "ERR LOCK.GUARD: unknown command 'NoSuchCmd'",
            "inner before the key's type",
        ),
        (
            "nokey",
            f.to_string(),
            vec!["SET", "data"],
            "ERR LOCK.GUARD: wrong number of arguments for 'SET'",
            "inner arity before the fence",
        ),
        (
            "str",
            f.to_string(),
            vec!["SET", "data", "new"],
            WRONGTYPE,
            "type before the fence",
        ),
        (
            "lk",
            (f + 1).to_string(),
            vec!["SET", "data", "new"],
            OLDER,
            "fence last",
        ),
    ];
    for (key, fence_text, inner, expected, what) in cases {
        let before = world(&mut con, key, &["data", "str"]);
        let r = guard_text(&mut con, key, &fence_text, &inner);
        assert_refused(&mut con, &before, &r, expected, what);
    }
}

// ---------------------------------------------------------------- inner command refusals

/// Inner commands that cannot be guarded, with the error expected (a prefix): unknown,
/// wrong arity, blocking, `noscript`, `LOCK.*`. Each of them would change something if it
/// ran (pop, move, release, fence, enter a transaction or subscribed mode).
fn refused_inners(lk: &str, fence: i64) -> Vec<(Vec<String>, String)> {
    let f = fence.to_string();
    let e = |m: &str| format!("ERR LOCK.GUARD: {m}");
    let blocks = |name: &str| e(&format!("'{name}' blocks and cannot be guarded"));
    let noscript = |name: &str| {
        e(&format!(
            "'{name}' cannot be guarded: scripts may not run it"
        ))
    };
    let lock = |name: &str| e(&format!("'{name}' cannot be guarded: it is a LOCK command"));
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (v(&["NoSuchCmd", "x"]), e("unknown command 'NoSuchCmd'")),
        (v(&["foo"]), e("unknown command 'foo'")),
        (
            v(&["set", "data"]),
            e("wrong number of arguments for 'set'"),
        ),
        (v(&["get"]), e("wrong number of arguments for 'get'")),
        (
            v(&["get", "data", "extra"]),
            e("wrong number of arguments for 'get'"),
        ),
        (v(&["blpop", "list", "0"]), blocks("blpop")),
        (v(&["brpop", "list", "1"]), blocks("brpop")),
        (
            v(&["blmove", "list", "dst", "LEFT", "RIGHT", "0"]),
            blocks("blmove"),
        ),
        (v(&["bzpopmin", "z", "0"]), blocks("bzpopmin")),
        (
            v(&["xread", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"]),
            blocks("xread"),
        ),
        (v(&["XREAD", "STREAMS", "s", "0"]), blocks("XREAD")),
        (
            v(&[
                "xreadgroup",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ]),
            blocks("xreadgroup"),
        ),
        // Blocking on some servers, noscript on others (Redis 7.0): refused either way.
        (v(&["wait", "0", "0"]), e("'wait' ")),
        (v(&["multi"]), noscript("multi")),
        (v(&["MULTI"]), noscript("MULTI")),
        (v(&["exec"]), noscript("exec")),
        (v(&["discard"]), noscript("discard")),
        (v(&["watch", "data"]), noscript("watch")),
        (v(&["unwatch"]), noscript("unwatch")),
        (v(&["subscribe", "ch"]), noscript("subscribe")),
        (v(&["psubscribe", "ch*"]), noscript("psubscribe")),
        (v(&["ssubscribe", "ch"]), noscript("ssubscribe")),
        (
            v(&[
                "eval",
                "return redis.call('SET', KEYS[1], 'new')",
                "1",
                "data",
            ]),
            noscript("eval"),
        ),
        (v(&["fcall", "f", "0"]), noscript("fcall")),
        // A container's subcommand, judged by its own flags and arity (issue 22: these
        // reached the server, which refused them in its own words, or FENCED came first).
        (
            v(&["CONFIG", "SET", "maxmemory", "12345"]),
            noscript("CONFIG|SET"),
        ),
        (v(&["config", "get", "maxmemory"]), noscript("config|get")),
        (
            v(&["CLIENT", "KILL", "ID", "999999"]),
            noscript("CLIENT|KILL"),
        ),
        (
            v(&["acl", "SETUSER", "intruder", "on", "+@all", "~*"]),
            noscript("acl|SETUSER"),
        ),
        (v(&["SCRIPT", "FLUSH"]), noscript("SCRIPT|FLUSH")),
        (v(&["client", "id"]), noscript("client|id")),
        (
            v(&["CONFIG", "SET", "maxmemory"]),
            e("wrong number of arguments for 'CONFIG|SET'"),
        ),
        (
            v(&["OBJECT", "ENCODING"]),
            e("wrong number of arguments for 'OBJECT|ENCODING'"),
        ),
        (v(&["OBJECT"]), e("wrong number of arguments for 'OBJECT'")),
        (
            v(&["CONFIG", "NOSUCH", "x"]),
            e("unknown command 'CONFIG|NOSUCH'"),
        ),
        (
            v(&["config|set", "maxmemory", "1"]),
            e("unknown command 'config|set'"),
        ),
        (
            v(&["OBJECT", "encoding|x", "data"]),
            e("unknown command 'OBJECT|encoding|x'"),
        ),
        (
            v(&["lock.acquire", "elsewhere", "t", "1000"]),
            lock("lock.acquire"),
        ),
        (
            v(&["LOCK.ACQUIRE", lk, "t", "1000", "WAIT", "0"]),
            lock("LOCK.ACQUIRE"),
        ),
        (v(&["LOCK.RELEASE", lk, HOLDER]), lock("LOCK.RELEASE")),
        (v(&["lock.fence", lk, HOLDER]), lock("lock.fence")),
        (v(&["LOCK.EXTEND", lk, HOLDER, "1"]), lock("LOCK.EXTEND")),
        (v(&["LOCK.INFO", lk]), lock("LOCK.INFO")),
        (
            v(&["LOCK.GUARD", lk, &f, "SET", "data", "new"]),
            lock("LOCK.GUARD"),
        ),
    ]
}

/// Every inner refusal changes nothing, leaves the connection as it was (not in a
/// transaction, not subscribed, watching nothing), counts in neither counter, and comes
/// before the fence and the key's type are looked at: the same error with the current
/// fence, a stale one, no lock at the key, and a string key.
#[test]
fn inner_commands_that_cannot_be_guarded_are_refused_before_the_fence() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    assert_eq!(cmd!(&mut con, "RPUSH", "list", "a", "b"), Ok(Value::Int(2)));
    assert_eq!(cmd!(&mut con, "ZADD", "z", 1, "m"), Ok(Value::Int(1)));
    cmd!(&mut con, "XADD", "s", "1-1", "f", "v").unwrap();
    assert_eq!(
        cmd!(&mut con, "XGROUP", "CREATE", "s", "g", "0"),
        Ok(Value::Okay)
    );
    set(&mut con, "str", "x");
    let stale = hold(&mut con, "lk");
    let current = fence(&mut con, "lk", HOLDER).unwrap();
    let data_keys = ["data", "list", "z", "s", "str"];

    for (key, fence, situation) in [
        ("lk", current, "held, current fence"),
        ("lk", stale, "held, stale fence"),
        ("nokey", current, "no lock at the key"),
        ("str", current, "a string key"),
    ] {
        for (inner, expected) in refused_inners("lk", current) {
            let inner: Vec<&str> = inner.iter().map(String::as_str).collect();
            let what = format!("[{situation}] LOCK.GUARD {key} <fence> {}", inner.join(" "));
            let before = world(&mut con, key, &data_keys);
            let lock_before = world(&mut con, "lk", &[]);
            let r = guard(&mut con, key, fence, &inner);
            assert_refused(&mut con, &before, &r, &expected, &what);
            assert_nothing_ran(&mut con, &lock_before, 0, 0, &format!("{what} (lk)"));
            // The connection is neither in a transaction nor subscribed.
            assert_eq!(
                cmd!(&mut con, "GET", "data"),
                Ok(bulk("orig")),
                "{what}: the connection changed state"
            );
        }
    }

    // The refused WATCH watches nothing: a change to data does not abort a transaction.
    let mut other = s.conn();
    set(&mut other, "data", "changed");
    let r = transaction(&mut con, &[args(&["SET", "after-watch", "1"])]);
    assert_eq!(r, vec![Ok(Value::Okay)], "a refused WATCH must not watch");
}

/// A container command is judged by its subcommand (docs/commands.md, `LOCK.GUARD`): `CONFIG SET`,
/// `CLIENT KILL`, `ACL SETUSER` and `SCRIPT FLUSH` are kept from scripts, so they cannot be
/// guarded, with a current fence and with a stale one alike, and none of them does anything
/// (the setting, the connection, the user and the script are all still there). `OBJECT
/// ENCODING`, which scripts may run, is guarded like any command: it runs under the current
/// fence and is `FENCED` under the stale one.
#[test]
fn container_subcommands_are_judged_by_their_own_flags() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let mut victim = s.conn();
    let victim_id: u64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut victim)
        .expect("CLIENT ID");
    let sha = match cmd!(&mut con, "SCRIPT", "LOAD", "return 1") {
        Ok(v) => text(&v),
        other => panic!("SCRIPT LOAD: {other:?}"),
    };
    let maxmemory = || cmd!(&mut s.conn(), "CONFIG", "GET", "maxmemory");
    let config_before = maxmemory();
    let stale = hold(&mut con, "lk");
    let current = fence(&mut con, "lk", HOLDER).unwrap();
    let victim_arg = victim_id.to_string();
    let refused: [(&[&str], &str); 4] = [
        (&["CONFIG", "SET", "maxmemory", "12345"], "CONFIG|SET"),
        (&["CLIENT", "KILL", "ID", &victim_arg], "CLIENT|KILL"),
        (
            &["ACL", "SETUSER", "intruder", "on", "nopass", "+@all", "~*"],
            "ACL|SETUSER",
        ),
        (&["SCRIPT", "FLUSH"], "SCRIPT|FLUSH"),
    ];
    for (fence, situation) in [(current, "current fence"), (stale, "stale fence")] {
        for (inner, name) in refused {
            let what = format!("[{situation}] LOCK.GUARD lk <fence> {}", inner.join(" "));
            let before = world(&mut con, "lk", &["data"]);
            let r = guard(&mut con, "lk", fence, inner);
            let expected =
                format!("ERR LOCK.GUARD: '{name}' cannot be guarded: scripts may not run it");
            assert_eq!(r, Err(expected), "{what}");
            assert_nothing_ran(&mut con, &before, 0, 0, &what);
            assert_eq!(maxmemory(), config_before, "{what}: maxmemory changed");
            assert!(
                client_connected(&mut con, victim_id),
                "{what}: the victim connection was killed"
            );
            assert_eq!(
                cmd!(&mut con, "ACL", "GETUSER", "intruder"),
                Ok(Value::Nil),
                "{what}: the user was created"
            );
            assert_eq!(
                cmd!(&mut con, "SCRIPT", "EXISTS", sha.as_str()),
                Ok(Value::Array(vec![Value::Int(1)])),
                "{what}: the script cache was flushed"
            );
        }
    }
    assert_eq!(
        cmd!(&mut victim, "PING"),
        Ok(Value::SimpleString("PONG".into()))
    );

    // A subcommand scripts may run: guarded like any other command.
    let inner = ["OBJECT", "ENCODING", "data"];
    let c = counters(&mut con);
    let r = guard(&mut con, "lk", current, &inner);
    assert_eq!(
        r,
        cmd!(&mut con, "OBJECT", "ENCODING", "data"),
        "OBJECT ENCODING ran"
    );
    assert!(
        matches!(r, Ok(Value::BulkString(_))),
        "OBJECT ENCODING: {r:?}"
    );
    assert_counted(&mut con, c, 1, 0, "OBJECT ENCODING under the current fence");
    let before = world(&mut con, "lk", &["data"]);
    let r = guard(&mut con, "lk", stale, &inner);
    assert_refused(
        &mut con,
        &before,
        &r,
        NEWER,
        "OBJECT ENCODING under a stale fence",
    );
}
