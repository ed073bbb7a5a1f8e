//! RDB lengths: the widths a length can be written in, and encoding and decoding them.

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
