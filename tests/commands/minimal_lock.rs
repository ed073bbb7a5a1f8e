//! The bench's module floor (`tests/support/minimal_lock.c`, docs/performance.md) is a lock:
//! a comparison with something that locks nothing would flatter the module floor. Its
//! acquire takes a free key and no other, replies a 16-digit fence that grows, and leaves
//! the key's TTL as the lease; its release removes the key only for the holder's token; and
//! it refuses bad arguments and keys of other types.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::support_lib::build_support_lib;
use crate::common::*;
use redis::{Connection, Value};

fn minimal_lock_server() -> Server {
    static SO: OnceLock<std::path::PathBuf> = OnceLock::new();
    let so: &Path =
        SO.get_or_init(|| build_support_lib("minimal_lock", &[], "the module-floor test"));
    Server::start(Opts::new().extra(&["--loadmodule", so.to_str().unwrap()]))
}

fn min_acquire(con: &mut Connection, key: &str, token: &str, ttl: &str) -> Result<Value, String> {
    run(
        redis::cmd("MINLOCK.ACQUIRE").arg(key).arg(token).arg(ttl),
        con,
    )
}

fn min_release(con: &mut Connection, key: &str, token: &str) -> i64 {
    match run(redis::cmd("MINLOCK.RELEASE").arg(key).arg(token), con) {
        Ok(Value::Int(n)) => n,
        other => panic!("MINLOCK.RELEASE replied {other:?}"),
    }
}

fn fence_of(v: Result<Value, String>) -> i64 {
    match v {
        Ok(Value::Int(f)) => f,
        other => panic!("expected a fence, got {other:?}"),
    }
}

fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

#[test]
fn the_module_floor_is_a_lock() {
    let s = minimal_lock_server();
    let mut con = s.conn();

    let first = fence_of(min_acquire(&mut con, "lk", "a", "60000"));
    assert_eq!(
        first.to_string().len(),
        16,
        "fence {first} has not 16 digits"
    );
    let ttl = pttl(&mut con, "lk");
    assert!((59_000..=60_000).contains(&ttl), "lease as TTL: {ttl} ms");

    // Taken: neither another token nor the same one gets it, and the lease is unchanged.
    assert_eq!(min_acquire(&mut con, "lk", "b", "60000"), Ok(Value::Nil));
    assert_eq!(min_acquire(&mut con, "lk", "a", "60000"), Ok(Value::Nil));
    // Only the holder's token releases it.
    assert_eq!(min_release(&mut con, "lk", "b"), 0);
    assert!(exists(&mut con, "lk"));
    assert_eq!(min_release(&mut con, "lk", "a"), 1);
    assert!(!exists(&mut con, "lk"));
    assert_eq!(min_release(&mut con, "lk", "a"), 0);

    let second = fence_of(min_acquire(&mut con, "lk", "b", "60000"));
    assert!(second > first, "fence {second} after {first}");
}

#[test]
fn the_module_floors_lease_ends_as_a_key_expires() {
    let s = minimal_lock_server();
    let mut con = s.conn();
    fence_of(min_acquire(&mut con, "lk", "a", "50"));
    assert!(
        wait_until(Duration::from_secs(2), || !exists(&mut con, "lk")),
        "the lease did not end"
    );
    fence_of(min_acquire(&mut con, "lk", "b", "60000"));
    assert_eq!(min_release(&mut con, "lk", "a"), 0);
}

#[test]
fn the_module_floor_refuses_bad_arguments_and_other_types() {
    let s = minimal_lock_server();
    let mut con = s.conn();
    for ttl in ["0", "-5", "soon"] {
        assert_err_starts(&min_acquire(&mut con, "lk", "a", ttl), "ERR ttl");
        assert!(!exists(&mut con, "lk"), "ttl {ttl} created the key");
    }
    let short = run(redis::cmd("MINLOCK.ACQUIRE").arg("lk").arg("a"), &mut con);
    assert_err_starts(&short, "ERR wrong number of arguments");
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_err_starts(&min_acquire(&mut con, "str", "a", "1000"), "WRONGTYPE");
    assert_eq!(min_release(&mut con, "str", "v"), 0);
    let v: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(v, "v");
}
