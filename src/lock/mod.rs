//! The lock itself: a pure state machine over one key's holds, their leases and fences. It
//! knows nothing of Redis; every operation takes the time as an argument, so that the rules
//! of docs/commands.md can be tested here without a server and reused as a model of one.
//!
//! A lock is held exclusively by one token, or shared by any number (see docs/commands.md,
//! *Shared holds*). Each hold has its own token, lease deadline and fence. A `Lock` value
//! always records at least one hold: the first, in grant order, lives inside the value (its
//! token beside the key's name), the rest in a vector behind it, so an exclusive lock or a
//! lone shared hold costs one allocation. A hold is *live* while `now.mono < deadline`; a
//! lock whose holds have all ended keeps the last as a record of the key's last fence until
//! the engine hands the lock on or removes the key. Clients waiting for the lock are not
//! part of the value: they wait for a (db, key name), and the engine keeps them
//! (`engine/waiters.rs`), so that whatever the keyspace does with the value, its queue
//! stays with the name.
//! Times are monotonic microseconds, leases and `ttl`s milliseconds: a lease never ends
//! before `ttl` has passed, to the microsecond.

mod holds;
mod names;

use crate::clock::Now;
use crate::fence::{FenceError, FenceIssuer};
use holds::More;
use names::Names;

/// How a key is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    Shared,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// What a request asks for: an exclusive hold, or a shared one joining only while fewer
/// than `limit` tokens hold the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub mode: Mode,
    pub limit: Option<u32>,
}

impl Want {
    pub const EXCLUSIVE: Want = Want {
        mode: Mode::Exclusive,
        limit: None,
    };
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// The key's name, then the first hold's token. The lock knows its key so that the
    /// lease-end sweep can get from a deadline to the key.
    names: Names,
    /// The key's length, with [`REPLICA_WRITE`] and [`SHARED`] in its top bits.
    key_len: u32,
    db: i32,
    /// Monotonic microseconds at which the first hold's lease ends.
    deadline: u64,
    /// The first hold's fence.
    fence: u64,
    /// The holds after the first, and the key's last fence when no recorded hold has it.
    more: Option<Box<More>>,
}

/// One hold, as the lock reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRef<'a> {
    pub token: &'a [u8],
    /// Monotonic microseconds.
    pub deadline: u64,
    pub fence: u64,
}

impl HoldRef<'_> {
    pub fn is_live(&self, now: Now) -> bool {
        now.mono < self.deadline
    }

    /// Whole milliseconds left, rounded up: a lease still held never reads as 0 ms left.
    pub fn ttl_ms(&self, now: Now) -> i64 {
        self.deadline.saturating_sub(now.mono).div_ceil(1000) as i64
    }
}

/// What `LOCK.ACQUIRE` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The token holds the lock now, under a new fence.
    Granted(u64),
    /// The token already held it so: the lease was renewed, the fence is unchanged.
    Renewed(u64),
    /// The token held it exclusively and now holds it shared, same fence, lease renewed.
    Downgraded(u64),
    /// The request must wait (or be refused): incompatible holds, or clients queued first.
    Busy,
}

/// Why `LOCK.ACQUIRE` failed and changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireError {
    /// A shared holder asked for an exclusive hold: two upgraders would wait for each other
    /// forever, so upgrades are refused.
    Upgrade,
    Fence(FenceError),
}

impl From<FenceError> for AcquireError {
    fn from(e: FenceError) -> Self {
        AcquireError::Fence(e)
    }
}

/// What `LOCK.INFO` reports of the value (the engine adds the queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info<'a> {
    /// The exclusive holder; `None` for a shared or free lock.
    pub holder: Option<&'a [u8]>,
    /// The last fence issued for the key.
    pub fence: u64,
    /// The exclusive holder's lease left, or the longest of the shared holders', in
    /// milliseconds; -1 when not held.
    pub ttl: i64,
    /// `None` when not held.
    pub mode: Option<Mode>,
    /// Live holds.
    pub holders: usize,
}

/// Why `LOCK.GUARD` refuses to run its command (see docs/commands.md, `LOCK.GUARD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Nobody holds the lock: its lease ended, or it was released.
    NotHeld,
    /// The hold was given a newer fence than the one presented, or a newer hold began.
    Newer,
    /// The fence presented is newer than the hold's: it was never issued to this hold (a
    /// master that failed over before it could replicate the fence, for one).
    Older,
    /// The lock is shared: a guarded write needs the only hold.
    Shared,
}

/// Flag bits of `key_len` (key names are at most 512 MB, far below 2^30 bytes).
const REPLICA_WRITE: u32 = 1 << 31;
const SHARED: u32 = 1 << 30;
const FLAGS: u32 = REPLICA_WRITE | SHARED;

fn micros(ms: u64) -> u64 {
    ms.saturating_mul(1000)
}

impl Lock {
    /// A lock on the heap, its names written in place: copying the large lock (names inline)
    /// right after writing its bytes stalled the CPU on every copy, about 1% of a cycle.
    fn new(key: &[u8], db: i32, token: &[u8], deadline: u64, fence: u64, mode: Mode) -> Box<Lock> {
        let shared = if mode == Mode::Shared { SHARED } else { 0 };
        let mut lock = Box::new(Lock {
            names: Names::EMPTY,
            key_len: key.len() as u32 | shared,
            db,
            deadline,
            fence,
            more: None,
        });
        lock.names.fill(key, token);
        lock
    }

    /// A fresh key acquired by `token`, with its first fence.
    pub fn acquired(
        key: &[u8],
        db: i32,
        token: &[u8],
        ttl: u64,
        mode: Mode,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<(Box<Lock>, u64), FenceError> {
        let fence = fences.issue(0, now.wall(), now.mono_ms())?;
        let lock = Lock::new(key, db, token, now.mono + micros(ttl), fence, mode);
        Ok((lock, fence))
    }

    /// A lock as persisted or replicated: its holds in grant order (at least one; deadlines
    /// already on the monotonic clock) and the key's last fence.
    pub fn restored(
        key: &[u8],
        db: i32,
        mode: Mode,
        holds: &[HoldRef],
        last_fence: u64,
    ) -> Option<Box<Lock>> {
        let (first, rest) = holds.split_first()?;
        let mut lock = Lock::new(key, db, first.token, first.deadline, first.fence, mode);
        for h in rest {
            lock.push(h.token, h.deadline, h.fence);
        }
        lock.note_fence(last_fence);
        Some(lock)
    }

    /// The same holds, leases and fences at another key, for `COPY`.
    pub fn copied_to(&self, key: &[u8], db: i32) -> Box<Lock> {
        let mut copy = Box::new(self.clone());
        copy.relocate(key, db);
        copy
    }

    /// The key was renamed or moved (`RENAME`, `MOVE`, `COPY`, `SWAPDB`).
    pub fn relocate(&mut self, key: &[u8], db: i32) {
        if self.key() != key {
            self.names = Names::joined(key, self.token());
            self.key_len = key.len() as u32 | (self.key_len & FLAGS);
        }
        self.db = db;
    }

    fn key_len(&self) -> usize {
        (self.key_len & !FLAGS) as usize
    }

    pub fn key(&self) -> &[u8] {
        &self.names[..self.key_len()]
    }

    pub fn db(&self) -> i32 {
        self.db
    }

    /// True if the current holds were made by a client of this server while it was a
    /// (writable) replica: such a lease is ended here, as a writable replica expires the
    /// keys it wrote itself. Its master's locks end with the master's `DEL`.
    pub fn is_replica_write(&self) -> bool {
        self.key_len & REPLICA_WRITE != 0
    }

    /// Notes who made the current holds (see [`Lock::is_replica_write`]).
    pub fn set_replica_write(&mut self, yes: bool) {
        if yes {
            self.key_len |= REPLICA_WRITE;
        } else {
            self.key_len &= !REPLICA_WRITE;
        }
    }

    /// The mode of the recorded holds (also once they have ended).
    pub fn mode(&self) -> Mode {
        if self.key_len & SHARED != 0 {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }

    fn set_mode(&mut self, mode: Mode) {
        match mode {
            Mode::Shared => self.key_len |= SHARED,
            Mode::Exclusive => self.key_len &= !SHARED,
        }
    }

    /// The first hold's token.
    pub fn token(&self) -> &[u8] {
        &self.names[self.key_len()..]
    }

    /// The first hold's fence.
    #[cfg(test)]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether a request like `want` may be granted now, nobody being queued before it.
    pub fn admits(&self, want: Want, now: Now) -> bool {
        let live = self.holders(now);
        if live == 0 {
            return true;
        }
        want.mode == Mode::Shared
            && self.mode() == Mode::Shared
            && want.limit.is_none_or(|n| live < n as usize)
    }

    /// `LOCK.ACQUIRE`, after the engine ended the due leases. `queued`: clients wait for the
    /// key, and a newcomer may not slip in ahead of them.
    pub fn acquire(
        &mut self,
        token: &[u8],
        ttl: u64,
        want: Want,
        queued: bool,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<Acquire, AcquireError> {
        let deadline = now.mono + micros(ttl);
        if let Some(i) = self.find(token, now) {
            let fence = self.hold(i).fence;
            return match (self.mode(), want.mode) {
                (Mode::Shared, Mode::Exclusive) => Err(AcquireError::Upgrade),
                (Mode::Exclusive, Mode::Shared) => {
                    self.set_mode(Mode::Shared);
                    self.set_hold(i, deadline, fence);
                    Ok(Acquire::Downgraded(fence))
                }
                _ => {
                    self.set_hold(i, deadline, fence);
                    Ok(Acquire::Renewed(fence))
                }
            };
        }
        if queued || !self.admits(want, now) {
            return Ok(Acquire::Busy);
        }
        Ok(Acquire::Granted(
            self.grant(token, ttl, want.mode, now, fences)?,
        ))
    }

    /// Gives `token` a hold of `mode` under a new fence: a waiter at the head of the queue
    /// that [`Lock::admits`] lets in, or a newcomer. Ended holds are dropped first (the
    /// engine has counted them). Without a fence (the issuer refused) nothing changes.
    pub fn grant(
        &mut self,
        token: &[u8],
        ttl: u64,
        mode: Mode,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<u64, FenceError> {
        let fence = fences.issue(self.last_fence(), now.wall(), now.mono_ms())?;
        let deadline = now.mono + micros(ttl);
        self.drop_ended(now);
        if self.is_held(now) {
            debug_assert!(mode == Mode::Shared && self.mode() == Mode::Shared);
            self.push(token, deadline, fence);
        } else {
            // A new fence is above the last: the vector has nothing left to say.
            self.names = Names::joined(self.key(), token);
            (self.deadline, self.fence) = (deadline, fence);
            self.clear_later();
            self.set_mode(mode);
        }
        Ok(fence)
    }

    /// Removes up to `limit` holds whose leases have ended, earliest first, returning their
    /// tokens: O(log H) each. If none is left, the last stays recorded, ended.
    pub fn end_due(&mut self, now: Now, limit: usize) -> Vec<Box<[u8]>> {
        let mut ended = Vec::new();
        while ended.len() < limit {
            let Some(at) = self.due(now) else {
                break;
            };
            ended.push(self.hold(at).token.into());
            if self.recorded() == 1 {
                break;
            }
            self.remove(at, now.mono);
        }
        ended
    }

    /// [`Lock::end_due`] without the tokens.
    fn drop_ended(&mut self, now: Now) {
        if self.due(now).is_some() {
            self.end_due(now, usize::MAX);
        }
    }

    /// `LOCK.RELEASE`: false if `token` holds no live hold. Released, that hold is gone from
    /// `now` on, for the engine to hand the lock on or remove it.
    pub fn release(&mut self, token: &[u8], now: Now) -> bool {
        let Some(i) = self.find(token, now) else {
            return false;
        };
        self.remove(i, now.mono);
        true
    }

    /// Takes back a grant that could not be delivered: the hold of `token` under `fence`
    /// (fences are unique within a key, so the pair names one hold). False if that hold
    /// has moved on since (a new fence, released, ended).
    pub fn withdraw(&mut self, token: &[u8], fence: u64, now: Now) -> bool {
        match self.find(token, now) {
            Some(i) if self.hold(i).fence == fence => {
                self.remove(i, now.mono);
                true
            }
            _ => false,
        }
    }

    pub fn extend(&mut self, token: &[u8], ttl: u64, now: Now) -> bool {
        let Some(i) = self.find(token, now) else {
            return false;
        };
        let fence = self.hold(i).fence;
        self.set_hold(i, now.mono + micros(ttl), fence);
        true
    }

    /// A new fence for `token`'s hold, or `None` if it holds none.
    pub fn new_fence(
        &mut self,
        token: &[u8],
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Result<Option<u64>, FenceError> {
        let Some(i) = self.find(token, now) else {
            return Ok(None);
        };
        let fence = fences.issue(self.last_fence(), now.wall(), now.mono_ms())?;
        let deadline = self.hold(i).deadline;
        self.set_hold(i, deadline, fence);
        self.note_fence(fence);
        Ok(Some(fence))
    }

    /// Whether `fence` is the fence of an exclusive hold that has not ended, which
    /// `LOCK.GUARD` requires before it runs anything.
    pub fn guards(&self, fence: u64, now: Now) -> Result<(), Fenced> {
        if !self.is_held(now) {
            return Err(Fenced::NotHeld);
        }
        if self.mode() == Mode::Shared {
            return Err(Fenced::Shared);
        }
        match fence.cmp(&self.fence) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(Fenced::Newer),
            std::cmp::Ordering::Greater => Err(Fenced::Older),
        }
    }

    /// A hold as the master propagated it (`LOCK.APPLY`): exclusive, it replaces every hold;
    /// shared, it joins the shared holds or replaces `token`'s, and replaces an exclusive
    /// one. The replica does not judge the master's leases by its own clock.
    pub fn apply(&mut self, token: &[u8], deadline: u64, fence: u64, mode: Mode) {
        self.set_replica_write(false);
        let position = self.lookup(token);
        match (mode, self.mode(), position) {
            (Mode::Shared, Mode::Shared, Some(i)) => self.set_hold(i, deadline, fence),
            (Mode::Shared, Mode::Shared, None) => self.push(token, deadline, fence),
            _ => {
                let last_fence = self.last_fence();
                self.names = Names::joined(self.key(), token);
                (self.deadline, self.fence) = (deadline, fence);
                self.clear_later();
                self.note_fence(last_fence);
                self.set_mode(mode);
            }
        }
        self.note_fence(fence);
    }

    /// A hold's end as the master propagated it (`LOCK.RELEASE` on the link). `None` if
    /// `token` had no recorded hold; `Some(true)` if it was the last, and the key goes.
    pub fn drop_hold(&mut self, token: &[u8], ended_at: u64) -> Option<bool> {
        let i = self.lookup(token)?;
        if self.recorded() == 1 {
            return Some(true);
        }
        self.remove(i, ended_at);
        Some(false)
    }

    pub fn info(&self, now: Now) -> Info<'_> {
        let holders = self.holders(now);
        let mode = (holders > 0).then(|| self.mode());
        let ttl = self
            .holds()
            .filter(|h| h.is_live(now))
            .map(|h| h.ttl_ms(now))
            .max()
            .unwrap_or(-1);
        Info {
            holder: (mode == Some(Mode::Exclusive)).then(|| self.token()),
            fence: self.last_fence(),
            ttl,
            mode,
            holders,
        }
    }

    /// Heap bytes owned by this value, for `MEMORY USAGE`.
    pub fn heap_size(&self) -> usize {
        let more = self.more.as_ref().map_or(0, |m| m.heap_size());
        std::mem::size_of::<Lock>() + self.names.heap_size() + more
    }
}

#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod tests;
