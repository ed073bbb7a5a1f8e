//! What the harness records: every operation a client made, with when it was sent and when
//! its answer came; what Sentinel said the master was, over time; and each key's guarded
//! list as read from the surviving master at the end.
//!
//! Times are nanoseconds of one monotonic clock (the harness process's), so that the
//! operations of every client thread compare. A server's own clock never enters a history:
//! what a client may claim is decided by what it sent and what it was told, and when.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Nanoseconds on the harness's monotonic clock.
pub type Nanos = u64;

/// A server, named by its port (every server listens on 127.0.0.1).
pub type Node = u16;

/// What an operation asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `LOCK.ACQUIRE` (through the client library's `lock()`).
    Acquire,
    /// `LOCK.GUARD key fence RPUSH <log> fence`: appends the hold's fence to the key's log.
    GuardedWrite,
    /// `LOCK.EXTEND`.
    Extend,
    /// `LOCK.RELEASE`.
    Release,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Acquire => "acquire",
            OpKind::GuardedWrite => "write",
            OpKind::Extend => "extend",
            OpKind::Release => "release",
        })
    }
}

/// What the client learnt of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged: the server did it, and said so. The value is the reply (a grant's
    /// fence, the list's length after a write, 1 for an extend or a release).
    Ok(i64),
    /// The server answered that it did not do it (not granted, `FENCED`, `READONLY`, an
    /// extend or release of a token that no longer held the lock), or the command was never
    /// sent (connection refused). Known not to have taken effect.
    Failed(String),
    /// Timed out, or the connection broke, after the command may have reached the server: it
    /// may or may not have taken effect. Never counted as acknowledged, never as failed.
    Unknown(String),
}

impl Outcome {
    /// Acknowledged.
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }

    /// Acknowledged, or possibly done: everything but a known failure.
    pub fn may_have_happened(&self) -> bool {
        !matches!(self, Outcome::Failed(_))
    }
}

/// One operation of one client on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The client (a harness thread) that made it; a client's operations never overlap.
    pub client: u32,
    /// The lock key.
    pub key: String,
    /// The hold the operation belongs to: one id per acquire attempt, unique in the history.
    pub hold: u64,
    pub kind: OpKind,
    /// When the command was handed to the client library.
    pub invoke: Nanos,
    /// When the library returned.
    pub complete: Nanos,
    pub outcome: Outcome,
    /// An acknowledged acquire's fence; for the hold's other operations, the fence they ran
    /// under. `None` for an acquire that was not acknowledged.
    pub fence: Option<u64>,
    /// The lease asked for by an acquire or an extend, in milliseconds; 0 for the others.
    pub ttl_ms: u64,
    /// The server the command was sent to (the master as the client last resolved it).
    pub node: Node,
}

/// One answer of one Sentinel to `SENTINEL get-master-addr-by-name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    pub at: Nanos,
    /// The Sentinel asked (its port).
    pub sentinel: Node,
    /// The master it named.
    pub master: Node,
}

/// A whole run.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub ops: Vec<Op>,
    /// Every answer of a Sentinel the harness got (its poller's and its clients'), in any order.
    pub observations: Vec<Observation>,
    /// Each key's guarded log (`LRANGE`) as read from the master at the end, in list order;
    /// `None` where it could not be read.
    pub final_logs: BTreeMap<String, Option<Vec<u64>>>,
}

/// Which server was the master of record, over time: the master Sentinel named.
///
/// Sentinels learn of a failover one after another, so a Sentinel that has not yet heard
/// still names the old master. A change is taken from the first Sentinel that moves *away
/// from the current master of record*; a Sentinel still naming the old one after that (or
/// one first heard from late) changes nothing. A master of record is therefore changed by a
/// failover, the moment the first Sentinel reports it, and by nothing else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterRecord {
    /// (from when, master), in time order; the first entry is the first answer heard.
    changes: Vec<(Nanos, Node)>,
}

impl MasterRecord {
    pub fn from_observations(observations: &[Observation]) -> Self {
        let mut sorted = observations.to_vec();
        sorted.sort_by_key(|o| o.at);
        let mut last: HashMap<Node, Node> = HashMap::new();
        let mut changes: Vec<(Nanos, Node)> = Vec::new();
        for o in sorted {
            let before = last.insert(o.sentinel, o.master);
            match changes.last() {
                None => changes.push((o.at, o.master)),
                Some(&(_, current)) if o.master != current && before == Some(current) => {
                    changes.push((o.at, o.master));
                }
                _ => {}
            }
        }
        MasterRecord { changes }
    }

    /// The changes of master, after the first one heard of.
    pub fn failovers(&self) -> usize {
        self.changes.len().saturating_sub(1)
    }

    pub fn changes(&self) -> &[(Nanos, Node)] {
        &self.changes
    }

    fn index_at(&self, t: Nanos) -> Option<usize> {
        self.changes
            .partition_point(|&(at, _)| at <= t)
            .checked_sub(1)
    }

    /// The master of record at `t` (`None` before the first answer).
    pub fn at(&self, t: Nanos) -> Option<Node> {
        self.index_at(t).map(|i| self.changes[i].1)
    }

    /// Whether `node` had been master of record and had been replaced by `t`: a grant it
    /// makes after `t` comes from a master Sentinel has deposed. (A node that is master of
    /// record again at `t` is not deposed.)
    pub fn deposed(&self, node: Node, t: Nanos) -> bool {
        match self.index_at(t) {
            Some(i) => self.changes[i].1 != node && self.changes[..i].iter().any(|c| c.1 == node),
            None => false,
        }
    }

    /// Whether `node` was master of record throughout `[from, to]`, with no failover in
    /// between: what it did in that window it did as the master everyone was told of.
    pub fn master_throughout(&self, node: Node, from: Nanos, to: Nanos) -> bool {
        match (self.index_at(from), self.index_at(to)) {
            (Some(i), Some(j)) => i == j && self.changes[i].1 == node,
            _ => false,
        }
    }
}
