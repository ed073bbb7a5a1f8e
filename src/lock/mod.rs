//! The lock itself: a pure state machine over one key's holder, lease deadline and fence.
//! It knows nothing of Redis; every operation takes the time as an argument, so that the
//! rules of the README can be tested here without a server and reused as a model of one.
//!
//! A `Lock` value always has a token and a deadline. The lease is *held* while
//! `now.mono < deadline`; once the deadline has passed the value only remembers the last
//! fence until the engine hands it on or removes the key. Clients waiting for the lock are
//! not part of the value: they wait for a (db, key name), and the engine keeps them
//! (`engine/waiters.rs`), so that whatever the keyspace does with the value, its queue
//! stays with the name.
//! Times are monotonic microseconds, leases and `ttl`s milliseconds: a lease never ends
//! before `ttl` has passed, to the microsecond.

use crate::clock::Now;
use crate::fence::{FenceError, FenceIssuer};

#[derive(Debug, PartialEq, Eq)]
pub struct Lock {
    /// The key's name, then the holder's token, inside the lock when they are short. The
    /// lock knows its key so that the lease-end sweep can get from a deadline to the key.
    names: Names,
    /// The key's length, and in [`REPLICA_WRITE`] whether a client of this server (a
    /// writable replica) made the current hold, as opposed to its master.
    key_len: u32,
    db: i32,
    /// Monotonic microseconds at which the lease ends.
    deadline: u64,
    /// The last fence issued for this key.
    fence: u64,
}

/// What `LOCK.ACQUIRE` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The lock was free: the token holds it now under a new fence.
    Granted(u64),
    /// The token already held it: the lease was renewed, the fence is unchanged.
    Renewed(u64),
    /// Another token holds it.
    Busy,
}

/// What `LOCK.INFO` reports of the value (the engine adds the queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info<'a> {
    pub holder: Option<&'a [u8]>,
    pub fence: u64,
    /// Remaining lease in milliseconds; -1 when not held.
    pub ttl: i64,
}

/// Why `LOCK.GUARD` refuses to run its command (see the README's *Guarded writes*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Nobody holds the lock: its lease ended, or it was released.
    NotHeld,
    /// The hold was given a newer fence than the one presented, or a newer hold began.
    Newer,
    /// The fence presented is newer than the hold's: it was never issued to this hold (a
    /// master that failed over before it could replicate the fence, for one).
    Older,
}

/// The flag bit of `key_len` (key names are at most 512 MB, far below 2^31 bytes).
const REPLICA_WRITE: u32 = 1 << 31;

fn micros(ms: u64) -> u64 {
    ms.saturating_mul(1000)
}

/// Up to this many bytes of key and token live in the lock itself: a key of 20 bytes and a
/// UUID token fit, so a typical lock is one allocation of 88 bytes.
const INLINE: usize = 62;

/// A byte string stored inline when short, on the heap otherwise.
#[derive(Debug, PartialEq, Eq)]
enum Names {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl std::ops::Deref for Names {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Names::Inline(len, buf) => &buf[..*len as usize],
            Names::Heap(bytes) => bytes,
        }
    }
}

fn joined(key: &[u8], token: &[u8]) -> Names {
    let len = key.len() + token.len();
    if len > INLINE {
        return Names::Heap([key, token].concat().into_boxed_slice());
    }
    let mut buf = [0; INLINE];
    buf[..key.len()].copy_from_slice(key);
    buf[key.len()..len].copy_from_slice(token);
    Names::Inline(len as u8, buf)
}

impl Lock {
    fn new(key: &[u8], db: i32, token: &[u8], deadline: u64, fence: u64) -> Lock {
        Lock {
            names: joined(key, token),
            key_len: key.len() as u32,
            db,
            deadline,
            fence,
        }
    }

    /// A fresh key acquired by `token`, with its first fence.
    pub fn acquired(
        key: &[u8],
        db: i32,
        token: &[u8],
        ttl: u64,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<(Lock, u64), FenceError> {
        let fence = fences.issue(0, now.wall(), now.mono_ms())?;
        let lock = Lock::new(key, db, token, now.mono + micros(ttl), fence);
        Ok((lock, fence))
    }

    /// A lock as persisted or replicated; `deadline` is already on the monotonic clock.
    pub fn restored(key: &[u8], db: i32, token: &[u8], deadline: u64, fence: u64) -> Lock {
        Lock::new(key, db, token, deadline, fence)
    }

    /// The same holder, lease and fence at another key, for `COPY`.
    pub fn copied_to(&self, key: &[u8], db: i32) -> Lock {
        Lock::new(key, db, self.token(), self.deadline, self.fence)
    }

    /// Replaces holder, deadline and fence with what a master propagated.
    pub fn overwrite(&mut self, token: &[u8], deadline: u64, fence: u64) {
        self.set_replica_write(false);
        self.set_token(token);
        self.deadline = deadline;
        self.fence = fence;
    }

    fn set_token(&mut self, token: &[u8]) {
        if self.token() != token {
            self.names = joined(self.key(), token);
        }
    }

    /// The key was renamed or moved (`RENAME`, `MOVE`, `COPY`, `SWAPDB`).
    pub fn relocate(&mut self, key: &[u8], db: i32) {
        if self.key() != key {
            self.names = joined(key, self.token());
            self.key_len = key.len() as u32 | (self.key_len & REPLICA_WRITE);
        }
        self.db = db;
    }

    fn key_len(&self) -> usize {
        (self.key_len & !REPLICA_WRITE) as usize
    }

    pub fn key(&self) -> &[u8] {
        &self.names[..self.key_len()]
    }

    /// True if the current hold was made by a client of this server while it was a
    /// (writable) replica: such a lease is ended here, as a writable replica expires the keys
    /// it wrote itself. Its master's locks end with the master's `DEL`.
    pub fn is_replica_write(&self) -> bool {
        self.key_len & REPLICA_WRITE != 0
    }

    /// Notes who made the current hold (see [`Lock::is_replica_write`]).
    pub fn set_replica_write(&mut self, yes: bool) {
        if yes {
            self.key_len |= REPLICA_WRITE;
        } else {
            self.key_len &= !REPLICA_WRITE;
        }
    }

    pub fn db(&self) -> i32 {
        self.db
    }

    pub fn token(&self) -> &[u8] {
        &self.names[self.key_len()..]
    }

    pub fn deadline(&self) -> u64 {
        self.deadline
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }

    pub fn is_held(&self, now: Now) -> bool {
        now.mono < self.deadline
    }

    pub fn is_held_by(&self, token: &[u8], now: Now) -> bool {
        self.is_held(now) && self.token() == token
    }

    /// `LOCK.ACQUIRE`, for a caller that may take the lock: the engine ends a due lease
    /// first and turns away a newcomer while clients wait, so that nobody barges in.
    pub fn acquire(
        &mut self,
        token: &[u8],
        ttl: u64,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<Acquire, FenceError> {
        if self.is_held_by(token, now) {
            self.deadline = now.mono + micros(ttl);
            return Ok(Acquire::Renewed(self.fence));
        }
        if self.is_held(now) {
            return Ok(Acquire::Busy);
        }
        Ok(Acquire::Granted(self.grant(token, ttl, now, fences)?))
    }

    /// Hands the free lock to `token` (a waiter at the head of the queue, or a newcomer)
    /// under a new fence. Without a fence (the issuer refused) nothing changes.
    pub fn grant(
        &mut self,
        token: &[u8],
        ttl: u64,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<u64, FenceError> {
        debug_assert!(!self.is_held(now));
        self.fence = fences.issue(self.fence, now.wall(), now.mono_ms())?;
        self.set_token(token);
        self.deadline = now.mono + micros(ttl);
        Ok(self.fence)
    }

    /// `LOCK.RELEASE`: false if `token` does not hold the lock. Released, the lock is free
    /// from `now` on, for the engine to hand on or remove.
    pub fn release(&mut self, token: &[u8], now: Now) -> bool {
        if !self.is_held_by(token, now) {
            return false;
        }
        self.deadline = now.mono;
        true
    }

    /// Takes back a grant under `fence` to `token` that could not be delivered; false if
    /// the lock has moved on since.
    pub fn withdraw(&mut self, token: &[u8], fence: u64, now: Now) -> bool {
        if self.fence != fence || !self.is_held_by(token, now) {
            return false;
        }
        self.deadline = now.mono;
        true
    }

    pub fn extend(&mut self, token: &[u8], ttl: u64, now: Now) -> bool {
        if !self.is_held_by(token, now) {
            return false;
        }
        self.deadline = now.mono + micros(ttl);
        true
    }

    /// A new fence for the holder, or `None` if `token` does not hold the lock.
    pub fn new_fence(
        &mut self,
        token: &[u8],
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<Option<u64>, FenceError> {
        if !self.is_held_by(token, now) {
            return Ok(None);
        }
        self.fence = fences.issue(self.fence, now.wall(), now.mono_ms())?;
        Ok(Some(self.fence))
    }

    /// Whether `fence` is the fence of a hold that has not ended, which `LOCK.GUARD`
    /// requires before it runs anything.
    pub fn guards(&self, fence: u64, now: Now) -> Result<(), Fenced> {
        if !self.is_held(now) {
            return Err(Fenced::NotHeld);
        }
        match fence.cmp(&self.fence) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(Fenced::Newer),
            std::cmp::Ordering::Greater => Err(Fenced::Older),
        }
    }

    pub fn info(&self, now: Now) -> Info<'_> {
        let held = self.is_held(now);
        // Rounded up: a lease still held never reads as 0 ms left.
        let ttl = (self.deadline.saturating_sub(now.mono)).div_ceil(1000) as i64;
        Info {
            holder: held.then(|| self.token()),
            fence: self.fence,
            ttl: if held { ttl } else { -1 },
        }
    }

    /// Heap bytes owned by this value, for `MEMORY USAGE`.
    pub fn heap_size(&self) -> usize {
        let names = match &self.names {
            Names::Inline(..) => 0,
            Names::Heap(bytes) => bytes.len(),
        };
        std::mem::size_of::<Lock>() + names
    }
}

#[cfg(test)]
mod tests;
