//! Corrupted `RESTORE` payloads: a damaged or cut payload is refused and changes nothing, and
//! module data with a valid checksum but unknown version, cut or altered bytes or garbage is
//! refused or loads as a sane lock, leaving nothing behind.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::dump::dump;
use crate::common::*;
use crate::{assert_survived, cmd};
use rand::{Rng, SeedableRng};
use redis::Value;

#[test]
fn corrupted_restore_payload_is_refused() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 30_000).unwrap();
    let before = info(&mut c, "k").unwrap();
    let t0 = Instant::now();
    let payload = dump(&mut c, "k");
    let mut flipped = payload.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x5a;
    assert_err_starts(&cmd!(&mut c, "RESTORE", "x", 0, flipped.as_slice()), "ERR");
    assert_err_starts(
        &cmd!(&mut c, "RESTORE", "x", 0, &payload[..payload.len() - 1]),
        "ERR",
    );
    assert_err_starts(
        &cmd!(&mut c, "RESTORE", "k", 0, flipped.as_slice(), "REPLACE"),
        "ERR",
    );
    assert!(!exists(&mut c, "x"));
    assert_eq!(cmd!(&mut c, "PING"), Ok(Value::SimpleString("PONG".into())));
    assert_survived(&before, info(&mut c, "k"), t0.elapsed());
}

#[test]
fn restore_payload_with_valid_checksum_but_bad_module_data() {
    let mut s = Server::new();
    let mut c = s.conn();
    let t_dump = Instant::now();
    acquire(&mut c, "src", "a-token-of-some-length", 1_000).unwrap();
    let payload = dump(&mut c, "src");
    assert_eq!(release(&mut c, "src", "a-token-of-some-length"), 1);
    let n = payload.len();
    assert!(n > 20, "payload {payload:?}");
    // Self-check of the CRC implementation against the server's own.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let crc = u64::from_le_bytes(payload[n - 8..].try_into().unwrap());
    assert_eq!(
        crc64(&payload[..n - 8]),
        crc,
        "crc64 implementation disagrees with DUMP"
    );
    let body = &payload[..n - 10];
    let version: [u8; 2] = payload[n - 10..n - 8].try_into().unwrap();
    // RDB_TYPE_MODULE_2, then the 64-bit module id (RDB_64BITLEN marker + 8 bytes BE).
    assert_eq!(
        body[0], 7,
        "DUMP of a lock should be a module value (RDB type 7)"
    );
    assert_eq!(body[1], 0x81, "module id length marker");
    let id = u64::from_be_bytes(body[2..10].try_into().unwrap());
    // The unmodified body with a recomputed CRC restores fine (the harness is right).
    assert_eq!(
        cmd!(
            &mut c,
            "RESTORE",
            "target",
            0,
            dump::with_trailer(body, version).as_slice()
        ),
        Ok(Value::Okay)
    );
    cmd!(&mut c, "DEL", "target").unwrap();

    let try_restore = |c: &mut redis::Connection, b: &[u8], what: &str| -> bool {
        let r = cmd!(
            c,
            "RESTORE",
            "target",
            0,
            dump::with_trailer(b, version).as_slice()
        );
        let ok = match &r {
            Ok(Value::Okay) => true,
            Err(e) => {
                assert!(e.starts_with("ERR"), "{what}: error without code: {e:?}");
                false
            }
            Ok(v) => panic!("{what}: RESTORE replied {v:?}"),
        };
        assert_eq!(
            cmd!(c, "PING"),
            Ok(Value::SimpleString("PONG".into())),
            "{what}: server not answering"
        );
        if ok {
            // Whatever was accepted must be a sane lock.
            if let Some(i) = info(c, "target") {
                if let Some(h) = &i.holder {
                    assert!(!h.is_empty() && h.len() <= 256, "{what}: token {h:?}");
                }
                assert!(i.fence > 0, "{what}: fence {}", i.fence);
            }
            cmd!(c, "DEL", "target").unwrap();
        }
        ok
    };

    // Unknown encoding versions are refused.
    for encver in [(id & 0x3ff) + 1, 1023] {
        let mut b = body.to_vec();
        b[2..10].copy_from_slice(&((id & !0x3ff) | encver).to_be_bytes());
        assert!(
            !try_restore(&mut c, &b, &format!("encver {encver}")),
            "RESTORE accepted encoding version {encver}"
        );
    }
    // Truncated module data: an error or a sane lock. (Not always an error: RESTORE reads
    // the object from the whole payload, so the 2-byte version and the CRC after a cut are
    // read as module data, and a cut before the last value can parse as a complete lock.)
    for len in 10..body.len() {
        try_restore(&mut c, &body[..len], &format!("truncated to {len}"));
    }
    // Every byte of the module data altered in a few ways: error or a sane lock.
    for i in 10..body.len() {
        for x in [0x00, 0xff, body[i] ^ 0x01, body[i] ^ 0x80, 0x81, 0xc3] {
            if x == body[i] {
                continue;
            }
            let mut b = body.to_vec();
            b[i] = x;
            try_restore(&mut c, &b, &format!("byte {i} := {x:#x}"));
        }
    }
    // Random garbage after the module id.
    let seed = 0x6a6b_2024_u64;
    println!("garbage seed {seed:#x}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for round in 0..300 {
        let mut b = body[..10].to_vec();
        let len = rng.gen_range(0..80);
        b.extend((0..len).map(|_| rng.gen::<u8>()));
        if rng.gen_bool(0.5) {
            b.push(0); // module EOF opcode
        }
        try_restore(&mut c, &b, &format!("garbage round {round}"));
    }
    s.assert_alive();
    // Failed loads must not leave anything behind that touches a later lock of that name:
    // hold "target" past the deadline of the dumped lease.
    assert!(acquire(&mut c, "target", "later", 60_000).is_some());
    sleep(Duration::from_millis(1_600).saturating_sub(t_dump.elapsed()));
    sleep(Duration::from_millis(300));
    let i = info(&mut c, "target").expect("later lock removed by a stale entry");
    assert_eq!(i.holder.as_deref(), Some(&b"later"[..]));
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    s.assert_alive();
}
