//! The driver's random choices: which key (free of pending deadlines, biased towards keys
//! with waiters or a lock), which pair of keys, which token, which kind of request, how
//! short a short lease. The op sequence is a function of the seed and the model only.

use crate::common::model::Want;
use crate::{Driver, KEYS, TOKENS};
use rand::Rng;

impl Driver {
    pub(crate) fn free_keys(&self) -> Vec<usize> {
        (0..KEYS.len())
            .filter(|&k| self.model.keys[k].pending.is_none())
            .collect()
    }

    /// A token for an op on `k`: half the time one of its holders (if any), else any token.
    pub(crate) fn pick_token(&mut self, k: usize) -> Vec<u8> {
        let holders: Vec<Vec<u8>> = self.model.keys[k]
            .lock
            .as_ref()
            .map(|l| l.holds.iter().map(|h| h.token.clone()).collect())
            .unwrap_or_default();
        if !holders.is_empty() && self.rng.gen_bool(0.5) {
            return holders[self.rng.gen_range(0..holders.len())].clone();
        }
        TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec()
    }

    /// The kind of a request: half exclusive, else shared, with a `LIMIT` of 1 to 4 half
    /// the time.
    pub(crate) fn pick_want(&mut self) -> Want {
        match self.rng.gen_range(0..4) {
            0 | 1 => Want::Exclusive,
            2 => Want::Shared(None),
            _ => Want::Shared(Some(self.rng.gen_range(1..=4))),
        }
    }

    pub(crate) fn short_ttl(&mut self) -> u64 {
        self.rng.gen_range(100..=200)
    }

    /// One of the holders of `k`, at random.
    pub(crate) fn random_holder(&mut self, k: usize) -> Option<Vec<u8>> {
        let l = self.model.keys[k].lock.as_ref()?;
        let h = &l.holds[self.rng.gen_range(0..l.holds.len())];
        Some(h.token.clone())
    }

    pub(crate) fn has_waiters(&self, k: usize) -> bool {
        self.model.keys[k]
            .lock
            .as_ref()
            .is_some_and(|l| !l.queue.is_empty())
    }

    /// A key without a pending deadline, other than `not`: with probability `waiters` one
    /// with waiters, else with probability `held` one with a lock, else any (each where
    /// there is one).
    pub(crate) fn pick_key(
        &mut self,
        not: Option<usize>,
        waiters: f64,
        held: f64,
    ) -> Option<usize> {
        let free: Vec<usize> = self
            .free_keys()
            .into_iter()
            .filter(|&k| Some(k) != not)
            .collect();
        if free.is_empty() {
            return None;
        }
        let queued: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&k| self.has_waiters(k))
            .collect();
        let locked: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&k| self.model.keys[k].lock.is_some())
            .collect();
        let from = if !queued.is_empty() && self.rng.gen_bool(waiters) {
            queued
        } else if !locked.is_empty() && self.rng.gen_bool(held) {
            locked
        } else {
            free
        };
        Some(from[self.rng.gen_range(0..from.len())])
    }

    /// Two distinct keys without pending deadlines, the source biased towards keys with
    /// waiters (whose fate is the point) or at least a lock, the destination less so, or
    /// (`to_missing`) towards a key that does not exist.
    pub(crate) fn pick_pair(&mut self, to_missing: bool) -> Option<(usize, usize)> {
        let k = self.pick_key(None, 0.6, 0.8)?;
        let missing: Vec<usize> = self
            .free_keys()
            .into_iter()
            .filter(|&x| x != k && self.model.keys[x].lock.is_none())
            .collect();
        if to_missing && !missing.is_empty() && self.rng.gen_bool(0.8) {
            return Some((k, missing[self.rng.gen_range(0..missing.len())]));
        }
        let k2 = self.pick_key(Some(k), 0.5, 0.0)?;
        Some((k, k2))
    }
}
