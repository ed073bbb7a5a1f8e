//! A panic aborts the server (nothing unwinds across the FFI boundary), so it is first
//! written to the server's log with its location, as RedisJSON does: the log then says where
//! and why, next to the server's own crash report. Commands reply with errors to bad input
//! and never panic on it; this is for the bug that was not foreseen.

use std::ffi::CString;
use std::panic::PanicHookInfo;

use redis_module::raw;

/// Installs the hook, in front of the default one (which still prints to stderr).
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        log_warning(&describe(info));
        default(info);
    }));
}

fn describe(info: &PanicHookInfo) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let location = info.location().map(|l| (l.file(), l.line()));
    line(message, location)
}

/// The log line for a panic with `message` at `location` (file, line).
fn line(message: &str, location: Option<(&str, u32)>) -> String {
    match location {
        Some((file, line)) => format!("redis-lock panicked at {file}:{line}: {message}"),
        None => format!("redis-lock panicked: {message}"),
    }
}

/// Writes `message` to the server log at warning level, from any thread.
fn log_warning(message: &str) {
    // SAFETY: the API table is filled in before the module's OnLoad, before any hook can run,
    // and not written after.
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // SAFETY: a NULL context is allowed (and any thread may log); the message goes as the
    // argument of a constant "%s" format, so a `%` in it is not read as a conversion.
    unsafe {
        log(
            std::ptr::null_mut(),
            c"warning".as_ptr(),
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::line;

    #[test]
    fn the_line_says_where_and_why() {
        assert_eq!(
            line("index out of range", Some(("src/engine/ops.rs", 42))),
            "redis-lock panicked at src/engine/ops.rs:42: index out of range"
        );
        assert_eq!(line("x", None), "redis-lock panicked: x");
    }
}
