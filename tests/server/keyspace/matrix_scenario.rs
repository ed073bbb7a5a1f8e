//! One scenario of the matrix: an operation against a waiter in one state, on fresh servers,
//! and every check of what it left: who was answered, with what and when, where the lock is
//! now and whom a release there grants, and that no ghost waiter reaches a sentinel.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common;
use crate::common::{
    acquire, args, client_connected, client_unblock, conn_in, exec, got, lock_info, must,
    panic_text, release, wait_until, waiting_clients, Findings, Reply, Server, Waiter,
};
use crate::keyspace::answer_checks::{block_sentinels, check_sentinels, expect_null_at_once};
use crate::keyspace::matrix_cases::{op_commands, op_setup, Op, Origin, State};
use crate::keyspace::{
    AT_ONCE, DB1_HOLDER, HOLDER, LATER_TIMEOUT, SENTINELS, SHORT_TIMEOUT, SRC_HOLDER, TTL,
};

/// One operation against a waiter in one state, on fresh servers. Returns the failures,
/// each naming the operation and the state.
pub(crate) fn scenario(op: Op, state: State) -> Vec<String> {
    let server = Server::new();
    let target = op.needs_target().then(Server::new);
    // What was found before a step that cannot go on is kept.
    let mut found = Findings::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        run_scenario(op, state, &server, target.as_ref(), &mut found)
    }));
    let mut problems = found.0;
    if let Err(p) = result {
        problems.push(format!("stopped: {}", panic_text(&*p)));
    }
    problems
        .into_iter()
        .map(|p| format!("[{} | {}] {p}", op.label(), state.label()))
        .collect()
}

fn run_scenario(op: Op, state: State, server: &Server, target: Option<&Server>, f: &mut Findings) {
    let mut admin = server.conn();
    let mut setup = op_setup(op, server, target, &mut admin);
    let fence0 = acquire(&mut admin, "k", HOLDER, TTL).expect("k is free");

    // The waiter under test, and a second one queued behind it.
    let w_timeout = match state {
        State::TimesOutLater => LATER_TIMEOUT,
        State::TimedOutBefore => SHORT_TIMEOUT,
        _ => 0,
    };
    let mut w = Some(Waiter::join(server, "k", "w", TTL, w_timeout));
    // Queued behind w (w, with a short timeout, may leave while c joins).
    let mut c = Waiter::join_blocked_in(server, 0, "k", "c", TTL, 0);
    let w_id = w.as_ref().unwrap().id;
    let w_sent = w.as_ref().unwrap().sent;

    // Before the operation.
    match state {
        State::TimedOutBefore => {
            let r = w.as_mut().unwrap().reply_within(Duration::from_secs(2));
            assert_eq!(
                r,
                Some(Reply::Null),
                "WAIT {SHORT_TIMEOUT} must time out with null"
            );
        }
        State::DisconnectedBefore => {
            drop(w.take());
            assert!(
                wait_until(Duration::from_secs(5), || !client_connected(
                    &mut admin, w_id
                )),
                "the server did not see the waiter disconnect"
            );
        }
        State::UnblockedBefore | State::UnblockedErrorBefore => {
            let error = state == State::UnblockedErrorBefore;
            let n = client_unblock(&mut admin, w_id, error);
            assert_eq!(
                n,
                1,
                "CLIENT UNBLOCK {w_id}{} must return 1",
                if error { " ERROR" } else { "" }
            );
            let r = w.as_mut().unwrap().reply_within(AT_ONCE);
            let ok = match &r {
                Some(Reply::Null) => !error,
                Some(Reply::Error(e)) => error && e.starts_with("UNBLOCKED"),
                _ => false,
            };
            assert!(ok, "the unblocked waiter got {}", got(&r));
        }
        _ => {}
    }
    if matches!(
        state,
        State::TimedOutBefore
            | State::DisconnectedBefore
            | State::UnblockedBefore
            | State::UnblockedErrorBefore
    ) {
        let now = lock_info(&mut admin, "k");
        f.check(now.as_ref().is_some_and(|i| i.waiters == 1), || {
            format!(
                "after w left, before the operation, LOCK.INFO k should count 1 waiter (c): \
                 {now:?}"
            )
        });
        let counted = waiting_clients(&mut admin);
        let want = 1 + setup.extras.len() - setup.extras_on_target;
        f.check(counted == want as i64, || {
            format!(
                "after w left, before the operation, lock_waiting_clients is {counted}, not {want}"
            )
        });
    }

    // The operation.
    let cmds = op_commands(op, &setup, target);
    let release_k = args(&["LOCK.RELEASE", "k", HOLDER]);
    let at = Instant::now();
    match state {
        State::Undelivered => {
            let mut all = vec![release_k];
            all.extend(cmds);
            let r = exec(&mut admin, &all);
            assert_eq!(r[0], Value::Int(1), "LOCK.RELEASE k holder inside MULTI");
        }
        State::UndeliveredKilled => {
            let mut all = vec![
                release_k,
                args(&["CLIENT", "KILL", "ID", &w_id.to_string()]),
            ];
            all.extend(cmds);
            let r = exec(&mut admin, &all);
            assert_eq!(r[0], Value::Int(1), "LOCK.RELEASE k holder inside MULTI");
        }
        _ if op.atomic() => {
            exec(&mut admin, &cmds);
        }
        _ => {
            for cmd in &cmds {
                must(&mut admin, cmd);
            }
        }
    }
    // When the key went (for expiry: when it is seen gone; a read deletes an expired key).
    let gone_at = if op == Op::Expire {
        let expired = wait_until(Duration::from_secs(3), || !common::exists(&mut admin, "k"));
        assert!(expired, "k did not expire within 3s of PEXPIRE k 100");
        Instant::now()
    } else {
        Instant::now()
    };
    if state == State::DisconnectsAfter {
        drop(w.take());
    }
    // Same turn: by the time the operation's reply is out, its waiters are answered, so the
    // next command counts none of them.
    let counted_after_op = waiting_clients(&mut admin);
    if state == State::UnblockedAfter {
        // 0 if the operation already answered it (as it should have); 1 if it was still
        // blocked. Either way w must have been answered null at once (checked below).
        client_unblock(&mut admin, w_id, false);
    }

    // The answers.
    let deadline = gone_at + AT_ONCE;
    let reload_tolerant = op == Op::DebugReload;
    let mut told_fence: Option<(String, i64)> = None;
    if let Some(w) = w.as_mut() {
        match state {
            State::Queued | State::TimesOutLater | State::UnblockedAfter | State::Undelivered => {
                let r = w.reply_by(deadline);
                match r {
                    Some(Reply::Null) => {
                        if op == Op::Expire
                            && w.answered.unwrap() + Duration::from_millis(5)
                                < at + Duration::from_millis(100)
                        {
                            f.fail(format!(
                                "w was answered null {:?} after PEXPIRE k 100, before the key \
                                 expired",
                                w.answered.unwrap() - at
                            ));
                        }
                    }
                    Some(Reply::Fence(fence)) if reload_tolerant && state == State::Undelivered => {
                        told_fence = Some(("w".to_string(), fence));
                    }
                    Some(Reply::Fence(fence)) => f.fail(format!(
                        "w was told it holds k (fence {fence}), but k's lock was deleted, replaced \
                         or moved away: it must be answered null"
                    )),
                    other => {
                        let late = w
                            .reply_by(w_sent + Duration::from_millis(w_timeout.max(400) + 800))
                            .map(|l| {
                                format!(" (then, {:?} after the operation: {l:?})", at.elapsed())
                            });
                        f.fail(format!(
                            "w must be answered null within {AT_ONCE:?} of the operation; got {}{}",
                            got(&other),
                            late.unwrap_or_default()
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if state == State::UndeliveredKilled {
        let killed = w.as_mut().expect("w").closed_within(Duration::from_secs(2));
        f.check(killed == Ok(true), || {
            format!("the killed grantee w must be disconnected without a reply; got {killed:?}")
        });
    }
    {
        let r = c.reply_by(deadline);
        match r {
            Some(Reply::Null) => {}
            Some(Reply::Fence(fence)) if reload_tolerant && state == State::UndeliveredKilled => {
                told_fence = Some(("c".to_string(), fence));
            }
            other => {
                let late = c
                    .reply_by(deadline + Duration::from_millis(1200))
                    .map(|l| format!(" (then, {:?} after the operation: {l:?})", at.elapsed()));
                f.fail(format!(
                    "c (queued behind w{}) must be answered null within {AT_ONCE:?} of the \
                     operation; got {}{}",
                    if state == State::UndeliveredKilled {
                        ", passed the grant when w was killed"
                    } else {
                        ""
                    },
                    got(&other),
                    late.unwrap_or_default()
                ));
            }
        }
    }
    for e in setup.extras.iter_mut() {
        let who = format!(
            "{} (waiting on another lock the operation deleted, replaced or moved away)",
            e.token
        );
        expect_null_at_once(f, e, &who, at, deadline);
    }
    f.check(counted_after_op == 0, || {
        format!(
            "right after the operation, INFO lock counts {counted_after_op} waiting clients, \
             not 0: its waiters must be answered in the same turn"
        )
    });

    // Let a timeout that should no longer matter pass.
    if state == State::TimesOutLater {
        let end = w_sent + Duration::from_millis(LATER_TIMEOUT + 150);
        sleep(end.saturating_duration_since(Instant::now()));
    }

    // Clients blocked on another key: a ghost waiter's id must never reach them.
    let mut sentinels = block_sentinels(server, &mut admin, SENTINELS);

    // Where the lock is now: the right lock, nobody waiting there, and a release there
    // grants nobody.
    for place in op.places() {
        let owner = if place.on_target {
            target.expect("target")
        } else {
            server
        };
        let mut con = conn_in(owner, place.db);
        let where_ = format!(
            "{}db {} key {}",
            if place.on_target {
                "target server, "
            } else {
                ""
            },
            place.db,
            place.key
        );
        let found = lock_info(&mut con, place.key);
        let expected: Option<(&str, i64)> = match place.origin {
            Origin::Own if state.undelivered() => None,
            Origin::Own => Some((HOLDER, fence0)),
            Origin::Src => Some((SRC_HOLDER, setup.src_fence.unwrap())),
            Origin::Db1 => Some((DB1_HOLDER, setup.db1_fence.unwrap())),
            Origin::Copy => None,
        };
        if let Some((who, fence)) = told_fence.as_ref().filter(|_| place.origin == Origin::Own) {
            f.check(
                found.as_ref().is_some_and(|i| {
                    i.holder.as_deref() == Some(who.as_bytes()) && i.fence == *fence
                }),
                || {
                    format!(
                        "{who} was told it holds k with fence {fence}, but LOCK.INFO k is \
                         {found:?}"
                    )
                },
            );
        }
        match (&found, expected) {
            (None, None) if state.undelivered() && place.origin == Origin::Own => {}
            (None, _) => f.fail(format!("no lock at {where_} after the operation")),
            (Some(i), exp) => {
                f.check(i.waiters == 0, || {
                    format!(
                        "LOCK.INFO at {where_} counts {} waiters, not 0: {i:?}",
                        i.waiters
                    )
                });
                if let Some((who, fence)) = exp {
                    f.check(
                        i.holder.as_deref() == Some(who.as_bytes()) && i.fence == fence,
                        || {
                            format!(
                                "the lock at {where_} should keep holder {who} and fence \
                                 {fence}: {i:?}"
                            )
                        },
                    );
                    // A lock that went through DUMP/RESTORE, MIGRATE or a reload carries its
                    // deadline as Unix ms, rounded up: a ms more is no longer lease.
                    let slack = if op.serializes() { 5 } else { 0 };
                    f.check(i.ttl > 0 && i.ttl <= TTL as i64 + slack, || {
                        format!("the lock at {where_} should keep its lease: {i:?}")
                    });
                }
            }
        }
        if let Some(h) = found.as_ref().and_then(|i| i.holder.clone()) {
            // A client that blocks there now is the only one a release there may grant.
            let h = String::from_utf8_lossy(&h).into_owned();
            let before = found.as_ref().map_or(0, |i| i.waiters);
            let mut z = Waiter::send_in(owner, place.db, place.key, "z", TTL, 0);
            let mut early = None;
            let queued = wait_until(Duration::from_secs(5), || {
                early = early.take().or_else(|| z.reply_within(Duration::ZERO));
                early.is_some()
                    || lock_info(&mut con, place.key).is_some_and(|i| i.waiters == before + 1)
            });
            if let Some(r) = early {
                // The lock was no longer held by the time z asked: only a lock whose grant
                // was undelivered may be taken back like that.
                let now = lock_info(&mut con, place.key);
                f.check(state.undelivered() && place.origin == Origin::Own, || {
                    format!(
                        "LOCK.INFO at {where_} showed holder {h}, but z, asking right \
                             after, was answered {r:?} instead of queueing; LOCK.INFO now: \
                             {now:?}"
                    )
                });
                if let (Reply::Fence(_), Some(i)) = (&r, &now) {
                    if i.holder.as_deref() == Some(&b"z"[..]) {
                        release(&mut con, place.key, "z");
                    }
                }
                continue;
            }
            assert!(queued, "z did not queue at {where_}");
            let r = release(&mut con, place.key, &h);
            // An undelivered grant is taken back by the sweep, a moment after the operation:
            // also after z queued, when it passes the lock to z (checked below) and h's release
            // finds nothing to release.
            let taken_back = r == 0 && state.undelivered() && place.origin == Origin::Own;
            f.check(r == 1 || taken_back, || {
                format!("LOCK.RELEASE {} {h} at {where_} replied {r}", place.key)
            });
            let zr = z.reply_within(AT_ONCE);
            let after = lock_info(&mut con, place.key);
            let z_holds = match (&zr, &after) {
                (Some(Reply::Fence(g)), Some(i)) => {
                    i.holder.as_deref() == Some(&b"z"[..]) && i.fence == *g && i.waiters == 0
                }
                _ => false,
            };
            f.check(z_holds, || {
                format!(
                    "after its holder released the lock at {where_}, it must go to z, the one \
                     client blocked there (a waiter that left must not be ahead of it): z got \
                     {}, LOCK.INFO: {after:?}",
                    got(&zr)
                )
            });
            if z_holds {
                release(&mut con, place.key, "z");
                let gone = lock_info(&mut con, place.key);
                f.check(gone.is_none(), || {
                    format!("after z released the lock at {where_}, it must be free: {gone:?}")
                });
            }
        }
    }

    // k in db 0, when the operation left no lock there.
    let k_has_lock = op
        .places()
        .iter()
        .any(|p| !p.on_target && p.db == 0 && p.key == "k");
    if op == Op::Overwrite {
        let v = must(&mut admin, &args(&["GET", "k"]));
        f.check(v == Value::BulkString(b"v".to_vec()), || {
            format!("GET k after SET k v: {v:?}")
        });
    } else if !k_has_lock {
        let now = lock_info(&mut admin, "k");
        f.check(now.is_none(), || {
            format!("k should hold no lock after the operation: {now:?}")
        });
        if now.is_none() {
            let again = acquire(&mut admin, "k", "again", TTL);
            f.check(again.is_some_and(|g| g > fence0), || {
                format!("a fresh acquire of k should get a fence above {fence0}: {again:?}")
            });
        }
    }

    check_sentinels(f, &mut admin, &mut sentinels);
    let counted = waiting_clients(&mut admin);
    f.check(counted == SENTINELS as i64, || {
        format!(
            "at the end, INFO lock counts {counted} waiting clients; only the {SENTINELS} \
             sentinels wait"
        )
    });
    // Nobody was answered twice (or, for a waiter that had left, at all after leaving).
    for (name, waiter) in w.iter_mut().map(|w| ("w", w)).chain([("c", &mut c)]) {
        if !waiter.is_closed() {
            if let Some(r) = waiter.reply_within(Duration::ZERO) {
                f.fail(format!("{name} got a further reply later: {r:?}"));
            }
        }
    }
    for e in setup.extras.iter_mut() {
        if let Some(r) = e.reply_within(Duration::ZERO) {
            f.fail(format!("{} got a further reply later: {r:?}", e.token));
        }
    }
}
