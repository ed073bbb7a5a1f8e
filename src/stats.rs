//! What the module counts, and the `INFO lock` section that shows it. Counters are atomics
//! because a lock can be freed on a background thread (`FLUSHALL ASYNC`); every update is a
//! relaxed add, which costs the command path next to nothing.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use redis_module::{InfoContext, RedisResult};
use redis_module_macros::info_command_handler;

use crate::waiters;

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed) as i64
    }
}

/// Acquisitions that handed out a new fence (`LOCK.ACQUIRE` on a free lock; grants to
/// waiters are counted apart, under `GRANTS`).
pub static ACQUIRES: Counter = Counter::new();
/// `LOCK.ACQUIRE` calls that found the lock held by another token (null reply or queued).
pub static CONTENDED: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
/// Successful `LOCK.EXTEND`s and renewals by a repeated `LOCK.ACQUIRE`.
pub static EXTENDS: Counter = Counter::new();
pub static FENCES: Counter = Counter::new();
pub static LEASE_ENDS: Counter = Counter::new();
pub static GRANTS: Counter = Counter::new();
pub static WAIT_TIMEOUTS: Counter = Counter::new();

/// Lock values in memory: created by acquire, load, restore, copy; freed with their key.
static LOCKS: AtomicI64 = AtomicI64::new(0);

pub fn lock_created() {
    LOCKS.fetch_add(1, Ordering::Relaxed);
}

pub fn lock_freed() {
    LOCKS.fetch_sub(1, Ordering::Relaxed);
}

/// `INFO lock`: the module's default section, so its fields read `lock_held`, `lock_acquires`…
#[info_command_handler]
fn info_section(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let fields = [
        ("held", LOCKS.load(Ordering::Relaxed).max(0)),
        ("waiting_clients", waiters::count() as i64),
        ("acquires", ACQUIRES.get()),
        ("contended_acquires", CONTENDED.get()),
        ("releases", RELEASES.get()),
        ("extends", EXTENDS.get()),
        ("fences", FENCES.get()),
        ("lease_ends", LEASE_ENDS.get()),
        ("grants", GRANTS.get()),
        ("wait_timeouts", WAIT_TIMEOUTS.get()),
        // 0 on a master with no replica, backlog or AOF (see replication.rs).
        (
            "propagating",
            i64::from(crate::replication::stream_is_read()),
        ),
    ];
    // An empty section name is the module's default section, `# lock`.
    let mut section = ctx.builder().add_section("");
    for (name, value) in fields {
        section = section.field(name, value)?;
    }
    section.build_section()?.build_info()?;
    Ok(())
}
