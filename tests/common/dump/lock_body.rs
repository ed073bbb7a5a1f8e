//! A lock's body: its holds in the layout of each encoding version, written with any widths
//! and parsed as `DUMP` writes it.

use super::{
    dec_len, enc_len_as, Width, ENCVER_MASK, OP_EOF, OP_STRING, OP_UINT, RDB_TYPE_MODULE_2,
};

/// One saved hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedHold {
    pub token: Vec<u8>,
    /// Unix ms (signed, saved as its unsigned bits).
    pub deadline: i64,
    pub fence: u64,
}

impl SavedHold {
    pub fn new(token: impl AsRef<[u8]>, deadline: i64, fence: u64) -> SavedHold {
        SavedHold {
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
    V1(SavedHold),
    /// Version 2: one hold and the Unix ms it was saved at.
    V2 { hold: SavedHold, saved_at: i64 },
    /// Version 3: the save time, the mode ([`EXCLUSIVE`], [`SHARED`], or anything), the
    /// key's last fence, the count of holds, and the holds written.
    V3 {
        saved_at: i64,
        mode: u64,
        last_fence: u64,
        count: u64,
        holds: Vec<SavedHold>,
    },
}

impl Layout {
    /// Version 3 as the module writes it: `count` is the number of holds.
    pub fn v3(mode: u64, last_fence: u64, saved_at: i64, holds: Vec<SavedHold>) -> Layout {
        Layout::V3 {
            saved_at,
            mode,
            last_fence,
            count: holds.len() as u64,
            holds,
        }
    }

    /// The holds written.
    pub fn holds(&self) -> &[SavedHold] {
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
        fn hold<'a>(out: &mut Vec<Item<'a>>, h: &'a SavedHold) {
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
            // Version 4 changed only the aux data (the fence epoch): locks keep 3's layout.
            3 | 4 => {
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

    fn hold(&mut self) -> Option<SavedHold> {
        let token = self.string()?;
        let deadline = self.uint() as i64;
        let fence = self.uint();
        Some(SavedHold {
            token,
            deadline,
            fence,
        })
    }
}
