//! The module's commands as redis-rs `Cmd`s, and their replies. See docs/commands.md.

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

use crate::error::unexpected;
use crate::options::{Kind, Wait};

/// Milliseconds for the server, rounded up and at least 1: `0` means "forever" to `WAIT`,
/// and a lease rounded down would end before the client expects.
pub(crate) fn ms(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000).max(1);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// A fresh token per acquisition: whoever has it holds the lock.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn acquire(key: &str, token: &str, ttl: Duration, kind: Kind, wait: Wait) -> Cmd {
    let mut c = redis::cmd("LOCK.ACQUIRE");
    c.arg(key).arg(token).arg(ms(ttl));
    match kind {
        Kind::Exclusive => {}
        Kind::Shared => {
            c.arg("SHARED");
        }
        Kind::Permit(n) => {
            c.arg("SHARED").arg("LIMIT").arg(n);
        }
    }
    match wait {
        Wait::No => {}
        Wait::For(d) => {
            c.arg("WAIT").arg(ms(d));
        }
        Wait::Forever => {
            c.arg("WAIT").arg(0);
        }
    }
    c
}

pub(crate) fn extend(key: &str, token: &str, ttl: Duration) -> Cmd {
    let mut c = redis::cmd("LOCK.EXTEND");
    c.arg(key).arg(token).arg(ms(ttl));
    c
}

pub(crate) fn release(key: &str, token: &str) -> Cmd {
    let mut c = redis::cmd("LOCK.RELEASE");
    c.arg(key).arg(token);
    c
}

pub(crate) fn fence(key: &str, token: &str) -> Cmd {
    let mut c = redis::cmd("LOCK.FENCE");
    c.arg(key).arg(token);
    c
}

pub(crate) fn info(key: &str) -> Cmd {
    let mut c = redis::cmd("LOCK.INFO");
    c.arg(key);
    c
}

pub(crate) fn holders(key: &str) -> Cmd {
    let mut c = redis::cmd("LOCK.HOLDERS");
    c.arg(key);
    c
}

/// `LOCK.GUARD key fence <command...>`.
pub(crate) fn guard(key: &str, fence: u64, command: &Cmd) -> Cmd {
    let mut c = redis::cmd("LOCK.GUARD");
    c.arg(key).arg(fence);
    for arg in command.args_iter() {
        match arg {
            redis::Arg::Simple(bytes) => {
                c.arg(bytes);
            }
            // Only cursor-based iteration commands carry another kind of argument; they
            // are not writes to guard.
            _ => {
                c.arg(0);
            }
        }
    }
    c
}

/// The server's `WAIT numreplicas timeout`.
pub(crate) fn wait_replicas(replicas: u32, timeout: Duration) -> Cmd {
    let mut c = redis::cmd("WAIT");
    c.arg(replicas).arg(ms(timeout));
    c
}

pub(crate) fn client_id() -> Cmd {
    redis::cmd("CLIENT").arg("ID").clone()
}

pub(crate) fn client_list_id(id: i64) -> Cmd {
    redis::cmd("CLIENT").arg("LIST").arg("ID").arg(id).clone()
}

/// A fence, or null: `LOCK.ACQUIRE` and `LOCK.FENCE`.
pub(crate) fn fence_reply(v: Value) -> RedisResult<Option<u64>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(n) if n > 0 => Ok(Some(n as u64)),
        other => Err(unexpected("a fence or null", &other)),
    }
}

/// 1 or 0: `LOCK.EXTEND` and `LOCK.RELEASE`.
pub(crate) fn bool_reply(v: Value) -> RedisResult<bool> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        Value::Boolean(b) => Ok(b),
        other => Err(unexpected("1 or 0", &other)),
    }
}

pub(crate) fn int_reply(v: Value) -> RedisResult<i64> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected("an integer", &other)),
    }
}

/// Whether `CLIENT LIST ID id` still lists the connection.
pub(crate) fn client_listed(v: &Value) -> bool {
    match v {
        Value::BulkString(b) => !b.iter().all(u8::is_ascii_whitespace),
        Value::VerbatimString { text, .. } => !text.trim().is_empty(),
        Value::SimpleString(s) => !s.trim().is_empty(),
        _ => true,
    }
}

/// A reply to a command that may have reached the server: a retry with the same token is
/// not harmless then, so the caller must clean up.
pub(crate) fn outcome_unknown(e: &redis::RedisError) -> bool {
    !matches!(e.kind(), redis::ErrorKind::Server(_))
}

/// `TRYAGAIN`: the server issues fences at a bounded rate; nothing changed, retry.
pub(crate) fn is_tryagain(e: &redis::RedisError) -> bool {
    e.code() == Some("TRYAGAIN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_rounds_up_and_never_zero() {
        assert_eq!(ms(Duration::ZERO), 1);
        assert_eq!(ms(Duration::from_micros(1)), 1);
        assert_eq!(ms(Duration::from_micros(1001)), 2);
        assert_eq!(ms(Duration::from_millis(30_000)), 30_000);
    }

    #[test]
    fn acquire_arguments() {
        let c = acquire(
            "k",
            "t",
            Duration::from_secs(1),
            Kind::Permit(3),
            Wait::Forever,
        );
        let args: Vec<Vec<u8>> = c
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"<other>".to_vec(),
            })
            .collect();
        let want: Vec<&[u8]> = vec![
            b"LOCK.ACQUIRE",
            b"k",
            b"t",
            b"1000",
            b"SHARED",
            b"LIMIT",
            b"3",
            b"WAIT",
            b"0",
        ];
        assert_eq!(args, want);
    }

    #[test]
    fn guard_wraps_the_command() {
        let mut inner = redis::cmd("HSET");
        inner.arg("{o}:data").arg("status").arg("paid");
        let c = guard("{o}:lock", 42, &inner);
        assert_eq!(c.args_iter().count(), 7);
    }
}
