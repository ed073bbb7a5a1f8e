//! Grants withdrawn (docs/commands.md, `LOCK.ACQUIRE`, "Leaving"): a grant made to a client that
//! left before its reply went out is taken back and passed on. `MULTI; LOCK.RELEASE k h
//! (or h's downgrade); CLIENT KILL ID w …; EXEC` grants the waiters at the head and kills
//! some of them before they are told. With repeated tokens a grant is found by what it
//! made, not by its token: a new hold that nobody else was told of is taken back (and the
//! queue served again); a new hold that another request of the token was told of in the
//! same pass (its renewal or downgrade) stays, and so does the hold a killed renewal or
//! downgrade was granted (another request was told of it). The run never kills every
//! request of a token granted together, nor takes back two grants in one transaction.

use std::time::{Duration, Instant};

use crate::common::guard::transaction;
use crate::common::holds::{parse_holders, tokens};
use crate::common::model::{Mode, Span, Want};
use crate::common::{args, parse_info};
use crate::queue_rules::{serve_lock, Grant, How, QueueRules};
use crate::raw_connections::Reply;
use crate::{show, Driver, KEYS, LONG_TTL};
use rand::seq::SliceRandom;
use rand::Rng;
use redis::Value;

/// What becomes of a killed waiter's grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// A new hold nobody else was told of: taken back.
    TakenBack,
    /// A new hold another request of its token was told of: kept.
    Kept,
    /// A renewal or a downgrade: the hold stays.
    Renewal,
}

impl Driver {
    /// One transaction that grants waiters of `k` and kills some of them before their
    /// replies (on a key without waiters: two or three waiters queue instead).
    pub(crate) fn op_kill_grants(&mut self, k: usize) {
        let Some(l) = self.model.keys[k].lock.clone() else {
            return self.op_info(k);
        };
        let h = l.holds[self.rng.gen_range(0..l.holds.len())].clone();
        let downgrade = h.mode == Mode::Exclusive && self.rng.gen_bool(0.3);
        // What the trigger will grant, on a copy of the lock.
        let mut dry = l.clone();
        if downgrade {
            dry.hold_mut(&h.token).mode = Mode::Shared;
        } else {
            dry.holds.retain(|x| x.token != h.token);
        }
        let plan = serve_lock(&mut dry, &self.model.waiters, Instant::now());
        let victims = self.pick_victims(&plan);
        if victims.is_empty() {
            return self.op_info(k);
        }
        self.counts.kills += 1;
        let ids = self.client_ids(&victims);
        let key = KEYS[k].as_bytes();
        let trigger = if downgrade {
            self.acquire_args(k, &h.token, LONG_TTL, Want::Shared(None), None)
        } else {
            vec![b"LOCK.RELEASE".to_vec(), key.to_vec(), h.token.clone()]
        };
        let mut cmds = vec![trigger];
        for id in &ids {
            cmds.push(args(&["CLIENT", "KILL", "ID", &id.to_string()]));
        }
        let sent = Instant::now();
        let replies = transaction(&mut self.con, &cmds);
        let recv = Instant::now();
        self.note(format!(
            "MULTI; {} {} {}; CLIENT KILL ID of {}; EXEC -> {replies:?}",
            if downgrade { "DOWNGRADE" } else { "RELEASE" },
            KEYS[k],
            show(&h.token),
            victims
                .iter()
                .map(|w| format!("w{w}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let first = if downgrade {
            Value::Int(h.fence)
        } else {
            Value::Int(1)
        };
        let kills_ok = replies[1..].iter().all(|r| *r == Ok(Value::Int(1)));
        ensure!(
            self,
            replies[0] == Ok(first) && kills_ok,
            "the transaction replied {replies:?}"
        );
        let grants = if downgrade {
            self.counts.downgrades += 1;
            let hm = self.model.keys[k].lock.as_mut().unwrap().hold_mut(&h.token);
            hm.mode = Mode::Shared;
            hm.deadline = Span::after(sent, recv, LONG_TTL);
            self.model.serve_key(k, sent)
        } else {
            self.model.end_hold_and_serve(k, &h.token, sent)
        };
        let fates: Vec<(Grant, Fate)> = grants
            .iter()
            .filter(|g| victims.contains(&g.w))
            .map(|g| (*g, self.fate(&grants, g)))
            .collect();
        let told: Vec<Grant> = grants
            .iter()
            .copied()
            .filter(|g| !victims.contains(&g.w))
            .collect();
        self.read_grants(k, told, sent, "the transaction");
        let mut back = None;
        for (g, fate) in fates {
            let r = self.socks[g.w]
                .as_mut()
                .unwrap()
                .reply(Duration::from_secs(5));
            let mw = self.model.waiters[g.w].take().unwrap();
            self.socks[g.w] = None;
            self.note(format!(
                "  waiter w{} ({} {}) granted {} ({:?}) and killed: {fate:?} -> {r:?}",
                g.w,
                show(&mw.token),
                mw.want,
                KEYS[k],
                g.how
            ));
            ensure!(
                self,
                r == Some(Reply::Closed),
                "killed waiter w{}: {r:?}",
                g.w
            );
            match fate {
                Fate::TakenBack => {
                    self.counts.killed_taken_back += 1;
                    back = Some(mw.token);
                }
                Fate::Kept => self.counts.killed_kept += 1,
                Fate::Renewal => {
                    // Whether the renewal's lease stands or not, the hold is the other's.
                    self.counts.killed_renewals += 1;
                    let l = self.model.keys[k].lock.as_mut().unwrap();
                    let d = &mut l.hold_mut(&mw.token).deadline;
                    let renewed = Span::after(sent, recv, mw.ttl);
                    *d = Span {
                        lo: d.lo.min(renewed.lo),
                        hi: d.hi.max(renewed.hi),
                    };
                }
            }
        }
        if let Some(token) = &back {
            // Taken back by the server a moment after `EXEC`: the leases of whoever it
            // passes to start between the transaction and their replies.
            let again = self.model.end_hold_and_serve(k, token, sent);
            self.counts.withdraw_grants += again.len() as u64;
            self.read_grants(k, again, sent, "a grant taken back");
        }
        self.settle_withdrawal(k, back.is_some());
        self.check_key(k);
        self.check_settled();
    }

    /// Victims among the waiters `plan` grants: one, or two, never every request of a token
    /// granted together, at most one grant taken back.
    fn pick_victims(&mut self, plan: &[Grant]) -> Vec<usize> {
        let n = if self.rng.gen_bool(0.3) { 2 } else { 1 };
        let mut order: Vec<usize> = (0..plan.len()).collect();
        order.shuffle(&mut self.rng);
        let (mut victims, mut hit, mut taking_back) = (Vec::new(), Vec::new(), false);
        for i in order {
            if victims.len() == n {
                break;
            }
            let g = &plan[i];
            let t = self.model.waiters[g.w].as_ref().unwrap().token.clone();
            if hit.contains(&t) {
                continue;
            }
            if self.fate(plan, g) == Fate::TakenBack {
                if taking_back {
                    continue;
                }
                taking_back = true;
            }
            hit.push(t);
            victims.push(g.w);
        }
        victims
    }

    fn fate(&self, grants: &[Grant], g: &Grant) -> Fate {
        let token = |g: &Grant| &self.model.waiters[g.w].as_ref().unwrap().token;
        let others = grants
            .iter()
            .filter(|o| o.w != g.w && token(o) == token(g))
            .count();
        match g.how {
            How::New if others == 0 => Fate::TakenBack,
            How::New => Fate::Kept,
            How::Renewed | How::Downgraded => Fate::Renewal,
        }
    }

    /// The `CLIENT ID`s of waiters' connections, found by their ports in `CLIENT LIST`.
    fn client_ids(&mut self, ws: &[usize]) -> Vec<u64> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.con)
            .expect("CLIENT LIST");
        ws.iter()
            .map(|&w| {
                let addr = self.socks[w].as_ref().unwrap().s.local_addr().unwrap();
                let field = format!("addr={addr}");
                list.lines()
                    .find(|l| l.split(' ').any(|f| f == field))
                    .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
                    .and_then(|id| id.parse().ok())
                    .unwrap_or_else(|| self.fail(&format!("w{w} ({addr}) not in CLIENT LIST")))
            })
            .collect()
    }

    /// The server takes a grant back a moment after its client left: waits (3 s at most)
    /// until `k` has the model's holders. A grant taken back issued a fence nobody was
    /// told: if no grant since has a higher one, `LOCK.INFO`'s fence is that one, above
    /// every fence the model knows for the key.
    fn settle_withdrawal(&mut self, k: usize, taken_back: bool) {
        let want: Vec<String> = self.model.keys[k]
            .lock
            .as_ref()
            .map(|l| {
                l.holds
                    .iter()
                    .map(|h| String::from_utf8_lossy(&h.token).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let (v, _, _) = self.call(&[b"LOCK.HOLDERS", KEYS[k].as_bytes()]);
            let got = tokens(&parse_holders(KEYS[k], &v));
            if got == want {
                break;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "after killed grants, {} holds {got:?}, the model {want:?}",
                    KEYS[k]
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if !taken_back {
            return;
        }
        let (v, _, _) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
        let (Some(i), Some(l)) = (parse_info(&v), self.model.keys[k].lock.as_ref()) else {
            return;
        };
        if i.fence != l.fence {
            self.note(format!(
                "  LOCK.INFO {} fence {}: the grant taken back",
                KEYS[k], i.fence
            ));
            if let Err(e) = self.model.new_fence(k, i.fence, false) {
                self.fail(&format!(
                    "{}'s fence after a grant taken back: {e}",
                    KEYS[k]
                ));
            }
        }
    }
}
