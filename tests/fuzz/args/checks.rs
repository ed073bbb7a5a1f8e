//! What the fuzz checks and counts: each reply (an error with a code, or a valid reply,
//! `LOCK.HOLDERS` parsed in full), the locks it has no token for (unchanged, field by field),
//! what it met of the shared options (`Tally`) and the `INFO lock` counters it reads.

use std::time::Instant;

use crate::cmd;
use crate::common::holds::{parse_holder_entries, Holder};
use crate::common::{assert_same_lock, info, parse_info, LockInfo};
use redis::Value;

pub(crate) fn check_reply(args: &[Vec<u8>], r: &Result<Value, String>) {
    let name = String::from_utf8_lossy(&args[0]).to_uppercase();
    let shown: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).chars().take(24).collect())
        .collect();
    match r {
        Err(e) => {
            let code = e.split(' ').next().unwrap_or("");
            let guard = name == "LOCK.GUARD";
            assert!(
                code == "ERR" || code == "WRONGTYPE" || (guard && code == "FENCED"),
                "{shown:?}: error without a proper code: {e:?}"
            );
            // A guarded command may meet a lock key of the fuzz's.
            if code == "WRONGTYPE" && !guard {
                assert_eq!(args[1], b"str", "{shown:?}: WRONGTYPE on a lock key: {e:?}");
            }
        }
        Ok(v) => match name.as_str() {
            "LOCK.ACQUIRE" | "LOCK.FENCE" => assert!(
                matches!(v, Value::Nil) || matches!(v, Value::Int(f) if *f > 0),
                "{shown:?}: {v:?}"
            ),
            "LOCK.RELEASE" | "LOCK.EXTEND" => assert!(
                matches!(v, Value::Int(0) | Value::Int(1)),
                "{shown:?}: {v:?}"
            ),
            "LOCK.INFO" => {
                // `parse_info` checks the six fields and that they agree with each other.
                if let Some(i) = parse_info(v) {
                    assert!(i.fence > 0 && i.waiters >= 0, "{shown:?}: {i:?}");
                    if let Some(h) = &i.holder {
                        assert!(!h.is_empty() && h.len() <= 256, "{shown:?}: {i:?}");
                    }
                }
            }
            "LOCK.HOLDERS" => {
                checked_holders(v).unwrap_or_else(|e| panic!("{shown:?}: {e}: {v:?}"));
            }
            "LOCK.APPLY" => panic!("{shown:?}: LOCK.APPLY accepted from a client: {v:?}"),
            // Whatever the guarded command replies.
            "LOCK.GUARD" => {}
            _ => unreachable!(),
        },
    }
}

/// Parses a `LOCK.HOLDERS` reply ([`parse_holder_entries`]) and checks it: null (no such
/// key) or an array of `[token, fence, ttl, mode]`, each token a bulk string of 1 to 256
/// bytes, each fence positive, each ttl an integer of at least 0, each mode `exclusive` or
/// `shared`; one exclusive hold alone or shared holds only; no token or fence twice.
fn checked_holders(v: &Value) -> Result<Option<Vec<Holder>>, String> {
    let Some(holds) = parse_holder_entries(v)? else {
        return Ok(None);
    };
    for hold in &holds {
        let ok = !hold.token.is_empty()
            && hold.token.len() <= 256
            && hold.fence > 0
            && hold.ttl >= 0
            && (hold.mode == "exclusive" || hold.mode == "shared");
        if !ok {
            return Err(format!("entry {hold:?} out of its domain"));
        }
    }
    if holds.iter().any(|h| h.mode == "exclusive") && holds.len() != 1 {
        return Err("an exclusive hold next to another".into());
    }
    for (i, h) in holds.iter().enumerate() {
        if holds[..i]
            .iter()
            .any(|o| o.token == h.token || o.fence == h.fence)
        {
            return Err(format!("token or fence twice: {h:?}"));
        }
    }
    Ok(Some(holds))
}

/// A lock the fuzz has no token for, as `LOCK.INFO` and `LOCK.HOLDERS` show it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) info: Option<LockInfo>,
    pub(crate) holds: Option<Vec<Holder>>,
    at: Instant,
}

pub(crate) fn look(c: &mut redis::Connection, key: &str) -> Seen {
    let info = info(c, key);
    let v = cmd!(c, "LOCK.HOLDERS", key).unwrap();
    let holds = checked_holders(&v).unwrap_or_else(|e| panic!("LOCK.HOLDERS {key}: {e}: {v:?}"));
    Seen {
        info,
        holds,
        at: Instant::now(),
    }
}

/// The lock at `key` is still `before`: the same holds (tokens, fences, kinds, in order),
/// waiters, mode and last fence, every ttl only counting down.
#[track_caller]
pub(crate) fn assert_unchanged(key: &str, before: &Seen, now: &Seen) {
    let elapsed = now.at.duration_since(before.at);
    assert_same_lock(&before.info, &now.info, elapsed, 200);
    let (Some(b), Some(a)) = (&before.info, &now.info) else {
        return;
    };
    assert_eq!(
        (&a.mode, a.holders),
        (&b.mode, b.holders),
        "{key}: mode or holders changed: {b:?} -> {a:?}"
    );
    let (bh, ah) = (before.holds.as_ref().unwrap(), now.holds.as_ref().unwrap());
    let shape = |hs: &[Holder]| -> Vec<(Vec<u8>, i64, String)> {
        hs.iter()
            .map(|h| (h.token.clone(), h.fence, h.mode.clone()))
            .collect()
    };
    assert_eq!(shape(ah), shape(bh), "{key}: LOCK.HOLDERS changed");
    let el = elapsed.as_millis() as i64;
    for (b, a) in bh.iter().zip(ah) {
        assert!(
            a.ttl <= b.ttl && a.ttl >= b.ttl - el - 200,
            "{key}: ttl of {:?} should only count down: {} -> {} in {el}ms",
            String::from_utf8_lossy(&a.token),
            b.ttl,
            a.ttl
        );
    }
}

/// What the fuzz met of the shared options.
#[derive(Default, Debug)]
pub(crate) struct Tally {
    /// `LOCK.ACQUIRE … SHARED` granted, of those with `LIMIT`.
    pub(crate) shared_granted: u64,
    pub(crate) limit_granted: u64,
    /// `LIMIT` refused: out of range, not an integer.
    pub(crate) limit_range: u64,
    pub(crate) limit_not_integer: u64,
    /// `LOCK.HOLDERS` replies with a shared hold.
    pub(crate) holders_shared: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, args: &[Vec<u8>], r: &Result<Value, String>) {
        let has = |w: &[u8]| args.iter().skip(4).any(|a| a.eq_ignore_ascii_case(w));
        let acquire = args[0].eq_ignore_ascii_case(b"LOCK.ACQUIRE");
        match r {
            Ok(Value::Int(_)) if acquire && has(b"SHARED") => {
                self.shared_granted += 1;
                if has(b"LIMIT") {
                    self.limit_granted += 1;
                }
            }
            Ok(v @ Value::Array(_))
                if args[0].eq_ignore_ascii_case(b"LOCK.HOLDERS")
                    && checked_holders(v)
                        .ok()
                        .flatten()
                        .is_some_and(|hs| hs.iter().any(|h| h.mode == "shared")) =>
            {
                self.holders_shared += 1;
            }
            Err(e) if e.starts_with("ERR limit must be between") => self.limit_range += 1,
            Err(e) if e.starts_with("ERR limit is not an integer") => self.limit_not_integer += 1,
            _ => {}
        }
    }
}

pub(crate) fn info_field(c: &mut redis::Connection, field: &str) -> u64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(field)?
                .strip_prefix(':')?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("INFO lock has no {field}:\n{text}"))
}
