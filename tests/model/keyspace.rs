//! The keyspace operations the server can do around a lock key: `DEL`/`UNLINK`,
//! `RENAME`/`RENAMENX`, `SWAPDB 0 1` twice, `FLUSHDB [ASYNC]`/`FLUSHALL ASYNC`, `COPY …
//! REPLACE`, `DUMP` + `RESTORE … REPLACE`, `SET` then `DEL`, and `PEXPIREAT k 1`: the lock
//! moves or is copied with its holds and fence history, and the waiters of a lock that
//! goes away or is replaced are answered null at once.

use std::collections::VecDeque;

use crate::common::model::MLock;
use crate::{show, Driver, KEYS};
use rand::Rng;
use redis::Value;

impl Driver {
    pub(crate) fn op_del(&mut self, k: usize) {
        self.counts.del += 1;
        let cmd: &[u8] = if self.rng.gen_bool(0.5) {
            b"DEL"
        } else {
            b"UNLINK"
        };
        let existed = self.model.keys[k].lock.is_some();
        let (v, _, _) = self.call(&[cmd, KEYS[k].as_bytes()]);
        self.note(format!(
            "{} {} -> {v:?} (model {})",
            show(cmd),
            KEYS[k],
            existed as i64
        ));
        ensure!(
            self,
            v == Value::Int(existed as i64),
            "{} replied {v:?}, model {}",
            show(cmd),
            existed as i64
        );
        if existed {
            // The key is gone; its waiters are answered null on the server's next turn (a
            // deletion may be the source side of a MIGRATE). The next fence for the key is
            // still above the deleted lock's.
            self.answer_waiters_null(k, show(cmd).as_str());
            self.model.keys[k].lock = None;
        }
    }

    /// The lock of `k` (with its waiters already answered) moves to `k2`, replacing what was
    /// there (whose waiters are answered null too). Fence history follows the value.
    fn move_lock(&mut self, k: usize, k2: usize, why: &str) -> usize {
        let n = self.answer_waiters_null(k, why) + self.answer_waiters_null(k2, why);
        let lock = self.model.keys[k].lock.take().unwrap();
        self.model.keys[k2].last_fence = Some(lock.fence);
        self.model.keys[k2].lock = Some(lock);
        n
    }

    /// `k2` gets a copy of `k`'s lock (holder, fence, lease; no waiters); `k2`'s previous
    /// waiters are answered null; `k` and its queue are unchanged.
    fn copy_lock(&mut self, k: usize, k2: usize, why: &str) -> usize {
        let n = self.answer_waiters_null(k2, why);
        let l = self.model.keys[k].lock.as_ref().unwrap();
        let copy = MLock {
            holds: l.holds.clone(),
            fence: l.fence,
            queue: VecDeque::new(),
        };
        if !l.queue.is_empty() {
            self.counts.copy_source_kept_waiters += 1;
        }
        self.model.keys[k2].last_fence = Some(copy.fence);
        self.model.keys[k2].lock = Some(copy);
        n
    }

    /// `RENAME k k2` / `RENAMENX k k2`.
    pub(crate) fn op_rename(&mut self, k: usize, k2: usize, nx: bool) {
        let cmd: &[u8] = if nx { b"RENAMENX" } else { b"RENAME" };
        let name = show(cmd);
        let src = self.model.keys[k].lock.is_some();
        let dst = self.model.keys[k2].lock.is_some();
        let r = self.try_call(&[cmd, KEYS[k].as_bytes(), KEYS[k2].as_bytes()]);
        let want: Result<Value, String> = if !src {
            Err("ERR no such key".into())
        } else if nx && dst {
            Ok(Value::Int(0))
        } else if nx {
            Ok(Value::Int(1))
        } else {
            Ok(Value::Okay)
        };
        self.note(format!(
            "{name} {} {} -> {r:?} (model {want:?}; source {src}, destination {dst})",
            KEYS[k], KEYS[k2]
        ));
        ensure!(
            self,
            r == want,
            "{name} {} {}: server {r:?}, model {want:?}",
            KEYS[k],
            KEYS[k2]
        );
        if !src {
            self.counts.rename_no_such_key += 1;
        } else if nx && dst {
            self.counts.renamenx_refused += 1;
        } else {
            let n = self.move_lock(k, k2, &name);
            if nx {
                self.counts.renamenx.add(n);
            } else {
                self.counts.rename.add(n);
            }
        }
        self.check_key(k);
        self.check_key(k2);
        self.check_settled();
    }

    /// `SWAPDB 0 1` and at once `SWAPDB 0 1` again (db 1 is empty): every lock comes back
    /// unchanged; every waiter (all are in db 0) is answered null at the first swap. Either
    /// pipelined, or with the waiters' replies read between the two swaps.
    pub(crate) fn op_swapdb(&mut self) {
        self.tick();
        // The variants take turns, so that a short run sees both.
        let pipelined = self.counts.swapdb.runs % 2 == 1;
        let mut n = 0;
        if pipelined {
            self.counts.swapdb_pipelined += 1;
            let r: redis::RedisResult<Vec<Value>> = redis::pipe()
                .cmd("SWAPDB")
                .arg(0)
                .arg(1)
                .cmd("SWAPDB")
                .arg(0)
                .arg(1)
                .query(&mut self.con);
            self.note(format!("SWAPDB 0 1; SWAPDB 0 1 (pipelined) -> {r:?}"));
            ensure!(
                self,
                matches!(&r, Ok(v) if v[..] == [Value::Okay, Value::Okay]),
                "SWAPDB 0 1 twice (pipelined) replied {r:?}"
            );
            for k in 0..KEYS.len() {
                n += self.answer_waiters_null(k, "SWAPDB");
            }
        } else {
            let (v, _, _) = self.call(&[b"SWAPDB", b"0", b"1"]);
            self.note(format!("SWAPDB 0 1 -> {v:?}"));
            ensure!(self, v == Value::Okay, "SWAPDB 0 1 replied {v:?}");
            for k in 0..KEYS.len() {
                n += self.answer_waiters_null(k, "SWAPDB");
            }
            let (v, _, _) = self.call(&[b"DBSIZE"]);
            ensure!(
                self,
                v == Value::Int(0),
                "DBSIZE {v:?} in db 0 between the swaps, expected 0"
            );
            let (v, _, _) = self.call(&[b"SWAPDB", b"0", b"1"]);
            self.note(format!("SWAPDB 0 1 (back) -> {v:?}"));
            ensure!(self, v == Value::Okay, "SWAPDB 0 1 (back) replied {v:?}");
        }
        self.counts.swapdb.add(n);
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    /// `FLUSHDB`, `FLUSHDB ASYNC` or `FLUSHALL ASYNC`: every lock gone, every waiter
    /// answered null at once.
    pub(crate) fn op_flush(&mut self) {
        self.tick();
        // The variants take turns, so that a short run sees all three.
        let which = (self.counts.flushdb.runs
            + self.counts.flushdb_async.runs
            + self.counts.flushall_async.runs)
            % 3;
        let args: &[&[u8]] = match which {
            0 => &[b"FLUSHDB"],
            1 => &[b"FLUSHDB", b"ASYNC"],
            _ => &[b"FLUSHALL", b"ASYNC"],
        };
        let name = args.iter().map(|a| show(a)).collect::<Vec<_>>().join(" ");
        let (v, _, _) = self.call(args);
        self.note(format!("{name} -> {v:?}"));
        ensure!(self, v == Value::Okay, "{name} replied {v:?}");
        let mut n = 0;
        for k in 0..KEYS.len() {
            n += self.answer_waiters_null(k, &name);
            self.model.keys[k].lock = None;
        }
        match which {
            0 => self.counts.flushdb.add(n),
            1 => self.counts.flushdb_async.add(n),
            _ => self.counts.flushall_async.add(n),
        }
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    /// `COPY k k2 REPLACE`, or `DUMP k` + `RESTORE k2 0 <payload> REPLACE`.
    pub(crate) fn op_copy(&mut self, k: usize, k2: usize, restore: bool) {
        let src = self.model.keys[k].lock.is_some();
        if restore {
            let (v, _, _) = self.call(&[b"DUMP", KEYS[k].as_bytes()]);
            let payload = match v {
                Value::BulkString(p) if src => p,
                Value::Nil if !src => {
                    self.note(format!("DUMP {} -> nil (model: missing)", KEYS[k]));
                    self.counts.copy_no_source += 1;
                    return;
                }
                other => self.fail(&format!(
                    "DUMP {}: server {other:?}, model exists={src}",
                    KEYS[k]
                )),
            };
            let r = self.try_call(&[b"RESTORE", KEYS[k2].as_bytes(), b"0", &payload, b"REPLACE"]);
            self.note(format!(
                "DUMP {} + RESTORE {} 0 <{} bytes> REPLACE -> {r:?}",
                KEYS[k],
                KEYS[k2],
                payload.len()
            ));
            ensure!(
                self,
                r == Ok(Value::Okay),
                "RESTORE {} 0 <dump of {}> REPLACE replied {r:?}",
                KEYS[k2],
                KEYS[k]
            );
            let n = self.copy_lock(k, k2, "RESTORE");
            self.counts.dump_restore.add(n);
        } else {
            let (v, _, _) =
                self.call(&[b"COPY", KEYS[k].as_bytes(), KEYS[k2].as_bytes(), b"REPLACE"]);
            self.note(format!(
                "COPY {} {} REPLACE -> {v:?} (model {})",
                KEYS[k], KEYS[k2], src as i64
            ));
            ensure!(
                self,
                v == Value::Int(src as i64),
                "COPY {} {} REPLACE replied {v:?}, model {}",
                KEYS[k],
                KEYS[k2],
                src as i64
            );
            if !src {
                self.counts.copy_no_source += 1;
            } else {
                let n = self.copy_lock(k, k2, "COPY");
                self.counts.copy.add(n);
            }
        }
        self.check_key(k);
        self.check_key(k2);
        self.check_settled();
    }

    /// An overwrite: `SET k v` (waiters answered null at once, read before the next
    /// command), then `DEL k`.
    pub(crate) fn op_set_del(&mut self, k: usize) {
        let (v, _, _) = self.call(&[b"SET", KEYS[k].as_bytes(), b"not a lock"]);
        self.note(format!("SET {} -> {v:?}", KEYS[k]));
        ensure!(self, v == Value::Okay, "SET {} replied {v:?}", KEYS[k]);
        let n = self.answer_waiters_null(k, "SET");
        self.model.keys[k].lock = None;
        let (v, _, _) = self.call(&[b"DEL", KEYS[k].as_bytes()]);
        self.note(format!("DEL {} -> {v:?}", KEYS[k]));
        ensure!(
            self,
            v == Value::Int(1),
            "DEL {} after SET replied {v:?}",
            KEYS[k]
        );
        self.counts.set_del.add(n);
        self.check_key(k);
        self.check_settled();
    }

    /// `PEXPIREAT k 1`: a time in the past deletes the key at once.
    pub(crate) fn op_pexpireat(&mut self, k: usize) {
        let existed = self.model.keys[k].lock.is_some();
        let (v, _, _) = self.call(&[b"PEXPIREAT", KEYS[k].as_bytes(), b"1"]);
        self.note(format!(
            "PEXPIREAT {} 1 -> {v:?} (model {})",
            KEYS[k], existed as i64
        ));
        ensure!(
            self,
            v == Value::Int(existed as i64),
            "PEXPIREAT {} 1 replied {v:?}, model {}",
            KEYS[k],
            existed as i64
        );
        if existed {
            let n = self.answer_waiters_null(k, "PEXPIREAT");
            self.model.keys[k].lock = None;
            self.counts.pexpireat.add(n);
        } else {
            self.counts.pexpireat_missing += 1;
        }
        self.check_key(k);
        self.check_settled();
    }
}
