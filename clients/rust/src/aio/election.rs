//! Leader election (async): [`Election`], [`Leadership`], and [`Observer`], a `Stream` of
//! leader changes. Same semantics as the blocking types (`crate::election`).

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::conn::AsyncConn;
use super::guard::Linger;
use super::Guard;
use crate::commands as cmds;
use crate::election::{
    check_identity, default_identity, leader_of, Follow, Leader, Office, OBSERVE_TIMEOUT,
};
use crate::error::Error;
use crate::info::{parse_info, LockInfo};
use crate::options::{lock_options, Kind, Spec, Target};

/// A leader election on one lock key (async); see [`crate::Election`].
///
/// ```no_run
/// # async fn run() -> Result<(), redis_lock_client::Error> {
/// # async fn serve(_fence: u64) {}
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let election = redis_lock_client::aio::Election::new(client, "{jobs}:leader");
/// let leadership = election.campaign().await?;
/// tokio::select! {
///     reason = leadership.lost() => eprintln!("no longer the leader: {reason}"),
///     () = serve(leadership.fence()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    spec: Spec,
    identity: String,
    observe_timeout: Duration,
    office: Arc<AtomicBool>,
    /// Held (read) by each release of this identity that may still come: a cancelled
    /// campaign's clean-up, a dropped leadership's release. A campaign waits for them (a
    /// write) before it asks, or the late release would end the new leadership.
    settling: Arc<tokio::sync::RwLock<()>>,
}

impl Election {
    /// An election on `key`, for a candidate with the default identity (`host:pid:uuid`).
    pub fn new(target: impl Into<Target>, key: impl Into<String>) -> Self {
        Election {
            spec: Spec::new(target, key, true),
            identity: default_identity(),
            observe_timeout: OBSERVE_TIMEOUT,
            office: Arc::default(),
            settling: Arc::default(),
        }
    }

    lock_options!();

    /// The candidate's identity; see [`crate::Election::with_identity`].
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self.office = Arc::default();
        self.settling = Arc::default();
        self
    }

    /// How long each `LOCK.OBSERVE` blocks; see [`crate::Election::observe_timeout`].
    pub fn observe_timeout(mut self, timeout: Duration) -> Self {
        self.observe_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits (up to the configured wait) to lead; see [`crate::Election::campaign`]. Dropping
    /// the future withdraws the candidacy, as for a cancelled [`Mutex::lock`](super::Mutex::lock).
    /// A campaign first waits for the clean-up of this candidate's cancelled campaigns and
    /// the release of its dropped leadership (usually a few milliseconds), whose late
    /// `LOCK.RELEASE` of its identity would otherwise end the new leadership.
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        check_identity(&self.identity)?;
        let office = Office::enter(&self.office)?;
        drop(Arc::clone(&self.settling).write_owned().await);
        let settling: Linger = Arc::new(Arc::clone(&self.settling).read_owned().await);
        let identity = Some(self.identity.as_str());
        let linger = Some(Arc::clone(&settling));
        let guard = super::acquire_as(&self.spec, Kind::Exclusive, identity, linger).await?;
        Ok(Leadership {
            guard: Some(guard),
            _office: office,
            settling: Some(settling),
        })
    }

    /// The current leader (`LOCK.INFO`), or `None` if nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let timeout = self.spec.opts.timeout;
        let mut conn = AsyncConn::open(&self.spec.target, timeout).await?;
        let reply = conn
            .query(&cmds::info(&self.spec.key), Some(timeout))
            .await?;
        Ok(leader_of(parse_info(reply)?.as_ref()))
    }

    /// The leaders of this key as they change: see [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer {
            idle: Some(Box::new(Follower {
                spec: self.spec.clone(),
                timeout: self.observe_timeout,
                conn: None,
                follow: Follow::default(),
            })),
            busy: None,
        }
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Election")
            .field("key", &self.spec.key)
            .field("identity", &self.identity)
            .finish()
    }
}

/// A candidate's leadership (async): an [`aio::Guard`](Guard) through `Deref`; see
/// [`crate::Leadership`]. Resign with [`resign`](Self::resign)`.await`; dropped, it
/// resigns in a spawned task, which the candidate's next campaign waits for.
pub struct Leadership {
    // Both `Some` until `resign` or the drop takes them.
    guard: Option<Guard>,
    _office: Office,
    settling: Option<Linger>,
}

impl Leadership {
    /// The leader's identity.
    pub fn identity(&self) -> &str {
        self.token()
    }

    /// Steps down (`LOCK.RELEASE`): `Ok(true)` if it still led, `Ok(false)` if the
    /// leadership was already lost.
    pub async fn resign(mut self) -> Result<bool, Error> {
        let guard = self.guard.take().expect("held until resigned");
        guard.release().await
    }
}

impl Deref for Leadership {
    type Target = Guard;

    fn deref(&self) -> &Guard {
        self.guard.as_ref().expect("held until resigned")
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let (Some(guard), settling) = (self.guard.take(), self.settling.take()) else {
            return;
        };
        // The guard's own drop would release in a task too; this one holds the candidate's
        // next campaign back until the release is done, lest it end the new leadership.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = guard.release().await;
                drop(settling);
            });
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Leadership")
            .field("guard", &self.guard)
            .finish()
    }
}

type Step = Pin<Box<dyn Future<Output = (Box<Follower>, Result<Option<Leader>, Error>)> + Send>>;

/// The leaders of an election as they change, from [`Election::observe`]: a
/// [`Stream`](futures_core::Stream) that never ends, of the items the blocking
/// [`Observer`](crate::Observer) gives (see there: the first state, then each change, in
/// strictly increasing fence order; errors as items, then a resume from the last fence
/// seen, with backoff). [`next_change`](Self::next_change)`.await` needs no stream
/// combinators.
///
/// Cancel-safe: a `next_change()` (or a stream `next()`) dropped mid-way loses nothing; the
/// call under way carries on at the next one. Its connection is its own, opened on the
/// first call, and closed when the observer is dropped.
pub struct Observer {
    idle: Option<Box<Follower>>,
    busy: Option<Step>,
}

struct Follower {
    spec: Spec,
    timeout: Duration,
    conn: Option<AsyncConn>,
    follow: Follow,
}

impl Follower {
    async fn step(mut self: Box<Self>) -> (Box<Self>, Result<Option<Leader>, Error>) {
        loop {
            let pause = self.follow.pause();
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let cmd = self.follow.command(&self.spec.key, self.timeout);
            let sent = Instant::now();
            match self.call(&cmd).await {
                Ok(info) => {
                    if let Some(change) = self.follow.reply(info, sent.elapsed(), self.timeout) {
                        return (self, Ok(change));
                    }
                }
                Err(e) => {
                    self.follow.failed();
                    return (self, Err(e));
                }
            }
        }
    }

    async fn call(&mut self, cmd: &redis::Cmd) -> Result<Option<LockInfo>, Error> {
        let timeout = self.spec.opts.timeout;
        let conn = match &mut self.conn {
            Some(conn) => conn,
            slot => slot.insert(AsyncConn::open(&self.spec.target, timeout).await?),
        };
        // Above the server's timeout, so that its answer, not ours, ends a call.
        let budget = self.timeout.saturating_add(timeout);
        match conn.query(cmd, Some(budget)).await {
            Ok(reply) => Ok(parse_info(reply)?),
            Err(e) => {
                if cmds::outcome_unknown(&e) {
                    self.conn = None;
                }
                Err(e.into())
            }
        }
    }
}

impl Observer {
    /// The next change: what the stream's next item is, unwrapped (it never ends).
    pub async fn next_change(&mut self) -> Result<Option<Leader>, Error> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    fn poll_change(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Leader>, Error>> {
        let step = match &mut self.busy {
            Some(step) => step,
            slot => {
                let follower = self
                    .idle
                    .take()
                    .expect("a follower when no step is under way");
                slot.insert(Box::pin(follower.step()))
            }
        };
        let (follower, item) = std::task::ready!(step.as_mut().poll(cx));
        self.busy = None;
        self.idle = Some(follower);
        Poll::Ready(item)
    }
}

impl futures_core::Stream for Observer {
    type Item = Result<Option<Leader>, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_change(cx).map(Some)
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Observer")
            .field("under_way", &self.busy.is_some())
            .finish()
    }
}
