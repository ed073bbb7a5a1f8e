//! The client's view of one lease, and the loss signal built on it.
//!
//! A hold is trusted until its deadline: the send time of the last acquire or extend the
//! server confirmed, plus the ttl (less a drift allowance). The deadline is checked against
//! the clock whenever anyone looks, so the hold reads as lost from that instant on even
//! while the keep-alive is stuck in a call to a paused server; nobody has to deliver it.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::LossReason;

/// How long after a send a lease is trusted: the ttl less 1% and 2 ms, so that a server
/// clock running a little faster than ours (Redlock's drift allowance) cannot end the lease
/// before we stop trusting it.
pub(crate) fn trusted_life(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl / 100 + Duration::from_millis(2))
}

pub(crate) struct Lease {
    state: Mutex<State>,
    /// Wakes blocking waiters (and the blocking keep-alive) when the hold ends.
    cond: Condvar,
    /// Wakes async waiters when the hold ends.
    notify: tokio::sync::Notify,
    life: Duration,
}

struct State {
    /// Send time of the last confirmed acquire or extend.
    base: Instant,
    /// Why and when the hold ended; set once, never cleared, so that a late success cannot
    /// make a lost hold read as held again.
    ended: Option<(LossReason, Instant)>,
}

impl Lease {
    pub(crate) fn new(sent: Instant, ttl: Duration) -> Arc<Self> {
        Arc::new(Lease {
            state: Mutex::new(State {
                base: sent,
                ended: None,
            }),
            cond: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            life: trusted_life(ttl),
        })
    }

    // A panic elsewhere while the lock was held leaves plain data behind: keep going.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        self.cond.notify_all();
        self.notify.notify_waiters();
    }

    /// Ends the hold as `Expired` if its deadline has passed; the deadline while held.
    fn settle(&self, st: &mut State, now: Instant) -> Result<Instant, LossReason> {
        if let Some((reason, _)) = &st.ended {
            return Err(reason.clone());
        }
        // An overflowing deadline cannot be trusted: read it as already passed.
        let deadline = st.base.checked_add(self.life).unwrap_or(st.base);
        if now >= deadline {
            st.ended = Some((LossReason::Expired, deadline));
            self.wake();
            return Err(LossReason::Expired);
        }
        Ok(deadline)
    }

    /// The deadline while held, or why the hold is over.
    pub(crate) fn status(&self) -> Result<Instant, LossReason> {
        self.settle(&mut self.lock(), Instant::now())
    }

    /// Send time of the last confirmed acquire or extend.
    pub(crate) fn base(&self) -> Instant {
        self.lock().base
    }

    /// An extend sent at `sent` was confirmed. Refused if the hold is already over: a reply
    /// that comes after the deadline does not bring the hold back.
    pub(crate) fn confirm(&self, sent: Instant) -> Result<(), LossReason> {
        let mut st = self.lock();
        self.settle(&mut st, Instant::now())?;
        // Extends all ask for the same ttl, so the latest send bounds the lease from below,
        // whichever of two concurrent extends the server ran last.
        if sent > st.base {
            st.base = sent;
        }
        Ok(())
    }

    /// Ends the hold for `reason`, unless it is over already (or expired first: then that is
    /// the reason, dated at the deadline).
    pub(crate) fn end(&self, reason: LossReason) {
        let mut st = self.lock();
        if self.settle(&mut st, Instant::now()).is_ok() {
            st.ended = Some((reason, Instant::now()));
            self.wake();
        }
    }

    /// Blocks until `until`; returns early, with the reason, when the hold ends.
    pub(crate) fn sleep_until(&self, until: Instant) -> Result<(), LossReason> {
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            let deadline = self.settle(&mut st, now)?;
            if now >= until {
                return Ok(());
            }
            let wake = until.min(deadline);
            st = self
                .cond
                .wait_timeout(st, wake - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A handle on one hold that tells when it is over: lost, or released. Clone it into the
/// work the hold protects and have the work stop when it fires, as with a cancellation token.
///
/// It fires when a keep-alive extend answers that the token no longer holds the lock, when an
/// extend fails with any error, and in any case once the lease's deadline passes without a
/// confirmed extend: the send time of the last confirmed acquire or extend plus the ttl,
/// less 1% and 2 ms, on this client's monotonic clock. [`is_lost`](Self::is_lost) compares
/// with the clock itself, so it turns true at the deadline even while the keep-alive waits
/// on a server that does not answer. Once fired, it never turns back.
#[derive(Clone)]
pub struct LossSignal {
    lease: Arc<Lease>,
}

impl LossSignal {
    pub(crate) fn new(lease: Arc<Lease>) -> Self {
        LossSignal { lease }
    }

    /// True once the hold is over (lost or released).
    pub fn is_lost(&self) -> bool {
        self.lease.status().is_err()
    }

    /// Why the hold is over; `None` while it is held.
    pub fn reason(&self) -> Option<LossReason> {
        self.lease.status().err()
    }

    /// When the hold was judged over, on this client's monotonic clock: the deadline itself
    /// for [`LossReason::Expired`], else the moment the reason was learnt.
    pub fn lost_at(&self) -> Option<Instant> {
        let _ = self.lease.status();
        self.lease.lock().ended.as_ref().map(|(_, at)| *at)
    }

    /// The instant the lease stops being trusted unless an extend is confirmed first; `None`
    /// once the hold is over.
    pub fn deadline(&self) -> Option<Instant> {
        self.lease.status().ok()
    }

    /// Blocks the thread until the hold is over; returns why.
    pub fn wait(&self) -> LossReason {
        loop {
            if let Err(reason) = self.lease.sleep_until(far_future()) {
                return reason;
            }
        }
    }

    /// Blocks the thread until the hold is over or `timeout` passes; `None` on timeout.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<LossReason> {
        let until = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(far_future);
        self.lease.sleep_until(until).err()
    }

    /// Resolves when the hold is over, with why; for `tokio::select!` beside the work. Needs
    /// a tokio runtime with time enabled.
    pub async fn lost(&self) -> LossReason {
        loop {
            let notified = self.lease.notify.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so an end in between is not missed.
            notified.as_mut().enable();
            let deadline = match self.lease.status() {
                Err(reason) => return reason,
                Ok(deadline) => deadline,
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("lost", &self.reason())
            .finish()
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(366 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_until_the_deadline_and_never_again() {
        let ttl = Duration::from_millis(100);
        let sent = Instant::now();
        let lease = Lease::new(sent, ttl);
        let signal = LossSignal::new(Arc::clone(&lease));
        let deadline = signal.deadline().unwrap();
        assert_eq!(deadline, sent + trusted_life(ttl));
        assert!(deadline < sent + ttl, "a drift allowance below the ttl");
        assert!(matches!(signal.wait(), LossReason::Expired));
        assert!(Instant::now() >= deadline);
        assert_eq!(
            signal.lost_at(),
            Some(deadline),
            "dated at the deadline itself"
        );
        // A confirmation that comes late does not bring the hold back.
        assert!(lease.confirm(Instant::now()).is_err());
        assert!(signal.is_lost());
    }

    #[test]
    fn confirmations_move_the_deadline_to_the_latest_send() {
        let ttl = Duration::from_secs(10);
        let t0 = Instant::now();
        let lease = Lease::new(t0, ttl);
        let later = t0 + Duration::from_millis(5);
        lease.confirm(later).unwrap();
        // An older send confirmed after a newer one does not pull the deadline back.
        lease.confirm(t0).unwrap();
        assert_eq!(lease.status().unwrap(), later + trusted_life(ttl));
    }

    #[test]
    fn the_first_reason_stands() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(10));
        let signal = LossSignal::new(Arc::clone(&lease));
        assert!(signal.wait_timeout(Duration::from_millis(5)).is_none());
        lease.end(LossReason::NotHeld);
        lease.end(LossReason::Released);
        assert!(matches!(signal.reason(), Some(LossReason::NotHeld)));
        assert!(matches!(signal.wait(), LossReason::NotHeld));
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<LossSignal>();
        send_sync::<crate::Guard>();
        send_sync::<crate::aio::Guard>();
        send_sync::<crate::Mutex>();
        send_sync::<crate::aio::Semaphore>();
    }
}
