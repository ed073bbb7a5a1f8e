//! The `INFO lock` section: each counter moves by exactly what happened, the gauges follow
//! keys and clients, and a lease end found by a command rather than the sweep is counted and
//! announced all the same.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::Waiter;
use crate::common::*;
use crate::integration::notifications::Subscriber;
use crate::integration::{wait_for_waiters, LEASE_WAIT};
use redis::{Connection, Value};

const COUNTERS: [&str; 15] = [
    "acquires",
    "contended_acquires",
    "releases",
    "extends",
    "fences",
    "lease_ends",
    "grants",
    "wait_timeouts",
    "observers_answered",
    "evictions",
    "guarded_runs",
    "guarded_refusals",
    "replica_loss_pauses",
    "stalls",
    "stall_refusals",
];
const GAUGES: [&str; 3] = ["held", "waiting_clients", "observing_clients"];
/// States: `propagating`, 0 or 1 (tests/replication/propagation.rs follows it), and the
/// fence epoch (tests/replication/fence_epochs.rs).
const STATES: [&str; 2] = ["propagating", "fence_epoch"];

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
    let mut d = Waiter::send(&server, k, "d", 300, 10_000);
    wait_for_waiters(&mut con, k, 1);
    st.step("a WAIT that queued", &[("contended_acquires", 1)]);
    st.gauges("a WAIT that queued", 1, 1);

    assert_eq!(extend(&mut con, k, "a", 10_000), 1);
    st.step("an extend", &[("extends", 1)]);

    let f2 = fence(&mut con, k, "a").expect("holder");
    assert!(f2 > f1);
    st.step("a fence", &[("fences", 1)]);

    assert_eq!(release(&mut con, k, "a"), 1);
    let f3 = d.reply().expect("d is granted on release");
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
    let mut g = Waiter::send(&server, k, "g", 10_000, 10_000);
    wait_for_waiters(&mut con, k, 1);
    let fg = g.reply().expect("g is granted when e's lease ends");
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

    let mut w1 = Waiter::send(&server, "g:1", "w1", 30_000, 0);
    wait_for_waiters(&mut con, "g:1", 1);
    let mut w2 = Waiter::send(&server, "g:1", "w2", 30_000, 0);
    wait_for_waiters(&mut con, "g:1", 2);
    let mut w3 = Waiter::send(&server, "g:2", "w3", 30_000, 0);
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
    assert!(w1.reply().is_some());
    st.gauges("a grant", 3, 2);
    assert_eq!(release(&mut con, "g:1", "w1"), 1);
    assert!(w2.reply().is_some());
    assert_eq!(release(&mut con, "g:2", "a"), 1);
    assert!(w3.reply().is_some());
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
    let mut w = Waiter::send(&server, k, "w", 10_000, 10_000);
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
    assert!(w.reply().is_some(), "w is granted");
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
