//! How the module fits the server around it: the `INFO lock` section, keyspace notifications
//! of the module class, ACL key patterns and the `lock` ACL category, `COMMAND GETKEYS`.
//! Behaviour that depends on the server version (module ACL categories) is detected at run
//! time and asserted for that version, so the same file runs on Redis 7.0 and Valkey 8/9.
//!
//! Files: `info_lock` holds the `INFO lock` tests and `Stats`, which follows the section
//! through a test; `notifications` the keyspace-notification tests and `Subscriber`, which
//! the lease-end tests of `info_lock` use too; `acl` the ACL and `COMMAND GETKEYS` tests.
//! Here: what they share, a waiter on its own thread.

mod acl;
mod info_lock;
mod notifications;

use std::time::Duration;

use crate::common::{info, wait_until};
use redis::Connection;

/// Wider than any lease a test waits out, narrower than a hang.
const LEASE_WAIT: Duration = Duration::from_secs(5);

/// Waits until `n` clients wait on `key`.
#[track_caller]
fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    assert!(
        wait_until(Duration::from_secs(5), || info(con, key)
            .map_or(0, |i| i.waiters)
            == n),
        "{key}: never {n} waiter(s); now {:?}",
        info(con, key)
    );
}
