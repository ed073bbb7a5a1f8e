//! Small helpers over a connection: commands, `INFO`, loading keys, scripts.

#[allow(unused_imports)]
use crate::*;

// Commands are encoded by hand (cheap for the client). Replies are parsed by `redis` where a
// value is needed (checks, INFO, contended clients) and scanned by `resp::Pipe` in the
// pipelined phases.

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

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("expected a string reply, got {other:?}"),
    }
}

/// A field of an `INFO` text.
pub(crate) fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A numeric field of `INFO section`.
pub(crate) fn info_field(con: &mut Connection, section: &str, name: &str) -> f64 {
    let info = text(&call(con, &["INFO", section]));
    field(&info, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no numeric {name}"))
}

/// The server's counters that a phase reads at the start and the end of its window.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sample {
    /// CPU time so far (user + sys), in seconds.
    pub(crate) cpu: f64,
    /// Bytes written to the replication stream so far (`master_repl_offset`; it stays put
    /// while no replica was ever attached).
    pub(crate) repl: f64,
    /// The AOF's size (`aof_current_size`; 0 without an AOF).
    pub(crate) aof: f64,
}

impl Sample {
    pub(crate) fn take(con: &mut Connection) -> Sample {
        let info = text(&call(con, &["INFO", "cpu", "persistence", "replication"]));
        let num = |name: &str| {
            field(&info, name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        Sample {
            cpu: num("used_cpu_user") + num("used_cpu_sys"),
            repl: num("master_repl_offset"),
            aof: num("aof_current_size"),
        }
    }
}

/// The server's CPU time so far (user + sys), in seconds.
pub(crate) fn server_cpu(con: &mut Connection) -> f64 {
    let info = text(&call(con, &["INFO", "cpu"]));
    let num = |name: &str| {
        field(&info, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    num("used_cpu_user") + num("used_cpu_sys")
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

/// Runs `make(i, buf)` for `i` in `range`, `LOAD_BATCH` items per round trip, each item
/// `per_item` commands; every reply must pass `ok`.
pub(crate) fn load(
    pipe: &mut Pipe,
    range: std::ops::Range<usize>,
    per_item: usize,
    mut make: impl FnMut(usize, &mut Vec<u8>),
    ok: impl Fn(Reply) -> bool,
) {
    let mut buf = Vec::new();
    let mut i = range.start;
    while i < range.end {
        let end = (i + LOAD_BATCH).min(range.end);
        buf.clear();
        for j in i..end {
            make(j, &mut buf);
        }
        pipe.send(&buf);
        for _ in 0..(end - i) * per_item {
            let r = pipe.next();
            assert!(ok(r), "loading locks: unexpected reply {}", r.show());
        }
        i = end;
    }
}

/// A fence or `OK`: what loading held locks replies.
pub(crate) fn held_reply(r: Reply) -> bool {
    r.is_ok() || r.int().is_some()
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
