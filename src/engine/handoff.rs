//! How a free lock passes on (the hand-off rules), and the sweep that ends leases and waits
//! on time.
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

use redis_module::{Context, ContextFlags};

use super::effects::{with, Op, Propagation, Removal};
use super::rules::{self, Stop, Withdrawal};
use super::state::{with_fences, Engine};
use crate::blocked;
use crate::clock::{self, Now};
use crate::error::LockError;
use crate::keyspace::{key_in_db, LockKey};
use crate::leases;
use crate::lock::{Lock, Mode};
use crate::pause::{self, Cause};
use crate::propagate;
use crate::propagate::TokenArg;
use crate::replication;
use crate::stall;
use crate::stats::{self, Event};

/// How many leases (holds, not locks: one shared key may have many) one sweep ends before
/// it yields to the event loop: about a millisecond of work.
const SWEEP_BATCH: usize = 1000;

/// How often a sweep looks again while writes are paused.
const PAUSED_RECHECK_US: u64 = 10_000;

/// How often a replica looks again while its master's leases are due but not yet ended by
/// the master's `DEL` (the cron's own period).
const REPLICA_RECHECK_US: u64 = 100_000;

/// What [`Engine::grant_queued`] did.
pub(super) enum Granting {
    Granted,
    /// Nobody was granted: no fence could be issued in this millisecond.
    NoFence,
    /// Nobody waits, or the head is not admitted.
    Nobody,
}

impl Engine {
    /// Holds of the lock at `key` ended, as `removal` says: the waiters at the head of its
    /// queue that it now admits hold it, or the holds that stay keep it, or the key is
    /// removed.
    pub(super) fn pass_on(&mut self, op: &Op, key: &mut LockKey, removal: Removal) {
        let Ok(Some(lock)) = key.lock() else {
            return;
        };
        let Op { ctx, name, now, .. } = *op;
        // An exclusive hold's end needs no message of its own: the next holder's state
        // replaces it, or the key's removal says it. A shared hold's end is propagated as
        // itself, before the grants that follow it join the holds that stay.
        let shared = lock.mode() == Mode::Shared;
        if shared {
            match removal {
                Removal::Verbatim => ctx.replicate_verbatim(),
                Removal::Ended(tokens) => {
                    for token in tokens {
                        propagate::replicate_release(ctx, name, token);
                    }
                }
            }
        }
        let by_command = removal == Removal::Verbatim;
        match self.grant_queued(op, lock, by_command) {
            Granting::Granted => return,
            Granting::NoFence => {
                // No fence left in this millisecond: the lock stays free, filed as due, and
                // the sweep grants the head in the next one. Nobody can take it meanwhile:
                // a newcomer finds the queue first.
                self.arm(ctx, Some(now.mono + 1000), now);
                return;
            }
            Granting::Nobody => {}
        }
        if lock.is_held(now) {
            // Other shared holds stay: the lock is filed under the earliest of them.
            self.modified(op, Some(lock));
            return;
        }
        key.delete();
        match removal {
            _ if shared => {}
            Removal::Ended(_) => propagate::replicate_del(ctx, name),
            Removal::Verbatim => ctx.replicate_verbatim(),
        }
        self.modified(op, None);
    }

    /// Grants `lock` to the waiters at the head of its queue that it admits (the rules are
    /// `rules::grant_queued`'s), then propagates each grant and wakes its waiter.
    /// `by_command`: a client's command made the lock free, and is itself propagated.
    pub(super) fn grant_queued(&mut self, op: &Op, lock: &mut Lock, by_command: bool) -> Granting {
        let Op { db, name, now, .. } = *op;
        let (grants, stop) = with_fences(|f| {
            let at = (db, name.as_slice());
            rules::grant_queued(lock, &mut self.waiters, &mut self.withdrawals, at, now, f)
        });
        // As for the command's own change (`Propagation::of_command`): where nothing reads
        // the stream, a grant inside a client's command goes as that command, which Redis
        // discards unbuilt. Building `LOCK.APPLY` was a tenth of a contended hand-off's
        // instructions (callgrind). A grant by a timer or a disconnect is always built: no
        // command of its own counts it towards `save` points.
        let verbatim = by_command && !replication::stream_is_read();
        let granted = !grants.is_empty();
        for grant in grants {
            let state = if verbatim {
                Propagation::Verbatim
            } else {
                Propagation::State(TokenArg::Bytes(&grant.token))
            };
            self.changed(op, lock, state, Event::Granted);
            blocked::wake(grant.handle, grant.id);
        }
        match stop {
            Stop::NoFence if granted => {
                // The rest join when a fence can be issued again (the sweep retries).
                self.regrants.push((db, name.as_slice().into()));
                self.arm(op.ctx, Some(now.mono + 1000), now);
                Granting::Granted
            }
            Stop::NoFence => Granting::NoFence,
            Stop::Busy if granted => Granting::Granted,
            Stop::Busy => Granting::Nobody,
        }
    }

    /// See `rules::adopt`.
    pub(super) fn adopt(&mut self, db: i32, key: &[u8], token: &[u8]) {
        rules::adopt(&mut self.waiters, &mut self.withdrawals, (db, key), token);
    }

    /// Ends the leases of the lock at `key` that are due, exactly as the sweep would, before
    /// a command acts on it: so that nobody slips in ahead of the queue, and every lease end
    /// is counted once.
    pub(super) fn settle(&mut self, op: &Op, key: &mut LockKey) -> Result<(), LockError> {
        match key.lock()? {
            Some(lock) if lock.deadline() <= op.now.mono => {}
            _ => return Ok(()),
        }
        // All of them, however many: the command acts on the lock as it is now.
        self.end_lease(op, key, usize::MAX);
        Ok(())
    }

    /// Up to `limit` of the leases of the lock at `key` that are due ended, each counted and
    /// announced, then the lock passed on; how many ended. Where more are due than `limit`
    /// (shared holds ending together), the ones ended are propagated and the lock stays
    /// filed as due: the sweep ends the rest in the next turns, and passes the lock on then.
    pub(super) fn end_lease(&mut self, op: &Op, key: &mut LockKey, limit: usize) -> usize {
        let Ok(Some(lock)) = key.lock() else {
            return 0;
        };
        let ended = lock.end_due(op.now, limit);
        for _ in &ended {
            stats::record(op.ctx, Event::Expired, op.name);
        }
        if lock.recorded() > 1 && lock.deadline() <= op.now.mono {
            // Only shared holds come more than one to a key.
            for token in &ended {
                propagate::replicate_release(op.ctx, op.name, token);
            }
            self.modified(op, Some(lock));
            return ended.len();
        }
        self.pass_on(op, key, Removal::Ended(&ended));
        ended.len()
    }

    /// Ends every wait and lease that is due, hands back undelivered grants, and re-arms.
    fn sweep(&mut self, ctx: &Context) {
        let now = clock::now();
        while let Some((handle, id)) = self.waiters.pop_timed_out(now.mono) {
            blocked::wake(handle, id);
            stats::WAIT_TIMEOUTS.bump();
        }
        self.end_due_observations(now.mono);
        self.note_heads_left();
        let flags = ctx.get_flags();
        let (replica, loading) = (
            flags.contains(ContextFlags::SLAVE),
            flags.contains(ContextFlags::LOADING),
        );
        let paused = !replica && !loading && (ctx.avoid_replication_traffic() || stalled(ctx, now));
        let mut masters_due = false;
        if self.highwater_due && !replica && !loading && !paused {
            // An AOF rewritten without its RDB preamble keeps no aux data: the next file
            // starts with the mark, so that released keys' fences stay behind it. A promoted
            // master sends it too, with its new epoch.
            self.highwater_due = false;
            let (hw, epoch) = with_fences(|f| (f.high_water(), f.epoch()));
            if (hw > 0 || epoch > 0) && replication::stream_is_read() {
                propagate::replicate_highwater(ctx, hw, now.wall(), epoch);
            }
        }
        if !loading && !paused {
            for w in std::mem::take(&mut self.withdrawals) {
                self.withdraw(ctx, w, now);
            }
            for (db, key) in std::mem::take(&mut self.regrants) {
                self.regrant(ctx, db, &key, now);
            }
            masters_due = self.end_due_leases(ctx, now, replica);
        }
        let timeouts = [self.waiters.next_timeout(), self.observers.next_timeout()];
        let mut next = [leases::earliest(), timeouts[0], timeouts[1]]
            .into_iter()
            .flatten()
            .min();
        let waiting_writes =
            !self.withdrawals.is_empty() || !self.regrants.is_empty() || self.highwater_due;
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
        let mut budget = SWEEP_BATCH;
        while budget > 0 {
            budget -= 1;
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
            let mut key = LockKey::open_due(ctx, &name, due.lock);
            let current = match key.lock() {
                Ok(Some(lock)) => leases::address(lock) == due.lock && lock.deadline() <= now.mono,
                _ => false,
            };
            // Otherwise the entry outlived its lock's key (a flush freeing it in the
            // background): nothing to end.
            if current {
                let op = Op {
                    ctx,
                    name: &name,
                    db: due.db,
                    now,
                };
                // The entry's count above stands for its first lease ended.
                let ended = self.end_lease(&op, &mut key, budget + 1);
                budget = budget.saturating_sub(ended.saturating_sub(1));
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
        let op = Op {
            ctx,
            name: &name,
            db: w.db,
            now,
        };
        // Leases that ended meanwhile end first, counted and passed on as the sweep would:
        // the grants that follow must not pass them by.
        if self.settle(&op, &mut key).is_err() {
            return;
        }
        let Ok(Some(lock)) = key.lock() else {
            return;
        };
        if lock.withdraw(&w.token, w.fence, now) {
            let ended = std::slice::from_ref(&w.token);
            self.pass_on(&op, &mut key, Removal::Ended(ended));
        }
    }

    /// Queues whose head left (timed out, disconnected, unblocked) are served again by the
    /// sweep: the waiters now at their head may be admitted.
    pub(super) fn note_heads_left(&mut self) {
        let left = self.waiters.take_heads_left();
        self.regrants.extend(left);
    }

    /// Grants a lock to the waiters it admits: waiters a grant left waiting for want of a
    /// fence, or a new head after the old one left.
    fn regrant(&mut self, ctx: &Context, db: i32, key: &[u8], now: Now) {
        let Some(name) = key_in_db(ctx, db, key) else {
            return;
        };
        let mut key = LockKey::open(ctx, &name);
        let op = Op {
            ctx,
            name: &name,
            db,
            now,
        };
        // As in `withdraw`; a lease end passes the lock on itself.
        match key.lock() {
            Ok(Some(lock)) if lock.deadline() <= now.mono => {
                let _ = self.settle(&op, &mut key);
            }
            Ok(Some(lock)) => {
                self.grant_queued(&op, lock, false);
            }
            _ => {}
        }
    }
}

/// The timer's callback (installed with `effects::init`).
pub(super) fn on_timer(ctx: &Context, _: ()) {
    with(|e| {
        e.timer = None;
        e.sweep(ctx);
    });
}

/// An AOF rewrite may have begun (a fork, or the AOF created at startup): the high-water
/// mark follows it into the new file.
pub fn aof_rewrite_started(ctx: &Context) {
    highwater_soon(ctx);
}

/// `LOCK.HIGHWATER`: a mark saved at `saved_ms` and the master's epoch, replayed from the
/// AOF or the master.
pub fn highwater(ctx: &Context, fence: u64, saved_ms: i64, epoch: u64) {
    with_fences(|f| {
        f.reload(fence, saved_ms, clock::now().wall());
        f.learn_epoch(epoch);
    });
    ctx.replicate_verbatim();
}

/// This server became a master: a new epoch for its fences (fence.rs, "Epochs"), and the
/// mark and the epoch sent at once to whatever replicates from it, so that a replica of a
/// replica knows the epoch even if this master issues no fence before it fails.
pub fn promoted(ctx: &Context) {
    with_fences(|f| f.promoted());
    highwater_soon(ctx);
}

/// `LOCK.HIGHWATER` due at the next sweep, which runs soon: the sweep sends it once writes
/// may be propagated (not while loading or paused).
fn highwater_soon(ctx: &Context) {
    with(|e| {
        e.highwater_due = true;
        e.timer_soon(ctx);
    });
}

/// The cron tick: the backstop for a timer that a wall-clock step delayed, and the arming
/// of entries added where no timer could be (RDB loading, `COPY`).
pub fn on_cron(ctx: &Context) {
    with(|e| e.sweep(ctx));
}

/// Whether the loop stood still before this sweep (stall.rs): then the sweep hands nothing
/// off in this turn, as under a pause, and pauses writes for the turns after.
fn stalled(ctx: &Context, now: Now) -> bool {
    let Some(ms) = stall::watching().then(|| stall::within(now.mono)).flatten() else {
        return false;
    };
    pause::writes(ctx, Cause::Stall(ms));
    true
}
