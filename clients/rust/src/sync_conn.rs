//! A blocking connection to the lock's server: one server, or a cluster.

use std::time::Duration;

use redis::cluster::{ClusterConfig, ClusterConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisResult, Value};

use crate::options::Target;

/// A connection, with the read timeout it was last given (so that setting the same one
/// again costs no system call: the pool hands connections from acquire to release).
pub(crate) struct SyncConn {
    conn: Conn,
    read_timeout: std::cell::Cell<Option<Option<Duration>>>,
}

enum Conn {
    Single(redis::Connection),
    // Boxed: five times the size of a single connection.
    Cluster(Box<ClusterConnection>),
}

impl SyncConn {
    /// A new connection; `timeout` bounds its connect and, from then on, every write.
    pub(crate) fn open(target: &Target, timeout: Duration) -> RedisResult<Self> {
        let conn = match target {
            Target::Standalone(client) => {
                let c = client.get_connection_with_timeout(timeout)?;
                c.set_write_timeout(Some(timeout))?;
                Conn::Single(c)
            }
            Target::Cluster(client) => {
                let config = ClusterConfig::new().set_connection_timeout(timeout);
                let c = client.get_connection_with_config(config)?;
                // A keep-alive must see a broken connection as the error it is, not have it
                // papered over by a reconnect.
                c.set_auto_reconnect(false);
                c.set_write_timeout(Some(timeout))?;
                Conn::Cluster(Box::new(c))
            }
        };
        Ok(SyncConn {
            conn,
            read_timeout: std::cell::Cell::new(None),
        })
    }

    /// Read timeout of the calls that follow; `None` blocks without limit. (Writes are
    /// bounded by the timeout the connection was opened with.)
    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        // Zero means "no timeout" to the socket, the opposite of what a spent budget means.
        let timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        if self.read_timeout.get() == Some(timeout) {
            return Ok(());
        }
        // Unknown until set again, should this fail.
        self.read_timeout.set(None);
        match &self.conn {
            Conn::Single(c) => c.set_read_timeout(timeout)?,
            Conn::Cluster(c) => c.set_read_timeout(timeout)?,
        }
        self.read_timeout.set(Some(timeout));
        Ok(())
    }

    /// False once a read found the connection closed or out of step.
    pub(crate) fn is_open(&self) -> bool {
        use redis::ConnectionLike;
        match &self.conn {
            Conn::Single(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        }
    }

    /// Runs a command; in a cluster, routed by its first key (every `LOCK.*` command's key
    /// comes first, and `LOCK.GUARD`'s lock key too).
    pub(crate) fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match &mut self.conn {
            Conn::Single(c) => cmd.query(c),
            Conn::Cluster(c) => cmd.query(c.as_mut()),
        }
    }

    /// Runs a keyless command on the node that serves `key`: the server's `WAIT` must ask
    /// the node that made the grant (redis-rs would ask every master), and client ids are
    /// per node.
    pub(crate) fn query_at(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        match &mut self.conn {
            Conn::Single(c) => cmd.query(c),
            Conn::Cluster(c) => c.route_command(cmd, route_to(key))?.extract_error(),
        }
    }
}

pub(crate) fn route_to(key: &str) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}
