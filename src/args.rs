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
mod tests;
