//! Small helpers over a connection: commands, pipelines, `INFO`, loading keys, scripts.

#[allow(unused_imports)]
use crate::*;

// Wire helpers: commands are encoded by hand (cheap for the client), replies parsed by `redis`.

pub(crate) fn push_cmd(buf: &mut Vec<u8>, args: &[&str]) {
    write!(buf, "*{}\r\n", args.len()).unwrap();
    for a in args {
        write!(buf, "${}\r\n{a}\r\n", a.len()).unwrap();
    }
}

/// One command; a server error fails the run.
pub(crate) fn call(con: &mut Connection, args: &[&str]) -> Value {
    let mut buf = Vec::new();
    push_cmd(&mut buf, args);
    match con.req_packed_command(&buf) {
        Ok(Value::ServerError(e)) => panic!("{args:?}: {e:?}"),
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// One command whose reply may be an error (returned as `Value::ServerError`).
pub(crate) fn reply(con: &mut Connection, args: &[&str]) -> Value {
    let mut buf = Vec::new();
    push_cmd(&mut buf, args);
    con.req_packed_command(&buf)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

pub(crate) fn pipeline(con: &mut Connection, buf: &[u8], count: usize) -> Vec<Value> {
    con.req_packed_commands(buf, 0, count)
        .unwrap_or_else(|e| panic!("pipeline of {count}: {e}"))
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("expected a string reply, got {other:?}"),
    }
}

/// A numeric field of `INFO section`.
pub(crate) fn info_field(con: &mut Connection, section: &str, field: &str) -> f64 {
    let info = text(&call(con, &["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no numeric {field}"))
}

/// The server's CPU time so far (user + sys), in seconds.
pub(crate) fn server_cpu(con: &mut Connection) -> f64 {
    let info = text(&call(con, &["INFO", "cpu"]));
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_user") + field("used_cpu_sys")
}

pub(crate) fn flushall(con: &mut Connection) {
    call(con, &["FLUSHALL"]);
}

/// `used_memory` once it has settled (incremental rehashing done).
pub(crate) fn used_memory(con: &mut Connection) -> f64 {
    let mut last = info_field(con, "memory", "used_memory");
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(200));
        let now = info_field(con, "memory", "used_memory");
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Runs `make(i, buf)` for `i` in `range`, `LOAD_BATCH` commands per round trip; every reply
/// must pass `ok`.
pub(crate) fn load(
    con: &mut Connection,
    range: std::ops::Range<usize>,
    per_item: usize,
    mut make: impl FnMut(usize, &mut Vec<u8>),
    ok: impl Fn(&Value) -> bool,
) {
    let mut buf = Vec::new();
    let mut i = range.start;
    while i < range.end {
        let end = (i + LOAD_BATCH).min(range.end);
        buf.clear();
        for j in i..end {
            make(j, &mut buf);
        }
        let replies = pipeline(con, &buf, (end - i) * per_item);
        if let Some(bad) = replies.iter().find(|v| !ok(v)) {
            panic!("loading locks: unexpected reply {bad:?}");
        }
        i = end;
    }
}

pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).unwrap()
}

pub(crate) fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

pub(crate) fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

/// The SHA1s of the baseline scripts, loaded once.
pub(crate) struct Scripts {
    pub(crate) release: String,
    pub(crate) fenced_acquire: String,
    pub(crate) release_publish: String,
    pub(crate) guarded_set: String,
}

impl Scripts {
    pub(crate) fn load(con: &mut Connection) -> Scripts {
        let mut load = |src: &str| text(&call(con, &["SCRIPT", "LOAD", src]));
        Scripts {
            release: load(LUA_RELEASE),
            fenced_acquire: load(LUA_FENCED_ACQUIRE),
            release_publish: load(LUA_RELEASE_PUBLISH),
            guarded_set: load(LUA_GUARDED_SET),
        }
    }
}
