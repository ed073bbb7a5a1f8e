//! A seeded fuzz of malformed argument vectors to every LOCK.* command: the server stays up,
//! every reply is an error with a code or a valid reply, and a lock the fuzz has no token for
//! never changes. `LOCK.GUARD` calls carry that lock's fence half the time, with guarded
//! commands (some refused, some not) whose arguments never name it.
//!
//! `LOCK.ACQUIRE` gets the options `SHARED`, `LIMIT n` and `WAIT t` in any order (and any
//! damage), `LIMIT` with counts at and around its bounds (0, 1, 4, -1, 2147483648,
//! 2147483649, huge ones); `LOCK.HOLDERS` is fuzzed too. Two locks the fuzz has no token for
//! stay as they are: one held exclusively, and one held shared by two holders with an
//! exclusive request queued behind them, which keeps every request of the fuzz out (a shared
//! one may not pass a waiter, whatever its `LIMIT`). Both are compared field by field, with
//! `LOCK.INFO` and `LOCK.HOLDERS`, throughout the run.
//!
//! `FUZZ_SEED=<n>` replays a run; `FUZZ_COMMANDS=<n>` changes its length.
//!
//! Files: the test is here; `argument_vectors` generates the fuzzed commands, and `checks`
//! checks their replies and the locks the fuzz has no token for, and counts what it met.

mod argument_vectors;
mod checks;

use crate::cmd;
use std::time::{Duration, Instant};

use crate::common::*;
use argument_vectors::argv;
use checks::{assert_unchanged, check_reply, info_field, look, Tally};
use rand::rngs::StdRng;
use rand::SeedableRng;
use redis::Value;

const GUARD_KEY: &str = "guard";
const GUARD_TOKEN: &str = "guard-token-7f3a";
/// A lock held shared by `SHARED_TOKENS`, with `SHARED_WAITER` queued for it exclusively.
const SHARED_KEY: &str = "shared";
const SHARED_TOKENS: [&str; 2] = ["shared-token-1c9e", "shared-token-55d0"];
const SHARED_WAITER: &str = "shared-waiter-0b42";

/// The fence of the lock at `GUARD_KEY`, once the test has it.
static GUARD_FENCE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();

use crate::common::env::env_u64;

#[test]
fn fuzz_malformed_arguments() {
    let seed = env_u64("FUZZ_SEED", 0x00C0_FFEE_5EED);
    let n = env_u64("FUZZ_COMMANDS", 5_000);
    println!("fuzz seed {seed} ({n} commands); replay with FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut s = Server::new();
    let mut c = s.conn();
    cmd!(&mut c, "SET", "str", "v").unwrap();
    let guard_fence = acquire(&mut c, GUARD_KEY, GUARD_TOKEN, 600_000).unwrap();
    GUARD_FENCE.set(guard_fence).unwrap();
    // The shared lock and the exclusive request that keeps the fuzz out of it.
    let mut shared_fences = Vec::new();
    for t in SHARED_TOKENS {
        let f = cmd!(&mut c, "LOCK.ACQUIRE", SHARED_KEY, t, 600_000, "SHARED");
        let Ok(Value::Int(f)) = f else {
            panic!("LOCK.ACQUIRE {SHARED_KEY} {t} SHARED: {f:?}");
        };
        shared_fences.push(f);
    }
    let mut shared_waiter = Waiter::join(&s, SHARED_KEY, SHARED_WAITER, 600_000, 0);
    let mut last = [look(&mut c, GUARD_KEY), look(&mut c, SHARED_KEY)];
    {
        let sh = last[1].info.as_ref().unwrap();
        assert_eq!(
            (sh.mode.as_str(), sh.holders, sh.waiters),
            ("shared", 2, 1),
            "{sh:?}"
        );
    }
    let started = Instant::now();
    let (mut oks, mut errs) = (0u64, 0u64);
    let mut tally = Tally::default();

    for i in 0..n {
        let args = argv(&mut rng);
        let r = run_raw(&mut c, &args);
        check_reply(&args, &r);
        tally.add(&args, &r);
        if r.is_ok() {
            oks += 1;
        } else {
            errs += 1;
        }
        if i % 50 == 49 || i + 1 == n {
            s.assert_alive();
            assert_eq!(cmd!(&mut c, "PING"), Ok(Value::SimpleString("PONG".into())));
            let now = [look(&mut c, GUARD_KEY), look(&mut c, SHARED_KEY)];
            assert_unchanged(GUARD_KEY, &last[0], &now[0]);
            assert_unchanged(SHARED_KEY, &last[1], &now[1]);
            last = now;
            assert!(
                !shared_waiter.has_reply(),
                "the exclusive request queued for {SHARED_KEY} was answered"
            );
            assert_eq!(
                cmd!(&mut c, "GET", "str"),
                Ok(Value::BulkString(b"v".to_vec()))
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "fuzz took too long (stuck at command {i})"
        );
    }
    println!("{oks} valid replies, {errs} error replies; {tally:?}");
    assert!(
        n < 5_000
            || tally.shared_granted > 0
                && tally.limit_granted > 0
                && tally.limit_range > 0
                && tally.limit_not_integer > 0
                && tally.holders_shared > 0,
        "degenerate fuzz of the shared options: {tally:?}"
    );
    let runs = info_field(&mut c, "lock_guarded_runs");
    let refusals = info_field(&mut c, "lock_guarded_refusals");
    println!("{runs} guarded commands ran, {refusals} refused by their fence");
    assert!(
        runs > 0 && refusals > 0,
        "degenerate fuzz: {runs} guarded runs, {refusals} refusals"
    );
    // The generator must exercise both paths to mean anything.
    assert!(
        oks > n / 20 && errs > n / 20,
        "degenerate fuzz: {oks} ok, {errs} errors"
    );
    let g = info(&mut c, GUARD_KEY).unwrap();
    assert_eq!(g.holder.as_deref(), Some(GUARD_TOKEN.as_bytes()));
    assert_eq!(g.fence, guard_fence);
    let sh = look(&mut c, SHARED_KEY);
    let holds: Vec<(Vec<u8>, i64)> = sh
        .holds
        .unwrap()
        .into_iter()
        .map(|h| (h.token, h.fence))
        .collect();
    let want: Vec<(Vec<u8>, i64)> = SHARED_TOKENS
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .zip(shared_fences.iter().copied())
        .collect();
    assert_eq!(holds, want, "{SHARED_KEY} after the fuzz");
    assert_eq!(sh.info.unwrap().waiters, 1);
    // The server still works normally, and can persist whatever the fuzz left.
    let f = acquire(&mut c, "after", "t", 10_000).unwrap();
    assert!(f > guard_fence);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    assert_eq!(cmd!(&mut c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    assert_eq!(info(&mut c, GUARD_KEY).unwrap().fence, guard_fence);
    // The reload answers the queued request null; the shared holds are loaded as they were.
    assert_eq!(
        shared_waiter.reply_within(Duration::from_secs(5)),
        Some(Reply::Null)
    );
    let sh = look(&mut c, SHARED_KEY);
    let fences: Vec<i64> = sh.holds.unwrap().iter().map(|h| h.fence).collect();
    assert_eq!(fences, shared_fences, "{SHARED_KEY} after DEBUG RELOAD");
    s.assert_alive();
}
