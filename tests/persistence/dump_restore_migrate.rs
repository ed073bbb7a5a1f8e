//! A lock moved as a payload: `DUMP`/`RESTORE` into a second server, `MIGRATE`, and the
//! restore of an older dump, which neither reissues fences nor holds longer than it had left.

use std::time::{Duration, Instant};

use crate::common::dump::dump;
use crate::common::*;
use crate::{assert_survived, cmd};
use redis::Value;

#[test]
fn dump_restore_into_second_server() {
    let a = Server::new();
    let b = Server::new();
    let mut ca = a.conn();
    let mut cb = b.conn();
    acquire(&mut ca, "k", "tok", 30_000).unwrap();
    let fa = fence(&mut ca, "k", "tok").unwrap();
    let payload = dump(&mut ca, "k");
    let before = info(&mut ca, "k").unwrap();
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut cb, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_survived(&before, info(&mut cb, "k"), t0.elapsed());
    // RESTORE without REPLACE onto an existing key is refused.
    assert_err_starts(
        &cmd!(&mut cb, "RESTORE", "k", 0, payload.as_slice()),
        "BUSYKEY",
    );
    let fb = fence(&mut cb, "k", "tok").unwrap();
    assert!(fb > fa, "fence on the second server {fb} <= {fa}");
    let fresh = acquire(&mut cb, "fresh", "x", 1_000).unwrap();
    assert!(fresh > fb);
    // The restored lease still ends on time on the second server.
    assert_eq!(extend(&mut cb, "k", "tok", 200), 1);
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut cb, "k")));
}

#[test]
fn migrate_to_another_server() {
    let a = Server::new();
    let b = Server::new();
    let mut ca = a.conn();
    let mut cb = b.conn();
    acquire(&mut ca, "k", "tok", 30_000).unwrap();
    let fa = fence(&mut ca, "k", "tok").unwrap();
    let before = info(&mut ca, "k").unwrap();
    let t0 = Instant::now();
    let r = cmd!(&mut ca, "MIGRATE", "127.0.0.1", b.port, "k", 0, 5_000);
    assert_eq!(r, Ok(Value::Okay));
    assert!(!exists(&mut ca, "k"));
    assert_survived(&before, info(&mut cb, "k"), t0.elapsed());
    assert!(fence(&mut cb, "k", "tok").unwrap() > fa);
}

#[test]
fn restore_of_an_older_dump_does_not_reissue_fences() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "k", "tok", 30_000).unwrap();
    let payload = dump(&mut c, "k");
    let mut max = 0;
    for _ in 0..3 {
        max = fence(&mut c, "k", "tok").unwrap();
    }
    assert_eq!(release(&mut c, "k", "tok"), 1);
    assert_eq!(
        cmd!(&mut c, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    assert_eq!(
        info(&mut c, "k").unwrap().holder.as_deref(),
        Some(&b"tok"[..])
    );
    let f = fence(&mut c, "k", "tok").unwrap();
    assert!(
        f > max,
        "fence {f} after restoring an older dump, but {max} was issued"
    );
    // Same with REPLACE over a newer lock.
    let payload2 = dump(&mut c, "k");
    let newer = fence(&mut c, "k", "tok").unwrap();
    let r = cmd!(&mut c, "RESTORE", "k", 0, payload2.as_slice(), "REPLACE");
    assert_eq!(r, Ok(Value::Okay));
    let f2 = fence(&mut c, "k", "tok").unwrap();
    assert!(
        f2 > newer,
        "fence {f2} after RESTORE REPLACE, but {newer} was issued"
    );
}

/// `RESTORE` gives a lock the time it had left when it was dumped (encoding version 2), as
/// `MIGRATE` carries a key's remaining TTL: an old dump of a lease with 300 ms left holds the
/// key again for at most those 300 ms, then the lease ends on its own and the fences go on
/// above it. (Before version 2 the dumped deadline was absolute, and a dump whose lease had
/// since ended restored as ended.)
#[test]
fn restore_of_an_old_dump_holds_only_the_time_it_had_left() {
    let s = Server::new();
    let mut c = s.conn();
    let f = acquire(&mut c, "k", "tok", 300).unwrap();
    let payload = dump(&mut c, "k");
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut c, "k")));
    let t0 = Instant::now();
    let r = cmd!(&mut c, "RESTORE", "k", 0, payload.as_slice());
    assert_eq!(r, Ok(Value::Okay));
    if let Some(i) = info(&mut c, "k") {
        assert_eq!(i.holder.as_deref(), Some(&b"tok"[..]));
        assert!(
            i.ttl <= 302,
            "restored with {} ms, dumped with 300 at most",
            i.ttl
        );
    }
    assert!(
        wait_until(Duration::from_secs(3), || !exists(&mut c, "k")),
        "restored lock is never removed"
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(1_300),
        "a restored lease with 300 ms left ended after {took:?}"
    );
    let n = acquire(&mut c, "k", "other", 1_000).expect("key must be free");
    assert!(n > f);
}
