//! Leader election on a lock key (blocking): [`Election`], [`Leadership`], [`Observer`], and
//! what the async ones share with them.
//!
//! A candidate campaigns by taking the key exclusively with its identity as the token
//! (`LOCK.ACQUIRE key identity ttl WAIT ms`), so `LOCK.INFO`'s holder names the leader; the
//! leader's hold is an ordinary [`Guard`], with its keep-alive, loss signal and fence.
//! Followers loop `LOCK.OBSERVE key seen timeout`, which answers when the key's state (the
//! newest fence among its holds, 0 when nobody holds it) differs from `seen`
//! (docs/commands.md).

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::commands as cmds;
use crate::error::Error;
use crate::guard::Guard;
use crate::info::{parse_info, LockInfo, Mode};
use crate::options::{lock_options, Kind, Spec, Target};
use crate::sync_conn::SyncConn;

/// The leader of an election: the candidate that holds its key exclusively, and the fence of
/// that hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leader {
    /// The candidate's identity (the token of its hold).
    pub identity: String,
    /// The fence of its hold: each leadership has a larger one than every leadership before
    /// (and a leader's [`refence`](crate::Guard::refence) takes a larger one still).
    pub fence: u64,
}

/// The longest token the server takes (docs/commands.md, `LOCK.ACQUIRE`).
const MAX_IDENTITY: usize = 256;

/// How long each `LOCK.OBSERVE` blocks by default before it answers the unchanged state.
pub(crate) const OBSERVE_TIMEOUT: Duration = Duration::from_secs(10);

/// `host:pid:uuid`: unique per candidate (the uuid: two candidates of one process, or a pid
/// reused), and readable in `LOCK.INFO` (the host and the pid: where the leader runs).
pub(crate) fn default_identity() -> String {
    let mut host = hostname();
    // The uuid (36), the pid (up to 10) and the colons must fit in a token.
    if host.len() > 128 {
        let mut end = 128;
        while !host.is_char_boundary(end) {
            end -= 1;
        }
        host.truncate(end);
    }
    format!("{host}:{}:{}", std::process::id(), cmds::new_token())
}

fn hostname() -> String {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname(2) writes at most `len` bytes into the buffer it is given.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let name = String::from_utf8_lossy(&buf[..end]).into_owned();
            if !name.is_empty() {
                return name;
            }
        }
    }
    std::env::var("HOSTNAME")
        .or_else(|_| std::env::var("COMPUTERNAME"))
        .unwrap_or_else(|_| "localhost".to_string())
}

pub(crate) fn check_identity(identity: &str) -> Result<(), Error> {
    if identity.is_empty() || identity.len() > MAX_IDENTITY {
        return Err(Error::Config(
            "a candidate's identity must be 1 to 256 bytes",
        ));
    }
    Ok(())
}

/// The leader in a `LOCK.INFO` (or `LOCK.OBSERVE`) reply: the exclusive holder. A key held
/// shared has no leader.
pub(crate) fn leader_of(info: Option<&LockInfo>) -> Option<Leader> {
    let info = info?;
    match (&info.holder, info.mode) {
        (Some(holder), Mode::Exclusive) if info.holders > 0 => Some(Leader {
            identity: holder.clone(),
            fence: info.fence,
        }),
        _ => None,
    }
}

/// Marks a candidate as campaigning or leading, for as long as it lives: its token is its
/// identity, and a second campaign under the same token would be granted the same hold
/// (`LOCK.ACQUIRE` renews a holder's own), so that releasing one would end both.
pub(crate) struct Office(Arc<AtomicBool>);

impl Office {
    pub(crate) fn enter(flag: &Arc<AtomicBool>) -> Result<Office, Error> {
        flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map_err(|_| {
                Error::Config(
                    "this candidate already campaigns or leads: resign (or drop its leadership) first",
                )
            })?;
        Ok(Office(Arc::clone(flag)))
    }
}

impl Drop for Office {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// What an observer has seen, and what it does next: the pure half of [`Observer`] and
/// [`aio::Observer`](crate::aio::Observer).
#[derive(Debug, Default)]
pub(crate) struct Follow {
    /// The first call is a `LOCK.INFO`: the current state is reported at once, whatever it is.
    started: bool,
    /// What to pass as `seen`: the reply's fence when it has holders, else 0.
    seen: u64,
    /// The highest fence yielded: no leader at or below it is yielded again.
    top: u64,
    /// What was yielded last: `None` before anything, `Some(true)` for a leader.
    last_was_leader: Option<bool>,
    /// Calls in a row that failed.
    failures: u32,
    /// Replies in a row that came at once with the state unchanged.
    idle: u32,
}

impl Follow {
    /// The next command: `LOCK.INFO key` first, then `LOCK.OBSERVE key seen timeout`.
    pub(crate) fn command(&self, key: &str, timeout: Duration) -> redis::Cmd {
        if !self.started {
            return cmds::info(key);
        }
        let mut c = redis::cmd("LOCK.OBSERVE");
        c.arg(key).arg(self.seen).arg(cmds::ms(timeout));
        c
    }

    /// How long to wait before the next command. After a failure: at once the first time
    /// (a connection the server closed is the common case, and a leader elected meanwhile
    /// must not be missed), then 50 ms doubling up to 2 s, jittered. After replies that
    /// came at once without a change (a key held shared, whose newest hold ended while
    /// older ones remain, has a last fence above its state; or `CLIENT UNBLOCK`): at once,
    /// then 5 ms doubling up to 500 ms, so that such a key is polled, not spun on.
    pub(crate) fn pause(&self) -> Duration {
        let doubling = |first_ms: u64, n: u32, cap_ms: u64| {
            let ms = first_ms.saturating_mul(1 << n.min(16)).min(cap_ms);
            Duration::from_millis(ms).mul_f64(rand::random_range(0.5..1.0))
        };
        if self.failures > 1 {
            doubling(50, self.failures - 2, 2_000)
        } else if self.idle > 1 {
            doubling(5, self.idle - 2, 500)
        } else {
            Duration::ZERO
        }
    }

    pub(crate) fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    /// A reply (`LOCK.INFO`'s shape), `waited` after its send, for an observe of `timeout`:
    /// what to yield, if anything.
    pub(crate) fn reply(
        &mut self,
        info: Option<LockInfo>,
        waited: Duration,
        timeout: Duration,
    ) -> Option<Option<Leader>> {
        self.failures = 0;
        let first = !self.started;
        self.started = true;
        let seen = match &info {
            Some(i) if i.holders > 0 => i.fence,
            _ => 0,
        };
        if seen == self.seen && !first && waited < timeout / 2 {
            self.idle = self.idle.saturating_add(1);
        } else {
            self.idle = 0;
        }
        self.seen = seen;
        match leader_of(info.as_ref()) {
            Some(leader) if leader.fence > self.top => {
                self.top = leader.fence;
                self.last_was_leader = Some(true);
                Some(Some(leader))
            }
            // The leader already yielded (a timeout, a reconnect) answers nothing new. One
            // below it can only be a server that lost the newest grants (a failover to a
            // replica that lagged): the leader yielded last is gone, and this one is older.
            Some(leader) if leader.fence == self.top => None,
            Some(_) | None if self.last_was_leader != Some(false) => {
                self.last_was_leader = Some(false);
                Some(None)
            }
            Some(_) | None => None,
        }
    }
}

/// A leader election on one lock key, after etcd's `concurrency.Election` and Curator's
/// `LeaderLatch`: [`campaign`](Self::campaign) waits in the key's queue to lead,
/// [`Leadership::resign`] (or dropping the leadership) steps down, [`leader`](Self::leader)
/// says who leads now and [`observe`](Self::observe) follows every change.
///
/// Each `Election` is one candidate, with an identity that is the token of its hold and that
/// `leader()` and observers report: [`with_identity`](Self::with_identity), or by default
/// `host:pid:uuid` (a fresh uuid per `Election::new`). Identities must be unique among the
/// candidates of a key: two candidates with one identity would share one hold. Clones are
/// the same candidate, and a candidate campaigns or leads once at a time.
///
/// The lock options apply to the leader's hold: `ttl` (default 30 s) is how long a leader
/// that crashed keeps the office; `wait` (default 10 s) how long `campaign` waits.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock_client::Error> {
/// # fn serve(_fence: u64, _signal: &redis_lock_client::LossSignal) {}
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let election = redis_lock_client::Election::new(client, "{jobs}:leader").wait_forever();
/// let leadership = election.campaign()?;
/// serve(leadership.fence(), &leadership.signal()); // until the signal fires
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    spec: Spec,
    identity: String,
    observe_timeout: Duration,
    office: Arc<AtomicBool>,
}

impl Election {
    /// An election on `key`, for a candidate with the default identity (`host:pid:uuid`).
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        Election {
            spec: Spec::new(target, key, false),
            identity: default_identity(),
            observe_timeout: OBSERVE_TIMEOUT,
            office: Arc::default(),
        }
    }

    lock_options!();

    /// The candidate's identity: 1 to 256 bytes, unique among the key's candidates. A new
    /// candidate: it no longer shares the campaign of the value it was made from.
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self.office = Arc::default();
        self
    }

    /// How long each `LOCK.OBSERVE` of [`observe`](Self::observe) blocks before the server
    /// answers the unchanged state and it asks again (default 10 s; at least 1 ms). It bounds
    /// how long a connection that died without a word goes unnoticed: the reply is awaited
    /// for this plus the command timeout.
    pub fn observe_timeout(mut self, timeout: Duration) -> Self {
        self.observe_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits (up to the configured wait) to lead: `LOCK.ACQUIRE key identity ttl WAIT ms`,
    /// first come, first served among the candidates. [`Error::Timeout`] if not elected in
    /// time; [`Error::Config`] if this candidate already campaigns or leads.
    pub fn campaign(&self) -> Result<Leadership, Error> {
        check_identity(&self.identity)?;
        let office = Office::enter(&self.office)?;
        let guard = crate::blocking::acquire_as(&self.spec, Kind::Exclusive, Some(&self.identity))?;
        Ok(Leadership {
            guard,
            _office: office,
        })
    }

    /// The current leader (`LOCK.INFO`), or `None` if nobody leads.
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        let mut conn = SyncConn::open(&self.spec.target, self.spec.opts.timeout)?;
        conn.set_timeout(Some(self.spec.opts.timeout))?;
        let info = parse_info(conn.query(&cmds::info(&self.spec.key))?)?;
        Ok(leader_of(info.as_ref()))
    }

    /// The leaders of this key as they change, on a connection of the observer's own: see
    /// [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer {
            spec: self.spec.clone(),
            timeout: self.observe_timeout,
            conn: None,
            follow: Follow::default(),
        }
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("key", &self.spec.key)
            .field("identity", &self.identity)
            .finish()
    }
}

/// A candidate's leadership: its hold of the election's key, a [`Guard`] (through `Deref`:
/// [`fence`](Guard::fence), [`signal`](Guard::signal), [`is_lost`](Guard::is_lost),
/// [`guard`](Guard::guard) for writes fenced by the leadership, ...). The keep-alive extends
/// it while it lives; the loss signal says when it may be over, and the leader must then
/// stop acting as one. Resigns when dropped.
pub struct Leadership {
    // Declared first, so released before the candidate may campaign again.
    guard: Guard,
    _office: Office,
}

impl Leadership {
    /// The leader's identity.
    pub fn identity(&self) -> &str {
        self.guard.token()
    }

    /// Steps down (`LOCK.RELEASE`): `Ok(true)` if it still led, `Ok(false)` if the
    /// leadership was already lost. The next candidate in the queue is elected at once.
    pub fn resign(self) -> Result<bool, Error> {
        self.guard.release()
    }
}

impl Deref for Leadership {
    type Target = Guard;

    fn deref(&self) -> &Guard {
        &self.guard
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.identity())
            .field("guard", &self.guard)
            .finish()
    }
}

/// The leaders of an election as they change, from [`Election::observe`]: an iterator that
/// never ends.
///
/// The first item is the state when it starts (`LOCK.INFO`): the leader, or `None` when
/// nobody leads. Then one item per change, from `LOCK.OBSERVE key <last fence seen>
/// <timeout>`: `Some(leader)` for each new leader (or a new fence of the same one), `None`
/// when the office falls vacant. Leaders come in strictly increasing fence order: one at or
/// below a fence already yielded never is. Each leader that holds the office for longer
/// than a round trip to the server is seen; the leaders between two calls (a quick
/// succession) are not all seen, only the newest.
///
/// Errors come as items, `Some(Err(e))`, and the iterator goes on: the next call reconnects
/// and resumes from the last fence seen, at once the first time, then with a backoff of
/// 50 ms doubling to 2 s. So `for change in observer { let change = change?; ... }` stops at
/// the first error, and a loop that logs errors and goes on rides out restarts and
/// failovers; in a cluster, the cluster client finds the key's new node.
///
/// The observer has a connection of its own, as a blocked `LOCK.OBSERVE` holds up every
/// command behind it on a connection; it is opened on the first call.
pub struct Observer {
    spec: Spec,
    timeout: Duration,
    conn: Option<SyncConn>,
    follow: Follow,
}

impl Observer {
    /// The next change (blocking): what [`Iterator::next`] gives, unwrapped.
    pub fn next_change(&mut self) -> Result<Option<Leader>, Error> {
        loop {
            let pause = self.follow.pause();
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            let cmd = self.follow.command(&self.spec.key, self.timeout);
            let sent = Instant::now();
            match self.call(&cmd) {
                Ok(info) => {
                    if let Some(change) = self.follow.reply(info, sent.elapsed(), self.timeout) {
                        return Ok(change);
                    }
                }
                Err(e) => {
                    self.follow.failed();
                    return Err(e);
                }
            }
        }
    }

    fn call(&mut self, cmd: &redis::Cmd) -> Result<Option<LockInfo>, Error> {
        let opts = &self.spec.opts;
        let conn = match &mut self.conn {
            Some(conn) => conn,
            slot => {
                let conn = SyncConn::open(&self.spec.target, opts.timeout)?;
                // Above the server's timeout, so that its answer, not ours, ends a call.
                conn.set_timeout(Some(self.timeout.saturating_add(opts.timeout)))?;
                slot.insert(conn)
            }
        };
        match conn.query(cmd) {
            Ok(reply) => Ok(parse_info(reply)?),
            Err(e) => {
                // A late reply would be read as the next call's.
                if cmds::outcome_unknown(&e) {
                    self.conn = None;
                }
                Err(e.into())
            }
        }
    }
}

impl Iterator for Observer {
    type Item = Result<Option<Leader>, Error>;

    /// Never `None`.
    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_change())
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("key", &self.spec.key)
            .field("follow", &self.follow)
            .finish()
    }
}

#[cfg(test)]
mod tests;
