//! The blocking guard: one hold, its keep-alive thread, and its release on drop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, PoisonError};
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Value};

use crate::commands as cmds;
use crate::error::{Error, Fenced, GuardError, LossReason};
use crate::options::{Kind, Spec};
use crate::signal::{Lease, LossSignal};
use crate::sync_conn::SyncConn;

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
    /// refusals are listed in the README's "Errors").
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

/// The next extend is due a little before `every` after the last confirmed one, so that the
/// keep-alives of many holders do not fall into step.
pub(crate) fn next_extend(base: Instant, every: Duration) -> Instant {
    let jitter = every.mul_f64(rand::random_range(0.0..0.1));
    base + (every - jitter)
}

/// A held lock (exclusive, shared, or one permit), from [`Mutex::lock`](crate::Mutex::lock),
/// [`RwLock::read`](crate::RwLock::read)/[`write`](crate::RwLock::write) or
/// [`Semaphore::acquire`](crate::Semaphore::acquire). Released when dropped, also while
/// unwinding from a panic. A keep-alive thread extends the lease while it lives; see
/// [`LossSignal`] for when the hold counts as lost.
pub struct Guard {
    hold: Arc<Hold>,
    /// For the caller's commands; the keep-alive has a connection of its own, so that a slow
    /// guarded write cannot hold up an extend.
    user: std::sync::Mutex<Option<SyncConn>>,
    /// The keep-alive hands its connection back here when it stops. (In a mutex only to
    /// make the guard `Sync`: it is touched only by the release, through `&mut self`.)
    keepalive: std::sync::Mutex<Option<mpsc::Receiver<SyncConn>>>,
    released: bool,
}

impl Guard {
    /// Wraps a granted hold; starts the keep-alive on `conn`, the connection of the grant.
    pub(crate) fn start(hold: Hold, conn: SyncConn) -> Result<Guard, Error> {
        let every = hold.spec.opts.keepalive_every();
        let mut guard = Guard {
            hold: Arc::new(hold),
            user: std::sync::Mutex::new(None),
            keepalive: std::sync::Mutex::new(None),
            released: false,
        };
        let Some(every) = every else {
            // No keep-alive: the grant's connection serves the caller.
            conn.set_timeout(Some(guard.hold.spec.opts.timeout))?;
            *guard.user.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(conn);
            return Ok(guard);
        };
        let (tx, rx) = mpsc::channel();
        let hold = Arc::clone(&guard.hold);
        let spawned = std::thread::Builder::new()
            .name("redis-lock-keepalive".into())
            .spawn(move || keep_alive(&hold, conn, every, &tx));
        match spawned {
            Ok(_) => {
                *guard
                    .keepalive
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner) = Some(rx);
                Ok(guard)
            }
            // Dropping the guard releases the grant (on a fresh connection).
            Err(e) => Err(Error::Redis(RedisError::from(e))),
        }
    }

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
    pub fn guard<T: FromRedisValue>(&self, command: &Cmd) -> Result<T, GuardError> {
        let fence = self.fence();
        let cmd = cmds::guard(&self.hold.spec.key, fence, command);
        match self.with_conn(|c| c.query(&cmd)).map_err(GuardError::from) {
            Ok(reply) => Ok(redis::from_redis_value(reply).map_err(RedisError::from)?),
            Err(GuardError::Fenced(refusal)) => {
                self.hold.note_fenced(fence, &refusal);
                Err(GuardError::Fenced(refusal))
            }
            Err(e) => Err(e),
        }
    }

    /// Extends the lease by the ttl now. A reply of 0, or any error, ends the hold
    /// (`Error::Lost`, or the error), as for the keep-alive.
    pub fn extend(&self) -> Result<(), Error> {
        let lease = &self.hold.lease;
        lease.status().map_err(Error::Lost)?;
        let cmd = cmds::extend(self.key(), self.token(), self.hold.spec.opts.ttl);
        let sent = Instant::now();
        match self.with_conn(|c| c.query(&cmd)).and_then(cmds::bool_reply) {
            Ok(true) => lease.confirm(sent).map_err(Error::Lost),
            Ok(false) => {
                lease.end(LossReason::NotHeld);
                Err(Error::Lost(LossReason::NotHeld))
            }
            Err(e) => {
                lease.end(LossReason::Error(e.clone()));
                Err(Error::Redis(e))
            }
        }
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
        let cmd = cmds::release(self.key(), self.token());
        let timeout = self.hold.spec.opts.timeout;
        // An idle keep-alive returns its connection at once; one stuck in a call to a silent
        // server is not waited for.
        let keepalive = self
            .keepalive
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let ka_conn = keepalive.take().and_then(|rx| {
            rx.recv_timeout(timeout.min(Duration::from_millis(100)))
                .ok()
        });
        if let Some(mut conn) = ka_conn {
            if let Ok(reply) = conn
                .set_timeout(Some(timeout))
                .and_then(|()| conn.query(&cmd))
            {
                return cmds::bool_reply(reply).map_err(Error::Redis);
            }
        }
        let reply = self.with_conn(|c| c.query(&cmd))?;
        cmds::bool_reply(reply).map_err(Error::Redis)
    }

    /// Runs `f` on the caller's connection, opened on first use. A connection whose last
    /// call failed other than with a server reply is in doubt (a late reply could be read as
    /// the next one's) and is not used again.
    fn with_conn(&self, f: impl FnOnce(&mut SyncConn) -> RedisResult<Value>) -> RedisResult<Value> {
        let opts = &self.hold.spec.opts;
        let mut slot = self.user.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = match slot.as_mut() {
            Some(conn) => conn,
            None => {
                let conn = SyncConn::open(&self.hold.spec.target, opts.timeout)?;
                conn.set_timeout(Some(opts.timeout))?;
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

/// The keep-alive thread: extends every `every` until the hold ends, and ends it on the
/// first answer that is not a confirmation.
fn keep_alive(hold: &Hold, mut conn: SyncConn, every: Duration, back: &mpsc::Sender<SyncConn>) {
    let lease = &hold.lease;
    let cmd = cmds::extend(&hold.spec.key, &hold.token, hold.spec.opts.ttl);
    loop {
        if lease.sleep_until(next_extend(lease.base(), every)).is_err() {
            break;
        }
        let Ok(deadline) = lease.status() else { break };
        let sent = Instant::now();
        // The call may not outlast the lease: past its end the hold is lost anyway.
        let budget = deadline.saturating_duration_since(sent);
        let reply = conn
            .set_timeout(Some(budget))
            .and_then(|()| conn.query(&cmd))
            .and_then(cmds::bool_reply);
        match reply {
            Ok(true) => {
                if lease.confirm(sent).is_err() {
                    break;
                }
            }
            Ok(false) => {
                lease.end(LossReason::NotHeld);
                break;
            }
            Err(e) => {
                let in_doubt = cmds::outcome_unknown(&e);
                lease.end(LossReason::Error(e));
                if in_doubt {
                    return;
                }
                break;
            }
        }
    }
    let _ = back.send(conn);
}
