//! A blocking connection to the lock's server: one server, or a cluster.

use std::time::Duration;

use redis::cluster::{ClusterConfig, ClusterConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisResult, Value};

use crate::options::Target;

pub(crate) enum SyncConn {
    Single(redis::Connection),
    // Boxed: five times the size of a single connection.
    Cluster(Box<ClusterConnection>),
}

impl SyncConn {
    pub(crate) fn open(target: &Target, timeout: Duration) -> RedisResult<Self> {
        match target {
            Target::Standalone(client) => Ok(SyncConn::Single(
                client.get_connection_with_timeout(timeout)?,
            )),
            Target::Cluster(client) => {
                let config = ClusterConfig::new().set_connection_timeout(timeout);
                let conn = client.get_connection_with_config(config)?;
                // A keep-alive must see a broken connection as the error it is, not have it
                // papered over by a reconnect.
                conn.set_auto_reconnect(false);
                Ok(SyncConn::Cluster(Box::new(conn)))
            }
        }
    }

    /// Read and write timeout of the calls that follow; `None` blocks without limit.
    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        // Zero means "no timeout" to the socket, the opposite of what a spent budget means.
        let timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        match self {
            SyncConn::Single(c) => {
                c.set_read_timeout(timeout)?;
                c.set_write_timeout(timeout)
            }
            SyncConn::Cluster(c) => {
                c.set_read_timeout(timeout)?;
                c.set_write_timeout(timeout)
            }
        }
    }

    /// Runs a command; in a cluster, routed by its first key (every `LOCK.*` command's key
    /// comes first, and `LOCK.GUARD`'s lock key too).
    pub(crate) fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            SyncConn::Single(c) => cmd.query(c),
            SyncConn::Cluster(c) => cmd.query(c.as_mut()),
        }
    }

    /// Runs a keyless command on the node that serves `key`: the server's `WAIT` must ask
    /// the node that made the grant (redis-rs would ask every master), and client ids are
    /// per node.
    pub(crate) fn query_at(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        match self {
            SyncConn::Single(c) => cmd.query(c),
            SyncConn::Cluster(c) => c.route_command(cmd, route_to(key))?.extract_error(),
        }
    }
}

pub(crate) fn route_to(key: &str) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}
