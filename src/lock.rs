//! The lock itself: a pure state machine over one key's holder, lease deadline and fence.
//! It knows nothing of Redis; every operation takes the time as an argument, so that the
//! rules of SPEC.md can be tested here without a server and reused as a model of one.
//!
//! A `Lock` value always has a token and a deadline. The lease is *held* while
//! `now.mono < deadline`; once the deadline has passed the value only remembers the last
//! fence until the key is removed (by the lease-end sweep, or by the next write to the key).

use crate::clock::Now;
use crate::fence::FenceIssuer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    token: Box<[u8]>,
    /// Monotonic milliseconds at which the lease ends.
    deadline: u64,
    /// The last fence issued for this key.
    fence: u64,
}

/// What `LOCK.ACQUIRE` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The lock was free: the token holds it now under a new fence.
    Granted(u64),
    /// The token already held it: the lease was renewed, the fence is unchanged.
    Renewed(u64),
    /// Another token holds it.
    Busy,
}

/// What `LOCK.INFO` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info<'a> {
    pub holder: Option<&'a [u8]>,
    pub fence: u64,
    /// Remaining lease in milliseconds; -1 when not held.
    pub ttl: i64,
}

impl Lock {
    /// A fresh key acquired by `token`. The caller issues the first fence.
    pub fn acquired(token: &[u8], ttl: u64, now: Now, fences: &mut FenceIssuer) -> (Lock, u64) {
        let fence = fences.issue(0, now.wall);
        let lock = Lock {
            token: token.into(),
            deadline: now.mono + ttl,
            fence,
        };
        (lock, fence)
    }

    /// A lock as persisted or replicated; `deadline` is already on the monotonic clock.
    pub fn restored(token: &[u8], deadline: u64, fence: u64) -> Lock {
        Lock {
            token: token.into(),
            deadline,
            fence,
        }
    }

    pub fn token(&self) -> &[u8] {
        &self.token
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

    fn is_held_by(&self, token: &[u8], now: Now) -> bool {
        self.is_held(now) && *self.token == *token
    }

    pub fn acquire(
        &mut self,
        token: &[u8],
        ttl: u64,
        now: Now,
        fences: &mut FenceIssuer,
    ) -> Acquire {
        if self.is_held_by(token, now) {
            self.deadline = now.mono + ttl;
            return Acquire::Renewed(self.fence);
        }
        if self.is_held(now) {
            return Acquire::Busy;
        }
        self.fence = fences.issue(self.fence, now.wall);
        if *self.token != *token {
            self.token = token.into();
        }
        self.deadline = now.mono + ttl;
        Acquire::Granted(self.fence)
    }

    /// True if `token` held the lock; it is free from now on and the caller removes the key.
    pub fn release(&mut self, token: &[u8], now: Now) -> bool {
        if !self.is_held_by(token, now) {
            return false;
        }
        self.deadline = now.mono;
        true
    }

    pub fn extend(&mut self, token: &[u8], ttl: u64, now: Now) -> bool {
        if !self.is_held_by(token, now) {
            return false;
        }
        self.deadline = now.mono + ttl;
        true
    }

    /// A new fence for the holder, or `None` if `token` does not hold the lock.
    pub fn new_fence(&mut self, token: &[u8], now: Now, fences: &mut FenceIssuer) -> Option<u64> {
        if !self.is_held_by(token, now) {
            return None;
        }
        self.fence = fences.issue(self.fence, now.wall);
        Some(self.fence)
    }

    pub fn info(&self, now: Now) -> Info<'_> {
        let held = self.is_held(now);
        Info {
            holder: held.then_some(&*self.token),
            fence: self.fence,
            ttl: if held {
                (self.deadline - now.mono) as i64
            } else {
                -1
            },
        }
    }

    /// Heap bytes owned by this value, for `MEMORY USAGE`.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Lock>() + self.token.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(mono: u64) -> Now {
        Now {
            mono,
            wall: 1_764_000_000_000 + mono as i64,
        }
    }

    fn fresh(token: &[u8], ttl: u64, now: Now, f: &mut FenceIssuer) -> (Lock, u64) {
        Lock::acquired(token, ttl, now, f)
    }

    #[test]
    fn acquire_is_exclusive_until_the_lease_ends() {
        let mut f = FenceIssuer::default();
        let (mut lock, first) = fresh(b"a", 100, at(0), &mut f);
        assert_eq!(lock.acquire(b"b", 100, at(50), &mut f), Acquire::Busy);
        assert_eq!(lock.acquire(b"b", 100, at(99), &mut f), Acquire::Busy);
        match lock.acquire(b"b", 100, at(100), &mut f) {
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
            lock.acquire(b"a", 500, at(90), &mut f),
            Acquire::Renewed(fence)
        );
        assert_eq!(lock.info(at(90)).ttl, 500);
    }

    #[test]
    fn the_same_token_after_its_lease_ended_gets_a_new_fence() {
        let mut f = FenceIssuer::default();
        let (mut lock, fence) = fresh(b"a", 100, at(0), &mut f);
        assert!(
            matches!(lock.acquire(b"a", 100, at(100), &mut f), Acquire::Granted(n) if n > fence)
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
        let second = lock.new_fence(b"a", at(1), &mut f).unwrap();
        assert!(second > first);
        assert_eq!(lock.new_fence(b"b", at(2), &mut f), None);
        assert_eq!(lock.new_fence(b"a", at(100), &mut f), None);
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
                ttl: 70
            }
        );
        assert_eq!(
            lock.info(at(100)),
            Info {
                holder: None,
                fence,
                ttl: -1
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
            let next = lock.new_fence(b"a", at(round * 20 + 1), &mut f).unwrap();
            assert!(next > seen);
            seen = next;
        }
    }
}
