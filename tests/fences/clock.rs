//! The clock floor of fences (`unix_ms << 11`) and the clocks it is read against: this
//! process's and the server's (`TIME`).

use crate::cmd;
use crate::{COUNTER_BITS, SLOTS_PER_MS};
use redis::Value;

pub(crate) use crate::common::unix_ms as now_ms;

/// The clock floor of fences in Unix millisecond `ms`.
pub(crate) fn floor(ms: i64) -> i64 {
    ms << COUNTER_BITS
}

/// How many milliseconds of floor `fence` is ahead of Unix millisecond `ms` (negative when
/// behind).
pub(crate) fn lead_ms(fence: i64, ms: i64) -> f64 {
    (fence - floor(ms)) as f64 / SLOTS_PER_MS as f64
}

/// The server's clock (`TIME`, which reads `gettimeofday`), in Unix microseconds.
pub(crate) fn server_time_us(c: &mut redis::Connection) -> i64 {
    let v = cmd!(c, "TIME").expect("TIME");
    let Value::Array(parts) = &v else {
        panic!("TIME: {v:?}")
    };
    let num = |v: &Value| -> i64 {
        match v {
            Value::BulkString(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
            other => panic!("TIME: {other:?}"),
        }
    };
    num(&parts[0]) * 1_000_000 + num(&parts[1])
}
