//! An ordered set kept in sorted blocks of up to 64 elements, for the expiry index.
//!
//! The index holds one (deadline, lock) pair per held lock. In a `BTreeSet` that cost about
//! 25 bytes per lock: leases mostly share a ttl, so deadlines arrive in increasing order, and
//! a B-tree splits its rightmost node in the middle, leaving every node half full. Here an
//! element past the end of the set starts a new block, so those blocks stay full (16 bytes
//! per element and a small share of the block's map entry); an element inside the set goes
//! into its block, which splits in two when full, as a B-tree node does. Lookups go through
//! a `BTreeMap` of blocks keyed by (a lower bound of) their first element, 64 times smaller than the set.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

/// Elements per block, a 1 KiB allocation for 16-byte elements.
const BLOCK: usize = 64;

#[derive(Debug, Default)]
pub struct BlockSet<T> {
    /// Each block is sorted and non-empty; its key is at or below its first element, and every
    /// element of a block is below the next block's key.
    blocks: BTreeMap<T, Vec<T>>,
    /// The last block emptied, kept for the next one: a set that goes from empty to one
    /// element and back on every acquire and release would otherwise allocate a block each time.
    spare: Option<Vec<T>>,
}

impl<T: Ord + Copy> BlockSet<T> {
    pub const fn new() -> Self {
        BlockSet {
            blocks: BTreeMap::new(),
            spare: None,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.blocks.values().map(Vec::len).sum()
    }

    pub fn first(&self) -> Option<T> {
        self.blocks.first_key_value().map(|(_, block)| block[0])
    }

    /// Adds `x`; false if it was there already.
    pub fn insert(&mut self, x: T) -> bool {
        // Past the end, the common case: one descent. A full last block is left full.
        let Some(mut last) = self.blocks.last_entry() else {
            self.start_block(x);
            return true;
        };
        let block = last.get_mut();
        if x > block[block.len() - 1] {
            if block.len() < BLOCK {
                block.push(x);
            } else {
                self.start_block(x);
            }
            return true;
        }
        let Some((_, block)) = self.blocks.range_mut(..=x).next_back() else {
            return self.insert_first(x);
        };
        let Err(at) = block.binary_search(&x) else {
            return false;
        };
        if block.len() < BLOCK {
            block.insert(at, x);
            return true;
        }
        let mut right = new_block(&block[BLOCK / 2..]);
        block.truncate(BLOCK / 2);
        if at <= BLOCK / 2 {
            block.insert(at, x);
        } else {
            right.insert(at - BLOCK / 2, x);
        }
        self.blocks.insert(right[0], right);
        true
    }

    /// `x` is below every key: it joins the first block, which is filed under it, or starts
    /// a block of its own.
    fn insert_first(&mut self, x: T) -> bool {
        let Some(first) = self.blocks.first_entry() else {
            unreachable!("insert_first on an empty set");
        };
        if first.get().len() < BLOCK {
            let mut block = first.remove();
            block.insert(0, x);
            self.blocks.insert(x, block);
        } else {
            self.start_block(x);
        }
        true
    }

    /// Removes `x`; false if it was not there. A block keeps its key when it loses its first
    /// element: the key stays at or below every element left, which is all lookups need.
    pub fn remove(&mut self, x: &T) -> bool {
        let Some((&key, block)) = self.blocks.range_mut(..=*x).next_back() else {
            return false;
        };
        let Ok(at) = block.binary_search(x) else {
            return false;
        };
        block.remove(at);
        if block.is_empty() {
            self.spare = self.blocks.remove(&key);
        } else if block.len() < BLOCK / 4 && self.blocks.len() > 1 {
            self.merge_small(key);
        }
        true
    }

    /// Folds the block under `key`, grown small by removals, into a neighbour it fits in: a
    /// few long-held entries among many released ones must not each keep a block of 64.
    fn merge_small(&mut self, key: T) {
        let len = self.blocks[&key].len();
        let fits = |(k, b): (&T, &Vec<T>)| (len + b.len() <= BLOCK).then_some(*k);
        let next = self.blocks.range((Excluded(key), Unbounded)).next();
        let (into, from) = match next.and_then(fits) {
            Some(next) => (key, next),
            None => match self.blocks.range(..key).next_back().and_then(fits) {
                Some(prev) => (prev, key),
                None => return,
            },
        };
        // All of `from` lies above all of `into`, and `into` keeps its key.
        let moved = self.blocks.remove(&from).unwrap_or_default();
        if let Some(block) = self.blocks.get_mut(&into) {
            block.extend_from_slice(&moved);
        }
        self.recycle(moved);
    }

    fn recycle(&mut self, mut block: Vec<T>) {
        if self.spare.is_none() && block.capacity() == BLOCK {
            block.clear();
            self.spare = Some(block);
        }
    }

    pub fn pop_first(&mut self) -> Option<T> {
        let mut first = self.blocks.first_entry()?;
        let x = first.get_mut().remove(0);
        if first.get().is_empty() {
            self.spare = Some(first.remove());
        }
        Some(x)
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.blocks.values().flatten().copied()
    }

    /// A block of its own for `x`, in the spare block if there is one.
    fn start_block(&mut self, x: T) {
        let block = match self.spare.take() {
            Some(mut block) => {
                block.push(x);
                block
            }
            None => new_block(&[x]),
        };
        self.blocks.insert(x, block);
    }
}

fn new_block<T: Copy>(from: &[T]) -> Vec<T> {
    let mut block = Vec::with_capacity(BLOCK);
    block.extend_from_slice(from);
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    fn check(set: &BlockSet<(u64, usize)>, model: &BTreeSet<(u64, usize)>) {
        assert_eq!(set.len(), model.len());
        assert_eq!(set.first(), model.first().copied());
        assert!(set.iter().eq(model.iter().copied()));
        let mut below = None;
        for (key, block) in &set.blocks {
            assert!(!block.is_empty() && block.len() <= BLOCK);
            assert!(*key <= block[0]);
            assert!(below.is_none_or(|b| b < *key));
            assert!(block.windows(2).all(|w| w[0] < w[1]));
            below = Some(block[block.len() - 1]);
        }
    }

    /// Random operations against a BTreeSet, in the patterns the index sees: increasing
    /// deadlines (one ttl), a few ttls mixed, and removals anywhere.
    #[test]
    fn behaves_as_a_btreeset() {
        for seed in 0..40u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut set = BlockSet::new();
            let mut model = BTreeSet::new();
            let mut now = 0u64;
            let ttls = [100, 1_000 + seed, 30_000];
            for step in 0..4_000usize {
                now += rng.gen_range(0..3);
                let roll = rng.gen_range(0..10);
                if roll < 5 {
                    let ttl = ttls[rng.gen_range(0..(1 + seed as usize % 3))];
                    let x = (now + ttl, rng.gen_range(0..64usize) * 16);
                    assert_eq!(set.insert(x), model.insert(x), "insert {x:?}");
                } else if roll < 8 && !model.is_empty() {
                    let nth = rng.gen_range(0..model.len());
                    let x = *model.iter().nth(nth).unwrap();
                    assert_eq!(set.remove(&x), model.remove(&x));
                    assert!(!set.remove(&x));
                } else if roll < 9 {
                    assert_eq!(set.pop_first(), model.pop_first());
                } else {
                    let x = (rng.gen_range(0..now + 40_000), 8);
                    assert_eq!(set.remove(&x), model.remove(&x));
                }
                if step % 97 == 0 {
                    check(&set, &model);
                }
            }
            check(&set, &model);
            while let Some(x) = model.pop_first() {
                assert_eq!(set.pop_first(), Some(x));
            }
            assert_eq!(set.pop_first(), None);
            assert!(set.blocks.is_empty());
        }
    }

    /// Most entries released, a few held: the survivors gather in few blocks instead of
    /// each keeping a block of 64 alive.
    #[test]
    fn sparse_survivors_share_blocks() {
        let mut set = BlockSet::new();
        let n = 64 * 200u64;
        for i in 0..n {
            set.insert(i);
        }
        for i in (0..n).filter(|i| i % 100 != 0) {
            assert!(set.remove(&i));
        }
        let survivors = set.len();
        assert_eq!(survivors, 128);
        assert!(
            set.blocks.len() <= survivors / (BLOCK / 4) + 2,
            "{} blocks for {survivors} entries",
            set.blocks.len()
        );
        assert!(set.iter().eq((0..n).filter(|i| i % 100 == 0)));
    }

    #[test]
    fn increasing_inserts_fill_their_blocks() {
        let mut set = BlockSet::new();
        for i in 0..10 * BLOCK as u64 {
            set.insert(i);
        }
        assert_eq!(set.blocks.len(), 10);
        assert!(set.blocks.values().all(|b| b.len() == BLOCK));
        // Inserting below the first element, or into a full block, keeps the order.
        set.insert(u64::MAX);
        assert!(set.insert(1_000_000));
        let mut set2 = BlockSet::new();
        for i in (0..200u64).rev() {
            set2.insert(i * 2);
        }
        set2.insert(101);
        assert!(set2.iter().eq((0..200u64)
            .map(|i| i * 2)
            .chain([101])
            .collect::<BTreeSet<_>>()));
    }
}
