//! What `LOCK.OBSERVE` obeys of the server, as `LOCK.ACQUIRE … WAIT` does (docs/commands.md,
//! `LOCK.ACQUIRE`, "Leaving" and "Where it does not block"): `CLIENT UNBLOCK` with and without
//! `ERROR`, disconnects, `MULTI` and scripts, RESP2 and RESP3, ACL key patterns, its key spec
//! and flags, replicas, and arguments checked before anything happens.

use std::time::{Duration, Instant};

use redis::Value;

use crate::cmd;
use crate::common::{
    acquire, assert_err_starts, client_connected, client_unblock, fence, info, release,
    replica_pair, wait_replicas, Server,
};
use crate::observer::{Observer, Proto};
use crate::{
    answered, answered_at_once, assert_info, observing, seen_of, wait_observing, AT_ONCE, QUIET,
    TTL,
};

/// `CLIENT UNBLOCK` answers an observer as its timeout would: the current `LOCK.INFO`.
#[test]
fn client_unblock_answers_the_current_info() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut o = Observer::join(&s, "k", fa, 0);
    let mut free = Observer::join(&s, "free", 0, 0);
    let before = answered(&mut c);
    assert_eq!(client_unblock(&mut c, o.id, false), 1);
    let got = o.info_within(AT_ONCE, "CLIENT UNBLOCK");
    assert_info(&got, &info(&mut c, "k"), 50, "CLIENT UNBLOCK");
    assert_eq!(client_unblock(&mut c, free.id, false), 1);
    assert_eq!(free.info_within(AT_ONCE, "CLIENT UNBLOCK, free key"), None);
    assert_eq!(answered(&mut c), before + 2);
    assert_eq!(observing(&mut c), 0);
    // The connection observes again as any other.
    o.observe("k", fa, 0);
    o.wait_blocked(&s);
    let t0 = Instant::now();
    release(&mut c, "k", "a");
    assert_eq!(answered_at_once(&mut o, t0, "observing again"), None);
}

#[test]
fn client_unblock_error_answers_the_error_and_leaves_nothing() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let mut o = Observer::join(&s, "k", fa, 0);
    let before = answered(&mut c);
    assert_eq!(client_unblock(&mut c, o.id, true), 1);
    let e = o.error_within(AT_ONCE, "CLIENT UNBLOCK ERROR");
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    wait_observing(&mut c, 0);
    // The change that follows answers nobody.
    fence(&mut c, "k", "a").expect("a holds k");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(answered(&mut c), before);
    assert_eq!(observing(&mut c), 0);
}

/// An observer that disconnects, or is killed, is forgotten: `INFO lock` stops counting it,
/// and the next change answers nobody (docs/commands.md: a waiter that disconnects "is never
/// granted or counted again"; observers obey the same).
#[test]
fn a_departed_observer_leaves_nothing_behind() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let closed = Observer::join(&s, "k", fa, 0);
    let mut killed = Observer::join(&s, "k", fa, 0);
    let mut other_key = Observer::join(&s, "free", 0, 0);
    assert_eq!(observing(&mut c), 3);
    let before = answered(&mut c);
    let closed_id = closed.id;
    drop(closed);
    assert!(crate::common::wait_until(Duration::from_secs(5), || {
        !client_connected(&mut c, closed_id)
    }));
    cmd!(&mut c, "CLIENT", "KILL", "ID", killed.id).expect("CLIENT KILL");
    assert!(
        killed.closed_within(AT_ONCE),
        "the killed observer's connection closes"
    );
    wait_observing(&mut c, 1);
    let f2 = fence(&mut c, "k", "a").expect("a holds k");
    release(&mut c, "k", "a");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(answered(&mut c), before, "nobody observes k any more");
    assert_eq!(observing(&mut c), 1);
    // The one left, on another key, is unaffected, and still answered.
    other_key.silent_for(Duration::from_millis(10), "an observer of another key");
    let t0 = Instant::now();
    acquire(&mut c, "free", "x", TTL).expect("free is free");
    let got = answered_at_once(&mut other_key, t0, "the observer left");
    assert_eq!(got.map(|i| i.holder), Some(Some(b"x".to_vec())));
    assert_eq!(answered(&mut c), before + 1);
    assert_eq!(observing(&mut c), 0);
    assert!(f2 > fa);
}

/// Inside `MULTI` or a script it never blocks: the reply comes at once, as for a change.
#[test]
fn multi_and_scripts_never_block() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let now = info(&mut c, "k");
    let fa_s = fa.to_string();
    let t0 = Instant::now();
    let r = crate::common::exec(
        &mut c,
        &[
            crate::common::args(&["LOCK.OBSERVE", "k", &fa_s, "0"]),
            crate::common::args(&["LOCK.OBSERVE", "free", "0", "0"]),
        ],
    );
    assert!(t0.elapsed() < AT_ONCE, "EXEC took {:?}", t0.elapsed());
    assert_info(&crate::common::parse_info(&r[0]), &now, 100, "MULTI");
    assert_eq!(r[1], Value::Nil);

    let script = "return redis.call('LOCK.OBSERVE', KEYS[1], ARGV[1], '0')";
    let t0 = Instant::now();
    let v = cmd!(&mut c, "EVAL", script, 1, "k", &fa_s).expect("EVAL");
    assert!(t0.elapsed() < AT_ONCE, "EVAL took {:?}", t0.elapsed());
    assert_info(&crate::common::parse_info(&v), &now, 100, "EVAL");

    let lib = "#!lua name=obs\n\
        redis.register_function('obs', function(keys, args) \
          return redis.call('LOCK.OBSERVE', keys[1], args[1], '0') end)\n\
        redis.register_function{function_name='obs_ro', flags={'no-writes'}, \
          callback=function(keys, args) \
            return redis.call('LOCK.OBSERVE', keys[1], args[1], '0') end}";
    cmd!(&mut c, "FUNCTION", "LOAD", lib).expect("FUNCTION LOAD");
    for f in ["FCALL", "FCALL_RO"] {
        let name = if f == "FCALL" { "obs" } else { "obs_ro" };
        let t0 = Instant::now();
        let v = cmd!(&mut c, f, name, 1, "k", &fa_s).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(t0.elapsed() < AT_ONCE, "{f} took {:?}", t0.elapsed());
        assert_info(&crate::common::parse_info(&v), &now, 100, f);
    }
    assert_eq!(observing(&mut c), 0);
}

/// `ttl`'s digits masked, so that two replies taken at different instants compare.
fn mask_ttl(reply: &[u8]) -> Vec<u8> {
    let needle = b"ttl\r\n:";
    let Some(at) = reply.windows(needle.len()).position(|w| w == needle) else {
        return reply.to_vec();
    };
    let start = at + needle.len();
    let end = start + reply[start..].iter().position(|&b| b == b'\r').unwrap();
    [&reply[..start], b"#", &reply[end..]].concat()
}

/// An observer's reply is `LOCK.INFO`'s, byte for byte but for the ttl, in both protocols:
/// answered at once, after blocking, and null.
#[test]
fn replies_are_lock_info_in_resp2_and_resp3() {
    let s = Server::new();
    let mut c = s.conn();
    for proto in [Proto::Resp2, Proto::Resp3] {
        let mut raw = s.raw();
        if proto == Proto::Resp3 {
            raw.call(&[b"HELLO", b"3"]);
        }
        let null = raw.call(&[b"LOCK.INFO", b"k"]);
        let mut o = Observer::send_as(&s, proto, "k", 1, 0);
        o.reply_within(AT_ONCE).expect("answered at once");
        assert_eq!(o.raw, null, "{proto:?}: null at once");

        // Blocked on the free key, answered by a grant.
        let mut o = Observer::join_as(&s, proto, "k", 0, 0);
        let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
        o.reply_within(AT_ONCE).expect("answered at the grant");
        let held = raw.call(&[b"LOCK.INFO", b"k"]);
        assert_eq!(
            mask_ttl(&o.raw),
            mask_ttl(&held),
            "{proto:?}: after blocking"
        );
        let shape = match proto {
            Proto::Resp2 => b'*',
            Proto::Resp3 => b'%',
        };
        assert_eq!(
            o.raw[0],
            shape,
            "{proto:?}: {:?}",
            String::from_utf8_lossy(&o.raw)
        );

        // At once, with another seen.
        let mut o = Observer::send_as(&s, proto, "k", 0, 0);
        o.reply_within(AT_ONCE).expect("answered at once");
        let held = raw.call(&[b"LOCK.INFO", b"k"]);
        assert_eq!(mask_ttl(&o.raw), mask_ttl(&held), "{proto:?}: at once");

        // Blocked, answered null by the release.
        let mut o = Observer::join_as(&s, proto, "k", fa, 0);
        release(&mut c, "k", "a");
        o.reply_within(AT_ONCE).expect("answered at the release");
        assert_eq!(o.raw, null, "{proto:?}: null after blocking");
    }
}

/// Key patterns apply (README: every command declares its key): read access to the key is
/// enough to observe it; without it, `NOPERM`.
#[test]
fn acl_read_access_to_the_key_is_needed_and_enough() {
    let s = Server::new();
    let mut admin = s.conn();
    for (user, keys) in [
        ("reader", "%R~*"),
        ("writer", "%W~*"),
        ("elsewhere", "~other:*"),
    ] {
        cmd!(&mut admin, "ACL", "SETUSER", user, "on", ">pw", keys, "+@all")
            .unwrap_or_else(|e| panic!("ACL SETUSER {user}: {e}"));
    }
    let fa = acquire(&mut admin, "k", "a", TTL).expect("k is free");
    let login = |user: &str| {
        let mut o = Observer::connect(&s, Proto::Resp2);
        assert_eq!(o.call(&["AUTH", user, "pw"]), Value::Okay);
        o
    };
    let mut reader = login("reader");
    reader.observe("k", fa, 0);
    reader.wait_blocked(&s);
    for user in ["writer", "elsewhere"] {
        let mut o = login(user);
        o.observe("k", fa, 0);
        let e = o.error_within(AT_ONCE, user);
        assert!(e.starts_with("NOPERM"), "{user}: {e}");
    }
    assert_eq!(observing(&mut admin), 1);
    let t0 = Instant::now();
    release(&mut admin, "k", "a");
    assert_eq!(answered_at_once(&mut reader, t0, "reader"), None);
}

fn text(v: &Value) -> String {
    match v {
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Okay => "OK".into(),
        other => format!("{other:?}"),
    }
}

/// The key is at position 1 (cluster routing, ACL), and the flags say it reads and may block.
#[test]
fn key_spec_and_flags() {
    let s = Server::new();
    let mut c = s.conn();
    let keys = cmd!(&mut c, "COMMAND", "GETKEYS", "LOCK.OBSERVE", "k", "0", "0").expect("GETKEYS");
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"k".to_vec())]));
    let v = cmd!(&mut c, "COMMAND", "INFO", "lock.observe").expect("COMMAND INFO");
    let Value::Array(entries) = v else {
        panic!("COMMAND INFO: {v:?}")
    };
    let Value::Array(entry) = &entries[0] else {
        panic!("COMMAND INFO lock.observe: {entries:?}")
    };
    assert_eq!(text(&entry[0]), "lock.observe");
    assert_eq!(entry[1], Value::Int(4), "arity");
    let Value::Array(flags) = &entry[2] else {
        panic!("flags: {:?}", entry[2])
    };
    let flags: Vec<String> = flags.iter().map(text).collect();
    for f in ["readonly", "blocking"] {
        assert!(flags.iter().any(|x| x == f), "{f} missing from {flags:?}");
    }
    for f in ["write", "denyoom"] {
        assert!(!flags.iter().any(|x| x == f), "{f} in {flags:?}");
    }
    assert_eq!(
        (&entry[3], &entry[4], &entry[5]),
        (&Value::Int(1), &Value::Int(1), &Value::Int(1))
    );
}

/// `readonly`: a replica's clients observe, and the changes its master sends it answer them.
#[test]
fn a_replica_observer_is_answered_by_its_masters_changes() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    // A replica that synced diskless is sent the stream once it acknowledges, which it does
    // once a second: the changes below must not wait for that.
    assert_eq!(wait_replicas(&mut mc, 1, 5000), Ok(Value::Int(1)));
    let mut o = Observer::join(&r, "k", 0, 0);
    let t0 = Instant::now();
    let fa = acquire(&mut mc, "k", "a", TTL).expect("k is free");
    let got = answered_at_once(&mut o, t0, "a grant on the master");
    assert_eq!(
        got.as_ref().map(|i| (i.holder.clone(), i.fence)),
        Some((Some(b"a".to_vec()), fa))
    );

    let mut o = Observer::join(&r, "k", fa, 0);
    let t0 = Instant::now();
    let f2 = fence(&mut mc, "k", "a").expect("a holds k");
    let got = answered_at_once(&mut o, t0, "LOCK.FENCE on the master");
    assert_eq!(seen_of(&got), f2);

    let mut o = Observer::join(&r, "k", f2, 0);
    let t0 = Instant::now();
    release(&mut mc, "k", "a");
    assert_eq!(
        answered_at_once(&mut o, t0, "a release on the master"),
        None
    );

    // A lease end reaches the replica as the master's DEL.
    let fb = acquire(&mut mc, "k", "b", 300).expect("k is free");
    let mut o = Observer::join(&r, "k", fb, 0);
    assert_eq!(
        o.info_within(Duration::from_secs(3), "a lease end on the master"),
        None
    );
    assert_eq!(observing(&mut rc), 0);
}

#[test]
fn another_type_is_wrongtype() {
    let s = Server::new();
    let mut c = s.conn();
    cmd!(&mut c, "SET", "s", "v").expect("SET");
    for seen in ["0", "1"] {
        let r = cmd!(&mut c, "LOCK.OBSERVE", "s", seen, "0");
        assert_err_starts(&r, "WRONGTYPE");
    }
    assert_eq!(observing(&mut c), 0);
}

/// Every bad argument is an error that names it, sent back at once, and nothing changes: no
/// observer is left, nothing is counted, the lock is as it was (docs/commands.md, Errors).
#[test]
fn bad_arguments_are_errors_that_name_them() {
    let s = Server::new();
    let mut c = s.conn();
    let fa = acquire(&mut c, "k", "a", TTL).expect("k is free");
    let fa_s = fa.to_string();
    let before = info(&mut c, "k");
    let counted = answered(&mut c);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["k", "-1", "0"], "ERR seen must not be negative"),
        (
            vec!["k", "x", "0"],
            "ERR seen is not an integer or out of range",
        ),
        (
            vec!["k", "1.5", "0"],
            "ERR seen is not an integer or out of range",
        ),
        (
            vec!["k", "", "0"],
            "ERR seen is not an integer or out of range",
        ),
        (
            vec!["k", "18446744073709551615", "0"],
            "ERR seen is not an integer or out of range",
        ),
        (vec!["k", &fa_s, "-1"], "ERR timeout must not be negative"),
        (
            vec!["k", &fa_s, "x"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            vec!["k", &fa_s, "1.5"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            vec!["k", &fa_s, "9223372036854775808"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            vec!["k", &fa_s, "9223372036854775807"],
            "ERR timeout is out of range",
        ),
        (
            vec![],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
        (
            vec!["k"],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
        (
            vec!["k", &fa_s],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
        (
            vec!["k", &fa_s, "0", "0"],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
    ];
    for (args, expected) in &cases {
        let mut o = Observer::connect(&s, Proto::Resp2);
        let mut cmd = vec!["LOCK.OBSERVE"];
        cmd.extend(args);
        o.send_args(&cmd);
        let e = o.error_within(AT_ONCE, &format!("{cmd:?}"));
        assert_eq!(&e, expected, "{cmd:?}");
    }
    assert_eq!(observing(&mut c), 0);
    assert_eq!(answered(&mut c), counted);
    let after = info(&mut c, "k");
    crate::common::assert_same_lock(&before, &after, Duration::from_secs(5), 50);
    // Nothing was left to answer: a change answers nobody.
    fence(&mut c, "k", "a").expect("a holds k");
    std::thread::sleep(QUIET);
    assert_eq!(answered(&mut c), counted);
}
