//! `DUMP` payloads of lock keys: reading the module's own and building any encoding version
//! (1, 2 and 3, see the README's persistence details), for the tests that restore them.
//!
//! A `DUMP` payload is the RDB encoding of one value, then the 2-byte RDB version and a
//! CRC-64 (Jones, little-endian) of everything before it. A lock is RDB type 7
//! (`RDB_TYPE_MODULE_2`), the 64-bit module type id (the type's name in the high 54 bits,
//! the encoding version in the low 10), then the values the module saved, each behind an
//! opcode (5: string, 2: unsigned; signed values are saved as their unsigned bits), then the
//! EOF opcode 0. What the module saves (`src/persistence.rs`):
//!
//! - version 1: token, deadline (absolute Unix ms), fence;
//! - version 2: token, deadline (Unix ms), fence, the Unix ms it was saved at;
//! - version 3: the Unix ms it was saved at, the mode (0 exclusive, 1 shared), the key's last
//!   fence, the number of holds, then each hold in grant order as token, deadline (Unix ms),
//!   fence.
//!
//! On `RESTORE` a version-2 or -3 lease is the time it had left when saved (deadline -
//! saved_at); a version-1 deadline is absolute.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::{crc64, run};

pub const RDB_TYPE_MODULE_2: u8 = 7;
pub const OP_EOF: u8 = 0;
pub const OP_UINT: u8 = 2;
pub const OP_STRING: u8 = 5;
/// The low bits of a module type id that hold the encoding version.
pub const ENCVER_MASK: u64 = 0x3ff;
/// The encoding version the module writes.
pub const ENCVER: u64 = 3;
/// The saved modes of version 3.
pub const EXCLUSIVE: u64 = 0;
pub const SHARED: u64 = 1;

// ------------------------------------------------------------------------- RDB lengths

/// The widths an RDB length can be written in; any width that holds the value is valid
/// (Redis writes the shortest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    Six,
    Fourteen,
    ThirtyTwo,
    SixtyFour,
}

impl Width {
    pub const ALL: [Width; 4] = [
        Width::Six,
        Width::Fourteen,
        Width::ThirtyTwo,
        Width::SixtyFour,
    ];

    /// The shortest width that holds `n`.
    pub fn min(n: u64) -> Width {
        if n < 1 << 6 {
            Width::Six
        } else if n < 1 << 14 {
            Width::Fourteen
        } else if n <= u32::MAX as u64 {
            Width::ThirtyTwo
        } else {
            Width::SixtyFour
        }
    }

    /// Every width that holds `n`.
    pub fn holding(n: u64) -> &'static [Width] {
        let from = Width::ALL.iter().position(|w| *w == Width::min(n)).unwrap();
        &Width::ALL[from..]
    }
}

/// `n` as an RDB length of width `w` (truncated if it does not fit).
pub fn enc_len_as(n: u64, w: Width) -> Vec<u8> {
    match w {
        Width::Six => vec![n as u8 & 0x3f],
        Width::Fourteen => vec![0x40 | ((n >> 8) as u8 & 0x3f), n as u8],
        Width::ThirtyTwo => {
            let mut v = vec![0x80];
            v.extend_from_slice(&(n as u32).to_be_bytes());
            v
        }
        Width::SixtyFour => {
            let mut v = vec![0x81];
            v.extend_from_slice(&n.to_be_bytes());
            v
        }
    }
}

/// `n` as an RDB length, in its shortest form.
pub fn enc_len(n: u64) -> Vec<u8> {
    enc_len_as(n, Width::min(n))
}

/// Decodes an RDB length at `at`: (value, bytes used). `None` past the end, and for the
/// special encodings (an integer or LZF-compressed string), whose first byte is 0b11xxxxxx.
pub fn dec_len(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *b.get(at)?;
    match first >> 6 {
        0 => Some(((first & 0x3f) as u64, 1)),
        1 => Some(((((first & 0x3f) as u64) << 8) | *b.get(at + 1)? as u64, 2)),
        _ if first == 0x80 => Some((
            u32::from_be_bytes(b.get(at + 1..at + 5)?.try_into().ok()?) as u64,
            5,
        )),
        _ if first == 0x81 => Some((
            u64::from_be_bytes(b.get(at + 1..at + 9)?.try_into().ok()?),
            9,
        )),
        _ => None,
    }
}

// ----------------------------------------------------------------------------- trailers

/// `body` + the 2-byte RDB version + a correct CRC.
pub fn with_trailer(body: &[u8], rdb_version: [u8; 2]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&rdb_version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// A payload's body and the RDB version of its trailer; panics unless the CRC is correct.
pub fn split(payload: &[u8]) -> (&[u8], [u8; 2]) {
    let n = payload.len();
    assert!(n >= 10, "a DUMP payload of {n} bytes");
    assert_eq!(
        crc64(&payload[..n - 8]),
        u64::from_le_bytes(payload[n - 8..].try_into().unwrap()),
        "the tests' CRC-64 disagrees with the server's"
    );
    (&payload[..n - 10], [payload[n - 10], payload[n - 9]])
}

// -------------------------------------------------------------------------- lock bodies

/// One saved hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub token: Vec<u8>,
    /// Unix ms (signed, saved as its unsigned bits).
    pub deadline: i64,
    pub fence: u64,
}

impl Hold {
    pub fn new(token: impl AsRef<[u8]>, deadline: i64, fence: u64) -> Hold {
        Hold {
            token: token.as_ref().to_vec(),
            deadline,
            fence,
        }
    }
}

/// The values a lock's body holds, in one version's layout. Any layout can be written under
/// any encoding version's id (see [`LockBody`]), and version 3's count need not be the
/// number of holds written, so that tests can write what the module must refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Version 1: one hold, its deadline absolute.
    V1(Hold),
    /// Version 2: one hold and the Unix ms it was saved at.
    V2 { hold: Hold, saved_at: i64 },
    /// Version 3: the save time, the mode ([`EXCLUSIVE`], [`SHARED`], or anything), the
    /// key's last fence, the count of holds, and the holds written.
    V3 {
        saved_at: i64,
        mode: u64,
        last_fence: u64,
        count: u64,
        holds: Vec<Hold>,
    },
}

impl Layout {
    /// Version 3 as the module writes it: `count` is the number of holds.
    pub fn v3(mode: u64, last_fence: u64, saved_at: i64, holds: Vec<Hold>) -> Layout {
        Layout::V3 {
            saved_at,
            mode,
            last_fence,
            count: holds.len() as u64,
            holds,
        }
    }

    /// The holds written.
    pub fn holds(&self) -> &[Hold] {
        match self {
            Layout::V1(h) | Layout::V2 { hold: h, .. } => std::slice::from_ref(h),
            Layout::V3 { holds, .. } => holds,
        }
    }

    /// The save time, which version 1 does not have.
    pub fn saved_at(&self) -> Option<i64> {
        match self {
            Layout::V1(_) => None,
            Layout::V2 { saved_at, .. } | Layout::V3 { saved_at, .. } => Some(*saved_at),
        }
    }

    /// The values in the order they are written.
    pub fn items(&self) -> Vec<Item<'_>> {
        fn hold<'a>(out: &mut Vec<Item<'a>>, h: &'a Hold) {
            out.push(Item::Str(&h.token));
            out.push(Item::Uint(h.deadline as u64));
            out.push(Item::Uint(h.fence));
        }
        let mut out = Vec::new();
        match self {
            Layout::V1(h) => hold(&mut out, h),
            Layout::V2 { hold: h, saved_at } => {
                hold(&mut out, h);
                out.push(Item::Uint(*saved_at as u64));
            }
            Layout::V3 {
                saved_at,
                mode,
                last_fence,
                count,
                holds,
            } => {
                out.extend([*saved_at as u64, *mode, *last_fence, *count].map(Item::Uint));
                for h in holds {
                    hold(&mut out, h);
                }
            }
        }
        out
    }
}

/// One value of a module type's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    Str(&'a [u8]),
    Uint(u64),
}

/// A lock's body: type, module type id (with the encoding version in its low 10 bits), the
/// values of `layout`, EOF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockBody {
    pub module_id: u64,
    pub layout: Layout,
}

impl LockBody {
    pub fn encver(&self) -> u64 {
        self.module_id & ENCVER_MASK
    }

    /// The same values under encoding version `encver`'s id.
    pub fn with_encver(mut self, encver: u64) -> LockBody {
        self.module_id = (self.module_id & !ENCVER_MASK) | (encver & ENCVER_MASK);
        self
    }

    /// The body as the module writes it: every length in its shortest form.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(Width::min)
    }

    /// The body with each length (a string's, or an unsigned value) written in the width
    /// `width` picks for it; the module type id is always 64 bits wide, as Redis writes it.
    pub fn encode_with(&self, mut width: impl FnMut(u64) -> Width) -> Vec<u8> {
        let mut b = vec![RDB_TYPE_MODULE_2];
        b.extend(enc_len_as(self.module_id, Width::SixtyFour));
        for item in self.layout.items() {
            match item {
                Item::Str(s) => {
                    b.push(OP_STRING);
                    b.extend(enc_len_as(s.len() as u64, width(s.len() as u64)));
                    b.extend_from_slice(s);
                }
                Item::Uint(n) => {
                    b.push(OP_UINT);
                    b.extend(enc_len_as(n, width(n)));
                }
            }
        }
        b.push(OP_EOF);
        b
    }

    /// Parses a lock body as `DUMP` writes it, in the layout its encoding version names.
    /// `None` if a token is written in one of the special encodings (an integer, or
    /// LZF-compressed), which this file does not decode; panics on anything else the module
    /// would not write.
    pub fn parse(b: &[u8]) -> Option<LockBody> {
        let mut r = Reader { b, at: 0 };
        assert_eq!(r.byte(), RDB_TYPE_MODULE_2, "RDB_TYPE_MODULE_2 in {b:02x?}");
        let (module_id, n) = dec_len(b, 1).expect("the module type id");
        assert_eq!(n, 9, "a 64-bit module type id in {b:02x?}");
        r.at = 10;
        let layout = match module_id & ENCVER_MASK {
            1 => Layout::V1(r.hold()?),
            2 => {
                let hold = r.hold()?;
                Layout::V2 {
                    hold,
                    saved_at: r.uint() as i64,
                }
            }
            3 => {
                let saved_at = r.uint() as i64;
                let mode = r.uint();
                let last_fence = r.uint();
                let count = r.uint();
                let mut holds = Vec::new();
                for _ in 0..count {
                    holds.push(r.hold()?);
                }
                Layout::V3 {
                    saved_at,
                    mode,
                    last_fence,
                    count,
                    holds,
                }
            }
            v => panic!("a lock of encoding version {v}: {b:02x?}"),
        };
        assert_eq!(r.byte(), OP_EOF, "EOF after the values in {b:02x?}");
        assert_eq!(r.at, b.len(), "trailing bytes in a lock body {b:02x?}");
        Some(LockBody { module_id, layout })
    }
}

/// Reads the values of a body the module wrote.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let v = *self
            .b
            .get(self.at)
            .unwrap_or_else(|| panic!("a lock body ends at {}: {:02x?}", self.at, self.b));
        self.at += 1;
        v
    }

    fn uint(&mut self) -> u64 {
        assert_eq!(self.byte(), OP_UINT, "an unsigned value in {:02x?}", self.b);
        let (v, n) = dec_len(self.b, self.at).expect("an unsigned value's length");
        self.at += n;
        v
    }

    /// A token; `None` if it is written in a special encoding.
    fn string(&mut self) -> Option<Vec<u8>> {
        assert_eq!(self.byte(), OP_STRING, "a string in {:02x?}", self.b);
        let (len, n) = dec_len(self.b, self.at)?;
        self.at += n;
        let s = self.b[self.at..self.at + len as usize].to_vec();
        self.at += len as usize;
        Some(s)
    }

    fn hold(&mut self) -> Option<Hold> {
        let token = self.string()?;
        let deadline = self.uint() as i64;
        let fence = self.uint();
        Some(Hold {
            token,
            deadline,
            fence,
        })
    }
}

// ------------------------------------------------------------------------------- DUMPs

/// `DUMP key`; panics unless it is a payload.
pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    let c = {
        let mut c = redis::cmd("DUMP");
        c.arg(key);
        c
    };
    match run(&c, con) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// A lock's `DUMP` taken apart (the CRC checked).
#[derive(Clone, Debug)]
pub struct Dump {
    /// Everything before the trailer.
    pub body: Vec<u8>,
    pub rdb_version: [u8; 2],
    /// The module type id, with the encoding version in its low 10 bits.
    pub module_id: u64,
    /// The values; `None` when a token is written in a special encoding.
    pub lock: Option<LockBody>,
}

impl Dump {
    pub fn read(payload: &[u8]) -> Dump {
        let (body, rdb_version) = split(payload);
        let lock = LockBody::parse(body);
        Dump {
            body: body.to_vec(),
            rdb_version,
            module_id: dec_len(body, 1).expect("module type id").0,
            lock,
        }
    }

    pub fn encver(&self) -> u64 {
        self.module_id & ENCVER_MASK
    }

    /// The values of a lock whose tokens are plain strings.
    pub fn lock(&self) -> &LockBody {
        self.lock
            .as_ref()
            .unwrap_or_else(|| panic!("a token in a special encoding: {:02x?}", self.body))
    }

    /// The values of a version-3 dump: (saved_at, mode, last fence, holds).
    pub fn v3(&self) -> (i64, u64, u64, &[Hold]) {
        match &self.lock().layout {
            Layout::V3 {
                saved_at,
                mode,
                last_fence,
                holds,
                ..
            } => (*saved_at, *mode, *last_fence, holds),
            other => panic!("not version 3: {other:?}"),
        }
    }
}

/// How this server writes a lock in a `DUMP` payload: the module type id without its
/// encoding version, and the RDB version of the trailer. Builds payloads of any version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub type_id: u64,
    pub rdb_version: [u8; 2],
}

impl Format {
    /// Reads the format off a lock's `DUMP`, which must be of the version the module writes.
    pub fn from_dump(payload: &[u8]) -> Format {
        let d = Dump::read(payload);
        assert_eq!(
            d.body[..2],
            [RDB_TYPE_MODULE_2, 0x81],
            "a module value with a 64-bit type id"
        );
        assert_eq!(
            d.encver(),
            ENCVER,
            "the module dumps locks in encoding version {ENCVER}"
        );
        Format {
            type_id: d.module_id & !ENCVER_MASK,
            rdb_version: d.rdb_version,
        }
    }

    /// Reads the format off the `DUMP` of a sample lock (acquired, retried for up to 5 s
    /// while fences are not issued yet, then released).
    pub fn of(con: &mut Connection) -> Format {
        let key = "dump-format-sample";
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let mut c = redis::cmd("LOCK.ACQUIRE");
            c.arg(key).arg("t").arg(60_000);
            match run(&c, con) {
                Ok(Value::Int(_)) => break,
                Err(e) if e.starts_with("TRYAGAIN") && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => panic!("LOCK.ACQUIRE {key}: {other:?}"),
            }
        }
        let f = Format::from_dump(&dump(con, key));
        let mut c = redis::cmd("LOCK.RELEASE");
        c.arg(key).arg("t");
        assert_eq!(run(&c, con), Ok(Value::Int(1)), "LOCK.RELEASE {key}");
        f
    }

    /// A body of `layout` under encoding version `encver`'s id.
    pub fn body(&self, encver: u64, layout: Layout) -> LockBody {
        LockBody {
            module_id: self.type_id | (encver & ENCVER_MASK),
            layout,
        }
    }

    /// `body` as the module writes it, with its trailer.
    pub fn payload(&self, body: &LockBody) -> Vec<u8> {
        with_trailer(&body.encode(), self.rdb_version)
    }

    /// A lock of encoding version 1 (no save time: the deadline is absolute).
    pub fn v1(&self, token: &str, deadline: i64, fence: u64) -> Vec<u8> {
        self.payload(&self.body(1, Layout::V1(Hold::new(token, deadline, fence))))
    }

    /// A lock of encoding version 2, as a server whose clock read `saved_at` dumped it.
    pub fn v2(&self, token: &str, deadline: i64, fence: u64, saved_at: i64) -> Vec<u8> {
        let hold = Hold::new(token, deadline, fence);
        self.payload(&self.body(2, Layout::V2 { hold, saved_at }))
    }

    /// A lock of encoding version 3 with `holds` in grant order, as a server whose clock
    /// read `saved_at` dumped it.
    pub fn v3(&self, mode: u64, last_fence: u64, saved_at: i64, holds: Vec<Hold>) -> Vec<u8> {
        self.payload(&self.body(3, Layout::v3(mode, last_fence, saved_at, holds)))
    }
}

// ------------------------------------------------------------------------ LOCK.HOLDERS

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
