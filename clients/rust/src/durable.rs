//! Durable mode (`durable(replicas, timeout)`): after a grant, a guarded write or an extend,
//! `WAIT replicas timeout` on the connection that sent it. `WAIT` counts the replicas that
//! reached that connection's last write, so it must follow the write on the same connection
//! (in a cluster, on the lock key's node). What a shortfall means depends on what was
//! written: see [`Error::NotDurable`](crate::Error::NotDurable).

use redis::{ErrorKind, RedisError, RedisResult};

use crate::aio::conn::AsyncConn;
use crate::commands as cmds;
use crate::error::{Error, GuardError, LossReason};
use crate::options::Spec;
use crate::sync_conn::SyncConn;

/// Fewer replicas than required acknowledged the connection's last write in time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shortfall {
    pub acked: i64,
    pub required: u32,
}

impl Shortfall {
    /// An extend that was not confirmed ends the hold as a failed extend does: a replica
    /// promoted now has the earlier lease, so the hold may end there sooner than the holder
    /// believes.
    pub(crate) fn loss(self) -> LossReason {
        let Shortfall { acked, required } = self;
        LossReason::Error(RedisError::from((
            ErrorKind::Client,
            "extend not durable",
            format!("only {acked} of {required} replicas acknowledged it in time"),
        )))
    }
}

impl From<Shortfall> for Error {
    fn from(s: Shortfall) -> Self {
        Error::NotDurable {
            acked: s.acked,
            required: s.required,
        }
    }
}

impl From<Shortfall> for GuardError {
    fn from(s: Shortfall) -> Self {
        GuardError::NotDurable {
            acked: s.acked,
            required: s.required,
        }
    }
}

fn shortfall(acked: i64, required: u32) -> Option<Shortfall> {
    (acked < i64::from(required)).then_some(Shortfall { acked, required })
}

/// In durable mode, `WAIT` for the replicas on `conn` (after its last write); `None` if
/// enough acknowledged, or if the lock is not durable (then nothing is sent). The
/// connection's read timeout is the command timeout again afterwards.
pub(crate) fn wait_sync(conn: &mut SyncConn, spec: &Spec) -> RedisResult<Option<Shortfall>> {
    let opts = &spec.opts;
    let Some((replicas, timeout)) = opts.durable else {
        return Ok(None);
    };
    conn.set_timeout(Some(timeout.saturating_add(opts.timeout)))?;
    let reply = conn.query_at(&cmds::wait_replicas(replicas, timeout), &spec.key);
    conn.set_timeout(Some(opts.timeout))?;
    Ok(shortfall(cmds::int_reply(reply?)?, replicas))
}

/// [`wait_sync`] on an async connection; its reply is awaited for the `WAIT` timeout plus
/// the command timeout.
pub(crate) async fn wait_async(
    conn: &mut AsyncConn,
    spec: &Spec,
) -> RedisResult<Option<Shortfall>> {
    let opts = &spec.opts;
    let Some((replicas, timeout)) = opts.durable else {
        return Ok(None);
    };
    let wait = cmds::wait_replicas(replicas, timeout);
    let budget = Some(timeout.saturating_add(opts.timeout));
    let acked = cmds::int_reply(conn.query_at(&wait, &spec.key, budget).await?)?;
    Ok(shortfall(acked, replicas))
}
