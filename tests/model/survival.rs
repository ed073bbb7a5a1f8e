//! What the reachability run checks after every step (`reachability`): each key it uses
//! survives what the server does with a value. Independently of the model, the server is
//! held to itself: `DUMP` and `RESTORE` into database 9 give back the same holds (tokens,
//! fences and kinds in grant order, ttls as dumped) and the same `LOCK.INFO`; the replica,
//! after `WAIT`, holds the same; now and then `DEBUG RELOAD` keeps every hold. A key whose
//! lease or wait is about to run out (pending) is left to the next step. A failure names the
//! ops that made the key as it is, since it last did not exist.

use std::time::Instant;

use crate::common::holds::{parse_holders, Hold};
use crate::common::{parse_info, run_raw, wait_replicas, LockInfo};
use crate::reachability::REACH_KEYS;
use crate::{show, Driver, KEYS};
use rand::Rng;
use redis::{Connection, Value};

/// Tolerance between two ttls read at two instants, beyond the time between the reads
/// (rounding to ms, the deadline sent to a replica rounded up, a loaded machine).
const TTL_SLACK_MS: i64 = 60;
/// The chance that a step ends with `DEBUG RELOAD`.
const RELOAD_P: f64 = 0.015;
/// Lines of a key's history a failure shows at most.
const HISTORY_LINES: usize = 150;

#[derive(Default, Debug)]
pub(crate) struct ReachCounts {
    /// Keys dumped and restored (and of their holds, how many in all).
    pub(crate) restores: u64,
    pub(crate) restored_holds: u64,
    /// Steps whose keys were compared with the replica's.
    pub(crate) replica_checks: u64,
    pub(crate) reloads: u64,
    /// Full syncs of the replica: asked for, and after restarts of the master.
    pub(crate) full_syncs: u64,
    pub(crate) restarts_synced: u64,
}

/// A key as one server shows it: `LOCK.HOLDERS` and `LOCK.INFO` (both `None`: no key), read
/// between `sent` and `recv`.
struct Seen {
    holds: Option<Vec<Hold>>,
    info: Option<LockInfo>,
    sent: Instant,
    recv: Instant,
}

fn see(con: &mut Connection, key: &[u8]) -> Result<Seen, String> {
    let sent = Instant::now();
    let h = run_raw(con, &[b"LOCK.HOLDERS".to_vec(), key.to_vec()])?;
    let i = run_raw(con, &[b"LOCK.INFO".to_vec(), key.to_vec()])?;
    let name = show(key);
    Ok(Seen {
        holds: parse_holders(&name, &h),
        info: parse_info(&i),
        sent,
        recv: Instant::now(),
    })
}

/// `b`, seen after `a`, is the same key: the same holds (token, fence, kind, in order), each
/// ttl counted down by no more than the time between the reads (plus slack), the same
/// `LOCK.INFO` but for `waiters` (a copy, a reload, a replica have none).
fn same_key(a: &Seen, b: &Seen) -> Result<(), String> {
    let (ha, hb) = match (&a.holds, &b.holds) {
        (None, None) => return Ok(()),
        (Some(ha), Some(hb)) => (ha, hb),
        _ => return Err("one side has the key, the other does not".into()),
    };
    let id = |h: &Hold| (h.token.clone(), h.fence, h.mode.clone());
    if ha.iter().map(id).ne(hb.iter().map(id)) {
        return Err("the holds differ (token, fence, kind)".into());
    }
    let apart = b.recv.saturating_duration_since(a.sent).as_millis() as i64;
    for (x, y) in ha.iter().zip(hb) {
        if y.ttl > x.ttl + TTL_SLACK_MS || y.ttl < x.ttl - apart - TTL_SLACK_MS {
            return Err(format!(
                "{}'s ttl {} then {}, {apart} ms apart",
                x.token, x.ttl, y.ttl
            ));
        }
    }
    match (&a.info, &b.info) {
        (Some(x), Some(y)) => {
            if (&x.holder, x.fence, &x.mode, x.holders) != (&y.holder, y.fence, &y.mode, y.holders)
            {
                return Err("LOCK.INFO differs (holder, fence, mode or holders)".into());
            }
            Ok(())
        }
        _ => Err("LOCK.INFO null on one side only".into()),
    }
}

impl Driver {
    /// After every step of the reachability run.
    pub(crate) fn survival_checks(&mut self) {
        self.check_settled();
        for k in 0..REACH_KEYS {
            if self.model.keys[k].pending.is_none() {
                self.check_restore(k);
            }
        }
        self.check_replica();
        if self.rng.gen_bool(RELOAD_P) {
            self.check_reload();
        }
        let reach = self.reach.as_mut().unwrap();
        for (k, mk) in self.model.keys.iter().enumerate() {
            if mk.lock.is_none() {
                reach.born[k] = self.log.len();
            }
        }
    }

    fn see_here(&mut self, k: usize) -> Seen {
        match see(&mut self.con, KEYS[k].as_bytes()) {
            Ok(s) => s,
            Err(e) => self.fail(&format!("reading {}: {e}", KEYS[k])),
        }
    }

    /// `DUMP k`, `RESTORE` into database 9: the copy is the key.
    fn check_restore(&mut self, k: usize) {
        let key = KEYS[k].as_bytes();
        let here = self.see_here(k);
        let (dump, _, _) = self.call(&[b"DUMP", key]);
        let payload = match dump {
            Value::Nil if here.holds.is_none() => return,
            Value::BulkString(p) if here.holds.is_some() => p,
            other => self.fail(&format!(
                "DUMP {}: {other:?}, LOCK.HOLDERS {:?}",
                KEYS[k], here.holds
            )),
        };
        let reach = self.reach.as_mut().unwrap();
        let scratch = b"reach:copy".to_vec();
        let restore = vec![
            b"RESTORE".to_vec(),
            scratch.clone(),
            b"0".to_vec(),
            payload,
            b"REPLACE".to_vec(),
        ];
        let r = run_raw(&mut reach.scratch, &restore);
        let copy = see(&mut reach.scratch, &scratch);
        let del = run_raw(&mut reach.scratch, &[b"DEL".to_vec(), scratch.clone()]);
        reach.counts.restores += 1;
        reach.counts.restored_holds += here.holds.as_ref().map_or(0, |h| h.len() as u64);
        if r != Ok(Value::Okay) {
            self.reach_fail(
                &[k],
                &format!(
                "RESTORE of the DUMP of {} (in db 9) replied {r:?}: the key as it is cannot be \
                 loaded. LOCK.HOLDERS {}: {:?}",
                KEYS[k], KEYS[k], here.holds
            ),
            );
        }
        let copy = copy.and_then(|c| same_key(&here, &c).map(|_| c));
        if let Err(e) = copy {
            self.reach_fail(
                &[k],
                &format!(
                    "the DUMP/RESTORE copy of {} differs: {e}. Here: {:?} {:?}",
                    KEYS[k], here.holds, here.info
                ),
            );
        }
        if del != Ok(Value::Int(1)) {
            self.fail(&format!("DEL of the restored copy in db 9: {del:?}"));
        }
    }

    /// After `WAIT`, the replica holds what the master holds (keys not pending), and as
    /// many keys when nothing is pending.
    pub(crate) fn check_replica(&mut self) {
        let acked = wait_replicas(&mut self.con, 1, 5000);
        if acked != Ok(Value::Int(1)) {
            let reach = self.reach.as_mut().unwrap();
            let alive = reach.replica.is_alive();
            let log = reach.replica.log_tail(15);
            let msg =
                format!("the replica did not acknowledge within 5 s ({acked:?}; alive: {alive})");
            self.reach_fail(
                &(0..REACH_KEYS).collect::<Vec<_>>(),
                &format!("{msg}:\n{log}"),
            );
        }
        self.reach.as_mut().unwrap().counts.replica_checks += 1;
        for (k, key) in KEYS.iter().enumerate().take(REACH_KEYS) {
            if self.model.keys[k].pending.is_some() {
                continue;
            }
            let here = self.see_here(k);
            let reach = self.reach.as_mut().unwrap();
            let there = see(&mut reach.rcon, key.as_bytes());
            if let Err(e) = there.and_then(|t| {
                same_key(&here, &t).map_err(|e| format!("{e}; replica {:?} {:?}", t.holds, t.info))
            }) {
                self.reach_fail(
                    &[k],
                    &format!(
                        "the replica's {} differs from the master's: {e}. Master: {:?} {:?}",
                        KEYS[k], here.holds, here.info
                    ),
                );
            }
        }
        if self.model.keys.iter().all(|mk| mk.pending.is_none()) {
            let (mine, _, _) = self.call(&[b"DBSIZE"]);
            let reach = self.reach.as_mut().unwrap();
            let theirs = run_raw(&mut reach.rcon, &[b"DBSIZE".to_vec()]);
            if theirs != Ok(mine.clone()) {
                self.fail(&format!("DBSIZE: master {mine:?}, replica {theirs:?}"));
            }
        }
    }

    /// `DEBUG RELOAD`: every key as it was (ttls counted down), its waiters answered null;
    /// then the keys are checked against the model too.
    fn check_reload(&mut self) {
        self.tick();
        let keys: Vec<usize> = (0..KEYS.len()).collect();
        let before: Vec<Seen> = keys.iter().map(|&k| self.see_here(k)).collect();
        let r = self.try_call(&[b"DEBUG", b"RELOAD"]);
        self.note(format!("DEBUG RELOAD -> {r:?}"));
        if r != Ok(Value::Okay) {
            let (n, _, _) = self.call(&[b"DBSIZE"]);
            self.reach_fail(
                &keys,
                &format!(
                    "DEBUG RELOAD replied {r:?} (DBSIZE now {n:?}): the server cannot load its \
                 own data"
                ),
            );
        }
        self.counts.reloads += 1;
        self.reach.as_mut().unwrap().counts.reloads += 1;
        for &k in &keys {
            self.answer_waiters_null(k, "DEBUG RELOAD");
            let after = self.see_here(k);
            if let Err(e) = same_key(&before[k], &after) {
                self.reach_fail(
                    &[k],
                    &format!(
                        "DEBUG RELOAD changed {}: {e}. Before {:?}, after {:?}",
                        KEYS[k], before[k].holds, after.holds
                    ),
                );
            }
            self.check_key(k);
        }
        self.check_totals();
    }

    /// For the report of any failure of the reachability run: what each key holds on the
    /// server now, and whether it survives `DUMP`/`RESTORE` (on a connection of its own).
    pub(crate) fn survival_at_failure(&self) -> String {
        let look = || {
            let mut con = self.server.conn();
            let mut out = String::from("--- the keys on the server now ---\n");
            for key in &KEYS[..REACH_KEYS] {
                let key = key.as_bytes().to_vec();
                let holders = run_raw(&mut con, &[b"LOCK.HOLDERS".to_vec(), key.clone()]);
                let restored = match run_raw(&mut con, &[b"DUMP".to_vec(), key.clone()]) {
                    Ok(Value::BulkString(p)) => {
                        let copy = b"reach:copy".to_vec();
                        let _ = run_raw(&mut con, &[b"SELECT".to_vec(), b"9".to_vec()]);
                        let r = run_raw(
                            &mut con,
                            &[
                                b"RESTORE".to_vec(),
                                copy.clone(),
                                b"0".to_vec(),
                                p,
                                b"REPLACE".to_vec(),
                            ],
                        );
                        let _ = run_raw(&mut con, &[b"DEL".to_vec(), copy]);
                        let _ = run_raw(&mut con, &[b"SELECT".to_vec(), b"0".to_vec()]);
                        format!("{r:?}")
                    }
                    other => format!("(DUMP {other:?})"),
                };
                out.push_str(&format!(
                    "  {}: LOCK.HOLDERS {holders:?}; RESTORE of its DUMP -> {restored}\n",
                    show(&key)
                ));
            }
            out
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(look))
            .unwrap_or_else(|_| "--- the server could not be read ---\n".into())
    }

    /// A failure of a survival check on `keys`: the message, and each key's history: the
    /// ops since it last did not exist that name it (or no key).
    pub(crate) fn reach_fail(&self, keys: &[usize], msg: &str) -> ! {
        let mut s = format!(
            "{msg}\nA state that commands made and the server does not carry over (MODEL_SEED={} \
             replays the run).",
            self.seed
        );
        let born = &self.reach.as_ref().unwrap().born;
        for &k in keys {
            let lines: Vec<(usize, &String)> = self
                .log
                .iter()
                .enumerate()
                .skip(born[k])
                .filter(|(_, l)| l.contains(KEYS[k]) || !KEYS.iter().any(|key| l.contains(key)))
                .collect();
            s.push_str(&format!(
                "\n--- the ops that made {} (since op #{}) ---\n",
                KEYS[k], born[k]
            ));
            let skip = lines.len().saturating_sub(HISTORY_LINES);
            if skip > 0 {
                s.push_str(&format!("  ({skip} earlier lines left out)\n"));
            }
            for (i, l) in lines.into_iter().skip(skip) {
                s.push_str(&format!("  #{i} {l}\n"));
            }
        }
        self.fail(&s)
    }
}
