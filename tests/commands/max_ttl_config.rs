//! The `lock.max-ttl` setting: `CONFIG GET`/`SET` at run time, as a load-time module
//! argument, and the ttl bound it puts on `LOCK.ACQUIRE` and `LOCK.EXTEND`.

use std::time::Instant;

use crate::cmd;
use crate::common::*;
use redis::Value;

#[test]
fn config_max_ttl_get_set() {
    let s = Server::new();
    let mut c = s.conn();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "86400000"]);
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", 5_000),
        Ok(Value::Okay)
    );
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    let want = "ERR ttl must be between 1 and 5000 (lock.max-ttl)";
    let r = cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 5_001);
    assert_eq!(r, Err(want.to_string()));
    assert!(!exists(&mut c, "k"));
    assert!(acquire(&mut c, "k", "t", 5_000).is_some());
    let before = info(&mut c, "k");
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut c, "LOCK.EXTEND", "k", "t", 5_001),
        Err(want.to_string())
    );
    assert_eq!(
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 86_400_000),
        Err(want.to_string())
    );
    assert_same_lock(&before, &info(&mut c, "k"), t0.elapsed(), 100);
    // Invalid values are refused and leave the setting alone.
    for bad in ["abc", "-5", ""] {
        assert_err_starts(&cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", bad), "ERR");
    }
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    // Raising it again.
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", "lock.max-ttl", 100_000),
        Ok(Value::Okay)
    );
    assert_eq!(extend(&mut c, "k", "t", 100_000), 1);
}

#[test]
fn config_max_ttl_load_time_argument() {
    let s = Server::start(Opts::new().module_args(&["max-ttl", "5000"]));
    let mut c = s.conn();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.max-ttl")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["lock.max-ttl", "5000"]);
    assert_eq!(
        cmd!(&mut c, "LOCK.ACQUIRE", "k", "t", 5_001),
        Err("ERR ttl must be between 1 and 5000 (lock.max-ttl)".to_string())
    );
    assert!(!exists(&mut c, "k"));
    assert!(acquire(&mut c, "k", "t", 5_000).is_some());
}
