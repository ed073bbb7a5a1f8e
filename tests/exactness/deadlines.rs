//! Deadlines, bracketed: where a lock's deadline lies on the test's monotonic clock, narrowed
//! from `LOCK.INFO` samples, and whether a copy's deadline is the original's; the moved,
//! replicated and reloaded lease tests all compare deadlines this way.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::common::*;

/// The origin of the microsecond timeline deadlines are placed on.
pub(crate) fn base() -> Instant {
    static B: OnceLock<Instant> = OnceLock::new();
    *B.get_or_init(|| Instant::now() - Duration::from_secs(3600))
}

/// `at` in microseconds on the timeline of [`base`].
pub(crate) fn us(at: Instant) -> i64 {
    at.duration_since(base()).as_micros() as i64
}

/// Where a lock's deadline lies on the test's monotonic clock, in µs since [`base`]. A
/// `LOCK.INFO` sent at `s` and answered at `r` with ttl `T` (ms, rounded up) puts the
/// deadline in `(s + T - 1 ms, r + T]`; several samples narrow it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) lo: i64,
    pub(crate) hi: i64,
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{:.3}, {:.3}] ms",
            self.lo as f64 / 1e3,
            self.hi as f64 / 1e3
        )
    }
}

/// The deadline of the lock at `key` as held by `holder`, from `samples` `LOCK.INFO`s.
pub(crate) fn deadline(
    c: &mut Connection,
    key: &str,
    holder: &str,
    samples: usize,
) -> Result<Span, String> {
    let mut span = Span {
        lo: i64::MIN,
        hi: i64::MAX,
    };
    for _ in 0..samples {
        let s = Instant::now();
        let i = info(c, key);
        let r = Instant::now();
        let i = i.ok_or_else(|| format!("{key}: no lock (LOCK.INFO null)"))?;
        if i.holder.as_deref() != Some(holder.as_bytes()) {
            return Err(format!("{key}: {:?}, expected holder {holder}", Lock(i)));
        }
        span.lo = span.lo.max(us(s) + i.ttl * 1000 - 1000);
        span.hi = span.hi.min(us(r) + i.ttl * 1000);
    }
    Ok(span)
}

/// Slack for the two processes' wall-clock offsets, sampled at different instants.
pub(crate) const TOL_US: i64 = 500;

/// `copy` must hold the deadline of `orig`: never shorter, and longer only by the rounding
/// up to a millisecond of the propagated or saved deadline.
pub(crate) fn same_deadline(what: &str, orig: Span, copy: Span) -> Option<String> {
    if copy.hi < orig.lo - TOL_US {
        return Some(format!(
            "{what}: deadline at least {:.3} ms SHORTER than the original's (original {orig}, \
             here {copy})",
            (orig.lo - copy.hi) as f64 / 1e3
        ));
    }
    if copy.lo > orig.hi + 1000 + TOL_US {
        return Some(format!(
            "{what}: deadline at least {:.3} ms longer than the original's (original {orig}, \
             here {copy})",
            (copy.lo - orig.hi) as f64 / 1e3
        ));
    }
    None
}
