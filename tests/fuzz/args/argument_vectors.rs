//! The fuzzed commands: argument vectors to every LOCK.* command, mostly well shaped, with
//! random damage (`argv`), and the arguments they are made of.

use crate::args::{GUARD_FENCE, GUARD_KEY, GUARD_TOKEN, SHARED_KEY, SHARED_TOKENS};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

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

fn random_token(rng: &mut StdRng) -> Vec<u8> {
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
        2 => random_token(rng),
        3 => word(rng),
        _ => (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
    }
}

/// A mostly well-shaped argument vector with random damage.
pub(crate) fn argv(rng: &mut StdRng) -> Vec<Vec<u8>> {
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
                a.push(random_token(rng));
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
            "LOCK.RELEASE" | "LOCK.FENCE" => a.push(random_token(rng)),
            "LOCK.EXTEND" => {
                a.push(random_token(rng));
                a.push(number(rng));
            }
            "LOCK.APPLY" => {
                a.push(random_token(rng));
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
