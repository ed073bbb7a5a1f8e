//! How a lock's changes reach replicas and the AOF: `LOCK.APPLY` (syntax in `args::apply`)
//! with the absolute Unix-millisecond deadline, `LOCK.RELEASE` for a shared hold's end, or
//! `DEL key`, built with as few copies as
//! the module API allows; and the module-class keyspace events clients can subscribe to.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use redis_module::{raw, Context, RedisString};

use crate::lock::Mode;

/// The holder's token as `replicate_state` propagates it: the client's own argument where
/// the command has one (Redis takes a reference to it instead of copying), else the bytes
/// the lock stores.
#[derive(Clone, Copy)]
pub enum TokenArg<'a> {
    Arg(&'a RedisString),
    Bytes(&'a [u8]),
}

impl TokenArg<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            TokenArg::Arg(s) => s.as_slice(),
            TokenArg::Bytes(b) => b,
        }
    }
}

/// Propagates `LOCK.APPLY` to replicas and the AOF: one
/// hold, which replaces every hold of the key if exclusive, and joins (or renews) the shared
/// holds if shared.
///
/// `RedisModule_Replicate` is the most expensive call on the acquire path (it looks the
/// command up by name and builds a fresh argument vector), so the arguments are passed in
/// the forms it copies least: strings Redis already holds by reference ("s"), and the two
/// numbers formatted here on the stack ("b", one allocation each instead of the two "l"
/// costs). Measured in `make bench`'s profile mode.
pub fn replicate_state(
    ctx: &Context,
    key: &RedisString,
    token: TokenArg,
    deadline: i64,
    fence: u64,
    mode: Mode,
) {
    let mut d = Decimal::new();
    let mut f = Decimal::new();
    let deadline = d.format(deadline.unsigned_abs(), deadline < 0);
    let fence = f.format(fence, false);
    let name = c"LOCK.APPLY".as_ptr();
    // The trailing "c" of a format reads `SHARED`, which an exclusive hold leaves unread.
    let shared = mode == Mode::Shared;
    let (with_arg, with_bytes) = if shared {
        (c"ssbbc", c"sbbbc")
    } else {
        (c"ssbb", c"sbbb")
    };
    // SAFETY: each format matches the arguments that follow it: "s" a live RedisModuleString,
    // "b" a pointer and a length, "c" a NUL-terminated string (read only when the format has
    // it). Redis copies or references them before returning.
    unsafe {
        let replicate = raw::RedisModule_Replicate.unwrap();
        match token {
            TokenArg::Arg(token) => replicate(
                ctx.ctx,
                name,
                with_arg.as_ptr(),
                key.inner,
                token.inner,
                deadline.as_ptr().cast::<c_char>(),
                deadline.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                c"SHARED".as_ptr(),
            ),
            TokenArg::Bytes(token) => replicate(
                ctx.ctx,
                name,
                with_bytes.as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                deadline.as_ptr().cast::<c_char>(),
                deadline.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                c"SHARED".as_ptr(),
            ),
        };
    }
}

/// A number in decimal, written into a stack buffer.
struct Decimal {
    buf: [u8; 21],
}

impl Decimal {
    fn new() -> Self {
        Decimal { buf: [0; 21] }
    }

    fn format(&mut self, mut n: u64, negative: bool) -> &[u8] {
        let mut at = self.buf.len();
        loop {
            at -= 1;
            self.buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if negative {
            at -= 1;
            self.buf[at] = b'-';
        }
        &self.buf[at..]
    }
}

/// Propagates `LOCK.HIGHWATER fence saved_ms`, with `EPOCH epoch` once this server's epoch
/// is above 0 (an older module, which knows no epoch, reads the mark alone).
pub fn replicate_highwater(ctx: &Context, fence: u64, saved_ms: i64, epoch: u64) {
    let (mut f, mut t, mut e) = (Decimal::new(), Decimal::new(), Decimal::new());
    let fence = f.format(fence, false);
    let saved = t.format(saved_ms.unsigned_abs(), saved_ms < 0);
    let epoch = e.format(epoch, false);
    let name = c"LOCK.HIGHWATER".as_ptr();
    // SAFETY: each format matches its pointer-and-length pairs ("b"); Redis copies them.
    unsafe {
        if epoch == b"0" {
            raw::RedisModule_Replicate.unwrap()(
                ctx.ctx,
                name,
                c"bb".as_ptr(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                saved.as_ptr().cast::<c_char>(),
                saved.len(),
            );
        } else {
            raw::RedisModule_Replicate.unwrap()(
                ctx.ctx,
                name,
                c"bbcb".as_ptr(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                saved.as_ptr().cast::<c_char>(),
                saved.len(),
                c"EPOCH".as_ptr(),
                epoch.as_ptr().cast::<c_char>(),
                epoch.len(),
            );
        }
    }
}

/// Propagates `LOCK.RELEASE key token`: the end of one shared hold (a release, a lease
/// end, a withdrawn grant), which a replica or an AOF load applies without judging it.
pub fn replicate_release(ctx: &Context, key: &RedisString, token: &[u8]) {
    // SAFETY: the format "sb" matches the string and the pointer-and-length pair.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"LOCK.RELEASE".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
        );
    }
}

/// Propagates `DEL key`.
pub fn replicate_del(ctx: &Context, key: &RedisString) {
    // SAFETY: the format "s" matches the one RedisModuleString argument.
    unsafe {
        raw::RedisModule_Replicate.unwrap()(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
    }
}

/// A keyspace event of the module class. The crate's wrapper allocates a C string for the
/// event name on every call; these names are static.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: ctx.ctx and key.inner are live; `event` is NUL-terminated and outlives the
    // call (Redis copies what it publishes).
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
            ctx.ctx,
            raw::NotifyEvent::MODULE.bits() as c_int,
            event.as_ptr(),
            key.inner,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn decimal_formats_like_to_string() {
        for n in [0u64, 7, 10, 999, 1_796_011_764_123, u64::MAX] {
            assert_eq!(Decimal::new().format(n, false), n.to_string().as_bytes());
        }
        assert_eq!(Decimal::new().format(42, true), b"-42");
        let min = i64::MIN;
        assert_eq!(
            Decimal::new().format(min.unsigned_abs(), true),
            min.to_string().as_bytes()
        );
    }
}
