//! The one error type of the module. Every variant renders with an error code, because
//! `RedisModule_ReplyWithError` sends the message as it is and a reply without a code
//! reads to clients as an error whose code is the message's first word.

use std::fmt;

use redis_module::RedisError;

use crate::fence::FenceError;
use crate::lock::Fenced;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// Wrong number of arguments: replied with the server's standard message.
    Arity,
    /// Options that do not parse: what was expected.
    Syntax(Syntax),
    /// `name` was not an integer, or did not fit in 64 bits.
    NotAnInteger(&'static str),
    /// `name` was an integer, but not a positive one (a fence of 0).
    NotPositive(&'static str),
    /// `name` was a negative integer where none may be (`LOCK.OBSERVE`'s `seen`).
    Negative(&'static str),
    /// `ttl` outside `1..=max`.
    TtlOutOfRange {
        max: i64,
    },
    NegativeTimeout,
    /// `LIMIT` outside `1..=2^31`.
    LimitOutOfRange,
    /// A shared holder asked for an exclusive hold.
    Upgrade,
    /// A `WAIT` timeout too large to add to the server's clock.
    TimeoutOutOfRange,
    TokenLength,
    WrongType,
    /// An internal command (`LOCK.APPLY`, `LOCK.HIGHWATER`) sent by a client rather than
    /// the master link or the AOF.
    InternalCommand(&'static str),
    /// A malformed internal command (only a corrupt AOF or replication stream can send
    /// one): the command, and the argument.
    BadInternal(&'static str, &'static str),
    /// No fence could be issued (see `fence.rs`).
    Fence(FenceError),
    /// `LOCK.GUARD` found that its fence does not guard the lock.
    Fenced(Fenced),
    /// `LOCK.GUARD` will not run this command (its name as the client spelled it).
    Unguardable(String, Unguardable),
    /// The caller's ACL does not let it run `LOCK.GUARD`'s command (its name).
    GuardNoPerm(String),
    /// A lock write in the turn after the event loop stood still this many milliseconds
    /// (`stall.rs`): refused, and writes paused.
    Stalled(u64),
}

/// What is wrong with `LOCK.ACQUIRE`'s options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// Not `SHARED`, `LIMIT` or `WAIT`.
    UnknownOption,
    /// The option (`SHARED`, `LIMIT`, `WAIT`) came twice.
    Repeated(&'static str),
    /// `WAIT` or `LIMIT` at the end, without its value: the option, and what it needs.
    NoValue(&'static str, &'static str),
    LimitWithoutShared,
}

/// Why `LOCK.GUARD` refuses a command before looking at the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unguardable {
    Unknown,
    Arity,
    Blocks,
    /// Flagged `noscript`: `MULTI`, `EXEC`, `WATCH`, the subscribe commands, `EVAL`…
    NotInScripts,
    /// `LOCK.*`: a guarded lock command would take or check locks under another lock.
    LockCommand,
}

impl From<crate::lock::AcquireError> for LockError {
    fn from(e: crate::lock::AcquireError) -> Self {
        match e {
            crate::lock::AcquireError::Upgrade => LockError::Upgrade,
            crate::lock::AcquireError::Fence(e) => LockError::Fence(e),
        }
    }
}

impl From<FenceError> for LockError {
    fn from(e: FenceError) -> Self {
        LockError::Fence(e)
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Arity => f.write_str("ERR wrong number of arguments"),
            // Core's prefix, so that clients matching "ERR syntax error" still do.
            LockError::Syntax(why) => {
                f.write_str("ERR syntax error: ")?;
                match why {
                    Syntax::UnknownOption => {
                        f.write_str("expected SHARED, LIMIT n or WAIT timeout")
                    }
                    Syntax::Repeated(option) => write!(f, "{option} given twice"),
                    Syntax::NoValue(option, what) => write!(f, "{option} needs {what}"),
                    Syntax::LimitWithoutShared => f.write_str("LIMIT needs SHARED"),
                }
            }
            LockError::NotAnInteger(name) => {
                write!(f, "ERR {name} is not an integer or out of range")
            }
            LockError::NotPositive(name) => write!(f, "ERR {name} must be a positive integer"),
            LockError::Negative(name) => write!(f, "ERR {name} must not be negative"),
            LockError::TtlOutOfRange { max } => {
                write!(f, "ERR ttl must be between 1 and {max} (lock.max-ttl)")
            }
            LockError::NegativeTimeout => f.write_str("ERR timeout must not be negative"),
            LockError::LimitOutOfRange => f.write_str("ERR limit must be between 1 and 2147483648"),
            LockError::Upgrade => f.write_str(
                "ERR the token holds the lock shared: release it to take it exclusively (no upgrades)",
            ),
            LockError::TimeoutOutOfRange => f.write_str("ERR timeout is out of range"),
            LockError::TokenLength => f.write_str("ERR token must be 1 to 256 bytes"),
            LockError::WrongType => {
                f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            LockError::InternalCommand(name) => write!(
                f,
                "ERR {name} is internal: only the master link and the AOF may send it"
            ),
            LockError::BadInternal(command, what) => write!(f, "ERR {command}: bad {what}"),
            LockError::Fence(e) => e.fmt(f),
            LockError::Fenced(why) => f.write_str(match why {
                Fenced::NotHeld => "FENCED the lock is not held",
                Fenced::Newer => "FENCED the lock is held under a newer fence",
                Fenced::Older => "FENCED the lock is held under an older fence",
                Fenced::Shared => "FENCED the lock is held shared",
            }),
            LockError::Unguardable(name, why) => {
                f.write_str("ERR LOCK.GUARD: ")?;
                match why {
                    Unguardable::Unknown => write!(f, "unknown command '{name}'"),
                    Unguardable::Arity => write!(f, "wrong number of arguments for '{name}'"),
                    Unguardable::Blocks => write!(f, "'{name}' blocks and cannot be guarded"),
                    Unguardable::NotInScripts => {
                        write!(f, "'{name}' cannot be guarded: scripts may not run it")
                    }
                    Unguardable::LockCommand => {
                        write!(f, "'{name}' cannot be guarded: it is a LOCK command")
                    }
                }
            }
            LockError::GuardNoPerm(name) => write!(
                f,
                "NOPERM LOCK.GUARD: this user has no permissions to run '{name}' or to touch its keys"
            ),
            LockError::Stalled(ms) => write!(
                f,
                "TRYAGAIN the server stood still for {ms} ms (over lock.stall-threshold-ms) and \
                 may have been failed over meanwhile: writes are paused for \
                 lock.replica-loss-pause-ms"
            ),
        }
    }
}

impl From<LockError> for RedisError {
    fn from(e: LockError) -> Self {
        match e {
            // The crate turns this into RedisModule_WrongArity, which names the command
            // exactly as the server's own arity check does.
            LockError::Arity => RedisError::WrongArity,
            LockError::WrongType => RedisError::WrongType,
            other => RedisError::String(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_code() {
        let all = [
            LockError::Arity,
            LockError::Syntax(Syntax::UnknownOption),
            LockError::Syntax(Syntax::Repeated("WAIT")),
            LockError::Syntax(Syntax::NoValue("WAIT", "a timeout")),
            LockError::Syntax(Syntax::LimitWithoutShared),
            LockError::NotAnInteger("ttl"),
            LockError::NotPositive("fence"),
            LockError::TtlOutOfRange { max: 10 },
            LockError::NegativeTimeout,
            LockError::TimeoutOutOfRange,
            LockError::TokenLength,
            LockError::WrongType,
            LockError::InternalCommand("LOCK.APPLY"),
            LockError::BadInternal("LOCK.APPLY", "fence"),
            LockError::Fence(FenceError::RateLimited),
            LockError::Fence(FenceError::Exhausted),
            LockError::Fenced(Fenced::NotHeld),
            LockError::Fenced(Fenced::Newer),
            LockError::Fenced(Fenced::Older),
            LockError::Fenced(Fenced::Shared),
            LockError::LimitOutOfRange,
            LockError::Upgrade,
            LockError::Unguardable("blpop".into(), Unguardable::Blocks),
            LockError::GuardNoPerm("set".into()),
            LockError::Stalled(3012),
        ];
        for e in all {
            let s = e.to_string();
            let code = s.split(' ').next().unwrap();
            assert!(
                matches!(code, "ERR" | "WRONGTYPE" | "TRYAGAIN" | "FENCED" | "NOPERM"),
                "{s}"
            );
        }
    }

    #[test]
    fn messages_name_the_argument() {
        assert_eq!(
            LockError::NotAnInteger("timeout").to_string(),
            "ERR timeout is not an integer or out of range"
        );
        assert!(LockError::TtlOutOfRange { max: 5 }
            .to_string()
            .contains("ttl"));
        assert_eq!(
            LockError::NotPositive("fence").to_string(),
            "ERR fence must be a positive integer"
        );
    }

    #[test]
    fn syntax_errors_keep_the_core_prefix_and_say_what_was_expected() {
        for (why, text) in [
            (
                Syntax::UnknownOption,
                "ERR syntax error: expected SHARED, LIMIT n or WAIT timeout",
            ),
            (
                Syntax::Repeated("SHARED"),
                "ERR syntax error: SHARED given twice",
            ),
            (
                Syntax::NoValue("WAIT", "a timeout"),
                "ERR syntax error: WAIT needs a timeout",
            ),
            (
                Syntax::NoValue("LIMIT", "a number"),
                "ERR syntax error: LIMIT needs a number",
            ),
            (
                Syntax::LimitWithoutShared,
                "ERR syntax error: LIMIT needs SHARED",
            ),
        ] {
            assert_eq!(LockError::Syntax(why).to_string(), text);
        }
    }
}
