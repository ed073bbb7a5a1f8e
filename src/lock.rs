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
mod tests {
    use super::*;

    /// The clocks `ms` milliseconds into a test.
    fn at(ms: u64) -> Now {
        Now {
            mono: ms * 1000,
            wall_us: (1_764_000_000_000 + ms as i64) * 1000,
        }
    }

    fn at_us(us: u64) -> Now {
        Now {
            mono: us,
            wall_us: 1_764_000_000_000_000 + us as i64,
        }
    }

    fn fresh(token: &[u8], ttl: u64, now: Now, f: &mut FenceIssuer) -> (Lock, u64) {
        Lock::acquired(b"key", 0, token, ttl, now, f).unwrap()
    }

    #[test]
    fn acquire_is_exclusive_until_the_lease_ends() {
        let mut f = FenceIssuer::default();
        let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
        assert_eq!(
            lock.acquire(b"b", 100, at(50), &mut f).unwrap(),
            Acquire::Busy
        );
        assert_eq!(
            lock.acquire(b"b", 100, at(99), &mut f).unwrap(),
            Acquire::Busy
        );
        match lock.acquire(b"b", 100, at(100), &mut f).unwrap() {
            Acquire::Granted(second) => assert!(second > first),
            other => panic!("{other:?}"),
        }
        assert_eq!(lock.info(at(150)).holder, Some(&b"b"[..]));
    }

    #[test]
    fn a_retried_acquire_renews_with_the_same_fence() {
        let mut f = FenceIssuer::default();
        let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
        assert_eq!(
            lock.acquire(b"a", 500, at(90), &mut f).unwrap(),
            Acquire::Renewed(fence)
        );
        assert_eq!(lock.info(at(90)).ttl, 500);
    }

    #[test]
    fn the_same_token_after_its_lease_ended_gets_a_new_fence() {
        let mut f = FenceIssuer::default();
        let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
        assert!(
            matches!(lock.acquire(b"a", 100, at(100), &mut f).unwrap(), Acquire::Granted(n) if n > fence)
        );
    }

    #[test]
    fn release_only_by_the_holder() {
        let mut f = FenceIssuer::default();
        let (mut lock, _) = fresh(b"a", 100, at(0), &mut f);
        assert!(!lock.release(b"b", at(10)));
        assert!(lock.is_held(at(10)));
        assert!(lock.release(b"a", at(10)));
        assert!(!lock.is_held(at(10)));
        assert!(!lock.release(b"a", at(10)));
    }

    #[test]
    fn release_after_the_lease_ended_is_refused() {
        let mut f = FenceIssuer::default();
        let (mut lock, _) = fresh(b"a", 100, at(0), &mut f);
        assert!(!lock.release(b"a", at(100)));
    }

    #[test]
    fn extend_moves_the_deadline_and_never_acquires() {
        let mut f = FenceIssuer::default();
        let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
        assert!(lock.extend(b"a", 1000, at(50)));
        assert_eq!(lock.info(at(50)).ttl, 1000);
        assert!(!lock.extend(b"b", 1000, at(60)));
        assert!(!lock.extend(b"a", 1000, at(1050)));
        assert_eq!(lock.info(at(1050)).holder, None);
        assert_eq!(lock.fence(), fence);
    }

    #[test]
    fn fence_is_new_and_larger_for_the_holder_only() {
        let mut f = FenceIssuer::default();
        let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
        let second = lock.new_fence(b"a", at(1), &mut f).unwrap().unwrap();
        assert!(second > first);
        assert_eq!(lock.new_fence(b"b", at(2), &mut f).unwrap(), None);
        assert_eq!(lock.new_fence(b"a", at(100), &mut f).unwrap(), None);
        assert_eq!(lock.fence(), second);
    }

    #[test]
    fn info_reports_the_lease() {
        let mut f = FenceIssuer::default();
        let (lock, fence) = fresh(b"a", 100, at(0), &mut f);
        assert_eq!(
            lock.info(at(30)),
            Info {
                holder: Some(&b"a"[..]),
                fence,
                ttl: 70,
            }
        );
        assert_eq!(
            lock.info(at(100)),
            Info {
                holder: None,
                fence,
                ttl: -1,
            }
        );
    }

    #[test]
    fn fences_never_go_backwards_across_keys_and_time() {
        let mut f = FenceIssuer::default();
        let mut seen = 0;
        for round in 0..50u64 {
            let (mut lock, fence) = fresh(b"a", 10, at(round * 20), &mut f);
            assert!(fence > seen);
            seen = fence;
            let next = lock
                .new_fence(b"a", at(round * 20 + 1), &mut f)
                .unwrap()
                .unwrap();
            assert!(next > seen);
            seen = next;
        }
    }

    #[test]
    fn a_withdrawn_grant_frees_the_lock_unless_it_moved_on() {
        let mut f = FenceIssuer::default();
        let (mut lock, _) = fresh(b"a", 10, at(0), &mut f);
        let g1 = lock.grant(b"w1", 100, at(10), &mut f).unwrap();
        assert!(!lock.withdraw(b"w1", g1 - 1, at(11)), "another fence");
        assert!(!lock.withdraw(b"w2", g1, at(11)), "another token");
        assert!(lock.withdraw(b"w1", g1, at(11)));
        assert!(!lock.is_held(at(11)));
        let g2 = lock.grant(b"w2", 100, at(12), &mut f).unwrap();
        assert!(g2 > g1);
        assert!(
            !lock.withdraw(b"w1", g1, at(13)),
            "a stale withdrawal changes nothing"
        );
        assert_eq!(lock.info(at(13)).holder, Some(&b"w2"[..]));
    }

    #[test]
    fn a_lease_never_ends_before_its_ttl_to_the_microsecond() {
        let mut f = FenceIssuer::default();
        let (lock, _) = fresh(b"a", 50, at_us(1_999), &mut f);
        assert!(lock.is_held(at_us(51_998)));
        assert!(!lock.is_held(at_us(51_999)));
        assert_eq!(lock.info(at_us(51_998)).ttl, 1, "rounded up while held");
    }

    #[test]
    fn the_lock_knows_its_key_and_token_apart() {
        let mut f = FenceIssuer::default();
        let (mut lock, _) = Lock::acquired(b"orders:1", 3, b"tok", 10, at(0), &mut f).unwrap();
        assert_eq!(
            (lock.key(), lock.token(), lock.db()),
            (&b"orders:1"[..], &b"tok"[..], 3)
        );
        lock.relocate(b"o", 4);
        assert_eq!(
            (lock.key(), lock.token(), lock.db()),
            (&b"o"[..], &b"tok"[..], 4)
        );
        lock.set_replica_write(true);
        lock.relocate(b"longer-name", 4);
        assert!(lock.is_replica_write());
        assert_eq!(
            (lock.key(), lock.token()),
            (&b"longer-name"[..], &b"tok"[..])
        );
        lock.overwrite(b"tok", lock.deadline(), lock.fence());
        assert!(!lock.is_replica_write(), "a master's state is the master's");
        lock.relocate(b"o", 4);
        assert!(matches!(
            lock.acquire(b"longer-token", 10, at(20), &mut f).unwrap(),
            Acquire::Granted(_)
        ));
        assert_eq!(
            (lock.key(), lock.token()),
            (&b"o"[..], &b"longer-token"[..])
        );
        let copy = lock.copied_to(b"copy", 5);
        assert_eq!(
            (copy.key(), copy.db(), copy.token(), copy.fence()),
            (&b"copy"[..], 5, &b"longer-token"[..], lock.fence())
        );
    }

    #[test]
    fn short_names_live_inline_and_long_ones_on_the_heap() {
        let mut f = FenceIssuer::default();
        let uuid = b"3f0c9a2e-8d1b-4c4e-9a57-1d2b3c4d5e6f";
        let (short, _) = Lock::acquired(b"orders:12345678", 0, uuid, 10, at(0), &mut f).unwrap();
        assert!(matches!(short.names, Names::Inline(..)));
        assert_eq!(std::mem::size_of::<Lock>(), 88);
        let long_token = [7u8; 256];
        let (long, _) = Lock::acquired(b"k", 0, &long_token, 10, at(0), &mut f).unwrap();
        assert!(matches!(long.names, Names::Heap(_)));
        assert_eq!((long.key(), long.token()), (&b"k"[..], &long_token[..]));
        assert_eq!(long.heap_size(), 88 + 257);
    }
}
