//! Waiters (connections blocked in `LOCK.ACQUIRE … WAIT`): reading the grants the model
//! expects, answering a key's waiters null, a waiter hanging up, and queueing waiters
//! (`op_contend`, `maybe_queue_waiter`) so that the ops that follow meet them.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::model::{Span, Want};
use crate::common::parse_info;
use crate::queue_rules::{Grant, How, QueueRules};
use crate::raw_connections::Reply;
use crate::{show, Driver, CONTEND_WAIT_MS, KEYS, SLACK, TOKENS};
use rand::seq::SliceRandom;
use rand::Rng;

impl Driver {
    /// Polls `LOCK.INFO` until `k` has `want` waiters.
    pub(crate) fn await_waiters(&mut self, k: usize, want: i64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (v, _, _) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
            let n = parse_info(&v).map_or(0, |i| i.waiters);
            if n == want {
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!("{what}: {} has {n} waiters, want {want}", KEYS[k]));
            }
            sleep(Duration::from_millis(1));
        }
    }

    /// Reads the grants the model made to `granted` (waiters of `k`, in queue order,
    /// triggered at `from` by `why`): a new hold a new fence, above the one before; a
    /// renewal or a downgrade the fence its token's hold has (learnt here if the grant that
    /// made the hold was never told: its client was killed), and the lease of each renewed.
    pub(crate) fn read_grants(&mut self, k: usize, granted: Vec<Grant>, from: Instant, why: &str) {
        if granted.len() > 1 {
            self.counts.group_grants += 1;
        }
        for Grant { w, how } in granted {
            self.counts.grants += 1;
            match how {
                How::New => {}
                How::Renewed => self.counts.queue_renewals += 1,
                How::Downgraded => self.counts.queue_downgrades += 1,
            }
            let r = self.socks[w]
                .as_mut()
                .unwrap()
                .reply(Duration::from_secs(10));
            let recv = Instant::now();
            let mw = self.model.waiters[w].take().unwrap();
            self.socks[w] = None;
            self.note(format!(
                "  waiter w{w} ({} {}) granted {} after {why} ({how:?}) -> {r:?}",
                show(&mw.token),
                mw.want,
                KEYS[k]
            ));
            let Some(Reply::Int(f)) = r else {
                self.fail(&format!(
                    "waiter w{w} should be granted {} after {why} ({how:?}): {r:?}",
                    KEYS[k]
                ));
            };
            let had = self.model.keys[k]
                .lock
                .as_ref()
                .and_then(|l| l.hold(&mw.token))
                .map_or(0, |h| h.fence);
            if had == 0 && how != How::New {
                self.counts.fences_learnt += 1;
            }
            if how != How::New && had != 0 {
                ensure!(
                    self,
                    f == had,
                    "waiter w{w} ({how:?} after {why}) got fence {f}, expected its token's {had}"
                );
            } else if how == How::New || f > self.model.keys[k].last_fence.unwrap_or(0) {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("grant to w{w} after {why}: {e}"));
                }
            }
            let h = self.model.keys[k]
                .lock
                .as_mut()
                .unwrap()
                .hold_mut(&mw.token);
            h.fence = f;
            h.deadline = Span::after(from, recv, mw.ttl);
        }
        if let Some(l) = self.model.keys[k].lock.as_ref() {
            let n = l.holds.len() as u64;
            self.counts.max_holders = self.counts.max_holders.max(n);
        }
    }

    /// Every waiter of `k` gets a null reply and leaves the queue. Returns how many there were.
    pub(crate) fn answer_waiters_null(&mut self, k: usize, why: &str) -> usize {
        let queue: Vec<usize> = match self.model.keys[k].lock.as_mut() {
            Some(l) => l.queue.drain(..).collect(),
            None => Vec::new(),
        };
        let n = queue.len();
        for w in queue {
            self.counts.answered_null += 1;
            let r = self.socks[w]
                .as_mut()
                .unwrap()
                .reply(Duration::from_secs(10));
            self.note(format!("  waiter w{w} on {} after {why} -> {r:?}", KEYS[k]));
            ensure!(
                self,
                r == Some(Reply::Null),
                "waiter w{w} on {} after {why}: {r:?}, expected null",
                KEYS[k]
            );
            self.model.waiters[w] = None;
            self.socks[w] = None;
        }
        n
    }

    /// A waiter hangs up: it leaves the queue, and whoever it held back may be granted.
    pub(crate) fn op_disconnect(&mut self, w: usize) {
        self.counts.disconnect += 1;
        let at = Instant::now();
        self.socks[w] = None;
        let (mw, granted) = self.model.leave_queue(w, at);
        let k = mw.key;
        self.note(format!(
            "waiter w{w} ({} {} on {}) disconnects",
            show(&mw.token),
            mw.want,
            KEYS[k]
        ));
        self.counts.withdraw_grants += granted.len() as u64;
        self.read_grants(k, granted, at, &format!("w{w} hung up"));
        let want = self.model.keys[k].lock.as_ref().unwrap().queue.len() as i64;
        self.await_waiters(k, want, &format!("waiter w{w} leaving"));
    }

    /// With probability `p`, if `k` is held and not pending, one more client queues for it
    /// (`WAIT` without a deadline in the run), so that the keyspace operation that follows
    /// meets waiters.
    pub(crate) fn maybe_queue_waiter(&mut self, k: usize, p: f64) {
        let Some(l) = self.model.keys[k].lock.as_ref() else {
            return;
        };
        if self.model.keys[k].pending.is_some() || l.queue.len() >= 4 || !self.rng.gen_bool(p) {
            return;
        }
        let shared = !l.exclusive();
        let candidates: Vec<&[u8]> = TOKENS
            .iter()
            .copied()
            .filter(|t| l.hold(t).is_none() && !self.model.queued(k, t))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let t = candidates[self.rng.gen_range(0..candidates.len())].to_vec();
        // On a shared lock mostly an exclusive request, which queues (a shared one may
        // join the holders at once).
        let want = if shared && self.rng.gen_bool(0.7) {
            Want::Exclusive
        } else {
            self.pick_want()
        };
        self.op_acquire_wait(k, t, want, false);
    }

    /// A queue of mixed kinds on held key `k` (not pending), for the grants that follow:
    /// on a shared lock an exclusive request first (which holds back the shared ones
    /// queued behind it), on an exclusive lock shared requests (granted together when it
    /// ends or downgrades), some with a `LIMIT`, perhaps an exclusive one among them. A
    /// quarter of the time the first waiter has a `WAIT` that runs out (600 ms, ample
    /// time to queue the others behind it): its key is pending, and when it leaves, those
    /// behind it that the holds admit are granted at that instant.
    pub(crate) fn op_contend(&mut self, k: usize) {
        let Some(l) = self.model.keys[k].lock.as_ref() else {
            return self.op_info(k);
        };
        let shared = !l.exclusive();
        let n = self.rng.gen_range(1..=3usize).min(4 - l.queue.len().min(4));
        let mut tokens: Vec<&[u8]> = TOKENS
            .iter()
            .copied()
            .filter(|t| l.hold(t).is_none() && !self.model.queued(k, t))
            .collect();
        tokens.shuffle(&mut self.rng);
        tokens.truncate(n);
        if tokens.is_empty() {
            return self.op_info(k);
        }
        self.counts.contends += 1;
        let short_first = self.rng.gen_bool(0.25);
        let started = Instant::now();
        for (i, t) in tokens.iter().enumerate() {
            let want = if (i == 0 && shared) || self.rng.gen_bool(0.2) {
                Want::Exclusive
            } else if self.rng.gen_bool(0.5) {
                Want::Shared(None)
            } else {
                Want::Shared(Some(self.rng.gen_range(1..=4)))
            };
            if i == 0 && short_first {
                self.op_acquire_wait_for(k, t.to_vec(), want, CONTEND_WAIT_MS);
            } else {
                self.op_acquire_wait(k, t.to_vec(), want, false);
            }
        }
        if short_first {
            let took = started.elapsed();
            ensure!(
                self,
                took < Duration::from_millis(CONTEND_WAIT_MS) - SLACK,
                "queueing {} waiters took {took:?}: too close to the first one's WAIT of \
                 {CONTEND_WAIT_MS} ms for the outcome not to depend on timing",
                tokens.len()
            );
        }
    }

    /// `maybe_queue_waiter` on one held key without a pending deadline, if there is one.
    pub(crate) fn maybe_queue_waiter_anywhere(&mut self, p: f64) {
        let k = self.pick_key(None, 0.0, 1.0);
        if let Some(k) = k {
            self.maybe_queue_waiter(k, p);
        }
    }
}
