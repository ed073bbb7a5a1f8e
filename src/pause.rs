//! The write pauses a master asks of the server when it may just have been replaced: after a
//! replica that was online disconnects (a master cannot tell one promoted in its place from
//! one that died), and after its event loop stood still long enough for a failover
//! (`stall.rs`). Both are `CLIENT PAUSE <lock.replica-loss-pause-ms> WRITE`, the pause the
//! server's own `FAILOVER` makes: until the other replicas follow the new master, their
//! acknowledgements (`WAIT`) prove nothing, so writes wait.

use redis_module::{Context, ContextFlags};

use crate::{config, stats};

/// Why a master pauses its writes.
#[derive(Clone, Copy, Debug)]
pub enum Cause {
    /// A replica that was online disconnected.
    ReplicaLoss,
    /// The event loop stood still this many milliseconds.
    Stall(u64),
}

/// Pauses writes for `lock.replica-loss-pause-ms` if this server is a master and the setting
/// is on (the decision is `config::replica_loss_pause`), and counts and logs the pause.
pub fn writes(ctx: &Context, cause: Cause) {
    let master = ctx.get_flags().contains(ContextFlags::MASTER);
    let Some(ms) = config::replica_loss_pause(config::replica_loss_pause_ms(), master) else {
        return;
    };
    let why = match cause {
        Cause::ReplicaLoss => "a replica went offline".to_string(),
        Cause::Stall(stood) => format!(
            "the event loop stood still for {stood} ms (over lock.stall-threshold-ms): \
             a replica may have been promoted meanwhile"
        ),
    };
    let ms_arg = ms.to_string();
    // Not propagated (no `!` in the call's format): replicas are not paused.
    match ctx.call("CLIENT", &["PAUSE", ms_arg.as_str(), "WRITE"][..]) {
        Ok(_) => {
            match cause {
                Cause::ReplicaLoss => stats::REPLICA_LOSS_PAUSES.bump(),
                Cause::Stall(_) => stats::STALLS.bump(),
            }
            ctx.log_notice(&format!(
                "{why}: writes paused for {ms} ms (CLIENT PAUSE {ms} WRITE, \
                 lock.replica-loss-pause-ms)"
            ));
        }
        // The server's text, without what the log's format string or a C string cannot
        // carry.
        Err(e) => ctx.log_warning(&format!(
            "{why}, but CLIENT PAUSE {ms} WRITE was refused: {}",
            e.to_string().replace(['%', '\0'], "?")
        )),
    }
}
