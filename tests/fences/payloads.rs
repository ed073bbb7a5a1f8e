//! `DUMP` payloads and `RESTORE`: a held lock with a given fence, and a fence an hour above
//! the clock floor, as a key from a node whose clock runs ahead brings in.

use crate::clock::{floor, now_ms};
use crate::cmd;
use crate::common::*;
use crate::HOUR_MS;
use redis::Value;

/// A lock held by `token` for 10 more minutes, with fence `fence` (its last), dumped now in
/// the encoding version the module writes (3).
pub(crate) fn held(fmt: &dump::Format, token: &str, fence: i64) -> Vec<u8> {
    let now = now_ms();
    let hold = dump::SavedHold::new(token, now + 600_000, fence as u64);
    fmt.v3(dump::EXCLUSIVE, fence as u64, now, vec![hold])
}

#[track_caller]
pub(crate) fn restore(c: &mut redis::Connection, key: &str, payload: &[u8]) {
    assert_eq!(
        cmd!(c, "RESTORE", key, 0, payload),
        Ok(Value::Okay),
        "RESTORE {key}"
    );
}

/// A fence an hour above the clock floor (a key from a node whose clock runs an hour ahead).
pub(crate) fn far_fence() -> i64 {
    floor(now_ms() + HOUR_MS)
}
