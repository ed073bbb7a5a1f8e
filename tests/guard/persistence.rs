//! `LOCK.GUARD` and propagation (docs/operations.md, The server around a lock): only the inner
//! command's effects reach the AOF and replicas, as if the client had sent the command alone.
//!
//! 1. The AOF holds the inner commands and never `LOCK.GUARD`; a refused guard adds nothing;
//!    the data comes back after a restart from the AOF and after `DEBUG RELOAD`.
//! 2. A replica gets the inner commands only, never runs `LOCK.GUARD`, and refuses it from
//!    its own clients with `READONLY`.

use crate::cmd;
use crate::common::guard::*;
use crate::common::*;
use redis::Value;

// ----------------------------------------------------------------- AOF, reload, replicas

fn mentions(cmds: &[Vec<Vec<u8>>], word: &str) -> bool {
    cmds.iter()
        .flatten()
        .any(|a| String::from_utf8_lossy(a).to_lowercase().contains(word))
}

fn has_cmd(cmds: &[Vec<Vec<u8>>], want: &[&str]) -> bool {
    cmds.iter().any(|c| {
        c.len() == want.len()
            && c[0].eq_ignore_ascii_case(want[0].as_bytes())
            && c[1..]
                .iter()
                .zip(&want[1..])
                .all(|(a, b)| a == b.as_bytes())
    })
}

/// The AOF holds the inner commands and never `LOCK.GUARD`; a refused guard adds nothing;
/// the data comes back after a restart from the AOF and after `DEBUG RELOAD`.
#[test]
fn the_aof_holds_only_the_inner_commands() {
    let mut s = Server::start(Opts::new().appendonly().extra(&["--appendfsync", "always"]));
    let mut con = s.conn();
    let stale = hold(&mut con, "lk");
    let f = fence(&mut con, "lk", HOLDER).unwrap();
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v1"]),
        Ok(Value::Okay)
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["RPUSH", "list", "a", "b"]),
        Ok(Value::Int(2))
    );
    assert_eq!(guard(&mut con, "lk", f, &["GET", "data"]), Ok(bulk("v1")));

    let size = aof::incr(&s).len();
    assert_err_starts(
        &guard(&mut con, "lk", stale, &["SET", "refused1", "x"]),
        NEWER,
    );
    assert_err_starts(
        &guard(&mut con, "lk", f + 1, &["SET", "refused2", "x"]),
        OLDER,
    );
    assert_err_starts(
        &guard(&mut con, "nokey", f, &["SET", "refused3", "x"]),
        NOT_HELD,
    );
    assert_err_starts(
        &guard(&mut con, "lk", f, &["NoSuchCmd", "refused4"]),
        "ERR LOCK.GUARD:",
    );
    assert_err_starts(
        &guard_text(&mut con, "lk", "0", &["SET", "refused5", "x"]),
        "ERR fence must be a positive integer",
    );
    assert_eq!(aof::incr(&s).len(), size, "refused guards wrote to the AOF");

    let cmds = aof::commands(&aof::incr(&s));
    assert!(
        !mentions(&cmds, "lock.guard"),
        "LOCK.GUARD in the AOF: {cmds:?}"
    );
    assert!(
        !mentions(&cmds, "refused"),
        "a refused guard's command in the AOF"
    );
    assert!(
        has_cmd(&cmds, &["SET", "data", "v1"]),
        "no SET data v1 in the AOF"
    );
    assert!(
        has_cmd(&cmds, &["RPUSH", "list", "a", "b"]),
        "no RPUSH in the AOF"
    );

    drop(con);
    s.kill9();
    s.start_again();
    let mut con = s.conn();
    assert_eq!(
        get(&mut con, "data"),
        bulk("v1"),
        "after a restart from the AOF"
    );
    assert_eq!(cmd!(&mut con, "LLEN", "list"), Ok(Value::Int(2)));
    assert_eq!(
        info(&mut con, "lk").map(|i| i.fence),
        Some(f),
        "the lock after the restart"
    );
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v2"]),
        Ok(Value::Okay)
    );

    assert_eq!(cmd!(&mut con, "DEBUG", "RELOAD"), Ok(Value::Okay));
    assert_eq!(get(&mut con, "data"), bulk("v2"), "after DEBUG RELOAD");
    assert_eq!(cmd!(&mut con, "LLEN", "list"), Ok(Value::Int(2)));
    assert_eq!(
        guard(&mut con, "lk", f, &["SET", "data", "v3"]),
        Ok(Value::Okay)
    );
    let cmds = aof::commands(&aof::incr(&s));
    assert!(
        !mentions(&cmds, "lock.guard"),
        "LOCK.GUARD in the AOF: {cmds:?}"
    );
    assert!(
        has_cmd(&cmds, &["SET", "data", "v3"]),
        "no SET data v3 in the AOF"
    );
}

/// A replica receives the inner commands only: it has the data, never ran `LOCK.GUARD`
/// (no `cmdstat_lock.guard`, its counters at 0), got nothing from a refused guard, and
/// refuses `LOCK.GUARD` from its own clients as a write command.
#[test]
fn a_replica_gets_the_inner_commands_only() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let stale = hold(&mut mc, "lk");
    let f = fence(&mut mc, "lk", HOLDER).unwrap();
    assert_eq!(
        guard(&mut mc, "lk", f, &["SET", "data", "v1"]),
        Ok(Value::Okay)
    );
    assert_eq!(
        guard(&mut mc, "lk", f, &["HSET", "h", "f", "v"]),
        Ok(Value::Int(1))
    );
    assert_err_starts(
        &guard(&mut mc, "lk", stale, &["SET", "refused", "x"]),
        NEWER,
    );
    assert_eq!(
        wait_replicas(&mut mc, 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack"
    );

    assert_eq!(get(&mut rc, "data"), bulk("v1"));
    assert_eq!(cmd!(&mut rc, "HGET", "h", "f"), Ok(bulk("v")));
    assert!(
        !exists(&mut rc, "refused"),
        "a refused guard reached the replica"
    );
    assert_eq!(info(&mut rc, "lk").map(|i| i.fence), Some(f));
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut rc)
        .unwrap();
    assert!(
        !stats.contains("cmdstat_lock.guard"),
        "the replica ran LOCK.GUARD:\n{stats}"
    );
    assert!(
        stats.contains("cmdstat_set:"),
        "the replica did not apply SET:\n{stats}"
    );
    assert!(
        stats.contains("cmdstat_hset:"),
        "the replica did not apply HSET:\n{stats}"
    );
    assert_eq!(
        counters(&mut rc),
        Counters {
            runs: 0,
            refusals: 0
        },
        "replica counters"
    );
    let mstats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut mc)
        .unwrap();
    assert!(
        mstats.contains("cmdstat_lock.guard:calls=3,"),
        "master:\n{mstats}"
    );

    assert_err_starts(&guard(&mut rc, "lk", f, &["SET", "data", "v2"]), "READONLY");
    assert_eq!(get(&mut rc, "data"), bulk("v1"));
}
