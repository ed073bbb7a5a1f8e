//! How the model serves a queue when tokens repeat (docs/commands.md, `LOCK.ACQUIRE`: one holder, one
//! hold). The head of a queue is served as a direct acquire by its token would be: a token
//! that holds the key, asking again for the same kind, renews its hold under the same fence
//! (under `LIMIT`, whatever the count: a renewal takes no permit); an exclusive holder's
//! `SHARED` request downgrades its hold in place and serving goes on; a shared holder's
//! exclusive request waits at the head, as any exclusive request waits for shared holds.
//! Any other head is granted a new hold if the holds admit it. So a token never holds a key
//! twice, however its requests arrive: directly, from the queue (two connections queueing
//! the same request, a retry from a pool), or behind a downgrade.
//!
//! `Model::serve` (in `tests/common/model.rs`) knows only distinct tokens, which is all the
//! main run queues; these take its place for every queue the driver serves.

use std::time::Instant;

use crate::common::model::{MHold, MLock, MWaiter, Mode, Model, Span, Want};

/// What serving the queue did for one waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// A new hold, under a new fence.
    New,
    /// Its token held the key in the kind it asked for: the lease renewed, the same fence.
    Renewed,
    /// Its token held the key exclusively and it asked `SHARED`: the hold is shared now,
    /// the same fence.
    Downgraded,
}

/// One waiter granted, with how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub(crate) w: usize,
    pub(crate) how: How,
}

/// Serves the queue of `l` at `at`. New holds get fence 0 and a provisional lease until
/// `Driver::read_grants` reads their replies; renewals and downgrades get theirs there too.
pub(crate) fn serve_lock(l: &mut MLock, waiters: &[Option<MWaiter>], at: Instant) -> Vec<Grant> {
    let mut granted = Vec::new();
    while let Some(&w) = l.queue.front() {
        let mw = waiters[w].as_ref().expect("a queued waiter");
        let how = match (l.hold(&mw.token).map(|h| h.mode), mw.want) {
            (Some(Mode::Exclusive), Want::Exclusive) | (Some(Mode::Shared), Want::Shared(_)) => {
                How::Renewed
            }
            (Some(Mode::Exclusive), Want::Shared(_)) => How::Downgraded,
            // An upgrade waits at the head for the holds to end, its token's own included.
            (Some(Mode::Shared), Want::Exclusive) => break,
            (None, want) if l.admits(want) => How::New,
            (None, _) => break,
        };
        l.queue.pop_front();
        let provisional = Span { lo: at, hi: at };
        match how {
            How::New => l.holds.push(MHold {
                token: mw.token.clone(),
                mode: mw.want.mode(),
                fence: 0,
                deadline: provisional,
            }),
            How::Renewed => {}
            How::Downgraded => l.hold_mut(&mw.token).mode = Mode::Shared,
        }
        granted.push(Grant { w, how });
    }
    granted
}

/// The model's side of serving queues with repeated tokens.
pub(crate) trait QueueRules {
    /// Serves the queue of `k` after its holds changed or a waiter left; a lock left
    /// without holds (and so without waiters) is removed.
    fn serve_key(&mut self, k: usize, at: Instant) -> Vec<Grant>;
    /// The hold of `token` on `k` ends (release, lease end, a grant taken back); the queue
    /// is served.
    fn end_hold_and_serve(&mut self, k: usize, token: &[u8], at: Instant) -> Vec<Grant>;
    /// Waiter `w` leaves its queue (timeout, hang-up); the queue is served.
    fn leave_queue(&mut self, w: usize, at: Instant) -> (MWaiter, Vec<Grant>);
}

impl QueueRules for Model {
    fn serve_key(&mut self, k: usize, at: Instant) -> Vec<Grant> {
        let Some(l) = self.keys[k].lock.as_mut() else {
            return Vec::new();
        };
        let granted = serve_lock(l, &self.waiters, at);
        if l.holds.is_empty() {
            debug_assert!(l.queue.is_empty());
            self.keys[k].lock = None;
        }
        granted
    }

    fn end_hold_and_serve(&mut self, k: usize, token: &[u8], at: Instant) -> Vec<Grant> {
        let l = self.keys[k].lock.as_mut().expect("the model's lock");
        let before = l.holds.len();
        l.holds.retain(|h| h.token != token);
        debug_assert_eq!(l.holds.len() + 1, before);
        self.serve_key(k, at)
    }

    fn leave_queue(&mut self, w: usize, at: Instant) -> (MWaiter, Vec<Grant>) {
        let mw = self.waiters[w].take().expect("a waiter");
        let granted = match self.keys[mw.key].lock.as_mut() {
            Some(l) => {
                l.queue.retain(|&x| x != w);
                self.serve_key(mw.key, at)
            }
            None => Vec::new(),
        };
        (mw, granted)
    }
}
