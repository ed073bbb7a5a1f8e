//! The reference model of `tests/model/`: the lock's contract (docs/commands.md; shared holds as in
//! issue #13) as plain state, written independently of `src/lock`. A key holds a lock of one
//! or more holds (one exclusive, or shared ones, each with its own token, fence and lease), the
//! last fence issued for it, and one FIFO queue of waiters of both kinds. The driver in
//! `tests/model/` sends each operation to the server and to this model and compares.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// Bounds of a lease deadline as the test can know it: set by a command sent at `lo - ttl`
/// and answered at `hi - ttl`.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub lo: Instant,
    pub hi: Instant,
}

impl Span {
    pub fn after(from: Instant, to: Instant, ms: u64) -> Span {
        let d = Duration::from_millis(ms);
        Span {
            lo: from + d,
            hi: to + d,
        }
    }
}

/// The kind of a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    Shared,
}

impl Mode {
    /// As `LOCK.INFO` and `LOCK.HOLDERS` name it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// What a `LOCK.ACQUIRE` asks for: the lock exclusively, or a shared hold (with `LIMIT n`:
/// only while fewer than `n` tokens hold the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Exclusive,
    Shared(Option<u32>),
}

impl Want {
    pub fn mode(self) -> Mode {
        match self {
            Want::Exclusive => Mode::Exclusive,
            Want::Shared(_) => Mode::Shared,
        }
    }

    /// Its options (`SHARED`, `LIMIT n`) as separate groups, to be put in any order.
    pub fn options(self) -> Vec<Vec<Vec<u8>>> {
        match self {
            Want::Exclusive => Vec::new(),
            Want::Shared(None) => vec![vec![b"SHARED".to_vec()]],
            Want::Shared(Some(n)) => vec![
                vec![b"SHARED".to_vec()],
                vec![b"LIMIT".to_vec(), n.to_string().into_bytes()],
            ],
        }
    }
}

impl fmt::Display for Want {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Want::Exclusive => write!(f, "EXCLUSIVE"),
            Want::Shared(None) => write!(f, "SHARED"),
            Want::Shared(Some(n)) => write!(f, "SHARED LIMIT {n}"),
        }
    }
}

/// One holder's hold: its own token, kind, fence and lease.
#[derive(Debug, Clone)]
pub struct MHold {
    pub token: Vec<u8>,
    pub mode: Mode,
    pub fence: i64,
    pub deadline: Span,
}

#[derive(Debug, Clone)]
pub struct MLock {
    /// The live holds in grant order: one exclusive, or one or more shared. Never empty in a
    /// settled model: a lock left without holds either grants its queue's head at once or is
    /// removed.
    pub holds: Vec<MHold>,
    /// The last fence issued for this lock (`LOCK.INFO`'s `fence`), also one of a hold that
    /// has ended since; it travels with the value (`RENAME`, `COPY`, `RESTORE`).
    pub fence: i64,
    /// Waiter ids, first come first served, both kinds in one queue.
    pub queue: VecDeque<usize>,
}

impl MLock {
    pub fn new(hold: MHold) -> MLock {
        MLock {
            fence: hold.fence,
            holds: vec![hold],
            queue: VecDeque::new(),
        }
    }

    pub fn hold(&self, token: &[u8]) -> Option<&MHold> {
        self.holds.iter().find(|h| h.token == token)
    }

    pub fn hold_mut(&mut self, token: &[u8]) -> &mut MHold {
        self.holds
            .iter_mut()
            .find(|h| h.token == token)
            .expect("the model's hold")
    }

    pub fn exclusive(&self) -> bool {
        self.holds.iter().any(|h| h.mode == Mode::Exclusive)
    }

    /// Whether the holds leave room for a new hold of this kind (the queue aside).
    pub fn admits(&self, want: Want) -> bool {
        match want {
            Want::Exclusive => self.holds.is_empty(),
            Want::Shared(limit) => {
                !self.exclusive() && limit.is_none_or(|n| self.holds.len() < n as usize)
            }
        }
    }

    pub fn mode(&self) -> &'static str {
        if self.holds.is_empty() {
            "none"
        } else if self.exclusive() {
            "exclusive"
        } else {
            "shared"
        }
    }
}

#[derive(Debug, Clone)]
pub enum Pending {
    /// A short lease of the hold of `token`: that hold (only) ends at its deadline.
    LeaseEnd { token: Vec<u8>, span: Span },
    /// A waiter with a short `WAIT` timeout: it leaves the queue with a null reply, no
    /// earlier than `at` (its request was sent `timeout` before).
    WaitTimeout { waiter: usize, at: Instant },
}

#[derive(Debug, Default, Clone)]
pub struct MKey {
    /// `None`: the key does not exist. A hold in the model is always live (its lease has not
    /// ended); a lease end is applied as an event.
    pub lock: Option<MLock>,
    /// The last fence ever issued for this key, also after the key went away.
    pub last_fence: Option<i64>,
    pub pending: Option<Pending>,
}

#[derive(Debug)]
pub struct MWaiter {
    pub key: usize,
    pub token: Vec<u8>,
    pub want: Want,
    pub ttl: u64,
}

/// What the contract says a `LOCK.ACQUIRE` gets.
#[derive(Debug, PartialEq, Clone, Copy)]
pub enum AcqExpect {
    /// The key does not exist: a new fence above every fence the server issued.
    Fresh,
    /// A shared hold next to the shared holds there (none exclusive, nobody queued, within
    /// the request's `LIMIT`): a new fence above the key's.
    Join,
    /// The token holds the key in the kind it asks for: the lease renewed, the same fence.
    Renew(i64),
    /// The token holds the key exclusively and asks `SHARED`: a downgrade in place, the same
    /// fence, the lease renewed; compatible waiters at the head granted at once.
    Downgrade(i64),
    /// The token holds the key shared and asks for it exclusively: refused with
    /// `UPGRADE_ERR`, its hold unchanged.
    Upgrade,
    /// Anything else: null (without `WAIT`) or queued (with `WAIT`).
    Busy,
}

/// The refusal of an upgrade.
pub const UPGRADE_ERR: &str =
    "ERR the token holds the lock shared: release it to take it exclusively (no upgrades)";

#[derive(Default)]
pub struct Model {
    pub keys: Vec<MKey>,
    pub waiters: Vec<Option<MWaiter>>,
    /// The highest fence the server issued.
    pub max_fence: i64,
    /// The highest fence acknowledged before the last crash (0 before the first): every fence
    /// issued after it is above it, whatever the snapshot the server restarted from knew.
    pub crash_floor: i64,
    /// New fences checked against `crash_floor` (those issued after a crash).
    pub above_crash_floor: u64,
}

/// What `LOCK.INFO` must show of a lock.
#[derive(Debug)]
pub struct MInfo {
    pub holder: Option<Vec<u8>>,
    pub fence: i64,
    /// The lease that ends last, of all holds.
    pub ttl: Span,
    pub waiters: usize,
    pub mode: &'static str,
    pub holders: usize,
}

impl Model {
    pub fn new(keys: usize) -> Model {
        Model {
            keys: (0..keys).map(|_| MKey::default()).collect(),
            ..Model::default()
        }
    }

    pub fn acquire(&self, k: usize, token: &[u8], want: Want) -> AcqExpect {
        let Some(l) = &self.keys[k].lock else {
            return AcqExpect::Fresh;
        };
        match (l.hold(token).map(|h| (h.mode, h.fence)), want) {
            (Some((Mode::Exclusive, f)), Want::Exclusive) => AcqExpect::Renew(f),
            (Some((Mode::Shared, f)), Want::Shared(_)) => AcqExpect::Renew(f),
            (Some((Mode::Exclusive, f)), Want::Shared(_)) => AcqExpect::Downgrade(f),
            (Some((Mode::Shared, _)), Want::Exclusive) => AcqExpect::Upgrade,
            (None, _) if l.queue.is_empty() && l.admits(want) => AcqExpect::Join,
            (None, _) => AcqExpect::Busy,
        }
    }

    pub fn holds(&self, k: usize, token: &[u8]) -> bool {
        self.keys[k]
            .lock
            .as_ref()
            .is_some_and(|l| l.hold(token).is_some())
    }

    pub fn queued(&self, k: usize, token: &[u8]) -> bool {
        self.keys[k].lock.as_ref().is_some_and(|l| {
            l.queue
                .iter()
                .any(|&w| self.waiters[w].as_ref().unwrap().token == token)
        })
    }

    pub fn waiter_count(&self) -> usize {
        self.waiters.iter().flatten().count()
    }

    pub fn key_count(&self) -> usize {
        self.keys.iter().filter(|k| k.lock.is_some()).count()
    }

    /// A new fence `f` for key `k`: checks it against the model and records it.
    /// `fresh`: the key did not exist, so `f` must be above every fence the server issued.
    pub fn new_fence(&mut self, k: usize, f: i64, fresh: bool) -> Result<(), String> {
        if f <= 0 {
            return Err(format!("fence {f} is not positive"));
        }
        if let Some(last) = self.keys[k].last_fence {
            if f <= last {
                return Err(format!(
                    "new fence {f} not above the key's last fence {last}"
                ));
            }
        }
        if fresh && f <= self.max_fence {
            return Err(format!(
                "fresh key's fence {f} not above the server's highest fence {}",
                self.max_fence
            ));
        }
        if self.crash_floor > 0 {
            if f <= self.crash_floor {
                return Err(format!(
                    "fence {f} not above {}, the highest fence acknowledged before the crash \
                     (the server restarted from a snapshot taken before it)",
                    self.crash_floor
                ));
            }
            self.above_crash_floor += 1;
        }
        self.keys[k].last_fence = Some(f);
        if let Some(l) = self.keys[k].lock.as_mut() {
            l.fence = f;
        }
        self.max_fence = self.max_fence.max(f);
        Ok(())
    }

    /// Serves the queue of `k` after its holds changed or a waiter left: the head is granted
    /// if the holds admit it, then the next head, and so on. Returns the waiters granted, in
    /// order; their holds are in the model with fence 0 and a provisional lease until the
    /// caller reads their replies (`Driver::read_grants`). A lock left without holds and
    /// waiters is removed.
    pub fn serve(&mut self, k: usize, at: Instant) -> Vec<usize> {
        let waiters = &self.waiters;
        let Some(l) = self.keys[k].lock.as_mut() else {
            return Vec::new();
        };
        let mut granted = Vec::new();
        while let Some(&w) = l.queue.front() {
            let mw = waiters[w].as_ref().unwrap();
            if !l.admits(mw.want) {
                break;
            }
            l.queue.pop_front();
            l.holds.push(MHold {
                token: mw.token.clone(),
                mode: mw.want.mode(),
                fence: 0,
                deadline: Span { lo: at, hi: at },
            });
            granted.push(w);
        }
        if l.holds.is_empty() {
            debug_assert!(l.queue.is_empty());
            self.keys[k].lock = None;
        }
        granted
    }

    /// The hold of `token` on `k` ends (release, lease end); the queue is served.
    pub fn end_hold(&mut self, k: usize, token: &[u8], at: Instant) -> Vec<usize> {
        let l = self.keys[k].lock.as_mut().unwrap();
        let before = l.holds.len();
        l.holds.retain(|h| h.token != token);
        debug_assert_eq!(l.holds.len() + 1, before);
        self.serve(k, at)
    }

    /// Waiter `w` leaves its queue (timeout, hang-up); the queue is served.
    pub fn withdraw(&mut self, w: usize, at: Instant) -> (MWaiter, Vec<usize>) {
        let mw = self.waiters[w].take().unwrap();
        let granted = match self.keys[mw.key].lock.as_mut() {
            Some(l) => {
                l.queue.retain(|&x| x != w);
                self.serve(mw.key, at)
            }
            None => Vec::new(),
        };
        (mw, granted)
    }

    /// Every waiter is gone without a reply (the server went down): the queues are empty.
    pub fn drop_waiters(&mut self) {
        for mk in &mut self.keys {
            if let Some(l) = mk.lock.as_mut() {
                l.queue.clear();
            }
        }
        for w in &mut self.waiters {
            *w = None;
        }
    }

    /// What `LOCK.INFO` must show.
    pub fn info(&self, k: usize) -> Option<MInfo> {
        let l = self.keys[k].lock.as_ref()?;
        let holder = l
            .holds
            .iter()
            .find(|h| h.mode == Mode::Exclusive)
            .map(|h| h.token.clone());
        let lo = l.holds.iter().map(|h| h.deadline.lo).max().unwrap();
        let hi = l.holds.iter().map(|h| h.deadline.hi).max().unwrap();
        Some(MInfo {
            holder,
            fence: l.fence,
            ttl: Span { lo, hi },
            waiters: l.queue.len(),
            mode: l.mode(),
            holders: l.holds.len(),
        })
    }
}
