//! The blocking API: [`Mutex`], [`RwLock`], [`Semaphore`], each handing out [`Guard`]s.

use std::time::{Duration, Instant};

use crate::commands as cmds;
use crate::durable;
use crate::error::Error;
use crate::guard::{Guard, Hold};
use crate::info::{parse_holders, parse_info, Holder, LockInfo};
use crate::options::{lock_options, Kind, Spec, Target, Wait};
use crate::sync_conn::SyncConn;

/// A distributed mutex: one holder at a time, served first come, first served.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock_client::Error> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mutex = redis_lock_client::Mutex::new(client, "{order:42}:lock");
/// let guard = mutex.lock()?;
/// let mut hset = redis::cmd("HSET");
/// hset.arg("{order:42}:data").arg("status").arg("paid");
/// let _: i64 = guard.guard(&hset)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    spec: Spec,
}

impl Mutex {
    /// A mutex at `key`, with the default options (ttl 30 s, wait 10 s, keep-alive every
    /// third of the ttl).
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        Mutex {
            spec: Spec::new(target, key, false),
        }
    }

    lock_options!();

    /// Waits (up to the configured wait) for the lock; [`Error::Timeout`] if not granted.
    pub fn lock(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Exclusive)
    }

    /// The lock's state (`LOCK.INFO`); `None` if nobody holds it or waits.
    pub fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec)
    }

    /// Every hold (`LOCK.HOLDERS`), in the order they were granted.
    pub fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec)
    }
}

/// A distributed read-write lock: readers share it, a writer holds it alone. Both wait in
/// one first-come-first-served queue, where a waiting writer holds back the readers that
/// come after it. A reader's fence guards no write.
#[derive(Clone)]
pub struct RwLock {
    spec: Spec,
}

impl RwLock {
    /// A read-write lock at `key`, with the default options.
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        RwLock {
            spec: Spec::new(target, key, false),
        }
    }

    lock_options!();

    /// A shared hold (`SHARED`).
    pub fn read(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Shared)
    }

    /// An exclusive hold.
    pub fn write(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Exclusive)
    }

    /// The lock's state (`LOCK.INFO`).
    pub fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec)
    }

    /// Every hold (`LOCK.HOLDERS`).
    pub fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec)
    }
}

/// A distributed counting semaphore: at most `permits` holders (`SHARED LIMIT permits`),
/// each with its own lease and fence. The key stores no capacity: give every user of a key
/// the same `permits`.
#[derive(Clone)]
pub struct Semaphore {
    spec: Spec,
    permits: u32,
}

impl Semaphore {
    /// A semaphore of `permits` permits at `key`, with the default options.
    pub fn new(target: impl Into<Target>, key: impl Into<String>, permits: u32) -> Self {
        Semaphore {
            spec: Spec::new(target, key, false),
            permits,
        }
    }

    lock_options!();

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits for one permit.
    pub fn acquire(&self) -> Result<Guard, Error> {
        acquire(&self.spec, Kind::Permit(self.permits))
    }

    /// The lock's state (`LOCK.INFO`).
    pub fn info(&self) -> Result<Option<LockInfo>, Error> {
        info(&self.spec)
    }

    /// Every permit held (`LOCK.HOLDERS`).
    pub fn holders(&self) -> Result<Vec<Holder>, Error> {
        holders(&self.spec)
    }
}

fn query_once(spec: &Spec, cmd: &redis::Cmd) -> Result<redis::Value, Error> {
    let mut conn = SyncConn::open(&spec.target, spec.opts.timeout)?;
    conn.set_timeout(Some(spec.opts.timeout))?;
    Ok(conn.query(cmd)?)
}

fn info(spec: &Spec) -> Result<Option<LockInfo>, Error> {
    Ok(parse_info(query_once(spec, &cmds::info(&spec.key))?)?)
}

fn holders(spec: &Spec) -> Result<Vec<Holder>, Error> {
    Ok(parse_holders(query_once(spec, &cmds::holders(&spec.key))?)?)
}

/// A pause of 1 to 3 ms before retrying after `TRYAGAIN`.
pub(crate) fn tryagain_pause() -> Duration {
    Duration::from_micros(rand::random_range(1_000..3_000))
}

/// How many `TRYAGAIN`s in a row an acquire takes before giving up.
pub(crate) const TRYAGAIN_LIMIT: u32 = 100;

fn acquire(spec: &Spec, kind: Kind) -> Result<Guard, Error> {
    acquire_as(spec, kind, None)
}

/// An acquire under `token` (an election's candidate identity), or a fresh token per try.
pub(crate) fn acquire_as(spec: &Spec, kind: Kind, token: Option<&str>) -> Result<Guard, Error> {
    let opts = &spec.opts;
    opts.check()?;
    if kind == Kind::Permit(0) {
        return Err(Error::Config("a semaphore needs at least one permit"));
    }
    // The acquire has the connection to itself (a WAIT blocks it, as BLPOP does); it comes
    // from the lock's pool and goes back to it when the guard is done with it.
    let (mut conn, mut reused) = spec.pool.take(&spec.target, opts.timeout)?;
    let started = Instant::now();
    let mut tryagains = 0;
    loop {
        let wait = opts.wait.left(started).ok_or(Error::Timeout)?;
        let token = token.map_or_else(cmds::new_token, str::to_owned);
        conn.set_timeout(wait.reply_budget(opts.timeout))?;
        let sent = Instant::now();
        let cmd = cmds::acquire(&spec.key, &token, opts.ttl, kind, wait);
        let fence = match conn.query(&cmd).and_then(cmds::fence_reply) {
            Ok(Some(fence)) => fence,
            Ok(None) => {
                spec.pool.give_back(conn);
                return Err(Error::Timeout);
            }
            Err(e) if cmds::is_tryagain(&e) && tryagains < TRYAGAIN_LIMIT => {
                tryagains += 1;
                std::thread::sleep(tryagain_pause());
                continue;
            }
            Err(e) => {
                if cmds::outcome_unknown(&e) {
                    // A grant may have been made and its reply lost with the connection.
                    drop(conn);
                    release_in_doubt(spec, &token);
                    if reused {
                        // An idle connection the server may have closed meanwhile: once more,
                        // on a new one.
                        reused = false;
                        conn = SyncConn::open(&spec.target, opts.timeout)?;
                        continue;
                    }
                    return Err(e.into());
                }
                spec.pool.give_back(conn);
                return Err(e.into());
            }
        };
        match confirm_grant(&mut conn, spec, &token, sent) {
            Ok(Some(base)) => {
                let hold = Hold::new(spec.clone(), token, kind, fence, base);
                return Guard::start(hold, conn);
            }
            // The grant's lease ran out in the queue's reply path: try again while the wait
            // lasts.
            Ok(None) if !matches!(opts.wait, Wait::No) => continue,
            Ok(None) => return Err(Error::Timeout),
            // Released already.
            Err(e @ Error::NotDurable { .. }) => return Err(e),
            Err(e) => {
                release_in_doubt(spec, &token);
                return Err(e);
            }
        }
    }
}

/// Makes a fresh grant fit to hand out: renews its lease if a third of it went by before
/// the reply came (a grant from the queue: the lease counts from the send, which may be long
/// ago), then, in durable mode, has replicas acknowledge it. The base of the lease, or
/// `None` if the lease had already ended.
fn confirm_grant(
    conn: &mut SyncConn,
    spec: &Spec,
    token: &str,
    sent: Instant,
) -> Result<Option<Instant>, Error> {
    let opts = &spec.opts;
    let mut base = sent;
    if sent.elapsed() * 3 > opts.ttl {
        conn.set_timeout(Some(opts.timeout))?;
        let renewed = Instant::now();
        if !cmds::bool_reply(conn.query(&cmds::extend(&spec.key, token, opts.ttl))?)? {
            return Ok(None);
        }
        base = renewed;
    }
    if let Some(shortfall) = durable::wait_sync(conn, spec)? {
        conn.query(&cmds::release(&spec.key, token))?;
        return Err(shortfall.into());
    }
    Ok(Some(base))
}

/// Best effort, after an acquire whose outcome is unknown: release the token on a fresh
/// connection, in case the server granted it.
fn release_in_doubt(spec: &Spec, token: &str) {
    if let Ok(mut conn) = SyncConn::open(&spec.target, spec.opts.timeout) {
        if conn.set_timeout(Some(spec.opts.timeout)).is_ok() {
            let _ = conn.query(&cmds::release(&spec.key, token));
        }
    }
}
