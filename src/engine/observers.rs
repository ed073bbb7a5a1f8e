//! Clients blocked in `LOCK.OBSERVE`: which key each watches, the state it last saw, and
//! when its wait times out. Pure bookkeeping, generic over the handle of a blocked client,
//! so that it is tested without a server; the engine blocks and wakes.
//!
//! An observer is *blocked*, then *answered* (woken, its reply not yet gone out: the reply
//! is the key's `LOCK.INFO` when it goes), then gone once the reply went out or the client
//! left. Observers are not waiters: they are kept apart from the queues, so that nothing
//! about them can reach a grant.

use std::collections::{BTreeSet, HashMap};

use crate::blocked::Owned;
use crate::clock::Now;
use crate::hashing::MixBuild;
use crate::lock::Lock;

pub type ObserverId = u64;

/// Observer ids have the top bit set and waiter ids never do, so that the one integer a
/// woken client carries says which it is.
const OBSERVER_BIT: u64 = 1 << 63;

/// Whether `id`, as a woken client carries it, names an observer.
pub fn is_observer(id: u64) -> bool {
    id & OBSERVER_BIT != 0
}

/// What `LOCK.OBSERVE` follows: the newest fence among the live holds of the lock, 0 when
/// nobody holds it (or there is no lock). O(H) for H shared holds; taken only for a key
/// somebody observes.
pub fn state_of(lock: Option<&Lock>, now: Now) -> u64 {
    lock.and_then(|l| l.holds().filter(|h| h.is_live(now)).map(|h| h.fence).max())
        .unwrap_or(0)
}

#[derive(Debug)]
struct Observer<H: Owned> {
    /// The blocked client's handle until it is woken: taken then, so that nothing can wake
    /// it twice.
    handle: Option<H>,
    client: H::Key,
    db: i32,
    key: Box<[u8]>,
    seen: u64,
    timeout_at: Option<u64>,
}

impl<H: Owned> Observer<H> {
    /// Woken; its reply is still to go out.
    fn answered(&self) -> bool {
        self.handle.is_none()
    }
}

/// How an observer left before its reply went out.
#[derive(Debug, PartialEq, Eq)]
pub enum Left<H> {
    /// Still blocked: its handle, to let go.
    Blocked(H),
    /// Woken already: the server owns the handle's end.
    Answered,
}

/// Key → the observers blocked on it, in one database.
type KeyLists = HashMap<Box<[u8]>, Vec<ObserverId>>;

#[derive(Debug)]
pub struct Observers<H: Owned> {
    next_id: ObserverId,
    observers: HashMap<ObserverId, Observer<H>, MixBuild>,
    by_handle: HashMap<H::Key, ObserverId, MixBuild>,
    /// db → key → the blocked observers of the key. Two levels, as for the waiters' queues,
    /// so that a flush drops a database at once.
    by_key: HashMap<i32, KeyLists, MixBuild>,
    timeouts: BTreeSet<(u64, ObserverId)>,
    blocked: usize,
}

impl<H: Owned> Default for Observers<H> {
    fn default() -> Self {
        Observers {
            next_id: OBSERVER_BIT | 1,
            observers: HashMap::default(),
            by_handle: HashMap::default(),
            by_key: HashMap::default(),
            timeouts: BTreeSet::new(),
            blocked: 0,
        }
    }
}

impl<H: Owned> Observers<H> {
    /// Blocks an observer of (db, key) that saw `seen`; its id.
    pub fn observe(
        &mut self,
        handle: H,
        db: i32,
        key: &[u8],
        seen: u64,
        timeout_at: Option<u64>,
    ) -> ObserverId {
        let id = self.next_id;
        self.next_id += 1;
        let keys = self.by_key.entry(db).or_default();
        match keys.get_mut(key) {
            Some(ids) => ids.push(id),
            None => {
                keys.insert(key.into(), vec![id]);
            }
        }
        if let Some(at) = timeout_at {
            self.timeouts.insert((at, id));
        }
        let client = handle.key();
        self.by_handle.insert(client, id);
        let observer = Observer {
            handle: Some(handle),
            client,
            db,
            key: key.into(),
            seen,
            timeout_at,
        };
        self.observers.insert(id, observer);
        self.blocked += 1;
        id
    }

    /// Observers blocked right now.
    pub fn blocked(&self) -> usize {
        self.blocked
    }

    /// True if nobody observes, and no observer's reply is still to go out.
    pub fn is_empty(&self) -> bool {
        self.observers.is_empty()
    }

    /// Whether anybody is blocked observing (db, key).
    pub fn watches(&self, db: i32, key: &[u8]) -> bool {
        self.blocked > 0
            && self
                .by_key
                .get(&db)
                .is_some_and(|keys| keys.contains_key(key))
    }

    /// The state of (db, key) is `state` now: every observer that saw another is answered.
    /// Their handles, to wake.
    pub fn changed(&mut self, db: i32, key: &[u8], state: u64) -> Vec<(H, ObserverId)> {
        let Some(ids) = self.by_key.get_mut(&db).and_then(|keys| keys.get_mut(key)) else {
            return Vec::new();
        };
        let observers = &self.observers;
        let (woken, kept): (Vec<ObserverId>, Vec<ObserverId>) = ids
            .iter()
            .partition(|id| observers.get(id).is_some_and(|o| o.seen != state));
        if woken.is_empty() {
            return Vec::new();
        }
        *ids = kept;
        self.tidy(db, key);
        woken.into_iter().filter_map(|id| self.answer(id)).collect()
    }

    /// Every observer of (db, key) is answered: the lock under the name was deleted,
    /// replaced or moved, or a lock arrived there.
    pub fn answer_key(&mut self, db: i32, key: &[u8]) -> Vec<(H, ObserverId)> {
        let Some(keys) = self.by_key.get_mut(&db) else {
            return Vec::new();
        };
        let ids = keys.remove(key).unwrap_or_default();
        if keys.is_empty() {
            self.by_key.remove(&db);
        }
        ids.into_iter().filter_map(|id| self.answer(id)).collect()
    }

    /// Every observer in database `db` (every database for `None`) is answered.
    pub fn answer_db(&mut self, db: Option<i32>) -> Vec<(H, ObserverId)> {
        let dbs: Vec<i32> = match db {
            Some(db) => vec![db],
            None => self.by_key.keys().copied().collect(),
        };
        let mut woken = Vec::new();
        for db in dbs {
            for (_, ids) in self.by_key.remove(&db).unwrap_or_default() {
                woken.extend(ids.into_iter().filter_map(|id| self.answer(id)));
            }
        }
        woken
    }

    /// Marks a blocked observer answered, already out of its key's list.
    fn answer(&mut self, id: ObserverId) -> Option<(H, ObserverId)> {
        let o = self.observers.get_mut(&id)?;
        let handle = o.handle.take()?;
        self.blocked -= 1;
        if let Some(at) = o.timeout_at {
            self.timeouts.remove(&(at, id));
        }
        Some((handle, id))
    }

    /// The next observer whose wait is due at `now`, answered and out of its key's list.
    pub fn pop_timed_out(&mut self, now: u64) -> Option<(H, ObserverId)> {
        let &(at, id) = self.timeouts.first()?;
        if at > now {
            return None;
        }
        self.timeouts.pop_first();
        let (db, key) = {
            let o = self.observers.get(&id)?;
            (o.db, o.key.clone())
        };
        self.unlist(db, &key, id);
        self.answer(id)
    }

    /// The earliest wait timeout.
    pub fn next_timeout(&self) -> Option<u64> {
        self.timeouts.first().map(|&(at, _)| at)
    }

    /// The observer's reply is going out: the (db, key) it observed, to describe. It is
    /// forgotten.
    pub fn deliver(&mut self, id: ObserverId) -> Option<(i32, Box<[u8]>)> {
        let o = self.forget(id)?;
        o.answered().then_some((o.db, o.key))
    }

    /// The id of the observer blocked as `client`.
    pub fn id_of(&self, client: H::Key) -> Option<ObserverId> {
        self.by_handle.get(&client).copied()
    }

    /// The observer left before its reply went out (disconnected, or `CLIENT UNBLOCK`):
    /// forgotten; how it stood, and the (db, key) it observed.
    pub fn leave(&mut self, id: ObserverId) -> Option<(Left<H>, i32, Box<[u8]>)> {
        let o = self.forget(id)?;
        let left = match o.handle {
            Some(handle) => Left::Blocked(handle),
            None => Left::Answered,
        };
        Some((left, o.db, o.key))
    }

    fn forget(&mut self, id: ObserverId) -> Option<Observer<H>> {
        let o = self.observers.remove(&id)?;
        self.by_handle.remove(&o.client);
        if !o.answered() {
            self.blocked -= 1;
            if let Some(at) = o.timeout_at {
                self.timeouts.remove(&(at, id));
            }
            self.unlist(o.db, &o.key, id);
        }
        // A burst of observers must not keep its tables for good.
        if self.observers.capacity() > 64 && self.observers.len() * 4 < self.observers.capacity() {
            self.observers.shrink_to(self.observers.len() * 2);
            self.by_handle.shrink_to(self.by_handle.len() * 2);
        }
        Some(o)
    }

    /// Takes `id` out of (db, key)'s list.
    fn unlist(&mut self, db: i32, key: &[u8], id: ObserverId) {
        if let Some(ids) = self.by_key.get_mut(&db).and_then(|keys| keys.get_mut(key)) {
            ids.retain(|&x| x != id);
        }
        self.tidy(db, key);
    }

    /// Drops (db, key)'s list once nobody is in it.
    fn tidy(&mut self, db: i32, key: &[u8]) {
        let Some(keys) = self.by_key.get_mut(&db) else {
            return;
        };
        if keys.get(key).is_some_and(Vec::is_empty) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_key.remove(&db);
            }
        }
    }
}

#[cfg(test)]
mod tests;
