//! The reachability run (issue #22): a state that commands can make must load back. Several
//! connections share a pool of three tokens (one of them binary) on two keys and queue with
//! `WAIT`, exclusive and `SHARED` (with and without `LIMIT`): the same token from several
//! connections, the same request again from another connection (a retry from a pool), a
//! token's requests of both kinds queued behind its own grant; downgrades, direct and from
//! the queue; releases, extends and fences with any pool token, on a connection other than
//! the one that acquired; waiters that hang up; grants withdrawn because their client was killed
//! before the reply (`withdrawn_grants`); short leases and waits that run out; restarts
//! from the AOF. Every reply is checked against the model (`queue_rules`: one token, one
//! hold), and after every step the keys must survive what the server does with a value
//! (`survival`): `DUMP`/`RESTORE` into another database, the replica's view (after `WAIT`),
//! now and then `DEBUG RELOAD` and a replica's full sync. A state the loader refuses is
//! reported with the ops that made it; `MODEL_SEED=<n>` replays the run, `MODEL_REACH_OPS`
//! sets its length (`REACH_OPS` by default; the bar is 10,000 on several seeds).

use std::time::{Duration, Instant};

use crate::common::model::{Mode, Want};
use crate::common::{wait_link_up, Opts, Server};
use crate::survival::ReachCounts;
use crate::{env_u64, Driver, DEFAULT_SEED, KEYS, LONG_TTL, TOKENS};
use rand::Rng;

/// Steps of a default run (10-15 s on a quiet machine, about twice that under load).
const REACH_OPS: u64 = 1_500;
/// The keys the run uses (the first of `KEYS`): few, so that queues meet.
pub(crate) const REACH_KEYS: usize = 2;
/// The pool of tokens every connection draws from.
const POOL: [&[u8]; 3] = [TOKENS[0], TOKENS[1], TOKENS[4]];
/// Queue length per key, and waiters in all, that the run keeps under.
const MAX_QUEUE: usize = 6;
const MAX_WAITERS: usize = 10;
/// A waiter's lease: one of two, both beyond the run, so that a renewal from the queue
/// shows in the hold's ttl.
const WAITER_TTLS: [u64; 2] = [LONG_TTL, LONG_TTL - 120_000];

/// Steps between restarts from the AOF, and between full syncs of the replica.
const RESTART_EVERY: u64 = 400;
const FULL_SYNC_EVERY: u64 = 200;

/// What the reachability run adds to the driver: the replica and the checks' state.
pub(crate) struct Reach {
    pub(crate) steps: u64,
    pub(crate) replica: Server,
    pub(crate) rcon: redis::Connection,
    /// A connection to the master in database 9, where dumps are restored.
    pub(crate) scratch: redis::Connection,
    /// For each key, the log entry since which it has existed (its history starts there).
    pub(crate) born: Vec<usize>,
    pub(crate) counts: ReachCounts,
}

#[test]
fn every_state_commands_reach_loads_back() {
    let seed = env_u64("MODEL_SEED", DEFAULT_SEED);
    let ops = env_u64("MODEL_REACH_OPS", REACH_OPS);
    println!("reachability: MODEL_SEED={seed} MODEL_REACH_OPS={ops}");
    let mut d = Driver::new(seed);
    let replica = Server::start(Opts::new().replicaof(d.server.port));
    let mut rcon = replica.conn();
    wait_link_up(&mut rcon);
    d.reach = Some(Reach {
        steps: 0,
        replica,
        rcon,
        scratch: crate::common::conn_in(&d.server, 9),
        born: vec![0; KEYS.len()],
        counts: ReachCounts::default(),
    });
    let t0 = Instant::now();
    for _ in 0..ops {
        d.step_reach();
        d.survival_checks();
    }
    d.finish();
    d.check_replica();
    let rc = &d.reach.as_ref().unwrap().counts;
    println!(
        "reachability: {ops} ops in {:.1?}, disagreements: 0; {rc:?}; {:?}",
        t0.elapsed(),
        d.counts
    );
    let c = &d.counts;
    if ops >= REACH_OPS {
        assert!(
            c.queue_renewals > 0
                && c.queue_downgrades > 0
                && c.retries > 0
                && c.repeat_waits > 0
                && c.downgrades > 0
                && c.killed_taken_back > 0
                && c.killed_kept > 0
                && c.killed_renewals > 0
                && c.restarts > 0,
            "the run should queue one token from several connections (also the same request \
             again), grant renewals and downgrades from the queue, downgrade directly, kill \
             granted waiters of each kind and restart: {c:?}"
        );
        assert!(
            rc.restores > ops && rc.replica_checks >= ops && rc.reloads > 0 && rc.full_syncs > 0,
            "the run should check every step's keys by DUMP/RESTORE and on the replica, and \
             reload and fully resync now and then: {rc:?}"
        );
    }
}

impl Driver {
    /// One step of the reachability run: a restart or a full sync at fixed intervals, else
    /// an op on a key without a pending deadline.
    pub(crate) fn step_reach(&mut self) {
        let reach = self.reach.as_mut().unwrap();
        reach.steps += 1;
        if reach.steps.is_multiple_of(RESTART_EVERY) {
            return self.reach_restart();
        }
        if reach.steps % FULL_SYNC_EVERY == FULL_SYNC_EVERY / 2 {
            return self.full_sync();
        }
        let free: Vec<usize> = (0..REACH_KEYS)
            .filter(|&k| self.model.keys[k].pending.is_none())
            .collect();
        if free.is_empty() {
            return self.tick();
        }
        let k = free[self.rng.gen_range(0..free.len())];
        match self.rng.gen_range(0..1000) {
            0..=99 => {
                let t = self.pool_token(k);
                let want = self.reach_want(k, &t);
                self.op_acquire(k, t, want, false)
            }
            100..=329 => self.op_queue(k),
            330..=499 => {
                let t = match self.random_holder(k) {
                    Some(h) if self.rng.gen_bool(0.6) => h,
                    _ => self.pool_token(k),
                };
                self.op_release(k, t)
            }
            500..=559 => {
                let short = self.rng.gen_bool(0.05);
                let t = self.pool_token(k);
                self.op_extend(k, t, short)
            }
            560..=609 => {
                let t = self.pool_token(k);
                self.op_fence(k, t)
            }
            610..=634 => self.op_holders(k),
            635..=679 => {
                let ws = self.queued_on(k);
                if ws.is_empty() {
                    self.op_info(k)
                } else {
                    let w = ws[self.rng.gen_range(0..ws.len())];
                    self.op_disconnect(w)
                }
            }
            680..=809 => self.op_kill_grants(k),
            810..=899 => self.op_pile(k),
            900..=909 => self.op_del(k),
            910..=919 => {
                let t = self.pool_token(k);
                let want = self.reach_want(k, &t);
                self.op_acquire(k, t, want, true)
            }
            920..=929 => self.tick(),
            _ => self.op_queue(k),
        }
    }

    /// A pool token for an op on `k`: half the time one of its holders, a quarter of the
    /// time one queued for it (where there are), else any.
    fn pool_token(&mut self, k: usize) -> Vec<u8> {
        let holders: Vec<Vec<u8>> = self.model.keys[k]
            .lock
            .as_ref()
            .map(|l| l.holds.iter().map(|h| h.token.clone()).collect())
            .unwrap_or_default();
        let queued = self.queued_on(k);
        let roll = self.rng.gen_range(0..4);
        if roll < 2 && !holders.is_empty() {
            return holders[self.rng.gen_range(0..holders.len())].clone();
        }
        if roll == 2 && !queued.is_empty() {
            let w = queued[self.rng.gen_range(0..queued.len())];
            return self.model.waiters[w].as_ref().unwrap().token.clone();
        }
        POOL[self.rng.gen_range(0..POOL.len())].to_vec()
    }

    /// A pool token for a request that may queue on `k`: often one queued already, seldom
    /// a holder (whose request is answered at once).
    fn queue_token(&mut self, k: usize) -> Vec<u8> {
        let queued = self.queued_on(k);
        let roll = self.rng.gen_range(0..20);
        if roll < 8 && !queued.is_empty() {
            let w = queued[self.rng.gen_range(0..queued.len())];
            return self.model.waiters[w].as_ref().unwrap().token.clone();
        }
        if roll < 11 {
            return self.pool_token(k);
        }
        POOL[self.rng.gen_range(0..POOL.len())].to_vec()
    }

    /// The waiters queued for `k`, in order.
    fn queued_on(&self, k: usize) -> Vec<usize> {
        self.model.keys[k]
            .lock
            .as_ref()
            .map(|l| l.queue.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The kind of a request of `t` on `k`: an exclusive holder often asks `SHARED` (a
    /// downgrade), a shared holder often the same again (a renewal).
    fn reach_want(&mut self, k: usize, t: &[u8]) -> Want {
        let held = self.model.keys[k]
            .lock
            .as_ref()
            .and_then(|l| l.hold(t))
            .map(|h| h.mode);
        let roll = self.rng.gen_range(0..10);
        match held {
            Some(Mode::Exclusive) if roll < 4 => Want::Shared(None),
            Some(Mode::Exclusive) if roll < 8 => Want::Exclusive,
            Some(Mode::Shared) if roll < 6 => Want::Shared(Some(1)),
            _ => self.pick_want(),
        }
    }

    /// `LOCK.ACQUIRE … WAIT` on a connection of its own: a third of the time the same
    /// request again as one queued for `k` (token, kind and lease: a retry from another
    /// connection), else a pool token, often one queued already, asking for any kind.
    fn op_queue(&mut self, k: usize) {
        let queued = self.queued_on(k);
        if queued.len() >= MAX_QUEUE || self.model.waiter_count() >= MAX_WAITERS {
            return self.op_info(k);
        }
        let (t, want, ttl) = if !queued.is_empty() && self.rng.gen_bool(0.35) {
            let w = queued[self.rng.gen_range(0..queued.len())];
            let mw = self.model.waiters[w].as_ref().unwrap();
            self.counts.retries += 1;
            (mw.token.clone(), mw.want, mw.ttl)
        } else {
            let t = self.queue_token(k);
            let want = self.reach_want(k, &t);
            let ttl = WAITER_TTLS[self.rng.gen_range(0..WAITER_TTLS.len())];
            (t, want, ttl)
        };
        if self.model.queued(k, &t) {
            self.counts.repeat_waits += 1;
        }
        let timeout = if self.rng.gen_bool(0.03) {
            self.rng.gen_range(100..=250)
        } else if self.rng.gen_bool(0.5) {
            0
        } else {
            LONG_TTL
        };
        self.op_acquire_wait_ttl(k, t, want, timeout, ttl);
    }

    /// Two or three waiters queued at once on a held `k`, mostly of one token: its
    /// requests of both kinds behind each other, so that the grant of one meets the next.
    fn op_pile(&mut self, k: usize) {
        if self.model.keys[k].lock.is_none() {
            return self.op_queue(k);
        }
        let t = POOL[self.rng.gen_range(0..POOL.len())].to_vec();
        for _ in 0..self.rng.gen_range(2..=3) {
            let queued = self.queued_on(k).len();
            if queued >= MAX_QUEUE || self.model.waiter_count() >= MAX_WAITERS {
                break;
            }
            let token = if self.rng.gen_bool(0.7) {
                t.clone()
            } else {
                POOL[self.rng.gen_range(0..POOL.len())].to_vec()
            };
            if self.model.queued(k, &token) {
                self.counts.repeat_waits += 1;
            }
            let want = self.pick_want();
            let ttl = WAITER_TTLS[self.rng.gen_range(0..WAITER_TTLS.len())];
            self.op_acquire_wait_ttl(k, token, want, 0, ttl);
        }
    }

    /// A restart from the AOF (`op_restart`); the replica then syncs again.
    fn reach_restart(&mut self) {
        self.op_restart();
        let reach = self.reach.as_mut().unwrap();
        reach.scratch = crate::common::conn_in(&self.server, 9);
        wait_link_up(&mut reach.rcon);
        reach.counts.restarts_synced += 1;
    }

    /// The replica syncs again from scratch (`REPLICAOF NO ONE`, then its master again):
    /// the master's RDB of every lock loads there, or the replica dies.
    fn full_sync(&mut self) {
        let port = self.server.port.to_string();
        let before = crate::common::info_field(&mut self.con, "stats", "sync_full");
        let reach = self.reach.as_mut().unwrap();
        let r1 = crate::cmd!(&mut reach.rcon, "REPLICAOF", "NO", "ONE");
        let r2 = crate::cmd!(&mut reach.rcon, "REPLICAOF", "127.0.0.1", port.as_str());
        self.note(format!(
            "replica: REPLICAOF NO ONE -> {r1:?}; REPLICAOF master -> {r2:?}"
        ));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let reach = self.reach.as_mut().unwrap();
            if !reach.replica.is_alive() {
                let log = reach.replica.log_tail(15);
                self.reach_fail(
                    &(0..REACH_KEYS).collect::<Vec<_>>(),
                    &format!("the replica died in a full sync:\n{log}"),
                );
            }
            let up =
                crate::common::info_field(&mut reach.rcon, "replication", "master_link_status");
            if up.as_deref() == Some("up") {
                break;
            }
            if Instant::now() > deadline {
                self.fail("the replica's link is not up 15 s after REPLICAOF");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let after = crate::common::info_field(&mut self.con, "stats", "sync_full");
        if after != before {
            self.reach.as_mut().unwrap().counts.full_syncs += 1;
        }
        self.check_replica();
    }
}
