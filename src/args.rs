//! Argument parsing for the `LOCK.*` commands, on plain byte slices so that it can be tested
//! without a server. Everything is checked here, before a command touches a key: a command
//! that gets past parsing cannot fail half-way.

use crate::error::{LockError, Syntax};
use crate::lock::{Mode, Want};

pub const MAX_TOKEN_LEN: usize = 256;

/// Parsed `LOCK.ACQUIRE key token ttl [SHARED [LIMIT n]] [WAIT timeout]` (without the
/// key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub token: &'a [u8],
    pub ttl: u64,
    pub want: Want,
    /// `None` without `WAIT`; `Some(0)` waits without limit.
    pub wait: Option<u64>,
}

/// The largest `LIMIT`: 2^31 permits.
pub const MAX_LIMIT: u32 = 1 << 31;

/// The options of `LOCK.ACQUIRE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Shared,
    Wait,
    Limit,
}

impl Opt {
    fn of(word: &[u8]) -> Option<Opt> {
        [
            (Opt::Shared, &b"SHARED"[..]),
            (Opt::Wait, b"WAIT"),
            (Opt::Limit, b"LIMIT"),
        ]
        .into_iter()
        .find(|(_, name)| word.eq_ignore_ascii_case(name))
        .map(|(opt, _)| opt)
    }

    fn as_str(self) -> &'static str {
        match self {
            Opt::Shared => "SHARED",
            Opt::Wait => "WAIT",
            Opt::Limit => "LIMIT",
        }
    }

    /// What the option's value is, as an error names it.
    fn value(self) -> &'static str {
        match self {
            Opt::Wait => "a timeout",
            _ => "a number",
        }
    }
}

/// `LOCK.ACQUIRE key token ttl [SHARED [LIMIT n]] [WAIT timeout]`; `args` excludes the
/// command name and key. Options come in any order, each at most once; `LIMIT` needs
/// `SHARED`.
pub fn acquire<'a>(args: &[&'a [u8]], max_ttl: i64) -> Result<AcquireArgs<'a>, LockError> {
    let (token, ttl, mut rest) = match args {
        [token, ttl, rest @ ..] => (*token, *ttl, rest),
        _ => return Err(LockError::Arity),
    };
    let token = token_arg(token)?;
    let ttl = ttl_arg(ttl, max_ttl)?;
    let (mut wait, mut shared, mut limit) = (None, false, None);
    while let [option, tail @ ..] = rest {
        rest = tail;
        let Some(name) = Opt::of(option) else {
            return Err(LockError::Syntax(Syntax::UnknownOption));
        };
        let repeated = match name {
            Opt::Shared => shared,
            Opt::Wait => wait.is_some(),
            Opt::Limit => limit.is_some(),
        };
        if repeated {
            return Err(LockError::Syntax(Syntax::Repeated(name.as_str())));
        }
        if name == Opt::Shared {
            shared = true;
            continue;
        }
        let [value, tail @ ..] = rest else {
            return Err(LockError::Syntax(Syntax::NoValue(
                name.as_str(),
                name.value(),
            )));
        };
        rest = tail;
        match name {
            Opt::Wait => wait = Some(timeout_arg(value)?),
            _ => limit = Some(limit_arg(value)?),
        }
    }
    let want = match (shared, limit) {
        (false, Some(_)) => return Err(LockError::Syntax(Syntax::LimitWithoutShared)),
        (false, None) => Want::EXCLUSIVE,
        (true, limit) => Want {
            mode: Mode::Shared,
            limit,
        },
    };
    Ok(AcquireArgs {
        token,
        ttl,
        want,
        wait,
    })
}

fn limit_arg(limit: &[u8]) -> Result<u32, LockError> {
    let n = integer(limit).ok_or(LockError::NotAnInteger("limit"))?;
    if n < 1 || n > i64::from(MAX_LIMIT) {
        return Err(LockError::LimitOutOfRange);
    }
    Ok(n as u32)
}

/// The monotonic deadline (microseconds) of a wait of `timeout` ms that starts at
/// `now_mono`; `None` waits without limit (`WAIT 0`). A timeout that cannot be added to the
/// server's clock in milliseconds (`now_wall_ms`) is refused, as `BLPOP` refuses it, rather
/// than wrapped into a short wait.
pub fn wait_deadline(
    timeout: u64,
    now_mono: u64,
    now_wall_ms: i64,
) -> Result<Option<u64>, LockError> {
    if timeout == 0 {
        return Ok(None);
    }
    if timeout > (i64::MAX as u64).saturating_sub(now_wall_ms.max(0) as u64) {
        return Err(LockError::TimeoutOutOfRange);
    }
    Ok(Some(now_mono.saturating_add(timeout.saturating_mul(1000))))
}

/// `LOCK.OBSERVE key seen timeout`: the state the caller last saw (a fence, or 0) and the
/// wait's timeout in ms (`0` waits without limit).
pub fn observe(args: &[&[u8]]) -> Result<(u64, u64), LockError> {
    let [seen, timeout] = args else {
        return Err(LockError::Arity);
    };
    let seen = integer(seen).ok_or(LockError::NotAnInteger("seen"))?;
    if seen < 0 {
        return Err(LockError::Negative("seen"));
    }
    Ok((seen as u64, timeout_arg(timeout)?))
}

/// `LOCK.EXTEND key token ttl`.
pub fn extend<'a>(args: &[&'a [u8]], max_ttl: i64) -> Result<(&'a [u8], u64), LockError> {
    match args {
        [token, ttl] => Ok((token_arg(token)?, ttl_arg(ttl, max_ttl)?)),
        _ => Err(LockError::Arity),
    }
}

/// `LOCK.RELEASE key token` and `LOCK.FENCE key token`.
pub fn token_only<'a>(args: &[&'a [u8]]) -> Result<&'a [u8], LockError> {
    match args {
        [token] => token_arg(token),
        _ => Err(LockError::Arity),
    }
}

/// Parsed `LOCK.APPLY key token deadline fence [SHARED] [LAST last_fence]`: the state of one
/// hold as a master propagates it (`propagate.rs`), the one place its syntax is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyArgs<'a> {
    pub token: &'a [u8],
    /// Unix time in milliseconds at which the lease ends.
    pub deadline_unix_ms: i64,
    pub fence: u64,
    pub mode: Mode,
    /// The key's last fence, where no hold has it (an AOF rewrite says so).
    pub last_fence: Option<u64>,
}

pub fn apply<'a>(args: &[&'a [u8]]) -> Result<ApplyArgs<'a>, LockError> {
    let bad = |what| LockError::BadInternal("LOCK.APPLY", what);
    let [token, deadline, fence, rest @ ..] = args else {
        return Err(LockError::Arity);
    };
    let mut rest = rest;
    let token = token_arg(token).map_err(|_| bad("token"))?;
    let deadline_unix_ms = integer(deadline).ok_or(bad("deadline"))?;
    let valid_fence = |f: &[u8]| {
        integer(f)
            .map(|f| f as u64)
            .filter(|f| crate::fence::is_valid(*f))
    };
    let fence = valid_fence(fence).ok_or(bad("fence"))?;
    let mut mode = Mode::Exclusive;
    if let [shared, tail @ ..] = rest {
        if shared.eq_ignore_ascii_case(b"SHARED") {
            mode = Mode::Shared;
            rest = tail;
        }
    }
    let last_fence = match rest {
        [] => None,
        [last, value] if last.eq_ignore_ascii_case(b"LAST") => {
            Some(valid_fence(value).ok_or(bad("last fence"))?)
        }
        _ => return Err(bad("option")),
    };
    Ok(ApplyArgs {
        token,
        deadline_unix_ms,
        fence,
        mode,
        last_fence,
    })
}

/// Parsed `LOCK.HIGHWATER fence saved_ms [EPOCH epoch]`: a high-water mark, when it was
/// saved, and the master's epoch (0 when absent: a master never promoted, or an older module).
pub fn highwater(args: &[&[u8]]) -> Result<(u64, i64, u64), LockError> {
    let (fence, saved_ms, epoch) = match args {
        [fence, saved_ms] => (fence, saved_ms, None),
        [fence, saved_ms, token, epoch] if token.eq_ignore_ascii_case(b"EPOCH") => {
            (fence, saved_ms, Some(epoch))
        }
        [_, _, ..] => return Err(LockError::BadInternal("LOCK.HIGHWATER", "option")),
        _ => return Err(LockError::Arity),
    };
    let epoch = match epoch {
        None => 0,
        Some(e) => integer(e)
            .filter(|&e| e >= 0)
            .ok_or(LockError::BadInternal("LOCK.HIGHWATER", "epoch"))? as u64,
    };
    // 0: nothing issued yet (a fresh server's first rewrite).
    let fence = integer(fence)
        .map(|f| f as u64)
        .filter(|&f| f == 0 || crate::fence::is_valid(f))
        .ok_or(LockError::BadInternal("LOCK.HIGHWATER", "fence"))?;
    let saved_ms = integer(saved_ms).ok_or(LockError::BadInternal("LOCK.HIGHWATER", "time"))?;
    Ok((fence, saved_ms, epoch))
}

/// The fence of `LOCK.GUARD key fence command …`: a positive integer. (Any positive fence
/// parses: one the lock never issued is refused by the check, not here.)
pub fn guard_fence(fence: &[u8]) -> Result<u64, LockError> {
    match integer(fence) {
        Some(f) if f > 0 => Ok(f as u64),
        Some(_) => Err(LockError::NotPositive("fence")),
        None => Err(LockError::NotAnInteger("fence")),
    }
}

fn token_arg(token: &[u8]) -> Result<&[u8], LockError> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(LockError::TokenLength);
    }
    Ok(token)
}

fn ttl_arg(ttl: &[u8], max_ttl: i64) -> Result<u64, LockError> {
    let ttl = integer(ttl).ok_or(LockError::NotAnInteger("ttl"))?;
    if ttl < 1 || ttl > max_ttl {
        return Err(LockError::TtlOutOfRange { max: max_ttl });
    }
    Ok(ttl as u64)
}

fn timeout_arg(timeout: &[u8]) -> Result<u64, LockError> {
    let timeout = integer(timeout).ok_or(LockError::NotAnInteger("timeout"))?;
    if timeout < 0 {
        return Err(LockError::NegativeTimeout);
    }
    Ok(timeout as u64)
}

/// A signed 64-bit decimal integer as Redis itself accepts one: an optional `-`, digits, no
/// `+`, no spaces, no leading zeros.
fn integer(bytes: &[u8]) -> Option<i64> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let well_formed = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || bytes == b"0");
    if !well_formed {
        return None;
    }
    // Accumulated negative, so that i64::MIN fits; checked, so that overflow is None.
    let negative = digits.len() != bytes.len();
    let mut n: i64 = 0;
    for &d in digits {
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(n)
    } else {
        n.checked_neg()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn observe_takes_a_state_and_a_timeout() {
        assert_eq!(observe(&[b"0", b"0"]), Ok((0, 0)));
        assert_eq!(
            observe(&[b"9223372036854775807", b"1500"]),
            Ok((i64::MAX as u64, 1500))
        );
        assert_eq!(observe(&[b"-1", b"0"]), Err(LockError::Negative("seen")));
        assert_eq!(observe(&[b"x", b"0"]), Err(LockError::NotAnInteger("seen")));
        assert_eq!(
            observe(&[b"18446744073709551615", b"0"]),
            Err(LockError::NotAnInteger("seen"))
        );
        assert_eq!(observe(&[b"1", b"-1"]), Err(LockError::NegativeTimeout));
        assert_eq!(
            observe(&[b"1", b"1.5"]),
            Err(LockError::NotAnInteger("timeout"))
        );
        assert_eq!(observe(&[b"1"]), Err(LockError::Arity));
        assert_eq!(observe(&[b"1", b"2", b"3"]), Err(LockError::Arity));
    }

    #[test]
    fn a_guard_fence_is_a_positive_integer() {
        assert_eq!(guard_fence(b"1"), Ok(1));
        assert_eq!(guard_fence(b"9007199254740991"), Ok(9_007_199_254_740_991));
        for bad in [&b"0"[..], b"-1", b"-9223372036854775808"] {
            assert_eq!(
                guard_fence(bad),
                Err(LockError::NotPositive("fence")),
                "{bad:?}"
            );
        }
        for bad in [
            &b"abc"[..],
            b"",
            b"01",
            b"+5",
            b"-0",
            b"18446744073709551616",
        ] {
            assert_eq!(
                guard_fence(bad),
                Err(LockError::NotAnInteger("fence")),
                "{bad:?}"
            );
        }
    }

    use super::*;

    const MAX: i64 = 86_400_000;

    #[test]
    fn acquire_plain_and_with_wait() {
        assert_eq!(
            acquire(&[b"t", b"100"], MAX),
            Ok(AcquireArgs {
                token: b"t",
                ttl: 100,
                want: Want::EXCLUSIVE,
                wait: None
            })
        );
        assert_eq!(
            acquire(&[b"t", b"100", b"wait", b"0"], MAX).unwrap().wait,
            Some(0)
        );
        assert_eq!(
            acquire(&[b"t", b"100", b"WAIT", b"250"], MAX).unwrap().wait,
            Some(250)
        );
    }

    #[test]
    fn acquire_rejects_bad_options() {
        assert_eq!(acquire(&[b"t"], MAX), Err(LockError::Arity));
        assert_eq!(
            acquire(&[b"t", b"1", b"NOPE"], MAX),
            Err(LockError::Syntax(Syntax::UnknownOption))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT"], MAX),
            Err(LockError::Syntax(Syntax::NoValue("WAIT", "a timeout")))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT", b"1", b"WAIT", b"1"], MAX),
            Err(LockError::Syntax(Syntax::Repeated("WAIT")))
        );
        // Repeated before missing its value.
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT", b"1", b"wait"], MAX),
            Err(LockError::Syntax(Syntax::Repeated("WAIT")))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT", b"-1"], MAX),
            Err(LockError::NegativeTimeout)
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT", b"x"], MAX),
            Err(LockError::NotAnInteger("timeout"))
        );
    }

    #[test]
    fn shared_and_limit_in_any_order_once_each() {
        let shared = |limit| Want {
            mode: Mode::Shared,
            limit,
        };
        let want = |a: &[&[u8]]| acquire(a, MAX).map(|a| (a.want, a.wait));
        assert_eq!(want(&[b"t", b"1", b"SHARED"]), Ok((shared(None), None)));
        assert_eq!(
            want(&[b"t", b"1", b"shared", b"limit", b"4", b"wait", b"9"]),
            Ok((shared(Some(4)), Some(9)))
        );
        assert_eq!(
            want(&[
                b"t",
                b"1",
                b"WAIT",
                b"0",
                b"LIMIT",
                b"2147483648",
                b"SHARED"
            ]),
            Ok((shared(Some(MAX_LIMIT)), Some(0)))
        );
        for (bad, why) in [
            (
                &[&b"t"[..], b"1", b"LIMIT", b"4"][..],
                Syntax::LimitWithoutShared,
            ),
            (
                &[b"t", b"1", b"WAIT", b"0", b"LIMIT", b"4"],
                Syntax::LimitWithoutShared,
            ),
            (
                &[b"t", b"1", b"SHARED", b"SHARED"],
                Syntax::Repeated("SHARED"),
            ),
            (
                &[b"t", b"1", b"SHARED", b"LIMIT", b"1", b"LIMIT", b"1"],
                Syntax::Repeated("LIMIT"),
            ),
            (
                &[b"t", b"1", b"SHARED", b"LIMIT"],
                Syntax::NoValue("LIMIT", "a number"),
            ),
            (
                &[b"t", b"1", b"LIMIT"],
                Syntax::NoValue("LIMIT", "a number"),
            ),
            (&[b"t", b"1", b"EXCLUSIVE"], Syntax::UnknownOption),
            (&[b"t", b"1", b"SHARED", b"4"], Syntax::UnknownOption),
        ] {
            assert_eq!(acquire(bad, MAX), Err(LockError::Syntax(why)), "{bad:?}");
        }
        for (limit, e) in [
            (&b"0"[..], LockError::LimitOutOfRange),
            (b"-1", LockError::LimitOutOfRange),
            (b"2147483649", LockError::LimitOutOfRange),
            (b"x", LockError::NotAnInteger("limit")),
        ] {
            assert_eq!(
                acquire(&[b"t", b"1", b"SHARED", b"LIMIT", limit], MAX),
                Err(e)
            );
        }
    }

    #[test]
    fn lock_apply_takes_a_mode_and_a_last_fence() {
        let f = b"3678527467665408";
        let a = apply(&[b"t", b"1796156050072", f]).unwrap();
        assert_eq!((a.mode, a.last_fence), (Mode::Exclusive, None));
        let a = apply(&[
            b"t",
            b"1796156050072",
            f,
            b"SHARED",
            b"LAST",
            b"3678527467667460",
        ]);
        let a = a.unwrap();
        assert_eq!(
            (a.mode, a.last_fence),
            (Mode::Shared, Some(3_678_527_467_667_460))
        );
        let a = apply(&[b"t", b"1796156050072", f, b"LAST", b"3678527467667460"]).unwrap();
        assert_eq!(
            (a.mode, a.last_fence),
            (Mode::Exclusive, Some(3_678_527_467_667_460))
        );
        for bad in [
            &[&b"t"[..], b"1", f, b"EXCLUSIVE"][..],
            &[b"t", b"1", f, b"SHARED", b"SHARED"],
            &[b"t", b"1", f, b"LAST"],
            &[b"t", b"1", f, b"LAST", b"0"],
            &[b"t", b"1", f, b"LAST", b"1", b"x"],
        ] {
            assert!(
                matches!(apply(bad), Err(LockError::BadInternal("LOCK.APPLY", _))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn wait_deadlines_never_wrap() {
        let (mono, wall) = (5_000_000, 1_764_000_000_000);
        assert_eq!(wait_deadline(0, mono, wall), Ok(None));
        assert_eq!(wait_deadline(250, mono, wall), Ok(Some(5_250_000)));
        assert_eq!(
            wait_deadline(i64::MAX as u64, mono, wall),
            Err(LockError::TimeoutOutOfRange)
        );
        let largest = i64::MAX as u64 - wall as u64;
        assert_eq!(
            wait_deadline(largest + 1, mono, wall),
            Err(LockError::TimeoutOutOfRange)
        );
        assert_eq!(wait_deadline(largest, mono, wall), Ok(Some(u64::MAX)));
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(
            acquire(&[b"t", b"0"], MAX),
            Err(LockError::TtlOutOfRange { max: MAX })
        );
        assert_eq!(
            acquire(&[b"t", b"-5"], MAX),
            Err(LockError::TtlOutOfRange { max: MAX })
        );
        assert_eq!(
            extend(&[b"t", b"86400001"], MAX),
            Err(LockError::TtlOutOfRange { max: MAX })
        );
        assert_eq!(
            extend(&[b"t", b"86400000"], MAX),
            Ok((&b"t"[..], 86_400_000))
        );
        for bad in [
            &b"1.5"[..],
            b"",
            b" 1",
            b"+1",
            b"01",
            b"99999999999999999999",
            b"1e3",
        ] {
            assert_eq!(
                extend(&[b"t", bad], MAX),
                Err(LockError::NotAnInteger("ttl")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn token_bounds() {
        let long = [b'x'; 257];
        let max = [b'x'; 256];
        assert_eq!(token_only(&[b""]), Err(LockError::TokenLength));
        assert_eq!(token_only(&[&long]), Err(LockError::TokenLength));
        assert_eq!(token_only(&[&max]), Ok(&max[..]));
        assert_eq!(token_only(&[b"\0\xff"]), Ok(&b"\0\xff"[..]));
        assert_eq!(token_only(&[]), Err(LockError::Arity));
        assert_eq!(token_only(&[b"a", b"b"]), Err(LockError::Arity));
    }

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"-0"), None);
        assert_eq!(integer(b"-12"), Some(-12));
        assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(integer(b"9223372036854775808"), None);
        assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(integer(b"-9223372036854775809"), None);
        assert_eq!(integer(b"99999999999999999999"), None);
        assert_eq!(integer(b"007"), None);
        assert_eq!(integer(b"1x"), None);
        assert_eq!(integer(b""), None);
        assert_eq!(integer(b"-"), None);
        for n in [1i64, 42, 86_400_000, -5, 1_796_011_764_123] {
            assert_eq!(integer(n.to_string().as_bytes()), Some(n));
        }
    }

    #[test]
    fn lock_highwater_takes_an_optional_epoch() {
        assert_eq!(highwater(&[b"5", b"7"]).unwrap(), (5, 7, 0));
        assert_eq!(highwater(&[b"5", b"7", b"epoch", b"3"]).unwrap(), (5, 7, 3));
        for bad in [
            &[b"5".as_slice(), b"7", b"EPOCH"][..],
            &[b"5", b"7", b"EPOCH", b"-1"],
            &[b"5", b"7", b"AGE", b"3"],
        ] {
            assert!(
                matches!(
                    highwater(bad),
                    Err(LockError::BadInternal("LOCK.HIGHWATER", _))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(highwater(&[b"5"]), Err(LockError::Arity)));
    }

    #[test]
    fn apply_args() {
        let a = apply(&[b"tok", b"1700000000000", b"42"]).unwrap();
        assert_eq!(a.fence, 42);
        assert_eq!(a.deadline_unix_ms, 1_700_000_000_000);
        assert_eq!(
            apply(&[b"tok", b"1", b"0"]),
            Err(LockError::BadInternal("LOCK.APPLY", "fence"))
        );
        assert_eq!(
            apply(&[b"tok", b"x", b"1"]),
            Err(LockError::BadInternal("LOCK.APPLY", "deadline"))
        );
        assert_eq!(apply(&[b"tok", b"1"]), Err(LockError::Arity));
    }
}
