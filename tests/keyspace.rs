//! Guarantee 3 against everything the keyspace can do to a lock's key. A waiter waits for a
//! *(db, key name)*; whatever happens to that key (`DEL`, `UNLINK`, the flushes, `RENAME` and
//! `RENAMENX` on either side, `MOVE`, `SWAPDB`, `COPY … REPLACE`, `RESTORE … REPLACE`, an
//! overwrite, expiry, eviction, `MIGRATE`, `DEBUG RELOAD`):
//!
//! - a client told it holds the lock holds it at the db and key it asked for at that instant;
//! - a waiter that has left (timed out, disconnected, `CLIENT UNBLOCK`ed) is never granted and
//!   never counted (`LOCK.INFO` waiters, `INFO lock` `lock_waiting_clients`);
//! - nobody waits past their timeout;
//! - waiters whose lock is deleted, replaced or moved away are answered null at once, in the
//!   same turn; a moved lock keeps holder, fence and lease at its new place, with no waiters;
//! - waiter ids are never reused: a grant goes only to a client blocked, at that moment, on
//!   that (db, key).
//!
//! The matrix (`matrix_*`) runs every operation against a waiter in each state (queued,
//! timing out later, timed out, disconnected, unblocked, granted but not yet told); each
//! failure names the operation and the state. After each scenario, clients blocked on another
//! key ("sentinels") must not be handed anything when the lock is released at its new place:
//! that is how a ghost waiter whose id was reused would show. The `repro*` tests are the
//! reported reproductions, step by step.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{
    acquire, args, client_connected, client_unblock, conn_in, exec, got, info, lock_info, must,
    panic_text, release, wait_until, waiting_clients, Findings, Reply, Server, Waiter,
};
use redis::{Connection, Value};

/// "At once": a waiter whose lock is deleted, replaced or moved away is answered within this
/// (the module should take a few ms; a waiter answered by a timer or the cron would not).
const AT_ONCE: Duration = Duration::from_millis(200);
/// Lease of every lock the tests take (it never ends during a test).
const TTL: u64 = 60_000;
const HOLDER: &str = "holder";
const SRC_HOLDER: &str = "src-holder";
const DB1_HOLDER: &str = "db1-holder";
/// Clients blocked on another key after each scenario, to catch a ghost waiter's grant.
const SENTINELS: usize = 8;
/// The `WAIT` timeout of a waiter still queued when the operation runs, that would time out
/// later (well above `AT_ONCE`, so that being answered by the timeout is told apart).
const LATER_TIMEOUT: u64 = 800;
/// The `WAIT` timeout of a waiter that times out before the operation.
const SHORT_TIMEOUT: u64 = 120;

// ------------------------------------------------------------------------------ helpers

/// Blocks `n` clients on key `o` (held by `o-holder`, taken here), in db 0.
fn block_sentinels(server: &Server, con: &mut Connection, n: usize) -> Vec<Waiter> {
    acquire(con, "o", "o-holder", TTL).expect("key o is free");
    let ws: Vec<Waiter> = (0..n)
        .map(|i| Waiter::send(server, "o", &format!("s{i}"), TTL, 0))
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || info(con, "o")
            .map_or(0, |i| i.waiters)
            == n as i64),
        "the {n} sentinels did not all block on o"
    );
    ws
}

/// The sentinels on `o` were handed nothing, and `o` has its one holder and all of them
/// queued.
fn check_sentinels(f: &mut Findings, con: &mut Connection, sentinels: &mut [Waiter]) {
    sleep(Duration::from_millis(30));
    for s in sentinels.iter_mut() {
        if let Some(r) = s.reply_within(Duration::ZERO) {
            f.fail(format!(
                "sentinel {} (client {}), blocked on another key o, was answered {r:?}: a grant \
                 or answer meant for a waiter that had left reached another client",
                s.token, s.id
            ));
        }
    }
    let o = lock_info(con, "o");
    f.check(
        o.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(&b"o-holder"[..]) && i.waiters == sentinels.len() as i64
        }),
        || {
            format!(
                "LOCK.INFO o should show holder o-holder and {} waiters, got {o:?}",
                sentinels.len()
            )
        },
    );
}

/// Reads the answer that must be null and at once (by `deadline`; `from` is the instant
/// the operation happened, for the message).
fn expect_null_at_once(
    f: &mut Findings,
    w: &mut Waiter,
    who: &str,
    from: Instant,
    deadline: Instant,
) {
    let r = w.reply_by(deadline);
    if r == Some(Reply::Null) {
        return;
    }
    let late = w
        .reply_by(deadline + Duration::from_millis(1200))
        .map(|late| {
            format!(
                " (then, {:?} after the operation: {late:?})",
                from.elapsed()
            )
        });
    f.fail(format!(
        "{who} must be answered null within {AT_ONCE:?}; got {}{}",
        got(&r),
        late.unwrap_or_default()
    ));
}

// ---------------------------------------------------------------------------- the matrix

/// A keyspace operation on the lock key `k` (db 0), held by `holder` with waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Del,
    Unlink,
    FlushDb,
    FlushDbSync,
    FlushDbAsync,
    FlushAll,
    FlushAllSync,
    FlushAllAsync,
    /// `RENAME k k2`.
    RenameAway,
    /// `RENAMENX k k2`.
    RenameNxAway,
    /// `RENAME src k`: another lock renamed onto k.
    RenameOnto,
    /// `DEL k` then `RENAMENX src k`, in one transaction: another lock arrives under k's name
    /// in the same turn.
    RenameNxOnto,
    MoveAway,
    /// `SWAPDB 0 1` with db 1 empty.
    SwapDb,
    /// `SWAPDB 0 1` with a lock (with a waiter) at k in db 1 too.
    SwapDbBothHeld,
    /// `COPY src k REPLACE`.
    CopyReplaceOnto,
    /// `RESTORE k 0 <DUMP src> REPLACE`.
    RestoreReplaceOnto,
    /// `SET k v`.
    Overwrite,
    /// `PEXPIRE k 100`, then the key expires.
    Expire,
    /// `CONFIG SET maxmemory 1` under allkeys-random (every key evicted), then back to 0.
    EvictRandom,
    /// The same under allkeys-lru.
    EvictLru,
    /// `MIGRATE` to another server.
    Migrate,
    /// `MIGRATE … REPLACE` to another server where k is held too, with a waiter.
    MigrateReplace,
    DebugReload,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Del => "DEL k",
            Op::Unlink => "UNLINK k",
            Op::FlushDb => "FLUSHDB",
            Op::FlushDbSync => "FLUSHDB SYNC",
            Op::FlushDbAsync => "FLUSHDB ASYNC",
            Op::FlushAll => "FLUSHALL",
            Op::FlushAllSync => "FLUSHALL SYNC",
            Op::FlushAllAsync => "FLUSHALL ASYNC",
            Op::RenameAway => "RENAME k k2",
            Op::RenameNxAway => "RENAMENX k k2",
            Op::RenameOnto => "RENAME src k (a lock renamed onto k)",
            Op::RenameNxOnto => "MULTI: DEL k; RENAMENX src k",
            Op::MoveAway => "MOVE k 1",
            Op::SwapDb => "SWAPDB 0 1 (db 1 empty)",
            Op::SwapDbBothHeld => "SWAPDB 0 1 (k held in both)",
            Op::CopyReplaceOnto => "COPY src k REPLACE",
            Op::RestoreReplaceOnto => "RESTORE k 0 <dump of src> REPLACE",
            Op::Overwrite => "SET k v (overwrite by another type)",
            Op::Expire => "PEXPIRE k 100, then expiry",
            Op::EvictRandom => "eviction (allkeys-random, maxmemory 1)",
            Op::EvictLru => "eviction (allkeys-lru, maxmemory 1)",
            Op::Migrate => "MIGRATE k to another server",
            Op::MigrateReplace => "MIGRATE k … REPLACE onto a held k on another server",
            Op::DebugReload => "DEBUG RELOAD",
        }
    }

    /// Whether the operation can run inside the transaction that grants k first.
    fn in_multi(self) -> bool {
        !matches!(self, Op::Expire | Op::EvictRandom | Op::EvictLru)
    }

    /// Whether it must run as one transaction even on its own.
    fn atomic(self) -> bool {
        self == Op::RenameNxOnto
    }

    /// Whether the lock reaches its place through its serialized form.
    fn serializes(self) -> bool {
        matches!(
            self,
            Op::RestoreReplaceOnto | Op::Migrate | Op::MigrateReplace | Op::DebugReload
        )
    }

    fn needs_target(self) -> bool {
        matches!(self, Op::Migrate | Op::MigrateReplace)
    }

    /// Whether another lock `src` is set up (and moved, copied or dumped onto k).
    fn uses_src(self) -> bool {
        matches!(
            self,
            Op::RenameOnto | Op::RenameNxOnto | Op::CopyReplaceOnto | Op::RestoreReplaceOnto
        )
    }

    /// Where a lock is after the operation, and which lock it is.
    fn places(self) -> Vec<Place> {
        let own = |on_target, db, key| Place {
            on_target,
            db,
            key,
            origin: Origin::Own,
        };
        let at_k = |origin| Place {
            on_target: false,
            db: 0,
            key: "k",
            origin,
        };
        match self {
            Op::RenameAway | Op::RenameNxAway => vec![own(false, 0, "k2")],
            Op::MoveAway | Op::SwapDb => vec![own(false, 1, "k")],
            Op::SwapDbBothHeld => vec![own(false, 1, "k"), at_k(Origin::Db1)],
            Op::RenameOnto | Op::RenameNxOnto | Op::RestoreReplaceOnto => vec![at_k(Origin::Src)],
            Op::CopyReplaceOnto => vec![at_k(Origin::Copy)],
            Op::Migrate | Op::MigrateReplace => vec![own(true, 0, "k")],
            Op::DebugReload => vec![own(false, 0, "k")],
            _ => vec![],
        }
    }
}

/// Which lock is found at a place after the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// k's own lock, moved (or reloaded): holder `holder`, its fence and lease.
    Own,
    /// The lock of `src`: holder `src-holder`, src's fence.
    Src,
    /// A copy of `src` (holder and fence not asserted, only that nobody waits there).
    Copy,
    /// The lock that was at k in db 1.
    Db1,
}

#[derive(Clone, Copy, Debug)]
struct Place {
    on_target: bool,
    db: i64,
    key: &'static str,
    origin: Origin,
}

/// The state of the waiter under test (`w`) when the operation runs. A second waiter `c`,
/// queued behind it with `WAIT 0`, is in every scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    TimesOutLater,
    TimedOutBefore,
    DisconnectedBefore,
    DisconnectsAfter,
    UnblockedBefore,
    UnblockedErrorBefore,
    UnblockedAfter,
    /// `MULTI; LOCK.RELEASE k holder; <op>; EXEC`: w granted, not yet told.
    Undelivered,
    /// `MULTI; LOCK.RELEASE k holder; CLIENT KILL ID w; <op>; EXEC`: the grant passed to c,
    /// not yet told.
    UndeliveredKilled,
}

const STATES: [State; 10] = [
    State::Queued,
    State::TimesOutLater,
    State::TimedOutBefore,
    State::DisconnectedBefore,
    State::DisconnectsAfter,
    State::UnblockedBefore,
    State::UnblockedErrorBefore,
    State::UnblockedAfter,
    State::Undelivered,
    State::UndeliveredKilled,
];

impl State {
    fn label(self) -> &'static str {
        match self {
            State::Queued => "waiter queued (WAIT 0)",
            State::TimesOutLater => "waiter queued, its WAIT 800 ends after the operation",
            State::TimedOutBefore => "waiter timed out before the operation",
            State::DisconnectedBefore => "waiter disconnected before the operation",
            State::DisconnectsAfter => "waiter disconnects right after the operation",
            State::UnblockedBefore => "waiter CLIENT UNBLOCKed before the operation",
            State::UnblockedErrorBefore => "waiter CLIENT UNBLOCK … ERROR before the operation",
            State::UnblockedAfter => "waiter CLIENT UNBLOCKed right after the operation",
            State::Undelivered => {
                "MULTI: LOCK.RELEASE (grant to the waiter), then the operation (grant undelivered)"
            }
            State::UndeliveredKilled => {
                "MULTI: LOCK.RELEASE, CLIENT KILL of the grantee, then the operation (grant passed \
                 on, undelivered)"
            }
        }
    }

    fn undelivered(self) -> bool {
        matches!(self, State::Undelivered | State::UndeliveredKilled)
    }
}

/// What the setup of an operation left for the checks.
#[derive(Default)]
struct Setup {
    src_fence: Option<i64>,
    db1_fence: Option<i64>,
    dump: Option<Vec<u8>>,
    /// Waiters on other keys that the operation deletes, replaces or moves away.
    extras: Vec<Waiter>,
    /// How many of them wait on the MIGRATE target, not on the server under test.
    extras_on_target: usize,
}

/// The operation's commands.
fn op_commands(op: Op, setup: &Setup, target: Option<&Server>) -> Vec<Vec<Vec<u8>>> {
    let one = |parts: &[&str]| vec![args(parts)];
    match op {
        Op::Del => one(&["DEL", "k"]),
        Op::Unlink => one(&["UNLINK", "k"]),
        Op::FlushDb => one(&["FLUSHDB"]),
        Op::FlushDbSync => one(&["FLUSHDB", "SYNC"]),
        Op::FlushDbAsync => one(&["FLUSHDB", "ASYNC"]),
        Op::FlushAll => one(&["FLUSHALL"]),
        Op::FlushAllSync => one(&["FLUSHALL", "SYNC"]),
        Op::FlushAllAsync => one(&["FLUSHALL", "ASYNC"]),
        Op::RenameAway => one(&["RENAME", "k", "k2"]),
        Op::RenameNxAway => one(&["RENAMENX", "k", "k2"]),
        Op::RenameOnto => one(&["RENAME", "src", "k"]),
        Op::RenameNxOnto => vec![args(&["DEL", "k"]), args(&["RENAMENX", "src", "k"])],
        Op::MoveAway => one(&["MOVE", "k", "1"]),
        Op::SwapDb | Op::SwapDbBothHeld => one(&["SWAPDB", "0", "1"]),
        Op::CopyReplaceOnto => one(&["COPY", "src", "k", "REPLACE"]),
        Op::RestoreReplaceOnto => {
            let mut c = args(&["RESTORE", "k", "0"]);
            c.push(setup.dump.clone().expect("dump of src"));
            c.push(b"REPLACE".to_vec());
            vec![c]
        }
        Op::Overwrite => one(&["SET", "k", "v"]),
        Op::Expire => one(&["PEXPIRE", "k", "100"]),
        Op::EvictRandom | Op::EvictLru => vec![
            args(&["CONFIG", "SET", "maxmemory", "1"]),
            args(&["CONFIG", "SET", "maxmemory", "0"]),
        ],
        Op::Migrate => {
            let port = target.expect("target server").port.to_string();
            one(&["MIGRATE", "127.0.0.1", &port, "k", "0", "5000"])
        }
        Op::MigrateReplace => {
            let port = target.expect("target server").port.to_string();
            one(&["MIGRATE", "127.0.0.1", &port, "k", "0", "5000", "REPLACE"])
        }
        Op::DebugReload => one(&["DEBUG", "RELOAD"]),
    }
}

/// Prepares what the operation needs besides k: another lock `src`, a lock at k in db 1,
/// the eviction policy, and waiters on the other keys it touches.
fn op_setup(op: Op, server: &Server, target: Option<&Server>, admin: &mut Connection) -> Setup {
    let mut s = Setup::default();
    if op.uses_src() {
        s.src_fence = Some(acquire(admin, "src", SRC_HOLDER, TTL).expect("src is free"));
    }
    match op {
        Op::RenameOnto | Op::RenameNxOnto => {
            // src's waiter: its lock is moved away.
            s.extras
                .push(Waiter::join(server, "src", "src-waiter", TTL, 0));
        }
        Op::RestoreReplaceOnto => match must(admin, &args(&["DUMP", "src"])) {
            Value::BulkString(b) => s.dump = Some(b),
            other => panic!("DUMP src: {other:?}"),
        },
        Op::SwapDbBothHeld => {
            let mut db1 = conn_in(server, 1);
            s.db1_fence = Some(acquire(&mut db1, "k", DB1_HOLDER, TTL).expect("k free in db 1"));
            // db 1's waiter: its lock is moved to db 0.
            s.extras
                .push(Waiter::join_in(server, 1, "k", "db1-waiter", TTL, 0));
        }
        Op::FlushAll | Op::FlushAllSync | Op::FlushAllAsync | Op::DebugReload => {
            // A lock in another database: its waiter is answered too.
            acquire(&mut conn_in(server, 1), "x", DB1_HOLDER, TTL).expect("x free in db 1");
            s.extras
                .push(Waiter::join_in(server, 1, "x", "db1-x-waiter", TTL, 0));
        }
        Op::MigrateReplace => {
            // The target's own lock at k, replaced by the migrated one: its waiter is answered.
            let target = target.expect("target server");
            acquire(&mut target.conn(), "k", "target-holder", TTL).expect("k free on target");
            s.extras
                .push(Waiter::join(target, "k", "target-waiter", TTL, 0));
            s.extras_on_target += 1;
        }
        Op::EvictRandom => {
            must(
                admin,
                &args(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]),
            );
        }
        Op::EvictLru => {
            must(
                admin,
                &args(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
            );
        }
        _ => {}
    }
    s
}

/// One operation against a waiter in one state, on fresh servers. Returns the failures,
/// each naming the operation and the state.
fn scenario(op: Op, state: State) -> Vec<String> {
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
            f.check(r == 1, || {
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

/// Every meaningful state against `op`, in parallel (each on its own server).
fn matrix(op: Op) {
    let states: Vec<State> = STATES
        .into_iter()
        .filter(|s| op.in_multi() || !s.undelivered())
        .collect();
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .iter()
            .map(|&state| scope.spawn(move || scenario(op, state)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("scenario thread"))
            .collect()
    });
    if !problems.is_empty() {
        panic!(
            "{}: {} problem(s):\n  - {}",
            op.label(),
            problems.len(),
            problems.join("\n  - ")
        );
    }
}

macro_rules! matrix_tests {
    ($($name:ident => $op:expr,)*) => {
        $(
            #[test]
            fn $name() {
                matrix($op);
            }
        )*
    };
}

matrix_tests! {
    matrix_del => Op::Del,
    matrix_unlink => Op::Unlink,
    matrix_flushdb => Op::FlushDb,
    matrix_flushdb_sync => Op::FlushDbSync,
    matrix_flushdb_async => Op::FlushDbAsync,
    matrix_flushall => Op::FlushAll,
    matrix_flushall_sync => Op::FlushAllSync,
    matrix_flushall_async => Op::FlushAllAsync,
    matrix_rename_away => Op::RenameAway,
    matrix_renamenx_away => Op::RenameNxAway,
    matrix_rename_onto => Op::RenameOnto,
    matrix_renamenx_onto => Op::RenameNxOnto,
    matrix_move => Op::MoveAway,
    matrix_swapdb => Op::SwapDb,
    matrix_swapdb_both_held => Op::SwapDbBothHeld,
    matrix_copy_replace_onto => Op::CopyReplaceOnto,
    matrix_restore_replace_onto => Op::RestoreReplaceOnto,
    matrix_overwrite => Op::Overwrite,
    matrix_expire => Op::Expire,
    matrix_evict_allkeys_random => Op::EvictRandom,
    matrix_evict_allkeys_lru => Op::EvictLru,
    matrix_migrate => Op::Migrate,
    matrix_migrate_replace => Op::MigrateReplace,
    matrix_debug_reload => Op::DebugReload,
}

// ------------------------------------------------------------------- what must not answer

/// Operations that leave k's lock where it is (refused, on the source side, on other keys or
/// other databases) must not answer its waiters: they stay queued, are counted, and the next
/// release grants the head.
#[test]
fn operations_that_leave_the_lock_in_place_keep_its_waiters() {
    // (label, db the command runs in, command, whether src / a lock at k in db 1 is set up)
    type Row = (&'static str, i64, &'static [&'static str], bool, bool);
    const ROWS: &[Row] = &[
        (
            "RENAMENX src k (refused: k exists)",
            0,
            &["RENAMENX", "src", "k"],
            true,
            false,
        ),
        (
            "COPY k k3 (k is the source)",
            0,
            &["COPY", "k", "k3"],
            false,
            false,
        ),
        (
            "COPY src k (refused without REPLACE)",
            0,
            &["COPY", "src", "k"],
            true,
            false,
        ),
        (
            "MOVE k 1 (refused: db 1 has k)",
            0,
            &["MOVE", "k", "1"],
            false,
            true,
        ),
        (
            "RENAME k k (same name)",
            0,
            &["RENAME", "k", "k"],
            false,
            false,
        ),
        (
            "PEXPIRE k 100000 (a far expiry)",
            0,
            &["PEXPIRE", "k", "100000"],
            false,
            false,
        ),
        (
            "SWAPDB 1 2 (other databases)",
            0,
            &["SWAPDB", "1", "2"],
            false,
            true,
        ),
        ("FLUSHDB in db 1", 1, &["FLUSHDB"], false, true),
        (
            "FLUSHDB ASYNC in db 1",
            1,
            &["FLUSHDB", "ASYNC"],
            false,
            true,
        ),
        ("DEL src (another lock)", 0, &["DEL", "src"], true, false),
        (
            "RENAME src k3 (another lock)",
            0,
            &["RENAME", "src", "k3"],
            true,
            false,
        ),
        (
            "SET k v NX (refused)",
            0,
            &["SET", "k", "v", "NX"],
            false,
            false,
        ),
        (
            "DEL k in db 1 (same name, other db)",
            1,
            &["DEL", "k"],
            false,
            true,
        ),
        (
            "MIGRATE k … COPY (the source stays)",
            0,
            &["MIGRATE", "127.0.0.1", "{port}", "k", "0", "5000", "COPY"],
            false,
            false,
        ),
    ];
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = ROWS
            .iter()
            .map(|&(label, db, cmd, with_src, with_db1)| {
                scope.spawn(move || {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let server = Server::new();
                        let mut admin = server.conn();
                        if with_src {
                            acquire(&mut admin, "src", SRC_HOLDER, TTL).unwrap();
                        }
                        if with_db1 {
                            acquire(&mut conn_in(&server, 1), "k", DB1_HOLDER, TTL).unwrap();
                        }
                        let fence0 = acquire(&mut admin, "k", HOLDER, TTL).unwrap();
                        let mut w = Waiter::join(&server, "k", "w", TTL, 0);
                        // MIGRATE's target.
                        let target = cmd.contains(&"{port}").then(Server::new);
                        let port = target.as_ref().map(|t| t.port.to_string());
                        let cmd: Vec<&str> = cmd
                            .iter()
                            .map(|a| match (*a, &port) {
                                ("{port}", Some(p)) => p.as_str(),
                                (a, _) => a,
                            })
                            .collect();
                        must(&mut conn_in(&server, db), &args(&cmd));
                        let mut f = Findings::default();
                        let counted = waiting_clients(&mut admin);
                        f.check(counted == 1, || {
                            format!("lock_waiting_clients is {counted}; w still waits")
                        });
                        let now = lock_info(&mut admin, "k");
                        f.check(
                            now.as_ref().is_some_and(|i| {
                                i.waiters == 1
                                    && i.holder.as_deref() == Some(HOLDER.as_bytes())
                                    && i.fence == fence0
                            }),
                            || format!("LOCK.INFO k should be unchanged, with 1 waiter: {now:?}"),
                        );
                        let early = w.reply_within(Duration::from_millis(100));
                        f.check(early.is_none(), || {
                            format!("w must keep waiting; it was answered {early:?}")
                        });
                        if early.is_none() {
                            assert_eq!(release(&mut admin, "k", HOLDER), 1);
                            let r = w.reply_within(AT_ONCE);
                            let now = lock_info(&mut admin, "k");
                            match r {
                                Some(Reply::Fence(g)) => f.check(
                                    g > fence0
                                        && now.as_ref().is_some_and(|i| {
                                            i.holder.as_deref() == Some(&b"w"[..]) && i.fence == g
                                        }),
                                    || format!("w granted fence {g}, LOCK.INFO k: {now:?}"),
                                ),
                                other => f.fail(format!(
                                    "after the release, w must be granted at once; got {}",
                                    got(&other)
                                )),
                            }
                        }
                        f.0
                    }));
                    let problems =
                        r.unwrap_or_else(|p| vec![format!("stopped: {}", panic_text(&*p))]);
                    problems
                        .into_iter()
                        .map(|p| format!("[{label}] {p}"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("row thread"))
            .collect()
    });
    Findings(problems).done("operations that leave the lock in place");
}

// -------------------------------------------------------------- undelivered grant, killed

/// `MULTI; LOCK.RELEASE k holder; CLIENT KILL ID <head>; EXEC`: the grant made to the head is
/// not delivered (its client is gone), so it passes to the next waiter, who gets a fence and is
/// `LOCK.INFO`'s holder. Also with a `WAIT` timeout on the killed head, and with the first two
/// waiters killed in the same transaction.
#[test]
fn a_grant_whose_client_is_killed_before_delivery_passes_to_the_next_waiter() {
    let mut f = Findings::default();
    for (label, head_timeout, kill_two) in [
        ("head WAIT 0", 0, false),
        ("head WAIT 5000", 5000, false),
        ("two killed", 0, true),
    ] {
        let server = Server::new();
        let mut con = server.conn();
        let fence0 = acquire(&mut con, "k", HOLDER, TTL).unwrap();
        let mut a = Waiter::join(&server, "k", "a", TTL, head_timeout);
        let mut b = Waiter::join(&server, "k", "b", TTL, 5000);
        let mut c = Waiter::join(&server, "k", "c", TTL, 0);
        let mut cmds = vec![
            args(&["LOCK.RELEASE", "k", HOLDER]),
            args(&["CLIENT", "KILL", "ID", &a.id.to_string()]),
        ];
        if kill_two {
            cmds.push(args(&["CLIENT", "KILL", "ID", &b.id.to_string()]));
        }
        exec(&mut con, &cmds);
        let (next, rest) = if kill_two {
            (&mut c, None)
        } else {
            (&mut b, Some(&mut c))
        };
        let r = next.reply_within(AT_ONCE);
        let now = lock_info(&mut con, "k");
        match r {
            Some(Reply::Fence(g)) => f.check(
                g > fence0
                    && now.as_ref().is_some_and(|i| {
                        i.holder.as_deref() == Some(next.token.as_bytes())
                            && i.fence == g
                            && i.waiters == i64::from(!kill_two)
                    }),
                || format!("[{label}] {} granted {g}; LOCK.INFO k: {now:?}", next.token),
            ),
            other => f.fail(format!(
                "[{label}] {} must be granted the lock at once; got {}; LOCK.INFO k: {now:?}",
                next.token,
                got(&other)
            )),
        }
        let killed = a.closed_within(Duration::from_secs(2));
        f.check(killed == Ok(true), || {
            format!("[{label}] the killed head must get no reply: {killed:?}")
        });
        let counted = waiting_clients(&mut con);
        f.check(counted == i64::from(!kill_two), || {
            format!("[{label}] lock_waiting_clients is {counted}")
        });
        if let Some(c) = rest {
            assert_eq!(release(&mut con, "k", "b"), 1, "[{label}] release by b");
            let r = c.reply_within(AT_ONCE);
            f.check(matches!(r, Some(Reply::Fence(_))), || {
                format!("[{label}] c must be granted after b's release: {}", got(&r))
            });
        }
    }
    f.done("undelivered grant to a killed client");
}

// -------------------------------------------------------------------- the reproductions

/// Reproduction 1: `RENAME`, then the waiter times out. w1 must be answered null at the
/// rename (not at its 300 ms timeout), k2 counts no waiter, and releasing k2 leaves it free.
#[test]
fn repro1_rename_then_the_waiter_times_out() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w1 = Waiter::join(&server, "k", "w1", 60_000, 300);
    let at = Instant::now();
    must(&mut con, &args(&["RENAME", "k", "k2"]));
    let r = w1.reply_within(Duration::from_secs(2));
    let took = w1.answered.map(|t| t - at);
    f.check(
        r == Some(Reply::Null) && took.is_some_and(|t| t < AT_ONCE),
        || {
            format!(
                "w1 must get null at once after RENAME k k2, not at its 300 ms timeout; got {} \
                 after {took:?}",
                got(&r)
            )
        },
    );
    sleep((w1.sent + Duration::from_millis(400)).saturating_duration_since(Instant::now()));
    let k2 = lock_info(&mut con, "k2");
    f.check(
        k2.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence && i.waiters == 0
        }),
        || format!("LOCK.INFO k2 should show holder {HOLDER}, fence {fence}, 0 waiters: {k2:?}"),
    );
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    let released = release(&mut con, "k2", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k2 holder replied {released}")
    });
    let after = lock_info(&mut con, "k2");
    f.check(after.is_none(), || {
        format!(
            "after LOCK.RELEASE k2 holder, k2 must be free (w1 never becomes holder): {after:?}"
        )
    });
    let again = w1.reply_within(Duration::from_millis(50));
    f.check(again.is_none(), || {
        format!("w1 got a second reply: {again:?}")
    });
    f.done("RENAME, then the waiter times out");
}

/// Reproduction 2: after reproduction 1, with 30 clients blocked on another held key `o`,
/// `LOCK.RELEASE k2 holder` must answer none of them (a timed-out waiter's id, left behind
/// in k2's queue, must not name one of them); `o` keeps its one holder.
#[test]
fn repro2_a_left_waiter_is_never_granted_to_a_client_blocked_on_another_key() {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w1 = Waiter::join(&server, "k", "w1", 60_000, 300);
    must(&mut con, &args(&["RENAME", "k", "k2"]));
    let first = w1.reply_within(Duration::from_secs(2));
    f.check(first == Some(Reply::Null), || {
        format!("w1: {}", got(&first))
    });
    sleep((w1.sent + Duration::from_millis(400)).saturating_duration_since(Instant::now()));
    let mut sentinels = block_sentinels(&server, &mut con, 30);
    let released = release(&mut con, "k2", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k2 holder replied {released}")
    });
    check_sentinels(&mut f, &mut con, &mut sentinels);
    let counted = waiting_clients(&mut con);
    f.check(counted == 30, || {
        format!("lock_waiting_clients is {counted}, not 30")
    });
    let k2 = lock_info(&mut con, "k2");
    f.check(k2.is_none(), || {
        format!("k2 must be free after its holder released it: {k2:?}")
    });
    let again = w1.reply_within(Duration::ZERO);
    f.check(again.is_none(), || {
        format!("w1 got a second reply: {again:?}")
    });
    f.done("a left waiter's grant reached another client");
}

/// Reproduction 3: `MOVE`, then the waiter disconnects: it is never granted the lock in db 1.
#[test]
fn repro3_move_then_the_waiter_disconnects() {
    let server = Server::new();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let w = Waiter::join(&server, "k", "w", 60_000, 0);
    let id = w.id;
    must(&mut con, &args(&["MOVE", "k", "1"]));
    drop(w);
    assert!(
        wait_until(Duration::from_secs(5), || !client_connected(&mut con, id)),
        "the server did not see the waiter disconnect"
    );
    let mut sentinels = block_sentinels(&server, &mut con, SENTINELS);
    let moved = lock_info(&mut db1, "k");
    f.check(
        moved.as_ref().is_some_and(|i| {
            i.holder.as_deref() == Some(HOLDER.as_bytes()) && i.fence == fence && i.waiters == 0
        }),
        || {
            format!(
                "LOCK.INFO k in db 1 should show holder {HOLDER}, fence {fence}, 0 waiters: \
                 {moved:?}"
            )
        },
    );
    let released = release(&mut db1, "k", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k holder in db 1 replied {released}")
    });
    let after = lock_info(&mut db1, "k");
    f.check(after.is_none(), || {
        format!("the disconnected waiter must never be granted the lock in db 1: {after:?}")
    });
    check_sentinels(&mut f, &mut con, &mut sentinels);
    let counted = waiting_clients(&mut con);
    f.check(counted == SENTINELS as i64, || {
        format!("lock_waiting_clients is {counted}; only the {SENTINELS} sentinels wait")
    });
    f.done("MOVE, then the waiter disconnects");
}

/// Reproduction 4: `SWAPDB`: a waiter on db 0's key is answered null at once, and is not
/// handed the fence of the lock that moved to db 1 when that lock is released.
#[test]
fn repro4_swapdb_does_not_hand_the_moved_lock_to_the_waiter() {
    let server = Server::new();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    let mut f = Findings::default();
    let fence = acquire(&mut con, "k", HOLDER, 60_000).unwrap();
    let mut w = Waiter::join(&server, "k", "w", 60_000, 0);
    let at = Instant::now();
    must(&mut con, &args(&["SWAPDB", "0", "1"]));
    let first = w.reply_by(at + AT_ONCE);
    let released = release(&mut db1, "k", HOLDER);
    f.check(released == 1, || {
        format!("LOCK.RELEASE k holder in db 1 replied {released}")
    });
    let later = w.reply_within(Duration::from_millis(300));
    f.check(first == Some(Reply::Null), || {
        format!(
            "the waiter on db 0's k must be answered null within {AT_ONCE:?} of SWAPDB; got {}",
            got(&first)
        )
    });
    for r in [&first, &later] {
        if let Some(Reply::Fence(g)) = r {
            f.fail(format!(
                "the waiter on db 0's k was handed fence {g} of the lock that moved to db 1 \
                 (its fence was {fence})"
            ));
        }
    }
    let after = lock_info(&mut db1, "k");
    f.check(after.is_none(), || {
        format!("db 1's k must be free after its release: {after:?}")
    });
    let counted = waiting_clients(&mut con);
    f.check(counted == 0, || {
        format!("lock_waiting_clients is {counted}, not 0")
    });
    f.done("SWAPDB");
}
