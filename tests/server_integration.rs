//! How the module fits the server around it: the `INFO lock` section, keyspace notifications
//! of the module class, ACL key patterns and the `lock` ACL category, `COMMAND GETKEYS`.
//! Behaviour that depends on the server version (module ACL categories) is detected at run
//! time and asserted for that version, so the same file runs on Redis 7.0 and Valkey 8/9.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// Wider than any lease a test waits out, narrower than a hang.
const LEASE_WAIT: Duration = Duration::from_secs(5);

const COUNTERS: [&str; 11] = [
    "acquires",
    "contended_acquires",
    "releases",
    "extends",
    "fences",
    "lease_ends",
    "grants",
    "wait_timeouts",
    "evictions",
    "guarded_runs",
    "guarded_refusals",
];
const GAUGES: [&str; 2] = ["held", "waiting_clients"];
/// A state, 0 or 1 (tests/propagation.rs follows it).
const STATES: [&str; 1] = ["propagating"];

/// A note that `cargo test` does not swallow.
fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// `INFO lock`, as field (without the `lock_` prefix) -> value. Asserts the section is there
/// under its name and has exactly the documented fields.
fn lock_stats(con: &mut Connection) -> BTreeMap<String, i64> {
    let text: String = redis::cmd("INFO").arg("lock").query(con).unwrap();
    assert!(
        text.lines().any(|l| l.trim() == "# lock"),
        "no `# lock` section:\n{text}"
    );
    let mut m = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (k, v) = line.trim().split_once(':').expect("field:value");
        let k = k
            .strip_prefix("lock_")
            .unwrap_or_else(|| panic!("field without lock_ prefix: {line}"));
        let v: i64 = v
            .parse()
            .unwrap_or_else(|_| panic!("not an integer: {line}"));
        assert!(v >= 0, "negative: {line}");
        assert!(m.insert(k.to_string(), v).is_none(), "duplicate: {line}");
    }
    let names: Vec<&str> = m.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = COUNTERS
        .iter()
        .chain(GAUGES.iter())
        .chain(STATES.iter())
        .copied()
        .collect();
    want.sort_unstable();
    assert_eq!(names, want, "INFO lock fields:\n{text}");
    m
}

/// Follows `INFO lock` through a test: each step states how every counter moved.
struct Stats {
    con: Connection,
    last: BTreeMap<String, i64>,
}

impl Stats {
    fn new(server: &Server) -> Stats {
        let mut con = server.conn();
        let last = lock_stats(&mut con);
        Stats { con, last }
    }

    fn delta(&mut self, name: &str) -> i64 {
        lock_stats(&mut self.con)[name] - self.last[name]
    }

    /// Asserts that since the last step each counter moved by exactly what `moved` says
    /// (0 for those it does not name).
    #[track_caller]
    fn step(&mut self, what: &str, moved: &[(&str, i64)]) {
        for (name, _) in moved {
            assert!(COUNTERS.contains(name), "{name} is not a counter");
        }
        let now = lock_stats(&mut self.con);
        for name in COUNTERS {
            let want = moved.iter().find(|(n, _)| *n == name).map_or(0, |m| m.1);
            let got = now[name] - self.last[name];
            assert_eq!(
                got, want,
                "after {what}: lock_{name} moved by {got}, expected {want} (before {:?}, after {now:?})",
                self.last
            );
        }
        self.last = now;
    }

    /// Asserts the two gauges.
    #[track_caller]
    fn gauges(&mut self, what: &str, held: i64, waiting: i64) {
        let now = lock_stats(&mut self.con);
        assert_eq!(now["held"], held, "lock_held after {what}: {now:?}");
        assert_eq!(
            now["waiting_clients"], waiting,
            "lock_waiting_clients after {what}: {now:?}"
        );
    }
}

/// `LOCK.ACQUIRE key token ttl WAIT timeout` on its own connection and thread.
fn wait_in_thread(
    server: &Server,
    key: &str,
    token: &str,
    ttl: u64,
    timeout: u64,
) -> thread::JoinHandle<Option<i64>> {
    let mut con = server.conn();
    let (key, token) = (key.to_string(), token.to_string());
    thread::spawn(move || {
        match cmd!(&mut con, "LOCK.ACQUIRE", &key, &token, ttl, "WAIT", timeout) {
            Ok(Value::Int(f)) => Some(f),
            Ok(Value::Nil) => None,
            other => panic!("LOCK.ACQUIRE … WAIT: {other:?}"),
        }
    })
}

/// Waits until `n` clients wait on `key`.
#[track_caller]
fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    assert!(
        wait_until(Duration::from_secs(5), || info(con, key)
            .map_or(0, |i| i.waiters)
            == n),
        "{key}: never {n} waiter(s); now {:?}",
        info(con, key)
    );
}

// ---------------------------------------------------------------------------------------------
// INFO lock

#[test]
fn info_lock_counters_move_exactly_with_what_happened() {
    let server = Server::new();
    let mut con = server.conn();
    let mut st = Stats::new(&server);
    st.gauges("start", 0, 0);
    let k = "stats:1";

    let f1 = acquire(&mut con, k, "a", 10_000).expect("free");
    st.step("an acquire", &[("acquires", 1)]);
    st.gauges("an acquire", 1, 0);

    assert_eq!(acquire(&mut con, k, "b", 10_000), None);
    st.step("a contended acquire (null)", &[("contended_acquires", 1)]);

    assert_eq!(acquire(&mut con, k, "a", 10_000), Some(f1));
    st.step("the holder's renewal", &[("extends", 1)]);

    // Nothing that fails or only reads counts.
    assert_eq!(release(&mut con, k, "b"), 0);
    assert_eq!(extend(&mut con, k, "b", 1_000), 0);
    assert_eq!(fence(&mut con, k, "b"), None);
    assert_eq!(release(&mut con, "stats:none", "a"), 0);
    assert_eq!(extend(&mut con, "stats:none", "a", 1_000), 0);
    assert_eq!(fence(&mut con, "stats:none", "a"), None);
    assert!(info(&mut con, k).is_some());
    assert!(cmd!(&mut con, "LOCK.ACQUIRE", k, "a", 0).is_err());
    assert!(cmd!(&mut con, "LOCK.ACQUIRE", k, "b", 10, "WAIT", -1).is_err());
    assert!(cmd!(&mut con, "LOCK.EXTEND", k, "a", "x").is_err());
    st.step("failed and read-only commands", &[]);

    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut con, "LOCK.ACQUIRE", k, "c", 10_000, "WAIT", 100),
        Ok(Value::Nil)
    );
    assert!(t0.elapsed() >= Duration::from_millis(90));
    st.step(
        "a WAIT that timed out",
        &[("contended_acquires", 1), ("wait_timeouts", 1)],
    );
    st.gauges("a WAIT that timed out", 1, 0);

    // d waits, with a short lease for later.
    let d = wait_in_thread(&server, k, "d", 300, 10_000);
    wait_for_waiters(&mut con, k, 1);
    st.step("a WAIT that queued", &[("contended_acquires", 1)]);
    st.gauges("a WAIT that queued", 1, 1);

    assert_eq!(extend(&mut con, k, "a", 10_000), 1);
    st.step("an extend", &[("extends", 1)]);

    let f2 = fence(&mut con, k, "a").expect("holder");
    assert!(f2 > f1);
    st.step("a fence", &[("fences", 1)]);

    assert_eq!(release(&mut con, k, "a"), 1);
    let f3 = d.join().unwrap().expect("d is granted on release");
    assert!(f3 > f2, "grant fence {f3} must exceed {f2}");
    st.step(
        "a release granted to a waiter",
        &[("releases", 1), ("grants", 1)],
    );
    st.gauges("the grant", 1, 0);

    // d's 300 ms lease runs out with nobody waiting: the key goes away.
    assert!(
        wait_until(LEASE_WAIT, || st.delta("lease_ends") == 1),
        "d's lease never ended"
    );
    assert!(!exists(&mut con, k));
    st.step("a lease end", &[("lease_ends", 1)]);
    st.gauges("a lease end", 0, 0);

    // A lease end handed to a waiter.
    acquire(&mut con, k, "e", 300).expect("free again");
    let g = wait_in_thread(&server, k, "g", 10_000, 10_000);
    wait_for_waiters(&mut con, k, 1);
    let fg = g.join().unwrap().expect("g is granted when e's lease ends");
    assert!(fg > f3);
    st.step(
        "acquire, WAIT, lease end granted to the waiter",
        &[
            ("acquires", 1),
            ("contended_acquires", 1),
            ("lease_ends", 1),
            ("grants", 1),
        ],
    );
    st.gauges("a lease end granted", 1, 0);

    assert_eq!(release(&mut con, k, "g"), 1);
    st.step("a release with nobody waiting", &[("releases", 1)]);
    st.gauges("the end", 0, 0);
}

#[test]
fn info_lock_gauges_follow_keys_and_clients() {
    let server = Server::new();
    let mut con = server.conn();
    let mut st = Stats::new(&server);
    for k in ["g:1", "g:2", "g:3"] {
        acquire(&mut con, k, "a", 30_000).unwrap();
    }
    st.gauges("three acquires", 3, 0);

    let w1 = wait_in_thread(&server, "g:1", "w1", 30_000, 0);
    wait_for_waiters(&mut con, "g:1", 1);
    let w2 = wait_in_thread(&server, "g:1", "w2", 30_000, 0);
    wait_for_waiters(&mut con, "g:1", 2);
    let w3 = wait_in_thread(&server, "g:2", "w3", 30_000, 0);
    wait_for_waiters(&mut con, "g:2", 1);
    st.gauges("three waiters on two keys", 3, 3);

    // A waiter that disconnects is no longer counted.
    let quitter = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    (&quitter)
        .write_all(b"*6\r\n$12\r\nLOCK.ACQUIRE\r\n$3\r\ng:3\r\n$1\r\nq\r\n$3\r\n100\r\n$4\r\nWAIT\r\n$1\r\n0\r\n")
        .unwrap();
    wait_for_waiters(&mut con, "g:3", 1);
    st.gauges("a fourth waiter", 3, 4);
    drop(quitter);
    assert!(
        wait_until(Duration::from_secs(5), || lock_stats(&mut con)
            ["waiting_clients"]
            == 3),
        "a disconnected waiter is still counted"
    );

    assert_eq!(release(&mut con, "g:1", "a"), 1);
    assert!(w1.join().unwrap().is_some());
    st.gauges("a grant", 3, 2);
    assert_eq!(release(&mut con, "g:1", "w1"), 1);
    assert!(w2.join().unwrap().is_some());
    assert_eq!(release(&mut con, "g:2", "a"), 1);
    assert!(w3.join().unwrap().is_some());
    st.gauges("all granted", 3, 0);

    // DEL frees a lock value like a release does.
    assert_eq!(cmd!(&mut con, "DEL", "g:3"), Ok(Value::Int(1)));
    st.gauges("DEL", 2, 0);
    assert_eq!(cmd!(&mut con, "FLUSHALL"), Ok(Value::Okay));
    // Valkey 8 and later flush lazily by default (lazyfree-lazy-user-flush): the values are
    // freed, and counted out, on a background thread.
    assert!(
        wait_until(Duration::from_secs(5), || lock_stats(&mut con)["held"] == 0),
        "locks still counted 5 s after FLUSHALL"
    );
    st.gauges("FLUSHALL", 0, 0);
    st.step(
        "the whole test",
        &[
            ("acquires", 3),
            ("contended_acquires", 4),
            ("releases", 3),
            ("grants", 3),
        ],
    );
}

/// A lease can end without the sweep being first to notice: here every command after the
/// deadline runs inside one `EXEC` (the timer cannot fire in between), as happens whenever a
/// client's command is read in the same event-loop turn in which the deadline passed. It is a
/// lease end all the same: counted, and announced before what follows it.
#[test]
fn a_lease_end_found_by_the_next_acquire_is_counted_and_announced() {
    let server = Server::new();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, "Kd");
    let mut st = Stats::new(&server);

    // Nobody waits: the next acquirer finds the lease over. One pipelined write, so that the
    // server runs the three back to back, with no timer between them (not a transaction:
    // inside one, time stands still at its start).
    let k = "lazy:1";
    let mut multi = redis::pipe();
    multi
        .cmd("LOCK.ACQUIRE")
        .arg(k)
        .arg("a")
        .arg(50)
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.15")
        .cmd("LOCK.ACQUIRE")
        .arg(k)
        .arg("b")
        .arg(10_000);
    let (fa, _, fb): (i64, Value, Option<i64>) = multi.query(&mut con).unwrap();
    assert!(fb.is_some_and(|fb| fb > fa), "b acquires after a's lease");
    assert_eq!(release(&mut con, k, "b"), 1);
    let events = sub.until_marker(&server);
    let ch = format!("__keyspace@0__:{k}");
    assert_eq!(
        events,
        vec![
            (ch.clone(), "lock.acquired".to_string()),
            (ch.clone(), "lock.expired".to_string()),
            (ch.clone(), "lock.acquired".to_string()),
            (ch.clone(), "lock.released".to_string()),
        ],
        "a's lease end must be announced before b's acquire"
    );
    st.step(
        "a lease end found by the next acquire",
        &[("acquires", 2), ("lease_ends", 1), ("releases", 1)],
    );
}

/// As above, with a waiter: the first command after the deadline hands the lock over.
#[test]
fn a_lease_end_found_by_a_command_is_counted_and_announced_before_the_grant() {
    let server = Server::new();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, "Kd");
    let mut st = Stats::new(&server);
    let k = "lazy:2";
    acquire(&mut con, k, "a", 400).unwrap();
    let w = wait_in_thread(&server, k, "w", 10_000, 10_000);
    wait_for_waiters(&mut con, k, 1);
    // Pipelined, not a transaction (see above).
    let mut multi = redis::pipe();
    multi
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.6")
        .cmd("LOCK.RELEASE")
        .arg(k)
        .arg("a");
    let (_, released): (Value, i64) = multi.query(&mut con).unwrap();
    assert_eq!(released, 0, "a's lease had ended");
    assert!(w.join().unwrap().is_some(), "w is granted");
    assert_eq!(release(&mut con, k, "w"), 1);
    let events = sub.until_marker(&server);
    let ch = format!("__keyspace@0__:{k}");
    assert_eq!(
        events,
        vec![
            (ch.clone(), "lock.acquired".to_string()),
            (ch.clone(), "lock.expired".to_string()),
            (ch.clone(), "lock.granted".to_string()),
            (ch.clone(), "lock.released".to_string()),
        ],
    );
    st.step(
        "a lease end found by a release, granted to the waiter",
        &[
            ("acquires", 1),
            ("contended_acquires", 1),
            ("lease_ends", 1),
            ("grants", 1),
            ("releases", 1),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Keyspace notifications

/// A connection subscribed to every keyspace and keyevent channel, with
/// `notify-keyspace-events` set to `flags` (through `CONFIG SET`).
struct Subscriber {
    ps: Connection,
    marker: u32,
}

const MARKER_CHANNEL: &str = "__keyspace@0__:zz-test-marker";

impl Subscriber {
    fn new(server: &Server, flags: &str) -> Subscriber {
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
    fn until_marker(&mut self, server: &Server) -> Vec<(String, String)> {
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
    let d = wait_in_thread(server, &k1, "d", 200, 10_000);
    wait_for_waiters(&mut con, &k1, 1);
    assert_eq!(release(&mut con, &k1, "a"), 1);
    want.push(ev(0, &k1, "released"));
    want.push(ev(0, &k1, "granted"));
    assert!(d.join().unwrap().is_some());
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

// ---------------------------------------------------------------------------------------------
// ACL and COMMAND GETKEYS

/// A connection authenticated as `user` (password `pw`).
fn conn_as(server: &Server, user: &str) -> Connection {
    let mut con = server.conn();
    assert_eq!(cmd!(&mut con, "AUTH", user, "pw"), Ok(Value::Okay));
    con
}

/// Each LOCK.* command (but the internal LOCK.APPLY) with `key` as its key.
fn every_command(key: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        s(&["LOCK.ACQUIRE", key, "t", "10000"]),
        s(&["LOCK.ACQUIRE", key, "t", "10000", "WAIT", "100"]),
        s(&["LOCK.EXTEND", key, "t", "10000"]),
        s(&["LOCK.FENCE", key, "t"]),
        s(&["LOCK.INFO", key]),
        s(&["LOCK.RELEASE", key, "t"]),
    ]
}

fn run_args(con: &mut Connection, args: &[String]) -> Result<Value, String> {
    let raw: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    run_raw(con, &raw)
}

/// The whole flow on `key` as the user of `con`: acquire, fence, extend, info, release.
#[track_caller]
fn flow_allowed(con: &mut Connection, key: &str) {
    let f = acquire(con, key, "t", 10_000).expect("free");
    assert!(fence(con, key, "t").unwrap() > f);
    assert_eq!(extend(con, key, "t", 10_000), 1);
    assert!(info(con, key).is_some());
    assert_eq!(release(con, key, "t"), 1);
}

#[test]
fn acl_key_patterns_apply_to_every_lock_command() {
    let server = Server::new();
    let mut admin = server.conn();
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"),
        Ok(Value::Okay)
    );
    let mut app = conn_as(&server, "app");
    for args in every_command("other:1") {
        let t0 = Instant::now();
        let r = run_args(&mut app, &args);
        assert_err_starts(&r, "NOPERM");
        assert!(
            t0.elapsed() < Duration::from_millis(90),
            "a refused WAIT must not block"
        );
    }
    assert!(!exists(&mut admin, "other:1"), "a refused command wrote");
    flow_allowed(&mut app, "app:1");

    // ACL LOG names the key and the user.
    let log = cmd!(&mut admin, "ACL", "LOG", 1).unwrap();
    let text = format!("{log:?}");
    assert!(
        text.contains("other:1") && text.contains("app") && text.contains("key"),
        "ACL LOG: {text}"
    );
    // ACL DRYRUN agrees.
    match cmd!(
        &mut admin,
        "ACL",
        "DRYRUN",
        "app",
        "LOCK.ACQUIRE",
        "other:1",
        "t",
        10
    ) {
        Ok(Value::BulkString(b)) => {
            let s = String::from_utf8_lossy(&b);
            assert!(s.contains("other:1"), "ACL DRYRUN: {s}");
        }
        other => panic!("ACL DRYRUN: {other:?}"),
    }
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "DRYRUN",
            "app",
            "LOCK.ACQUIRE",
            "app:1",
            "t",
            10
        ),
        Ok(Value::Okay)
    );

    // Read-only key permission (%R~) allows LOCK.INFO and nothing that writes.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "viewer", "on", ">pw", "%R~app:*", "+@all"),
        Ok(Value::Okay)
    );
    acquire(&mut admin, "app:2", "owner", 10_000).unwrap();
    let mut viewer = conn_as(&server, "viewer");
    assert!(info(&mut viewer, "app:2").is_some());
    for args in every_command("app:2")
        .into_iter()
        .filter(|a| a[0] != "LOCK.INFO")
    {
        assert_err_starts(&run_args(&mut viewer, &args), "NOPERM");
    }
}

#[test]
fn acl_commands_granted_one_by_one() {
    let server = Server::new();
    let mut admin = server.conn();
    assert_eq!(
        cmd!(
            &mut admin,
            "ACL",
            "SETUSER",
            "worker",
            "on",
            ">pw",
            "~*",
            "+lock.acquire",
            "+lock.release",
            "+lock.info"
        ),
        Ok(Value::Okay)
    );
    let mut w = conn_as(&server, "worker");
    acquire(&mut w, "job:1", "t", 10_000).unwrap();
    assert!(info(&mut w, "job:1").is_some());
    assert_err_starts(&cmd!(&mut w, "LOCK.FENCE", "job:1", "t"), "NOPERM");
    assert_err_starts(&cmd!(&mut w, "LOCK.EXTEND", "job:1", "t", 1000), "NOPERM");
    assert_err_starts(&cmd!(&mut w, "GET", "job:1"), "NOPERM");
    assert_eq!(release(&mut w, "job:1", "t"), 1);
}

#[test]
fn command_getkeys_returns_the_lock_key() {
    let server = Server::new();
    let mut con = server.conn();
    for args in every_command("orders:42") {
        let mut c = redis::cmd("COMMAND");
        c.arg("GETKEYS").arg(&args);
        assert_eq!(
            run(&c, &mut con),
            Ok(Value::Array(vec![Value::BulkString(b"orders:42".to_vec())])),
            "COMMAND GETKEYS {args:?}"
        );
        // The key spec's access flags: LOCK.INFO reads, every other command writes.
        let mut c = redis::cmd("COMMAND");
        c.arg("GETKEYSANDFLAGS").arg(&args);
        let v = run(&c, &mut con).unwrap();
        let flags = format!("{v:?}");
        let (want, not) = if args[0] == "LOCK.INFO" {
            ("\"RO\"", "\"RW\"")
        } else {
            ("\"RW\"", "\"RO\"")
        };
        assert!(
            flags.contains("orders:42") && flags.contains(want) && !flags.contains(not),
            "COMMAND GETKEYSANDFLAGS {args:?}: {flags}"
        );
    }
}

/// `(server, major, minor)` from `INFO server`: `("valkey", 8, 1)`, `("redis", 7, 0)`.
fn server_version(con: &mut Connection) -> (String, u32, u32) {
    let (name, version) = match info_field(con, "server", "valkey_version") {
        Some(v) => ("valkey", v),
        None => (
            "redis",
            info_field(con, "server", "redis_version").expect("redis_version"),
        ),
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        name.to_string(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn lock_acl_category_where_the_server_supports_it() {
    let server = Server::new();
    let mut admin = server.conn();
    let (name, major, minor) = server_version(&mut admin);
    // Module ACL categories came with Redis 7.4 (RedisModule_AddACLCategory); Valkey has
    // them from 8.0.
    let supported = match name.as_str() {
        "valkey" => major >= 8,
        _ => (major, minor) >= (7, 4),
    };
    let cats: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    assert_eq!(
        cats.iter().any(|c| c == "lock"),
        supported,
        "{name} {major}.{minor}: ACL CAT {cats:?}"
    );
    let modules = format!("{:?}", cmd!(&mut admin, "MODULE", "LIST").unwrap());
    assert!(modules.contains("lock"), "MODULE LIST: {modules}");

    if !supported {
        note(&format!(
            "{name} {major}.{minor} has no module ACL categories: checked that the module \
             loaded and said so, and that +@lock is refused"
        ));
        let log = std::fs::read_to_string(server.log_path()).unwrap();
        assert!(
            log.contains("does not support adding new ACL categories"),
            "the module should log why it has no category; log:\n{log}"
        );
        assert_err_starts(
            &cmd!(&mut admin, "ACL", "SETUSER", "locker", "+@lock"),
            "ERR",
        );
        flow_allowed(&mut admin, "app:1");
        return;
    }

    let mut in_cat: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("lock")
        .query(&mut admin)
        .unwrap();
    in_cat.sort();
    for c in [
        "lock.acquire",
        "lock.extend",
        "lock.fence",
        "lock.info",
        "lock.release",
    ] {
        assert!(in_cat.iter().any(|x| x == c), "ACL CAT lock: {in_cat:?}");
    }
    assert!(
        in_cat.iter().all(|c| c.starts_with("lock.")),
        "ACL CAT lock: {in_cat:?}"
    );

    // +@lock alone: the lock commands on the user's keys, nothing else.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "locker", "on", ">pw", "~app:*", "+@lock"),
        Ok(Value::Okay)
    );
    let mut locker = conn_as(&server, "locker");
    flow_allowed(&mut locker, "app:1");
    assert_err_starts(&cmd!(&mut locker, "GET", "app:1"), "NOPERM");
    assert_err_starts(
        &cmd!(&mut locker, "LOCK.ACQUIRE", "other:1", "t", 1000),
        "NOPERM",
    );

    // +@all -@lock: everything but the lock commands.
    assert_eq!(
        cmd!(&mut admin, "ACL", "SETUSER", "nolock", "on", ">pw", "~*", "+@all", "-@lock"),
        Ok(Value::Okay)
    );
    let mut nolock = conn_as(&server, "nolock");
    assert_eq!(cmd!(&mut nolock, "GET", "app:1"), Ok(Value::Nil));
    for args in every_command("app:1") {
        assert_err_starts(&run_args(&mut nolock, &args), "NOPERM");
    }
}
