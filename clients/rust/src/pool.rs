//! Connections reused across holds, and the keep-alive's shared timer.
//!
//! The lock objects on one server (the same [`redis::Client`] settings), their clones and
//! every guard they hand out share one [`Pool`] (one for the blocking API, one for the async):
//!
//! - idle blocking connections, taken by an acquire (whose `WAIT` has the connection to
//!   itself while it blocks) and kept by its guard for the caller's commands and the release,
//!   then given back. A connection whose last call failed other than with a server reply is
//!   never given back: a late reply could be read as the next call's.
//! - one shared multiplexed connection for the keep-alive's extends (and, in the async API,
//!   for acquires that do not wait, guarded writes and releases). Every extend is bounded by
//!   its own hold's deadline, and the loss signal reads the clock, so a stuck extend delays
//!   no other hold's loss. After an error whose outcome is unknown it is replaced, for the
//!   holds that come after; the hold whose extend failed is lost, as before. A durable hold's
//!   keep-alive does not use it: each of its extends is followed by a `WAIT`, which blocks
//!   the connection (for the whole `WAIT` timeout when replicas are missing), so it extends
//!   on a connection of its own, opened at its first extend.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use redis::RedisResult;

use crate::aio::conn::AsyncConn;
use crate::guard::{next_extend, Hold};
use crate::options::Target;
use crate::sync_conn::SyncConn;

/// Idle blocking connections kept per lock object; more are closed when given back.
const MAX_IDLE: usize = 16;

#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<Vec<SyncConn>>,
    shared: Mutex<Option<(u64, AsyncConn)>>,
    generation: std::sync::atomic::AtomicU64,
}

impl Pool {
    /// The pool of every lock object on the same server with the same settings (standalone
    /// targets; a cluster's lock objects each have their own).
    pub(crate) fn for_target(target: &Target, asynchronous: bool) -> Arc<Pool> {
        type Registry = Mutex<HashMap<String, Weak<Pool>>>;
        static POOLS: OnceLock<Registry> = OnceLock::new();
        let Target::Standalone(client) = target else {
            return Arc::new(Pool::default());
        };
        let info = client.get_connection_info();
        // The password too: the Debug form redacts it, and connections authenticate with it.
        let id = format!(
            "{asynchronous} {info:?} {:?}",
            info.redis_settings().password()
        );
        let mut pools = POOLS
            .get_or_init(Registry::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(&id).and_then(Weak::upgrade) {
            return pool;
        }
        pools.retain(|_, pool| pool.strong_count() > 0);
        let pool = Arc::new(Pool::default());
        pools.insert(id, Arc::downgrade(&pool));
        pool
    }

    /// An idle connection (`true`: reused, it may have been closed by the server meanwhile),
    /// or a new one.
    pub(crate) fn take(&self, target: &Target, timeout: Duration) -> RedisResult<(SyncConn, bool)> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(conn) => Ok((conn, true)),
            None => Ok((SyncConn::open(target, timeout)?, false)),
        }
    }

    /// Gives back a connection that is in step (its last call was answered).
    pub(crate) fn give_back(&self, conn: SyncConn) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE && conn.is_open() {
            idle.push(conn);
        }
    }

    /// The shared multiplexed connection, opened (in the current tokio runtime) if there is
    /// none; with its generation, for [`Pool::discard_shared`].
    pub(crate) async fn shared(
        &self,
        target: &Target,
        timeout: Duration,
    ) -> RedisResult<(u64, AsyncConn)> {
        if let Some(found) = self.shared_now() {
            return Ok(found);
        }
        let conn = AsyncConn::open(target, timeout).await?;
        let mut slot = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        // Another task may have opened one meanwhile: use that, and close ours.
        let (generation, conn) = slot.get_or_insert_with(|| {
            let generation = self
                .generation
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (generation, conn)
        });
        Ok((*generation, conn.clone()))
    }

    pub(crate) fn shared_now(&self) -> Option<(u64, AsyncConn)> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The shared connection of `generation` failed with its outcome unknown: the next
    /// caller opens a new one.
    pub(crate) fn discard_shared(&self, generation: u64) {
        let mut slot = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*slot, Some((g, _)) if *g == generation) {
            *slot = None;
        }
    }
}

/// The runtime that runs the blocking API's keep-alives: one thread for every hold of the
/// process, started with the first one.
pub(crate) fn keepalive_runtime() -> RedisResult<tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    let handle = RUNTIME.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("redis-lock-keepalive".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .map_err(|e| e.to_string())?;
        Ok(handle)
    });
    handle.clone().map_err(|e| {
        redis::RedisError::from(std::io::Error::other(format!(
            "could not start the keep-alive thread: {e}"
        )))
    })
}

/// Starts the keep-alive task of a blocking hold when its first extend is due, so that a
/// hold released before then (most, with the default ttl of 30 s) costs neither a task nor
/// a wake-up of the keep-alive thread. Its timer is a task on the keep-alive runtime, woken
/// only when a hold is due before everything already waiting. The loss signal does not
/// depend on it: it reads the clock.
pub(crate) struct Starter {
    state: Mutex<StarterState>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct StarterState {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    holds: HashMap<u64, (Arc<Hold>, Duration)>,
    next_id: u64,
    /// When the timer task wakes next (`None`: when notified).
    wake_at: Option<Instant>,
}

impl Starter {
    /// The process's starter, with its timer task running.
    pub(crate) fn get() -> RedisResult<&'static Starter> {
        static STARTER: OnceLock<Starter> = OnceLock::new();
        static TIMER: OnceLock<()> = OnceLock::new();
        let runtime = keepalive_runtime()?;
        let starter = STARTER.get_or_init(|| Starter {
            state: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        });
        TIMER.get_or_init(|| {
            runtime.spawn(starter.run());
        });
        Ok(starter)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StarterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Has `hold` extended every `every`, from its first extend on; an id for `cancel`.
    pub(crate) fn add(&self, hold: Arc<Hold>, every: Duration) -> u64 {
        let at = next_extend(hold.lease.base(), every);
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.holds.insert(id, (hold, every));
        st.due.push(Reverse((at, id)));
        // Cancelled holds leave their entries in the heap: drop them now and then.
        if st.due.len() > 2 * st.holds.len() + 1024 {
            let StarterState { due, holds, .. } = &mut *st;
            due.retain(|Reverse((_, id))| holds.contains_key(id));
        }
        if st.wake_at.is_none_or(|w| at < w) {
            st.wake_at = Some(at);
            self.wake.notify_one();
        }
        id
    }

    /// The hold ended before its first extend was due. (After, its task sees the loss
    /// signal and ends by itself.)
    pub(crate) fn cancel(&self, id: u64) {
        self.lock().holds.remove(&id);
    }

    async fn run(&'static self) {
        loop {
            let next = {
                let mut st = self.lock();
                let now = Instant::now();
                while let Some(&Reverse((at, id))) = st.due.peek() {
                    if at > now {
                        break;
                    }
                    st.due.pop();
                    if let Some((hold, every)) = st.holds.remove(&id) {
                        tokio::spawn(crate::aio::guard::keep_alive(hold, every));
                    }
                }
                st.wake_at = st.due.peek().map(|Reverse((at, _))| *at);
                st.wake_at
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}
