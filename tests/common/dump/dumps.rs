//! `DUMP` payloads of a server: a lock's `DUMP` taken apart, and the format this server writes
//! them in, which builds payloads of any encoding version.

use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::{
    dec_len, split, with_trailer, Layout, LockBody, SavedHold, ENCVER, ENCVER_MASK,
    RDB_TYPE_MODULE_2,
};
use crate::common::run;

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
    pub fn v3(&self) -> (i64, u64, u64, &[SavedHold]) {
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
        self.payload(&self.body(1, Layout::V1(SavedHold::new(token, deadline, fence))))
    }

    /// A lock of encoding version 2, as a server whose clock read `saved_at` dumped it.
    pub fn v2(&self, token: &str, deadline: i64, fence: u64, saved_at: i64) -> Vec<u8> {
        let hold = SavedHold::new(token, deadline, fence);
        self.payload(&self.body(2, Layout::V2 { hold, saved_at }))
    }

    /// A lock of encoding version 3 with `holds` in grant order, as a server whose clock
    /// read `saved_at` dumped it.
    pub fn v3(&self, mode: u64, last_fence: u64, saved_at: i64, holds: Vec<SavedHold>) -> Vec<u8> {
        self.payload(&self.body(3, Layout::v3(mode, last_fence, saved_at, holds)))
    }
}
