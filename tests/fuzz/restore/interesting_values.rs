//! Values around the edges of what `RESTORE` accepts, for the generators: numbers, fences,
//! leases, version-1 deadlines, tokens, modes and counts of holds, and random bytes.

use crate::common::dump::{EXCLUSIVE, SHARED};
use crate::restore::{now_ms, MAX_FENCE, MAX_LEFT_MS, MAX_TOKEN};
use rand::rngs::StdRng;
use rand::Rng;

pub(crate) fn interesting_u64(rng: &mut StdRng) -> u64 {
    let now_ms = now_ms() as u64;
    match rng.gen_range(0..16) {
        0 => 0,
        1 => 1,
        2 => rng.gen_range(0..64),
        3 => now_ms + rng.gen_range(0..120_000),
        4 => now_ms.saturating_sub(rng.gen_range(0..120_000)),
        5 => (now_ms << 11) + rng.gen_range(0..1_000_000),
        6 => i64::MAX as u64,
        7 => (i64::MAX as u64) + 1,
        8 => u64::MAX,
        9 => (-1i64) as u64,
        10 => 1 << rng.gen_range(0..64),
        11 => MAX_FENCE + rng.gen_range(1..=3),
        12 => ((now_ms + rng.gen_range(0..7_200_000)) << 11) + rng.gen_range(0..2048),
        13 => (now_ms as i64 + [-1, 1][rng.gen_range(0..2)] * 3_600_000) as u64,
        _ => rng.gen(),
    }
}

/// A fence for a field edit. Never a valid one within 2^24 of 2^53-1: a lock restored with
/// such a fence leaves the server no fence to issue, for any key, ever after (the high-water
/// mark never goes down), which would end the run's checks; the edge has its own test
/// (`restored_fences_at_the_top_of_the_range`).
pub(crate) fn interesting_fence(rng: &mut StdRng) -> u64 {
    let f = interesting_u64(rng);
    if (MAX_FENCE - (1 << 24)..=MAX_FENCE).contains(&f) {
        MAX_FENCE + 1
    } else {
        f
    }
}

/// A lease as deadline - saved_at, around the edges of what `RESTORE` accepts.
pub(crate) fn interesting_left(rng: &mut StdRng) -> i64 {
    match rng.gen_range(0..14) {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => rng.gen_range(1..120_000),
        4 => -rng.gen_range(1..120_000),
        5 => MAX_LEFT_MS,
        6 => MAX_LEFT_MS + 1,
        7 => MAX_LEFT_MS - rng.gen_range(1..1_000_000),
        8 => MAX_LEFT_MS + rng.gen_range(1..1_000_000),
        9 => i64::MAX,
        10 => i64::MIN,
        11 => -MAX_LEFT_MS,
        12 => 20_000,
        _ => rng.gen(),
    }
}

/// An absolute version-1 deadline, kept a day away from the ten-year bound (which moves
/// with the clock).
pub(crate) fn interesting_v1_deadline(rng: &mut StdRng) -> u64 {
    let now = now_ms();
    let d = match rng.gen_range(0..8) {
        0 => now + rng.gen_range(1..120_000),
        1 => now - rng.gen_range(0..120_000),
        2 => now + MAX_LEFT_MS - 86_400_000,
        3 => now + MAX_LEFT_MS + 86_400_000,
        4 => now - 3_600_000 + 20_000,
        _ => interesting_u64(rng) as i64,
    };
    let edge = now + MAX_LEFT_MS;
    if (edge - 86_400_000 + 1..edge + 86_400_000).contains(&d) {
        (edge + 86_400_000) as u64
    } else {
        d as u64
    }
}

pub(crate) fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.gen()).collect()
}

/// A token of a valid length or not: empty, 256 bytes, 257, up to 300, or 1 to 256 random
/// bytes.
pub(crate) fn interesting_token(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..6) {
        0 => Vec::new(),
        1 => vec![b'x'; MAX_TOKEN],
        2 => vec![b'x'; MAX_TOKEN + 1],
        3 => random_bytes(rng, 300),
        _ => {
            let n = rng.gen_range(1..=MAX_TOKEN);
            (0..n).map(|_| rng.gen()).collect()
        }
    }
}

/// A version-3 mode: mostly a valid one, else 2, 3, 255, 2^64-1 or anything.
pub(crate) fn interesting_mode(rng: &mut StdRng) -> u64 {
    match rng.gen_range(0..8) {
        0..=1 => EXCLUSIVE,
        2..=3 => SHARED,
        4 => rng.gen_range(2..=3),
        5 => 255,
        6 => u64::MAX,
        _ => rng.gen(),
    }
}

/// A count of holds for a list of `n`: right, one off, 0, or huge.
pub(crate) fn interesting_count(rng: &mut StdRng, n: u64) -> u64 {
    match rng.gen_range(0..9) {
        0 => 0,
        1 => n.saturating_sub(1),
        2 => n + 1,
        3 => n + rng.gen_range(2..100),
        4 => 1 << 32,
        5 => u64::MAX,
        6 => i64::MAX as u64 + 1,
        7 => rng.gen(),
        _ => n,
    }
}
