//! Clients blocked in `LOCK.ACQUIRE … WAIT`: one small safe layer over the module API's
//! blocked clients, and the registry that ties each one to its key.
//!
//! A waiter's id is the address of its `RedisModuleBlockedClient`, which is unique while
//! the client is blocked. The lock's queue (in `lock.rs`) holds the ids in order; this file
//! holds what is needed to reach the client: its handle, key and database, and whether it
//! was already granted the lock (a grant is replied to on the next event-loop turn, and a
//! client that disconnects before then must give the lock back).
//!
//! Wait timeouts are not given to Redis, which keys them on the wall clock in 7.0; they live
//! in the expiry index next to lease deadlines, on the monotonic clock.

use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::{raw, Context};

/// Why a blocked client is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Granted(u64),
    /// The wait timed out, or the key was deleted under it: null.
    TimedOut,
    /// The server became a replica: the error Redis itself gives blocked clients then.
    Demoted,
}

/// What is known of a waiter that left without being served.
pub struct Gone {
    pub id: u64,
    pub db: i32,
    pub key: Box<[u8]>,
    /// The fence of a grant that was made but not delivered.
    pub undelivered: Option<u64>,
    pub wait_deadline: Option<u64>,
}

struct Pending {
    db: i32,
    key: Box<[u8]>,
    wait_deadline: Option<u64>,
    granted: Option<u64>,
}

static PENDING: Mutex<Option<HashMap<u64, Pending>>> = Mutex::new(None);

fn with_pending<R>(f: impl FnOnce(&mut HashMap<u64, Pending>) -> R) -> R {
    let mut guard = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

fn handle(id: u64) -> *mut raw::RedisModuleBlockedClient {
    id as usize as *mut raw::RedisModuleBlockedClient
}

/// Blocks the client of the running command and returns its waiter id.
pub fn block(ctx: &Context, db: i32, key: &[u8], wait_deadline: Option<u64>) -> u64 {
    // SAFETY: ctx.ctx is the context of the running command, the only context in which
    // BlockClient may be called. A timeout of 0 means Redis keeps no timer of its own.
    let bc = unsafe {
        let bc = raw::RedisModule_BlockClient.unwrap()(
            ctx.ctx,
            Some(on_reply),
            None,
            Some(free_outcome),
            0,
        );
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc, Some(on_disconnect));
        bc
    };
    let id = bc as usize as u64;
    with_pending(|p| {
        p.insert(
            id,
            Pending {
                db,
                key: key.into(),
                wait_deadline,
                granted: None,
            },
        )
    });
    id
}

/// The key and database waiter `id` waits on, if it still waits.
pub fn key_of(id: u64) -> Option<(i32, Box<[u8]>)> {
    with_pending(|p| {
        p.get(&id)
            .filter(|w| w.granted.is_none())
            .map(|w| (w.db, w.key.clone()))
    })
}

/// Wakes waiter `id` with `outcome`; its reply goes out on the next event-loop turn. `None`
/// if it was not waiting (granted or gone); else the wait deadline it had, if any, for the
/// caller to drop from the index.
pub fn wake(id: u64, outcome: Outcome) -> Option<Option<u64>> {
    let deadline = with_pending(|p| {
        let w = p.get_mut(&id)?;
        if w.granted.is_some() {
            return None;
        }
        match outcome {
            Outcome::Granted(fence) => {
                w.granted = Some(fence);
                Some(w.wait_deadline)
            }
            Outcome::TimedOut | Outcome::Demoted => p.remove(&id).map(|w| w.wait_deadline),
        }
    })?;
    let outcome = Box::into_raw(Box::new(outcome)).cast::<c_void>();
    // SAFETY: the id is the handle of a client that is still blocked (it is in PENDING and
    // was not woken before); UnblockClient takes ownership of `outcome`, which free_outcome
    // gives back.
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(handle(id), outcome);
    }
    Some(deadline)
}

unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: Redis calls the reply callback with the blocked client's context, whose
    // private data is the Outcome this module passed to UnblockClient.
    let (bc, outcome) = unsafe {
        (
            raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx),
            *raw::RedisModule_GetBlockedClientPrivateData.unwrap()(ctx).cast::<Outcome>(),
        )
    };
    with_pending(|p| p.remove(&(bc as usize as u64)));
    match outcome {
        Outcome::Granted(fence) => raw::reply_with_long_long(ctx, fence as i64),
        Outcome::TimedOut => raw::reply_with_null(ctx),
        Outcome::Demoted => {
            raw::reply_with_error(
                ctx,
                c"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
                    .as_ptr(),
            );
            raw::Status::Ok
        }
    };
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, outcome: *mut c_void) {
    // SAFETY: `outcome` is the Box this module passed to UnblockClient; Redis frees it once.
    drop(unsafe { Box::from_raw(outcome.cast::<Outcome>()) });
}

/// The client went away: while waiting (it leaves the queue), or after it was granted the
/// lock but before the reply went out (the grant is taken back).
unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let id = bc as usize as u64;
    let Some(w) = with_pending(|p| p.remove(&id)) else {
        return;
    };
    if w.granted.is_none() {
        // SAFETY: a client that was never woken must still be unblocked by the module, or
        // its handle leaks; Redis does not call the reply callback for a gone client.
        unsafe {
            raw::RedisModule_UnblockClient.unwrap()(bc, std::ptr::null_mut());
        }
    }
    let gone = Gone {
        id,
        db: w.db,
        key: w.key,
        undelivered: w.granted,
        wait_deadline: w.wait_deadline,
    };
    crate::commands::waiter_gone(&Context::new(ctx), gone);
}

/// Waiters of locks that were deleted (`DEL`, `FLUSHALL`, `MIGRATE`, an overwrite). The
/// free callback, which may run on a background thread and may not touch the keyspace or
/// reply, leaves their ids here; the main thread answers them on its next turn
/// (`commands::wake_orphans`).
static ORPHANS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static HAS_ORPHANS: AtomicBool = AtomicBool::new(false);

pub fn orphan(ids: impl Iterator<Item = u64>) {
    ORPHANS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(ids);
    HAS_ORPHANS.store(true, Ordering::Release);
}

pub fn has_orphans() -> bool {
    HAS_ORPHANS.load(Ordering::Acquire)
}

pub fn take_orphans() -> Vec<u64> {
    // Every command asks: a plain load first spares it a read-modify-write.
    if !HAS_ORPHANS.load(Ordering::Acquire) || !HAS_ORPHANS.swap(false, Ordering::AcqRel) {
        return Vec::new();
    }
    std::mem::take(&mut *ORPHANS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The ids of the clients waiting right now.
pub fn waiting() -> Vec<u64> {
    with_pending(|p| {
        p.iter()
            .filter(|(_, w)| w.granted.is_none())
            .map(|(id, _)| *id)
            .collect()
    })
}

/// Clients waiting right now, for `INFO lock`.
pub fn count() -> usize {
    with_pending(|p| p.values().filter(|w| w.granted.is_none()).count())
}
