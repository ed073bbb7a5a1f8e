//! The clients: threads looping acquire → guarded `RPUSH` of the fence → extend → release
//! through the Rust client library on the master Sentinel names, recording every operation
//! and its outcome for the history.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::RedisError;
use redis_lock_client::{Error, GuardError, Mutex};

use crate::history::{Node, Op, OpKind, Outcome};
use crate::servers::connect;
use crate::shared::Shared;

/// A client's pause after an error, before it asks Sentinel for the master again.
const BACKOFF: Duration = Duration::from_millis(100);

/// Starts `--clients` client threads, each seeded from `--seed` and its id; each returns
/// its operations once `shared.stop` is set.
pub fn start_clients(shared: &Arc<Shared>) -> Vec<JoinHandle<Vec<Op>>> {
    let args = &shared.args;
    (0..args.clients)
        .map(|id| {
            let client = Client {
                id,
                shared: Arc::clone(shared),
                rng: StdRng::seed_from_u64(args.seed ^ (u64::from(id) << 32)),
                master: None,
                backoff: false,
                locks: HashMap::new(),
                ops: Vec::new(),
            };
            thread::spawn(move || client.run())
        })
        .collect()
}

fn redis_outcome(e: &RedisError) -> Outcome {
    if e.code().is_some() {
        // The server answered (READONLY, LOADING, MASTERDOWN...): not done.
        Outcome::Failed(e.to_string())
    } else {
        // Even a refused connection: the library retries an acquire or a release once on a
        // new connection after a broken one, so the refusal may follow an attempt that
        // reached the server.
        Outcome::Unknown(e.to_string())
    }
}

fn lock_outcome(e: &Error) -> Outcome {
    match e {
        Error::Timeout => Outcome::Failed("not granted within the wait".into()),
        // A grant too few replicas confirmed is released by the library: not acquired. (An
        // extend's shortfall is judged where the extend is sent.)
        Error::NotDurable { .. } | Error::Fenced(_) | Error::Config(_) => {
            Outcome::Failed(e.to_string())
        }
        // The library gives up a hold it can no longer vouch for, also after an extend it
        // may have sent: whether the server extended is unknown.
        Error::Lost(_) => Outcome::Unknown(e.to_string()),
        Error::Redis(e) => redis_outcome(e),
        other => Outcome::Unknown(other.to_string()),
    }
}

/// Whether the client should ask Sentinel for the master again after this outcome.
fn resolve_after(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Ok(_) => false,
        Outcome::Unknown(_) => true,
        Outcome::Failed(why) => !["not granted", "not held", "FENCED"]
            .iter()
            .any(|p| why.starts_with(p)),
    }
}

struct Client {
    id: u32,
    shared: Arc<Shared>,
    rng: StdRng,
    master: Option<Node>,
    /// Set by an error: wait a little before asking Sentinel again, as clients do, rather
    /// than spin on a dead master's refusals until Sentinel replaces it.
    backoff: bool,
    locks: HashMap<(Node, u32), Mutex>,
    ops: Vec<Op>,
}

pub fn lock_key(k: u32) -> String {
    format!("{{k{k}}}:lock")
}

pub fn log_key(k: u32) -> String {
    format!("{{k{k}}}:log")
}

impl Client {
    fn record(&mut self, mut op: Op) -> Outcome {
        op.complete = self.shared.now();
        let outcome = op.outcome.clone();
        if resolve_after(&outcome) {
            self.master = None;
            self.backoff = true;
        }
        self.ops.push(op);
        outcome
    }

    fn lock(&mut self, node: Node, k: u32) -> Mutex {
        let a = &self.shared.args;
        let mode = a.mode;
        let (ttl, wait, timeout) = (a.ttl_ms, a.wait_ms, a.command_timeout_ms);
        self.locks
            .entry((node, k))
            .or_insert_with(|| {
                let client = redis::Client::open(format!("redis://127.0.0.1:{node}/"))
                    .expect("a loopback URL parses");
                // No keep-alive: every extend is the harness's own, in the history.
                mode.lock(
                    Mutex::new(client, lock_key(k))
                        .ttl(Duration::from_millis(ttl))
                        .wait(Duration::from_millis(wait))
                        .command_timeout(Duration::from_millis(timeout))
                        .no_keepalive(),
                )
            })
            .clone()
    }

    fn run(mut self) -> Vec<Op> {
        let every = Duration::from_millis(self.shared.args.resolve_ms);
        // Staggered, so that the clients do not all move at the same instant.
        let mut resolved = Instant::now() - every.mul_f64(self.rng.gen_range(0.0..1.0));
        while !self.shared.stop.load(Ordering::SeqCst) {
            if !every.is_zero() && resolved.elapsed() >= every {
                self.master = None;
            }
            let node = match self.master {
                Some(node) => node,
                None => {
                    if std::mem::take(&mut self.backoff) {
                        thread::sleep(BACKOFF);
                    }
                    self.master = self.shared.resolve(self.id as usize);
                    resolved = Instant::now();
                    if self.master.is_none() {
                        thread::sleep(Duration::from_millis(100));
                    }
                    continue;
                }
            };
            let k = self.rng.gen_range(0..self.shared.args.keys);
            self.one_hold(node, k);
            thread::sleep(Duration::from_micros(self.rng.gen_range(0..5000)));
        }
        self.ops
    }

    fn work(&mut self) {
        let us = self.shared.args.work_ms * 1000;
        if us > 0 {
            thread::sleep(Duration::from_micros(self.rng.gen_range(0..us)));
        }
    }

    fn op(&self, k: u32, hold: u64, kind: OpKind, fence: Option<u64>, node: Node) -> Op {
        let ttl_ms = match kind {
            OpKind::Acquire | OpKind::Extend => self.shared.args.ttl_ms,
            _ => 0,
        };
        Op {
            client: self.id,
            key: lock_key(k),
            hold,
            kind,
            invoke: self.shared.now(),
            complete: 0,
            outcome: Outcome::Unknown("in flight".into()),
            fence,
            ttl_ms,
            node,
        }
    }

    /// acquire → guarded RPUSH of the fence → extend → release; a step that is not
    /// acknowledged skips to the release, as a holder that lost its lock stops working.
    fn one_hold(&mut self, node: Node, k: u32) {
        let mutex = self.lock(node, k);
        let hold = self.shared.next_hold.fetch_add(1, Ordering::SeqCst);
        let mut op = self.op(k, hold, OpKind::Acquire, None, node);
        let guard = match mutex.lock() {
            Ok(guard) => {
                op.outcome = Outcome::Ok(guard.fence() as i64);
                op.fence = Some(guard.fence());
                self.record(op);
                guard
            }
            Err(e) => {
                op.outcome = lock_outcome(&e);
                self.record(op);
                return;
            }
        };
        let fence = Some(guard.fence());
        let mut op = self.op(k, hold, OpKind::GuardedWrite, fence, node);
        let mut rpush = redis::cmd("RPUSH");
        rpush.arg(log_key(k)).arg(guard.fence());
        // In a durable mode the library follows the write with `WAIT n` on its connection:
        // a write too few replicas confirmed ran on the master, and may survive or not.
        op.outcome = match guard.guard::<i64>(&rpush) {
            Ok(len) => Outcome::Ok(len),
            Err(GuardError::Fenced(f)) => Outcome::Failed(f.to_string()),
            Err(e @ GuardError::NotDurable { .. }) => Outcome::Unknown(e.to_string()),
            Err(GuardError::Redis(e)) => redis_outcome(&e),
        };
        if self.record(op).is_ok() {
            self.work();
            let mut op = self.op(k, hold, OpKind::Extend, fence, node);
            op.outcome = match guard.extend() {
                Ok(()) => Outcome::Ok(1),
                // It ran on the master; a promoted replica may have the lease before it.
                Err(e @ Error::NotDurable { .. }) => Outcome::Unknown(e.to_string()),
                Err(e) => lock_outcome(&e),
            };
            if self.record(op).is_ok() {
                self.work();
            }
        }
        let token = guard.token().to_string();
        let mut op = self.op(k, hold, OpKind::Release, fence, node);
        op.outcome = match guard.release() {
            Ok(true) => Outcome::Ok(1),
            Ok(false) => Outcome::Failed("not held".into()),
            Err(e) => lock_outcome(&e),
        };
        let released = self.record(op);
        // The master is gone or demoted: release on the one Sentinel names now, which may
        // have the hold from replication, rather than leave the key blocked for a lease.
        if matches!(released, Outcome::Unknown(_) | Outcome::Failed(_)) && self.master.is_none() {
            if let Some(now) = self.shared.resolve(self.id as usize) {
                self.master = Some(now);
                if now != node {
                    self.raw_release(k, hold, fence, now, &token);
                }
            }
        }
    }

    fn raw_release(&mut self, k: u32, hold: u64, fence: Option<u64>, node: Node, token: &str) {
        let timeout = Duration::from_millis(self.shared.args.command_timeout_ms);
        let mut op = self.op(k, hold, OpKind::Release, fence, node);
        op.outcome = match connect(node, timeout) {
            Err(e) => Outcome::Failed(format!("never sent: {e}")),
            Ok(mut c) => match redis::cmd("LOCK.RELEASE")
                .arg(lock_key(k))
                .arg(token)
                .query::<i64>(&mut c)
            {
                Ok(1) => Outcome::Ok(1),
                Ok(_) => Outcome::Failed("not held".into()),
                Err(e) => redis_outcome(&e),
            },
        };
        self.record(op);
    }
}
