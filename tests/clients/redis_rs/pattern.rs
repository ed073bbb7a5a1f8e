//! The recommended pattern in redis-rs: [`with_lock`] carrying a short lease through longer
//! work, a stalled holder's late write refused by a store that checks fences and by
//! `LOCK.GUARD`; and acquire, then `WAIT` for a replica.

use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::Duration;

use super::{guarded, with_lock, Guarded};
use crate::common::{self, info, wait_until, Opts, Server};
use crate::lock_counters::assert_pattern_counts;
use crate::processes::note;

/// A resource that checks fences: it refuses a write older than one it has accepted.
#[derive(Default)]
struct FencedStore {
    highest: u64,
    value: Option<String>,
}

impl FencedStore {
    fn write(&mut self, fence: u64, value: &str) -> Result<(), String> {
        if fence < self.highest {
            return Err(format!("stale fence {fence} < {}", self.highest));
        }
        self.highest = fence;
        self.value = Some(value.to_string());
        Ok(())
    }
}

#[test]
fn redis_rs_pattern() {
    let server = Server::new();
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let data = format!("{key}:data");
    let mut store = FencedStore::default();
    let set = |value: &'static str| ("SET", data.clone(), value);

    // The work outlives the 500 ms ttl; the keep-alive holds the lock all along.
    let f1 = with_lock(&client, &key, 500, |fence, lost| {
        sleep(Duration::from_millis(1000));
        assert!(!lost.load(Ordering::SeqCst), "the keep-alive lost the lock");
        assert_eq!(info(&mut con, &key).unwrap().fence as u64, fence);
        store.write(fence, "first").unwrap();
        let landed: Guarded<String> = guarded(&mut con, &key, fence, set("first")).unwrap();
        assert_eq!(landed, Guarded::Ran("OK".to_string()));
        fence
    })
    .unwrap()
    .expect("free lock");
    assert!(info(&mut con, &key).is_none(), "released after the work");

    // A holder that stalls past its lease while another takes over: the store refuses the
    // stale holder's late write, and so does LOCK.GUARD in Redis.
    let stale = uuid::Uuid::new_v4().to_string();
    let f_stale: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&stale)
        .arg(100)
        .query(&mut con)
        .unwrap();
    let f_stale = f_stale.unwrap();
    assert!(f_stale > f1);
    sleep(Duration::from_millis(300));
    let f_new = with_lock(&client, &key, 10_000, |fence, _| {
        store.write(fence, "new").unwrap();
        let landed: Guarded<String> = guarded(&mut con, &key, fence, set("new")).unwrap();
        assert_eq!(landed, Guarded::Ran("OK".to_string()));
        // The stalled holder wakes up.
        let late: Guarded<String> = guarded(&mut con, &key, f_stale, set("late")).unwrap();
        assert_eq!(
            late,
            Guarded::Fenced("the lock is held under a newer fence".to_string())
        );
        fence
    })
    .unwrap()
    .expect("free after the stalled lease ended");
    assert!(f_new > f_stale);
    assert!(store.write(f_stale, "late").is_err(), "a stale write");
    assert_eq!(store.value.as_deref(), Some("new"));
    let stored: String = redis::cmd("GET").arg(&data).query(&mut con).unwrap();
    assert_eq!(stored, "new", "only the holders' writes landed");
    let after: Guarded<String> = guarded(&mut con, &key, f_new, set("after")).unwrap();
    assert_eq!(
        after,
        Guarded::Fenced("the lock is not held".to_string()),
        "released: nobody holds it"
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&stale)
        .query(&mut con)
        .unwrap();
    assert!(!released, "the stalled holder lost it");
    note(&format!(
        "redis-rs pattern: ok (fences {f1} < {f_stale} < {f_new})"
    ));
    assert_pattern_counts(&server);
}

/// The pattern docs/CLIENTS.md recommends where replication matters (its step 3): acquire, then
/// `WAIT 1 <ms>` for a replica to have the grant before using it; the replica holds the same
/// holder and fence.
#[test]
fn redis_rs_acquire_then_wait_for_a_replica() {
    let master = Server::new();
    let replica = Server::start(Opts::new().replicaof(master.port));
    let mut r = replica.conn();
    assert!(
        wait_until(Duration::from_secs(15), || common::info_field(
            &mut r,
            "replication",
            "master_link_status"
        )
        .as_deref()
            == Some("up")),
        "replica link not up"
    );
    let mut m = master.conn();
    let key = format!("orders:{}", uuid::Uuid::new_v4());
    let token = uuid::Uuid::new_v4().to_string();
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(&token)
        .arg(30_000)
        .query(&mut m)
        .unwrap();
    let fence = fence.expect("free lock");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "the replica must acknowledge the grant");
    let on_replica = info(&mut r, &key).expect("the replica holds the lock");
    assert_eq!(on_replica.holder.as_deref(), Some(token.as_bytes()));
    assert_eq!(on_replica.fence as u64, fence);

    // With no replica to acknowledge, WAIT says 0: treat the lock as not acquired.
    drop(replica);
    let key2 = format!("orders:{}", uuid::Uuid::new_v4());
    let fence2: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(&key2)
        .arg(&token)
        .arg(30_000)
        .query(&mut m)
        .unwrap();
    assert!(fence2.is_some_and(|f| f > fence));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut m).unwrap();
    assert_eq!(acked, 0, "no replica is left to acknowledge");
}
