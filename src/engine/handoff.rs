//! How a free lock passes on, and the sweep that ends leases and waits on time.
//!
//! One ordered index holds every lease deadline (`leases.rs`), the registry every wait
//! deadline; one module timer is armed for the earliest of them, and the server's cron
//! event is the backstop. Redis 7.0 keys module timers on the wall clock, so a timer may
//! fire early or late after a clock step; the sweep judges every deadline on the monotonic
//! clock, and the cron (driven by the event loop's monotonic timers) catches a late timer.
//!
//! Lease ends, grants and taken-back grants are the module's own writes. They wait, as the
//! server's own expiry does, while the server asks modules to avoid replica traffic:
//! under `CLIENT PAUSE … WRITE` (or `ALL`), `FAILOVER` and a cluster manual failover. A
//! replica ends only the leases its own clients took (a writable replica, as core expires
//! the keys written there); its master's end with the master's `DEL` on the link.

use std::time::Duration;

use redis_module::{Context, ContextFlags, RedisString};

use super::leases;
use super::ops::{Propagation, Removal};
use super::state::{fences, with, Engine, Withdrawal};
use crate::blocked;
use crate::clock::{self, Now};
use crate::keyspace::{key_in_db, signal_modified, LockKey};
use crate::propagate;
use crate::replication;
use crate::stats::{self, Event};

/// How many leases one sweep ends before it yields to the event loop.
const SWEEP_BATCH: usize = 1000;

/// How often a sweep looks again while writes are paused.
const PAUSED_RECHECK_US: u64 = 10_000;

/// How often a replica looks again while its master's leases are due but not yet ended by
/// the master's `DEL` (the cron's own period).
const REPLICA_RECHECK_US: u64 = 100_000;

impl Engine {
    /// The lock at `key` (indexed under `indexed`, unless the sweep took its entry out)
    /// is free at `now`: the head of its queue holds it now, or the key is removed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pass_on(
        &mut self,
        ctx: &Context,
        key: &mut LockKey,
        db: i32,
        name: &RedisString,
        indexed: Option<u64>,
        now: Now,
        removal: Removal,
    ) {
        let Ok(Some(lock)) = key.lock() else {
            return;
        };
        let granted = self
            .waiters
            .head(db, name.as_slice())
            .map(|w| lock.grant(&w.token, w.ttl, now, &mut fences()));
        match granted {
            Some(Ok(fence)) => {
                let state = Propagation::HolderState;
                self.changed(ctx, name, lock, state, indexed, now, Event::Granted);
                if let Some((handle, id)) = self.waiters.grant_head(db, name.as_slice(), fence) {
                    blocked::wake(handle, id);
                }
                return;
            }
            Some(Err(_)) => {
                // No fence left in this millisecond: the lock stays free, indexed as due, and
                // the sweep grants the head in the next one. Nobody can take it meanwhile:
                // a newcomer finds the queue first.
                let at = leases::address(lock);
                leases::update(at, indexed, Some(lock.deadline()));
                self.arm(ctx, Some(now.mono + 1000), now);
                return;
            }
            None => {}
        }
        let at = leases::address(lock);
        match indexed {
            Some(deadline) => leases::remove_and_delete(at, deadline, || key.delete()),
            None => key.delete(),
        }
        match removal {
            Removal::Del => propagate::replicate_del(ctx, name),
            Removal::Verbatim => ctx.replicate_verbatim(),
        }
        signal_modified(ctx, name);
    }

    /// The lease of the lock at `key` ended: counted and announced, then passed on.
    pub(super) fn end_lease(
        &mut self,
        ctx: &Context,
        key: &mut LockKey,
        db: i32,
        name: &RedisString,
        indexed: Option<u64>,
        now: Now,
    ) {
        stats::record(ctx, Event::Expired, name);
        self.pass_on(ctx, key, db, name, indexed, now, Removal::Del);
    }

    /// Arms the timer to fire by `deadline` (monotonic), unless one is armed that fires no
    /// later.
    pub(super) fn arm(&mut self, ctx: &Context, deadline: Option<u64>, now: Now) {
        let Some(deadline) = deadline else {
            return;
        };
        if matches!(self.timer, Some((at, _)) if at <= deadline) {
            return;
        }
        if let Some((_, id)) = self.timer.take() {
            // The old timer may have fired already; its data is `()`, so nothing is lost.
            let _ = ctx.stop_timer::<()>(id);
        }
        // Timers count whole milliseconds: round up, and let the sweep re-arm if early.
        let delay = deadline.saturating_sub(now.mono).div_ceil(1000).max(1);
        let id = ctx.create_timer(Duration::from_millis(delay), on_timer, ());
        self.timer = Some((deadline, id));
    }

    /// Ends every wait and lease that is due, hands back undelivered grants, and re-arms.
    fn sweep(&mut self, ctx: &Context) {
        let now = clock::now();
        while let Some((handle, id)) = self.waiters.pop_timed_out(now.mono) {
            blocked::wake(handle, id);
            stats::WAIT_TIMEOUTS.bump();
        }
        let flags = ctx.get_flags();
        let (replica, loading) = (
            flags.contains(ContextFlags::SLAVE),
            flags.contains(ContextFlags::LOADING),
        );
        let paused = !replica && !loading && ctx.avoid_replication_traffic();
        let mut masters_due = false;
        if self.highwater_due && !replica && !loading && !paused {
            // An AOF rewritten without its RDB preamble keeps no aux data: the next file
            // starts with the mark, so that released keys' fences stay behind it.
            self.highwater_due = false;
            let hw = fences().high_water();
            if hw > 0 && replication::stream_is_read() {
                propagate::replicate_highwater(ctx, hw, now.wall());
            }
        }
        if !loading && !paused {
            for w in std::mem::take(&mut self.withdrawals) {
                self.withdraw(ctx, w, now);
            }
            masters_due = self.end_due_leases(ctx, now, replica);
        }
        let mut next = [leases::earliest(), self.waiters.next_timeout()]
            .into_iter()
            .flatten()
            .min();
        let waiting_writes = !self.withdrawals.is_empty() || self.highwater_due;
        if paused && (next.is_some_and(|at| at <= now.mono) || waiting_writes) {
            next = Some(now.mono + PAUSED_RECHECK_US);
        }
        if masters_due {
            next = next.map(|at| at.max(now.mono + REPLICA_RECHECK_US));
        }
        if loading {
            next = None; // the cron comes back once the load is done
        }
        self.arm(ctx, next, clock::now());
    }

    /// Ends the due leases (on a replica, only those its own clients took). True if a
    /// replica left due leases to its master.
    fn end_due_leases(&mut self, ctx: &Context, now: Now, replica: bool) -> bool {
        let mut masters = Vec::new();
        for _ in 0..SWEEP_BATCH {
            let Some(due) = leases::pop_due(now.mono) else {
                leases::put_back(&masters);
                return !masters.is_empty();
            };
            if replica && !due.replica_write {
                masters.push((due.deadline, due.lock));
                continue;
            }
            let Some(name) = key_in_db(ctx, due.db, &due.key) else {
                continue;
            };
            let mut key = LockKey::open(ctx, &name);
            let current = match key.lock() {
                Ok(Some(lock)) => leases::address(lock) == due.lock && !lock.is_held(now),
                _ => false,
            };
            // Otherwise the entry outlived its lock's key (a flush freeing it in the
            // background): nothing to end.
            if current {
                self.end_lease(ctx, &mut key, due.db, &name, None, now);
            }
        }
        // More are due than one batch: the next turn of the event loop goes on.
        leases::put_back(&masters);
        self.timer_soon(ctx);
        !masters.is_empty()
    }

    /// Takes back a grant whose client left before it was told, and passes the lock on.
    fn withdraw(&mut self, ctx: &Context, w: Withdrawal, now: Now) {
        let Some(name) = key_in_db(ctx, w.db, &w.key) else {
            return;
        };
        let mut key = LockKey::open(ctx, &name);
        let Ok(Some(lock)) = key.lock() else {
            return;
        };
        let indexed = lock.deadline();
        if lock.withdraw(&w.token, w.fence, now) {
            self.pass_on(ctx, &mut key, w.db, &name, Some(indexed), now, Removal::Del);
        }
    }

    /// Makes the sweep run on the next turn of the event loop.
    pub(super) fn timer_soon(&mut self, ctx: &Context) {
        if let Some((_, id)) = self.timer.take() {
            let _ = ctx.stop_timer::<()>(id);
        }
        let id = ctx.create_timer(Duration::from_millis(1), on_timer, ());
        self.timer = Some((0, id));
    }
}

fn on_timer(ctx: &Context, _: ()) {
    with(|e| {
        e.timer = None;
        e.sweep(ctx);
    });
}

/// An AOF rewrite may have begun (a fork, or the AOF created at startup): the high-water
/// mark follows it into the new file.
pub fn aof_rewrite_started(ctx: &Context) {
    with(|e| {
        e.highwater_due = true;
        e.timer_soon(ctx);
    });
}

/// `LOCK.HIGHWATER`: a mark saved at `saved_ms`, replayed from the AOF or the master.
pub fn highwater(ctx: &Context, fence: u64, saved_ms: i64) {
    fences().reload(fence, saved_ms, clock::now().wall());
    ctx.replicate_verbatim();
}

/// The cron tick: the backstop for a timer that a wall-clock step delayed, and the arming
/// of entries added where no timer could be (RDB loading, `COPY`).
pub fn on_cron(ctx: &Context) {
    with(|e| e.sweep(ctx));
}
