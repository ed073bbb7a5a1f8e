//! Commands retried past `TRYAGAIN` (an empty bucket, or a server that started less than
//! 9 ms ago), for the tests that need a fence rather than the refusal.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::TRYAGAIN;
use redis::Value;

/// Runs `call` again every millisecond while it is answered `TRYAGAIN` (the bucket is
/// empty, or the server started less than 9 ms ago), for 5 s at most: the reply, and how
/// many `TRYAGAIN` came first.
fn past_tryagain(what: &str, mut call: impl FnMut() -> Result<Value, String>) -> (Value, u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refused = 0;
    loop {
        match call() {
            Err(e) if e == TRYAGAIN && Instant::now() < deadline => {
                refused += 1;
                sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{what}: {e} (after {refused} TRYAGAIN)"),
            Ok(v) => return (v, refused),
        }
    }
}

/// `LOCK.ACQUIRE key token ttl` of a free lock, retried past `TRYAGAIN`: its fence.
pub(crate) fn acquire_ready(c: &mut redis::Connection, key: &str, token: &str, ttl: u64) -> i64 {
    let what = format!("LOCK.ACQUIRE {key} {token} {ttl}");
    match past_tryagain(&what, || cmd!(c, "LOCK.ACQUIRE", key, token, ttl)) {
        (Value::Int(f), _) if f > 0 => f,
        (other, _) => panic!("{what}: {other:?}"),
    }
}

/// `LOCK.FENCE key token` by the holder, retried past `TRYAGAIN`: the new fence.
pub(crate) fn fence_ready(c: &mut redis::Connection, key: &str, token: &str) -> i64 {
    let what = format!("LOCK.FENCE {key} {token}");
    match past_tryagain(&what, || cmd!(c, "LOCK.FENCE", key, token)) {
        (Value::Int(f), _) if f > 0 => f,
        (other, _) => panic!("{what}: {other:?}"),
    }
}
