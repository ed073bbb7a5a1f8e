//! Generator (b): a real lock's DUMP, mutated. Field edits of a well-formed lock (values,
//! encoding versions, layouts) whose outcome the rules know, and byte-wise damage whose
//! outcome is only bounded (refused, or a sane lock).

use crate::common::dump::{self, Dump, Layout, LockBody, SavedHold, EXCLUSIVE, SHARED};
use crate::restore::interesting_values::{
    interesting_count, interesting_fence, interesting_left, interesting_mode, interesting_token,
    interesting_u64, interesting_v1_deadline, random_bytes,
};
use crate::restore::rules::{rules, Expect};
use crate::restore::{now_ms, some_width, MAX_LEFT_MS, TOP};
use rand::rngs::StdRng;
use rand::Rng;

/// The layout of encoding version `v` (1, 2 or 3) with `l`'s holds (version 1 and 2 keep
/// the first), its save time (now if it has none), and a mode that fits the holds.
fn layout_of_version(rng: &mut StdRng, l: &Layout, v: u64) -> Layout {
    let now = now_ms();
    let holds = l.holds().to_vec();
    let first = holds
        .first()
        .cloned()
        .unwrap_or_else(|| SavedHold::new("t", now + 60_000, 1));
    let saved_at = l.saved_at().unwrap_or(now);
    match v {
        1 => Layout::V1(first),
        2 => Layout::V2 {
            hold: first,
            saved_at,
        },
        _ => {
            let holds = if holds.is_empty() { vec![first] } else { holds };
            let mode = if holds.len() > 1 || rng.gen() {
                SHARED
            } else {
                EXCLUSIVE
            };
            let last = holds.iter().map(|h| h.fence).max().unwrap();
            Layout::v3(mode, last, saved_at, holds)
        }
    }
}

/// Makes every token of `l` distinct (the known-outcome generators write each token once;
/// a token twice has its own test, `a_token_holds_a_lock_once`).
fn distinct_tokens(l: &mut LockBody) {
    if let Layout::V3 { holds, .. } = &mut l.layout {
        for n in 1..holds.len() {
            if holds[..n].iter().any(|h| h.token == holds[n].token) {
                holds[n].token = format!("distinct-{n}").into_bytes();
            }
        }
    }
}

/// The field edits of [`edit`], by number.
const EDITS: u32 = 20;
/// The edits that are about version 3's holds: mode, count, last fence, hold lists,
/// exclusive with several holds, leases beyond ten years, a hold's fence.
const V3_EDITS: [u32; 9] = [2, 9, 10, 11, 12, 13, 14, 15, 19];

/// SavedHold `i` of `l` (the one of versions 1 and 2).
fn hold_at(l: &mut LockBody, i: usize) -> Option<&mut SavedHold> {
    match &mut l.layout {
        Layout::V1(h) | Layout::V2 { hold: h, .. } => Some(h),
        Layout::V3 { holds, .. } => holds.get_mut(i),
    }
}

/// Edit `kind` of a lock body's fields (its values, its encoding version, its layout).
fn edit(rng: &mut StdRng, l: &mut LockBody, kind: u32) {
    let n = l.layout.holds().len();
    let i = rng.gen_range(0..n.max(1));
    let saved_at = l.layout.saved_at();
    match kind {
        0 => {
            if let Some(h) = hold_at(l, i) {
                h.token = interesting_token(rng);
            }
        }
        1 => {
            if let Some(h) = hold_at(l, i) {
                h.deadline = interesting_u64(rng) as i64;
            }
        }
        // A hold's fence; mostly the key's last fence stays above it.
        2 => {
            let f = interesting_fence(rng);
            let keep_last = rng.gen_bool(0.7);
            if let Some(h) = hold_at(l, i) {
                h.fence = f;
            }
            if let Layout::V3 { last_fence, .. } = &mut l.layout {
                if keep_last {
                    *last_fence = (*last_fence).max(f);
                }
            }
        }
        3 => match &mut l.layout {
            Layout::V2 { saved_at, .. } | Layout::V3 { saved_at, .. } => {
                *saved_at = interesting_u64(rng) as i64
            }
            Layout::V1(_) => {}
        },
        // Leases of some length, saved at some time (an hour away, say).
        4 => {
            let Some(old) = saved_at else { return };
            let at = if rng.gen_bool(0.5) {
                interesting_u64(rng) as i64
            } else {
                old
            };
            match &mut l.layout {
                Layout::V2 { saved_at, hold } => {
                    *saved_at = at;
                    hold.deadline = at.wrapping_add(interesting_left(rng));
                }
                Layout::V3 {
                    saved_at, holds, ..
                } => {
                    *saved_at = at;
                    for h in holds {
                        h.deadline = at.wrapping_add(interesting_left(rng));
                    }
                }
                Layout::V1(_) => {}
            }
        }
        // deadline - saved_at overflows.
        5 => {
            let (d, at) =
                [(i64::MAX, -1), (i64::MIN, 1), (i64::MAX, i64::MIN)][rng.gen_range(0..3)];
            match &mut l.layout {
                Layout::V2 { saved_at, .. } | Layout::V3 { saved_at, .. } => *saved_at = at,
                Layout::V1(_) => return,
            }
            if let Some(h) = hold_at(l, i) {
                h.deadline = d;
            }
        }
        // Version 1: three fields, an absolute deadline.
        6 => {
            let mut v1 = layout_of_version(rng, &l.layout, 1);
            if let Layout::V1(h) = &mut v1 {
                h.deadline = interesting_v1_deadline(rng) as i64;
            }
            *l = l.clone().with_encver(1);
            l.layout = v1;
        }
        // A version's id with another version's layout.
        7 => {
            let have = l.encver().clamp(1, 3);
            let other = [1, 2, 3]
                .into_iter()
                .filter(|v| *v != have)
                .collect::<Vec<_>>();
            let v = other[rng.gen_range(0..2)];
            l.layout = layout_of_version(rng, &l.layout, v);
        }
        // An encoding version this module never wrote, with any layout.
        8 => {
            let v = [0, 5, 6, 1023, rng.gen_range(5..1024)][rng.gen_range(0..5)];
            let layout = rng.gen_range(1..=3);
            l.layout = layout_of_version(rng, &l.layout, layout);
            *l = l.clone().with_encver(v);
        }
        9 => {
            if let Layout::V3 { mode, .. } = &mut l.layout {
                *mode = interesting_mode(rng);
            }
        }
        10 => {
            if let Layout::V3 { count, holds, .. } = &mut l.layout {
                *count = interesting_count(rng, holds.len() as u64);
            }
        }
        // The key's last fence: anything, or below a hold's.
        11 => {
            if let Layout::V3 {
                last_fence, holds, ..
            } = &mut l.layout
            {
                *last_fence = match holds.get(i) {
                    Some(h) if rng.gen() => h.fence.saturating_sub(rng.gen_range(1..3)),
                    _ => interesting_fence(rng),
                };
            }
        }
        // A list of holds cut short (its count kept), or emptied.
        12 => {
            if let Layout::V3 { holds, .. } = &mut l.layout {
                let keep = if rng.gen() {
                    0
                } else {
                    holds.len().saturating_sub(1)
                };
                holds.truncate(keep);
            }
        }
        // One more hold, of some lease, under the last fence; mostly counted.
        13 => {
            if let Layout::V3 {
                saved_at,
                last_fence,
                count,
                holds,
                ..
            } = &mut l.layout
            {
                let fence = if (1..=TOP).contains(last_fence) {
                    rng.gen_range(1..=*last_fence)
                } else {
                    interesting_fence(rng)
                };
                let token = format!("more-{}", holds.len()).into_bytes();
                let deadline = saved_at.wrapping_add(interesting_left(rng));
                holds.insert(
                    rng.gen_range(0..=holds.len()),
                    SavedHold {
                        token,
                        deadline,
                        fence,
                    },
                );
                if rng.gen_bool(0.8) {
                    *count = holds.len() as u64;
                }
            }
        }
        // Exclusive, with two holds or more.
        14 => {
            if let Layout::V3 {
                mode,
                count,
                holds,
                saved_at,
                last_fence,
            } = &mut l.layout
            {
                *mode = EXCLUSIVE;
                while holds.len() < 2 {
                    let n = holds.len();
                    holds.push(SavedHold::new(
                        format!("x{n}"),
                        saved_at.wrapping_add(60_000),
                        *last_fence,
                    ));
                }
                *count = holds.len() as u64;
            }
        }
        // A lease beyond ten years (or just at it).
        15 => {
            let extra = [0, 1, 1_000, 86_400_000, i64::MAX / 2][rng.gen_range(0..5)];
            if let Some(at) = saved_at {
                if let Some(h) = hold_at(l, i) {
                    h.deadline = at.saturating_add(MAX_LEFT_MS).saturating_add(extra);
                }
            }
        }
        16 => {
            l.layout = layout_of_version(rng, &l.layout, 2);
            *l = l.clone().with_encver(2);
        }
        17 => {
            l.layout = layout_of_version(rng, &l.layout, 3);
            *l = l.clone().with_encver(3);
        }
        // Shared becomes exclusive (refused with several holds) and back.
        18 => {
            if let Layout::V3 { mode, .. } = &mut l.layout {
                if *mode <= 1 {
                    *mode = 1 - *mode;
                }
            }
        }
        // A hold's fence above the key's last fence.
        19 => {
            if let Layout::V3 {
                last_fence, holds, ..
            } = &mut l.layout
            {
                if let Some(h) = holds.get_mut(i) {
                    h.fence = last_fence.saturating_add(rng.gen_range(1..1_000));
                }
            }
        }
        _ => {}
    }
}

/// (b) A real lock's DUMP, mutated: field edits (values, encoding versions, layouts),
/// bit flips, byte sets, truncations, insertions, deletions. Returns the body and, for pure
/// field edits, what the rules say the module does with it. With `v3`, the field edits are
/// mostly those of version 3's holds.
pub(crate) fn mutated_body(rng: &mut StdRng, s: &Dump, v3: bool) -> (Vec<u8>, Option<Expect>) {
    let edits = if v3 { 0.6 } else { 0.4 };
    if let Some(mut l) = s.lock.clone().filter(|_| rng.gen_bool(edits)) {
        // A well-formed lock with edited fields: the outcome is known.
        for _ in 0..rng.gen_range(1..=2) {
            let kind = if v3 && rng.gen_bool(0.7) {
                V3_EDITS[rng.gen_range(0..V3_EDITS.len())]
            } else {
                rng.gen_range(0..EDITS)
            };
            edit(rng, &mut l, kind);
        }
        distinct_tokens(&mut l);
        let body = l.encode_with(|n| some_width(rng, n));
        return (body, Some(rules(&l, now_ms())));
    }
    let mut b = s.body.clone();
    for _ in 0..rng.gen_range(1..=3) {
        if b.is_empty() {
            break;
        }
        let i = rng.gen_range(0..b.len());
        match rng.gen_range(0..7) {
            0 => b[i] ^= 1 << rng.gen_range(0..8),
            1 => {
                b[i] = [0x00, 0x01, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xc0, 0xc3, 0xff]
                    [rng.gen_range(0..10)]
            }
            2 => b.truncate(i),
            3 => {
                let extra = random_bytes(rng, 12);
                b.splice(i..i, extra);
            }
            4 => {
                let end = rng.gen_range(i..=b.len().min(i + 12));
                b.drain(i..end);
            }
            5 if b.len() > 11 => {
                // A length field: the first value's, written as some other value.
                let v = interesting_u64(rng) % 1024;
                let (_, n) = dump::dec_len(&b, 11).unwrap_or((0, 1));
                let w = some_width(rng, v);
                b.splice(11..(11 + n).min(b.len()), dump::enc_len_as(v, w));
            }
            _ => {
                // Duplicate a slice.
                let end = rng.gen_range(i..=b.len().min(i + 12));
                let dup = b[i..end].to_vec();
                b.splice(end..end, dup);
            }
        }
    }
    (b, None)
}
