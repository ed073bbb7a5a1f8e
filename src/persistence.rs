//! The lock data type as Redis stores it: RDB save and load, AOF rewrite, the fence
//! high-water mark as RDB aux data, and the memory callbacks.
//!
//! A lock is saved as (token, deadline as Unix milliseconds, fence, the Unix millisecond it
//! was saved at). Where the same dataset is loaded again (an RDB file, the AOF's preamble, a
//! replica's full sync, `DEBUG RELOAD`) the deadline is absolute, as Redis loads key expiries,
//! so that a lease keeps running while the server is down. Where one key moves to another
//! server (`DUMP`/`RESTORE`, `MIGRATE`) the lease travels as the time it had left when saved,
//! as core `MIGRATE` carries the PTTL, so that servers whose clocks differ neither end it early
//! nor stretch it. Encoding version 1 (no save time) still loads, as absolute.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::{raw, RedisString};

use crate::args::MAX_TOKEN_LEN;
use crate::clock;
use crate::config;
use crate::engine::{self, leases};
use crate::fence;
use crate::keyspace;
use crate::lock::Lock;
use crate::replication;
use crate::stats;

/// Bump when the saved layout changes; `rdb_load` refuses versions it does not know.
pub const LOCK_ENCODING_VERSION: i32 = 2;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "redislock",
    LOCK_ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        free: Some(free),
        mem_usage: Some(mem_usage),
        digest: None,
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: None,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as i32,
        free_effort: None,
        unlink: Some(unlink),
        copy: None,
        defrag: None,
        copy2: Some(copy2),
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis hands back a value this module created with `Box<Lock>`.
    let lock = unsafe { &*value.cast::<Lock>() };
    let now = clock::now();
    // The lease left, rounded up to the millisecond, from the millisecond of the save: never
    // shorter than it is, at most 1 ms longer, whether read as absolute or as time left.
    let saved_at = now.wall();
    let left_us = lock.deadline() as i64 - now.mono as i64 + now.wall_us.rem_euclid(1000);
    raw::save_slice(rdb, lock.token());
    raw::save_signed(rdb, saved_at + (left_us + 999).div_euclid(1000));
    raw::save_unsigned(rdb, lock.fence());
    raw::save_signed(rdb, saved_at);
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if !(1..=LOCK_ENCODING_VERSION).contains(&encver) {
        log_warning(&format!(
            "lock: cannot load encoding version {encver} (this module reads 1 to {LOCK_ENCODING_VERSION})"
        ));
        return ptr::null_mut();
    }
    let Some(lock) = load_lock(rdb, encver) else {
        return ptr::null_mut();
    };
    engine::fences().observe(lock.fence());
    let lock = Box::new(lock);
    leases::track(&lock);
    stats::lock_created();
    Box::into_raw(lock).cast()
}

/// Reads one lock; `None` for a short read or values no saved lock can have (a corrupt
/// `RESTORE` payload with a valid checksum gets here).
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    let token = raw::load_string_buffer(rdb).ok()?;
    let mut deadline = raw::load_signed(rdb).ok()?;
    let fence = raw::load_unsigned(rdb).ok()?;
    let token = token.as_ref();
    let now = clock::now();
    // A whole dataset (RDB, AOF preamble, full sync) holds what this module issued; one key
    // from elsewhere (RESTORE) must leave room for fences above it.
    let whole_dataset = replication::is_loading();
    if encver >= 2 {
        let saved_at = raw::load_signed(rdb).ok()?;
        if !whole_dataset {
            // One key from elsewhere: the time it had left, from now on this clock.
            let left = deadline.checked_sub(saved_at)?;
            deadline = now.wall().saturating_add(left);
        }
    }
    let fence_ok = if whole_dataset {
        fence::is_valid(fence)
    } else {
        fence::is_valid_from_elsewhere(fence)
    };
    // A lease longer than any command could grant is corrupt data.
    let longest = now.wall().saturating_add(config::MAX_TTL_LIMIT);
    if token.is_empty() || token.len() > MAX_TOKEN_LEN || !fence_ok || deadline > longest {
        return None;
    }
    let deadline = now.to_mono(deadline);
    // Redis 7.0 names the key for RDB files, replica syncs and RESTORE; without a name the
    // lease still ends when the key is next touched, just not on its own.
    let (db, key) = key_of(rdb).unwrap_or_default();
    Some(Lock::restored(&key, db, token, deadline, fence))
}

/// The name and database of the key being loaded, which Redis 7.0 passes for RDB files,
/// replica syncs and `RESTORE`.
fn key_of(rdb: *mut raw::RedisModuleIO) -> Option<(i32, Vec<u8>)> {
    // SAFETY: `rdb` is the live IO context of this load; both calls only read it, and the
    // returned string stays valid for the duration of the callback.
    unsafe {
        let name = raw::RedisModule_GetKeyNameFromIO.unwrap()(rdb);
        if name.is_null() {
            return None;
        }
        let db = raw::RedisModule_GetDbIdFromIO.unwrap()(rdb);
        let mut len = 0;
        let bytes = raw::string_ptr_len(name, &mut len);
        Some((
            db,
            std::slice::from_raw_parts(bytes.cast::<u8>(), len).to_vec(),
        ))
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: as in rdb_save.
    let lock = unsafe { &*value.cast::<Lock>() };
    let deadline = clock::now().to_wall(lock.deadline());
    let token = lock.token();
    // SAFETY: the format "sbll" matches the arguments: the key string, the token as pointer
    // and length, and two long longs. EmitAOF copies them before it returns.
    unsafe {
        raw::RedisModule_EmitAOF.unwrap()(
            aof,
            c"LOCK.APPLY".as_ptr(),
            c"sbll".as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            deadline as std::os::raw::c_longlong,
            lock.fence() as std::os::raw::c_longlong,
        );
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: the value was created by this module with `Box<Lock>` and Redis frees it once,
    // possibly on a background thread; nothing else reaches it then but the lease index,
    // which `forget` takes it out of under the index's mutex.
    let lock = unsafe { Box::from_raw(value.cast::<Lock>()) };
    leases::forget(&lock);
    stats::lock_freed();
}

/// The key leaves the keyspace (on the main thread, before the value is freed): the engine
/// notes which, to count evictions.
unsafe extern "C" fn unlink(_key: *mut raw::RedisModuleString, value: *const c_void) {
    // SAFETY: as in rdb_save.
    engine::unlinked(unsafe { &*value.cast::<Lock>() });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: as in rdb_save.
    unsafe { &*value.cast::<Lock>() }.heap_size()
}

/// `COPY`: the same holder, lease and fence under the destination's name and database.
unsafe extern "C" fn copy2(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: as in rdb_save; `ctx` is the live key context of this copy, whose names stay
    // valid for the duration of the callback.
    let (lock, to, from_db, to_db) = unsafe {
        (
            &*value.cast::<Lock>(),
            RedisString::string_as_slice(raw::RedisModule_GetToKeyNameFromOptCtx.unwrap()(ctx)),
            raw::RedisModule_GetDbIdFromOptCtx.unwrap()(ctx),
            raw::RedisModule_GetToDbIdFromOptCtx.unwrap()(ctx),
        )
    };
    keyspace::remember_source_db(from_db);
    let copy = Box::new(lock.copied_to(to, to_db));
    leases::track(&copy);
    stats::lock_created();
    Box::into_raw(copy).cast()
}

/// The fence high-water mark and when it was saved: a server that loads it again knows how
/// far above it fences issued after the save can be (`FenceIssuer::reload`).
unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, engine::fences().high_water());
    raw::save_signed(rdb, clock::now().wall());
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let loaded = match encver {
        1 => raw::load_unsigned(rdb).map(|hw| engine::fences().observe(hw)),
        2 => raw::load_unsigned(rdb).and_then(|hw| {
            let saved_at = raw::load_signed(rdb)?;
            engine::fences().reload(hw, saved_at, clock::now().wall());
            Ok(())
        }),
        _ => return raw::REDISMODULE_ERR as c_int,
    };
    match loaded {
        Ok(()) => raw::REDISMODULE_OK as c_int,
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

fn log_warning(message: &str) {
    let Ok(message) = std::ffi::CString::new(message) else {
        return;
    };
    // SAFETY: RedisModule_Log accepts a NULL context (the load callbacks have none); the
    // format and the message are NUL-terminated and the format takes exactly one string.
    unsafe {
        raw::RedisModule_Log.unwrap()(
            ptr::null_mut(),
            c"warning".as_ptr(),
            c"%s".as_ptr(),
            message.as_ptr(),
        );
    }
}
