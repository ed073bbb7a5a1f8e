//! A reference model of the lock's contract (docs/commands.md; shared holds as in issue #13),
//! written here independently of `src/lock`, driven side by side with a real server through
//! thousands of seeded random operations: `LOCK.ACQUIRE` exclusive and `SHARED` (with and without
//! `LIMIT n`, with and without `WAIT`), `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE` of one hold
//! among several, `LOCK.INFO` (its six fields, in order), `LOCK.HOLDERS` (every hold, in grant
//! order), `DEL`, waiters that disconnect, time passing (short leases and short waits that run
//! out), restarts (`appendonly yes`; waiters are connections and are dropped) and `DEBUG
//! RELOAD` (locks survive; their waiters, like those of a deleted key, are answered null), and
//! the keyspace operations the server can do around a lock key: `RENAME`/`RENAMENX` between
//! two keys, `SWAPDB 0 1` twice, `FLUSHDB [ASYNC]`/`FLUSHALL ASYNC`, `COPY … REPLACE`, `DUMP` +
//! `RESTORE … REPLACE`, an overwrite (`SET` then `DEL`) and `PEXPIREAT k 1`. Every reply is
//! checked against the model, and so is the final state of every key.
//!
//! Shared holds: every holder has its own token, lease and fence. One FIFO queue per key
//! serves both kinds of request: whenever holds end (release, lease end, a downgrade) or a
//! waiter leaves the queue (timeout, hang-up), the head is granted if it is compatible, then
//! the next head, all at that instant (consecutive shared waiters are granted together, each
//! within its own `LIMIT`; a queued exclusive request holds back every shared request behind
//! it, and a request without `WAIT` is refused while anybody waits). The same token asking
//! again for the same kind renews its lease and gets its fence again; an exclusive holder
//! asking `SHARED` downgrades in place (same fence, lease renewed, compatible waiters at the
//! head granted at once); a shared holder asking for the lock exclusively is refused with an
//! error and keeps its hold as it was (the refused request carries a short lease, which the
//! hold must not take). Every new hold gets a fence above every fence issued for the key;
//! waiters granted at one instant get theirs in queue order.
//!
//! Crashes at full fence rate (`op_crash`): the server takes an RDB snapshot (`SAVE`, with
//! the AOF turned off at run time first) and the model a copy of itself; then one connection,
//! or two at once, pipelines thousands of `LOCK.FENCE` on one or two held keys (a `TRYAGAIN`
//! reply is legitimate: the module issues fences from a bucket of 8 ms' worth that it refills
//! at 512 a millisecond), every acknowledged fence checked to increase per key; then
//! `kill -9`, and the server starts again from the snapshot with the AOF off, the model from
//! its copy (waiters are connections: all gone; a lock whose short lease ran out while the
//! server was down is gone). From then on every fence the server issues, for any key, must
//! be above the highest fence acknowledged before the crash, not merely above the
//! snapshot's: the snapshot does not know the burst. The first such fences go out on a
//! connection made while the server is still starting (a `TRYAGAIN` there, the module's
//! refusal for a few milliseconds after a start, is retried). Then `CONFIG SET appendonly
//! yes` writes a fresh AOF from the loaded data, so that later restarts (`appendonly yes`)
//! go on from there: one server, one configuration, the AOF off only between the `SAVE` and
//! the rewrite after the crash.
//!
//! The keyspace contract: a waiter waits for a (db, key name). A lock that moves (`RENAME`)
//! or is copied (`COPY`, `RESTORE`) arrives with its holds (each its token, kind, fence and
//! lease, in grant order) and its last fence, and no waiters;
//! whenever a key's lock goes away or is replaced (deleted, renamed away, overwritten,
//! swapped out of db 0, flushed, expired), its waiters are answered null at once. Fence
//! history follows the value: the next fence of a moved or copied lock is above its fence,
//! and a fresh acquire of a missing key gets a fence above every fence the server issued.
//!
//! Timing never decides an outcome: long leases (10 min) never end during a run; a short
//! lease or a short `WAIT` puts its key *pending*, no operation touches a pending key, and a
//! `tick` sleeps until every pending deadline is well past (a generous slack) before the
//! model applies them. The op sequence is a function of the seed and the model only.
//!
//! The model itself (plain state, no server) is `tests/common/model.rs`; how it serves a
//! queue whose tokens repeat (one token, one hold) is `queue_rules`.
//!
//! A second test, the reachability run (`reachability`, issue #22), drives the same model
//! with a pool of three tokens shared by many connections on two keys, and after every step
//! holds the server to itself: each key survives `DUMP`/`RESTORE`, the replica's view and
//! `DEBUG RELOAD` (`survival`); it also kills granted waiters before their replies
//! (`withdrawn_grants`).
//!
//! `MODEL_SEED=<n>` replays a run (both tests); `MODEL_OPS=<n>` changes the main run's
//! length, `MODEL_REACH_OPS=<n>` the reachability run's.
//!
//! Layout: the driver's state and the test are here; its ops and checks are `lock_commands`,
//! `waiters`, `keyspace`, `restarts`, `crash`, `checks`, `random_choices` and `run`, with
//! `counts` (what a run counts) and `raw_connections` (waiter sockets); the reachability
//! run's are `reachability`, `survival` and `withdrawn_grants`.

#[path = "../common/mod.rs"]
mod common;

macro_rules! ensure {
    ($d:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            $d.fail(&format!($($fmt)+));
        }
    };
}

mod checks;
mod counts;
mod crash;
mod keyspace;
mod lock_commands;
mod queue_rules;
mod random_choices;
mod raw_connections;
mod reachability;
mod restarts;
mod run;
mod survival;
mod waiters;
mod withdrawn_grants;

use std::time::{Duration, Instant};

use common::model::Model;
use common::{Opts, Server};
use counts::{Counts, Tally};
use rand::rngs::StdRng;
use rand::SeedableRng;
use raw_connections::Sock;

const DEFAULT_SEED: u64 = 0x6d6f_6465_6c21;
const DEFAULT_OPS: u64 = 3_000;

const KEYS: [&str; 4] = ["m:a", "m:b", "m:c", "m:d"];
const TOKENS: [&[u8]; 5] = [b"t0", b"t1", b"t2", b"t3", b"t\x00\xff binary"];
/// A lease that never ends during a run.
const LONG_TTL: u64 = 600_000;
/// How long past a deadline the server has to act on it (lease end, wait timeout).
const SLACK: Duration = Duration::from_millis(150);
/// Tolerance on `ttl` beyond the measured send/receive window (rounding, wall-clock
/// conversion across restarts).
const TTL_SLACK_MS: i64 = 30;
/// `LOCK.FENCE` commands pipelined in one burst before a crash: more than the module's bucket
/// (8 ms' worth, 16,384) at the top of the range.
const BURST_MIN: usize = 4_000;
const BURST_MAX: usize = 24_000;
/// The `WAIT` of a waiter that `op_contend` queues first and lets run out.
const CONTEND_WAIT_MS: u64 = 600;
/// Connections of a parallel burst.
const BURST_CONNS: usize = 2;
/// A crash step comes at least this many steps after the previous one, besides its random
/// turns, so that every full-length run has several.
const CRASH_GAP: u64 = 400;

use common::env::env_u64;

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

struct Driver {
    server: Server,
    con: redis::Connection,
    model: Model,
    socks: Vec<Option<Sock>>,
    rng: StdRng,
    seed: u64,
    log: Vec<String>,
    counts: Counts,
    /// Steps since the last crash step (see `CRASH_GAP`).
    steps_since_crash: u64,
    /// The reachability run's replica and checks (`reachability`); `None` in the main run.
    reach: Option<reachability::Reach>,
}

impl Driver {
    /// A driver of a fresh server (`appendonly yes`) and an empty model.
    fn new(seed: u64) -> Driver {
        let server = Server::start(Opts::new().appendonly());
        let con = server.conn();
        Driver {
            server,
            con,
            model: Model::new(KEYS.len()),
            socks: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
            seed,
            log: Vec::new(),
            counts: Counts::default(),
            steps_since_crash: 0,
            reach: None,
        }
    }
}

#[test]
fn model_agrees_with_the_server() {
    let seed = env_u64("MODEL_SEED", DEFAULT_SEED);
    let ops = env_u64("MODEL_OPS", DEFAULT_OPS);
    println!("model: MODEL_SEED={seed} MODEL_OPS={ops}");
    let mut d = Driver::new(seed);
    let t0 = Instant::now();
    for _ in 0..ops {
        d.step();
    }
    d.finish();
    d.counts.above_crash_floor = d.model.above_crash_floor;
    println!(
        "model: {ops} ops in {:.1?}, disagreements: 0; {:?}",
        t0.elapsed(),
        d.counts
    );
    assert!(
        d.counts.restarts > 0 && d.counts.reloads > 0 && d.counts.grants > 0,
        "the run should exercise restarts, reloads and grants: {:?}",
        d.counts
    );
    if ops >= DEFAULT_OPS {
        // A full-length run meets every keyspace operation, each group also with waiters.
        let c = &d.counts;
        let groups: [(&str, &[Tally]); 6] = [
            ("RENAME/RENAMENX", &[c.rename, c.renamenx]),
            ("SWAPDB", &[c.swapdb]),
            ("FLUSH", &[c.flushdb, c.flushdb_async, c.flushall_async]),
            ("COPY/RESTORE", &[c.copy, c.dump_restore]),
            ("SET+DEL", &[c.set_del]),
            ("PEXPIREAT", &[c.pexpireat]),
        ];
        for (name, tallies) in groups {
            assert!(
                tallies.iter().all(|t| t.runs > 0) && tallies.iter().any(|t| t.with_waiters > 0),
                "the run should exercise {name}, also with waiters queued: {:?}",
                d.counts
            );
        }
        assert!(
            c.crashes >= 5
                && c.crash_first_fresh > 0
                && c.crash_lapsed > 0
                && c.crash_waiters_dropped > 0
                && c.crash_two_key_bursts > 0
                && c.crash_parallel_bursts > 0,
            "the run should crash the server several times after fence bursts, also with a \
             fresh key taken after the restart, a lease lapsing while it is down, waiters \
             dropped, a burst on two keys and one on two connections: {:?}",
            d.counts
        );
        assert!(
            c.joins > 0
                && c.renewals_over_limit > 0
                && c.downgrades > 0
                && c.downgrade_grants > 0
                && c.upgrades_refused > 0
                && c.limit_refused > 0
                && c.held_back > 0
                && c.group_grants > 0
                && c.withdraw_grants > 0
                && c.shared_lease_ends > 0
                && c.max_holders >= 3,
            "the run should exercise shared holds: joins, a renewal past its LIMIT, downgrades \
             that grant waiters, refused upgrades, LIMIT refusals, shared requests held back by \
             a queue, several waiters granted at once, waiters granted when one before them \
             left, a shared lease ending next to other holds, three holders or more: {:?}",
            d.counts
        );
        assert!(
            c.rename_no_such_key > 0 && c.renamenx_refused > 0 && c.copy_source_kept_waiters > 0,
            "the run should exercise RENAME of a missing key, RENAMENX onto a lock and COPY \
             of a lock with waiters: {:?}",
            d.counts
        );
    }
}
