//! `LOCK.INFO` and `LOCK.HOLDERS`, read the same way under RESP2 and RESP3.

use std::time::Duration;

use redis::{RedisResult, Value};

use crate::error::unexpected;

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One holder, alone.
    Exclusive,
    /// One or more shared holders.
    Shared,
    /// Nobody (every lease ended while clients wait, before the hand-over).
    None,
}

/// A lock's state, from `LOCK.INFO` (see docs/commands.md, `LOCK.INFO`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The exclusive holder's token; `None` when held shared or not at all.
    pub holder: Option<String>,
    /// The last fence issued for the key.
    pub fence: u64,
    /// The remaining lease (held shared: the longest); `None` if not held.
    pub ttl: Option<Duration>,
    /// Clients queued.
    pub waiters: u64,
    /// How it is held.
    pub mode: Mode,
    /// How many tokens hold it.
    pub holders: u64,
}

/// One hold, from `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The holder's token.
    pub token: String,
    /// The hold's current fence.
    pub fence: u64,
    /// Its remaining lease.
    pub ttl: Duration,
    /// `Exclusive` or `Shared`.
    pub mode: Mode,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

fn mode(v: &Value) -> Option<Mode> {
    match text(v)?.as_str() {
        "exclusive" => Some(Mode::Exclusive),
        "shared" => Some(Mode::Shared),
        "none" => Some(Mode::None),
        _ => None,
    }
}

fn millis(n: i64) -> Option<Duration> {
    u64::try_from(n).ok().map(Duration::from_millis)
}

/// `LOCK.INFO`'s reply: a map under RESP3, a flat field/value array under RESP2.
pub(crate) fn parse_info(v: Value) -> RedisResult<Option<LockInfo>> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return Ok(None),
        Value::Attribute { data, .. } => return parse_info(*data),
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(unexpected("LOCK.INFO: a map or a flat array", &other)),
    };
    let mut info = LockInfo {
        holder: None,
        fence: 0,
        ttl: None,
        waiters: 0,
        mode: Mode::None,
        holders: 0,
    };
    for (field, value) in &pairs {
        let bad = || unexpected("LOCK.INFO: a field of the documented type", value);
        match text(field).as_deref() {
            Some("holder") => info.holder = text(value),
            Some("fence") => {
                info.fence = int(value).and_then(|n| n.try_into().ok()).ok_or_else(bad)?
            }
            Some("ttl") => info.ttl = millis(int(value).ok_or_else(bad)?),
            Some("waiters") => {
                info.waiters = int(value).and_then(|n| n.try_into().ok()).ok_or_else(bad)?
            }
            Some("mode") => info.mode = mode(value).ok_or_else(bad)?,
            Some("holders") => {
                info.holders = int(value).and_then(|n| n.try_into().ok()).ok_or_else(bad)?
            }
            // Fields a later version may add.
            _ => {}
        }
    }
    Ok(Some(info))
}

/// `LOCK.HOLDERS`' reply: `[token, fence, ttl, mode]` per hold; null (no key) reads as none.
pub(crate) fn parse_holders(v: Value) -> RedisResult<Vec<Holder>> {
    let items = match v {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(items) | Value::Set(items) => items,
        other => return Err(unexpected("LOCK.HOLDERS: an array", &other)),
    };
    items
        .into_iter()
        .map(|entry| {
            let holder = match &entry {
                Value::Array(f) if f.len() == 4 => (|| {
                    Some(Holder {
                        token: text(&f[0])?,
                        fence: int(&f[1])?.try_into().ok()?,
                        ttl: millis(int(&f[2])?)?,
                        mode: mode(&f[3])?,
                    })
                })(),
                _ => None,
            };
            holder.ok_or_else(|| unexpected("LOCK.HOLDERS: [token, fence, ttl, mode]", &entry))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_and_resp3_read_alike() {
        let fields = vec![
            (bulk("holder"), bulk("tok")),
            (bulk("fence"), Value::Int(7)),
            (bulk("ttl"), Value::Int(1500)),
            (bulk("waiters"), Value::Int(2)),
            (bulk("mode"), bulk("exclusive")),
            (bulk("holders"), Value::Int(1)),
        ];
        let flat = fields
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect();
        let a = parse_info(Value::Array(flat)).unwrap().unwrap();
        let b = parse_info(Value::Map(fields)).unwrap().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.holder.as_deref(), Some("tok"));
        assert_eq!(a.ttl, Some(Duration::from_millis(1500)));
        assert_eq!(parse_info(Value::Nil).unwrap(), None);
    }

    #[test]
    fn not_held_has_no_ttl() {
        let v = Value::Array(vec![
            bulk("holder"),
            Value::Nil,
            bulk("ttl"),
            Value::Int(-1),
            bulk("mode"),
            Value::SimpleString("none".into()),
        ]);
        let info = parse_info(v).unwrap().unwrap();
        assert_eq!((info.holder, info.ttl, info.mode), (None, None, Mode::None));
    }
}
