//! `DUMP` payloads of lock keys: reading the module's own and building any encoding version (1, 2
//! and 3, see docs/operations.md, *Persistence and replication details*), for the tests that
//! restore them.
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
//!
//! Files: `lengths` (RDB lengths in each width), `lock_body` (a lock's body in each version's
//! layout, written and parsed), `dumps` (`DUMP` taken apart, and payloads of any version built
//! in this server's format) and `lock_holders` (the `LOCK.HOLDERS` reply); here the constants
//! and the payload trailer.
#![allow(dead_code)]

mod decoded;
mod dumps;
mod lengths;
mod lock_body;
mod lock_holders;

// Re-exported so that `common::dump::…` names every item, as when this was one file; a test
// target that uses nothing of one of these files would otherwise warn.
#[allow(unused_imports)]
pub use decoded::*;
#[allow(unused_imports)]
pub use dumps::*;
#[allow(unused_imports)]
pub use lengths::*;
/// The name [`SavedHold`] had: a hold as a `DUMP` payload saves it.
#[allow(unused_imports)]
pub use lock_body::SavedHold as Hold;
#[allow(unused_imports)]
pub use lock_body::*;
#[allow(unused_imports)]
pub use lock_holders::*;

use super::crc64;

pub const RDB_TYPE_MODULE_2: u8 = 7;
pub const OP_EOF: u8 = 0;
pub const OP_UINT: u8 = 2;
pub const OP_STRING: u8 = 5;
/// The low bits of a module type id that hold the encoding version.
pub const ENCVER_MASK: u64 = 0x3ff;
/// The encoding version the module writes.
pub const ENCVER: u64 = 4;
/// The saved modes of version 3.
pub const EXCLUSIVE: u64 = 0;
pub const SHARED: u64 = 1;

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
