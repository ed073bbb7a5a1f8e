//! The matrix's cases: each keyspace operation on the lock key (`Op`: its commands, what it
//! sets up besides k, where it leaves a lock) and each state the waiter under test is in when
//! the operation runs (`State`).

use redis::{Connection, Value};

use crate::common::{acquire, args, conn_in, must, Server, Waiter};
use crate::keyspace::{DB1_HOLDER, SRC_HOLDER, TTL};

/// A keyspace operation on the lock key `k` (db 0), held by `holder` with waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
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
    pub(crate) fn label(self) -> &'static str {
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
    pub(crate) fn in_multi(self) -> bool {
        !matches!(self, Op::Expire | Op::EvictRandom | Op::EvictLru)
    }

    /// Whether it must run as one transaction even on its own.
    pub(crate) fn atomic(self) -> bool {
        self == Op::RenameNxOnto
    }

    /// Whether the lock reaches its place through its serialized form.
    pub(crate) fn serializes(self) -> bool {
        matches!(
            self,
            Op::RestoreReplaceOnto | Op::Migrate | Op::MigrateReplace | Op::DebugReload
        )
    }

    pub(crate) fn needs_target(self) -> bool {
        matches!(self, Op::Migrate | Op::MigrateReplace)
    }

    /// Whether another lock `src` is set up (and moved, copied or dumped onto k).
    pub(crate) fn uses_src(self) -> bool {
        matches!(
            self,
            Op::RenameOnto | Op::RenameNxOnto | Op::CopyReplaceOnto | Op::RestoreReplaceOnto
        )
    }

    /// Where a lock is after the operation, and which lock it is.
    pub(crate) fn places(self) -> Vec<Place> {
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
pub(crate) enum Origin {
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
pub(crate) struct Place {
    pub(crate) on_target: bool,
    pub(crate) db: i64,
    pub(crate) key: &'static str,
    pub(crate) origin: Origin,
}

/// The state of the waiter under test (`w`) when the operation runs. A second waiter `c`,
/// queued behind it with `WAIT 0`, is in every scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
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

pub(crate) const STATES: [State; 10] = [
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
    pub(crate) fn label(self) -> &'static str {
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

    pub(crate) fn undelivered(self) -> bool {
        matches!(self, State::Undelivered | State::UndeliveredKilled)
    }
}

/// What the setup of an operation left for the checks.
#[derive(Default)]
pub(crate) struct Setup {
    pub(crate) src_fence: Option<i64>,
    pub(crate) db1_fence: Option<i64>,
    pub(crate) dump: Option<Vec<u8>>,
    /// Waiters on other keys that the operation deletes, replaces or moves away.
    pub(crate) extras: Vec<Waiter>,
    /// How many of them wait on the MIGRATE target, not on the server under test.
    pub(crate) extras_on_target: usize,
}

/// The operation's commands.
pub(crate) fn op_commands(op: Op, setup: &Setup, target: Option<&Server>) -> Vec<Vec<Vec<u8>>> {
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
pub(crate) fn op_setup(
    op: Op,
    server: &Server,
    target: Option<&Server>,
    admin: &mut Connection,
) -> Setup {
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
