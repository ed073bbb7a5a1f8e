//! `DUMP` payloads of a lock, decoded (encoding version 3, as described at the top of
//! `src/persistence.rs`): the RDB length, string and LZF readers, the comparison of one
//! key's saved state on two servers, and the test that checks the decoder itself.

use crate::cmd;
use crate::common::*;
use crate::{acquire_shared, unix_ms};
use redis::{Connection, Value};

#[derive(Debug)]
pub(crate) struct DumpedHold {
    pub(crate) token: Vec<u8>,
    pub(crate) deadline_ms: i64,
    pub(crate) fence: i64,
}

/// A lock's `DUMP` payload, decoded (encoding version 3: `src/persistence.rs`).
#[derive(Debug)]
pub(crate) struct Dumped {
    pub(crate) encver: u64,
    saved_at: i64,
    pub(crate) shared: bool,
    pub(crate) last_fence: i64,
    pub(crate) holds: Vec<DumpedHold>,
}

/// A length as the RDB format writes it, from `p[*at..]`.
fn rdb_len(p: &[u8], at: &mut usize) -> u64 {
    let b = p[*at];
    *at += 1;
    match b >> 6 {
        0 => u64::from(b & 0x3f),
        1 => {
            let v = (u64::from(b & 0x3f) << 8) | u64::from(p[*at]);
            *at += 1;
            v
        }
        _ if b == 0x80 => {
            let v = u32::from_be_bytes(p[*at..*at + 4].try_into().unwrap());
            *at += 4;
            u64::from(v)
        }
        _ if b == 0x81 => {
            let v = u64::from_be_bytes(p[*at..*at + 8].try_into().unwrap());
            *at += 8;
            v
        }
        _ => panic!("unexpected RDB length byte {b:#x} at {}", *at - 1),
    }
}

/// A string as `RedisModule_SaveStringBuffer` writes it: raw, as an integer when it looks
/// like one, or compressed.
fn rdb_string(p: &[u8], at: &mut usize) -> Vec<u8> {
    let b = p[*at];
    if b >> 6 == 3 {
        *at += 1;
        let v: i64 = match b & 0x3f {
            0 => {
                *at += 1;
                i64::from(p[*at - 1] as i8)
            }
            1 => {
                *at += 2;
                i64::from(i16::from_le_bytes(p[*at - 2..*at].try_into().unwrap()))
            }
            2 => {
                *at += 4;
                i64::from(i32::from_le_bytes(p[*at - 4..*at].try_into().unwrap()))
            }
            3 => {
                let clen = rdb_len(p, at) as usize;
                let len = rdb_len(p, at) as usize;
                *at += clen;
                return lzf_decompress(&p[*at - clen..*at], len);
            }
            e => panic!("RDB string encoding {e} at {}", *at - 1),
        };
        return v.to_string().into_bytes();
    }
    let n = rdb_len(p, at) as usize;
    *at += n;
    p[*at - n..*at].to_vec()
}

/// LZF, as the RDB format compresses strings longer than 20 bytes (the 256-byte token).
fn lzf_decompress(mut inp: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while let Some((&ctrl, rest)) = inp.split_first() {
        inp = rest;
        if ctrl < 32 {
            let n = usize::from(ctrl) + 1;
            out.extend_from_slice(&inp[..n]);
            inp = &inp[n..];
        } else {
            let mut n = usize::from(ctrl >> 5);
            if n == 7 {
                n += usize::from(inp[0]);
                inp = &inp[1..];
            }
            let back = (usize::from(ctrl & 0x1f) << 8) + usize::from(inp[0]) + 1;
            inp = &inp[1..];
            let from = out.len() - back;
            for i in 0..n + 2 {
                out.push(out[from + i]);
            }
        }
    }
    assert_eq!(out.len(), len, "LZF string length");
    out
}

/// One value a module saved: its opcode (1 signed, 2 unsigned, 5 string) and the value.
enum Item {
    Int(i64),
    Str(Vec<u8>),
}

pub(crate) fn decode_dump(p: &[u8]) -> Dumped {
    assert_eq!(
        p[0], 7,
        "DUMP of a lock is a module value (RDB type 7): {p:?}"
    );
    let mut at = 1;
    let id = rdb_len(p, &mut at);
    let mut items = Vec::new();
    loop {
        match rdb_len(p, &mut at) {
            0 => break,
            1 | 2 => items.push(Item::Int(rdb_len(p, &mut at) as i64)),
            5 => items.push(Item::Str(rdb_string(p, &mut at))),
            op => panic!("unexpected module opcode {op} in {p:?}"),
        }
    }
    assert_eq!(p.len() - at, 10, "after the value: RDB version and CRC");
    let int = |i: usize| match items.get(i) {
        Some(Item::Int(v)) => *v,
        _ => panic!("DUMP item {i}: not an integer in {p:?}"),
    };
    let count = int(3) as usize;
    assert_eq!(items.len(), 4 + 3 * count, "DUMP items: {p:?}");
    let holds = (0..count)
        .map(|h| {
            let base = 4 + 3 * h;
            DumpedHold {
                token: match &items[base] {
                    Item::Str(s) => s.clone(),
                    Item::Int(_) => panic!("hold {h}: token not a string"),
                },
                deadline_ms: int(base + 1),
                fence: int(base + 2),
            }
        })
        .collect();
    Dumped {
        encver: id & 0x3ff,
        saved_at: int(0),
        shared: int(1) == 1,
        last_fence: int(2),
        holds,
    }
}

pub(crate) fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    match cmd!(c, "DUMP", key) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// The same state saved on two servers: mode, last fence, holds in order with the same
/// tokens and fences, and deadlines within 5 ms.
pub(crate) fn compare_dumps(
    m: &mut Connection,
    r: &mut Connection,
    key: &str,
    what: &str,
    f: &mut Findings,
) {
    let (dm, dr) = match (exists(m, key), exists(r, key)) {
        (false, false) => return,
        (true, true) => (decode_dump(&dump(m, key)), decode_dump(&dump(r, key))),
        (a, b) => {
            f.fail(format!("{what}: {key}: exists on master {a}, replica {b}"));
            return;
        }
    };
    let same = dm.shared == dr.shared
        && dm.last_fence == dr.last_fence
        && dm.holds.len() == dr.holds.len()
        && dm.holds.iter().zip(&dr.holds).all(|(a, b)| {
            a.token == b.token && a.fence == b.fence && (a.deadline_ms - b.deadline_ms).abs() <= 5
        });
    f.check(same, || {
        format!("{what}: {key}: saved state differs\n    master  {dm:?}\n    replica {dr:?}")
    });
}

/// A decoded `DUMP` of a key saved now says when: a sanity check of the decoder itself.
#[test]
fn dump_decoder_reads_what_the_module_saves() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = unix_ms();
    let f1 = acquire_shared(&mut c, "k", "a", 10_000, None).unwrap();
    let f2 = acquire_shared(&mut c, "k", "bb", 20_000, None).unwrap();
    let f3 = fence(&mut c, "k", "a").unwrap();
    let d = decode_dump(&dump(&mut c, "k"));
    let t1 = unix_ms();
    assert_eq!(d.encver, 3, "{d:?}");
    assert!(d.shared && d.last_fence == f3, "{d:?}");
    assert!(d.saved_at >= t0 && d.saved_at <= t1 + 1, "{d:?}");
    assert_eq!(d.holds.len(), 2, "{d:?}");
    assert_eq!(
        (d.holds[0].token.as_slice(), d.holds[0].fence),
        (&b"a"[..], f3)
    );
    assert_eq!(
        (d.holds[1].token.as_slice(), d.holds[1].fence),
        (&b"bb"[..], f2)
    );
    assert!(f2 > f1);
    for (h, ttl) in d.holds.iter().zip([10_000, 20_000]) {
        assert!(
            h.deadline_ms >= t0 + ttl && h.deadline_ms <= t1 + ttl + 2,
            "{h:?}"
        );
    }
}
