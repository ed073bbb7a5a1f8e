//! Generator (a): random bodies behind a correct trailer, shaped like a lock of some
//! version, or module items, or raw bytes, under the lock's type id or another.

use crate::common::dump::{self, Dump, Width, ENCVER_MASK, OP_EOF, OP_STRING, OP_UINT};
use crate::restore::interesting_values::{interesting_u64, random_bytes};
use crate::restore::some_width;
use rand::rngs::StdRng;
use rand::Rng;

/// One module value item: an opcode and a plausible (or not) value.
fn random_item(rng: &mut StdRng, out: &mut Vec<u8>) {
    let op = match rng.gen_range(0..10) {
        0..=3 => OP_STRING,
        4..=7 => OP_UINT,
        8 => rng.gen_range(0..=6),
        _ => rng.gen(),
    };
    random_item_of(rng, out, op);
}

fn random_item_of(rng: &mut StdRng, out: &mut Vec<u8>, op: u8) {
    out.push(op);
    match op {
        OP_STRING => {
            let len: u64 = match rng.gen_range(0..8) {
                0 => 0,
                1 => 256,
                2 => 257,
                3 => rng.gen_range(1..64),
                4 => rng.gen_range(64..400),
                5 => interesting_u64(rng),
                _ => rng.gen_range(1..40),
            };
            if rng.gen_bool(0.1) {
                // The special encodings: integer-as-string and LZF.
                out.push(0xc0 | rng.gen_range(0..4));
                out.extend(random_bytes(rng, 12));
                return;
            }
            let w = some_width(rng, len);
            out.extend(dump::enc_len_as(len, w));
            let have = if rng.gen_bool(0.85) {
                (len as usize).min(400)
            } else {
                rng.gen_range(0..=(len as usize).min(400))
            };
            out.extend((0..have).map(|_| rng.gen::<u8>()));
        }
        OP_UINT | 1 => {
            let v = interesting_u64(rng);
            let w = some_width(rng, v);
            out.extend(dump::enc_len_as(v, w));
        }
        3 => out.extend_from_slice(&rng.gen::<f32>().to_le_bytes()),
        4 => out.extend_from_slice(&rng.gen::<f64>().to_le_bytes()),
        _ => out.extend(random_bytes(rng, 8)),
    }
}

/// (a) A random body behind a correct trailer.
pub(crate) fn random_body(rng: &mut StdRng, s: &Dump) -> Vec<u8> {
    let id = s.module_id;
    let mut b = Vec::new();
    match rng.gen_range(0..20) {
        // Shaped like a lock of version 1 or 2 (string, then two or three unsigned values,
        // EOF) with random values, under the id of encoding version 3, 2 or 1.
        0..=2 => {
            b.push(7);
            let id = (id & !ENCVER_MASK) | rng.gen_range(1..=3);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            random_item_of(rng, &mut b, OP_STRING);
            for _ in 0..rng.gen_range(2..=3) {
                random_item_of(rng, &mut b, OP_UINT);
            }
            if rng.gen_bool(0.9) {
                b.push(OP_EOF);
            }
        }
        // Shaped like a lock of version 3 (four unsigned values, then a few holds of a
        // string and two unsigned values, EOF) with random values, under the id of
        // encoding version 3 (mostly) or 2.
        3..=4 => {
            b.push(7);
            let id = (id & !ENCVER_MASK) | if rng.gen_bool(0.8) { 3 } else { 2 };
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            for _ in 0..4 {
                random_item_of(rng, &mut b, OP_UINT);
            }
            for _ in 0..rng.gen_range(0..=4) {
                random_item_of(rng, &mut b, OP_STRING);
                random_item_of(rng, &mut b, OP_UINT);
                random_item_of(rng, &mut b, OP_UINT);
            }
            if rng.gen_bool(0.9) {
                b.push(OP_EOF);
            }
        }
        // The lock's own type, then module items in random order and number.
        5..=11 => {
            b.push(7);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            for _ in 0..rng.gen_range(0..8) {
                random_item(rng, &mut b);
            }
            if rng.gen_bool(0.7) {
                b.push(OP_EOF);
            }
            if rng.gen_bool(0.1) {
                b.extend(random_bytes(rng, 16));
            }
        }
        // The lock's own type, then raw bytes.
        12..=14 => {
            b.push(7);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            b.extend(random_bytes(rng, 100));
        }
        // RDB_TYPE_MODULE (v1, no opcodes), with the lock's id.
        15..=16 => {
            b.push(6);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            b.extend(random_bytes(rng, 60));
        }
        // An unknown module id (another encoding version of this type, or random).
        17 => {
            b.push(7);
            let other = if rng.gen_bool(0.5) {
                (id & !ENCVER_MASK) | rng.gen_range(0..1024)
            } else {
                rng.gen()
            };
            b.extend(dump::enc_len_as(other, Width::SixtyFour));
            b.extend(random_bytes(rng, 40));
        }
        // Anything at all.
        _ => b.extend(random_bytes(rng, 80)),
    }
    b
}
