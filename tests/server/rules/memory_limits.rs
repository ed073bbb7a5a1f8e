//! Rules 3 to 5, on memory: a full server (`maxmemory` reached, `noeviction`) still releases,
//! extends and fences; `COMMAND INFO` flags say so; eviction answers the waiters of evicted
//! locks and counts them in `lock_evictions`.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::memory::used_memory;
use crate::common::{
    self, acquire, args, dbsize, exists, findings_of, got, info_field, lock_info, lock_stat, must,
    waiting_clients, Findings, Reply, Server, Waiter,
};
use crate::rules::{AT_ONCE, HOLDER, TTL};
use redis::{Connection, Value};

fn evicted_keys(con: &mut Connection) -> i64 {
    info_field(con, "stats", "evicted_keys")
        .expect("evicted_keys")
        .parse()
        .unwrap()
}

// ------------------------------------------------------------------------- full server

/// Reproduction 6: with `maxmemory` reached under `noeviction`, `LOCK.RELEASE`,
/// `LOCK.EXTEND` and `LOCK.FENCE` work (as `DEL` and `EXPIRE` do), `LOCK.INFO` reads, and only
/// `LOCK.ACQUIRE` of a new key is refused with OOM.
#[test]
fn repro6_a_full_server_still_releases_extends_and_fences() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let fence0 = acquire(&mut con, "k", HOLDER, TTL).unwrap();
    must(&mut con, &args(&["SET", "plain", "v"]));
    must(
        &mut con,
        &args(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
    );
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "1"]));

    // The server is full: a core write that needs memory is refused.
    let set = cmd!(&mut con, "SET", "other", "v");
    assert!(
        matches!(&set, Err(e) if e.starts_with("OOM")),
        "the server should be full (SET refused with OOM): {set:?}"
    );
    let new = cmd!(&mut con, "LOCK.ACQUIRE", "new", "t", 1000);
    f.check(matches!(&new, Err(e) if e.starts_with("OOM")), || {
        format!("LOCK.ACQUIRE of a new key on a full server must get an OOM error: {new:?}")
    });
    let extended = cmd!(&mut con, "LOCK.EXTEND", "k", HOLDER, 30_000);
    f.check(extended == Ok(Value::Int(1)), || {
        format!("LOCK.EXTEND on a full server must work (as EXPIRE does): {extended:?}")
    });
    let fenced = cmd!(&mut con, "LOCK.FENCE", "k", HOLDER);
    let new_fence = match fenced {
        Ok(Value::Int(g)) if g > fence0 => Some(g),
        other => {
            f.fail(format!(
                "LOCK.FENCE on a full server must issue a fence above {fence0}: {other:?}"
            ));
            None
        }
    };
    match cmd!(&mut con, "LOCK.INFO", "k") {
        Ok(v) => {
            let now = common::parse_info(&v).map(common::Lock);
            f.check(
                now.as_ref().is_some_and(|i| {
                    i.holder.as_deref() == Some(HOLDER.as_bytes())
                        && new_fence.is_none_or(|g| i.fence == g)
                        && (extended != Ok(Value::Int(1)) || (i.ttl > 29_000 && i.ttl <= 30_000))
                }),
                || format!("LOCK.INFO k after the extend and fence: {now:?}"),
            );
        }
        Err(e) => f.fail(format!("LOCK.INFO on a full server must read: {e}")),
    }
    let expire = cmd!(&mut con, "EXPIRE", "plain", 100);
    assert_eq!(expire, Ok(Value::Int(1)), "EXPIRE on a full server");
    let released = cmd!(&mut con, "LOCK.RELEASE", "k", HOLDER);
    f.check(released == Ok(Value::Int(1)), || {
        format!("LOCK.RELEASE on a full server must work (as DEL does): {released:?}")
    });
    let del = cmd!(&mut con, "DEL", "plain");
    assert_eq!(del, Ok(Value::Int(1)), "DEL on a full server");
    must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "0"]));
    if released == Ok(Value::Int(1)) {
        let k = lock_info(&mut con, "k");
        f.check(k.is_none(), || {
            format!("k must be free after the release: {k:?}")
        });
    }
    let again = acquire(&mut con, "new", "t", 1000);
    f.check(again.is_some(), || {
        "with maxmemory 0 again, a new key is acquired".to_string()
    });
    f.done("full server");
}

// ------------------------------------------------------------------------ COMMAND INFO

/// Rule 4: `LOCK.RELEASE`, `LOCK.EXTEND` and `LOCK.FENCE` are writes that may run on a full
/// server (no `denyoom`); `LOCK.ACQUIRE` is a `denyoom`, `blocking` write; `LOCK.INFO` reads.
#[test]
fn command_info_flags_follow_the_memory_rules() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("lock.acquire", &["write", "denyoom", "blocking"], &[]),
        ("lock.release", &["write"], &["denyoom"]),
        ("lock.extend", &["write"], &["denyoom"]),
        ("lock.fence", &["write"], &["denyoom"]),
        ("lock.info", &["readonly"], &["write", "denyoom"]),
    ];
    for (name, with, without) in cases {
        let v = must(&mut con, &args(&["COMMAND", "INFO", name]));
        let flags: Vec<String> = match &v {
            Value::Array(items) => match items.first() {
                Some(Value::Array(fields)) if fields.len() > 2 => match &fields[2] {
                    Value::Array(fl) | Value::Set(fl) => fl
                        .iter()
                        .map(|x| match x {
                            Value::SimpleString(s) => s.clone(),
                            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            other => panic!("{name} flag {other:?}"),
                        })
                        .collect(),
                    other => panic!("{name} flags: {other:?}"),
                },
                other => panic!("COMMAND INFO {name}: {other:?}"),
            },
            other => panic!("COMMAND INFO {name}: {other:?}"),
        };
        for w in with {
            f.check(flags.iter().any(|x| x == w), || {
                format!("{name} flags {flags:?} lack {w}")
            });
        }
        for w in without {
            f.check(!flags.iter().any(|x| x == w), || {
                format!("{name} flags {flags:?} must not include {w}")
            });
        }
    }
    f.done("COMMAND INFO flags");
}

// ----------------------------------------------------------------------------- eviction

/// Reproduction 9: under `allkeys-random` (and `allkeys-lru`) with a small `maxmemory`, held
/// locks are evicted; waiters on evicted locks are answered null at once, those on surviving
/// locks keep waiting, and `INFO lock` `lock_evictions` grows by the number of lock keys that
/// eviction removed (equal to `evicted_keys`, as only lock keys exist).
#[test]
fn repro9_eviction_answers_waiters_and_counts_lock_evictions() {
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["allkeys-random", "allkeys-lru"]
            .into_iter()
            .map(|policy| scope.spawn(move || findings_of(|| eviction_case(policy))))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("eviction thread"))
            .collect()
    });
    Findings(problems).done("eviction");
}

fn eviction_case(policy: &str) -> Vec<String> {
    const LOCKS: usize = 3000;
    const WAITED: usize = 16;
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    must(
        &mut con,
        &args(&["CONFIG", "SET", "maxmemory-policy", policy]),
    );
    let base = used_memory(&mut con);
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("L{i}"))
            .arg(format!("h{i}"))
            .arg(TTL);
    }
    let fences: Vec<Option<i64>> = pipe.query(&mut con).expect("acquire the locks");
    assert!(fences.iter().all(Option::is_some), "every lock is acquired");
    let lock_mem = used_memory(&mut con) - base;
    let waited: Vec<String> = (0..WAITED).map(|i| format!("L{}", i * 97)).collect();
    let mut waiters: Vec<Waiter> = waited
        .iter()
        .enumerate()
        .map(|(i, key)| Waiter::join(&server, key, &format!("w{i}"), TTL, 0))
        .collect();
    let evicted0 = evicted_keys(&mut con);
    let lock_evictions0 = lock_stat(&mut con, "lock_evictions");
    f.check(lock_evictions0.is_some(), || {
        format!("[{policy}] INFO lock has no lock_evictions field")
    });

    // Lower maxmemory until at least one waited lock is evicted.
    let mut stopped_at = Instant::now();
    let floor = used_memory(&mut con) - lock_mem;
    for keep in [0.6, 0.3, 0.1, 0.0] {
        let max = (floor as f64 + lock_mem as f64 * keep).max(1.0) as i64;
        must(
            &mut con,
            &args(&["CONFIG", "SET", "maxmemory", &max.to_string()]),
        );
        sleep(Duration::from_millis(30)); // eviction may go on in the background
        must(&mut con, &args(&["CONFIG", "SET", "maxmemory", "0"]));
        stopped_at = Instant::now();
        if waited.iter().any(|k| !exists(&mut con, k)) {
            break;
        }
    }
    // Right after: whoever lost their lock is no longer counted.
    let counted = waiting_clients(&mut con);
    let size = dbsize(&mut con);
    let gone = LOCKS as i64 - size;
    let evicted = evicted_keys(&mut con) - evicted0;
    let held = lock_stat(&mut con, "lock_held");
    assert!(gone > 0, "[{policy}] nothing was evicted");
    assert_eq!(
        gone, evicted,
        "[{policy}] only lock keys exist: keys gone = evicted_keys"
    );
    if let (Some(e0), Some(e1)) = (lock_evictions0, lock_stat(&mut con, "lock_evictions")) {
        f.check(e1 - e0 == gone, || {
            format!(
                "[{policy}] lock_evictions grew by {}, but {gone} lock keys were evicted \
                 (evicted_keys grew by {evicted})",
                e1 - e0
            )
        });
    }
    f.check(held == Some(size), || {
        format!("[{policy}] lock_held is {held:?}, but {size} lock keys remain")
    });
    let mut survivors = 0;
    for (w, key) in waiters.iter_mut().zip(&waited) {
        if exists(&mut con, key) {
            survivors += 1;
            let r = w.reply_within(Duration::ZERO);
            f.check(r.is_none(), || {
                format!(
                    "[{policy}] {} waits on {key}, which was not evicted; it got {r:?}",
                    w.token
                )
            });
            let now = lock_info(&mut con, key);
            f.check(now.as_ref().is_some_and(|i| i.waiters == 1), || {
                format!("[{policy}] LOCK.INFO {key} (not evicted) should count 1 waiter: {now:?}")
            });
        } else {
            let r = w.reply_by(stopped_at + AT_ONCE);
            f.check(r == Some(Reply::Null), || {
                format!(
                    "[{policy}] {} waited on {key}, which was evicted: it must be answered null \
                     at once; got {}",
                    w.token,
                    got(&r)
                )
            });
        }
    }
    f.check(survivors < WAITED, || {
        format!("[{policy}] no waited lock was evicted; the test proves nothing")
    });
    f.check(counted == survivors as i64, || {
        format!(
            "[{policy}] right after the eviction, lock_waiting_clients is {counted}; \
             {survivors} waiters still have their lock"
        )
    });
    f.0
}
