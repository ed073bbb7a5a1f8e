//! The engine: the one owner of the module's state and the only code that changes a lock.
//!
//! It holds the lease index (`leases.rs`), the registry of waiting clients
//! (`waiters.rs`), the fence issuer and the timer, and it makes every hand-off: a grant,
//! a release, a lease end, a wait timeout, a disconnect, `CLIENT UNBLOCK`, and a key
//! deleted, moved, swapped or replaced under its waiters. Commands (`commands.rs`), the
//! timer, blocked-client callbacks and server events (`events.rs`, `persistence.rs`) are
//! thin adapters that call in here; nothing in here calls back up into them.
//!
//! - `state.rs`: the state, and the only way to reach it.
//! - `ops.rs`: what the commands do.
//! - `handoff.rs`: how a free lock passes on, the sweep of due deadlines, and the timer.
//! - `observe.rs`: `LOCK.OBSERVE`, and the one path by which a change reaches observers.
//! - `server.rs`: what the server does around a key, and blocked clients that leave.
//!
//! Everything but the lease index is touched by the main thread only, and is thread-local
//! (`state.rs`). The server can call back into the module while a command is inside it
//! (opening a key with a TTL may expire it, and the expiry is announced to the module at
//! once), so a key event that finds the engine busy is queued and handled when the running
//! operation ends.

mod effects;
mod handoff;
mod observe;
mod observers;
mod ops;
mod rules;
mod server;
mod state;
pub mod waiters;

// The adapters' entry points.
pub use effects::is_replay;
pub use handoff::{aof_rewrite_started, highwater, on_cron, promoted};
pub use observe::{deliver_observation, is_observer, observe, Observed};
pub use ops::{acquire, apply, extend, fence, guard, queued_at, release, Acquired};
pub use server::{
    blocked_client_left, deliver, demoted, evicted, flushed, relocated, swapped,
    unblocked_by_client, unlinked, Arrival, Unblocked,
};
pub use state::{observing_clients, waiting_clients, with_fences};

/// Readies the engine at load: the timer's context and callback.
pub fn init(ctx: &redis_module::Context) {
    effects::init(ctx, handoff::on_timer);
}
pub use waiters::Reply;
