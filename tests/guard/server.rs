//! `LOCK.GUARD` under the server's rules (docs/operations.md, The server around a lock,
//! and Observability):
//!
//! 1. Over `maxmemory`, only `deny-oom` inner commands are refused, with the server's `OOM`;
//!    a stale fence is still `FENCED`.
//! 2. `CLIENT PAUSE … WRITE` holds a guard, whatever its inner command, until writes resume.
//! 3. An inner command on the lock key itself: `DEL` and an overwrite answer its waiters null,
//!    `RENAME` moves the lock.
//! 4. The `INFO lock` counters: `lock_guarded_runs` counts inner commands run,
//!    `lock_guarded_refusals` `FENCED` replies, and other refusals count in neither.
//! 5. Loading and unloading a module changes the commands that may be guarded: what
//!    `LOCK.GUARD` learned of a command is forgotten (`tests/support/probe_module.c`).

use crate::cmd;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::guard::*;
use crate::common::support_lib::build_support_lib;
use crate::common::*;
use redis::{Connection, Value};

/// "At once".
const AT_ONCE: Duration = Duration::from_millis(200);
const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

// ------------------------------------------------------------------ the server's rules

/// Over `maxmemory` (`noeviction`), an inner `SET` is refused with the server's OOM error
/// and an inner `DEL`/`GET` still runs; a stale fence is still `FENCED`.
#[test]
fn over_maxmemory_only_deny_oom_inner_commands_are_refused() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    set(&mut con, "data2", "orig");
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    must(
        &mut con,
        &args(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
    );
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "1"]));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_err_starts(&cmd!(&mut con, "SET", "probe", "x"), "OOM");
        let keys = ["data", "data2", "new"];
        let before = world(&mut con, "lk", &keys);
        let r = guard(&mut con, "lk", f, &["SET", "new", "v"]);
        assert_refused(&mut con, &before, &r, OOM, "inner SET over maxmemory");
        let r = guard(&mut con, "lk", f, &["APPEND", "data", "more"]);
        assert_refused(&mut con, &before, &r, OOM, "inner APPEND over maxmemory");
        let r = guard(&mut con, "lk", stale, &["SET", "new", "v"]);
        assert_refused(&mut con, &before, &r, NEWER, "a stale fence over maxmemory");

        let c = counters(&mut con);
        assert_eq!(guard(&mut con, "lk", f, &["GET", "data"]), Ok(bulk("orig")));
        assert_eq!(
            guard(&mut con, "lk", f, &["DEL", "data"]),
            Ok(Value::Int(1))
        );
        assert_eq!(
            guard(&mut con, "lk", f, &["EXISTS", "data"]),
            Ok(Value::Int(0))
        );
        assert_counted(&mut con, c, 3, 0, "GET, DEL, EXISTS over maxmemory");
    }));
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "0"]));
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "new", "v"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "new"), bulk("v"));
}

/// `LOCK.GUARD` is a write command: `CLIENT PAUSE … WRITE` holds it (whatever its inner
/// command) until writes resume, while plain reads go on.
#[test]
fn client_pause_write_holds_a_guard_until_unpause() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "data", "orig");
    let f = hold(&mut con, "lk");
    must(&mut con, &args(&["CLIENT", "PAUSE", "10000", "WRITE"]));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for inner in [vec!["SET", "data", "new"], vec!["GET", "other"]] {
        let mut c = s.conn();
        let tx = tx.clone();
        threads.push(thread::spawn(move || {
            let r = guard(&mut c, "lk", f, &inner);
            tx.send((inner, r, Instant::now())).unwrap();
        }));
    }
    let early = rx.recv_timeout(Duration::from_millis(300));
    assert!(
        early.is_err(),
        "a LOCK.GUARD ran during CLIENT PAUSE WRITE: {early:?}"
    );
    assert_eq!(
        get(&mut con, "data"),
        bulk("orig"),
        "reads go on during the pause"
    );
    let resumed = Instant::now();
    must(&mut con, &args(&["CLIENT", "UNPAUSE"]));
    for _ in 0..2 {
        let (inner, r, at) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the paused LOCK.GUARD is answered after CLIENT UNPAUSE");
        let want = if inner[0] == "SET" {
            Value::Okay
        } else {
            Value::Nil
        };
        assert_eq!(r, Ok(want), "LOCK.GUARD lk <fence> {inner:?}");
        assert!(
            at.duration_since(resumed) < AT_ONCE,
            "{inner:?} answered {:?} after the unpause",
            at.duration_since(resumed)
        );
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(get(&mut con, "data"), bulk("new"));
}

/// The inner command may touch the lock key itself: `DEL` removes the lock and answers its
/// waiters null at once, an overwrite replaces it, `RENAME` moves it (holder and fence
/// with it).
#[test]
fn an_inner_command_on_the_lock_key_itself() {
    let s = Server::new();
    let mut con = s.conn();

    let f = hold(&mut con, "lk");
    let mut w = Waiter::join(&s, "lk", "waiter", TTL, 0);
    let c = counters(&mut con);
    assert_eq!(guard(&mut con, "lk", f, &["DEL", "lk"]), Ok(Value::Int(1)));
    assert_counted(&mut con, c, 1, 0, "LOCK.GUARD lk <fence> DEL lk");
    let answered = w.reply_within(AT_ONCE);
    assert_eq!(
        answered,
        Some(Reply::Null),
        "the waiter of a deleted lock: {}",
        got(&answered)
    );
    assert!(!exists(&mut con, "lk"));
    assert_eq!(waiting_clients(&mut con), 0);
    assert_err_starts(&guard(&mut con, "lk", f, &["SET", "data", "x"]), NOT_HELD);
    let f2 = hold(&mut con, "lk");
    assert!(
        f2 > f,
        "the next fence after the DEL ({f2}) must be above {f}"
    );

    let mut w = Waiter::join(&s, "lk", "waiter", TTL, 0);
    assert_eq!(
        guard(&mut con, "lk", f2, &["SET", "lk", "plain"]),
        Ok(Value::Okay)
    );
    let answered = w.reply_within(AT_ONCE);
    assert_eq!(
        answered,
        Some(Reply::Null),
        "the waiter of an overwritten lock: {}",
        got(&answered)
    );
    assert_eq!(
        cmd!(&mut con, "TYPE", "lk"),
        Ok(Value::SimpleString("string".into()))
    );
    assert_err_starts(&guard(&mut con, "lk", f2, &["SET", "data", "x"]), WRONGTYPE);
    assert!(!exists(&mut con, "data"));

    let f3 = hold(&mut con, "lk3");
    assert_eq!(
        guard(&mut con, "lk3", f3, &["RENAME", "lk3", "lk4"]),
        Ok(Value::Okay)
    );
    assert_err_starts(&guard(&mut con, "lk3", f3, &["SET", "data", "x"]), NOT_HELD);
    assert_eq!(
        guard(&mut con, "lk4", f3, &["SET", "data", "moved"]),
        Ok(Value::Okay)
    );
    assert_eq!(get(&mut con, "data"), bulk("moved"));
}

// ------------------------------------------------------------------------------ counters

/// `lock_guarded_runs` counts inner commands run (also those that replied with an error);
/// `lock_guarded_refusals` counts `FENCED` replies; other refusals count in neither.
#[test]
fn info_counters_move_by_exactly_what_ran_and_what_was_fenced() {
    let s = Server::new();
    let mut con = s.conn();
    set(&mut con, "str", "abc");
    cmd!(&mut con, "RPUSH", "list", "a").unwrap();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    let start = counters(&mut con);
    assert_eq!(
        start,
        Counters {
            runs: 0,
            refusals: 0
        },
        "a fresh server's counters"
    );

    let mut expect = start;
    let mut step = |con: &mut Connection, runs: i64, refusals: i64, what: &str| {
        expect.runs += runs;
        expect.refusals += refusals;
        assert_eq!(counters(con), expect, "after {what}");
    };
    let r = guard(&mut con, "lk", f, &["SET", "a", "1"]);
    assert_eq!(r, Ok(Value::Okay));
    step(&mut con, 1, 0, "a run");
    let r = guard(&mut con, "lk", f, &["INCR", "list"]);
    assert_err_starts(&r, "WRONGTYPE");
    step(&mut con, 1, 0, "an inner WRONGTYPE");
    let r = guard(&mut con, "lk", f, &["INCR", "str"]);
    assert_err_starts(&r, "ERR value is not an integer");
    step(&mut con, 1, 0, "an inner ERR");
    assert_err_starts(&guard(&mut con, "lk", stale, &["SET", "a", "2"]), NEWER);
    step(&mut con, 0, 1, "a newer-fence refusal");
    assert_err_starts(&guard(&mut con, "lk", f + 1, &["SET", "a", "2"]), OLDER);
    step(&mut con, 0, 1, "an older-fence refusal");
    assert_err_starts(&guard(&mut con, "nokey", f, &["SET", "a", "2"]), NOT_HELD);
    step(&mut con, 0, 1, "a not-held refusal");
    assert_err_starts(
        &guard_text(&mut con, "lk", "-1", &["SET", "a", "2"]),
        "ERR fence must be a positive integer",
    );
    step(&mut con, 0, 0, "a bad fence");
    assert_err_starts(&run_raw(&mut con, &args(&["LOCK.GUARD", "lk", "1"])), ARITY);
    step(&mut con, 0, 0, "too few arguments");
    assert_err_starts(&guard(&mut con, "lk", f, &["NoSuchCmd"]), "ERR LOCK.GUARD:");
    step(&mut con, 0, 0, "an unknown inner command");
    assert_err_starts(
        &guard(&mut con, "lk", f, &["BLPOP", "list", "0"]),
        "ERR LOCK.GUARD:",
    );
    step(&mut con, 0, 0, "a blocking inner command");
    assert_err_starts(&guard(&mut con, "lk", f, &["SET", "a"]), "ERR LOCK.GUARD:");
    step(&mut con, 0, 0, "an inner arity error");
    assert_err_starts(&guard(&mut con, "str", f, &["SET", "a", "2"]), WRONGTYPE);
    step(&mut con, 0, 0, "WRONGTYPE lock key");
    assert_err_starts(&guard(&mut con, "lk", f, &["MULTI"]), "ERR LOCK.GUARD:");
    step(&mut con, 0, 0, "a noscript inner command");
    assert_err_starts(
        &guard(&mut con, "lk", f, &["LOCK.INFO", "lk"]),
        "ERR LOCK.GUARD:",
    );
    step(&mut con, 0, 0, "a LOCK.* inner command");
    // Refusals of the guarded command itself, as it is called: ACL, then maxmemory.
    assert_eq!(
        cmd!(
            &mut con,
            "ACL",
            "SETUSER",
            "noset",
            "on",
            ">pw",
            "~*",
            "+lock.guard",
            "+get"
        ),
        Ok(Value::Okay)
    );
    let mut noset = s.conn();
    assert_eq!(cmd!(&mut noset, "AUTH", "noset", "pw"), Ok(Value::Okay));
    assert_eq!(
        guard(&mut noset, "lk", f, &["SET", "x", "y"]),
        Err(
            "NOPERM LOCK.GUARD: this user has no permissions to run 'SET' or to touch its keys"
                .to_string()
        )
    );
    step(&mut con, 0, 0, "an inner SET the ACL refuses");
    assert_eq!(guard(&mut noset, "lk", f, &["GET", "a"]), Ok(bulk("1")));
    step(&mut con, 1, 0, "an inner GET the ACL allows");
    must(
        &mut con,
        &args(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
    );
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "1"]));
    let r = guard(&mut con, "lk", f, &["SET", "x", "y"]);
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "0"]));
    assert_err_starts(&r, OOM);
    step(&mut con, 0, 0, "an inner SET refused over maxmemory");
    let t = transaction(
        &mut con,
        &[
            guard_cmd("lk", f, &["SET", "a", "3"]),
            guard_cmd("lk", stale, &["SET", "a", "4"]),
            guard_cmd("lk", f, &["GET", "a"]),
        ],
    );
    assert_eq!(t[0], Ok(Value::Okay));
    assert_err_starts(&t[1], NEWER);
    assert_eq!(t[2], Ok(bulk("3")));
    step(&mut con, 2, 1, "MULTI with two runs and a refusal");
    let r = cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "a", f, "5");
    assert_eq!(r, Ok(Value::Okay));
    step(&mut con, 1, 0, "EVAL that ran");
    assert_err_starts(
        &cmd!(&mut con, "EVAL", GUARD_SCRIPT, 2, "lk", "a", stale, "6"),
        NEWER,
    );
    step(&mut con, 0, 1, "EVAL that was fenced");
    assert_eq!(get(&mut con, "a"), bulk("5"));
}

// -------------------------------------------------------------------- the command table

/// `tests/support/probe_module.c`, compiled once per test process.
fn probe_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| build_support_lib("probe_module", &[], "the module-change tests"))
}

/// The flags `COMMAND INFO` gives a command (empty for one the server does not know).
fn command_flags(con: &mut Connection, name: &str) -> Vec<String> {
    let Ok(Value::Array(entries)) = cmd!(con, "COMMAND", "INFO", name) else {
        panic!("COMMAND INFO {name}");
    };
    match entries.first() {
        Some(Value::Array(entry)) => match entry.get(2) {
            Some(Value::Array(flags)) => flags.iter().map(text).collect(),
            other => panic!("COMMAND INFO {name}: flags {other:?}"),
        },
        _ => Vec::new(),
    }
}

/// What `LOCK.GUARD` learned of a command is forgotten when a module is loaded or unloaded:
/// a module command it ran is unknown once the module is gone, and when the module comes
/// back with the command flagged `deny-script`, it is refused as a command scripts may not
/// run. (Remembered, the unloaded command would reach the server's own call and its error,
/// and the reloaded one would be called as the writable command it was.)
#[test]
fn a_module_load_or_unload_is_seen_by_the_next_guard() {
    let so = probe_so().display().to_string();
    let s = Server::start(Opts::new().extra(&["--enable-module-command", "yes"]));
    let mut con = s.conn();
    let f = acquire(&mut con, "lk", HOLDER, 100_000).expect("lk is free");
    let c = counters(&mut con);
    let unknown = "ERR LOCK.GUARD: unknown command 'probe.cmd'";

    assert_eq!(
        guard(&mut con, "lk", f, &["probe.cmd"]),
        Err(unknown.to_string()),
        "before the module is loaded"
    );
    assert_eq!(
        cmd!(&mut con, "MODULE", "LOAD", &so, "write"),
        Ok(Value::Okay)
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["probe.cmd"]),
        Ok(Value::SimpleString("PROBED".into())),
        "the module's command, flagged write"
    );
    assert_counted(&mut con, c, 1, 0, "the module's command ran");

    assert_eq!(cmd!(&mut con, "MODULE", "UNLOAD", "probe"), Ok(Value::Okay));
    assert_eq!(
        guard(&mut con, "lk", f, &["probe.cmd"]),
        Err(unknown.to_string()),
        "after MODULE UNLOAD"
    );

    assert_eq!(
        cmd!(&mut con, "MODULE", "LOAD", &so, "write deny-script"),
        Ok(Value::Okay)
    );
    let flags = command_flags(&mut con, "probe.cmd");
    assert!(
        flags.iter().any(|f| f == "noscript"),
        "the probe loaded with deny-script must be flagged noscript: {flags:?}"
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["probe.cmd"]),
        Err("ERR LOCK.GUARD: 'probe.cmd' cannot be guarded: scripts may not run it".to_string()),
        "after MODULE LOAD with deny-script"
    );
    assert_counted(&mut con, c, 1, 0, "the whole test");
}
