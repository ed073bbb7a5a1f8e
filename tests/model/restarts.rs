//! Restarts (`appendonly yes`) and `DEBUG RELOAD`: locks survive both; a restart drops
//! every waiter's connection (also used by `crash`), a reload answers them null.

use std::time::{Duration, Instant};

use crate::raw_connections::Reply;
use crate::{Driver, KEYS};
use redis::Value;

impl Driver {
    /// Every waiter's connection was closed without a reply (a restart or a crash).
    pub(crate) fn expect_waiters_closed(&mut self, why: &str) -> u64 {
        let mut n = 0;
        for w in 0..self.model.waiters.len() {
            if self.model.waiters[w].is_some() {
                let r = self.socks[w]
                    .as_mut()
                    .unwrap()
                    .reply(Duration::from_secs(10));
                ensure!(
                    self,
                    r == Some(Reply::Closed),
                    "waiter w{w} across {why}: {r:?}, expected the connection closed"
                );
                self.socks[w] = None;
                n += 1;
            }
        }
        self.model.drop_waiters();
        n
    }

    pub(crate) fn op_restart(&mut self) {
        self.tick();
        self.counts.restarts += 1;
        self.note("RESTART (SHUTDOWN NOSAVE, appendonly yes)".into());
        let t = Instant::now();
        self.server.restart();
        self.con = self.server.conn();
        self.counts.restart_ms += t.elapsed().as_millis() as u64;
        // Waiters are connections: the restart dropped them without a reply.
        self.expect_waiters_closed("a restart");
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    pub(crate) fn op_reload(&mut self) {
        self.tick();
        self.counts.reloads += 1;
        let (v, _, _) = self.call(&[b"DEBUG", b"RELOAD"]);
        self.note(format!("DEBUG RELOAD -> {v:?}"));
        ensure!(self, v == Value::Okay, "DEBUG RELOAD replied {v:?}");
        // Every lock is freed and loaded anew with its holds, leases and fences. Its waiters
        // stay connected but are answered null, as waiters of a deleted key are.
        for k in 0..KEYS.len() {
            self.answer_waiters_null(k, "DEBUG RELOAD");
        }
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
    }
}
