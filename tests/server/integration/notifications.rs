//! Keyspace notifications of the module class: every change to a lock announced in order,
//! on the keyspace and the keyevent channels, and none unless the class is enabled.

use std::time::Duration;

use crate::cmd;
use crate::common::Waiter;
use crate::common::*;
use crate::integration::{wait_for_waiters, LEASE_WAIT};
use redis::{Connection, Value};

/// A connection subscribed to every keyspace and keyevent channel, with
/// `notify-keyspace-events` set to `flags` (through `CONFIG SET`).
pub(crate) struct Subscriber {
    ps: Connection,
    marker: u32,
}

const MARKER_CHANNEL: &str = "__keyspace@0__:zz-test-marker";

impl Subscriber {
    pub(crate) fn new(server: &Server, flags: &str) -> Subscriber {
        let mut admin = server.conn();
        assert_eq!(
            cmd!(&mut admin, "CONFIG", "SET", "notify-keyspace-events", flags),
            Ok(Value::Okay)
        );
        // Plain send/receive: redis-rs's PubSub unsubscribes when it is dropped.
        let mut ps = server.conn();
        ps.send_packed_command(
            &redis::cmd("PSUBSCRIBE")
                .arg("__key*__:*")
                .get_packed_command(),
        )
        .unwrap();
        ps.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut s = Subscriber { ps, marker: 0 };
        // Subscribed once a message published after the subscription arrives.
        s.until_marker(server);
        s
    }

    /// Publishes a marker and returns every message (channel, payload) received before it:
    /// what the server sent for everything done until now, and nothing else.
    pub(crate) fn until_marker(&mut self, server: &Server) -> Vec<(String, String)> {
        self.marker += 1;
        let marker = format!("end-{}", self.marker);
        let mut con = server.conn();
        assert_eq!(
            cmd!(&mut con, "PUBLISH", MARKER_CHANNEL, &marker),
            Ok(Value::Int(1))
        );
        let text = |v: &Value| -> String {
            match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => panic!("pub/sub: not a string: {other:?}"),
            }
        };
        let mut got = Vec::new();
        loop {
            let msg = self.ps.recv_response().expect("a message within 10s");
            let Value::Array(parts) = &msg else {
                panic!("pub/sub: unexpected {msg:?}");
            };
            // ["psubscribe", pattern, count] or ["pmessage", pattern, channel, payload]
            if text(&parts[0]) != "pmessage" {
                continue;
            }
            let (channel, payload) = (text(&parts[2]), text(&parts[3]));
            if channel == MARKER_CHANNEL && payload == marker {
                return got;
            }
            got.push((channel, payload));
        }
    }
}

/// Does one of everything that changes a lock, on keys under `prefix`, and returns the
/// keyspace events (channel, event) that it should announce, in order.
fn every_change(server: &Server, prefix: &str) -> Vec<(String, String)> {
    let mut con = server.conn();
    let (k1, k2, k3) = (
        format!("{prefix}:1"),
        format!("{prefix}:2"),
        format!("{prefix}:3"),
    );
    let ev = |db: u32, k: &str, e: &str| (format!("__keyspace@{db}__:{k}"), format!("lock.{e}"));
    let mut want = Vec::new();

    let f1 = acquire(&mut con, &k1, "a", 10_000).unwrap();
    want.push(ev(0, &k1, "acquired"));
    assert_eq!(acquire(&mut con, &k1, "a", 10_000), Some(f1));
    want.push(ev(0, &k1, "extended"));
    assert_eq!(acquire(&mut con, &k1, "b", 10_000), None);
    assert_eq!(extend(&mut con, &k1, "a", 20_000), 1);
    want.push(ev(0, &k1, "extended"));
    fence(&mut con, &k1, "a").unwrap();
    want.push(ev(0, &k1, "fenced"));
    acquire(&mut con, &k2, "c", 10_000).unwrap();
    want.push(ev(0, &k2, "acquired"));

    // Failures and reads announce nothing.
    assert_eq!(release(&mut con, &k1, "b"), 0);
    assert_eq!(extend(&mut con, &k2, "a", 1_000), 0);
    assert_eq!(fence(&mut con, &k1, "b"), None);
    assert!(info(&mut con, &k1).is_some());
    assert!(cmd!(&mut con, "LOCK.ACQUIRE", &k1, "a", 0).is_err());

    // A waiter with a short lease: granted on release, then its lease ends.
    let mut d = Waiter::send(server, &k1, "d", 200, 10_000);
    wait_for_waiters(&mut con, &k1, 1);
    assert_eq!(release(&mut con, &k1, "a"), 1);
    want.push(ev(0, &k1, "released"));
    want.push(ev(0, &k1, "granted"));
    assert!(d.reply().is_some());
    assert_eq!(release(&mut con, &k2, "c"), 1);
    want.push(ev(0, &k2, "released"));
    assert!(
        wait_until(LEASE_WAIT, || !exists(&mut con, &k1)),
        "d's lease never ended"
    );
    want.push(ev(0, &k1, "expired"));

    // A WAIT that times out announces nothing of its own.
    acquire(&mut con, &k3, "e", 10_000).unwrap();
    want.push(ev(0, &k3, "acquired"));
    assert_eq!(
        cmd!(&mut con, "LOCK.ACQUIRE", &k3, "f", 10_000, "WAIT", 50),
        Ok(Value::Nil)
    );
    assert_eq!(release(&mut con, &k3, "e"), 1);
    want.push(ev(0, &k3, "released"));

    // Another database: its own channel.
    assert_eq!(cmd!(&mut con, "SELECT", 5), Ok(Value::Okay));
    acquire(&mut con, &k1, "a", 10_000).unwrap();
    want.push(ev(5, &k1, "acquired"));
    assert_eq!(release(&mut con, &k1, "a"), 1);
    want.push(ev(5, &k1, "released"));
    want
}

#[test]
fn keyspace_notifications_name_each_change_in_order() {
    let server = Server::new();
    let mut sub = Subscriber::new(&server, "Kd");
    let want = every_change(&server, "ks");
    let got = sub.until_marker(&server);
    assert_eq!(got, want);
    // Every documented event name occurs.
    for e in [
        "acquired", "extended", "fenced", "granted", "released", "expired",
    ] {
        let name = format!("lock.{e}");
        assert!(got.iter().any(|(_, p)| *p == name), "no {name} in {got:?}");
    }
}

#[test]
fn keyevent_notifications_carry_the_key() {
    let server = Server::new();
    let mut sub = Subscriber::new(&server, "Ed");
    let want: Vec<(String, String)> = every_change(&server, "ke")
        .into_iter()
        .map(|(channel, event)| {
            // __keyspace@<db>__:<key> / <event>  ->  __keyevent@<db>__:<event> / <key>
            let (db, key) = channel
                .strip_prefix("__keyspace@")
                .and_then(|r| r.split_once("__:"))
                .unwrap();
            (format!("__keyevent@{db}__:{event}"), key.to_string())
        })
        .collect();
    assert_eq!(sub.until_marker(&server), want);
}

#[test]
fn no_lock_notifications_unless_enabled() {
    let server = Server::new();
    let mut sub = Subscriber::new(&server, "");
    every_change(&server, "off");
    assert_eq!(
        sub.until_marker(&server),
        vec![],
        "notify-keyspace-events \"\""
    );

    // Every class but the module one (`d`): still no lock.* event.
    let mut admin = server.conn();
    let flags = "KEg$lshzxet";
    assert_eq!(
        cmd!(&mut admin, "CONFIG", "SET", "notify-keyspace-events", flags),
        Ok(Value::Okay)
    );
    every_change(&server, "nod");
    let lock_events: Vec<_> = sub
        .until_marker(&server)
        .into_iter()
        .filter(|(c, p)| c.contains("lock.") || p.starts_with("lock."))
        .collect();
    assert_eq!(lock_events, vec![], "notify-keyspace-events {flags}");
}
