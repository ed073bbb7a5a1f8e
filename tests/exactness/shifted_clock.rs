//! A server with another clock: a `redis-server` started under `tests/support/wallshift.c`
//! (`LD_PRELOAD`), whose wall clock, its module's included, runs a constant offset from ours;
//! the moved-lease tests move locks between it and a server on the real clock.

use redis::Connection;

use crate::common::wallclock::{server_offset_ms, WallClock};
use crate::common::*;

/// The offset file of a shifted server; removed on drop (the server keeps the last value).
pub(crate) type OffsetFile = WallClock;

/// The module's wall clock minus ours, in ms, read from the fence of a fresh key on a server
/// that has seen no fence from elsewhere (a fence is `unix_ms << 11` plus a counter).
fn module_offset_ms(c: &mut Connection) -> i64 {
    let f = acquire(c, "clock-probe", "p", 1000).expect("probe acquire");
    assert_eq!(release(c, "clock-probe", "p"), 1);
    (f >> 11) - unix_ms()
}

pub(crate) fn is_valkey(c: &mut Connection) -> bool {
    info_field(c, "server", "valkey_version").is_some()
}

/// A server whose wall clock runs `offset_ms` from the real one from its start, its module
/// included (checked through a fence).
pub(crate) fn shifted_server(offset_ms: i64, opts: Opts) -> (Server, OffsetFile) {
    let clock = WallClock::at("exactness", offset_ms);
    let s = clock.start_checked(opts, offset_ms);
    let server = server_offset_ms(&mut s.conn());
    let module = module_offset_ms(&mut s.conn());
    assert!(
        (module - offset_ms).abs() < 1000,
        "the module's wall clock is at {module} ms from ours, the server's at {server}: \
         the shim does not reach the module"
    );
    (s, clock)
}
