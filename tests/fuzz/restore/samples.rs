//! Real locks' DUMPs on the server under fuzz, which the mutations start from: exclusive
//! locks of one hold and shared locks of several, of plain, integer and LZF tokens.

use crate::cmd;
use crate::common::dump::{self, Dump, Format, Layout, ENCVER_MASK, EXCLUSIVE, SHARED};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// A real lock's DUMP on this server.
pub(crate) fn sample(c: &mut redis::Connection, tokens: &[&[u8]], ttl: u64, shared: bool) -> Dump {
    let key = "sample";
    cmd!(c, "DEL", key).unwrap();
    for (n, token) in tokens.iter().enumerate() {
        let r = if shared {
            cmd!(c, "LOCK.ACQUIRE", key, *token, ttl + n as u64, "SHARED")
        } else {
            cmd!(c, "LOCK.ACQUIRE", key, *token, ttl)
        };
        assert!(r.is_ok_and(|v| matches!(v, Value::Int(_))));
    }
    let p = dump::dump(c, key);
    cmd!(c, "DEL", key).unwrap();
    let d = Dump::read(&p);
    assert_eq!(d.encver(), dump::ENCVER, "the module dumps version 3");
    if let Some(lock) = &d.lock {
        let (_, mode, _, holds) = d.v3();
        assert_eq!(mode, if shared { SHARED } else { EXCLUSIVE });
        let got: Vec<&[u8]> = holds.iter().map(|h| &h.token[..]).collect();
        assert_eq!(got, tokens, "the holds in grant order");
        assert_eq!(
            lock.encode(),
            d.body,
            "re-encoding a parsed DUMP changes it"
        );
    }
    d
}

/// The format of a sample's payloads.
pub(crate) fn format_of(s: &Dump) -> Format {
    Format {
        type_id: s.module_id & !ENCVER_MASK,
        rdb_version: s.rdb_version,
    }
}

/// Exclusive locks of one hold. Random bytes do not compress, so they are saved as plain
/// strings; the last two are saved as an integer and LZF-compressed, and are only mutated
/// byte-wise.
pub(crate) fn samples(c: &mut redis::Connection) -> Vec<Dump> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.gen()).collect() };
    let mut v = Vec::new();
    for (token, ttl) in [
        (b"t".to_vec(), 60_000),
        (b"tok".to_vec(), 1),
        (noise(36), 60_000),
        (noise(63), 60_000),
        (noise(64), 60_000),
        (noise(256), 60_000),
        (b"12345".to_vec(), 60_000),
        (vec![b'y'; 200], 60_000),
    ] {
        v.push(sample(c, &[&token], ttl, false));
    }
    assert!(v[..6].iter().all(|s| s.lock.is_some()));
    assert!(
        v[6..].iter().all(|s| s.lock.is_none()),
        "integer and LZF tokens"
    );
    v
}

/// Marks the sample whose holds' leases are cut to a few ms (`with_short_leases`).
const SHORT_LEASES: u64 = 0;

/// `d` with its holds' deadlines at 1, 2, 3… ms after its save time, re-encoded.
fn with_short_leases(mut d: Dump) -> Dump {
    let lock = d.lock.as_mut().expect("plain tokens");
    if let Layout::V3 {
        saved_at, holds, ..
    } = &mut lock.layout
    {
        for (n, h) in holds.iter_mut().enumerate() {
            h.deadline = *saved_at + 1 + n as i64;
        }
    }
    d.body = lock.encode();
    d
}

/// Shared locks of 1 to 6 holds, of plain tokens of many lengths; the last also has an
/// integer and an LZF-compressed token, and is only mutated byte-wise.
pub(crate) fn shared_samples(c: &mut redis::Connection) -> Vec<Dump> {
    let mut rng = StdRng::seed_from_u64(13);
    let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.gen()).collect() };
    let sets: Vec<(Vec<Vec<u8>>, u64)> = vec![
        (vec![b"r1".to_vec()], 60_000),
        (vec![b"a".to_vec(), b"b".to_vec()], 60_000),
        (vec![noise(8), noise(40), noise(3)], 60_000),
        (vec![noise(64), b"x".to_vec(), noise(256)], 60_000),
        ((0..6).map(|n| noise(1 + n * 9)).collect(), 60_000),
        // Leases of 1 to 3 ms (see below): restored, they are over (or nearly).
        (vec![b"s".to_vec(), b"t".to_vec(), noise(20)], SHORT_LEASES),
        (
            vec![b"plain".to_vec(), b"12345".to_vec(), vec![b'y'; 200]],
            60_000,
        ),
    ];
    let mut v = Vec::new();
    for (tokens, ttl) in &sets {
        let tokens: Vec<&[u8]> = tokens.iter().map(|t| &t[..]).collect();
        if *ttl == SHORT_LEASES {
            // Taken with long leases, which a slow server (valgrind) cannot see end before
            // the DUMP, then cut to 1, 2 and 3 ms after the dump's save time.
            v.push(with_short_leases(sample(c, &tokens, 60_000, true)));
        } else {
            v.push(sample(c, &tokens, *ttl, true));
        }
    }
    let last = v.len() - 1;
    assert!(v[..last].iter().all(|s| s.lock.is_some()));
    assert!(v[last].lock.is_none(), "integer and LZF tokens");
    v
}
