//! Where locks live and how they are taken: the options shared by every lock kind.

use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;

use crate::error::Error;

/// The server(s) a lock lives on: a standalone (or replicated) server through a
/// [`redis::Client`], or a Redis Cluster through a [`ClusterClient`]. RESP2 and RESP3 both
/// work (`redis://host:port/?protocol=resp3` picks RESP3).
#[derive(Clone)]
pub enum Target {
    /// One server.
    Standalone(redis::Client),
    /// A cluster: every command routed by the lock key's slot. (Boxed: it is twice the size
    /// of a client, and targets are copied into every guard.)
    Cluster(Box<ClusterClient>),
}

impl From<redis::Client> for Target {
    fn from(client: redis::Client) -> Self {
        Target::Standalone(client)
    }
}

impl From<ClusterClient> for Target {
    fn from(client: ClusterClient) -> Self {
        Target::Cluster(Box::new(client))
    }
}

/// The kind of hold a guard has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The only holder (a mutex, or a read-write lock's writer).
    Exclusive,
    /// One of any number of shared holders (a read-write lock's reader).
    Shared,
    /// One of at most `n` shared holders (a semaphore's permit: `SHARED LIMIT n`).
    Permit(u32),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Ask once: null if the lock is not free.
    No,
    For(Duration),
    Forever,
}

impl Wait {
    /// What is left of the wait `started` ago; `None` once spent.
    pub(crate) fn left(self, started: Instant) -> Option<Wait> {
        match self {
            Wait::For(d) => d
                .checked_sub(started.elapsed())
                .filter(|d| !d.is_zero())
                .map(Wait::For),
            other => Some(other),
        }
    }

    /// How long to wait for the reply of an acquire with this wait: above the wait by the
    /// command timeout, so that the server's answer, not ours, ends a wait.
    pub(crate) fn reply_budget(self, timeout: Duration) -> Option<Duration> {
        match self {
            Wait::No => Some(timeout),
            Wait::For(d) => Some(d.saturating_add(timeout)),
            Wait::Forever => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum KeepAlive {
    /// A third of the ttl.
    Default,
    Every(Duration),
    Off,
}

#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub ttl: Duration,
    pub wait: Wait,
    pub keepalive: KeepAlive,
    /// Replicas that must acknowledge a grant, a guarded write or an extend, and how long to
    /// wait for them.
    pub durable: Option<(u32, Duration)>,
    /// Bound on one command that does not wait by design: a release, a guarded write, an
    /// info, a connect.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ttl: Duration::from_secs(30),
            wait: Wait::For(Duration::from_secs(10)),
            keepalive: KeepAlive::Default,
            durable: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// Leases past ten years are refused: deadlines must fit the monotonic clock.
const MAX_TTL: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

impl Options {
    pub(crate) fn keepalive_every(&self) -> Option<Duration> {
        match self.keepalive {
            KeepAlive::Default => Some(self.ttl / 3),
            KeepAlive::Every(every) => Some(every),
            KeepAlive::Off => None,
        }
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.ttl < Duration::from_millis(1) || self.ttl > MAX_TTL {
            return Err(Error::Config("ttl must be between 1 ms and 10 years"));
        }
        if let Some(every) = self.keepalive_every() {
            if every.is_zero() || every >= self.ttl {
                return Err(Error::Config(
                    "the keep-alive interval must be above zero and below the ttl",
                ));
            }
        }
        if self.timeout.is_zero() {
            return Err(Error::Config("the command timeout must be above zero"));
        }
        Ok(())
    }
}

/// One lock: where, which key, how, and the connections its holds reuse.
#[derive(Clone)]
pub(crate) struct Spec {
    pub target: Target,
    pub key: String,
    pub opts: Options,
    pub pool: std::sync::Arc<crate::pool::Pool>,
}

impl Spec {
    /// A lock of the blocking API (`asynchronous` false) or the async one: they keep
    /// connections apart, as the async ones live in the caller's runtime.
    pub(crate) fn new(
        target: impl Into<Target>,
        key: impl Into<String>,
        asynchronous: bool,
    ) -> Self {
        let target = target.into();
        Spec {
            pool: crate::pool::Pool::for_target(&target, asynchronous),
            target,
            key: key.into(),
            opts: Options::default(),
        }
    }
}

/// The builder methods every lock type shares (blocking and async); the type has a field
/// `spec: Spec`.
macro_rules! lock_options {
    () => {
        /// The lease: how long the lock stays held if this client stops extending it (default
        /// 30 s). The keep-alive extends it while the guard lives.
        pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
            self.spec.opts.ttl = ttl;
            self
        }

        /// How long to wait in the key's queue for a grant (default 10 s); zero asks once.
        pub fn wait(mut self, wait: std::time::Duration) -> Self {
            self.spec.opts.wait = if wait.is_zero() {
                $crate::options::Wait::No
            } else {
                $crate::options::Wait::For(wait)
            };
            self
        }

        /// Waits in the key's queue without a limit (`WAIT 0`).
        pub fn wait_forever(mut self) -> Self {
            self.spec.opts.wait = $crate::options::Wait::Forever;
            self
        }

        /// Extends the lease every `every` while held (default: a third of the ttl). It
        /// must be shorter than the ttl.
        pub fn keepalive(mut self, every: std::time::Duration) -> Self {
            self.spec.opts.keepalive = $crate::options::KeepAlive::Every(every);
            self
        }

        /// No automatic extends: the hold is lost at the end of the lease unless
        /// `extend()` is called in time.
        pub fn no_keepalive(mut self) -> Self {
            self.spec.opts.keepalive = $crate::options::KeepAlive::Off;
            self
        }

        /// Durable mode: `WAIT replicas timeout` on the same connection after each grant,
        /// each guarded write that ran, and each extend (the keep-alive's or `extend()`), one
        /// more round trip for each. With fewer acknowledgements: a grant is released and the
        /// acquire fails with [`Error::NotDurable`](crate::Error::NotDurable); a guarded write
        /// fails with [`GuardError::NotDurable`](crate::GuardError::NotDurable) (it ran on the
        /// master: its outcome after a failover is unknown); an extend ends the hold as a
        /// failed extend does, since a replica promoted after it has the earlier lease.
        pub fn durable(mut self, replicas: u32, timeout: std::time::Duration) -> Self {
            self.spec.opts.durable = Some((replicas, timeout));
            self
        }

        /// Bound on each command that does not wait by design (release, guarded write,
        /// extend by hand, info, connecting); default 5 s.
        pub fn command_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.spec.opts.timeout = timeout;
            self
        }

        /// The lock key.
        pub fn key(&self) -> &str {
            &self.spec.key
        }
    };
}

pub(crate) use lock_options;
