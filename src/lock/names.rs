//! The key's name and the first hold's token, in one buffer inside the lock when they are
//! short: a key of 20 bytes and a UUID token fit, so a typical lock is one allocation.

/// Up to this many bytes of key and token live in the lock itself.
pub const INLINE: usize = 62;

/// A byte string stored inline when short, on the heap otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl std::ops::Deref for Names {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Names::Inline(len, buf) => &buf[..*len as usize],
            Names::Heap(bytes) => bytes,
        }
    }
}

impl Names {
    /// No names: a value to `fill` in place.
    pub const EMPTY: Names = Names::Inline(0, [0; INLINE]);

    pub fn joined(key: &[u8], token: &[u8]) -> Names {
        let mut names = Names::EMPTY;
        names.fill(key, token);
        names
    }

    /// Writes `key` then `token` into names that are still `EMPTY`, where they are (see
    /// `Lock::new` for why that matters). Only on `EMPTY`: the inline buffer is compared
    /// whole, so it must hold nothing past its length.
    pub fn fill(&mut self, key: &[u8], token: &[u8]) {
        debug_assert!(*self == Names::EMPTY, "fill on names in use");
        let len = key.len() + token.len();
        match self {
            Names::Inline(n, buf) if len <= INLINE => {
                buf[..key.len()].copy_from_slice(key);
                buf[key.len()..len].copy_from_slice(token);
                *n = len as u8;
            }
            _ => *self = Names::Heap([key, token].concat().into_boxed_slice()),
        }
    }

    /// Bytes on the heap, beyond the lock itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Names::Inline(..) => 0,
            Names::Heap(bytes) => bytes.len(),
        }
    }
}
