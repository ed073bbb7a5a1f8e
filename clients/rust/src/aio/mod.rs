//! The async (tokio) API: [`Mutex`], [`RwLock`], [`Semaphore`], each handing out
//! [`Guard`]s, and leader [`Election`]. Same options and semantics as the blocking types.
//!
//! A wait can be cancelled by dropping its future (a `select!`, a `timeout`): the waiting
//! connection is closed, so the server passes on a grant it had not yet delivered, and a
//! spawned clean-up releases a grant whose reply was already on its way.

pub(crate) mod conn;
mod election;
pub(crate) mod guard;

use std::time::Instant;

use crate::blocking::{tryagain_pause, TRYAGAIN_LIMIT};
use crate::commands as cmds;
use crate::durable;
use crate::error::Error;
use crate::guard::Hold;
use crate::info::{parse_holders, parse_info, Holder, LockInfo};
use crate::options::{lock_options, Kind, Spec, Target, Wait};
use conn::AsyncConn;
use guard::{Linger, Pending};

pub use election::{Election, Leadership, Observer};
pub use guard::Guard;

/// A distributed mutex (async); see [`crate::Mutex`].
///
/// ```no_run
/// # async fn run() -> Result<(), redis_lock_client::Error> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mutex = redis_lock_client::aio::Mutex::new(client, "{order:42}:lock");
/// let guard = mutex.lock().await?;
/// let mut hset = redis::cmd("HSET");
/// hset.arg("{order:42}:data").arg("status").arg("paid");
/// tokio::select! {
///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
///     done = guard.guard::<i64>(&hset) => { done?; }
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    spec: Spec,
}

impl Mutex {
    /// A mutex at `key`, with the default options.
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        Mutex {
            spec: Spec::new(target, key, true),
        }
    }

    lock_options!();

    /// Waits (up to the configured wait) for the lock; [`Error::Timeout`] if not granted.
    pub async fn lock(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Exclusive).await
    }

    /// The lock's state (`LOCK.INFO`).
    pub async fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec).await
    }

    /// Every hold (`LOCK.HOLDERS`).
    pub async fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec).await
    }
}

/// A distributed read-write lock (async); see [`crate::RwLock`].
#[derive(Clone)]
pub struct RwLock {
    spec: Spec,
}

impl RwLock {
    /// A read-write lock at `key`, with the default options.
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        RwLock {
            spec: Spec::new(target, key, true),
        }
    }

    lock_options!();

    /// A shared hold.
    pub async fn read(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Shared).await
    }

    /// An exclusive hold.
    pub async fn write(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Exclusive).await
    }

    /// The lock's state (`LOCK.INFO`).
    pub async fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec).await
    }

    /// Every hold (`LOCK.HOLDERS`).
    pub async fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec).await
    }
}

/// A distributed counting semaphore (async); see [`crate::Semaphore`].
#[derive(Clone)]
pub struct Semaphore {
    spec: Spec,
    permits: u32,
}

impl Semaphore {
    /// A semaphore of `permits` permits at `key`, with the default options.
    pub fn new(target: impl Into<Target>, key: impl Into<String>, permits: u32) -> Self {
        Semaphore {
            spec: Spec::new(target, key, true),
            permits,
        }
    }

    lock_options!();

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits for one permit.
    pub async fn acquire(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Permit(self.permits)).await
    }

    /// The lock's state (`LOCK.INFO`).
    pub async fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec).await
    }

    /// Every permit held (`LOCK.HOLDERS`).
    pub async fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec).await
    }
}

async fn query_once(spec: &Spec, cmd: &redis::Cmd) -> Result<redis::Value, Error> {
    let mut conn = AsyncConn::open(&spec.target, spec.opts.timeout).await?;
    Ok(conn.query(cmd, Some(spec.opts.timeout)).await?)
}

async fn info(spec: &Spec) -> Result<Option<LockInfo>, Error> {
    Ok(parse_info(query_once(spec, &cmds::info(&spec.key)).await?)?)
}

async fn holders(spec: &Spec) -> Result<Vec<Holder>, Error> {
    Ok(parse_holders(
        query_once(spec, &cmds::holders(&spec.key)).await?,
    )?)
}

async fn acquire(spec: &Spec, kind: Kind) -> Result<Guard, Error> {
    acquire_as(spec, kind, None, None).await
}

/// An acquire under `token` (an election's candidate identity), or a fresh token per try;
/// the clean-up of a cancelled acquire keeps `linger` until it is done.
pub(crate) async fn acquire_as(
    spec: &Spec,
    kind: Kind,
    token: Option<&str>,
    linger: Option<Linger>,
) -> Result<Guard, Error> {
    let opts = &spec.opts;
    opts.check()?;
    if kind == Kind::Permit(0) {
        return Err(Error::Config("a semaphore needs at least one permit"));
    }
    // The keep-alive and the clean-up of a cancelled wait are tasks of their own.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::Config("the async API runs in a tokio runtime"));
    }
    let started = Instant::now();
    // First ask once, on the lock's shared connection: an uncontended lock costs one round
    // trip. Not in durable mode, whose `WAIT` for replicas would hold up the connection.
    if opts.durable.is_none() {
        match try_shared(spec, kind, token, linger.clone()).await? {
            Tried::Granted(guard) => return Ok(guard),
            Tried::Busy if matches!(opts.wait, Wait::No) => return Err(Error::Timeout),
            // Held or queued for: wait in the queue. (Or the shared connection failed: try
            // again on a connection of its own.)
            Tried::Busy | Tried::Failed => {}
        }
    }
    acquire_dedicated(spec, kind, token, linger, started).await
}

enum Tried {
    Granted(Guard),
    /// Held, or others queued for it (the server grants in order: asking once jumps no
    /// queue).
    Busy,
    /// The shared connection failed with the outcome unknown; a clean-up releases the token.
    Failed,
}

/// `LOCK.ACQUIRE` without `WAIT` on the shared connection. Dropped mid-way, the clean-up
/// releases the token on the same connection, after the acquire.
async fn try_shared(
    spec: &Spec,
    kind: Kind,
    token: Option<&str>,
    linger: Option<Linger>,
) -> Result<Tried, Error> {
    let opts = &spec.opts;
    let (generation, mut conn) = match spec.pool.shared(&spec.target, opts.timeout).await {
        Ok(shared) => shared,
        Err(_) => return Ok(Tried::Failed),
    };
    let mut tryagains = 0;
    loop {
        let token = token.map_or_else(cmds::new_token, str::to_owned);
        let mut pending = Pending::new(&spec.target, &spec.key, &token, None, opts.timeout)
            .on_shared(&conn)
            .lingering(linger.clone());
        let sent = Instant::now();
        let cmd = cmds::acquire(&spec.key, &token, opts.ttl, kind, Wait::No);
        match conn
            .query(&cmd, Some(opts.timeout))
            .await
            .and_then(cmds::fence_reply)
        {
            Ok(Some(fence)) => {
                pending.disarm();
                // No wait in the queue: the lease counts from the send, and the keep-alive
                // renews it in time from there.
                let hold = Hold::new(spec.clone(), token, kind, fence, sent);
                return Ok(Tried::Granted(Guard::start(hold, conn)));
            }
            Ok(None) => {
                pending.disarm();
                return Ok(Tried::Busy);
            }
            Err(e) if cmds::is_tryagain(&e) && tryagains < TRYAGAIN_LIMIT => {
                pending.disarm();
                tryagains += 1;
                tokio::time::sleep(tryagain_pause()).await;
            }
            Err(e) if cmds::outcome_unknown(&e) => {
                spec.pool.discard_shared(generation);
                pending.not_shared();
                return Ok(Tried::Failed);
            }
            Err(e) => {
                pending.disarm();
                return Err(e.into());
            }
        }
    }
}

/// An acquire on a connection of its own, which a `WAIT` blocks as `BLPOP` does, and which
/// closes when the acquire is dropped (so that the server passes on an undelivered grant).
async fn acquire_dedicated(
    spec: &Spec,
    kind: Kind,
    token: Option<&str>,
    linger: Option<Linger>,
    started: Instant,
) -> Result<Guard, Error> {
    let opts = &spec.opts;
    let mut conn = AsyncConn::open(&spec.target, opts.timeout).await?;
    // Lets the clean-up of a cancelled wait see when the server has dropped this connection.
    let client_id = conn
        .query_at(&cmds::client_id(), &spec.key, Some(opts.timeout))
        .await
        .and_then(cmds::int_reply)
        .ok();
    let mut tryagains = 0;
    loop {
        let wait = opts.wait.left(started).ok_or(Error::Timeout)?;
        let token = token.map_or_else(cmds::new_token, str::to_owned);
        // Declared after `conn`, so dropped before it: the clean-up is spawned, then the
        // connection closes.
        let mut pending = Pending::new(&spec.target, &spec.key, &token, client_id, opts.timeout)
            .lingering(linger.clone());
        let sent = Instant::now();
        let cmd = cmds::acquire(&spec.key, &token, opts.ttl, kind, wait);
        let reply = conn.query(&cmd, wait.reply_budget(opts.timeout)).await;
        let fence = match reply.and_then(cmds::fence_reply) {
            Ok(Some(fence)) => fence,
            Ok(None) => {
                pending.disarm();
                return Err(Error::Timeout);
            }
            Err(e) if cmds::is_tryagain(&e) && tryagains < TRYAGAIN_LIMIT => {
                pending.disarm();
                tryagains += 1;
                tokio::time::sleep(tryagain_pause()).await;
                continue;
            }
            Err(e) => {
                if !cmds::outcome_unknown(&e) {
                    pending.disarm();
                }
                return Err(e.into());
            }
        };
        match confirm_grant(&mut conn, spec, &token, sent).await {
            Ok(Some(base)) => {
                pending.disarm();
                let hold = Hold::new(spec.clone(), token, kind, fence, base);
                return Ok(Guard::start(hold, conn));
            }
            Ok(None) => {
                pending.disarm();
                if matches!(opts.wait, Wait::No) {
                    return Err(Error::Timeout);
                }
            }
            Err(e @ Error::NotDurable { .. }) => {
                pending.disarm();
                return Err(e);
            }
            // `pending` releases the grant.
            Err(e) => return Err(e),
        }
    }
}

/// See the blocking `confirm_grant`: renew a grant that waited long in the queue's reply
/// path, then have replicas acknowledge it in durable mode.
async fn confirm_grant(
    conn: &mut AsyncConn,
    spec: &Spec,
    token: &str,
    sent: Instant,
) -> Result<Option<Instant>, Error> {
    let opts = &spec.opts;
    let mut base = sent;
    if sent.elapsed() * 3 > opts.ttl {
        let renewed = Instant::now();
        let extend = cmds::extend(&spec.key, token, opts.ttl);
        if !cmds::bool_reply(conn.query(&extend, Some(opts.timeout)).await?)? {
            return Ok(None);
        }
        base = renewed;
    }
    if let Some(shortfall) = durable::wait_async(conn, spec).await? {
        let release = cmds::release(&spec.key, token);
        conn.query(&release, Some(opts.timeout)).await?;
        return Err(shortfall.into());
    }
    Ok(Some(base))
}
