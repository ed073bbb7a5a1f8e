//! Helpers for the tests that report what they found rather than stop at the first failure
//! (the keyspace matrix, the model): a lock shown with its holder as text, a list of
//! findings, and the raw commands they run.

use redis::{Connection, Value};

use super::*;

/// `LOCK.INFO`, shown with the holder as text in failure messages.
pub struct Lock(pub LockInfo);

impl std::ops::Deref for Lock {
    type Target = LockInfo;
    fn deref(&self) -> &LockInfo {
        &self.0
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holder = match &self.0.holder {
            Some(h) => String::from_utf8_lossy(h).into_owned(),
            None => "(none)".to_string(),
        };
        write!(
            f,
            "holder={holder} fence={} ttl={} waiters={}",
            self.0.fence, self.0.ttl, self.0.waiters
        )
    }
}

/// `LOCK.INFO key`; `None` if there is no lock.
pub fn lock_info(con: &mut Connection, key: &str) -> Option<Lock> {
    info(con, key).map(Lock)
}

/// Failures that do not stop a test, so that one run reports all of them.
#[derive(Default)]
pub struct Findings(pub Vec<String>);

impl Findings {
    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }

    pub fn fail(&mut self, msg: String) {
        self.0.push(msg);
    }

    /// Panics with every finding, one a line.
    #[track_caller]
    pub fn done(self, what: &str) {
        if !self.0.is_empty() {
            panic!(
                "{what}: {} problem(s):\n  - {}",
                self.0.len(),
                self.0.join("\n  - ")
            );
        }
    }
}

/// The message of a caught panic.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// A command as byte strings, from its words.
pub fn args(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// Runs a command given as byte strings; panics on an error reply.
pub fn must(con: &mut Connection, cmd: &[Vec<u8>]) -> Value {
    run_raw(con, cmd).unwrap_or_else(|e| panic!("{}: {e}", show_cmd(cmd)))
}

/// A command as text, for messages (long arguments shown by their length).
pub fn show_cmd(cmd: &[Vec<u8>]) -> String {
    cmd.iter()
        .map(|a| {
            if a.len() > 40 {
                format!("<{} bytes>", a.len())
            } else {
                String::from_utf8_lossy(a).into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `MULTI`, the commands, `EXEC`; panics on an error anywhere, also inside `EXEC`.
pub fn exec(con: &mut Connection, cmds: &[Vec<Vec<u8>>]) -> Vec<Value> {
    must(con, &args(&["MULTI"]));
    for c in cmds {
        match run_raw(con, c) {
            Ok(Value::SimpleString(s)) if s == "QUEUED" => {}
            other => panic!("MULTI: {} was not queued: {other:?}", show_cmd(c)),
        }
    }
    match must(con, &args(&["EXEC"])) {
        Value::Array(items) => {
            for (c, v) in cmds.iter().zip(&items) {
                if let Some(e) = server_error_text(v) {
                    panic!("inside EXEC, {} failed: {e}", show_cmd(c));
                }
            }
            items
        }
        other => panic!("EXEC: {other:?}"),
    }
}

/// What a waiter got by `deadline`, for messages.
/// What a waiter got (`None`: nothing), for messages.
pub fn got(r: &Option<Reply>) -> String {
    match r {
        None => "no reply".to_string(),
        Some(r) => format!("{r:?}"),
    }
}

/// Runs `f` (which returns its findings), turning a panic into one more finding, so that a
/// test that runs several cases can report each of them.
pub fn findings_of(f: impl FnOnce() -> Vec<String>) -> Vec<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| vec![format!("stopped: {}", panic_text(&*p))])
}
