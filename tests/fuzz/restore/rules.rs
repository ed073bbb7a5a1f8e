//! The rules: what the module must do with a well-formed lock body of each encoding
//! version (refuse it, or load these holds, fences and leases), which the checks hold every
//! known-outcome payload to.

use crate::common::dump::{Layout, LockBody, SavedHold, EXCLUSIVE, SHARED};
use crate::restore::{MAX_LEFT_MS, MAX_TOKEN, TOP};

/// What the module must do with a well-formed lock body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    Refused,
    Loaded(Loaded),
}

/// A lock as it must load: its mode, the key's last fence, and its holds in grant order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Loaded {
    /// `exclusive` or `shared`, as `LOCK.INFO` and `LOCK.HOLDERS` name it.
    pub(crate) mode: &'static str,
    pub(crate) last_fence: u64,
    pub(crate) holds: Vec<Want>,
}

/// One hold as it must load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Want {
    pub(crate) token: Vec<u8>,
    pub(crate) fence: u64,
    pub(crate) lease: Lease,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Exactly this many ms left from the moment of the `RESTORE` (versions 2 and 3).
    Left(i64),
    /// Until this absolute Unix ms (version 1).
    Until(i64),
}

impl Expect {
    /// Each hold's lease, if it loads.
    pub(crate) fn leases(&self) -> Option<Vec<Lease>> {
        match self {
            Expect::Refused => None,
            Expect::Loaded(l) => Some(l.holds.iter().map(|h| h.lease).collect()),
        }
    }
}

/// What the module does with lock body `l`, read at Unix ms `now`. Only a version's own
/// layout loads. Every hold needs a token of 1 to 256 bytes, a fence of 1 to 2^53-1-2^32,
/// and a lease no longer than the longest `lock.max-ttl` (ten years) could give: for versions
/// 2 and 3 the lease is `deadline - saved_at` (refused if that overflows), for version 1 it
/// runs to the absolute `deadline`. Version 3 also needs a mode of 0 or 1, a count of holds
/// that is the number written, at least 1 and exactly 1 when exclusive, a last fence of 1 to
/// 2^53-1-2^32, no hold's fence above it, and no two holds with one token or one fence (no
/// command can make them). (Version 1's ten-year bound depends on the
/// server's clock: the generators keep deadlines a day away from it.)
fn distinct(holds: &[SavedHold]) -> bool {
    let tokens: std::collections::HashSet<&[u8]> = holds.iter().map(|h| &h.token[..]).collect();
    let fences: std::collections::HashSet<u64> = holds.iter().map(|h| h.fence).collect();
    tokens.len() == holds.len() && fences.len() == holds.len()
}

pub(crate) fn rules(l: &LockBody, now: i64) -> Expect {
    let fence_ok = |f: u64| (1..=TOP).contains(&f);
    let hold_ok = |h: &SavedHold| (1..=MAX_TOKEN).contains(&h.token.len()) && fence_ok(h.fence);
    let left = |h: &SavedHold, saved_at: i64| {
        h.deadline
            .checked_sub(saved_at)
            .filter(|left| *left <= MAX_LEFT_MS)
            .map(Lease::Left)
    };
    let want = |h: &SavedHold, lease: Lease| Want {
        token: h.token.clone(),
        fence: h.fence,
        lease,
    };
    let loaded = match (l.encver(), &l.layout) {
        (1, Layout::V1(h)) if hold_ok(h) && h.deadline <= now + MAX_LEFT_MS => Some(Loaded {
            mode: "exclusive",
            last_fence: h.fence,
            holds: vec![want(h, Lease::Until(h.deadline))],
        }),
        (2, Layout::V2 { hold, saved_at }) if hold_ok(hold) => {
            left(hold, *saved_at).map(|lease| Loaded {
                mode: "exclusive",
                last_fence: hold.fence,
                holds: vec![want(hold, lease)],
            })
        }
        (
            // Version 4 changed only the aux data: a lock has version 3's layout.
            3 | 4,
            Layout::V3 {
                saved_at,
                mode,
                last_fence,
                count,
                holds,
            },
        ) if (*mode == SHARED || (*mode == EXCLUSIVE && *count == 1))
            && *count >= 1
            && *count == holds.len() as u64
            && fence_ok(*last_fence)
            && holds.iter().all(|h| hold_ok(h) && h.fence <= *last_fence)
            && distinct(holds) =>
        {
            holds
                .iter()
                .map(|h| left(h, *saved_at).map(|lease| want(h, lease)))
                .collect::<Option<Vec<_>>>()
                .map(|holds| Loaded {
                    mode: if *mode == SHARED {
                        "shared"
                    } else {
                        "exclusive"
                    },
                    last_fence: *last_fence,
                    holds,
                })
        }
        _ => None,
    };
    loaded.map_or(Expect::Refused, Expect::Loaded)
}
