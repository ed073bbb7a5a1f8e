//! A seeded fuzz of malformed argument vectors to every LOCK.* command: the server stays up,
//! every reply is an error with a code or a valid reply, and a lock the fuzz has no token for
//! never changes. `LOCK.GUARD` calls carry that lock's fence half the time, with guarded
//! commands (some refused, some not) whose arguments never name it.
//!
//! `FUZZ_SEED=<n>` replays a run; `FUZZ_COMMANDS=<n>` changes its length.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

const GUARD_KEY: &str = "guard";
const GUARD_TOKEN: &str = "guard-token-7f3a";
const COMMANDS: &[&str] = &[
    "LOCK.ACQUIRE",
    "LOCK.RELEASE",
    "LOCK.EXTEND",
    "LOCK.FENCE",
    "LOCK.INFO",
    "LOCK.APPLY",
    "LOCK.GUARD",
    "lock.acquire",
    "Lock.Fence",
    "lock.guard",
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
        0..=2 => GUARD_KEY.into(),
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

fn token(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..8) {
        0 => Vec::new(),
        1 => vec![b't'; 256],
        2 => vec![b't'; 257],
        3 => vec![b'z'; 300],
        4 => (0..rng.gen_range(1..300)).map(|_| rng.gen()).collect(),
        5 => GUARD_TOKEN[..GUARD_TOKEN.len() - 1].into(), // a near miss
        _ => format!("tok{}", rng.gen_range(0..4)).into_bytes(),
    }
}

fn word(rng: &mut StdRng) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "WAIT", "wait", "Wait", "NX", "PX", "EX", "KEEPTTL", "TIMEOUT", "WAITS", "W", "", "-",
        "FENCE", "TTL",
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
                for _ in 0..rng.gen_range(0..3) {
                    a.push(word(rng));
                    if rng.gen_bool(0.8) {
                        a.push(number(rng));
                    }
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
/// (`WAIT 0` would block forever on a held key).
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
                if let Some(i) = parse_info(v) {
                    assert!(i.fence > 0, "{shown:?}: {i:?}");
                    if let Some(h) = &i.holder {
                        assert!(!h.is_empty() && h.len() <= 256, "{shown:?}: {i:?}");
                    }
                }
            }
            "LOCK.APPLY" => panic!("{shown:?}: LOCK.APPLY accepted from a client: {v:?}"),
            // Whatever the guarded command replies.
            "LOCK.GUARD" => {}
            _ => unreachable!(),
        },
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
    let mut last = info(&mut c, GUARD_KEY);
    let mut last_at = Instant::now();
    let started = Instant::now();
    let (mut oks, mut errs) = (0u64, 0u64);

    for i in 0..n {
        let args = argv(&mut rng);
        let r = run_raw(&mut c, &args);
        check_reply(&args, &r);
        if r.is_ok() {
            oks += 1;
        } else {
            errs += 1;
        }
        if i % 50 == 49 || i + 1 == n {
            s.assert_alive();
            assert_eq!(cmd!(&mut c, "PING"), Ok(Value::SimpleString("PONG".into())));
            let now = info(&mut c, GUARD_KEY);
            assert_same_lock(&last, &now, last_at.elapsed(), 200);
            last = now;
            last_at = Instant::now();
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
    println!("{oks} valid replies, {errs} error replies");
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
    // The server still works normally, and can persist whatever the fuzz left.
    let f = acquire(&mut c, "after", "t", 10_000).unwrap();
    assert!(f > guard_fence);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    assert_eq!(cmd!(&mut c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    assert_eq!(info(&mut c, GUARD_KEY).unwrap().fence, guard_fence);
    s.assert_alive();
}
