//! Bad input: `WRONGTYPE` both ways, and every class of bad argument (ttl, timeout, token,
//! options, arity), each refused with its error and changing nothing, held key or free.

use std::time::Instant;

use crate::cmd;
use crate::common::*;
use crate::DEFAULT_MAX_TTL;
use redis::Value;

// ---------------------------------------------------------------- WRONGTYPE

#[test]
fn wrongtype_on_string_key_for_every_command() {
    let s = Server::new();
    let mut c = s.conn();
    cmd!(&mut c, "SET", "str", "v").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", "str", "t", "1000"],
        vec!["LOCK.ACQUIRE", "str", "t", "1000", "WAIT", "10"],
        vec!["LOCK.RELEASE", "str", "t"],
        vec!["LOCK.EXTEND", "str", "t", "1000"],
        vec!["LOCK.FENCE", "str", "t"],
        vec!["LOCK.INFO", "str"],
    ];
    for args in cases {
        let raw: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let r = run_raw(&mut c, &raw);
        assert_err_starts(&r, "WRONGTYPE");
        assert_eq!(
            cmd!(&mut c, "GET", "str"),
            Ok(Value::BulkString(b"v".to_vec()))
        );
    }
    // And the other way round: string commands on a lock key.
    acquire(&mut c, "k", "t", 10_000).unwrap();
    assert_err_starts(&cmd!(&mut c, "GET", "k"), "WRONGTYPE");
    assert_err_starts(&cmd!(&mut c, "LPUSH", "k", "x"), "WRONGTYPE");
}

// ---------------------------------------------------------------- bad input

/// A held lock and a missing key; runs `args`, expects an error starting with `prefix`,
/// and checks nothing changed.
fn expect_error_changes_nothing(
    c: &mut redis::Connection,
    args: &[&[u8]],
    prefix: &str,
    mentions: Option<&str>,
) {
    let before = info(c, "held");
    let t0 = Instant::now();
    let raw: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    let r = run_raw(c, &raw);
    let shown: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).chars().take(20).collect())
        .collect();
    match &r {
        Err(e) => {
            assert!(
                e.starts_with(prefix),
                "{shown:?}: expected {prefix:?}..., got {e:?}"
            );
            if let Some(m) = mentions {
                assert!(e.contains(m), "{shown:?}: error {e:?} should name {m:?}");
            }
        }
        Ok(v) => panic!("{shown:?}: expected an error, got {v:?}"),
    }
    assert_same_lock(&before, &info(c, "held"), t0.elapsed(), 100);
    assert!(!exists(c, "free"), "{shown:?} created key 'free'");
}

fn bad_input_server() -> (Server, redis::Connection) {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "held", "owner", 60_000).unwrap();
    (s, c)
}

#[test]
fn bad_ttl_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let not_int: [&[u8]; 9] = [
        b"abc",
        b"1.5",
        b"",
        b"10a",
        b" 10",
        b"1e3",
        b"99999999999999999999999",
        b"0x10",
        b"\xff",
    ];
    for key in ["held", "free"] {
        for tok in ["owner", "other"] {
            let key_tok = key;
            for ttl in not_int {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    "ERR ttl is not an integer or out of range",
                    None,
                );
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.EXTEND", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    "ERR ttl is not an integer or out of range",
                    None,
                );
            }
            for ttl in [
                &b"0"[..],
                b"-1",
                b"-86400000",
                b"86400001",
                b"9223372036854775807",
                b"-9223372036854775808",
            ] {
                let want =
                    format!("ERR ttl must be between 1 and {DEFAULT_MAX_TTL} (lock.max-ttl)");
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    &want,
                    None,
                );
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.EXTEND", key_tok.as_bytes(), tok.as_bytes(), ttl],
                    &want,
                    None,
                );
            }
        }
    }
}

#[test]
fn bad_timeout_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    for key in [&b"held"[..], b"free"] {
        for tok in [&b"owner"[..], b"other"] {
            for t in [&b"abc"[..], b"", b"1.5", b"99999999999999999999", b"5x"] {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", t],
                    "ERR timeout is not an integer or out of range",
                    None,
                );
            }
            for t in [&b"-1"[..], b"-100000", b"-9223372036854775808"] {
                expect_error_changes_nothing(
                    &mut c,
                    &[b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", t],
                    "ERR timeout must not be negative",
                    None,
                );
            }
        }
    }
}

#[test]
fn bad_token_is_rejected_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let long257 = vec![b'a'; 257];
    let long300 = vec![b'o'; 300];
    for key in [&b"held"[..], b"free"] {
        for tok in [&b""[..], &long257, &long300] {
            let cases: [Vec<&[u8]>; 5] = [
                vec![b"LOCK.ACQUIRE", key, tok, b"1000"],
                vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", b"10"],
                vec![b"LOCK.RELEASE", key, tok],
                vec![b"LOCK.EXTEND", key, tok, b"1000"],
                vec![b"LOCK.FENCE", key, tok],
            ];
            for args in cases {
                expect_error_changes_nothing(
                    &mut c,
                    &args,
                    "ERR token must be 1 to 256 bytes",
                    None,
                );
            }
        }
    }
}

/// Options that do not parse: `ERR syntax error`, as core says it, then what was expected.
const UNKNOWN_OPTION: &str = "ERR syntax error: expected SHARED, LIMIT n or WAIT timeout";

#[test]
fn bad_options_are_syntax_errors_and_change_nothing() {
    let (_s, mut c) = bad_input_server();
    for key in [&b"held"[..], b"free"] {
        for tok in [&b"owner"[..], b"other"] {
            let cases: [(Vec<&[u8]>, &str); 11] = [
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"FOO", b"1"],
                    UNKNOWN_OPTION,
                ),
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"NX", b"PX"],
                    UNKNOWN_OPTION,
                ),
                (
                    vec![
                        b"LOCK.ACQUIRE",
                        key,
                        tok,
                        b"1000",
                        b"WAIT",
                        b"10",
                        b"WAIT",
                        b"10",
                    ],
                    "ERR syntax error: WAIT given twice",
                ),
                (
                    vec![
                        b"LOCK.ACQUIRE",
                        key,
                        tok,
                        b"1000",
                        b"WAIT",
                        b"10",
                        b"wait",
                        b"20",
                    ],
                    "ERR syntax error: WAIT given twice",
                ),
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT", b"10", b"EXTRA"],
                    UNKNOWN_OPTION,
                ),
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"", b""],
                    UNKNOWN_OPTION,
                ),
                // An option without its value: never a grant, and the error says so.
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"WAIT"],
                    "ERR syntax error: WAIT needs a timeout",
                ),
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"SHARED", b"wait"],
                    "ERR syntax error: WAIT needs a timeout",
                ),
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"SHARED", b"LIMIT"],
                    "ERR syntax error: LIMIT needs a number",
                ),
                // LIMIT is a count of shared holds.
                (
                    vec![b"LOCK.ACQUIRE", key, tok, b"1000", b"LIMIT", b"3"],
                    "ERR syntax error: LIMIT needs SHARED",
                ),
                (
                    vec![
                        b"LOCK.ACQUIRE",
                        key,
                        tok,
                        b"1000",
                        b"WAIT",
                        b"0",
                        b"limit",
                        b"3",
                    ],
                    "ERR syntax error: LIMIT needs SHARED",
                ),
            ];
            for (args, expected) in cases {
                let raw: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
                assert_eq!(
                    run_raw(&mut c, &raw),
                    Err(expected.to_string()),
                    "{}",
                    show_cmd(&raw)
                );
                expect_error_changes_nothing(&mut c, &args, expected, None);
            }
        }
    }
}

#[test]
fn wrong_arity_gets_the_standard_error_and_changes_nothing() {
    let (_s, mut c) = bad_input_server();
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"LOCK.ACQUIRE"], "lock.acquire"),
        (vec![b"LOCK.ACQUIRE", b"held"], "lock.acquire"),
        (vec![b"LOCK.ACQUIRE", b"free", b"t"], "lock.acquire"),
        (vec![b"lock.acquire", b"free", b"t"], "lock.acquire"),
        (vec![b"LOCK.RELEASE", b"held"], "lock.release"),
        (
            vec![b"LOCK.RELEASE", b"held", b"owner", b"x"],
            "lock.release",
        ),
        (vec![b"LOCK.EXTEND", b"held", b"owner"], "lock.extend"),
        (
            vec![b"LOCK.EXTEND", b"held", b"owner", b"1000", b"x"],
            "lock.extend",
        ),
        (vec![b"LOCK.FENCE", b"held"], "lock.fence"),
        (vec![b"LOCK.FENCE", b"held", b"owner", b"x"], "lock.fence"),
        (vec![b"LOCK.INFO"], "lock.info"),
        (vec![b"LOCK.INFO", b"held", b"x"], "lock.info"),
    ];
    for (args, name) in cases {
        let before = info(&mut c, "held");
        let t0 = Instant::now();
        let raw: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let r = run_raw(&mut c, &raw);
        match &r {
            Err(e) => {
                let l = e.to_lowercase();
                assert!(
                    l.starts_with("err wrong number of arguments for '") && l.contains(name),
                    "{name}: expected the standard arity error, got {e:?}"
                );
            }
            Ok(v) => panic!(
                "{name} with {} args: expected an arity error, got {v:?}",
                args.len()
            ),
        }
        assert_same_lock(&before, &info(&mut c, "held"), t0.elapsed(), 100);
        assert!(!exists(&mut c, "free"));
    }
}
