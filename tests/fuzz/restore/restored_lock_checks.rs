//! The checks of what a `RESTORE` accepted: `LOCK.INFO` and `LOCK.HOLDERS` agree, the holds
//! are the ones the payload gives, and the lock behaves like one (fences, renewals, its own
//! DUMP round trip, release).

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::dump::{self, Holder};
use crate::common::*;
use crate::restore::fuzz_server::Fuzz;
use crate::restore::rules::{Lease, Loaded};
use crate::restore::{now_ms, MAX_FENCE, MAX_LEFT_MS, MAX_TOKEN, SHORT_LEASE_MS};
use redis::Value;

impl Fuzz {
    /// `LOCK.INFO` and `LOCK.HOLDERS` of `key` in one `MULTI`, so that both describe the
    /// same instant; they must agree: both null or neither, as many entries as holders, each
    /// in the lock's mode, the exclusive holder the only entry, the longest lease left the
    /// `ttl`, no entry's fence above the key's, no token twice.
    fn state(&mut self, key: &str) -> Option<(LockInfo, Vec<Holder>)> {
        let replies = exec(
            &mut self.con,
            &[args(&["LOCK.INFO", key]), args(&["LOCK.HOLDERS", key])],
        );
        let (i, h) = (parse_info(&replies[0]), dump::parse_holders(&replies[1]));
        let (i, h) = match (i, h) {
            (None, None) => return None,
            (Some(i), Some(h)) => (i, h),
            (i, h) => self.fail(&format!("LOCK.INFO {i:?} but LOCK.HOLDERS {h:?}")),
        };
        let tokens: std::collections::HashSet<&[u8]> = h.iter().map(|e| &e.token[..]).collect();
        let agree = h.len() as i64 == i.holders
            && h.iter().all(|e| e.mode == i.mode && e.fence <= i.fence)
            && h.iter().map(|e| e.ttl).max().unwrap_or(-1) == i.ttl
            && (i.mode != "exclusive" || i.holder.as_ref() == h.first().map(|e| &e.token))
            && tokens.len() == h.len();
        if !agree {
            self.fail(&format!(
                "LOCK.INFO {i:?} disagrees with LOCK.HOLDERS {h:?}"
            ));
        }
        Some((i, h))
    }

    /// Checks the holds of a restored lock (`None`: every lease had ended) against `want`,
    /// the `RESTORE` having been sent at `sent`: the live ones, in grant order, with their
    /// tokens, fences and leases. A lease given as time left is exact: never more than it,
    /// never less than it minus the time the commands took; a hold with no more left than
    /// that may have ended. An absolute one is read against this machine's clock, which is
    /// the server's (100 ms of slack).
    fn check_holds(&mut self, got: &Option<(LockInfo, Vec<Holder>)>, want: &Loaded, sent: Instant) {
        let took = sent.elapsed().as_millis() as i64 + 2;
        let empty = Vec::new();
        let entries = got.as_ref().map_or(&empty, |(_, h)| h);
        let mut next = entries.iter().peekable();
        let mut ok = true;
        for w in &want.holds {
            let (left, slack) = match w.lease {
                Lease::Left(left) => (left, 0),
                Lease::Until(deadline) => (deadline.saturating_sub(now_ms() - took), 100),
            };
            let here = next
                .peek()
                .is_some_and(|e| e.token == w.token && e.fence as u64 == w.fence);
            if here {
                let e = next.next().unwrap();
                ok &= e.mode == want.mode
                    && e.ttl <= left.saturating_add(slack)
                    && e.ttl >= left.saturating_sub(took + slack);
            } else {
                // Ended: fine if it had no time left, or too little to outlast the commands.
                ok &= left <= took + slack;
            }
        }
        ok &= next.next().is_none();
        if let Some((i, _)) = got {
            ok &= i.fence as u64 == want.last_fence && i.mode == want.mode && i.waiters == 0;
        }
        if !ok {
            self.fail(&format!(
                "restored {want:?}: LOCK.INFO and LOCK.HOLDERS {got:?} within {took} ms of the \
                 RESTORE"
            ));
        }
    }

    /// Whatever was accepted must be a sane lock that behaves like one (or a value of a
    /// native type, when the body was not a module value at all); with `want`, the holds the
    /// payload gives it.
    pub(crate) fn check_accepted(&mut self, key: &str, want: Option<&Loaded>, sent: Instant) {
        let ty = match cmd!(&mut self.con, "TYPE", key) {
            Ok(Value::SimpleString(s)) => s,
            other => self.fail(&format!("TYPE: {other:?}")),
        };
        if ty == "none" {
            // Leases that had ended (or ended at once): the sweep took the key away.
            if let Some(want) = want {
                self.check_holds(&None, want, sent);
            }
            return;
        }
        if ty != "redislock" {
            if want.is_some() {
                self.fail(&format!("a lock body restored as a {ty}"));
            }
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        }
        let got = self.state(key);
        if let Some(want) = want {
            self.check_holds(&got, want, sent);
        }
        let Some((_, entries)) = got else {
            // Leases that ended before the restore: the key goes away.
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        };
        let short: Vec<Vec<u8>> = entries
            .iter()
            .filter(|e| e.ttl < SHORT_LEASE_MS)
            .map(|e| e.token.clone())
            .collect();
        if !short.is_empty() {
            // Too short to outlast the checks below: they must end on their own, on time.
            let c = &mut self.con;
            let ended = wait_until(Duration::from_secs(5), || {
                dump::holders(c, key).is_none_or(|h| !h.iter().any(|e| short.contains(&e.token)))
            });
            if !ended {
                self.fail(&format!(
                    "restored leases of under {SHORT_LEASE_MS} ms did not end"
                ));
            }
        }
        let Some((i, entries)) = self.state(key) else {
            // Every lease ended: the key goes away on its own, on time.
            let c = &mut self.con;
            if !wait_until(Duration::from_secs(5), || !exists(c, key)) {
                self.fail("every restored lease ended, but the key stayed");
            }
            return;
        };
        self.tally.locks_exercised += 1;
        for e in &entries {
            if e.token.is_empty()
                || e.token.len() > MAX_TOKEN
                || e.fence <= 0
                || e.ttl <= 0
                || e.ttl > MAX_LEFT_MS
            {
                self.fail(&format!("restored hold is not sane: {e:?} in {i:?}"));
            }
        }
        if i.fence <= 0 || i.fence as u64 > MAX_FENCE || i.waiters != 0 {
            self.fail(&format!("restored lock is not sane: {i:?}"));
        }
        self.exercise(key, &i, &entries);
    }

    /// Uses a restored lock as its holders would: each gets a new fence above every fence
    /// before, renews its lease and asks again for what it holds (the same fence back);
    /// nobody else gets an exclusive hold, and someone else gets a shared one only where the
    /// lock is shared. Then it dumps and restores as the same lock, with each lease's time
    /// left, and when every holder has released it the key is gone.
    fn exercise(&mut self, key: &str, i: &LockInfo, entries: &[Holder]) {
        let shared = i.mode == "shared";
        let mut top = i.fence.max(self.probe_fence);
        let mut fences = Vec::new();
        for e in entries {
            let c = &mut self.con;
            match cmd!(c, "LOCK.FENCE", key, e.token.as_slice()) {
                Ok(Value::Int(f)) if f > top && f as u64 <= MAX_FENCE => {
                    top = f;
                    fences.push(f);
                }
                other => self.fail(&format!(
                    "LOCK.FENCE of restored hold {e:?} (fences issued up to {top}): {other:?}"
                )),
            }
        }
        let c = &mut self.con;
        let r = cmd!(c, "LOCK.ACQUIRE", key, "someone-else", 1000);
        if r != Ok(Value::Nil) {
            self.fail(&format!("someone else asked for {i:?} exclusively: {r:?}"));
        }
        let c = &mut self.con;
        match cmd!(c, "LOCK.ACQUIRE", key, "someone-else", 1000, "SHARED") {
            Ok(Value::Nil) if !shared => {}
            Ok(Value::Int(f)) if shared && f > top => {
                top = f;
                let c = &mut self.con;
                assert_eq!(release(c, key, "someone-else"), 1);
            }
            other => self.fail(&format!("someone else asked {i:?} for a share: {other:?}")),
        }
        self.probe_fence = self.probe_fence.max(top);
        // The first renewal below: every lease has run at most since then.
        let renewed = Instant::now();
        for (e, &f) in entries.iter().zip(&fences) {
            let t = e.token.as_slice();
            let c = &mut self.con;
            let mut checks = vec![
                (cmd!(c, "LOCK.EXTEND", key, t, 60_000), Ok(Value::Int(1))),
                if shared {
                    (
                        cmd!(c, "LOCK.ACQUIRE", key, t, 60_000, "SHARED"),
                        Ok(Value::Int(f)),
                    )
                } else {
                    (cmd!(c, "LOCK.ACQUIRE", key, t, 60_000), Ok(Value::Int(f)))
                },
            ];
            if shared {
                let r = cmd!(c, "LOCK.ACQUIRE", key, t, 60_000);
                let upgrade = "ERR the token holds the lock shared";
                let r = match r {
                    Err(e) if e.starts_with(upgrade) => Err(upgrade.to_string()),
                    other => other,
                };
                checks.push((r, Err(upgrade.to_string())));
            }
            for (got, want) in checks {
                if got != want {
                    self.fail(&format!("restored hold {e:?}: got {got:?}, want {want:?}"));
                }
            }
        }
        // It dumps and restores again as the same lock, with the time each hold had left.
        let c = &mut self.con;
        let again = dump::dump(c, key);
        let c = &mut self.con;
        if cmd!(c, "RESTORE", "copy", 0, again.as_slice(), "REPLACE") != Ok(Value::Okay) {
            self.fail("a restored lock's own DUMP does not restore");
        }
        let copy = self.state("copy");
        // DUMP rounds the deadline up and the save time down (to the millisecond): the copy
        // may hold up to 2 ms more than the lease had left, never less.
        let took = renewed.elapsed().as_millis() as i64 + 2;
        let same = copy.as_ref().is_some_and(|(ci, ch)| {
            ci.fence == top
                && ci.mode == i.mode
                && ch.len() == entries.len()
                && ch.iter().zip(entries).zip(&fences).all(|((c, e), &f)| {
                    c.token == e.token
                        && c.fence == f
                        && c.ttl <= 60_000 + 2
                        && c.ttl >= 60_000 - took
                })
        });
        if !same {
            self.fail(&format!(
                "round trip of {i:?} {entries:?} with fences {fences:?} (key's {top}) and \
                 60000 ms leases: {copy:?} within {took} ms"
            ));
        }
        for e in entries {
            let c = &mut self.con;
            let r = cmd!(c, "LOCK.RELEASE", key, e.token.as_slice());
            if r != Ok(Value::Int(1)) {
                self.fail(&format!("LOCK.RELEASE of restored hold {e:?}: {r:?}"));
            }
        }
        if exists(&mut self.con, key) {
            let left = dump::holders(&mut self.con, key);
            self.fail(&format!(
                "every holder released, but the key is left: {left:?}"
            ));
        }
        let c = &mut self.con;
        cmd!(c, "DEL", "copy").unwrap();
    }
}
