//! The blocking guard: one hold, its keep-alive thread, and its release on drop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, RedisError, RedisResult};

use crate::commands as cmds;
use crate::durable::{self, Shortfall};
use crate::error::{Error, Fenced, GuardError, LossReason};
use crate::options::{Kind, Spec};
use crate::pool::Starter;
use crate::signal::{Lease, LossSignal};
use crate::sync_conn::SyncConn;

/// The accessors a guard has of its hold, the same for the blocking and the async guard
/// (each holds its hold as `hold: Arc<Hold>`).
macro_rules! hold_accessors {
    () => {
        /// The lock key.
        pub fn key(&self) -> &str {
            &self.hold.spec.key
        }

        /// This hold's token (fresh for each acquisition).
        pub fn token(&self) -> &str {
            &self.hold.token
        }

        /// The hold's fence: pass it with every write the lock protects.
        pub fn fence(&self) -> u64 {
            self.hold.fence.load(Ordering::SeqCst)
        }

        /// The kind of hold.
        pub fn kind(&self) -> Kind {
            self.hold.kind
        }

        /// A handle that fires when the hold is lost (or released); clone it into the work.
        pub fn signal(&self) -> LossSignal {
            LossSignal::new(Arc::clone(&self.hold.lease))
        }

        /// True once the hold is lost; see [`LossSignal::is_lost`].
        pub fn is_lost(&self) -> bool {
            self.hold.lease.status().is_err()
        }
    };
}
pub(crate) use hold_accessors;

/// What a hold is, shared by a guard and its keep-alive.
pub(crate) struct Hold {
    pub spec: Spec,
    pub token: String,
    pub kind: Kind,
    pub fence: AtomicU64,
    pub lease: Arc<Lease>,
}

impl Hold {
    /// A hold whose lease was last confirmed by a command sent at `base`.
    pub(crate) fn new(spec: Spec, token: String, kind: Kind, fence: u64, base: Instant) -> Self {
        let lease = Lease::new(base, spec.opts.ttl);
        Hold {
            spec,
            token,
            kind,
            fence: AtomicU64::new(fence),
            lease,
        }
    }

    /// Notes a `FENCED` refusal of a write under `fence`: news that the hold is gone when
    /// the lock is not held, or held under a newer fence than any this hold took (the
    /// refusals are listed in docs/commands.md, "Errors").
    pub(crate) fn note_fenced(&self, fence: u64, refusal: &Fenced) {
        let gone = match refusal.reason.as_str() {
            "the lock is not held" => true,
            "the lock is held under a newer fence" => self.fence.load(Ordering::SeqCst) == fence,
            _ => false,
        };
        if gone {
            self.lease.end(LossReason::NotHeld);
        }
    }
}

/// The reply to an extend: whether the token still held the lock, and, in durable mode, the
/// replicas' shortfall if they did not acknowledge it in time.
pub(crate) type Extended = RedisResult<(bool, Option<Shortfall>)>;

impl Hold {
    /// What an extend sent at `sent` means for the hold, the same for the keep-alive and
    /// `extend()`: confirmed, or the hold ends (a reply of 0, an error, or, in durable mode,
    /// too few replicas: a replica promoted after an unconfirmed extend has the earlier lease,
    /// so the hold may end there sooner than the holder believes).
    pub(crate) fn extended(&self, sent: Instant, reply: Extended) -> Result<(), Error> {
        let lease = &self.lease;
        match reply {
            Ok((true, None)) => lease.confirm(sent).map_err(Error::Lost),
            Ok((true, Some(shortfall))) => {
                lease.end(shortfall.loss());
                Err(shortfall.into())
            }
            Ok((false, _)) => {
                lease.end(LossReason::NotHeld);
                Err(Error::Lost(LossReason::NotHeld))
            }
            Err(e) => {
                lease.end(LossReason::Error(e.clone()));
                Err(Error::Redis(e))
            }
        }
    }
}

/// The next extend is due a little before `every` after the last confirmed one, so that the
/// keep-alives of many holders do not fall into step.
pub(crate) fn next_extend(base: Instant, every: Duration) -> Instant {
    let jitter = every.mul_f64(rand::random_range(0.0..0.1));
    base + (every - jitter)
}

/// A held lock (exclusive, shared, or one permit), from [`Mutex::lock`](crate::Mutex::lock),
/// [`RwLock::read`](crate::RwLock::read)/[`write`](crate::RwLock::write) or
/// [`Semaphore::acquire`](crate::Semaphore::acquire). Released when dropped, also while
/// unwinding from a panic. A keep-alive extends the lease while it lives: from the first
/// extend on, a task on one background thread that serves every hold of the process; see
/// [`LossSignal`] for when the hold counts as lost.
pub struct Guard {
    hold: Arc<Hold>,
    /// For the caller's commands and the release: taken from the lock's pool on first use,
    /// given back at the release. The keep-alive uses another (the lock's shared
    /// connection; in durable mode one of the hold's own), so that a slow guarded write
    /// cannot hold up an extend.
    user: std::sync::Mutex<Option<SyncConn>>,
    /// The hold's entry in the keep-alive starter.
    keepalive: Option<u64>,
    released: bool,
}

impl Guard {
    /// Wraps a granted hold; `conn` is the connection of the grant.
    pub(crate) fn start(hold: Hold, conn: SyncConn) -> Result<Guard, Error> {
        let every = hold.spec.opts.keepalive_every();
        // Back to the pool: a hold needs no connection of its own until it is used.
        hold.spec.pool.give_back(conn);
        let mut guard = Guard {
            hold: Arc::new(hold),
            user: std::sync::Mutex::new(None),
            keepalive: None,
            released: false,
        };
        if let Some(every) = every {
            // On failure, dropping the guard releases the grant.
            let starter = Starter::get()?;
            guard.keepalive = Some(starter.add(Arc::clone(&guard.hold), every));
        }
        Ok(guard)
    }

    hold_accessors!();

    /// Blocks until the hold is lost; see [`LossSignal::wait`].
    pub fn wait_lost(&self) -> LossReason {
        self.signal().wait()
    }

    /// Runs `command` through `LOCK.GUARD` with this hold's fence: it runs only while the
    /// fence is the lock's current one. The reply is the command's own; a refusal is
    /// [`GuardError::Fenced`] (nothing ran). The server decides, not the loss signal: a write
    /// after a loss the server has not seen yet still lands, fenced correctly.
    ///
    /// A refusal because the lock is not held, or is held under a newer fence, also ends the
    /// hold: the loss signal fires.
    ///
    /// In durable mode a write that ran is followed by `WAIT replicas timeout` on the same
    /// connection (not a refusal: nothing ran); with fewer acknowledgements it is
    /// [`GuardError::NotDurable`]: the write ran on the master, and whether it survives a
    /// failover is unknown.
    pub fn guard<T: FromRedisValue>(&self, command: &Cmd) -> Result<T, GuardError> {
        let fence = self.fence();
        let cmd = cmds::guard(&self.hold.spec.key, fence, command);
        let reply = self.with_conn(|c| {
            let reply = c.query(&cmd)?;
            Ok((reply, durable::wait_sync(c, &self.hold.spec)?))
        });
        match reply.map_err(GuardError::from) {
            Ok((_, Some(shortfall))) => Err(shortfall.into()),
            Ok((reply, None)) => Ok(redis::from_redis_value(reply).map_err(RedisError::from)?),
            Err(GuardError::Fenced(refusal)) => {
                self.hold.note_fenced(fence, &refusal);
                Err(GuardError::Fenced(refusal))
            }
            Err(e) => Err(e),
        }
    }

    /// Extends the lease by the ttl now. A reply of 0, or any error, ends the hold
    /// (`Error::Lost`, or the error), as for the keep-alive. In durable mode the extend is
    /// followed by `WAIT replicas timeout` on the same connection, and too few
    /// acknowledgements end the hold too ([`Error::NotDurable`]; the loss reason is
    /// [`LossReason::Error`]): a replica promoted after an unconfirmed extend has the earlier
    /// lease, so the hold may end there sooner than the holder believes.
    pub fn extend(&self) -> Result<(), Error> {
        self.hold.lease.status().map_err(Error::Lost)?;
        let spec = &self.hold.spec;
        let cmd = cmds::extend(self.key(), self.token(), spec.opts.ttl);
        let sent = Instant::now();
        let reply = self.with_conn(|c| {
            let held = cmds::bool_reply(c.query(&cmd)?)?;
            let shortfall = if held {
                durable::wait_sync(c, spec)?
            } else {
                None
            };
            Ok((held, shortfall))
        });
        self.hold.extended(sent, reply)
    }

    /// Takes a new fence for this hold (`LOCK.FENCE`), larger than every fence before; later
    /// guarded writes use it, and writes under the old one are refused.
    pub fn refence(&self) -> Result<u64, Error> {
        let cmd = cmds::fence(self.key(), self.token());
        match self
            .with_conn(|c| c.query(&cmd))
            .and_then(cmds::fence_reply)?
        {
            Some(fence) => {
                self.hold.fence.store(fence, Ordering::SeqCst);
                Ok(fence)
            }
            None => {
                self.hold.lease.end(LossReason::NotHeld);
                Err(Error::Lost(LossReason::NotHeld))
            }
        }
    }

    /// Releases the hold now: `Ok(true)` if this token still held it, `Ok(false)` if it had
    /// already lost it. Dropping the guard does the same, ignoring the outcome.
    pub fn release(mut self) -> Result<bool, Error> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<bool, Error> {
        self.released = true;
        // First, so that the keep-alive stops and the work learns it before the lock is free.
        self.hold.lease.end(LossReason::Released);
        if let Some(id) = self.keepalive.take() {
            if let Ok(starter) = Starter::get() {
                starter.cancel(id);
            }
        }
        let cmd = cmds::release(self.key(), self.token());
        let reply = match self.with_conn(|c| c.query(&cmd)) {
            // The connection broke (which may be how the hold was lost; the pool's idle ones
            // may be broken too): once more, on a new one. A release is harmless to repeat.
            Err(e) if cmds::outcome_unknown(&e) => {
                let spec = &self.hold.spec;
                let conn = SyncConn::open(&spec.target, spec.opts.timeout)?;
                conn.set_timeout(Some(spec.opts.timeout))?;
                *self.user.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(conn);
                self.with_conn(|c| c.query(&cmd))
            }
            reply => reply,
        };
        let conn = self
            .user
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(conn) = conn {
            self.hold.spec.pool.give_back(conn);
        }
        cmds::bool_reply(reply?).map_err(Error::Redis)
    }

    /// Runs `f` on the caller's connection (one from the pool if the last one broke). A
    /// connection whose last call failed other than with a server reply is in doubt (a late
    /// reply could be read as the next one's) and is not used again.
    fn with_conn<T>(&self, f: impl FnOnce(&mut SyncConn) -> RedisResult<T>) -> RedisResult<T> {
        let spec = &self.hold.spec;
        let mut slot = self.user.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = match slot.as_mut() {
            Some(conn) => conn,
            None => {
                let (conn, _) = spec.pool.take(&spec.target, spec.opts.timeout)?;
                conn.set_timeout(Some(spec.opts.timeout))?;
                slot.insert(conn)
            }
        };
        let result = f(conn);
        if let Err(e) = &result {
            if cmds::outcome_unknown(e) {
                *slot = None;
            }
        }
        result
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.released {
            // Nothing to report to; a lease that could not be released ends on its own.
            let _ = self.release_now();
        }
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key())
            .field("kind", &self.kind())
            .field("fence", &self.fence())
            .field("lost", &self.hold.lease.status().err())
            .finish()
    }
}
