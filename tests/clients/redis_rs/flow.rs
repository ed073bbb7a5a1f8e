//! redis-rs's lock flow, in RESP2 and RESP3, with the guarded writes through [`guarded`].

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use super::{guarded, Guarded};
use crate::common::{wait_until, Server};
use crate::lock_counters::assert_flow_counts;
use crate::processes::note;
use redis::Value;

/// `LOCK.INFO` through redis-rs's own conversions, as an application would read it.
fn rs_info(con: &mut redis::Connection, key: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.INFO").arg(key).query(con).unwrap()
}

fn rs_flow(server: &Server, resp3: bool) -> (u64, u64, u64) {
    let url = if resp3 {
        format!("{}?protocol=resp3", server.url())
    } else {
        server.url()
    };
    let client = redis::Client::open(url).unwrap();
    let mut a = client.get_connection().unwrap();
    let mut b = client.get_connection().unwrap();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let data = format!("{key}:data");
    let token = uuid::Uuid::new_v4().to_string();
    let other = uuid::Uuid::new_v4().to_string();

    let acquire = |con: &mut redis::Connection, tok: &str| -> Option<u64> {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg(tok)
            .arg(30_000)
            .query(con)
            .unwrap()
    };
    let f1 = acquire(&mut a, &token).expect("free lock");
    assert_eq!(acquire(&mut a, &token), Some(f1), "a retry keeps the fence");
    assert_eq!(acquire(&mut b, &other), None, "held by another");

    let f2: Option<u64> = redis::cmd("LOCK.FENCE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    let f2 = f2.expect("the holder gets a fence");
    assert!(f2 > f1);
    let none: Option<u64> = redis::cmd("LOCK.FENCE")
        .arg(&key)
        .arg(&other)
        .query(&mut b)
        .unwrap();
    assert_eq!(none, None);

    // Guarded writes: the current fence lands, the one LOCK.FENCE replaced is refused.
    let landed: Guarded<String> = guarded(&mut a, &key, f2, ("SET", &data, "by-f2")).unwrap();
    assert_eq!(landed, Guarded::Ran("OK".to_string()));
    let refused: Guarded<String> = guarded(&mut b, &key, f1, ("SET", &data, "by-f1")).unwrap();
    assert_eq!(
        refused,
        Guarded::Fenced("the lock is held under a newer fence".to_string())
    );
    let stored: String = redis::cmd("GET").arg(&data).query(&mut a).unwrap();
    assert_eq!(stored, "by-f2");
    let _: () = redis::cmd("DEL").arg(&data).query(&mut a).unwrap();

    let extended: bool = redis::cmd("LOCK.EXTEND")
        .arg(&key)
        .arg(&token)
        .arg(60_000)
        .query(&mut a)
        .unwrap();
    assert!(extended);
    let extended: bool = redis::cmd("LOCK.EXTEND")
        .arg(&key)
        .arg(&other)
        .arg(60_000)
        .query(&mut b)
        .unwrap();
    assert!(!extended);

    let i = rs_info(&mut a, &key).expect("held");
    let holder: Option<String> = redis::from_redis_value(&i["holder"]).unwrap();
    let fence: u64 = redis::from_redis_value(&i["fence"]).unwrap();
    let ttl: i64 = redis::from_redis_value(&i["ttl"]).unwrap();
    let waiters: u64 = redis::from_redis_value(&i["waiters"]).unwrap();
    assert_eq!(holder.as_deref(), Some(token.as_str()));
    assert_eq!(fence, f2);
    assert!(ttl > 30_000 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(waiters, 0);
    let mode: String = redis::from_redis_value(&i["mode"]).unwrap();
    let holders: u64 = redis::from_redis_value(&i["holders"]).unwrap();
    assert_eq!((mode.as_str(), holders), ("exclusive", 1));
    assert_eq!(i.len(), 6);
    let holders: Vec<(String, u64, i64, String)> =
        redis::cmd("LOCK.HOLDERS").arg(&key).query(&mut a).unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let (holder, fence, ttl, mode) = &holders[0];
    assert_eq!((holder, *fence, mode.as_str()), (&token, f2, "exclusive"));
    assert!(*ttl > 30_000 && *ttl <= 60_000, "ttl {ttl}");

    let t0 = Instant::now();
    let timed_out: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&other)
        .arg(30_000)
        .arg("WAIT")
        .arg(100)
        .query(&mut b)
        .unwrap();
    assert_eq!(timed_out, None);
    assert!(t0.elapsed() >= Duration::from_millis(90));

    // The blocking WAIT on its own connection and thread, granted on release.
    let (k, o) = (key.clone(), other.clone());
    let waiter = thread::spawn(move || -> Option<u64> {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&k)
            .arg(&o)
            .arg(30_000)
            .arg("WAIT")
            .arg(10_000)
            .query(&mut b)
            .unwrap()
    });
    let joined = wait_until(Duration::from_secs(5), || {
        rs_info(&mut a, &key).is_some_and(|i| i["waiters"] == Value::Int(1))
    });
    assert!(joined, "the waiter never joined the queue");
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    assert!(released);
    let f3 = waiter.join().unwrap().expect("granted on release");
    assert!(f3 > f2, "granted fence {f3} must exceed {f2}");

    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut a)
        .unwrap();
    assert!(!released, "no longer the holder");
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&other)
        .query(&mut a)
        .unwrap();
    assert!(released);
    assert!(rs_info(&mut a, &key).is_none(), "gone once released");

    let err = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&token)
        .arg(0)
        .query::<Option<u64>>(&mut a)
        .unwrap_err();
    assert!(
        err.to_string().contains("ttl must be between"),
        "error: {err}"
    );
    (f1, f2, f3)
}

#[test]
fn redis_rs_flow() {
    let server = Server::new();
    for resp3 in [false, true] {
        let (f1, f2, f3) = rs_flow(&server, resp3);
        note(&format!(
            "redis-rs RESP{}: ok (fences {f1} < {f2} < {f3})",
            if resp3 { 3 } else { 2 }
        ));
    }
    assert_flow_counts(&server, 2);
}
