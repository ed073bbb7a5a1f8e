//! The errors of this crate, and why a hold ended.

use std::fmt;

use redis::RedisError;

/// Why a hold is over, as its [`LossSignal`](crate::LossSignal) reports it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LossReason {
    /// `LOCK.EXTEND` (or `LOCK.FENCE`) answered that the token no longer holds the lock: its
    /// lease ended, the key was deleted, or another token holds it now.
    NotHeld,
    /// An extend failed with an error (refused by the server, a closed connection, a
    /// timeout, a redirect...), or, in durable mode, fewer replicas than required acknowledged
    /// it in time. The lock may still be held on the server, but this client can no longer
    /// tell (or, unconfirmed, it may not be held where a failover leads), so it treats it as
    /// lost.
    Error(RedisError),
    /// No extend was confirmed in time: the lease may have ended on the server, measured on
    /// this client's monotonic clock from the send time of the last confirmed acquire or
    /// extend.
    Expired,
    /// The guard released the hold (or was dropped).
    Released,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::NotHeld => f.write_str("the token no longer holds the lock"),
            LossReason::Error(e) => write!(f, "a keep-alive extend failed: {e}"),
            LossReason::Expired => f.write_str("the lease ended before an extend was confirmed"),
            LossReason::Released => f.write_str("the hold was released"),
        }
    }
}

/// `LOCK.GUARD` refused the command: the lock is not held under this fence any more (or is
/// held shared). Nothing ran, and the same call will never succeed: stop working on the
/// resource. See docs/commands.md, "Guarded writes, end to end".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fenced {
    /// The server's reason, e.g. `the lock is held under a newer fence`.
    pub reason: String,
}

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FENCED {}", self.reason)
    }
}

impl std::error::Error for Fenced {}

/// What a guarded write ([`Guard::guard`](crate::Guard::guard)) can fail with. `Fenced` is
/// apart from every other error so that code handling the command's own errors cannot
/// swallow a lost lock by accident.
#[derive(Debug)]
pub enum GuardError {
    /// The lock is not held under the guard's fence: nothing ran.
    Fenced(Fenced),
    /// Durable mode: the write **ran** on the master, but fewer replicas than required
    /// acknowledged it within the timeout (`WAIT` after `LOCK.GUARD`). Its outcome is
    /// unknown: a failover may keep it or lose it. The hold is not affected. Converts into
    /// [`Error::NotDurable`].
    NotDurable {
        /// Replicas that acknowledged.
        acked: i64,
        /// Replicas required.
        required: u32,
    },
    /// Any other error: the command's own, a connection error, a timeout. (In durable mode,
    /// an error of the `WAIT` itself comes here too; the write had run.)
    Redis(RedisError),
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Fenced(e) => e.fmt(f),
            GuardError::NotDurable { acked, required } => write!(
                f,
                "the guarded write ran on the master, but only {acked} of {required} replicas \
                 acknowledged it: whether it survives a failover is unknown"
            ),
            GuardError::Redis(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for GuardError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Fenced(e) => Some(e),
            GuardError::NotDurable { .. } => None,
            GuardError::Redis(e) => Some(e),
        }
    }
}

impl From<RedisError> for GuardError {
    fn from(e: RedisError) -> Self {
        match e.code() {
            Some("FENCED") => GuardError::Fenced(Fenced {
                reason: e.detail().unwrap_or_default().to_string(),
            }),
            _ => GuardError::Redis(e),
        }
    }
}

/// The errors of acquiring and using a hold.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The hold was not granted within the wait. Nothing is held.
    Timeout,
    /// Durable mode: fewer replicas than required acknowledged within the timeout (`WAIT`).
    /// What that leaves depends on what was confirmed:
    ///
    /// - a grant (an acquire): it was released; nothing is held;
    /// - a guarded write (from [`GuardError::NotDurable`]): the write **ran** on the master,
    ///   and whether it survives a failover is unknown; the hold is not affected;
    /// - an extend (`extend()`): the hold is lost, as after any failed extend (a replica
    ///   promoted now has the earlier lease).
    NotDurable {
        /// Replicas that acknowledged.
        acked: i64,
        /// Replicas required.
        required: u32,
    },
    /// The hold is lost (see the reason); the operation was not done, or its answer said so.
    Lost(LossReason),
    /// A guarded write was refused: see [`Fenced`].
    Fenced(Fenced),
    /// An option is out of range (e.g. a keep-alive interval not shorter than the ttl).
    Config(&'static str),
    /// An error from the server or the connection.
    Redis(RedisError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout => f.write_str("the lock was not granted within the wait"),
            Error::NotDurable { acked, required } => write!(
                f,
                "only {acked} of {required} replicas acknowledged in time (after an acquire: \
                 released, nothing held; after a guarded write: it ran on the master, whether it \
                 survives a failover is unknown; after an extend: the hold is lost)"
            ),
            Error::Lost(r) => write!(f, "the hold is lost: {r}"),
            Error::Fenced(e) => e.fmt(f),
            Error::Config(what) => write!(f, "invalid lock options: {what}"),
            Error::Redis(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Fenced(e) => Some(e),
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Self {
        Error::Redis(e)
    }
}

impl From<GuardError> for Error {
    fn from(e: GuardError) -> Self {
        match e {
            GuardError::Fenced(f) => Error::Fenced(f),
            GuardError::NotDurable { acked, required } => Error::NotDurable { acked, required },
            GuardError::Redis(e) => Error::Redis(e),
        }
    }
}

/// A client-side timeout, as a redis error (an I/O error of kind `TimedOut`).
pub(crate) fn timed_out(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} timed out"),
    ))
}

/// A reply of a shape the command never gives.
pub(crate) fn unexpected(what: &'static str, reply: &redis::Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
        format!("{reply:?}"),
    ))
}
