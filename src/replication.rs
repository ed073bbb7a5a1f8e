//! Whether anything reads the stream of effects this server propagates, and whether a
//! command can be a replay of one (from a master, or from the AOF).
//!
//! A lock's state goes to replicas and the AOF as `LOCK.APPLY`, built by
//! `RedisModule_Replicate`, which looks the command up by name and copies every argument
//! before Redis checks whether anyone will read them (`shouldPropagate` in `server.c`:
//! the AOF is on, or this master has replicas or a replication backlog). On a master with
//! neither, Redis throws that work away, and it was the largest single cost of an acquire
//! (about 15% of the server's instructions per acquire + release, by callgrind).
//!
//! So the module keeps its own answer to the same question, erring towards "read":
//! - It starts as "read", and is set back to it whenever a reader may have appeared: a
//!   fork (every full synchronisation of a replica and every AOF rewrite begins with one,
//!   and a replica's copy of the data starts at that fork), a role change (a promoted
//!   replica keeps its backlog), and the end of a load.
//! - Only the cron clears it, once a second, when `INFO` shows a master with no replicas,
//!   no replication backlog and the AOF off, outside cluster mode. A reader that appears
//!   later can only do so through a fork, a role change or a load, which set it back before
//!   the next command.
//!
//! While it is clear, a change made by a client's command is propagated as that command,
//! verbatim, which costs nothing to build and which Redis discards for the same reason; it
//! still counts the change towards `save` points, as any propagation does. Grants, which
//! timers and disconnects make too, are always built in full.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use redis_module::{raw, Context, ContextFlags};

static READ: AtomicBool = AtomicBool::new(true);

/// This server is a replica, or is loading: only then can a command be a master's or the
/// AOF's replay. Kept from the role-change and loading events so that `LOCK.RELEASE` does
/// not ask Redis for its context flags (a tenth of a release's own cost) on a master.
static REPLICA: AtomicBool = AtomicBool::new(true);
static LOADING: AtomicBool = AtomicBool::new(false);

/// Cron ticks between two looks at `INFO` (the cron runs `hz` times a second, 10 by default).
const CHECK_EVERY: u32 = 10;
static TICKS: AtomicU32 = AtomicU32::new(0);

/// Whether a propagated effect may reach a replica or the AOF.
pub fn stream_is_read() -> bool {
    READ.load(Ordering::Relaxed)
}

/// A fork, a role change or a load: a reader may have appeared.
pub fn reader_may_have_appeared() {
    READ.store(true, Ordering::Relaxed);
}

/// The role at module load (a `replicaof` in the configuration is read before modules).
pub fn init(ctx: &Context) {
    let flags = ctx.get_flags();
    REPLICA.store(flags.contains(ContextFlags::SLAVE), Ordering::Relaxed);
    LOADING.store(flags.contains(ContextFlags::LOADING), Ordering::Relaxed);
}

pub fn role_changed(replica: bool) {
    REPLICA.store(replica, Ordering::Relaxed);
    reader_may_have_appeared();
}

pub fn loading(started: bool) {
    LOADING.store(started, Ordering::Relaxed);
    if !started {
        reader_may_have_appeared();
    }
}

/// True while this server is a replica.
pub fn is_replica() -> bool {
    REPLICA.load(Ordering::Relaxed)
}

/// True while the server loads a dataset (an RDB file, the AOF, a replica's full sync,
/// `DEBUG RELOAD`), as opposed to a `RESTORE` of one key.
pub fn is_loading() -> bool {
    LOADING.load(Ordering::Relaxed)
}

/// False only where no command can come from a master or the AOF: a master not loading.
/// Where it is true, the context flags say whether this one does.
pub fn may_replay() -> bool {
    REPLICA.load(Ordering::Relaxed) || LOADING.load(Ordering::Relaxed)
}

pub fn on_cron(ctx: &Context) {
    if !TICKS
        .fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(CHECK_EVERY)
    {
        return;
    }
    if stream_is_read() && nobody_reads(ctx) {
        READ.store(false, Ordering::Relaxed);
    }
}

/// True only if `INFO` positively shows a master with no replica, no backlog and the AOF
/// off, outside cluster mode (where slot migration in Valkey 9 and Redis 8.4 streams the
/// propagated effects to another node, which `INFO` does not show). A field that is missing
/// or reads otherwise (another server, another version) keeps the stream read.
fn nobody_reads(ctx: &Context) -> bool {
    let replication = Info::read(ctx, c"replication");
    let persistence = Info::read(ctx, c"persistence");
    let cluster = Info::read(ctx, c"cluster");
    cluster.is(c"cluster_enabled", b"0")
        && replication.is(c"role", b"master")
        && replication.is(c"connected_slaves", b"0")
        && replication.is(c"repl_backlog_active", b"0")
        && persistence.is(c"aof_enabled", b"0")
}

/// One section of `INFO`. The crate's `ServerInfo::field` retains the string Redis returns
/// on top of the reference it already owns, which leaks it; the C-string accessor borrows
/// from the section instead.
struct Info {
    ctx: *mut raw::RedisModuleCtx,
    data: *mut raw::RedisModuleServerInfoData,
}

impl Info {
    fn read(ctx: &Context, section: &CStr) -> Info {
        // SAFETY: ctx.ctx is the live context of the cron callback; `section` is
        // NUL-terminated. The data is freed in Drop.
        let data = unsafe { raw::RedisModule_GetServerInfo.unwrap()(ctx.ctx, section.as_ptr()) };
        Info { ctx: ctx.ctx, data }
    }

    fn is(&self, field: &CStr, want: &[u8]) -> bool {
        if self.data.is_null() {
            return false;
        }
        // SAFETY: data is live until Drop; the returned C string (or null) is owned by it and
        // read before Drop.
        let value =
            unsafe { raw::RedisModule_ServerInfoGetFieldC.unwrap()(self.data, field.as_ptr()) };
        // SAFETY: a non-null value is a NUL-terminated string inside `data`.
        !value.is_null() && unsafe { CStr::from_ptr(value) }.to_bytes() == want
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        if !self.data.is_null() {
            // SAFETY: data came from GetServerInfo with this context and is freed once.
            unsafe { raw::RedisModule_FreeServerInfo.unwrap()(self.ctx, self.data) };
        }
    }
}
