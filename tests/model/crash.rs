//! A crash at full fence rate (`op_crash`, described in the crate doc): an RDB snapshot
//! with the AOF off, a burst of `LOCK.FENCE`, SIGKILL, a restart from the snapshot, the
//! first fences checked against the burst, and the AOF turned on again.

use std::io::Write;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::model::{MHold, MKey, MLock, Pending, Span, Want};
use crate::raw_connections::{early_calls, Reply, Sock};
use crate::{show, Driver, BURST_CONNS, BURST_MAX, BURST_MIN, KEYS, LONG_TTL, SLACK, TOKENS};
use rand::seq::SliceRandom;
use rand::Rng;
use redis::Value;

impl Driver {
    /// A crash at full fence rate. The AOF goes off and the server saves an RDB snapshot;
    /// the model keeps a copy of itself. One connection (or two at once) then pipelines a
    /// burst of `LOCK.FENCE` on one or two held keys, every acknowledged fence checked to
    /// increase per key (`TRYAGAIN` is counted: the bucket may run dry), and the server is
    /// killed with SIGKILL right after the last reply. It starts again from the snapshot with the AOF
    /// off; the model becomes its copy, without waiters (connections, all closed by the
    /// crash) and without a lock whose short lease ran out while the server was down. The
    /// burst is lost, but its fences are not forgotten: from now on every fence issued must
    /// be above the highest one acknowledged before the crash (`Model::crash_floor`), which
    /// the first fences after the restart (burst keys and a fresh key, in random order,
    /// retrying `TRYAGAIN`) check at once and every later op keeps checking. Last,
    /// `CONFIG SET appendonly yes` rewrites the AOF from the loaded data, so that the next
    /// `op_restart` (started with `appendonly yes`) finds the same state.
    pub(crate) fn op_crash(&mut self) {
        self.tick();
        let t0 = Instant::now();
        self.counts.crashes += 1;
        self.steps_since_crash = 0;
        // The burst keys: one or two held locks (one is acquired if none is held).
        let mut held: Vec<usize> = (0..KEYS.len())
            .filter(|&k| self.model.keys[k].lock.is_some())
            .collect();
        if held.is_empty() {
            let k = self.rng.gen_range(0..KEYS.len());
            let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
            let want = self.pick_want();
            self.op_acquire(k, t, want, false);
            held.push(k);
        }
        held.shuffle(&mut self.rng);
        let two = held.len() > 1 && self.rng.gen_bool(0.5);
        held.truncate(if two { 2 } else { 1 });
        let burst = held;
        if two {
            self.counts.crash_two_key_bursts += 1;
        }
        // Half the time another key gets a short lease, to run out while the server is down
        // (a key without waiters: a lease end with a waiter would be a grant whose timing
        // against the crash decides its fate).
        let mut lapsing = None;
        if self.rng.gen_bool(0.5) {
            let cands: Vec<usize> = (0..KEYS.len())
                .filter(|k| !burst.contains(k) && !self.has_waiters(*k))
                .collect();
            if !cands.is_empty() {
                let k = cands[self.rng.gen_range(0..cands.len())];
                // One hold of the key (of several, perhaps) runs out.
                match self.random_holder(k) {
                    Some(h) => self.op_extend(k, h, true),
                    None => {
                        let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
                        let want = self.pick_want();
                        self.op_acquire(k, t, want, true)
                    }
                }
                lapsing = Some(k);
            }
        }
        // Waiters, to be dropped by the crash.
        self.maybe_queue_waiter_anywhere(0.5);

        // The snapshot.
        self.set_appendonly(false);
        let (v, _, _) = self.call(&[b"SAVE"]);
        self.note(format!("SAVE -> {v:?}"));
        ensure!(self, v == Value::Okay, "SAVE replied {v:?}");
        let snapshot: Vec<MKey> = self.model.keys.clone();

        // The burst, at full speed: pipelined on one connection, or on several at once.
        let conns = if self.rng.gen_bool(0.5) {
            1
        } else {
            BURST_CONNS
        };
        let n = self.rng.gen_range(BURST_MIN..=BURST_MAX) / conns * conns;
        // Each `LOCK.FENCE` for one hold of a burst key (of several, perhaps).
        let plans: Vec<Vec<(usize, Vec<u8>)>> = (0..conns)
            .map(|_| {
                (0..n / conns)
                    .map(|_| {
                        let k = burst[self.rng.gen_range(0..burst.len())];
                        (k, self.random_holder(k).unwrap())
                    })
                    .collect()
            })
            .collect();
        let reqs: Vec<Vec<u8>> = plans
            .iter()
            .map(|plan| {
                let mut req = Vec::with_capacity(plan.len() * 40);
                for (k, holder) in plan {
                    req.extend_from_slice(&common::resp_command(&[
                        b"LOCK.FENCE",
                        KEYS[*k].as_bytes(),
                        &holder[..],
                    ]));
                }
                req
            })
            .collect();
        let socks: Vec<Sock> = (0..conns)
            .map(|_| Sock::connect(self.server.port))
            .collect();
        let before = self.model.max_fence;
        let sent = Instant::now();
        let replies: Vec<Vec<Option<Reply>>> = std::thread::scope(|s| {
            let threads: Vec<_> = socks
                .into_iter()
                .zip(reqs.iter().zip(&plans))
                .map(|(mut sock, (req, plan))| {
                    s.spawn(move || {
                        sock.s.write_all(req).expect("send the burst");
                        (0..plan.len())
                            .map(|_| sock.reply(Duration::from_secs(10)))
                            .collect()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let took = sent.elapsed();
        // On each connection, every fence of a key is above the one before it there (and
        // above the key's last fence); across connections, no fence of a key twice.
        let (mut acked, mut tryagain) = (0u64, 0u64);
        let mut issued: Vec<Vec<(i64, &[u8])>> = vec![Vec::new(); KEYS.len()];
        for (c, (plan, rs)) in plans.iter().zip(&replies).enumerate() {
            let mut last: Vec<i64> = (0..KEYS.len())
                .map(|k| self.model.keys[k].last_fence.unwrap_or(0))
                .collect();
            for (i, ((k, holder), r)) in plan.iter().zip(rs).enumerate() {
                let k = *k;
                match r {
                    Some(Reply::Int(f)) => {
                        ensure!(
                            self,
                            *f > last[k],
                            "burst connection {c} fence #{i} on {}: {f}, not above {} before it",
                            KEYS[k],
                            last[k]
                        );
                        last[k] = *f;
                        issued[k].push((*f, &holder[..]));
                        acked += 1;
                    }
                    Some(Reply::Error(e)) if e.starts_with("TRYAGAIN ") => tryagain += 1,
                    r => self.fail(&format!(
                        "burst connection {c} LOCK.FENCE #{i} on {} (held): {r:?}",
                        KEYS[k]
                    )),
                }
            }
        }
        for (k, mut fs) in issued.into_iter().enumerate() {
            fs.sort_unstable();
            for (f, holder) in fs {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("burst on {}: {e} (issued twice?)", KEYS[k]));
                }
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(holder).fence = f;
            }
        }
        let highest = self.model.max_fence;
        let per_ms = acked * 1000 / (took.as_micros() as u64).max(1);
        self.counts.crash_burst_fences += acked;
        self.counts.crash_burst_tryagain += tryagain;
        self.counts.crash_burst_peak_per_ms = self.counts.crash_burst_peak_per_ms.max(per_ms);
        if conns > 1 {
            self.counts.crash_parallel_bursts += 1;
        }
        self.note(format!(
            "burst of {n} LOCK.FENCE on {:?} over {conns} connection(s) in {took:.1?}: {acked} \
             fences ({before} -> {highest}), {tryagain} TRYAGAIN",
            burst.iter().map(|&k| KEYS[k]).collect::<Vec<_>>()
        ));
        ensure!(self, acked > 0, "no fence acknowledged in a burst of {n}");

        // The crash. While the server is down, a short lease in the snapshot runs out.
        self.server.kill9();
        let down = Instant::now();
        if let Some(k) = lapsing {
            if let Some(Pending::LeaseEnd { span, .. }) = &snapshot[k].pending {
                sleep((span.hi + SLACK).saturating_duration_since(Instant::now()));
            }
        }
        self.note("CRASH (SIGKILL after the burst's last reply)".into());
        // Waiters are connections: the crash closed them without a reply.
        self.counts.crash_waiters_dropped += self.expect_waiters_closed("a crash");
        // The model becomes its copy: the server will load the snapshot.
        self.model.keys = snapshot;
        self.model.drop_waiters();
        self.model.crash_floor = highest;
        if let Some(k) = lapsing {
            if let Some(Pending::LeaseEnd { token, .. }) = self.model.keys[k].pending.take() {
                self.counts.lease_ends += 1;
                self.counts.crash_lapsed += 1;
                self.note(format!(
                    "  lease of {} on {} ended while the server was down",
                    show(&token),
                    KEYS[k]
                ));
                // That hold only; the key has no waiters, so nobody is granted.
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.holds.retain(|h| h.token != token);
                if l.holds.is_empty() {
                    self.model.keys[k].lock = None;
                }
            }
        }

        // The first fences after the restart: a new fence for one holder of each burst key
        // and a fresh key acquired (`Some(want)`), in random order.
        let mut firsts: Vec<(usize, Vec<u8>, Option<Want>)> = Vec::new();
        for &k in &burst {
            let h = self.random_holder(k).unwrap();
            firsts.push((k, h, None));
        }
        let missing: Vec<usize> = (0..KEYS.len())
            .filter(|&k| self.model.keys[k].lock.is_none())
            .collect();
        if !missing.is_empty() {
            let k = missing[self.rng.gen_range(0..missing.len())];
            let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
            let want = self.pick_want();
            firsts.push((k, t, Some(want)));
        }
        firsts.shuffle(&mut self.rng);
        let mut cmds: Vec<Vec<u8>> = Vec::new();
        for (k, t, fresh) in &firsts {
            cmds.push(match fresh {
                Some(want) => {
                    common::resp_command(&self.acquire_args(*k, t, LONG_TTL, *want, None))
                }
                None => common::resp_command(&[&b"LOCK.FENCE"[..], KEYS[*k].as_bytes(), t]),
            });
        }

        // The restart, from the snapshot with the AOF off. The first fences go out on a
        // connection made as soon as the port takes one, while `start_again` still waits
        // for the server to answer: the first is taken at the earliest moment the server
        // serves a command (a `TRYAGAIN`, should the module still refuse fences then, is
        // retried; this module waits that window out while it loads).
        self.server.opts.appendonly = false;
        let port = self.server.port;
        let server = &mut self.server;
        let restart = Instant::now();
        let answers = std::thread::scope(|s| {
            s.spawn(move || server.start_again());
            early_calls(port, &cmds)
        });
        self.con = self.server.conn();
        self.note(format!(
            "  restarted from the snapshot, AOF off (down {:.0?})",
            down.elapsed()
        ));
        let answers = match answers {
            Ok(a) => a,
            Err(e) => self.fail(&e),
        };
        for ((k, t, want), a) in firsts.into_iter().zip(answers) {
            self.counts.crash_restart_tryagain += a.tryagain;
            let fresh = want.is_some();
            let what = match want {
                Some(w) => format!("ACQUIRE {w}"),
                None => "FENCE".into(),
            };
            self.note(format!(
                "{what} {} {} after the crash ({:.1?} into the restart, after {} TRYAGAIN \
                 and {} LOADING) -> {:?} (model: {}, above {highest})",
                KEYS[k],
                show(&t),
                a.sent.duration_since(restart),
                a.tryagain,
                a.loading,
                a.reply,
                if fresh { "fresh key" } else { "held" }
            ));
            let Some(Reply::Int(f)) = a.reply else {
                self.fail(&format!(
                    "LOCK.{what} {} after the crash: {:?}, model: a new fence",
                    KEYS[k], a.reply
                ));
            };
            if let Err(e) = self.model.new_fence(k, f, fresh) {
                self.fail(&format!("LOCK.{what} {} after the crash: {e}", KEYS[k]));
            }
            match want {
                Some(want) => {
                    self.model.keys[k].lock = Some(MLock::new(MHold {
                        token: t,
                        mode: want.mode(),
                        fence: f,
                        deadline: Span::after(a.sent, a.recv, LONG_TTL),
                    }));
                    self.counts.acquire += 1;
                    self.counts.crash_first_fresh += 1;
                }
                None => {
                    let l = self.model.keys[k].lock.as_mut().unwrap();
                    l.hold_mut(&t).fence = f;
                }
            }
            self.counts.crash_first_fences += 1;
        }
        // The server holds the snapshot (with those fences) and nothing else.
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.set_appendonly(true);
        self.server.opts.appendonly = true;
        self.settle_keys();
        self.check_totals();
        self.counts.crash_ms += t0.elapsed().as_millis() as u64;
    }

    /// `CONFIG SET appendonly yes|no`; turning it on waits until the rewrite that writes the
    /// new AOF is done.
    fn set_appendonly(&mut self, on: bool) {
        let val: &[u8] = if on { b"yes" } else { b"no" };
        let (v, _, _) = self.call(&[b"CONFIG", b"SET", b"appendonly", val]);
        self.note(format!("CONFIG SET appendonly {} -> {v:?}", show(val)));
        ensure!(
            self,
            v == Value::Okay,
            "CONFIG SET appendonly replied {v:?}"
        );
        if !on {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut self.con)
                .expect("INFO persistence");
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            if field("aof_rewrite_in_progress").as_deref() == Some("0")
                && field("aof_rewrite_scheduled").as_deref() == Some("0")
            {
                ensure!(
                    self,
                    field("aof_enabled").as_deref() == Some("1")
                        && field("aof_last_bgrewrite_status").as_deref() == Some("ok"),
                    "AOF not written after CONFIG SET appendonly yes:\n{text}"
                );
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!("AOF rewrite not done after 10 s:\n{text}"));
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// Waits (up to `SLACK`) until `DBSIZE` is the model's: a lock loaded with its lease
    /// already ended is reported ended at once but removed by the sweep a moment later.
    fn settle_keys(&mut self) {
        let want = Value::Int(self.model.key_count() as i64);
        let deadline = Instant::now() + SLACK;
        while Instant::now() < deadline {
            let (v, _, _) = self.call(&[b"DBSIZE"]);
            if v == want {
                return;
            }
            sleep(Duration::from_millis(2));
        }
    }
}
