//! The run: which op each step takes (a crash at least every `CRASH_GAP` steps), time
//! passing until every pending deadline is well past (`tick`), and the final drain.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::model::Pending;
use crate::queue_rules::{How, QueueRules};
use crate::raw_connections::Reply;
use crate::{show, Driver, CRASH_GAP, KEYS, SLACK};
use rand::Rng;
use redis::Value;

impl Driver {
    /// Time passes until every pending deadline is well past; the model applies them.
    pub(crate) fn tick(&mut self) {
        self.counts.ticks += 1;
        let last = self
            .model
            .keys
            .iter()
            .filter_map(|mk| match &mk.pending {
                Some(Pending::LeaseEnd { span, .. }) => Some(span.hi),
                Some(Pending::WaitTimeout { at, .. }) => Some(*at),
                None => None,
            })
            .max();
        let Some(last) = last else {
            return;
        };
        let until = last + SLACK;
        let wait = until.saturating_duration_since(Instant::now());
        self.counts.tick_wait_ms += wait.as_millis() as u64;
        sleep(wait);
        for (k, key) in KEYS.iter().enumerate() {
            match self.model.keys[k].pending.take() {
                None => {}
                Some(Pending::LeaseEnd { token, span }) => {
                    self.counts.lease_ends += 1;
                    self.note(format!("  lease of {} on {key} ends", show(&token)));
                    let granted = self.model.end_hold_and_serve(k, &token, span.lo);
                    let new = granted.iter().filter(|g| g.how == How::New).count();
                    let left = self.model.keys[k]
                        .lock
                        .as_ref()
                        .map_or(0, |l| l.holds.len() - new);
                    if left > 0 {
                        self.counts.shared_lease_ends += 1;
                    }
                    self.read_grants(k, granted, span.lo, "the lease end");
                }
                Some(Pending::WaitTimeout { waiter, at }) => {
                    self.counts.wait_timeouts += 1;
                    let r = self.socks[waiter]
                        .as_mut()
                        .unwrap()
                        .reply(Duration::from_secs(10));
                    self.note(format!("  waiter w{waiter} on {key} times out -> {r:?}"));
                    ensure!(
                        self,
                        r == Some(Reply::Null),
                        "waiter w{waiter} should time out with null: {r:?}"
                    );
                    self.socks[waiter] = None;
                    let (_, granted) = self.model.leave_queue(waiter, at);
                    self.counts.withdraw_grants += granted.len() as u64;
                    self.read_grants(k, granted, at, &format!("w{waiter} timed out"));
                }
            }
        }
        self.check_totals();
    }

    pub(crate) fn step(&mut self) {
        self.steps_since_crash += 1;
        if self.steps_since_crash > CRASH_GAP {
            self.op_crash();
            return;
        }
        let free = self.free_keys();
        if free.is_empty() {
            self.tick();
            return;
        }
        let k = free[self.rng.gen_range(0..free.len())];
        let roll = self.rng.gen_range(0..1060);
        match roll {
            0..=189 => {
                let t = self.pick_token(k);
                let want = self.pick_want();
                self.op_acquire(k, t, want, false)
            }
            190..=209 => {
                let t = self.pick_token(k);
                let want = self.pick_want();
                self.op_acquire(k, t, want, true)
            }
            210..=369 => {
                let short = roll >= 350;
                let t = self.pick_token(k);
                // One queue entry per token and key, and a bounded queue.
                let qlen = self.model.keys[k]
                    .lock
                    .as_ref()
                    .map_or(0, |l| l.queue.len());
                if self.model.queued(k, &t) || qlen >= 4 {
                    self.op_info(k)
                } else {
                    let want = self.pick_want();
                    self.op_acquire_wait(k, t, want, short)
                }
            }
            370..=529 => {
                let t = self.pick_token(k);
                self.op_release(k, t)
            }
            530..=609 => {
                let t = self.pick_token(k);
                self.op_extend(k, t, false)
            }
            610..=624 => {
                let t = self.pick_token(k);
                self.op_extend(k, t, true)
            }
            625..=729 => {
                let t = self.pick_token(k);
                self.op_fence(k, t)
            }
            730..=799 => self.op_info(k),
            800..=869 => self.op_holders(k),
            870..=889 => self.op_del(k),
            890..=919 => {
                let ws: Vec<usize> = self
                    .model
                    .waiters
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| {
                        w.as_ref()
                            .is_some_and(|w| self.model.keys[w.key].pending.is_none())
                    })
                    .map(|(i, _)| i)
                    .collect();
                if ws.is_empty() {
                    self.op_info(k)
                } else {
                    let w = ws[self.rng.gen_range(0..ws.len())];
                    self.op_disconnect(w)
                }
            }
            920..=959 => {
                self.counts.sleeps += 1;
                let ms = self.rng.gen_range(1..30);
                self.note(format!("sleep {ms} ms"));
                sleep(Duration::from_millis(ms));
            }
            960..=969 => self.tick(),
            970..=975 => self.op_restart(),
            976..=981 => self.op_reload(),
            982..=999 => match self.pick_key(None, 0.0, 1.0) {
                Some(k) => self.op_contend(k),
                None => self.op_info(k),
            },
            // Keyspace operations around lock keys.
            1000..=1014 => {
                let nx = self.rng.gen_bool(0.5);
                match self.pick_pair(nx) {
                    Some((k, k2)) => {
                        self.maybe_queue_waiter(k, 0.4);
                        self.maybe_queue_waiter(k2, 0.2);
                        self.op_rename(k, k2, nx)
                    }
                    None => self.op_info(k),
                }
            }
            1015..=1019 => {
                self.maybe_queue_waiter_anywhere(0.5);
                self.op_swapdb()
            }
            1020..=1025 => {
                self.maybe_queue_waiter_anywhere(0.5);
                self.op_flush()
            }
            1026..=1040 => match self.pick_pair(false) {
                Some((k, k2)) => {
                    self.maybe_queue_waiter(k, 0.3);
                    self.maybe_queue_waiter(k2, 0.3);
                    let restore = self.rng.gen_bool(0.5);
                    self.op_copy(k, k2, restore)
                }
                None => self.op_info(k),
            },
            1041..=1048 => {
                let k = self.pick_key(None, 0.6, 0.5).unwrap_or(k);
                self.maybe_queue_waiter(k, 0.3);
                self.op_set_del(k)
            }
            1049..=1056 => {
                let k = self.pick_key(None, 0.6, 0.5).unwrap_or(k);
                self.maybe_queue_waiter(k, 0.3);
                self.op_pexpireat(k)
            }
            _ => self.op_crash(),
        }
    }

    pub(crate) fn finish(&mut self) {
        self.tick();
        self.note("final state".into());
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
        // Drain: every holder releases, the earliest hold first; each queue is served in
        // order to the end.
        for (k, key) in KEYS.iter().enumerate() {
            while let Some(h) = self.model.keys[k]
                .lock
                .as_ref()
                .map(|l| l.holds[0].token.clone())
            {
                self.op_release(k, h);
                self.check_key(k);
            }
            let (v, _, _) = self.call(&[b"EXISTS", key.as_bytes()]);
            ensure!(self, v == Value::Int(0), "{key} left after draining");
        }
        self.check_totals();
        self.server.assert_alive();
    }
}
