//! The decoder of `DUMP` payloads (`common::dump::decoded`), checked against what the module
//! saves.

use crate::common::dump::{decode_dump, dump};
use crate::common::*;
use crate::shared::{acquire_shared, unix_ms};

/// A decoded `DUMP` of a key saved now says when: a sanity check of the decoder itself.
#[test]
fn dump_decoder_reads_what_the_module_saves() {
    let s = Server::new();
    let mut c = s.conn();
    let t0 = unix_ms();
    let f1 = acquire_shared(&mut c, "k", "a", 10_000, None).unwrap();
    let f2 = acquire_shared(&mut c, "k", "bb", 20_000, None).unwrap();
    let f3 = fence(&mut c, "k", "a").unwrap();
    let d = decode_dump(&dump(&mut c, "k"));
    let t1 = unix_ms();
    assert_eq!(d.encver, 4, "{d:?}");
    assert!(d.shared && d.last_fence == f3, "{d:?}");
    assert!(d.saved_at >= t0 && d.saved_at <= t1 + 1, "{d:?}");
    assert_eq!(d.holds.len(), 2, "{d:?}");
    assert_eq!(
        (d.holds[0].token.as_slice(), d.holds[0].fence),
        (&b"a"[..], f3)
    );
    assert_eq!(
        (d.holds[1].token.as_slice(), d.holds[1].fence),
        (&b"bb"[..], f2)
    );
    assert!(f2 > f1);
    for (h, ttl) in d.holds.iter().zip([10_000, 20_000]) {
        assert!(
            h.deadline_ms >= t0 + ttl && h.deadline_ms <= t1 + ttl + 2,
            "{h:?}"
        );
    }
}
