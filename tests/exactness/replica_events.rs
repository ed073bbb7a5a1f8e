//! Events on a replica (point 5 of the crate doc): a replica announces the lock events of the
//! changes it applies from its master.

use std::time::{Duration, Instant};

use redis::Value;

use crate::cmd;
use crate::common::*;
use crate::sync;

/// Reads keyspace messages for up to `within`, until `n` have come.
fn read_events(ps: &mut redis::PubSub<'_>, n: usize, within: Duration) -> Vec<(String, String)> {
    let give_up = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n {
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        ps.set_read_timeout(Some(left)).unwrap();
        match ps.get_message() {
            Ok(msg) => {
                let payload: String = msg.get_payload().unwrap_or_default();
                out.push((msg.get_channel_name().to_string(), payload));
            }
            Err(e) if e.is_timeout() => break,
            Err(e) => panic!("pubsub: {e}"),
        }
    }
    out
}

#[test]
fn a_replica_announces_the_lock_events_of_the_changes_it_applies() {
    let (m, r) = replica_pair();
    let mut rc = r.conn();
    let mut mc = m.conn();
    assert_eq!(
        cmd!(&mut rc, "CONFIG", "SET", "notify-keyspace-events", "Kd"),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut mc, "CONFIG", "SET", "notify-keyspace-events", "Kd"),
        Ok(Value::Okay)
    );
    let mut sub_conn = r.conn();
    let mut ps = sub_conn.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").unwrap();
    let mut msub_conn = m.conn();
    let mut mps = msub_conn.as_pubsub();
    mps.psubscribe("__keyspace@0__:*").unwrap();

    acquire(&mut mc, "k", "a", 30_000).unwrap();
    assert_eq!(extend(&mut mc, "k", "a", 30_000), 1);
    acquire(&mut mc, "k", "a", 30_000).unwrap();
    fence(&mut mc, "k", "a").unwrap();
    let mut w = Waiter::join(&m, "k", "b", 30_000, 0);
    assert_eq!(release(&mut mc, "k", "a"), 1);
    assert!(w.reply().is_some(), "waiter not granted");
    assert_eq!(release(&mut mc, "k", "b"), 1);
    sync(&mut mc);
    let expected = [
        "lock.acquired",
        "lock.extended",
        "lock.extended",
        "lock.fenced",
        "lock.granted",
        "lock.released",
    ];
    let mut got_r = read_events(&mut ps, expected.len(), Duration::from_secs(2));
    got_r.extend(read_events(&mut ps, 1, Duration::from_millis(200)));
    let got_m = read_events(&mut mps, 20, Duration::from_millis(300));
    let names: Vec<&str> = got_r.iter().map(|(_, p)| p.as_str()).collect();
    eprintln!(
        "master announced {:?}",
        got_m.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>()
    );
    assert!(
        got_r.iter().all(|(ch, _)| ch == "__keyspace@0__:k"),
        "events on other keys: {got_r:?}"
    );
    assert_eq!(names, expected, "events on the replica");
}
