//! `DUMP` payloads of a lock as the module writes them now, decoded in full (encoding version
//! 3, as described at the top of `src/persistence.rs`): the RDB string and LZF readers, and the
//! comparison of one key's saved state on two servers. Where [`super::Dump::read`] gives up on
//! a token in a special encoding (an integer, or LZF-compressed), this reads it.
//! (`tests/persistence/shared/dump_decoder.rs` checks this decoder itself.)

use redis::Connection;

use super::{dec_len, dump};
use crate::common::{exists, Findings};

#[derive(Debug)]
pub struct DumpedHold {
    pub token: Vec<u8>,
    pub deadline_ms: i64,
    pub fence: i64,
}

/// A lock's `DUMP` payload, decoded (encoding version 3: `src/persistence.rs`).
#[derive(Debug)]
pub struct Dumped {
    pub encver: u64,
    pub saved_at: i64,
    pub shared: bool,
    pub last_fence: i64,
    pub holds: Vec<DumpedHold>,
}

/// A length as the RDB format writes it, from `p[*at..]` ([`super::dec_len`]).
fn rdb_len(p: &[u8], at: &mut usize) -> u64 {
    let (v, n) = dec_len(p, *at)
        .unwrap_or_else(|| panic!("unexpected RDB length byte {:#x} at {}", p[*at], *at));
    *at += n;
    v
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

pub fn decode_dump(p: &[u8]) -> Dumped {
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

/// The same state saved on two servers: mode, last fence, holds in order with the same
/// tokens and fences, and deadlines within 5 ms.
pub fn compare_dumps(
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
