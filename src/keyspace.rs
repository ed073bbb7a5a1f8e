//! Keys as the engine reaches them: a handle that sees its value as a lock, which database
//! a context has selected, selecting one from a callback, and telling `WATCH` a key changed.
//! These are the calls the crate has no safe wrapper for.

use std::cell::Cell;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{raw, Context, RedisString};

use crate::error::LockError;
use crate::leases;
use crate::lock::Lock;

/// The lock data type, as the server registered it (set once at load).
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

pub fn set_lock_type(t: *mut raw::RedisModuleType) {
    LOCK_TYPE.store(t, Ordering::Relaxed);
}

fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE.load(Ordering::Relaxed)
}

/// What a key held when it was opened (or since, through this handle).
#[derive(Clone, Copy)]
enum Slot {
    Empty,
    Lock(*mut Lock),
    Other,
}

/// Opens `name` in `mode`: the handle (NULL for a read of a missing key) and what it holds.
fn open_slot(ctx: &Context, name: &RedisString, mode: u32) -> (*mut raw::RedisModuleKey, Slot) {
    // SAFETY: ctx.ctx and name.inner are live; the handle Redis returns stays valid until
    // CloseKey in the handle's Drop. A read-only open of a missing key returns NULL, which
    // every call below accepts (it reads as an empty key).
    let key = unsafe { raw::RedisModule_OpenKey.unwrap()(ctx.ctx, name.inner, mode as c_int) };
    let key: *mut raw::RedisModuleKey = key.cast();
    // SAFETY: the handle is open (or NULL, which both calls accept). A value of the lock
    // type was stored by `LockKey::store` as a Box<Lock> and is freed only through the
    // type's free callback.
    let slot = unsafe {
        if key.is_null() {
            Slot::Empty
        } else if raw::RedisModule_ModuleTypeGetType.unwrap()(key) == lock_type() {
            Slot::Lock(raw::RedisModule_ModuleTypeGetValue.unwrap()(key).cast())
        } else if raw::RedisModule_KeyType.unwrap()(key) == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
        {
            Slot::Empty
        } else {
            Slot::Other
        }
    };
    (key, slot)
}

fn close(key: *mut raw::RedisModuleKey) {
    if !key.is_null() {
        // SAFETY: opened in `open_slot`, closed once, by the handle's Drop.
        unsafe { raw::RedisModule_CloseKey.unwrap()(key) };
    }
}

/// A key opened for reading (`LOCK.INFO`, `LOCK.GUARD`'s check, `LOCK.OBSERVE`): its lock
/// can be looked at, never changed.
pub struct ReadKey {
    key: *mut raw::RedisModuleKey,
    slot: Slot,
}

impl ReadKey {
    /// Opens `name` in the context's selected database, for reading.
    pub fn open(ctx: &Context, name: &RedisString) -> ReadKey {
        let (key, slot) = open_slot(ctx, name, raw::REDISMODULE_READ);
        ReadKey { key, slot }
    }

    /// The lock at this key, `None` if the key is empty, `WRONGTYPE` for another type.
    pub fn lock(&self) -> Result<Option<&Lock>, LockError> {
        match self.slot {
            Slot::Empty => Ok(None),
            // SAFETY: the value is alive while the key holds it, and nothing changes it for
            // as long as the returned borrow of `self` lasts (it is shared, and this handle
            // cannot delete the key).
            Slot::Lock(lock) => Ok(Some(unsafe { &*lock })),
            Slot::Other => Err(LockError::WrongType),
        }
    }
}

impl Drop for ReadKey {
    fn drop(&mut self) {
        close(self.key);
    }
}

/// An open key whose value is a lock, nothing, or another type, opened for writing: the
/// one way to change a lock in the keyspace.
///
/// The value's type is looked up once, when the key is opened. The lock is reached only
/// through `&mut self`, so no reference to it outlives the handle, and none is alive when
/// `delete` frees it: the borrow checker sees to both. The handle keeps the lock's entry in
/// the lease index (`leases.rs`) in step: it notes the deadline the lock is filed under when
/// it opens, files a lock it stores, takes the entry out with a lock it deletes, and moves it
/// when it closes if the deadline changed meanwhile. So no change to a lock can leave the
/// index pointing at a deadline the lock no longer has.
pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    slot: Slot,
    /// The deadline the lock's index entry is filed under; `None` if it has none (a new lock,
    /// or one whose due entry the sweep took out).
    filed: Option<u64>,
}

impl LockKey {
    /// Opens `name` in the context's selected database, for reading and writing.
    pub fn open(ctx: &Context, name: &RedisString) -> LockKey {
        let (key, slot) = open_slot(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE);
        let filed = match slot {
            // SAFETY: as in `lock`; only read.
            Slot::Lock(lock) => Some(unsafe { (*lock).deadline() }),
            _ => None,
        };
        LockKey { key, slot, filed }
    }

    /// [`LockKey::open`] for the sweep, which took the entry of the lock at address `due`
    /// out of the index: if that is the lock here, it is filed under nothing.
    pub fn open_due(ctx: &Context, name: &RedisString, due: usize) -> LockKey {
        let mut key = LockKey::open(ctx, name);
        if matches!(key.slot, Slot::Lock(lock) if lock as usize == due) {
            key.filed = None;
        }
        key
    }

    /// The lock at this key, `None` if the key is empty, `WRONGTYPE` for another type.
    pub fn lock(&mut self) -> Result<Option<&mut Lock>, LockError> {
        match self.slot {
            Slot::Empty => Ok(None),
            // SAFETY: the value is alive while the key holds it, and this handle is the
            // only way to it for as long as the returned borrow of `self` lasts.
            Slot::Lock(lock) => Ok(Some(unsafe { &mut *lock })),
            Slot::Other => Err(LockError::WrongType),
        }
    }

    /// Stores `lock` at this empty key and returns it at its final address.
    pub fn store(&mut self, lock: Box<Lock>) -> Result<&mut Lock, LockError> {
        if !matches!(self.slot, Slot::Empty) || self.key.is_null() {
            return Err(LockError::WrongType);
        }
        let value = Box::into_raw(lock);
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
        }
        self.slot = Slot::Lock(value);
        self.lock().map(|l| l.expect("just stored"))
    }

    /// Deletes the key, and its lock's index entry; the lock goes through the type's free
    /// callback.
    pub fn delete(&mut self) {
        if self.key.is_null() {
            return;
        }
        let key = self.key;
        // SAFETY: the handle is open for writing.
        let delete = || unsafe {
            raw::RedisModule_DeleteKey.unwrap()(key);
        };
        match self.slot {
            Slot::Lock(lock) => leases::remove_and_delete(lock as usize, self.filed, delete),
            _ => delete(),
        }
        self.slot = Slot::Empty;
        self.filed = None;
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if let Slot::Lock(lock) = self.slot {
            // SAFETY: as in `lock`; no borrow of the lock outlives `self`.
            let deadline = unsafe { (*lock).deadline() };
            if self.filed != Some(deadline) {
                leases::update(lock as usize, self.filed, Some(deadline));
            }
        }
        close(self.key);
    }
}

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx.ctx is the live context of the running command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

/// Selects `db` in a callback's context and names `key` in it, for a callback (the timer,
/// the cron) that acts on a key it remembered. `None` if the database no longer exists
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

thread_local! {
    /// The database a `MOVE` or `COPY … DB` came from, while its keyspace events run.
    static SOURCE_DB: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Notes the database a key is moving or being copied from (its `move_from` event, or the
/// type's copy callback).
pub fn remember_source_db(db: i32) {
    SOURCE_DB.set(Some(db));
}

/// Selects the noted source database again in a keyspace event's context. Valkey 8.1 runs
/// module keyspace callbacks for `MOVE` and `COPY … DB` in the calling client's own context,
/// switched to the destination database, and leaves the client there; this puts it back.
/// Elsewhere the context is a temporary client, and selecting in it changes nothing.
pub fn restore_source_db(ctx: &Context) {
    if let Some(db) = SOURCE_DB.take() {
        // SAFETY: ctx.ctx is the live context of this callback; the database existed when
        // the command began.
        unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) };
    }
}
