//! What every thread of a run shares: the clock of the history, the stop flag, the hold
//! ids, the Sentinel answers seen so far, and the flags. Asking Sentinel through it, and
//! the master of record it gives, are in `sentinel`.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex as StdMutex, PoisonError};
use std::time::Instant;

use crate::args::Args;
use crate::history::{Nanos, Node, Observation};

pub struct Shared {
    pub start: Instant,
    pub stop: AtomicBool,
    pub next_hold: AtomicU64,
    pub observations: StdMutex<Vec<Observation>>,
    pub sentinels: Vec<Node>,
    pub args: Args,
}

impl Shared {
    /// The clock starts now; hold ids from 1.
    pub fn new(sentinels: Vec<Node>, args: Args) -> Shared {
        Shared {
            start: Instant::now(),
            stop: AtomicBool::new(false),
            next_hold: AtomicU64::new(1),
            observations: StdMutex::new(Vec::new()),
            sentinels,
            args,
        }
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    pub fn observe(&self, sentinel: Node, master: Node, at: Nanos) {
        self.observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Observation {
                at,
                sentinel,
                master,
            });
    }

    /// Every answer recorded so far, for the history at the end.
    pub fn take_observations(&self) -> Vec<Observation> {
        std::mem::take(
            &mut *self
                .observations
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}
