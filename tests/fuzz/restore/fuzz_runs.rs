//! The seeded fuzz runs: random bodies, mutated exclusive and shared DUMPs, and malformed
//! commands and waits, thousands of iterations each under [`Fuzz::run`]'s memory check.
//! `FUZZ_SEED` and `FUZZ_RESTORES` replay and resize them.

use std::io::Write;
use std::net::TcpStream;

use crate::common::dump::{with_trailer, Dump, LockBody};
use crate::common::*;
use crate::restore::fuzz_server::Fuzz;
use crate::restore::interesting_values::random_bytes;
use crate::restore::mutations::mutated_body;
use crate::restore::random_bodies::random_body;
use crate::restore::rules::Expect;
use crate::restore::samples::{samples, shared_samples};
use crate::restore::{env_u64, BATCH, DEFAULT_RESTORES, DEFAULT_SEED};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn restore_of_random_bodies_with_a_valid_checksum() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (random bodies): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut f = Fuzz::new();
    let s = samples(&mut f.con);
    f.run(iters, |f, i| {
        let body = random_body(&mut rng, &s[0]);
        let version = if rng.gen_bool(0.95) {
            s[0].rdb_version
        } else {
            rng.gen()
        };
        f.what = format!("random body #{i} {body:02x?} version {version:02x?}");
        f.restore("k", &with_trailer(&body, version), None);
    });
    assert!(f.tally.refused > 0);
}

/// Field edits with a known outcome, by what the rules say.
#[derive(Debug, Default)]
struct Known {
    edits: u64,
    refused: u64,
    /// Loadable, by encoding version.
    loaded: [u64; 4],
    /// Loadable shared locks of two holds or more.
    loaded_shared: u64,
}

impl Known {
    fn note(&mut self, body: &[u8], expect: &Expect) {
        self.edits += 1;
        match expect {
            Expect::Refused => self.refused += 1,
            Expect::Loaded(l) => {
                let v = LockBody::parse(body).map_or(0, |b| b.encver() as usize);
                self.loaded[v.min(3)] += 1;
                self.loaded_shared += (l.mode == "shared" && l.holds.len() > 1) as u64;
            }
        }
    }
}

/// Runs `iters` mutated DUMPs of `samples` against `f`; what the field edits were.
fn mutation_run(f: &mut Fuzz, samples: &[Dump], seed: u64, iters: u64, v3: bool) -> Known {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut known = Known::default();
    f.run(iters, |f, i| {
        let s = &samples[rng.gen_range(0..samples.len())];
        let (body, expect) = mutated_body(&mut rng, s, v3);
        let keep_crc = rng.gen_bool(0.03) && body != s.body;
        let payload = if keep_crc {
            // The original trailer on a changed body: the checksum must catch it.
            let orig = with_trailer(&s.body, s.rdb_version);
            let mut p = body.clone();
            p.extend_from_slice(&orig[s.body.len()..]);
            p
        } else {
            with_trailer(&body, s.rdb_version)
        };
        f.what = format!("mutation #{i} {body:02x?} (expect {expect:?}, stale crc {keep_crc})");
        let expect = expect.filter(|_| !keep_crc);
        let ok = f.restore("k", &payload, expect.as_ref());
        if keep_crc && ok {
            f.fail("a payload with a wrong checksum was accepted");
        }
        if let Some(want) = &expect {
            known.note(&body, want);
        }
    });
    println!("  field edits with a known outcome: {known:?}");
    known
}

#[test]
fn restore_of_mutated_lock_dumps() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (mutated DUMPs): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut f = Fuzz::new();
    let samples = samples(&mut f.con);
    let known = mutation_run(&mut f, &samples, seed ^ 0x5a5a, iters, false);
    // About 30% of the mutations are field edits; of those, about a third load, of every
    // version.
    let loaded: u64 = known.loaded.iter().sum();
    assert!(
        loaded > iters / 20
            && known.loaded[1] > iters / 200
            && known.loaded[2] > iters / 200
            && known.loaded[3] > iters / 50
            && known.refused > iters / 20,
        "too few field edits with a known outcome: {known:?}"
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0);
}

/// Mutated DUMPs of shared locks of several holds (version 3): bad modes, counts of 0,
/// exclusive with 2 holds or more, a hold's fence above the key's last fence, lists of holds
/// cut short, huge counts, tokens empty or over 256 bytes, leases over ten years, and bytes
/// flipped, cut, inserted. Every one is refused or restores as a consistent lock with the
/// holds the rules say, the server stays up, and memory does not grow.
#[test]
fn restore_of_mutated_shared_dumps() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (mutated shared DUMPs): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut f = Fuzz::new();
    let samples = shared_samples(&mut f.con);
    let known = mutation_run(&mut f, &samples, seed ^ 0x5ea7, iters, true);
    assert!(
        known.loaded_shared > iters / 50 && known.refused > iters / 10,
        "too few field edits with a known outcome: {known:?}"
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0 && f.tally.locks_exercised > 0);
}

/// A long run of malformed and well-formed `LOCK.*` commands, `WAIT`s that time out and
/// waiters that hang up, with `FLUSHALL` between batches: `used_memory` must not grow.
#[test]
fn long_runs_of_bad_commands_and_waits_do_not_grow_memory() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES) * 2;
    println!("memory under commands: FUZZ_SEED={seed} iterations={iters}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0xa11c);
    let mut f = Fuzz::new();
    let port = f.server.port;
    // Redis 7.0 gives every blocked module client two "temp clients" (~17 KiB each with
    // their reply buffers, not counted as clients' memory) from a pool that keeps 8 spare
    // ones (modulesCron frees the rest once a second); a timer or server event borrows one
    // more for its context. The pool so grows and shrinks with the number of clients blocked
    // at once, which would read as memory coming and going. This run blocks at most 3 at
    // once (2 hangers and this connection): 6 temp clients and one for a timer stay within
    // the 8 spare ones, so the pool neither grows nor shrinks. Block 3 once first, so that it
    // holds its 8 before the first measurement.
    f.saturate_temp_clients(3);
    let mut hangers: Vec<TcpStream> = Vec::new();
    f.run(iters, |f, i| {
        let key = format!("k{}", rng.gen_range(0..4));
        let k = || -> Vec<u8> { key.clone().into_bytes() };
        let tok = format!("t{}", rng.gen_range(0..3));
        let t = || -> Vec<u8> { tok.clone().into_bytes() };
        // Waiters are connections: they must all be gone before the memory is measured at
        // the end of each batch (batches of `Fuzz::run`; the last one may be shorter).
        let last_of_batch = i % BATCH == BATCH - 1 || i + 1 == iters;
        let args: Vec<Vec<u8>> = match rng.gen_range(0..12) {
            0 => vec!["LOCK.ACQUIRE".into(), k(), t(), "60000".into()],
            1 => vec!["LOCK.ACQUIRE".into(), k(), t(), "5".into()],
            // A wait that times out (the holder is another token) or is granted at once.
            2 => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                t(),
                "60000".into(),
                "WAIT".into(),
                "1".into(),
            ],
            3 => vec!["LOCK.RELEASE".into(), k(), t()],
            4 => vec!["LOCK.EXTEND".into(), k(), t(), "30000".into()],
            5 => vec!["LOCK.FENCE".into(), k(), t()],
            6 => vec!["LOCK.INFO".into(), k()],
            7 => vec!["DEL".into(), k()],
            8 => {
                // A waiter on its own socket that hangs up before (or after) it is served.
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let req = format!(
                    "*6\r\n$12\r\nLOCK.ACQUIRE\r\n${}\r\n{key}\r\n$1\r\nw\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
                    key.len()
                );
                s.write_all(req.as_bytes()).unwrap();
                hangers.push(s);
                if hangers.len() > 2 || rng.gen_bool(0.3) {
                    hangers.remove(0);
                }
                if last_of_batch {
                    hangers.clear();
                }
                // The server has seen every hang-up before the next command, so that no
                // more than 3 clients are ever blocked at once (see above).
                f.await_clients(1 + hangers.len());
                return;
            }
            // Malformed: bad numbers, bad tokens, bad options, wrong arity.
            9 => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                vec![b'x'; rng.gen_range(255..300)],
                ["0", "-1", "1e3", "", "99999999999999999999"][rng.gen_range(0..5)].into(),
                ["WAIT", "NX", "wait"][rng.gen_range(0..3)].into(),
            ],
            10 => vec![
                ["LOCK.EXTEND", "LOCK.RELEASE", "LOCK.FENCE", "LOCK.INFO", "LOCK.APPLY"]
                    [rng.gen_range(0..5)]
                .into(),
                k(),
                random_bytes(&mut rng, 40),
                random_bytes(&mut rng, 8),
                random_bytes(&mut rng, 8),
                random_bytes(&mut rng, 8),
            ],
            _ => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                Vec::new(),
                "100".into(),
                "WAIT".into(),
                "-5".into(),
            ],
        };
        f.what = format!("command #{i}");
        match run_raw(&mut f.con, &args) {
            Ok(_) => {}
            Err(e) if e.starts_with("ERR ") || e.starts_with("WRONGTYPE") => {}
            Err(e) => f.fail(&format!("{args:?}: {e}")),
        }
        if last_of_batch {
            hangers.clear();
            f.await_clients(1);
        }
    });
}
