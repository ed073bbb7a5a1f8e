//! Where a lock keeps its holds: the first inside the value, the rest in [`Later`] behind it
//! (in [`More`], with the key's last fence when no recorded hold has it). Everything that walks or changes
//! that storage is here; the rules that use it are in `mod.rs`.
//!
//! A key may have many shared holders, so every operation on one hold costs O(log H) for H
//! holds, never O(H): the later holds sit in a vector in grant order, found by token through
//! a hash table and by deadline through a binary heap, both of slot numbers. Their tokens
//! sit end to end in one buffer (a token on the heap of its own would cost its allocation's
//! rounding and a 16-byte pointer). A removed hold leaves a gap that keeps the other slots
//! where the indexes say they are; the vector and the buffer are compacted, and the indexes
//! rebuilt, once gaps outnumber holds (amortised O(1) a removal).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::names::Names;
use super::{HoldRef, Lock, Now};

/// Where a hold is: the first, inside the value, or a slot of [`Later`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    First,
    Later(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct More {
    /// The last fence issued for the key.
    last_fence: u64,
    /// The holds after the first, if any.
    later: Option<Box<Later>>,
}

impl More {
    pub(super) fn heap_size(&self) -> usize {
        std::mem::size_of::<More>() + self.later.as_ref().map_or(0, |l| l.heap_size())
    }
}

/// The holds after the first, and their indexes.
#[derive(Debug, Clone)]
pub(super) struct Later {
    /// Holds after the first, in grant order, with gaps (an empty token: tokens never are).
    slots: Vec<Hold>,
    /// Their tokens, end to end, and those of removed holds until the next compaction.
    tokens: Vec<u8>,
    /// The first slot that is not a gap.
    head: usize,
    /// Slots that are not gaps.
    count: usize,
    /// Bytes of `tokens` that belong to removed holds.
    garbage: usize,
    /// Each hold's slot, by token. Tokens are the clients': keyed SipHash (see `hashing`).
    by_token: HashTable<u32>,
    hasher: RandomState,
    /// Slots as a binary min-heap by deadline; each hold knows its place in it.
    by_deadline: Vec<u32>,
}

/// A hold after the first: 32 bytes here, and its token in [`Later::tokens`].
#[derive(Debug, Clone)]
struct Hold {
    deadline: u64,
    fence: u64,
    /// Where its token starts in `tokens`.
    token_at: u64,
    /// Its place in `by_deadline`.
    heap_at: u32,
    /// The token's length; 0 for a gap.
    token_len: u16,
}

impl Hold {
    fn is_gap(&self) -> bool {
        self.token_len == 0
    }
}

impl PartialEq for Later {
    /// The same holds in the same order: the indexes follow.
    fn eq(&self, other: &Self) -> bool {
        let holds = |m: &'_ Later| {
            m.live_slots()
                .map(|(_, h)| (m.token(h).to_vec(), h.deadline, h.fence))
                .collect::<Vec<_>>()
        };
        holds(self) == holds(other)
    }
}

impl Eq for Later {}

impl Later {
    fn new() -> Self {
        Later {
            slots: Vec::new(),
            tokens: Vec::new(),
            head: 0,
            count: 0,
            garbage: 0,
            by_token: HashTable::new(),
            hasher: RandomState::new(),
            by_deadline: Vec::new(),
        }
    }

    fn heap_size(&self) -> usize {
        std::mem::size_of::<Later>()
            + self.slots.capacity() * std::mem::size_of::<Hold>()
            + self.tokens.capacity()
            // A slot number and a control byte a bucket.
            + self.by_token.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.by_deadline.capacity() * std::mem::size_of::<u32>()
    }

    fn live_slots(&self) -> impl Iterator<Item = (u32, &Hold)> {
        self.slots
            .iter()
            .enumerate()
            .skip(self.head)
            .filter(|(_, h)| !h.is_gap())
            .map(|(i, h)| (i as u32, h))
    }

    fn hash(&self, token: &[u8]) -> u64 {
        self.hasher.hash_one(token)
    }

    fn token(&self, h: &Hold) -> &[u8] {
        let at = h.token_at as usize;
        &self.tokens[at..at + usize::from(h.token_len)]
    }

    fn token_of(&self, slot: u32) -> &[u8] {
        self.token(&self.slots[slot as usize])
    }

    fn slot_of(&self, token: &[u8]) -> Option<u32> {
        self.by_token
            .find(self.hash(token), |&s| self.token_of(s) == token)
            .copied()
    }

    fn deadline_at(&self, heap_at: usize) -> u64 {
        self.slots[self.by_deadline[heap_at] as usize].deadline
    }

    /// The slot with the earliest deadline.
    fn earliest(&self) -> Option<(u32, u64)> {
        let &slot = self.by_deadline.first()?;
        Some((slot, self.slots[slot as usize].deadline))
    }

    fn add(&mut self, token: &[u8], deadline: u64, fence: u64) {
        let slot = self.slots.len() as u32;
        let heap_at = self.by_deadline.len() as u32;
        // A quarter more at a time, not double: a full vector is at most a fifth empty.
        grow_by_quarters(&mut self.slots, 1);
        grow_by_quarters(&mut self.tokens, token.len());
        grow_by_quarters(&mut self.by_deadline, 1);
        self.slots.push(Hold {
            deadline,
            fence,
            token_at: self.tokens.len() as u64,
            heap_at,
            token_len: token.len() as u16,
        });
        self.tokens.extend_from_slice(token);
        self.by_deadline.push(slot);
        self.sift_up(heap_at as usize);
        self.index_token(slot);
        self.count += 1;
    }

    /// Files `slot` in the token index.
    fn index_token(&mut self, slot: u32) {
        let hash = self.hash(self.token_of(slot));
        let (slots, tokens, hasher) = (&self.slots, &self.tokens, &self.hasher);
        self.by_token.insert_unique(hash, slot, |&s| {
            let h = &slots[s as usize];
            let at = h.token_at as usize;
            hasher.hash_one(&tokens[at..at + usize::from(h.token_len)])
        });
    }

    fn set(&mut self, slot: u32, deadline: u64, fence: u64) {
        let h = &mut self.slots[slot as usize];
        let (old, at) = (h.deadline, h.heap_at as usize);
        (h.deadline, h.fence) = (deadline, fence);
        if deadline < old {
            self.sift_up(at);
        } else if deadline > old {
            self.sift_down(at);
        }
    }

    /// Takes the hold out of its slot (which becomes a gap) and out of both indexes.
    fn take(&mut self, slot: u32) {
        let hash = self.hash(self.token_of(slot));
        if let Ok(entry) = self.by_token.find_entry(hash, |&s| s == slot) {
            entry.remove();
        } else {
            debug_assert!(false, "a hold missing from the token index");
        }
        let h = &mut self.slots[slot as usize];
        let at = h.heap_at as usize;
        self.garbage += usize::from(std::mem::take(&mut h.token_len));
        let last = self.by_deadline.len() - 1;
        self.swap(at, last);
        self.by_deadline.pop();
        if at < last {
            self.sift_down(at);
            self.sift_up(at);
        }
        self.count -= 1;
        while self.head < self.slots.len() && self.slots[self.head].is_gap() {
            self.head += 1;
        }
        if self.slots.len() > 16 + 2 * self.count {
            self.compact();
        }
    }

    /// Drops the gaps and the removed tokens, and rebuilds both indexes over the slots' new
    /// numbers.
    fn compact(&mut self) {
        let mut tokens = Vec::with_capacity(self.tokens.len() - self.garbage);
        let old = std::mem::take(&mut self.tokens);
        self.slots.retain(|h| !h.is_gap());
        for h in &mut self.slots {
            let at = h.token_at as usize;
            h.token_at = tokens.len() as u64;
            tokens.extend_from_slice(&old[at..at + usize::from(h.token_len)]);
        }
        (self.tokens, self.garbage, self.head) = (tokens, 0, 0);
        if self.slots.capacity() > 16 && self.slots.len() < self.slots.capacity() / 4 {
            // The holds went: so does most of their room.
            self.slots.shrink_to(self.slots.len() * 2);
        }
        self.by_token = HashTable::with_capacity(self.slots.len());
        for i in 0..self.slots.len() as u32 {
            self.index_token(i);
        }
        self.by_deadline = (0..self.slots.len() as u32).collect();
        for i in (0..self.by_deadline.len() / 2).rev() {
            self.sift_down(i);
        }
        for (at, &slot) in self.by_deadline.iter().enumerate() {
            self.slots[slot as usize].heap_at = at as u32;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.by_deadline.swap(a, b);
        let (sa, sb) = (self.by_deadline[a], self.by_deadline[b]);
        self.slots[sa as usize].heap_at = a as u32;
        self.slots[sb as usize].heap_at = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.deadline_at(parent) <= self.deadline_at(at) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let n = self.by_deadline.len();
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if l < n && self.deadline_at(l) < self.deadline_at(least) {
                least = l;
            }
            if r < n && self.deadline_at(r) < self.deadline_at(least) {
                least = r;
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }

    /// Holds whose lease ended by `now`: the heap's entries at or before it, which form a
    /// subtree at its root. O(ended holds).
    fn ended(&self, now: Now) -> usize {
        if self
            .earliest()
            .is_none_or(|(_, deadline)| deadline > now.mono)
        {
            return 0; // the usual case, without the walk's allocation
        }
        let mut stack = vec![0usize];
        let mut n = 0;
        while let Some(at) = stack.pop() {
            if at < self.by_deadline.len() && self.deadline_at(at) <= now.mono {
                n += 1;
                stack.extend([2 * at + 1, 2 * at + 2]);
            }
        }
        n
    }
}

/// Grows `v` to take `more` items, by a quarter of its length at a time rather than double.
fn grow_by_quarters<T>(v: &mut Vec<T>, more: usize) {
    if v.len() + more > v.capacity() {
        v.reserve_exact((v.len() / 4).max(more).max(4));
    }
}

impl Lock {
    /// The last fence issued for the key.
    pub fn last_fence(&self) -> u64 {
        self.more.as_ref().map_or(self.fence, |m| m.last_fence)
    }

    fn later(&self) -> Option<&Later> {
        self.more.as_ref()?.later.as_deref()
    }

    /// The earliest lease end among the recorded holds: where the lease index files the lock.
    pub fn deadline(&self) -> u64 {
        match self.later().and_then(|l| l.earliest()) {
            Some((_, later)) => later.min(self.deadline),
            None => self.deadline,
        }
    }

    /// Every recorded hold in grant order, live or not.
    pub fn holds(&self) -> impl Iterator<Item = HoldRef<'_>> {
        let first = self.hold(At::First);
        let rest = self.later().into_iter().flat_map(|l| {
            l.live_slots().map(|(_, h)| HoldRef {
                token: l.token(h),
                deadline: h.deadline,
                fence: h.fence,
            })
        });
        std::iter::once(first).chain(rest)
    }

    /// Recorded holds, live or not.
    pub fn recorded(&self) -> usize {
        1 + self.later().map_or(0, |l| l.count)
    }

    /// Live holds. O(1) once the ended ones are gone, as they are after the engine settles.
    pub fn holders(&self, now: Now) -> usize {
        let first = usize::from(self.hold(At::First).is_live(now));
        first + self.later().map_or(0, |l| l.count - l.ended(now))
    }

    pub fn is_held(&self, now: Now) -> bool {
        self.hold(At::First).is_live(now) || self.later().is_some_and(|l| l.ended(now) < l.count)
    }

    /// `token`'s recorded hold, live or not.
    pub(super) fn lookup(&self, token: &[u8]) -> Option<At> {
        if self.token() == token {
            return Some(At::First);
        }
        Some(At::Later(self.later()?.slot_of(token)?))
    }

    /// `token`'s hold, as recorded (live or not).
    pub fn hold_of(&self, token: &[u8]) -> Option<HoldRef<'_>> {
        self.lookup(token).map(|at| self.hold(at))
    }

    /// Where `token`'s live hold is.
    pub(super) fn find(&self, token: &[u8], now: Now) -> Option<At> {
        self.lookup(token).filter(|&at| self.hold(at).is_live(now))
    }

    #[cfg(test)]
    pub fn is_held_by(&self, token: &[u8], now: Now) -> bool {
        self.find(token, now).is_some()
    }

    pub(super) fn hold(&self, at: At) -> HoldRef<'_> {
        match (at, self.later()) {
            (At::Later(slot), Some(l)) => {
                let h = &l.slots[slot as usize];
                HoldRef {
                    token: l.token(h),
                    deadline: h.deadline,
                    fence: h.fence,
                }
            }
            _ => HoldRef {
                token: self.token(),
                deadline: self.deadline,
                fence: self.fence,
            },
        }
    }

    /// A recorded hold whose lease ended by `now`, the later ones before the first: the
    /// first is the one that stays recorded when all have ended.
    pub(super) fn due(&self, now: Now) -> Option<At> {
        match self.later().and_then(|l| l.earliest()) {
            Some((slot, deadline)) if deadline <= now.mono => Some(At::Later(slot)),
            _ => (self.deadline <= now.mono).then_some(At::First),
        }
    }

    pub(super) fn set_hold(&mut self, at: At, deadline: u64, fence: u64) {
        let later = self.more.as_mut().and_then(|m| m.later.as_mut());
        match (at, later) {
            (At::Later(slot), Some(l)) => l.set(slot, deadline, fence),
            _ => (self.deadline, self.fence) = (deadline, fence),
        }
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

    fn more_mut(&mut self) -> &mut More {
        let last_fence = self.last_fence();
        self.more.get_or_insert_with(|| {
            Box::new(More {
                last_fence,
                later: None,
            })
        })
    }

    /// Adds a hold after the others.
    pub(super) fn push(&mut self, token: &[u8], deadline: u64, fence: u64) {
        debug_assert!(self.lookup(token).is_none(), "one hold per token");
        debug_assert!(!token.is_empty() && token.len() <= usize::from(u16::MAX));
        let later = self
            .more_mut()
            .later
            .get_or_insert_with(|| Box::new(Later::new()));
        later.add(token, deadline, fence);
        self.note_fence(fence);
    }

    /// Removes the hold at `at`. The first hold's place goes to the next in grant order; the
    /// last hold stays recorded, ended at `ended_at`, for the key's fence.
    pub(super) fn remove(&mut self, at: At, ended_at: u64) {
        let last_fence = self.last_fence();
        // The first hold's successor, read before anything changes.
        let next = match (at, self.later()) {
            (At::First, Some(l)) if l.count > 0 => {
                let h = &l.slots[l.head];
                let names = Names::joined(self.key(), l.token(h));
                Some((names, h.deadline, h.fence, l.head as u32))
            }
            _ => None,
        };
        let later = self.more.as_mut().and_then(|m| m.later.as_mut());
        match (at, next, later) {
            (At::Later(slot), _, Some(l)) => l.take(slot),
            (_, Some((names, deadline, fence, slot)), Some(l)) => {
                l.take(slot);
                self.names = names;
                (self.deadline, self.fence) = (deadline, fence);
            }
            _ => self.deadline = self.deadline.min(ended_at),
        }
        self.tidy(last_fence);
    }

    /// Forgets every hold after the first.
    pub(super) fn clear_later(&mut self) {
        self.more = None;
    }

    /// Keeps [`More`] only while it holds what the first hold cannot say itself: later
    /// holds, or a last fence that is not the first hold's; and [`Later`] only while there
    /// are later holds.
    pub(super) fn tidy(&mut self, last_fence: u64) {
        let later = self.later().is_some_and(|l| l.count > 0);
        if later || last_fence != self.fence {
            let more = self.more_mut();
            more.last_fence = last_fence;
            if !later {
                more.later = None;
            }
        } else {
            self.more = None;
        }
    }
}

#[cfg(test)]
mod tests;
