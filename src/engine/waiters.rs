//! Clients waiting in `LOCK.ACQUIRE … WAIT`: who they are, what they wait for, and in what
//! order. Pure bookkeeping, generic over the handle of a blocked client, so that it is
//! tested without a server; the engine does the blocking and unblocking.
//!
//! A waiter waits for a *(db, key name)*, not for a lock value: whatever the keyspace does
//! with the value (`RENAME`, `MOVE`, `SWAPDB`, a flush), the queue stays with the name, and
//! the engine answers it when the value under the name goes. Each waiter has an id that is
//! never reused, so nothing said about a waiter that left can reach another client.
//!
//! A waiter is *queued*, then *granted* (the lock is its own, the reply not yet delivered)
//! or *answered* (null or an error, the reply not yet delivered), then gone once the reply
//! went out or the client left.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::blocked::Owned;
use crate::hashing::MixBuild;
use crate::lock::Want;

pub type WaiterId = u64;

/// What a waiter is told when its reply goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// It holds the lock, under this fence.
    Granted(u64),
    /// Null: its wait timed out, or the lock it waited for was deleted, replaced or moved.
    Null,
    /// The server became a replica: the error the server gives its own blocked clients.
    Demoted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    /// Told once the reply goes out; `Reply::Granted` while its grant stands.
    Answered(Reply),
}

#[derive(Debug)]
pub struct Waiter<H: Owned> {
    /// The blocked client's handle while it is queued; taken out when it is woken, so that
    /// nothing can wake it twice.
    handle: Option<H>,
    /// What names the client, also once its handle is gone.
    pub client: H::Key,
    pub db: i32,
    pub key: Box<[u8]>,
    pub token: Box<[u8]>,
    pub ttl: u64,
    /// Exclusive, or shared (with its own limit).
    pub want: Want,
    /// Monotonic microseconds at which the wait times out; `None` waits without limit.
    pub timeout_at: Option<u64>,
    state: State,
    /// Nobody has been told of the hold it was granted: no client of a direct request, no
    /// waiter whose reply went out. If it leaves before its own reply goes out, and no other
    /// granted waiter of its token is still to be told, the hold is taken back.
    owns_grant: bool,
}

/// The clients waiting for one (db, key): queued in order, and granted but not yet told.
#[derive(Debug, Default)]
struct Queue {
    queued: VecDeque<WaiterId>,
    granted: Vec<WaiterId>,
}

/// How a waiter left without its reply having gone out.
#[derive(Debug, PartialEq, Eq)]
pub enum Left<H> {
    /// It was still queued: its handle, to let go.
    Queued(H),
    /// It had been granted the lock under this fence: the grant is to be taken back.
    Granted {
        db: i32,
        key: Box<[u8]>,
        token: Box<[u8]>,
        fence: u64,
    },
    /// It had been answered already.
    Answered,
}

#[derive(Debug)]
pub struct Registry<H: Owned> {
    next_id: WaiterId,
    // Ids and handles are the module's and the server's, so a cheap hash serves; key names
    // are the clients', so they keep SipHash (see `hashing`).
    waiters: HashMap<WaiterId, Waiter<H>, MixBuild>,
    by_handle: HashMap<H::Key, WaiterId, MixBuild>,
    /// db → key → queue. Two levels, so that a flush drops a database at once and a key is
    /// looked up by its bytes.
    queues: HashMap<i32, HashMap<Box<[u8]>, Queue>, MixBuild>,
    timeouts: BTreeSet<(u64, WaiterId)>,
    queued: usize,
    /// Queues whose head left while others still wait: the new head may be admitted where
    /// the old one was not (a shared request behind an exclusive one that timed out).
    heads_left: Vec<(i32, Box<[u8]>)>,
}

impl<H: Owned> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            next_id: 1,
            waiters: HashMap::default(),
            by_handle: HashMap::default(),
            queues: HashMap::default(),
            timeouts: BTreeSet::new(),
            queued: 0,
            heads_left: Vec::new(),
        }
    }
}

impl<H: Owned> Registry<H> {
    /// Queues a client at the tail of (db, key)'s queue; its id.
    pub fn enqueue(
        &mut self,
        handle: H,
        db: i32,
        key: &[u8],
        (token, ttl, want): (&[u8], u64, Want),
        timeout_at: Option<u64>,
    ) -> WaiterId {
        let id = self.next_id;
        self.next_id += 1;
        let queue = self.queues.entry(db).or_default();
        match queue.get_mut(key) {
            Some(q) => q.queued.push_back(id),
            None => {
                let mut q = Queue::default();
                q.queued.push_back(id);
                queue.insert(key.into(), q);
            }
        }
        if let Some(at) = timeout_at {
            self.timeouts.insert((at, id));
        }
        let client = handle.key();
        self.by_handle.insert(client, id);
        self.waiters.insert(
            id,
            Waiter {
                handle: Some(handle),
                client,
                db,
                key: key.into(),
                token: token.into(),
                ttl,
                want,
                timeout_at,
                state: State::Queued,
                owns_grant: false,
            },
        );
        self.queued += 1;
        id
    }

    /// Clients queued (not yet granted or answered), over all keys.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Clients queued for (db, key).
    pub fn queued_at(&self, db: i32, key: &[u8]) -> usize {
        if self.queued == 0 {
            return 0;
        }
        self.queue(db, key).map_or(0, |q| q.queued.len())
    }

    fn queue(&self, db: i32, key: &[u8]) -> Option<&Queue> {
        self.queues.get(&db)?.get(key)
    }

    fn queue_mut(&mut self, db: i32, key: &[u8]) -> Option<&mut Queue> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    /// Drops (db, key)'s queue once nobody is in it.
    fn tidy(&mut self, db: i32, key: &[u8]) {
        let Some(keys) = self.queues.get_mut(&db) else {
            return;
        };
        if keys
            .get(key)
            .is_some_and(|q| q.queued.is_empty() && q.granted.is_empty())
        {
            keys.remove(key);
            if keys.is_empty() {
                self.queues.remove(&db);
            }
        }
    }

    /// The head of (db, key)'s queue, if anybody is queued there.
    pub fn head(&self, db: i32, key: &[u8]) -> Option<&Waiter<H>> {
        let id = *self.queue(db, key)?.queued.front()?;
        self.waiters.get(&id)
    }

    /// The head of (db, key)'s queue was granted the lock under `fence`: its handle and id,
    /// for the engine to wake it. `untold`: nobody has been told of the hold (a new hold;
    /// or a renewal of one whose grant a departed waiter left undelivered); a renewal of a
    /// hold granted to another waiter still to be told is untold as long as that one's is.
    pub fn grant_head(
        &mut self,
        db: i32,
        key: &[u8],
        fence: u64,
        untold: bool,
    ) -> Option<(H, WaiterId)> {
        let q = self.queue(db, key)?;
        let id = *q.queued.front()?;
        let token = &self.waiters.get(&id)?.token;
        let untold = untold || self.pending_owner(q, token, id);
        let q = self.queue_mut(db, key)?;
        q.queued.pop_front();
        q.granted.push(id);
        self.queued -= 1;
        let w = self.waiters.get_mut(&id)?;
        w.state = State::Answered(Reply::Granted(fence));
        w.owns_grant = untold;
        if let Some(at) = w.timeout_at {
            self.timeouts.remove(&(at, id));
        }
        Some((w.handle.take()?, id))
    }

    /// Whether a granted waiter of `token` in `q` other than `except` is still to be told
    /// of a hold nobody has been told of.
    fn pending_owner(&self, q: &Queue, token: &[u8], except: WaiterId) -> bool {
        q.granted.iter().any(|id| {
            *id != except
                && self
                    .waiters
                    .get(id)
                    .is_some_and(|w| w.owns_grant && &*w.token == token)
        })
    }

    /// A client was told `token` holds the lock at (db, key): by a direct request (a
    /// renewal, an extend) or a waiter's reply. A grant to `token` there whose reply has
    /// not gone out is no longer taken back if its waiter leaves.
    pub fn adopt(&mut self, db: i32, key: &[u8], token: &[u8]) {
        let Some(q) = self.queue(db, key) else {
            return;
        };
        let granted = q.granted.clone();
        for id in granted {
            if let Some(w) = self.waiters.get_mut(&id) {
                if &*w.token == token {
                    w.owns_grant = false;
                }
            }
        }
    }

    /// Answers every waiter of (db, key) with null: the lock it waited for was deleted,
    /// replaced or moved away. The handles of those that were still queued, to wake.
    pub fn answer_key(&mut self, db: i32, key: &[u8]) -> Vec<(H, WaiterId)> {
        let Some(q) = self.queues.get_mut(&db).and_then(|keys| keys.remove(key)) else {
            return Vec::new();
        };
        if self.queues.get(&db).is_some_and(HashMap::is_empty) {
            self.queues.remove(&db);
        }
        self.answer_queue(q, Reply::Null)
    }

    /// Answers every waiter in database `db` (every database for `None`) with `reply`.
    pub fn answer_db(&mut self, db: Option<i32>, reply: Reply) -> Vec<(H, WaiterId)> {
        let dbs: Vec<i32> = match db {
            Some(db) => vec![db],
            None => self.queues.keys().copied().collect(),
        };
        let mut woken = Vec::new();
        for db in dbs {
            for (_, q) in self.queues.remove(&db).unwrap_or_default() {
                woken.extend(self.answer_queue(q, reply));
            }
        }
        woken
    }

    fn answer_queue(&mut self, q: Queue, reply: Reply) -> Vec<(H, WaiterId)> {
        for id in q.granted {
            if let Some(w) = self.waiters.get_mut(&id) {
                w.state = State::Answered(Reply::Null);
            }
        }
        q.queued
            .into_iter()
            .filter_map(|id| self.answer(id, reply))
            .collect()
    }

    /// A queued waiter is answered; its handle, to wake.
    fn answer(&mut self, id: WaiterId, reply: Reply) -> Option<(H, WaiterId)> {
        let w = self.waiters.get_mut(&id)?;
        if w.state != State::Queued {
            return None;
        }
        w.state = State::Answered(reply);
        self.queued -= 1;
        if let Some(at) = w.timeout_at {
            self.timeouts.remove(&(at, id));
        }
        Some((w.handle.take()?, id))
    }

    /// The next waiter whose wait is due at `now`, answered null and out of its queue.
    pub fn pop_timed_out(&mut self, now: u64) -> Option<(H, WaiterId)> {
        let &(at, id) = self.timeouts.first()?;
        if at > now {
            return None;
        }
        self.timeouts.pop_first();
        let (db, key) = {
            let w = self.waiters.get(&id)?;
            (w.db, w.key.clone())
        };
        self.dequeue(db, &key, id);
        self.tidy(db, &key);
        self.answer(id, Reply::Null)
    }

    /// Takes `id` out of (db, key)'s queue, noting the queue if it was its head.
    fn dequeue(&mut self, db: i32, key: &[u8], id: WaiterId) {
        let Some(q) = self.queue_mut(db, key) else {
            return;
        };
        let was_head = q.queued.front() == Some(&id);
        q.queued.retain(|&w| w != id);
        if was_head && !q.queued.is_empty() {
            self.heads_left.push((db, key.into()));
        }
    }

    /// The queues whose head left since the last call (see the field).
    pub fn take_heads_left(&mut self) -> Vec<(i32, Box<[u8]>)> {
        std::mem::take(&mut self.heads_left)
    }

    /// The earliest wait timeout.
    pub fn next_timeout(&self) -> Option<u64> {
        self.timeouts.first().map(|&(at, _)| at)
    }

    /// The waiter's reply is going out: what to tell it. It is forgotten.
    pub fn deliver(&mut self, id: WaiterId) -> Option<Reply> {
        let w = self.forget(id)?;
        match w.state {
            State::Answered(reply) => {
                if matches!(reply, Reply::Granted(_)) {
                    self.adopt(w.db, &w.key, &w.token);
                }
                Some(reply)
            }
            State::Queued => None,
        }
    }

    /// The id of the waiter blocked as `client`.
    pub fn id_of(&self, client: H::Key) -> Option<WaiterId> {
        self.by_handle.get(&client).copied()
    }

    /// The waiter left before its reply went out (disconnected, or `CLIENT UNBLOCK`): out
    /// of its queue and forgotten; how it stood.
    pub fn leave(&mut self, id: WaiterId) -> Option<Left<H>> {
        let mut w = self.forget(id)?;
        // Another granted waiter of the token still to be told takes the hold over.
        let taken_over = w.owns_grant
            && self
                .queue(w.db, &w.key)
                .is_some_and(|q| self.pending_owner(q, &w.token, id));
        Some(match w.state {
            State::Queued => {
                self.queued -= 1;
                Left::Queued(w.handle.take()?)
            }
            State::Answered(Reply::Granted(fence)) if w.owns_grant && !taken_over => {
                Left::Granted {
                    db: w.db,
                    key: w.key,
                    token: w.token,
                    fence,
                }
            }
            State::Answered(_) => Left::Answered,
        })
    }

    fn forget(&mut self, id: WaiterId) -> Option<Waiter<H>> {
        let w = self.waiters.remove(&id)?;
        self.by_handle.remove(&w.client);
        // A burst of waiters must not keep its tables for good.
        if self.waiters.capacity() > 64 && self.waiters.len() * 4 < self.waiters.capacity() {
            self.waiters.shrink_to(self.waiters.len() * 2);
            self.by_handle.shrink_to(self.by_handle.len() * 2);
            self.queues.shrink_to(self.queues.len() * 2);
        }
        if let Some(at) = w.timeout_at {
            self.timeouts.remove(&(at, id));
        }
        self.dequeue(w.db, &w.key, id);
        if let Some(q) = self.queue_mut(w.db, &w.key) {
            q.granted.retain(|&x| x != id);
        }
        self.tidy(w.db, &w.key);
        Some(w)
    }

    /// True if nobody waits, is granted or is answered: nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.queues.is_empty() && self.by_handle.is_empty()
    }
}

#[cfg(test)]
mod tests;
