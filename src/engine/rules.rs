//! The hand-off rules, as pure functions of a lock, its queue and the time: who holds a
//! lock next when it comes free. No server here: the engine (`handoff.rs`) applies what
//! these decide (propagation, replies, timers), and the unit tests beside this file drive
//! grants, lease ends and departures directly, in microseconds (redis-cell's `Store` split).

use super::waiters::{Registry, WaiterId};
use crate::blocked::Owned;
use crate::clock::Now;
use crate::fence::FenceIssuer;
use crate::lock::{Acquire, AcquireError, Lock};

/// A grant whose client left before it was told, to be taken back by the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawal {
    pub db: i32,
    pub key: Box<[u8]>,
    pub token: Box<[u8]>,
    pub fence: u64,
}

impl Withdrawal {
    fn is_of(&self, db: i32, key: &[u8], token: &[u8]) -> bool {
        self.db == db && &*self.key == key && &*self.token == token
    }
}

/// A waiter granted the lock: its handle to wake, its id, its token and fence.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant<H> {
    pub handle: H,
    pub id: WaiterId,
    pub token: Box<[u8]>,
    pub fence: u64,
}

/// Why [`grant_queued`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Nobody (more) waits, or the head is not admitted.
    Busy,
    /// No fence could be issued in this millisecond: the head waits for the next one.
    NoFence,
}

/// Grants `lock` at (db, key) to the head of its queue, then to the new head, and so on while
/// the lock admits them: consecutive shared requests together, an exclusive one alone. A
/// head whose token already holds the lock is served as a direct acquire would be: the same
/// kind renews its hold under the same fence, a shared request downgrades an exclusive hold;
/// one token never holds a key twice. An upgrade (a shared holder queued for the lock
/// exclusively) waits for its own shared hold to end, as any exclusive request waits for
/// shared holds. The grants, in order, and why it stopped.
pub fn grant_queued<H: Owned>(
    lock: &mut Lock,
    waiters: &mut Registry<H>,
    withdrawals: &mut Vec<Withdrawal>,
    (db, key): (i32, &[u8]),
    now: Now,
    fences: &mut FenceIssuer,
) -> (Vec<Grant<H>>, Stop) {
    let mut grants = Vec::new();
    while let Some(w) = waiters.head(db, key) {
        let (token, ttl, want) = (w.token.clone(), w.ttl, w.want);
        let (fence, fresh) = match lock.acquire(&token, ttl, want, false, now, fences) {
            Ok(Acquire::Granted(fence)) => (fence, true),
            Ok(Acquire::Renewed(fence) | Acquire::Downgraded(fence)) => (fence, false),
            Ok(Acquire::Busy) | Err(AcquireError::Upgrade) => return (grants, Stop::Busy),
            Err(AcquireError::Fence(_)) => return (grants, Stop::NoFence),
        };
        // A renewal of a hold whose grant a departed waiter left undelivered: nobody was
        // told of it, and this waiter takes it over (its leaving takes it back).
        let inherited = !fresh && inherit_withdrawal(withdrawals, db, key, &token);
        if let Some((handle, id)) = waiters.grant_head(db, key, fence, fresh || inherited) {
            grants.push(Grant {
                handle,
                id,
                token,
                fence,
            });
        }
    }
    (grants, Stop::Busy)
}

/// Drops the pending withdrawal of `token`'s grant at (db, key), if there is one: true if
/// there was.
fn inherit_withdrawal(
    withdrawals: &mut Vec<Withdrawal>,
    db: i32,
    key: &[u8],
    token: &[u8],
) -> bool {
    let before = withdrawals.len();
    withdrawals.retain(|w| !w.is_of(db, key, token));
    withdrawals.len() < before
}

/// A request of `token` other than a waiter's grant was told it holds the lock at (db, key):
/// a renewal, a downgrade, an extend. A grant to `token` there that a departed waiter left
/// undelivered is no longer taken back: the hold is another's too.
pub fn adopt<H: Owned>(
    waiters: &mut Registry<H>,
    withdrawals: &mut Vec<Withdrawal>,
    (db, key): (i32, &[u8]),
    token: &[u8],
) {
    if waiters.is_empty() && withdrawals.is_empty() {
        return;
    }
    waiters.adopt(db, key, token);
    withdrawals.retain(|w| !w.is_of(db, key, token));
}

#[cfg(test)]
mod tests;
