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
    pub fn joined(key: &[u8], token: &[u8]) -> Names {
        let len = key.len() + token.len();
        if len > INLINE {
            return Names::Heap([key, token].concat().into_boxed_slice());
        }
        let mut buf = [0; INLINE];
        buf[..key.len()].copy_from_slice(key);
        buf[key.len()..len].copy_from_slice(token);
        Names::Inline(len as u8, buf)
    }

    /// Bytes on the heap, beyond the lock itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Names::Inline(..) => 0,
            Names::Heap(bytes) => bytes.len(),
        }
    }
}
