//! Keys moved alone to another server, by `DUMP`/`RESTORE` and by `MIGRATE`: each hold
//! arrives with the lease it had left, its fence and its place, and the other server's
//! fences go on above that key's.

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::dump::dump;
use crate::common::holds::holders;
use crate::common::*;
use crate::shared::snapshots::{compare_moved, snap};
use crate::shared::travelling_keys::{fences_go_on, populate, Went, KEYS};
use crate::shared::LATE;
use redis::Value;

/// `DUMP`/`RESTORE` to another server carries each hold with the lease it had left, its
/// fence, its place in the order and the key's mode and last fence; so does `MIGRATE`; the
/// other server's fences go on above them, and a restored shared lease ends there on its own.
#[test]
fn dump_restore_and_migrate_carry_every_hold() {
    let a = Server::new();
    let b = Server::new();
    let p = populate(&a);
    let mut ca = a.conn();
    let mut cb = b.conn();
    let before = snap(&mut ca, &KEYS);
    let mut in_transit = Duration::ZERO;
    for k in KEYS {
        if exists(&mut ca, k) {
            let t = Instant::now();
            let payload = dump(&mut ca, k);
            assert_eq!(
                cmd!(&mut cb, "RESTORE", k, 0, payload.as_slice()),
                Ok(Value::Okay),
                "RESTORE {k}"
            );
            in_transit = in_transit.max(t.elapsed());
        }
    }
    let after = snap(&mut cb, &KEYS);
    let mut f = Findings::default();
    compare_moved(&before, &after, in_transit, "DUMP/RESTORE", &mut f);
    fences_go_on(&b, &p, Went::Moved, "DUMP/RESTORE", &mut f);

    // A restored shared hold's lease ends on the other server on its own; the others stay.
    let mut cb = b.conn();
    assert_eq!(extend(&mut cb, "rw", "s3", 300), 1);
    let t0 = Instant::now();
    let ended = wait_until(Duration::from_secs(3), || {
        holders(&mut cb, "rw").is_some_and(|hs| hs.iter().all(|h| h.token != "s3"))
    });
    f.check(
        ended && t0.elapsed() < Duration::from_millis(300) + LATE,
        || {
            format!(
                "restored s3: lease of 300 ms ended {ended} after {:?}",
                t0.elapsed()
            )
        },
    );
    let left: Vec<String> = holders(&mut cb, "rw")
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.token)
        .collect();
    f.check(left == ["s1", "s2", "s5"], || {
        format!("rw on the other server after s3's lease end: {left:?}")
    });

    // MIGRATE to a third server: the same.
    let m = Server::new();
    let mut ca = a.conn();
    let before = snap(&mut ca, &["rw", "dg"]);
    let mut in_transit = Duration::ZERO;
    for k in ["rw", "dg"] {
        let t = Instant::now();
        assert_eq!(
            cmd!(&mut ca, "MIGRATE", "127.0.0.1", m.port, k, 0, 5_000),
            Ok(Value::Okay),
            "MIGRATE {k}"
        );
        in_transit = in_transit.max(t.elapsed());
    }
    let mut cm = m.conn();
    let after = snap(&mut cm, &["rw", "dg"]);
    compare_moved(&before, &after, in_transit, "MIGRATE", &mut f);
    f.check(!exists(&mut ca, "rw") && !exists(&mut ca, "dg"), || {
        "MIGRATE left the keys on the source".into()
    });
    let n = fence(&mut cm, "rw", "s1");
    f.check(n.is_some_and(|n| n > p.max_of("rw")), || {
        format!(
            "MIGRATE: LOCK.FENCE rw s1 on the target {n:?}, max before {}",
            p.max_of("rw")
        )
    });
    f.done("DUMP/RESTORE and MIGRATE");
}
