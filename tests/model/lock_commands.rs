//! The lock's own commands as ops: `LOCK.ACQUIRE` (exclusive or `SHARED [LIMIT n]`, with
//! and without `WAIT`), `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE`, `LOCK.INFO` and
//! `LOCK.HOLDERS`, each sent to the server and its reply checked against what the model
//! expects (and applied to the model).

use std::time::{Duration, Instant};

use crate::common::model::{
    AcqExpect, MHold, MLock, MWaiter, Mode, Pending, Span, Want, UPGRADE_ERR,
};
use crate::common::{parse_info, run_raw};
use crate::queue_rules::QueueRules;
use crate::raw_connections::{Reply, Sock};
use crate::{show, Driver, KEYS, LONG_TTL};
use rand::seq::SliceRandom;
use rand::Rng;
use redis::Value;

impl Driver {
    /// `LOCK.ACQUIRE key token ttl` with `want`'s options and `extra` (`WAIT t`), the option
    /// groups in random order.
    pub(crate) fn acquire_args(
        &mut self,
        k: usize,
        token: &[u8],
        ttl: u64,
        want: Want,
        extra: Option<Vec<Vec<u8>>>,
    ) -> Vec<Vec<u8>> {
        let mut groups = want.options();
        groups.extend(extra);
        groups.shuffle(&mut self.rng);
        let mut args = vec![
            b"LOCK.ACQUIRE".to_vec(),
            KEYS[k].as_bytes().to_vec(),
            token.to_vec(),
            ttl.to_string().into_bytes(),
        ];
        args.extend(groups.into_iter().flatten());
        args
    }

    /// Counts what the model expects of a request.
    fn count_request(&mut self, k: usize, want: Want, expect: AcqExpect) {
        if let Want::Shared(limit) = want {
            self.counts.shared_requests += 1;
            if limit.is_some() {
                self.counts.limit_requests += 1;
            }
        }
        let l = self.model.keys[k].lock.as_ref();
        match expect {
            AcqExpect::Join => self.counts.joins += 1,
            AcqExpect::Renew(_) => {
                self.counts.renewals += 1;
                if let (Want::Shared(Some(n)), Some(l)) = (want, l) {
                    if l.holds.len() >= n as usize {
                        self.counts.renewals_over_limit += 1;
                    }
                }
            }
            AcqExpect::Downgrade(_) => self.counts.downgrades += 1,
            AcqExpect::Upgrade => self.counts.upgrades_refused += 1,
            AcqExpect::Busy => {
                if let (Want::Shared(_), Some(l)) = (want, l) {
                    if l.admits(want) {
                        // Room for it, but somebody waits (a request without `WAIT` does
                        // not pass the queue; one with `WAIT` queues behind it).
                        self.counts.held_back += 1;
                    } else if !l.exclusive() && l.queue.is_empty() {
                        self.counts.limit_refused += 1;
                    }
                }
            }
            AcqExpect::Fresh => {}
        }
    }

    /// Applies the reply to a request the model answers at once (anything but `Busy`):
    /// `got` is the fence, or the error text. `sent`/`recv` bound when the server acted.
    #[allow(clippy::too_many_arguments)]
    fn apply_answer(
        &mut self,
        k: usize,
        token: Vec<u8>,
        want: Want,
        ttl: u64,
        expect: AcqExpect,
        got: Result<Option<i64>, String>,
        sent: Instant,
        recv: Instant,
        what: &str,
    ) {
        let deadline = Span::after(sent, recv, ttl);
        let hold = |fence| MHold {
            token: token.clone(),
            mode: want.mode(),
            fence,
            deadline,
        };
        match (expect, got) {
            (AcqExpect::Fresh, Ok(Some(f))) => {
                if let Err(e) = self.model.new_fence(k, f, true) {
                    self.fail(&format!("{what}: {e}"));
                }
                self.model.keys[k].lock = Some(MLock::new(hold(f)));
            }
            (AcqExpect::Join, Ok(Some(f))) => {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("{what}: {e}"));
                }
                self.model.keys[k]
                    .lock
                    .as_mut()
                    .unwrap()
                    .holds
                    .push(hold(f));
            }
            (AcqExpect::Renew(f0), Ok(Some(f))) => {
                ensure!(
                    self,
                    f == f0,
                    "{what}: renewal returned fence {f}, expected the same {f0}"
                );
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(&token).deadline = deadline;
            }
            (AcqExpect::Downgrade(f0), Ok(Some(f))) => {
                ensure!(
                    self,
                    f == f0,
                    "{what}: downgrade returned fence {f}, expected the same {f0}"
                );
                let l = self.model.keys[k].lock.as_mut().unwrap();
                let h = l.hold_mut(&token);
                h.mode = Mode::Shared;
                h.deadline = deadline;
                let granted = self.model.serve_key(k, sent);
                self.counts.downgrade_grants += granted.len() as u64;
                self.read_grants(k, granted, sent, "the downgrade");
            }
            (AcqExpect::Upgrade, Err(e)) => {
                ensure!(
                    self,
                    e == UPGRADE_ERR,
                    "{what}: refused upgrade replied {e:?}, expected {UPGRADE_ERR:?}"
                );
                // The hold is unchanged: its lease, fence and kind (checked at once).
                self.check_key(k);
                return;
            }
            (e, g) => self.fail(&format!("{what}: model {e:?}, server {g:?}")),
        }
        let n = self.model.keys[k].lock.as_ref().unwrap().holds.len() as u64;
        self.counts.max_holders = self.counts.max_holders.max(n);
    }

    pub(crate) fn op_acquire(&mut self, k: usize, token: Vec<u8>, want: Want, short: bool) {
        self.counts.acquire += 1;
        let expect = self.model.acquire(k, &token, want);
        // A refused upgrade carries a short lease: the hold must not take it.
        let short = short || expect == AcqExpect::Upgrade;
        let ttl = if short { self.short_ttl() } else { LONG_TTL };
        self.count_request(k, want, expect);
        let args = self.acquire_args(k, &token, ttl, want, None);
        let sent = Instant::now();
        let r = run_raw(&mut self.con, &args);
        let recv = Instant::now();
        let what = format!(
            "ACQUIRE {} {} {ttl} {want} (model {expect:?})",
            KEYS[k],
            show(&token)
        );
        self.note(format!("{what} -> {r:?}"));
        let got = match r {
            Ok(v) => Ok(self.int_or_null("LOCK.ACQUIRE", &v)),
            Err(e) => Err(e),
        };
        if expect == AcqExpect::Busy {
            ensure!(self, got == Ok(None), "{what}: server {got:?}, model null");
            return;
        }
        self.apply_answer(k, token.clone(), want, ttl, expect, got, sent, recv, &what);
        if short && expect != AcqExpect::Upgrade {
            self.counts.short_leases += 1;
            let span = Span::after(sent, recv, ttl);
            self.model.keys[k].pending = Some(Pending::LeaseEnd { token, span });
        }
    }

    /// `LOCK.ACQUIRE … WAIT` on a connection of its own. `short_wait`: a timeout of 100–250
    /// ms that will run out (the key is pending until then); otherwise `WAIT 0` or a
    /// timeout far beyond the run.
    pub(crate) fn op_acquire_wait(
        &mut self,
        k: usize,
        token: Vec<u8>,
        want: Want,
        short_wait: bool,
    ) {
        let timeout: u64 = if short_wait {
            self.rng.gen_range(100..=250)
        } else if self.rng.gen_bool(0.5) {
            0
        } else {
            LONG_TTL
        };
        self.op_acquire_wait_for(k, token, want, timeout)
    }

    /// `op_acquire_wait` with `WAIT timeout`: one that is neither 0 nor `LONG_TTL` runs out
    /// during the run (the key is pending until then).
    pub(crate) fn op_acquire_wait_for(
        &mut self,
        k: usize,
        token: Vec<u8>,
        want: Want,
        timeout: u64,
    ) {
        self.op_acquire_wait_ttl(k, token, want, timeout, LONG_TTL)
    }

    /// `op_acquire_wait_for` asking for a lease of `ttl` (beyond the run).
    pub(crate) fn op_acquire_wait_ttl(
        &mut self,
        k: usize,
        token: Vec<u8>,
        want: Want,
        timeout: u64,
        ttl: u64,
    ) {
        self.counts.acquire_wait += 1;
        let short_wait = timeout != 0 && timeout != LONG_TTL;
        let expect = self.model.acquire(k, &token, want);
        self.count_request(k, want, expect);
        let wait = vec![b"WAIT".to_vec(), timeout.to_string().into_bytes()];
        let args = self.acquire_args(k, &token, ttl, want, Some(wait));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let mut sock = Sock::connect(self.server.port);
        let sent = Instant::now();
        sock.send(&args);
        let what = format!(
            "ACQUIRE {} {} {ttl} {want} WAIT {timeout} (model {expect:?})",
            KEYS[k],
            show(&token)
        );
        if expect != AcqExpect::Busy {
            let r = sock.reply(Duration::from_secs(10));
            let recv = Instant::now();
            self.note(format!("{what} -> {r:?}"));
            let got = match r {
                Some(Reply::Int(f)) => Ok(Some(f)),
                Some(Reply::Null) => Ok(None),
                Some(Reply::Error(e)) => Err(e),
                other => self.fail(&format!("{what}: server {other:?}")),
            };
            self.apply_answer(k, token, want, ttl, expect, got, sent, recv, &what);
            return;
        }
        // Queued: the server must count one more waiter (without a timeout race: a short
        // wait is not polled for, its key is pending until it runs out).
        self.counts.blocked += 1;
        let id = self.model.waiters.len();
        self.model.waiters.push(Some(MWaiter {
            key: k,
            token: token.clone(),
            want,
            ttl,
        }));
        self.model.keys[k]
            .lock
            .as_mut()
            .unwrap()
            .queue
            .push_back(id);
        self.socks.push(Some(sock));
        self.note(format!("{what} -> queued as waiter w{id}"));
        if short_wait {
            self.counts.short_waits += 1;
            self.model.keys[k].pending = Some(Pending::WaitTimeout {
                waiter: id,
                at: sent + Duration::from_millis(timeout),
            });
        } else {
            let want = self.model.keys[k].lock.as_ref().unwrap().queue.len() as i64;
            self.await_waiters(k, want, &format!("waiter w{id} joining"));
            let s = self.socks[id].as_mut().unwrap();
            ensure!(
                self,
                !s.has_input(),
                "waiter w{id} got a reply while it should wait"
            );
        }
    }

    pub(crate) fn op_release(&mut self, k: usize, token: Vec<u8>) {
        self.counts.release += 1;
        let holds = self.model.holds(k, &token);
        let (v, sent, _) = self.call(&[b"LOCK.RELEASE", KEYS[k].as_bytes(), &token]);
        self.note(format!(
            "RELEASE {} {} -> {v:?} (model {})",
            KEYS[k],
            show(&token),
            holds as i64
        ));
        ensure!(
            self,
            v == Value::Int(holds as i64),
            "LOCK.RELEASE replied {v:?}, model {}",
            holds as i64
        );
        if holds {
            let granted = self.model.end_hold_and_serve(k, &token, sent);
            self.read_grants(k, granted, sent, "the release");
        }
    }

    pub(crate) fn op_extend(&mut self, k: usize, token: Vec<u8>, short: bool) {
        self.counts.extend += 1;
        let ttl = if short { self.short_ttl() } else { LONG_TTL };
        let holds = self.model.holds(k, &token);
        let (v, sent, recv) = self.call(&[
            b"LOCK.EXTEND",
            KEYS[k].as_bytes(),
            &token,
            ttl.to_string().as_bytes(),
        ]);
        self.note(format!(
            "EXTEND {} {} {ttl} -> {v:?} (model {})",
            KEYS[k],
            show(&token),
            holds as i64
        ));
        ensure!(
            self,
            v == Value::Int(holds as i64),
            "LOCK.EXTEND replied {v:?}, model {}",
            holds as i64
        );
        if holds {
            let span = Span::after(sent, recv, ttl);
            let l = self.model.keys[k].lock.as_mut().unwrap();
            l.hold_mut(&token).deadline = span;
            if short {
                self.counts.short_leases += 1;
                self.model.keys[k].pending = Some(Pending::LeaseEnd { token, span });
            }
        }
    }

    pub(crate) fn op_fence(&mut self, k: usize, token: Vec<u8>) {
        self.counts.fence += 1;
        let holds = self.model.holds(k, &token);
        let (v, _, _) = self.call(&[b"LOCK.FENCE", KEYS[k].as_bytes(), &token]);
        let got = self.int_or_null("LOCK.FENCE", &v);
        self.note(format!(
            "FENCE {} {} -> {got:?} (model {})",
            KEYS[k],
            show(&token),
            if holds { "new" } else { "null" }
        ));
        match (holds, got) {
            (true, Some(f)) => {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("LOCK.FENCE: {e}"));
                }
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(&token).fence = f;
            }
            (false, None) => {}
            (h, g) => self.fail(&format!("LOCK.FENCE: model holds={h}, server {g:?}")),
        }
    }

    pub(crate) fn op_info(&mut self, k: usize) {
        self.counts.info += 1;
        let (v, sent, recv) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
        self.note(format!("INFO {} -> {:?}", KEYS[k], parse_info(&v)));
        self.check_info(k, &v, sent, recv);
    }

    pub(crate) fn op_holders(&mut self, k: usize) {
        let (v, sent, recv) = self.call(&[b"LOCK.HOLDERS", KEYS[k].as_bytes()]);
        self.note(format!("HOLDERS {} -> {v:?}", KEYS[k]));
        self.check_holders(k, &v, sent, recv);
    }
}
