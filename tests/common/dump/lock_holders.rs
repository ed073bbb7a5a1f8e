//! The `LOCK.HOLDERS` reply, parsed.

use redis::{Connection, Value};

use crate::common::run;

/// One entry of `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    /// `exclusive` or `shared`.
    pub mode: String,
}

/// Parses a `LOCK.HOLDERS` reply: `None` for null; panics unless every entry is
/// `[token, fence, ttl, mode]`.
pub fn parse_holders(v: &Value) -> Option<Vec<Holder>> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        other => panic!("LOCK.HOLDERS: expected a string, got {other:?}"),
    };
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("LOCK.HOLDERS: expected an integer, got {other:?}"),
    };
    let items = match v {
        Value::Nil => return None,
        Value::Array(items) => items,
        other => panic!("LOCK.HOLDERS: unexpected reply {other:?}"),
    };
    Some(
        items
            .iter()
            .map(|e| match e {
                Value::Array(f) if f.len() == 4 => Holder {
                    token: text(&f[0]),
                    fence: int(&f[1]),
                    ttl: int(&f[2]),
                    mode: String::from_utf8_lossy(&text(&f[3])).into_owned(),
                },
                other => panic!("LOCK.HOLDERS entry: {other:?}"),
            })
            .collect(),
    )
}

/// `LOCK.HOLDERS key`, parsed; panics on an error reply.
pub fn holders(con: &mut Connection, key: &str) -> Option<Vec<Holder>> {
    let mut c = redis::cmd("LOCK.HOLDERS");
    c.arg(key);
    let v = run(&c, con).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}"));
    parse_holders(&v)
}
