//! Fences on a live server: strictly increasing across `LOCK.FENCE`, release, lease end,
//! `DEL`, `UNLINK` and `FLUSHALL`, and a fresh key starts above every fence issued.

use std::time::Duration;

use crate::cmd;
use crate::common::*;
use redis::Value;

#[test]
fn fences_increase_across_release_lease_end_and_key_removal() {
    let s = Server::new();
    let mut c = s.conn();
    let mut issued = vec![acquire(&mut c, "k", "a", 10_000).unwrap()];
    issued.push(fence(&mut c, "k", "a").unwrap());
    issued.push(fence(&mut c, "k", "a").unwrap());
    assert_eq!(release(&mut c, "k", "a"), 1);
    issued.push(acquire(&mut c, "k", "b", 100).unwrap());
    assert!(wait_until(Duration::from_secs(3), || !exists(&mut c, "k")));
    issued.push(acquire(&mut c, "k", "c", 10_000).unwrap());
    assert_eq!(cmd!(&mut c, "DEL", "k"), Ok(Value::Int(1)));
    issued.push(acquire(&mut c, "k", "d", 10_000).unwrap());
    assert_eq!(cmd!(&mut c, "UNLINK", "k"), Ok(Value::Int(1)));
    issued.push(acquire(&mut c, "k", "e", 10_000).unwrap());
    issued.push(fence(&mut c, "k", "e").unwrap());
    assert_eq!(cmd!(&mut c, "FLUSHALL"), Ok(Value::Okay));
    issued.push(acquire(&mut c, "k", "f", 10_000).unwrap());
    for w in issued.windows(2) {
        assert!(w[1] > w[0], "fences not strictly increasing: {issued:?}");
    }
    // A fresh key starts above every fence the server issued.
    let fresh = acquire(&mut c, "fresh", "x", 10_000).unwrap();
    assert!(fresh > *issued.last().unwrap(), "{fresh} vs {issued:?}");
}
