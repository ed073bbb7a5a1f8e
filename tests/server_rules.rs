//! Server rules a blocking, writing module command has to follow, as core commands do:
//!
//! 1. `CLIENT UNBLOCK` (plain and `ERROR`) works on a client blocked in `LOCK.ACQUIRE … WAIT`,
//!    and the unblocked client has left the queue (reproduction 7).
//! 2. A `WAIT` timeout too large to add to the server's clock is refused, as `BLPOP`'s is
//!    (reproduction 5).
//! 3. On a full server (`maxmemory` reached, `noeviction`) the commands that free or keep memory
//!    (`LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE`) work like `DEL` and `EXPIRE`; only a new
//!    acquire is refused with OOM (reproduction 6).
//! 4. `COMMAND INFO` says so: no `denyoom` on those three.
//! 5. Eviction: evicted locks answer their waiters at once, and `INFO lock` counts them in
//!    `lock_evictions` (reproduction 9).
//! 6. `CLIENT PAUSE … WRITE` stops lease ends (and so grants and key removals) until writes
//!    resume, as it stops core key expiry (reproduction 8).

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{
    acquire, args, client_unblock, exists, findings_of, got, info_field, lock_info, lock_stat,
    must, release, waiting_clients, Findings, Reply, Server, Waiter,
};
use redis::{Connection, Value};

/// "At once" / "within a few ms".
const AT_ONCE: Duration = Duration::from_millis(200);
const TTL: u64 = 60_000;
const HOLDER: &str = "holder";

fn used_memory(con: &mut Connection) -> i64 {
    info_field(con, "memory", "used_memory")
        .expect("used_memory")
        .parse()
        .unwrap()
}

fn evicted_keys(con: &mut Connection) -> i64 {
    info_field(con, "stats", "evicted_keys")
        .expect("evicted_keys")
        .parse()
        .unwrap()
}

fn dbsize(con: &mut Connection) -> i64 {
    match must(con, &args(&["DBSIZE"])) {
        Value::Int(n) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

// ------------------------------------------------------------------------ CLIENT UNBLOCK

/// Reproduction 7: `CLIENT UNBLOCK <id>` on a client blocked in `LOCK.ACQUIRE … WAIT` (with
/// a timeout, and with `WAIT 0`) returns 1 and the client gets null; with `ERROR`, an error
/// starting with `UNBLOCKED`. It has left the queue: not counted, and a release does not
/// grant to it (the lock goes to the next real waiter, or is free).
#[test]
fn repro7_client_unblock_answers_a_waiter_and_it_leaves_the_queue() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let mut case = 0;
    for timeout in [5000u64, 0] {
        for error in [false, true] {
            for with_next in [false, true] {
                case += 1;
                let label = format!(
                    "[WAIT {timeout}, CLIENT UNBLOCK{}, {}]",
                    if error { " … ERROR" } else { "" },
                    if with_next {
                        "another waiter behind it"
                    } else {
                        "alone in the queue"
                    }
                );
                let key = format!("k{case}");
                let fence0 = acquire(&mut con, &key, HOLDER, TTL).unwrap();
                let mut u = Waiter::join(&server, &key, "u", TTL, timeout);
                let mut next = with_next.then(|| Waiter::join(&server, &key, "n", TTL, 0));
                let n = client_unblock(&mut con, u.id, error);
                f.check(n == 1, || {
                    format!("{label} CLIENT UNBLOCK {} replied {n}, not 1", u.id)
                });
                let r = u.reply_within(AT_ONCE);
                let answered_right = match &r {
                    Some(Reply::Null) => !error,
                    Some(Reply::Error(e)) => error && e.starts_with("UNBLOCKED"),
                    _ => false,
                };
                f.check(answered_right, || {
                    format!(
                        "{label} the unblocked client must get {} at once; got {}",
                        if error {
                            "an error starting with UNBLOCKED"
                        } else {
                            "null"
                        },
                        got(&r)
                    )
                });
                let now = lock_info(&mut con, &key);
                let want = i64::from(with_next);
                f.check(now.as_ref().is_some_and(|i| i.waiters == want), || {
                    format!("{label} LOCK.INFO {key} should count {want} waiters: {now:?}")
                });
                let counted = waiting_clients(&mut con);
                f.check(counted == want, || {
                    format!("{label} lock_waiting_clients is {counted}, not {want}")
                });
                if answered_right {
                    // Unblocked for good: its connection serves commands again.
                    let pong = u.call_now(&["PING"]);
                    f.check(pong == Reply::Status("PONG".into()), || {
                        format!("{label} PING on the unblocked connection: {pong:?}")
                    });
                }
                assert_eq!(release(&mut con, &key, HOLDER), 1, "{label} release");
                if let Some(n) = next.as_mut() {
                    let r = n.reply_within(AT_ONCE);
                    let now = lock_info(&mut con, &key);
                    f.check(
                        matches!(r, Some(Reply::Fence(g)) if g > fence0)
                            && now
                                .as_ref()
                                .is_some_and(|i| i.holder.as_deref() == Some(&b"n"[..])),
                        || {
                            format!(
                                "{label} after the release, the next waiter must hold the lock; \
                                 it got {}, LOCK.INFO {key}: {now:?}",
                                got(&r)
                            )
                        },
                    );
                } else {
                    let now = lock_info(&mut con, &key);
                    f.check(now.is_none(), || {
                        format!(
                            "{label} after the release nobody waits: {key} must be free: {now:?}"
                        )
                    });
                }
                let late = u.reply_within(Duration::from_millis(30));
                f.check(late.is_none(), || {
                    format!("{label} the unblocked client got another reply: {late:?}")
                });
                if let Some(n) = next.as_ref() {
                    release(&mut con, &key, &n.token);
                }
            }
        }
    }
    f.done("CLIENT UNBLOCK");
}

// ------------------------------------------------------------------ WAIT out of range

/// Reproduction 5: `WAIT` timeouts too large to add to the server's clock in ms are refused
/// at once with `timeout is out of range` (as `BLPOP`'s), on a held and on a free key, and
/// change nothing. `WAIT 0`, and a large timeout that fits, still wait.
#[test]
fn repro5_wait_timeouts_out_of_range_are_refused_at_once() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let fence0 = acquire(&mut con, "k", HOLDER, TTL).unwrap();
    let stat = |con: &mut Connection, name: &str| lock_stat(con, name).unwrap_or(-1);
    let before = (
        stat(&mut con, "lock_acquires"),
        stat(&mut con, "lock_contended_acquires"),
        stat(&mut con, "lock_held"),
    );
    for timeout in [
        "9223372036854775807",
        "9223372036854775000",
        "9223372035854775807",
    ] {
        for key in ["k", "free"] {
            let mut w = Waiter::send_args(&server, 0, key, "t", "1000", timeout);
            let r = w.reply_within(Duration::from_millis(500));
            let took = w.answered.map(|t| t - w.sent);
            match &r {
                Some(Reply::Error(e)) if e.contains("timeout is out of range") => {
                    f.check(took.is_some_and(|t| t < AT_ONCE), || {
                        format!("WAIT {timeout} on {key}: refused only after {took:?}")
                    });
                }
                other => f.fail(format!(
                    "LOCK.ACQUIRE {key} t 1000 WAIT {timeout} must be refused at once with an \
                     error containing 'timeout is out of range'; got {}",
                    got(other)
                )),
            }
        }
    }
    let k = lock_info(&mut con, "k");
    f.check(
        k.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence0 && i.waiters == 0
        }),
        || format!("k must be unchanged (holder {HOLDER}, fence {fence0}, 0 waiters): {k:?}"),
    );
    let free = exists(&mut con, "free");
    f.check(!free, || {
        "the refused acquires must not create the free key".to_string()
    });
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    let after = (
        stat(&mut con, "lock_acquires"),
        stat(&mut con, "lock_contended_acquires"),
        stat(&mut con, "lock_held"),
    );
    f.check(after == before, || {
        format!(
            "refused acquires must change no counter: (acquires, contended, held) {before:?} \
             -> {after:?}"
        )
    });

    // WAIT 0 waits without limit, and so does a large timeout that fits (about 3 years).
    let mut zero = Waiter::join(&server, "k", "zero", TTL, 0);
    let mut large = Waiter::join(&server, "k", "large", TTL, 100_000_000_000);
    sleep(Duration::from_millis(300));
    for w in [&mut zero, &mut large] {
        let early = w.reply_within(Duration::ZERO);
        f.check(early.is_none(), || {
            format!(
                "{} must still be waiting after 300 ms; got {early:?}",
                w.token
            )
        });
    }
    assert_eq!(release(&mut con, "k", HOLDER), 1);
    let r = zero.reply_within(AT_ONCE);
    f.check(matches!(r, Some(Reply::Fence(_))), || {
        format!(
            "the WAIT 0 waiter must be granted on release; got {}",
            got(&r)
        )
    });
    assert_eq!(release(&mut con, "k", "zero"), 1);
    let r = large.reply_within(AT_ONCE);
    f.check(matches!(r, Some(Reply::Fence(_))), || {
        format!(
            "the WAIT 100000000000 waiter must be granted on release; got {}",
            got(&r)
        )
    });
    f.done("WAIT timeout out of range");
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

// ------------------------------------------------------------------------ CLIENT PAUSE

/// A write sent during a write pause on its own socket: its reply marks when writes resumed.
fn write_probe(server: &Server) -> Waiter {
    let mut p = Waiter::send_args(server, 0, "probe-lock", "probe", "1000", "0");
    // LOCK.ACQUIRE of a free key is a write: held back by the pause, answered when it ends.
    assert!(
        p.reply_within(Duration::from_millis(50)).is_none(),
        "a write went through during CLIENT PAUSE WRITE"
    );
    p
}

/// Reproduction 8: after `CLIENT PAUSE … WRITE`, a lease that ends during the pause is not
/// handed to its waiter (`LOCK.INFO` still reads; the waiter has no reply) until the pause
/// ends, by `CLIENT UNPAUSE` or by its timeout; then the waiter is granted at once. A lease
/// that ends with no waiter leaves its key in place until writes resume, as core key expiry
/// does.
#[test]
fn repro8_client_pause_write_holds_lease_ends_until_writes_resume() {
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = [PauseCase::Unpause, PauseCase::Timeout, PauseCase::NoWaiter]
            .into_iter()
            .map(|case| scope.spawn(move || findings_of(|| pause_case(case))))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("pause thread"))
            .collect()
    });
    Findings(problems).done("CLIENT PAUSE WRITE");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PauseCase {
    /// A waiter; the pause ends by `CLIENT UNPAUSE`.
    Unpause,
    /// A waiter; the pause ends by its timeout.
    Timeout,
    /// No waiter; the pause ends by its timeout.
    NoWaiter,
}

fn pause_case(case: PauseCase) -> Vec<String> {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let label = format!("[{case:?}]");
    let acquired = Instant::now();
    acquire(&mut con, "k", HOLDER, 300).unwrap();
    let mut w = (case != PauseCase::NoWaiter).then(|| Waiter::join(&server, "k", "w", TTL, 0));
    let pause_ms = if case == PauseCase::Unpause {
        1500
    } else {
        900
    };
    must(
        &mut con,
        &args(&["CLIENT", "PAUSE", &pause_ms.to_string(), "WRITE"]),
    );
    let mut probe = (case != PauseCase::Unpause).then(|| write_probe(&server));

    // Well past the lease's end, inside the pause.
    sleep((acquired + Duration::from_millis(600)).saturating_duration_since(Instant::now()));
    let mut answered_in_pause = false;
    if let Some(w) = w.as_mut() {
        let r = w.reply_within(Duration::ZERO);
        answered_in_pause = r.is_some();
        f.check(r.is_none(), || {
            format!(
                "{label} the lease ended during CLIENT PAUSE WRITE: the waiter must not be \
                 granted yet; got {r:?}"
            )
        });
    }
    let asked = Instant::now();
    let read = cmd!(&mut con, "LOCK.INFO", "k");
    f.check(read.is_ok() && asked.elapsed() < AT_ONCE, || {
        format!(
            "{label} LOCK.INFO must read during the pause: {read:?} after {:?}",
            asked.elapsed()
        )
    });
    let kept = exists(&mut con, "k");
    f.check(kept, || {
        format!(
            "{label} the lease ended during the write pause: the key must stay until writes resume"
        )
    });

    // Writes resume.
    let resumed = if case == PauseCase::Unpause {
        must(&mut con, &args(&["CLIENT", "UNPAUSE"]));
        Instant::now()
    } else {
        let p = probe.as_mut().unwrap();
        match p.reply_within(Duration::from_secs(3)) {
            Some(Reply::Fence(_)) => {}
            other => panic!("{label} the probe write: {other:?}"),
        }
        p.answered.unwrap()
    };
    match w.as_mut() {
        Some(_) if answered_in_pause => {} // reported above
        Some(w) => {
            let r = w.reply_by(resumed + AT_ONCE);
            let now = lock_info(&mut con, "k");
            match r {
                Some(Reply::Fence(g)) => f.check(
                    now.as_ref()
                        .is_some_and(|i| i.holder.as_deref() == Some(&b"w"[..]) && i.fence == g),
                    || format!("{label} w granted {g}; LOCK.INFO k: {now:?}"),
                ),
                other => f.fail(format!(
                    "{label} once writes resume the waiter must be granted within {AT_ONCE:?}; \
                     got {}; LOCK.INFO k: {now:?}",
                    got(&other)
                )),
            }
            let early = w
                .answered
                .is_some_and(|t| t + Duration::from_millis(5) < resumed);
            f.check(!early, || {
                format!("{label} the waiter was granted before writes resumed")
            });
        }
        None => {
            let removed = common::wait_until(AT_ONCE, || !exists(&mut con, "k"));
            f.check(removed, || {
                format!(
                    "{label} once writes resume, the ended lease's key must go within {AT_ONCE:?}"
                )
            });
        }
    }
    // The holder's lease ended: its release finds nothing.
    let r = release(&mut con, "k", HOLDER);
    f.check(r == 0, || format!("{label} the ended holder released: {r}"));
    f.0
}
