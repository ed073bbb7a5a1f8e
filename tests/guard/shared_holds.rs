//! `LOCK.GUARD` on a shared key: refused, with any fence, and a fence that guarded while the
//! hold was exclusive no longer does once it is downgraded.

use crate::cmd;
use crate::common::holds::{acquire_with, exclusive, shared, stat};
use crate::common::{exists, Server};
use redis::Value;

const TTL: u64 = 60_000;

#[test]
fn lock_guard_refuses_a_shared_key() {
    let server = Server::new();
    let mut c = server.conn();
    let fa = shared(&mut c, "k", "a", TTL);
    let fb = shared(&mut c, "k", "b", TTL);
    let (runs, refusals) = (
        stat(&mut c, "lock_guarded_runs"),
        stat(&mut c, "lock_guarded_refusals"),
    );
    let held_shared = Err("FENCED the lock is held shared".to_string());
    for f in [fa, fb, fb + 1] {
        assert_eq!(
            cmd!(&mut c, "LOCK.GUARD", "k", f, "SET", "data", "v"),
            held_shared,
            "fence {f}"
        );
    }
    assert!(!exists(&mut c, "data"), "nothing ran");
    assert_eq!(stat(&mut c, "lock_guarded_runs"), runs);
    assert_eq!(stat(&mut c, "lock_guarded_refusals"), refusals + 3);

    // The same fence guards while exclusive, and not once downgraded.
    let fx = exclusive(&mut c, "x", "x", TTL);
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", "x", fx, "SET", "data", "1"),
        Ok(Value::Okay)
    );
    assert_eq!(
        acquire_with(&mut c, "x", "x", TTL, &["SHARED"]),
        Ok(Value::Int(fx))
    );
    assert_eq!(
        cmd!(&mut c, "LOCK.GUARD", "x", fx, "SET", "data", "2"),
        held_shared
    );
    assert_eq!(
        cmd!(&mut c, "GET", "data"),
        Ok(Value::BulkString(b"1".to_vec()))
    );
}
