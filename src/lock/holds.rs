//! Where a lock keeps its holds: the first inside the value, the rest in a vector behind
//! it, with the key's last fence when no recorded hold has it. Everything that walks or
//! changes that storage is here; the rules that use it are in `mod.rs`.

use super::names::Names;
use super::{HoldRef, Lock, Now};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct More {
    /// The last fence issued for the key.
    last_fence: u64,
    holds: Vec<Hold>,
}

/// A hold after the first: 32 bytes here, and its token on the heap.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hold {
    token: Box<[u8]>,
    deadline: u64,
    fence: u64,
}

impl More {
    pub(super) fn heap_size(&self) -> usize {
        std::mem::size_of::<More>()
            + self.holds.capacity() * std::mem::size_of::<Hold>()
            + self.holds.iter().map(|h| h.token.len()).sum::<usize>()
    }
}

impl Lock {
    /// The last fence issued for the key.
    pub fn last_fence(&self) -> u64 {
        self.more.as_ref().map_or(self.fence, |m| m.last_fence)
    }

    /// The earliest lease end among the recorded holds: where the lease index files the lock.
    pub fn deadline(&self) -> u64 {
        self.holds()
            .map(|h| h.deadline)
            .min()
            .unwrap_or(self.deadline)
    }

    /// Every recorded hold in grant order, live or not.
    pub fn holds(&self) -> impl Iterator<Item = HoldRef<'_>> {
        let first = HoldRef {
            token: self.token(),
            deadline: self.deadline,
            fence: self.fence,
        };
        let rest = self.more.iter().flat_map(|m| &m.holds).map(|h| HoldRef {
            token: &h.token,
            deadline: h.deadline,
            fence: h.fence,
        });
        std::iter::once(first).chain(rest)
    }

    /// Live holds.
    pub fn holders(&self, now: Now) -> usize {
        self.holds().filter(|h| h.is_live(now)).count()
    }

    pub fn is_held(&self, now: Now) -> bool {
        self.holds().any(|h| h.is_live(now))
    }

    /// Where `token`'s live hold is, in grant order.
    pub(super) fn find(&self, token: &[u8], now: Now) -> Option<usize> {
        self.holds()
            .position(|h| h.token == token && h.is_live(now))
    }

    #[cfg(test)]
    pub fn is_held_by(&self, token: &[u8], now: Now) -> bool {
        self.find(token, now).is_some()
    }

    pub(super) fn set_hold(&mut self, i: usize, deadline: u64, fence: u64) {
        if i == 0 {
            (self.deadline, self.fence) = (deadline, fence);
        } else if let Some(h) = self.more.as_mut().and_then(|m| m.holds.get_mut(i - 1)) {
            (h.deadline, h.fence) = (deadline, fence);
        }
    }

    pub(super) fn hold(&self, i: usize) -> Option<HoldRef<'_>> {
        self.holds().nth(i)
    }

    /// Records `fence` as issued for the key (also when a replayed AOF says so).
    pub fn note_fence(&mut self, fence: u64) {
        if fence > self.last_fence() {
            if self.more.is_none() && fence == self.fence {
                return;
            }
            self.more_mut().last_fence = fence;
        }
    }

    pub(super) fn more_mut(&mut self) -> &mut More {
        let last_fence = self.last_fence();
        self.more.get_or_insert_with(|| {
            Box::new(More {
                last_fence,
                holds: Vec::new(),
            })
        })
    }

    /// Adds a hold after the others.
    pub(super) fn push(&mut self, token: &[u8], deadline: u64, fence: u64) {
        let holds = &mut self.more_mut().holds;
        if holds.len() == holds.capacity() {
            // A quarter more at a time, not double: a full vector is at most a fifth empty,
            // which keeps a hold at its 32 bytes plus at most 8 of spare room.
            holds.reserve_exact((holds.len() / 4).max(4));
        }
        holds.push(Hold {
            token: token.into(),
            deadline,
            fence,
        });
        self.note_fence(fence);
    }

    /// Removes hold `i`. The first hold's place goes to the next in grant order; the last
    /// hold stays recorded, ended at `ended_at`, for the key's fence.
    pub(super) fn remove(&mut self, i: usize, ended_at: u64) {
        let last_fence = self.last_fence();
        let later = self.more.as_ref().map_or(0, |m| m.holds.len());
        match self.more.as_mut() {
            Some(m) if i > 0 => {
                m.holds.remove(i - 1);
                if m.holds.capacity() > 16 && m.holds.len() < m.holds.capacity() / 4 {
                    // The holds went: so does most of their room.
                    m.holds.shrink_to(m.holds.len() * 2);
                }
            }
            Some(m) if later > 0 => {
                let next = m.holds.remove(0);
                self.names = Names::joined(self.key(), &next.token);
                (self.deadline, self.fence) = (next.deadline, next.fence);
            }
            _ => self.deadline = self.deadline.min(ended_at),
        }
        self.tidy(last_fence);
    }

    /// Keeps the vector only while it holds what the first hold cannot say itself: later
    /// holds, or a last fence that is not the first hold's.
    pub(super) fn tidy(&mut self, last_fence: u64) {
        let later = self.more.as_ref().is_some_and(|m| !m.holds.is_empty());
        if later || last_fence != self.fence {
            let more = self.more_mut();
            more.last_fence = last_fence;
            if more.holds.is_empty() {
                // Only the fence to remember: the holds' room goes.
                more.holds = Vec::new();
            }
        } else {
            self.more = None;
        }
    }
}
