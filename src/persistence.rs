//! The lock data type as Redis stores it: RDB save and load, AOF rewrite, the fence
//! high-water mark as RDB aux data, and the memory callbacks.
//!
//! A lock is saved (encoding version 3) as the Unix millisecond it was saved at, its mode,
//! the key's last fence, and its holds in grant order, each as (token, deadline as Unix
//! milliseconds, fence). Where the same dataset is loaded again (an RDB file, the AOF's
//! preamble, a replica's full sync, `DEBUG RELOAD`) deadlines are absolute, as Redis loads
//! key expiries, so that a lease keeps running while the server is down. Where one key moves
//! to another server (`DUMP`/`RESTORE`, `MIGRATE`) each lease travels as the time it had left
//! when saved, as core `MIGRATE` carries the PTTL, so that servers whose clocks differ neither
//! end it early nor stretch it. Versions 1 (token, deadline, fence: absolute) and 2 (the same
//! and the save time), written before shared holds existed, still load.

use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::{raw, RedisString};

use crate::args::MAX_TOKEN_LEN;
use crate::clock;
use crate::config;
use crate::engine;
use crate::fence;
use crate::keyspace;
use crate::leases;
use crate::lock::{HoldRef, Lock, Mode};
use crate::replication;
use crate::stats;

/// Bump when the saved layout changes; `rdb_load` refuses versions it does not know.
/// Version 4 saves a lock as 3 does; its aux data adds the fence epoch.
pub const LOCK_ENCODING_VERSION: i32 = 4;

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
    let saved_at = now.wall();
    raw::save_signed(rdb, saved_at);
    raw::save_unsigned(rdb, u64::from(lock.mode() == Mode::Shared));
    raw::save_unsigned(rdb, lock.last_fence());
    raw::save_unsigned(rdb, lock.recorded() as u64);
    for hold in lock.holds() {
        // The lease left, rounded up to the millisecond, from the millisecond of the save:
        // never shorter than it is, at most 1 ms longer, read as absolute or as time left.
        let left_us = hold.deadline as i64 - now.mono as i64 + now.wall_us.rem_euclid(1000);
        raw::save_slice(rdb, hold.token);
        raw::save_signed(rdb, saved_at + (left_us + 999).div_euclid(1000));
        raw::save_unsigned(rdb, hold.fence);
    }
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
    if replication::is_loading() {
        engine::with_fences(|f| f.observe(lock.last_fence()));
    }
    // A key from elsewhere (`RESTORE`, `MIGRATE`) raises the high-water mark only once it
    // lands (`engine::relocated`): the server may still refuse the payload after this.
    leases::track(&lock);
    stats::lock_created();
    Box::into_raw(lock).cast()
}

/// One saved hold, its deadline still in Unix milliseconds.
struct Saved {
    token: Vec<u8>,
    deadline: i64,
    fence: u64,
}

fn load_hold(rdb: *mut raw::RedisModuleIO) -> Option<Saved> {
    let token = raw::load_string_buffer(rdb).ok()?.as_ref().to_vec();
    let deadline = raw::load_signed(rdb).ok()?;
    let fence = raw::load_unsigned(rdb).ok()?;
    Some(Saved {
        token,
        deadline,
        fence,
    })
}

/// No two holds share a fence, as no command can make them.
fn distinct_fences(holds: &[Saved]) -> bool {
    let mut fences: Vec<u64> = holds.iter().map(|h| h.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    fences.len() == holds.len()
}

/// One hold per token. Earlier builds of the module could grant a token a second hold of
/// a key it held (two queued requests with one token) and saved both; such data loads as
/// one hold, where the first was, under the later lease and the newer fence (the older
/// fence's guarded writes are refused, as after `LOCK.FENCE`).
fn merge_repeated_tokens(holds: &mut Vec<Saved>) {
    let mut seen: std::collections::HashMap<Vec<u8>, usize> = Default::default();
    let mut kept: Vec<Saved> = Vec::with_capacity(holds.len());
    for h in holds.drain(..) {
        match seen.get(&h.token) {
            Some(&i) => {
                kept[i].deadline = kept[i].deadline.max(h.deadline);
                kept[i].fence = kept[i].fence.max(h.fence);
            }
            None => {
                seen.insert(h.token.clone(), kept.len());
                kept.push(h);
            }
        }
    }
    *holds = kept;
}

/// Reads one lock; `None` for a short read or values no saved lock can have (a corrupt
/// `RESTORE` payload with a valid checksum gets here).
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Box<Lock>> {
    let (saved_at, mode, last_fence, mut holds) = if encver >= 3 {
        let saved_at = raw::load_signed(rdb).ok()?;
        let mode = match raw::load_unsigned(rdb).ok()? {
            0 => Mode::Exclusive,
            1 => Mode::Shared,
            _ => return None,
        };
        let last_fence = raw::load_unsigned(rdb).ok()?;
        let count = raw::load_unsigned(rdb).ok()?;
        if count == 0 || (mode == Mode::Exclusive && count != 1) {
            return None;
        }
        // Read one by one: a corrupt count ends in a short read, not a huge allocation.
        let mut holds = Vec::new();
        for _ in 0..count {
            holds.push(load_hold(rdb)?);
        }
        (Some(saved_at), mode, last_fence, holds)
    } else {
        let hold = load_hold(rdb)?;
        let saved_at = if encver == 2 {
            Some(raw::load_signed(rdb).ok()?)
        } else {
            None
        };
        (saved_at, Mode::Exclusive, hold.fence, vec![hold])
    };
    if !distinct_fences(&holds) {
        return None;
    }
    merge_repeated_tokens(&mut holds);
    let now = clock::now();
    // A whole dataset (RDB, AOF preamble, full sync) holds what this module issued; one key
    // from elsewhere (RESTORE) must leave room for fences above it.
    let whole_dataset = replication::is_loading();
    let fence_ok = |f: u64| {
        if whole_dataset {
            fence::is_valid(f)
        } else {
            fence::is_valid_from_elsewhere(f)
        }
    };
    // A lease longer than any command could grant is corrupt data.
    let longest = now.wall().saturating_add(config::MAX_TTL_LIMIT);
    let mut deadlines = Vec::with_capacity(holds.len());
    for h in &holds {
        let mut deadline = h.deadline;
        if let (Some(saved_at), false) = (saved_at, whole_dataset) {
            // One key from elsewhere: the time it had left, from now on this clock.
            deadline = now.wall().saturating_add(deadline.checked_sub(saved_at)?);
        }
        let token_ok = !h.token.is_empty() && h.token.len() <= MAX_TOKEN_LEN;
        if !token_ok || !fence_ok(h.fence) || h.fence > last_fence || deadline > longest {
            return None;
        }
        deadlines.push(now.to_mono(deadline));
    }
    if !fence_ok(last_fence) {
        return None;
    }
    let refs: Vec<HoldRef> = holds
        .iter()
        .zip(deadlines)
        .map(|(h, deadline)| HoldRef {
            token: &h.token,
            deadline,
            fence: h.fence,
        })
        .collect();
    // Redis 7.0 names the key for RDB files, replica syncs and RESTORE; without a name the
    // lease still ends when the key is next touched, just not on its own.
    let (db, key) = key_of(rdb).unwrap_or_default();
    Lock::restored(&key, db, mode, &refs, last_fence)
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
    let now = clock::now();
    // Replayed in order onto a key that does not exist yet: the first hold makes the lock,
    // each further shared hold joins it. The first also carries the key's last fence when a
    // hold that has gone had it (`LAST`).
    let shared = lock.mode() == Mode::Shared;
    let last = lock.last_fence();
    let kept = lock.holds().any(|h| h.fence == last);
    for (i, hold) in lock.holds().enumerate() {
        let deadline = now.to_wall(hold.deadline) as c_longlong;
        let token = (hold.token.as_ptr().cast::<c_char>(), hold.token.len());
        let fence = hold.fence as c_longlong;
        let emit = raw::RedisModule_EmitAOF.unwrap();
        // SAFETY: each format matches its arguments: the key string, the token as pointer
        // and length, long longs, and NUL-terminated strings. EmitAOF copies them before it
        // returns.
        unsafe {
            match (shared, i == 0 && !kept) {
                (false, false) => emit(
                    aof,
                    APPLY,
                    c"sbll".as_ptr(),
                    key,
                    token.0,
                    token.1,
                    deadline,
                    fence,
                ),
                (true, false) => emit(
                    aof,
                    APPLY,
                    c"sbllc".as_ptr(),
                    key,
                    token.0,
                    token.1,
                    deadline,
                    fence,
                    SHARED,
                ),
                (false, true) => emit(
                    aof,
                    APPLY,
                    c"sbllcl".as_ptr(),
                    key,
                    token.0,
                    token.1,
                    deadline,
                    fence,
                    LAST,
                    last as c_longlong,
                ),
                (true, true) => emit(
                    aof,
                    APPLY,
                    c"sbllccl".as_ptr(),
                    key,
                    token.0,
                    token.1,
                    deadline,
                    fence,
                    SHARED,
                    LAST,
                    last as c_longlong,
                ),
            }
        }
    }
}

const APPLY: *const c_char = c"LOCK.APPLY".as_ptr();
const SHARED: *const c_char = c"SHARED".as_ptr();
const LAST: *const c_char = c"LAST".as_ptr();

unsafe extern "C" fn free(value: *mut c_void) {
    let lock = value.cast::<Lock>();
    let by_engine = leases::is_being_deleted(lock);
    if !by_engine {
        leases::forget(lock);
    }
    // SAFETY: the value was created by this module as a `Box<Lock>` and Redis frees it once,
    // possibly on a background thread; out of the lease index now, nothing else reaches it.
    drop(unsafe { Box::from_raw(lock) });
    stats::lock_freed(by_engine);
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
    let copy = lock.copied_to(to, to_db);
    leases::track(&copy);
    stats::lock_created();
    Box::into_raw(copy).cast()
}

/// The fence high-water mark and when it was saved: a server that loads it again knows how
/// far above it fences issued after the save can be (`FenceIssuer::reload`). Then the fence
/// epoch, so that a replica's full synchronisation carries its master's (fence.rs, "Epochs").
unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    let (high_water, epoch) = engine::with_fences(|f| (f.high_water(), f.epoch()));
    raw::save_unsigned(rdb, high_water);
    raw::save_signed(rdb, clock::now().wall());
    raw::save_unsigned(rdb, epoch);
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let loaded = match encver {
        1 => raw::load_unsigned(rdb).map(|hw| engine::with_fences(|f| f.observe(hw))),
        2..=4 => raw::load_unsigned(rdb).and_then(|hw| {
            let saved_at = raw::load_signed(rdb)?;
            let epoch = if encver >= 4 {
                raw::load_unsigned(rdb)?
            } else {
                0
            };
            engine::with_fences(|f| {
                f.reload(hw, saved_at, clock::now().wall());
                f.learn_epoch(epoch);
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(token: &str, deadline: i64, fence: u64) -> Saved {
        Saved {
            token: token.into(),
            deadline,
            fence,
        }
    }

    #[test]
    fn a_token_saved_twice_loads_as_one_hold_in_the_first_place() {
        let mut holds = vec![
            saved("a", 500, 10),
            saved("b", 700, 11),
            saved("a", 900, 12),
        ];
        assert!(distinct_fences(&holds));
        merge_repeated_tokens(&mut holds);
        let got: Vec<_> = holds
            .iter()
            .map(|h| (h.token.clone(), h.deadline, h.fence))
            .collect();
        assert_eq!(
            got,
            vec![(b"a".to_vec(), 900, 12), (b"b".to_vec(), 700, 11)]
        );
        assert!(!distinct_fences(&[saved("a", 1, 5), saved("b", 1, 5)]));
    }
}
