//! How the driver talks to the server and holds it to the model: `fail` (the report of a
//! disagreement, with the last ops and the model), `call`/`try_call`, and the checks of
//! replies and state: `LOCK.INFO` and `LOCK.HOLDERS` of a key (`check_key`), the
//! server-wide figures (`check_totals`) and waiters that must not have been answered.

use std::time::{Duration, Instant};

use crate::common::model::Span;
use crate::common::{info_field, parse_info, run_raw};
use crate::{show, Driver, KEYS, TTL_SLACK_MS};
use redis::Value;

impl Driver {
    pub(crate) fn fail(&self, msg: &str) -> ! {
        let from = self.log.len().saturating_sub(60);
        let mut s = String::new();
        for (i, l) in self.log.iter().enumerate().skip(from) {
            s.push_str(&format!("  #{i} {l}\n"));
        }
        if self.reach.is_some() {
            s.push_str(&self.survival_at_failure());
        }
        panic!(
            "MODEL DISAGREES (MODEL_SEED={} op #{}): {msg}\n--- last ops ---\n{s}--- model ---\n{:#?}",
            self.seed,
            self.log.len(),
            self.model.keys
        );
    }

    pub(crate) fn note(&mut self, s: String) {
        self.log.push(s);
    }

    pub(crate) fn call(&mut self, args: &[&[u8]]) -> (Value, Instant, Instant) {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let sent = Instant::now();
        let r = run_raw(&mut self.con, &v);
        let recv = Instant::now();
        match r {
            Ok(v) => (v, sent, recv),
            Err(e) => {
                let shown: Vec<String> = args.iter().map(|a| show(a)).collect();
                self.fail(&format!("{shown:?} replied error {e}"))
            }
        }
    }

    pub(crate) fn int_or_null(&self, what: &str, v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            Value::Nil => None,
            other => self.fail(&format!("{what}: expected integer or null, got {other:?}")),
        }
    }

    /// The bounds of a ttl the server read at some instant in [`sent`, `recv`] of a lease
    /// that ends in `span`.
    fn ttl_bounds(span: Span, sent: Instant, recv: Instant) -> (i64, i64) {
        let ms = |later: Instant, earlier: Instant| -> i64 {
            if later >= earlier {
                later.duration_since(earlier).as_millis() as i64
            } else {
                -(earlier.duration_since(later).as_millis() as i64)
            }
        };
        (
            ms(span.lo, recv) - TTL_SLACK_MS,
            ms(span.hi, sent) + TTL_SLACK_MS,
        )
    }

    /// A `LOCK.INFO` reply against the model: the six fields in order (holder, fence, ttl,
    /// waiters, mode, holders), each the model's.
    pub(crate) fn check_info(&self, k: usize, v: &Value, sent: Instant, recv: Instant) {
        if let Value::Array(items) = v {
            let names: Vec<Vec<u8>> = items
                .iter()
                .step_by(2)
                .map(|n| match n {
                    Value::BulkString(b) => b.clone(),
                    Value::SimpleString(s) => s.clone().into_bytes(),
                    other => format!("{other:?}").into_bytes(),
                })
                .collect();
            let want: [&[u8]; 6] = [b"holder", b"fence", b"ttl", b"waiters", b"mode", b"holders"];
            ensure!(
                self,
                names.iter().map(|n| &n[..]).eq(want.iter().copied()),
                "LOCK.INFO {}: fields {:?}, expected holder, fence, ttl, waiters, mode, holders",
                KEYS[k],
                names.iter().map(|n| show(n)).collect::<Vec<_>>()
            );
        }
        let got = parse_info(v);
        let want = self.model.info(k);
        match (&want, &got) {
            (None, None) => {}
            (Some(m), Some(i)) => {
                ensure!(
                    self,
                    i.holder == m.holder
                        && i.fence == m.fence
                        && i.waiters == m.waiters as i64
                        && i.mode == m.mode
                        && i.holders == m.holders as i64,
                    "LOCK.INFO {}: server {i:?}, model {m:?} (holder {:?})",
                    KEYS[k],
                    m.holder.as_deref().map(show)
                );
                let (min, max) = Self::ttl_bounds(m.ttl, sent, recv);
                ensure!(
                    self,
                    i.ttl >= min && i.ttl <= max,
                    "LOCK.INFO {}: ttl {} outside the model's [{min}, {max}]",
                    KEYS[k],
                    i.ttl
                );
            }
            _ => self.fail(&format!(
                "LOCK.INFO {}: server {got:?}, model {want:?}",
                KEYS[k]
            )),
        }
    }

    /// A `LOCK.HOLDERS` reply against the model: null for a missing key, else one
    /// `[token, fence, ttl, mode]` per hold, in grant order, each the model's.
    pub(crate) fn check_holders(&mut self, k: usize, v: &Value, sent: Instant, recv: Instant) {
        self.counts.holders_checked += 1;
        let lock = self.model.keys[k].lock.as_ref();
        let Some(l) = lock else {
            ensure!(
                self,
                *v == Value::Nil,
                "LOCK.HOLDERS {}: server {v:?}, model: no such key",
                KEYS[k]
            );
            return;
        };
        let items = match v {
            Value::Array(items) if items.len() == l.holds.len() => items,
            _ => self.fail(&format!(
                "LOCK.HOLDERS {}: server {v:?}, model {} holds {:?}",
                KEYS[k],
                l.holds.len(),
                l.holds
                    .iter()
                    .map(|h| (show(&h.token), h.fence, h.mode))
                    .collect::<Vec<_>>()
            )),
        };
        for (i, (h, item)) in l.holds.iter().zip(items).enumerate() {
            let ok = match item {
                Value::Array(e) if e.len() == 4 => {
                    let (min, max) = Self::ttl_bounds(h.deadline, sent, recv);
                    e[0] == Value::BulkString(h.token.clone())
                        && e[1] == Value::Int(h.fence)
                        && matches!(e[2], Value::Int(t) if t >= min && t <= max)
                        && (e[3] == Value::BulkString(h.mode.name().as_bytes().to_vec())
                            || e[3] == Value::SimpleString(h.mode.name().into()))
                }
                _ => false,
            };
            ensure!(
                self,
                ok,
                "LOCK.HOLDERS {} entry {i}: server {item:?}, model token {} fence {} mode {} \
                 ttl within {:?} (all: {v:?})",
                KEYS[k],
                show(&h.token),
                h.fence,
                h.mode.name(),
                Self::ttl_bounds(h.deadline, sent, recv)
            );
        }
    }

    /// Server-wide figures that only the model's determinate state fixes: keys and waiters.
    pub(crate) fn check_totals(&mut self) {
        let (v, _, _) = self.call(&[b"DBSIZE"]);
        let keys = self.model.key_count() as i64;
        ensure!(
            self,
            v == Value::Int(keys),
            "DBSIZE {v:?}, model has {keys} keys"
        );
        let waiting = info_field(&mut self.con, "lock", "lock_waiting_clients");
        let want = self.model.waiter_count().to_string();
        ensure!(
            self,
            waiting.as_deref() == Some(want.as_str()),
            "lock_waiting_clients {waiting:?}, model {want}"
        );
        for w in 0..self.socks.len() {
            let Some(s) = self.socks[w].as_mut() else {
                continue;
            };
            if s.has_input() {
                let r = s.reply(Duration::from_millis(100));
                self.fail(&format!("waiter w{w} got {r:?} while it should wait"));
            }
        }
    }

    /// Like `call`, but an error reply is returned rather than failing the run.
    pub(crate) fn try_call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        run_raw(&mut self.con, &v)
    }

    /// After an operation on some keys while others may be pending: the server-wide figures
    /// if nothing is pending (a short lease or wait elsewhere may have run out, and timing
    /// must not decide an outcome), else only that no waiter of a key without a pending
    /// deadline got anything.
    pub(crate) fn check_settled(&mut self) {
        if self.model.keys.iter().all(|mk| mk.pending.is_none()) {
            self.check_totals();
            return;
        }
        for w in 0..self.socks.len() {
            let Some(mw) = self.model.waiters[w].as_ref() else {
                continue;
            };
            if self.model.keys[mw.key].pending.is_some() {
                continue;
            }
            let s = self.socks[w].as_mut().unwrap();
            if s.has_input() {
                let r = s.reply(Duration::from_millis(100));
                self.fail(&format!("waiter w{w} got {r:?} while it should wait"));
            }
        }
    }

    /// `LOCK.INFO` of `k` checked against the model (not counted as an `info` op).
    /// And `LOCK.HOLDERS`.
    pub(crate) fn check_key(&mut self, k: usize) {
        let (v, sent, recv) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
        self.check_info(k, &v, sent, recv);
        let (v, sent, recv) = self.call(&[b"LOCK.HOLDERS", KEYS[k].as_bytes()]);
        self.check_holders(k, &v, sent, recv);
    }
}
