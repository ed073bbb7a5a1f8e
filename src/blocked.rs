//! A small safe layer over the module API's blocked clients (`RedisModule_BlockClient`),
//! in the manner of Redis's `helloblock.c`: block the calling client, wake it with a reply
//! to come, or let its handle go when no reply will.
//!
//! The server calls back into the module when a reply is due, when a blocked client is
//! unblocked by `CLIENT UNBLOCK` (the timeout callback) and when it disconnects. Those
//! callbacks are thin adapters over the engine (`events.rs`); they are installed here once
//! at load, so that this layer, which the engine uses, does not depend on them.

use std::os::raw::c_void;
use std::sync::OnceLock;

use redis_module::{raw, Context};

/// The callbacks every blocked client of this module is given.
pub struct Callbacks {
    /// The reply is due: the privdata passed to `wake` says to whom.
    pub reply: raw::RedisModuleCmdFunc,
    /// `CLIENT UNBLOCK` (the module sets no timeout of its own with the server).
    pub timeout: raw::RedisModuleCmdFunc,
    pub disconnect: raw::RedisModuleDisconnectFunc,
}

static CALLBACKS: OnceLock<Callbacks> = OnceLock::new();

pub fn install(callbacks: Callbacks) {
    let _ = CALLBACKS.set(callbacks);
}

/// The server's handle on one blocked client. Neither `Copy` nor `Clone`: waking the client
/// or letting it go consumes the handle, so that neither can happen twice (a second
/// `UnblockClient` would be a use after free inside the server).
#[derive(Debug, PartialEq, Eq)]
pub struct Handle(usize);

/// What names a blocked client in lookups: its handle's address, unique while it is
/// blocked. It reaches nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandleKey(usize);

impl Handle {
    pub fn key(&self) -> HandleKey {
        HandleKey(self.0)
    }

    fn raw(self) -> *mut raw::RedisModuleBlockedClient {
        self.0 as *mut raw::RedisModuleBlockedClient
    }
}

impl HandleKey {
    pub fn from_raw(bc: *mut raw::RedisModuleBlockedClient) -> HandleKey {
        HandleKey(bc as usize)
    }
}

/// Blocks the client of the running command. The server keeps no timeout for it (timeouts
/// are the engine's, on the monotonic clock); `CLIENT UNBLOCK` still reaches the timeout
/// callback, as it does for `BLPOP`.
pub fn block(ctx: &Context) -> Handle {
    let callbacks = CALLBACKS
        .get()
        .expect("blocked-client callbacks installed at load");
    // SAFETY: ctx.ctx is the context of the running command, the only context in which
    // BlockClient may be called; the callbacks are `extern "C"` functions with the
    // signatures the API expects. The privdata passed later is an integer: nothing to free.
    unsafe {
        let bc = raw::RedisModule_BlockClient.unwrap()(
            ctx.ctx,
            callbacks.reply,
            callbacks.timeout,
            None,
            0,
        );
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc, callbacks.disconnect);
        Handle(bc as usize)
    }
}

/// Wakes the client: its reply callback runs on the next event-loop turn with `id` as its
/// private data.
pub fn wake(handle: Handle, id: u64) {
    // SAFETY: the handle is of a client still blocked: it is consumed here, and only
    // `block` makes one. The private data is an integer, never dereferenced.
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(handle.raw(), id as usize as *mut c_void);
    }
}

/// Lets go of the handle of a client whose reply will not go out (it disconnected, or
/// `CLIENT UNBLOCK` already answered it): the server frees the handle only then.
pub fn let_go(handle: Handle) {
    // SAFETY: as in `wake`; with a NULL private data no reply callback runs for it.
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(handle.raw(), std::ptr::null_mut());
    }
}

/// Which blocked client's callback is running.
pub fn handle_of(ctx: *mut raw::RedisModuleCtx) -> HandleKey {
    // SAFETY: called only from a blocked client's reply or timeout callback, whose context
    // names the client.
    HandleKey::from_raw(unsafe { raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx) })
}

/// A blocked client's handle as the engine's registries hold it: owned, and known by a key.
/// The registries are generic over it, so that their tests use plain numbers.
pub trait Owned {
    type Key: Copy + Eq + std::hash::Hash + std::fmt::Debug;
    fn key(&self) -> Self::Key;
}

impl Owned for Handle {
    type Key = HandleKey;
    fn key(&self) -> HandleKey {
        Handle::key(self)
    }
}

/// The id passed to `wake`, in the reply callback.
pub fn woken_id(ctx: *mut raw::RedisModuleCtx) -> u64 {
    // SAFETY: called only from the reply callback, whose context carries the private data.
    unsafe { raw::RedisModule_GetBlockedClientPrivateData.unwrap()(ctx) as usize as u64 }
}

/// The registries' tests stand a number in for a blocked client.
#[cfg(test)]
impl Owned for u32 {
    type Key = u32;
    fn key(&self) -> u32 {
        *self
    }
}
