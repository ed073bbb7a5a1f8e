//! Hash slots as the cluster computes them (CRC16, hash tags included) and one key name per
//! slot: what the tests and [`crate::router::Router`] address the slots with.

pub(crate) const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM), the cluster's key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash slot of a key, hash tags included.
pub(crate) fn key_slot(key: &[u8]) -> usize {
    let mut k = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                k = &key[open + 1..open + 1 + len];
            }
        }
    }
    crc16(k) as usize % SLOTS
}

/// One key name for every slot: `lock:<n>` for the smallest n that hashes there.
pub(crate) fn key_per_slot() -> Vec<String> {
    let mut keys = vec![String::new(); SLOTS];
    let mut missing = SLOTS;
    let mut n = 0u64;
    while missing > 0 {
        let k = format!("lock:{n}");
        let s = key_slot(k.as_bytes());
        if keys[s].is_empty() {
            keys[s] = k;
            missing -= 1;
        }
        n += 1;
    }
    keys
}
