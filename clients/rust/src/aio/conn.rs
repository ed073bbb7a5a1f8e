//! An async connection to the lock's server: one server, or a cluster.

use std::time::Duration;

use redis::cluster::ClusterConfig;
use redis::{AsyncConnectionConfig, Cmd, RedisResult, Value};

use crate::error::timed_out;
use crate::options::Target;
use crate::sync_conn::route_to;

/// Cheap to clone: clones share one connection (per node), which closes with the last one.
#[derive(Clone)]
pub(crate) enum AsyncConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl AsyncConn {
    pub(crate) async fn open(target: &Target, timeout: Duration) -> RedisResult<Self> {
        let connect = async {
            match target {
                Target::Standalone(client) => {
                    // Each call is bounded here, by what it is for (a WAIT is long by design),
                    // not by redis-rs's default of 500 ms.
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(None);
                    let conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    Ok(AsyncConn::Single(conn))
                }
                Target::Cluster(client) => {
                    let config = ClusterConfig::new().set_connection_timeout(timeout);
                    let conn = client.get_async_connection_with_config(config).await?;
                    Ok(AsyncConn::Cluster(conn))
                }
            }
        };
        bounded(connect, Some(timeout.saturating_mul(2)), "connecting").await
    }

    /// Runs a command within `budget` (`None`: no limit); in a cluster, routed by its first
    /// key, as every `LOCK.*` command's key (and `LOCK.GUARD`'s lock key) comes first.
    pub(crate) async fn query(
        &mut self,
        cmd: &Cmd,
        budget: Option<Duration>,
    ) -> RedisResult<Value> {
        let call = async {
            match self {
                AsyncConn::Single(c) => cmd.query_async(c).await,
                AsyncConn::Cluster(c) => cmd.query_async(c).await,
            }
        };
        bounded(call, budget, "command").await
    }

    /// Runs a keyless command on the node that serves `key` (see `SyncConn::query_at`).
    pub(crate) async fn query_at(
        &mut self,
        cmd: &Cmd,
        key: &str,
        budget: Option<Duration>,
    ) -> RedisResult<Value> {
        let call = async {
            match self {
                AsyncConn::Single(c) => cmd.query_async(c).await,
                AsyncConn::Cluster(c) => c
                    .route_command(cmd.clone(), route_to(key))
                    .await?
                    .extract_error(),
            }
        };
        bounded(call, budget, "command").await
    }
}

async fn bounded<T>(
    call: impl std::future::Future<Output = RedisResult<T>>,
    budget: Option<Duration>,
    what: &str,
) -> RedisResult<T> {
    match budget {
        None => call.await,
        Some(budget) => tokio::time::timeout(budget, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(what))),
    }
}
