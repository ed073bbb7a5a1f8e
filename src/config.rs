//! Module configuration: `CONFIG GET/SET lock.*`, and the same names as load-time arguments
//! (`loadmodule libredis_lock.so max-ttl 60000`).

use std::sync::atomic::{AtomicI64, Ordering};

pub const DEFAULT_MAX_TTL: i64 = 86_400_000;
/// Ten years: any larger lease is a mistake, and the bound keeps deadline arithmetic far
/// from overflow.
pub const MAX_TTL_LIMIT: i64 = 315_360_000_000;

/// `lock.max-ttl`: the longest lease, in milliseconds, that `LOCK.ACQUIRE` and
/// `LOCK.EXTEND` accept.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}
