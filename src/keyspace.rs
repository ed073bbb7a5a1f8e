//! The few keyspace calls the crate has no safe wrapper for: a key handle that sees its value
//! as a lock, which database a context has selected, selecting one from a callback, telling
//! `WATCH` a key changed, and propagating a lock's state without building Rust strings for it.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::{raw, Context, RedisString};

use crate::error::LockError;
use crate::lock::Lock;
use crate::persistence::LOCK_TYPE;

/// A key opened for reading and writing, whose value is a lock or nothing.
///
/// The crate's `RedisKeyWritable` checks the value's type with two calls and a `RefCell`
/// borrow on every access, and an acquire made three (find, store, find again); here it is
/// one call, and storing hands back the lock without looking it up again.
pub struct LockKey {
    key: *mut raw::RedisModuleKey,
}

impl LockKey {
    pub fn open(ctx: &Context, name: &RedisString) -> LockKey {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: ctx.ctx and name.inner are live; Redis returns a handle (never null in
        // write mode) that stays valid until CloseKey in Drop.
        let key = unsafe { raw::RedisModule_OpenKey.unwrap()(ctx.ctx, name.inner, mode) };
        LockKey { key: key.cast() }
    }

    /// The lock stored at this key, `None` if the key is empty. The lock belongs to the
    /// keyspace, not to the handle: the borrow only keeps the handle open while it is used.
    #[allow(clippy::mut_from_ref)]
    pub fn lock(&self) -> Result<Option<&mut Lock>, LockError> {
        // SAFETY: the handle is open. A value of the lock type was stored by `store` as a
        // Box<Lock> and is only freed by Redis through the type's free callback.
        unsafe {
            if raw::RedisModule_ModuleTypeGetType.unwrap()(self.key) == lock_type() {
                let value = raw::RedisModule_ModuleTypeGetValue.unwrap()(self.key);
                return Ok(Some(&mut *value.cast::<Lock>()));
            }
            if raw::RedisModule_KeyType.unwrap()(self.key)
                == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
            {
                return Ok(None);
            }
        }
        Err(LockError::WrongType)
    }

    /// Stores `lock` at this empty key and returns it at its final address.
    #[allow(clippy::mut_from_ref)]
    pub fn store(&self, lock: Lock) -> Result<&mut Lock, LockError> {
        let value = Box::into_raw(Box::new(lock));
        // SAFETY: the handle is open for writing; on success Redis owns `value` and frees it
        // through the type's free callback, on failure it is still ours.
        unsafe {
            let status = raw::RedisModule_ModuleTypeSetValue.unwrap()(
                self.key,
                lock_type(),
                value.cast::<c_void>(),
            );
            if status != raw::REDISMODULE_OK as c_int {
                drop(Box::from_raw(value));
                return Err(LockError::WrongType);
            }
            Ok(&mut *value)
        }
    }

    /// Deletes the key (its lock goes through the type's free callback).
    pub fn delete(&self) {
        // SAFETY: the handle is open for writing.
        unsafe { raw::RedisModule_DeleteKey.unwrap()(self.key) };
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once.
        unsafe { raw::RedisModule_CloseKey.unwrap()(self.key) };
    }
}

fn lock_type() -> *mut raw::RedisModuleType {
    *LOCK_TYPE.raw_type.borrow()
}

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx.ctx is the live context of the running command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

/// Selects `db` in a callback's context and names `key` in it, for a callback (timer,
/// disconnect) that acts on a key it remembered. `None` if the database no longer exists
/// (a restart with fewer `databases`).
pub fn key_in_db(ctx: &Context, db: i32, key: &[u8]) -> Option<RedisString> {
    // SAFETY: ctx.ctx is the live context of this callback; SelectDb only fails for a
    // database index out of range.
    let status = unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) };
    (status == raw::REDISMODULE_OK as i32).then(|| RedisString::create_from_slice(ctx.ctx, key))
}

/// The module sets NO_IMPLICIT_SIGNAL_MODIFIED (a command that changes nothing must not
/// abort a `WATCH`), so every change is signalled here.
pub fn signal_modified(ctx: &Context, key: &RedisString) {
    // SAFETY: both pointers are live for this call.
    unsafe {
        raw::RedisModule_SignalModifiedKey.unwrap()(ctx.ctx, key.inner);
    }
}

/// The holder's token as `replicate_state` propagates it: the client's own argument where
/// the command has one (Redis takes a reference to it instead of copying), else the bytes
/// the lock stores.
#[derive(Clone, Copy)]
pub enum TokenArg<'a> {
    Arg(&'a RedisString),
    Bytes(&'a [u8]),
}

/// Propagates `LOCK.APPLY key token deadline fence` to replicas and the AOF.
///
/// `RedisModule_Replicate` is the most expensive call on the acquire path (it looks the
/// command up by name and builds a fresh argument vector), so the arguments are passed in
/// the forms it copies least: strings Redis already holds by reference ("s"), and the two
/// numbers formatted here on the stack ("b", one allocation each instead of the two "l"
/// costs). Measured in `make bench`'s profile mode.
pub fn replicate_state(
    ctx: &Context,
    key: &RedisString,
    token: TokenArg,
    deadline: i64,
    fence: u64,
) {
    let mut d = Decimal::new();
    let mut f = Decimal::new();
    let deadline = d.format(deadline.unsigned_abs(), deadline < 0);
    let fence = f.format(fence, false);
    let name = c"LOCK.APPLY".as_ptr();
    // SAFETY: each format matches the arguments that follow it: "s" a live RedisModuleString,
    // "b" a pointer and a length. Redis copies or references them before returning.
    unsafe {
        let replicate = raw::RedisModule_Replicate.unwrap();
        match token {
            TokenArg::Arg(token) => replicate(
                ctx.ctx,
                name,
                c"ssbb".as_ptr(),
                key.inner,
                token.inner,
                deadline.as_ptr().cast::<c_char>(),
                deadline.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
            ),
            TokenArg::Bytes(token) => replicate(
                ctx.ctx,
                name,
                c"sbbb".as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                deadline.as_ptr().cast::<c_char>(),
                deadline.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
            ),
        };
    }
}

/// A number in decimal, written into a stack buffer.
struct Decimal {
    buf: [u8; 21],
}

impl Decimal {
    fn new() -> Self {
        Decimal { buf: [0; 21] }
    }

    fn format(&mut self, mut n: u64, negative: bool) -> &[u8] {
        let mut at = self.buf.len();
        loop {
            at -= 1;
            self.buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if negative {
            at -= 1;
            self.buf[at] = b'-';
        }
        &self.buf[at..]
    }
}

/// Propagates `DEL key`.
pub fn replicate_del(ctx: &Context, key: &RedisString) {
    // SAFETY: the format "s" matches the one RedisModuleString argument.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
    }
}

/// A keyspace event of the module class. The crate's wrapper allocates a C string for the
/// event name on every call; these names are static.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: ctx.ctx and key.inner are live; `event` is NUL-terminated and outlives the
    // call (Redis copies what it publishes).
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
            ctx.ctx,
            raw::NotifyEvent::MODULE.bits() as c_int,
            event.as_ptr(),
            key.inner,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn decimal_formats_like_to_string() {
        for n in [0u64, 7, 10, 999, 1_796_011_764_123, u64::MAX] {
            assert_eq!(Decimal::new().format(n, false), n.to_string().as_bytes());
        }
        assert_eq!(Decimal::new().format(42, true), b"-42");
        let min = i64::MIN;
        assert_eq!(
            Decimal::new().format(min.unsigned_abs(), true),
            min.to_string().as_bytes()
        );
    }
}
