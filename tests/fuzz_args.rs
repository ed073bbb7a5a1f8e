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

mod common;

use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::Value;

const GUARD_KEY: &str = "guard";
const GUARD_TOKEN: &str = "guard-token-7f3a";
/// A lock held shared by `SHARED_TOKENS`, with `SHARED_WAITER` queued for it exclusively.
const SHARED_KEY: &str = "shared";
const SHARED_TOKENS: [&str; 2] = ["shared-token-1c9e", "shared-token-55d0"];
const SHARED_WAITER: &str = "shared-waiter-0b42";
const COMMANDS: &[&str] = &[
    "LOCK.ACQUIRE",
    "LOCK.RELEASE",
    "LOCK.EXTEND",
    "LOCK.FENCE",
    "LOCK.INFO",
    "LOCK.APPLY",
    "LOCK.GUARD",
    "LOCK.HOLDERS",
    "lock.acquire",
    "Lock.Fence",
    "lock.guard",
    "lock.holders",
    // Twice as often as the others: it has the most options.
    "LOCK.ACQUIRE",
];

/// The fence of the lock at `GUARD_KEY`, once the test has it.
static GUARD_FENCE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();

/// What `LOCK.GUARD` is asked to run: commands it runs, and ones it refuses.
const GUARDED: &[&str] = &[
    "SET",
    "GET",
    "INCR",
    "HSET",
    "DEL",
    "set",
    "BLPOP",
    "XREAD",
    "MULTI",
    "EXEC",
    "SUBSCRIBE",
    "EVAL",
    "LOCK.RELEASE",
    "LOCK.GUARD",
    "lock.acquire",
    "NOSUCH",
    "",
];

/// An argument of a guarded command, which may create a key of any type: kept out of the
/// names the fuzz uses for locks (and of the key whose value it checks) by a prefix, which
/// `argv` also puts on any argument damage leaves there.
fn guarded_arg(rng: &mut StdRng) -> Vec<u8> {
    [&b"g:"[..], &any_arg(rng)].concat()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0 | 1 => GUARD_KEY.into(),
        2 => SHARED_KEY.into(),
        3..=5 => format!("f{}", rng.gen_range(0..3)).into_bytes(),
        6 => "str".into(),
        7 => Vec::new(),
        8 => (0..rng.gen_range(1..40)).map(|_| rng.gen()).collect(),
        _ => "x".repeat(rng.gen_range(200..2000)).into_bytes(),
    }
}

fn number(rng: &mut StdRng) -> Vec<u8> {
    const FIXED: &[&str] = &[
        "0",
        "1",
        "-1",
        "2",
        "100",
        "86400000",
        "86400001",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "99999999999999999999999999999",
        "1e3",
        "0x10",
        " 5",
        "5 ",
        "+5",
        "007",
        "1.0",
        "-0",
        "nan",
        "inf",
        "",
        "\u{0}5",
        "5\u{0}",
        "2147483647",
        "2147483648",
        "2147483649",
        "-2147483648",
        "4294967296",
        "4294967297",
    ];
    match rng.gen_range(0..4) {
        0 => FIXED[rng.gen_range(0..FIXED.len())].into(),
        1 => rng
            .gen_range(-1_000_000i64..1_000_000)
            .to_string()
            .into_bytes(),
        2 => rng.gen::<i64>().to_string().into_bytes(),
        _ => rng.gen_range(1..5_000u64).to_string().into_bytes(),
    }
}

/// A `LIMIT` count: mostly in and around its bounds (1 to 2147483648), else any number.
fn limit(rng: &mut StdRng) -> Vec<u8> {
    const FIXED: &[&str] = &[
        "0",
        "-1",
        "1",
        "2",
        "3",
        "4",
        "2147483647",
        "2147483648",
        "2147483649",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "99999999999999999999999999999",
        "-0",
        "+1",
        "1.0",
        "",
    ];
    match rng.gen_range(0..4) {
        0 | 1 => FIXED[rng.gen_range(0..FIXED.len())].into(),
        2 => rng.gen_range(0..6).to_string().into_bytes(),
        _ => number(rng),
    }
}

fn token(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..9) {
        0 => Vec::new(),
        1 => vec![b't'; 256],
        2 => vec![b't'; 257],
        3 => vec![b'z'; 300],
        4 => (0..rng.gen_range(1..300)).map(|_| rng.gen()).collect(),
        5 => GUARD_TOKEN[..GUARD_TOKEN.len() - 1].into(), // a near miss
        6 => SHARED_TOKENS[0][..SHARED_TOKENS[0].len() - 1].into(), // a near miss
        _ => format!("tok{}", rng.gen_range(0..4)).into_bytes(),
    }
}

fn word(rng: &mut StdRng) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "WAIT",
        "wait",
        "Wait",
        "NX",
        "PX",
        "EX",
        "KEEPTTL",
        "TIMEOUT",
        "WAITS",
        "W",
        "",
        "-",
        "FENCE",
        "TTL",
        "SHARED",
        "shared",
        "Shared",
        "LIMIT",
        "limit",
        "SHARE",
        "SHAREDX",
        "LIMITS",
        "EXCLUSIVE",
        "READ",
    ];
    WORDS[rng.gen_range(0..WORDS.len())].into()
}

fn any_arg(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..5) {
        0 => key(rng),
        1 => number(rng),
        2 => token(rng),
        3 => word(rng),
        _ => (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
    }
}

/// A mostly well-shaped argument vector with random damage.
fn argv(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let name = COMMANDS[rng.gen_range(0..COMMANDS.len())];
    let mut a: Vec<Vec<u8>> = vec![name.into()];
    if rng.gen_bool(0.15) {
        // Random arity, random everything.
        for _ in 0..rng.gen_range(0..9) {
            a.push(any_arg(rng));
        }
    } else {
        a.push(key(rng));
        match name.to_uppercase().as_str() {
            "LOCK.ACQUIRE" => {
                a.push(token(rng));
                a.push(number(rng));
                if rng.gen_bool(0.3) {
                    for _ in 0..rng.gen_range(0..3) {
                        a.push(word(rng));
                        if rng.gen_bool(0.8) {
                            a.push(number(rng));
                        }
                    }
                } else {
                    // The options, each at most once (sometimes twice), in any order, often
                    // after a valid ttl.
                    if rng.gen_bool(0.5) {
                        a[3] = rng.gen_range(1..100_000u64).to_string().into_bytes();
                    }
                    let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
                    let shared: &[&str] = &["SHARED", "shared", "Shared"];
                    let limit_word: &[&str] = &["LIMIT", "limit"];
                    let wait_word: &[&str] = &["WAIT", "wait"];
                    if rng.gen_bool(0.6) {
                        groups.push(vec![shared[rng.gen_range(0..shared.len())].into()]);
                    }
                    if rng.gen_bool(0.5) {
                        let w = limit_word[rng.gen_range(0..limit_word.len())];
                        groups.push(vec![w.into(), limit(rng)]);
                    }
                    if rng.gen_bool(0.3) {
                        let w = wait_word[rng.gen_range(0..wait_word.len())];
                        groups.push(vec![w.into(), number(rng)]);
                    }
                    if !groups.is_empty() && rng.gen_bool(0.1) {
                        let again = groups[rng.gen_range(0..groups.len())].clone();
                        groups.push(again);
                    }
                    groups.shuffle(rng);
                    a.extend(groups.into_iter().flatten());
                }
            }
            "LOCK.RELEASE" | "LOCK.FENCE" => a.push(token(rng)),
            "LOCK.EXTEND" => {
                a.push(token(rng));
                a.push(number(rng));
            }
            "LOCK.APPLY" => {
                a.push(token(rng));
                a.push(number(rng));
                a.push(number(rng));
            }
            "LOCK.GUARD" => {
                match GUARD_FENCE.get() {
                    Some(f) if rng.gen_bool(0.5) => a.push(f.to_string().into_bytes()),
                    _ => a.push(number(rng)),
                }
                a.push(GUARDED[rng.gen_range(0..GUARDED.len())].into());
                for _ in 0..rng.gen_range(0..4) {
                    a.push(guarded_arg(rng));
                }
            }
            _ => {}
        }
        // Damage: drop, add or replace an argument.
        match rng.gen_range(0..6) {
            0 if a.len() > 1 => {
                let i = rng.gen_range(1..a.len());
                a.remove(i);
            }
            1 => a.push(any_arg(rng)),
            2 => {
                let i = rng.gen_range(1..a.len());
                a[i] = any_arg(rng);
            }
            _ => {}
        }
    }
    defuse_waits(&mut a);
    if a[0].eq_ignore_ascii_case(b"LOCK.GUARD") {
        // Damage may have put any argument after the guarded command's name.
        for arg in a.iter_mut().skip(4) {
            if !arg.starts_with(b"g:") {
                *arg = [&b"g:"[..], arg].concat();
            }
        }
    }
    a
}

/// The WAIT option blocks once it is implemented: keep any wait that could be valid to 1ms
/// (`WAIT 0` would block forever on a held key), wherever it stands among the other options
/// (`SHARED`, `LIMIT n`): a shared request waits like an exclusive one, behind the queued
/// exclusive request of `SHARED_KEY` for instance.
fn defuse_waits(a: &mut [Vec<u8>]) {
    for i in 1..a.len().saturating_sub(1) {
        if a[i].eq_ignore_ascii_case(b"WAIT") {
            let v = String::from_utf8_lossy(&a[i + 1]).trim().to_string();
            let v = v.trim_start_matches('+');
            let maybe_valid = v.parse::<i128>().map(|n| n >= 0).unwrap_or(false)
                || v.parse::<f64>().map(|n| n >= 0.0).unwrap_or(false)
                || v == "-0";
            if maybe_valid {
                a[i + 1] = b"1".to_vec();
            }
        }
    }
}

fn check_reply(args: &[Vec<u8>], r: &Result<Value, String>) {
    let name = String::from_utf8_lossy(&args[0]).to_uppercase();
    let shown: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).chars().take(24).collect())
        .collect();
    match r {
        Err(e) => {
            let code = e.split(' ').next().unwrap_or("");
            let guard = name == "LOCK.GUARD";
            assert!(
                code == "ERR" || code == "WRONGTYPE" || (guard && code == "FENCED"),
                "{shown:?}: error without a proper code: {e:?}"
            );
            // A guarded command may meet a lock key of the fuzz's.
            if code == "WRONGTYPE" && !guard {
                assert_eq!(args[1], b"str", "{shown:?}: WRONGTYPE on a lock key: {e:?}");
            }
        }
        Ok(v) => match name.as_str() {
            "LOCK.ACQUIRE" | "LOCK.FENCE" => assert!(
                matches!(v, Value::Nil) || matches!(v, Value::Int(f) if *f > 0),
                "{shown:?}: {v:?}"
            ),
            "LOCK.RELEASE" | "LOCK.EXTEND" => assert!(
                matches!(v, Value::Int(0) | Value::Int(1)),
                "{shown:?}: {v:?}"
            ),
            "LOCK.INFO" => {
                // `parse_info` checks the six fields and that they agree with each other.
                if let Some(i) = parse_info(v) {
                    assert!(i.fence > 0 && i.waiters >= 0, "{shown:?}: {i:?}");
                    if let Some(h) = &i.holder {
                        assert!(!h.is_empty() && h.len() <= 256, "{shown:?}: {i:?}");
                    }
                }
            }
            "LOCK.HOLDERS" => {
                parse_holders(v).unwrap_or_else(|e| panic!("{shown:?}: {e}: {v:?}"));
            }
            "LOCK.APPLY" => panic!("{shown:?}: LOCK.APPLY accepted from a client: {v:?}"),
            // Whatever the guarded command replies.
            "LOCK.GUARD" => {}
            _ => unreachable!(),
        },
    }
}

/// One entry of a `LOCK.HOLDERS` reply.
#[derive(Debug, Clone, PartialEq)]
struct Hold {
    token: Vec<u8>,
    fence: i64,
    ttl: i64,
    mode: String,
}

/// Parses a `LOCK.HOLDERS` reply: null (no such key) or an array of `[token, fence, ttl,
/// mode]`, each token a bulk string of 1 to 256 bytes, each fence positive, each ttl an
/// integer of at least 0, each mode `exclusive` or `shared`; one exclusive hold alone or
/// shared holds only; no token or fence twice.
fn parse_holders(v: &Value) -> Result<Option<Vec<Hold>>, String> {
    let items = match v {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        _ => return Err("not null or an array".into()),
    };
    let mut holds = Vec::new();
    for item in items {
        let Value::Array(e) = item else {
            return Err(format!("entry {item:?} is not an array"));
        };
        let hold = match &e[..] {
            [Value::BulkString(t), Value::Int(f), Value::Int(ttl), Value::BulkString(m)] => Hold {
                token: t.clone(),
                fence: *f,
                ttl: *ttl,
                mode: String::from_utf8_lossy(m).into_owned(),
            },
            _ => return Err(format!("entry {item:?} is not [bulk, int, int, bulk]")),
        };
        let ok = !hold.token.is_empty()
            && hold.token.len() <= 256
            && hold.fence > 0
            && hold.ttl >= 0
            && (hold.mode == "exclusive" || hold.mode == "shared");
        if !ok {
            return Err(format!("entry {hold:?} out of its domain"));
        }
        holds.push(hold);
    }
    if holds.iter().any(|h| h.mode == "exclusive") && holds.len() != 1 {
        return Err("an exclusive hold next to another".into());
    }
    for (i, h) in holds.iter().enumerate() {
        if holds[..i]
            .iter()
            .any(|o| o.token == h.token || o.fence == h.fence)
        {
            return Err(format!("token or fence twice: {h:?}"));
        }
    }
    Ok(Some(holds))
}

/// A lock the fuzz has no token for, as `LOCK.INFO` and `LOCK.HOLDERS` show it.
#[derive(Debug)]
struct Seen {
    info: Option<LockInfo>,
    holds: Option<Vec<Hold>>,
    at: Instant,
}

fn look(c: &mut redis::Connection, key: &str) -> Seen {
    let info = info(c, key);
    let v = cmd!(c, "LOCK.HOLDERS", key).unwrap();
    let holds = parse_holders(&v).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}: {v:?}"));
    Seen {
        info,
        holds,
        at: Instant::now(),
    }
}

/// The lock at `key` is still `before`: the same holds (tokens, fences, kinds, in order),
/// waiters, mode and last fence, every ttl only counting down.
#[track_caller]
fn assert_unchanged(key: &str, before: &Seen, now: &Seen) {
    let elapsed = now.at.duration_since(before.at);
    assert_same_lock(&before.info, &now.info, elapsed, 200);
    let (Some(b), Some(a)) = (&before.info, &now.info) else {
        return;
    };
    assert_eq!(
        (&a.mode, a.holders),
        (&b.mode, b.holders),
        "{key}: mode or holders changed: {b:?} -> {a:?}"
    );
    let (bh, ah) = (before.holds.as_ref().unwrap(), now.holds.as_ref().unwrap());
    let shape = |hs: &[Hold]| -> Vec<(Vec<u8>, i64, String)> {
        hs.iter()
            .map(|h| (h.token.clone(), h.fence, h.mode.clone()))
            .collect()
    };
    assert_eq!(shape(ah), shape(bh), "{key}: LOCK.HOLDERS changed");
    let el = elapsed.as_millis() as i64;
    for (b, a) in bh.iter().zip(ah) {
        assert!(
            a.ttl <= b.ttl && a.ttl >= b.ttl - el - 200,
            "{key}: ttl of {:?} should only count down: {} -> {} in {el}ms",
            String::from_utf8_lossy(&a.token),
            b.ttl,
            a.ttl
        );
    }
}

/// What the fuzz met of the shared options.
#[derive(Default, Debug)]
struct Tally {
    /// `LOCK.ACQUIRE … SHARED` granted, of those with `LIMIT`.
    shared_granted: u64,
    limit_granted: u64,
    /// `LIMIT` refused: out of range, not an integer.
    limit_range: u64,
    limit_not_integer: u64,
    /// `LOCK.HOLDERS` replies with a shared hold.
    holders_shared: u64,
}

impl Tally {
    fn add(&mut self, args: &[Vec<u8>], r: &Result<Value, String>) {
        let has = |w: &[u8]| args.iter().skip(4).any(|a| a.eq_ignore_ascii_case(w));
        let acquire = args[0].eq_ignore_ascii_case(b"LOCK.ACQUIRE");
        match r {
            Ok(Value::Int(_)) if acquire && has(b"SHARED") => {
                self.shared_granted += 1;
                if has(b"LIMIT") {
                    self.limit_granted += 1;
                }
            }
            Ok(v @ Value::Array(_))
                if args[0].eq_ignore_ascii_case(b"LOCK.HOLDERS")
                    && parse_holders(v)
                        .ok()
                        .flatten()
                        .is_some_and(|hs| hs.iter().any(|h| h.mode == "shared")) =>
            {
                self.holders_shared += 1;
            }
            Err(e) if e.starts_with("ERR limit must be between") => self.limit_range += 1,
            Err(e) if e.starts_with("ERR limit is not an integer") => self.limit_not_integer += 1,
            _ => {}
        }
    }
}

fn info_field(c: &mut redis::Connection, field: &str) -> u64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(field)?
                .strip_prefix(':')?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("INFO lock has no {field}:\n{text}"))
}

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
