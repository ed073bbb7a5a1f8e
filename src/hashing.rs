//! Hashers for the module's tables. A table keyed by what clients choose (key names, tokens)
//! keeps the standard library's keyed SipHash, so that no client can flood one bucket. The
//! others are looked up several times per command and hold only what the module or the
//! server chose, so they hash cheaply: [`Fnv`] for the server's command names, [`Mix`] for
//! integers (waiter ids, client handles, database numbers).

use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a over bytes.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FnvBuild = BuildHasherDefault<Fnv>;

/// The SplitMix64 finalizer over the integers written: every input bit reaches the top bits
/// (where the hash table finds its tag) and the bottom ones (its bucket), so that sequential
/// ids and aligned pointers spread as well as random ones.
#[derive(Default)]
pub struct Mix(u64);

impl Mix {
    fn add(&mut self, n: u64) {
        let mut z = (self.0 ^ n).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }
}

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_i32(&mut self, n: i32) {
        self.add(n as u32 as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type MixBuild = BuildHasherDefault<Mix>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    /// The table's tag is the hash's top 7 bits and its bucket the bottom ones: both must
    /// vary for sequential ids and for 16-byte-aligned addresses.
    #[test]
    fn sequential_and_aligned_integers_spread_over_top_and_bottom_bits() {
        let b = MixBuild::default();
        for step in [1u64, 16, 4096] {
            let hashes: Vec<u64> = (0..1024u64).map(|i| b.hash_one(i * step)).collect();
            let tops: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            let bottoms: HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
            assert_eq!(tops.len(), 128, "step {step}: top 7 bits");
            assert!(
                bottoms.len() > 600,
                "step {step}: {} buckets",
                bottoms.len()
            );
        }
    }

    #[test]
    fn fnv_is_fnv_1a() {
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}
