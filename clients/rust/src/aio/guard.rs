//! The async guard: one hold, its keep-alive task, and the clean-up of abandoned grants.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, RedisError, Value};

use super::conn::AsyncConn;
use crate::commands as cmds;
use crate::durable;
use crate::error::{Error, GuardError, LossReason};
use crate::guard::{next_extend, Hold};
use crate::options::{Kind, Target};
use crate::signal::LossSignal;

/// A held lock (exclusive, shared, or one permit), from the async
/// [`Mutex`](super::Mutex), [`RwLock`](super::RwLock) or [`Semaphore`](super::Semaphore).
///
/// Release it with [`release`](Self::release)`.await`. Dropped unreleased (an early return,
/// a panic, a cancelled task), it stops its keep-alive and releases in a spawned task, best
/// effort. A keep-alive task extends the lease while it lives; see [`LossSignal`] for when
/// the hold counts as lost.
pub struct Guard {
    hold: Arc<Hold>,
    /// The grant's connection, for the caller's commands and the release (the keep-alive's
    /// extends go elsewhere: see `keep_alive`).
    conn: AsyncConn,
    keepalive: Option<tokio::task::JoinHandle<()>>,
    released: bool,
}

impl Guard {
    /// Wraps a granted hold and starts its keep-alive; needs a tokio runtime. `conn` carries
    /// the caller's commands and the release; the keep-alive uses the lock's shared
    /// connection (in durable mode, one of its own).
    pub(crate) fn start(hold: Hold, conn: AsyncConn) -> Guard {
        let hold = Arc::new(hold);
        let keepalive = hold
            .spec
            .opts
            .keepalive_every()
            .map(|every| tokio::spawn(keep_alive(Arc::clone(&hold), every)));
        Guard {
            hold,
            conn,
            keepalive,
            released: false,
        }
    }

    crate::guard::hold_accessors!();

    /// Resolves when the hold is lost, with why; see [`LossSignal::lost`].
    pub async fn lost(&self) -> LossReason {
        self.signal().lost().await
    }

    /// Runs `command` through `LOCK.GUARD` with this hold's fence; see the blocking
    /// [`Guard::guard`](crate::Guard::guard), durable mode's `WAIT` and
    /// [`GuardError::NotDurable`] included.
    pub async fn guard<T: FromRedisValue>(&self, command: &Cmd) -> Result<T, GuardError> {
        let fence = self.fence();
        let cmd = cmds::guard(self.key(), fence, command);
        // Clones share the connection: the `WAIT` follows the write on it.
        let mut conn = self.conn.clone();
        let reply: redis::RedisResult<(Value, _)> = async {
            let reply = conn.query(&cmd, Some(self.hold.spec.opts.timeout)).await?;
            Ok((
                reply,
                durable::wait_async(&mut conn, &self.hold.spec).await?,
            ))
        }
        .await;
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

    /// Extends the lease by the ttl now. A reply of 0, or any error, ends the hold, as for
    /// the keep-alive; so does, in durable mode, a `WAIT` after it that too few replicas
    /// acknowledge (see the blocking [`Guard::extend`](crate::Guard::extend)).
    pub async fn extend(&self) -> Result<(), Error> {
        self.hold.lease.status().map_err(Error::Lost)?;
        let spec = &self.hold.spec;
        let cmd = cmds::extend(self.key(), self.token(), spec.opts.ttl);
        let sent = Instant::now();
        let mut conn = self.conn.clone();
        let reply = async {
            let held = cmds::bool_reply(conn.query(&cmd, Some(spec.opts.timeout)).await?)?;
            let shortfall = if held {
                durable::wait_async(&mut conn, spec).await?
            } else {
                None
            };
            Ok((held, shortfall))
        };
        self.hold.extended(sent, reply.await)
    }

    /// Takes a new fence for this hold (`LOCK.FENCE`); later guarded writes use it.
    pub async fn refence(&self) -> Result<u64, Error> {
        let cmd = cmds::fence(self.key(), self.token());
        match cmds::fence_reply(self.call(&cmd).await?)? {
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

    /// Releases the hold: `Ok(true)` if this token still held it, `Ok(false)` if it had
    /// already lost it.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.stop();
        let hold = Arc::clone(&self.hold);
        Ok(release(&hold, self.conn.clone()).await?)
    }

    async fn call(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let timeout = self.hold.spec.opts.timeout;
        self.conn.clone().query(cmd, Some(timeout)).await
    }

    fn stop(&mut self) {
        self.released = true;
        if let Some(task) = self.keepalive.take() {
            task.abort();
        }
        self.hold.lease.end(LossReason::Released);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop();
        // Without a runtime the connection is gone too; the lease ends on its own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let hold = Arc::clone(&self.hold);
            let conn = self.conn.clone();
            runtime.spawn(async move {
                let _ = release(&hold, conn).await;
            });
        }
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Guard")
            .field("key", &self.key())
            .field("kind", &self.kind())
            .field("fence", &self.fence())
            .field("lost", &self.hold.lease.status().err())
            .finish()
    }
}

/// `LOCK.RELEASE` on the grant's connection, or on a fresh one if that one is broken (its
/// loss may be why the hold was lost, and the lock may still be held).
async fn release(hold: &Hold, mut conn: AsyncConn) -> redis::RedisResult<bool> {
    let spec = &hold.spec;
    let cmd = cmds::release(&spec.key, &hold.token);
    match conn.query(&cmd, Some(spec.opts.timeout)).await {
        Err(e) if cmds::outcome_unknown(&e) => {
            let mut fresh = AsyncConn::open(&spec.target, spec.opts.timeout).await?;
            cmds::bool_reply(fresh.query(&cmd, Some(spec.opts.timeout)).await?)
        }
        reply => cmds::bool_reply(reply?),
    }
}

/// Extends every `every` until the hold ends, and ends it on the first answer that is not a
/// confirmation. Each extend goes on the lock's shared connection (see `crate::pool`; in
/// durable mode on the hold's own, followed by the `WAIT`, and an extend too few replicas
/// acknowledged ends the hold as a failed one does), and no call outlasts the lease: at its
/// end the hold is lost anyway. The blocking API runs it too, on the keep-alive runtime.
pub(crate) async fn keep_alive(hold: Arc<Hold>, every: Duration) {
    let lease = &hold.lease;
    let spec = &hold.spec;
    let signal = LossSignal::new(Arc::clone(lease));
    let cmd = cmds::extend(&spec.key, &hold.token, spec.opts.ttl);
    // Durable mode: a connection of the hold's own, opened at the first extend, as each
    // extend is followed by a `WAIT` that blocks the connection (for the `WAIT` timeout when
    // replicas are missing), which must not hold up other holds' extends.
    let mut own: Option<AsyncConn> = None;
    loop {
        let due = next_extend(lease.base(), every);
        tokio::select! {
            _ = signal.lost() => return,
            _ = tokio::time::sleep_until(due.into()) => {}
        }
        let Ok(deadline) = lease.status() else { return };
        let sent = Instant::now();
        let opened = async {
            match (&own, spec.opts.durable) {
                (Some(conn), _) => Ok((None, conn.clone())),
                (None, Some(_)) => {
                    let conn = AsyncConn::open(&spec.target, spec.opts.timeout).await?;
                    Ok((None, conn))
                }
                (None, None) => {
                    let (generation, conn) =
                        spec.pool.shared(&spec.target, spec.opts.timeout).await?;
                    Ok((Some(generation), conn))
                }
            }
        };
        let (generation, mut conn) = match tokio::time::timeout_at(deadline.into(), opened).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => return lease.end(LossReason::Error(e)),
            Err(_) => {
                // The deadline passed first: reading the status records the loss, dated at it.
                let _ = lease.status();
                return;
            }
        };
        if spec.opts.durable.is_some() {
            own = Some(conn.clone());
        }
        let discard = |generation: Option<u64>| {
            if let Some(generation) = generation {
                spec.pool.discard_shared(generation);
            }
        };
        let call = async {
            let held = cmds::bool_reply(conn.query(&cmd, None).await?)?;
            let shortfall = if held {
                durable::wait_async(&mut conn, spec).await?
            } else {
                None
            };
            Ok((held, shortfall))
        };
        let Ok(reply) = tokio::time::timeout_at(deadline.into(), call).await else {
            // No answer within the lease: later holds get a connection of their own.
            discard(generation);
            let _ = lease.status();
            return;
        };
        if let Err(e) = &reply {
            if cmds::outcome_unknown(e) {
                discard(generation);
            }
        }
        if hold.extended(sent, reply).is_err() {
            return;
        }
    }
}

/// A token whose acquire is under way. Dropped armed (the wait was cancelled, or failed
/// with its outcome unknown), it spawns a clean-up that releases whatever the server may have
/// granted the token.
pub(crate) struct Pending {
    target: Target,
    key: String,
    token: String,
    client_id: Option<i64>,
    timeout: Duration,
    /// The shared connection the acquire went on: the clean-up releases on it, after the
    /// acquire (a multiplexed connection keeps the order).
    shared: Option<AsyncConn>,
    /// Kept until the clean-up is done: an election's candidate, which must not campaign
    /// again under the same token (its identity) while a release of it may still come.
    linger: Option<Linger>,
    armed: bool,
}

/// Anything a clean-up keeps alive until it is done.
pub(crate) type Linger = Arc<dyn std::any::Any + Send + Sync>;

impl Pending {
    pub(crate) fn new(
        target: &Target,
        key: &str,
        token: &str,
        client_id: Option<i64>,
        timeout: Duration,
    ) -> Self {
        Pending {
            target: target.clone(),
            key: key.to_string(),
            token: token.to_string(),
            client_id,
            timeout,
            shared: None,
            linger: None,
            armed: true,
        }
    }

    /// Keeps `linger` until the clean-up, if there is one, is done.
    pub(crate) fn lingering(mut self, linger: Option<Linger>) -> Self {
        self.linger = linger;
        self
    }

    /// For an acquire that does not wait, sent on the shared connection `conn`.
    pub(crate) fn on_shared(mut self, conn: &AsyncConn) -> Self {
        self.shared = Some(conn.clone());
        self
    }

    /// The shared connection failed: clean up on a fresh one.
    pub(crate) fn not_shared(&mut self) {
        self.shared = None;
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let key = std::mem::take(&mut self.key);
            let token = std::mem::take(&mut self.token);
            let (target, id, timeout) = (self.target.clone(), self.client_id, self.timeout);
            let linger = self.linger.take();
            match self.shared.take() {
                Some(mut conn) => runtime.spawn(async move {
                    let release = cmds::release(&key, &token);
                    if let Err(e) = conn.query(&release, Some(timeout)).await {
                        if cmds::outcome_unknown(&e) {
                            release_abandoned(target, key, token, None, timeout).await;
                        }
                    }
                    drop(linger);
                }),
                None => runtime.spawn(async move {
                    release_abandoned(target, key, token, id, timeout).await;
                    drop(linger);
                }),
            };
        }
    }
}

/// Releases `token` once the server has dropped the waiting connection `client_id` (closed
/// with the acquire): until then it could still be granted, and a grant whose reply was
/// written before the server saw the close stays with the token. The server passes on
/// grants it could not deliver; this catches the ones it did.
async fn release_abandoned(
    target: Target,
    key: String,
    token: String,
    client_id: Option<i64>,
    timeout: Duration,
) {
    let Ok(mut conn) = AsyncConn::open(&target, timeout).await else {
        return;
    };
    let release = cmds::release(&key, &token);
    let _ = conn.query(&release, Some(timeout)).await;
    let give_up = Instant::now() + Duration::from_secs(2);
    match client_id {
        Some(id) => {
            let list = cmds::client_list_id(id);
            while Instant::now() < give_up {
                match conn.query_at(&list, &key, Some(timeout)).await {
                    Ok(reply) if !cmds::client_listed(&reply) => break,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    // CLIENT LIST may be denied by ACL: fall back to a pause.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
            }
        }
        None => tokio::time::sleep(Duration::from_millis(200)).await,
    }
    let _ = conn.query(&release, Some(timeout)).await;
}
