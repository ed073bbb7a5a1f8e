//! What must not answer: operations that leave k's lock where it is (refused, on the source
//! side, on other keys or other databases) keep its waiters queued and counted.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::common::{
    acquire, args, conn_in, got, lock_info, must, panic_text, release, waiting_clients, Findings,
    Reply, Server, Waiter,
};
use crate::keyspace::{AT_ONCE, DB1_HOLDER, HOLDER, SRC_HOLDER, TTL};

/// Operations that leave k's lock where it is (refused, on the source side, on other keys or
/// other databases) must not answer its waiters: they stay queued, are counted, and the next
/// release grants the head.
#[test]
fn operations_that_leave_the_lock_in_place_keep_its_waiters() {
    // (label, db the command runs in, command, whether src / a lock at k in db 1 is set up)
    type Row = (&'static str, i64, &'static [&'static str], bool, bool);
    const ROWS: &[Row] = &[
        (
            "RENAMENX src k (refused: k exists)",
            0,
            &["RENAMENX", "src", "k"],
            true,
            false,
        ),
        (
            "COPY k k3 (k is the source)",
            0,
            &["COPY", "k", "k3"],
            false,
            false,
        ),
        (
            "COPY src k (refused without REPLACE)",
            0,
            &["COPY", "src", "k"],
            true,
            false,
        ),
        (
            "MOVE k 1 (refused: db 1 has k)",
            0,
            &["MOVE", "k", "1"],
            false,
            true,
        ),
        (
            "RENAME k k (same name)",
            0,
            &["RENAME", "k", "k"],
            false,
            false,
        ),
        (
            "PEXPIRE k 100000 (a far expiry)",
            0,
            &["PEXPIRE", "k", "100000"],
            false,
            false,
        ),
        (
            "SWAPDB 1 2 (other databases)",
            0,
            &["SWAPDB", "1", "2"],
            false,
            true,
        ),
        ("FLUSHDB in db 1", 1, &["FLUSHDB"], false, true),
        (
            "FLUSHDB ASYNC in db 1",
            1,
            &["FLUSHDB", "ASYNC"],
            false,
            true,
        ),
        ("DEL src (another lock)", 0, &["DEL", "src"], true, false),
        (
            "RENAME src k3 (another lock)",
            0,
            &["RENAME", "src", "k3"],
            true,
            false,
        ),
        (
            "SET k v NX (refused)",
            0,
            &["SET", "k", "v", "NX"],
            false,
            false,
        ),
        (
            "DEL k in db 1 (same name, other db)",
            1,
            &["DEL", "k"],
            false,
            true,
        ),
        (
            "MIGRATE k … COPY (the source stays)",
            0,
            &["MIGRATE", "127.0.0.1", "{port}", "k", "0", "5000", "COPY"],
            false,
            false,
        ),
    ];
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = ROWS
            .iter()
            .map(|&(label, db, cmd, with_src, with_db1)| {
                scope.spawn(move || {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let server = Server::new();
                        let mut admin = server.conn();
                        if with_src {
                            acquire(&mut admin, "src", SRC_HOLDER, TTL).unwrap();
                        }
                        if with_db1 {
                            acquire(&mut conn_in(&server, 1), "k", DB1_HOLDER, TTL).unwrap();
                        }
                        let fence0 = acquire(&mut admin, "k", HOLDER, TTL).unwrap();
                        let mut w = Waiter::join(&server, "k", "w", TTL, 0);
                        // MIGRATE's target.
                        let target = cmd.contains(&"{port}").then(Server::new);
                        let port = target.as_ref().map(|t| t.port.to_string());
                        let cmd: Vec<&str> = cmd
                            .iter()
                            .map(|a| match (*a, &port) {
                                ("{port}", Some(p)) => p.as_str(),
                                (a, _) => a,
                            })
                            .collect();
                        must(&mut conn_in(&server, db), &args(&cmd));
                        let mut f = Findings::default();
                        let counted = waiting_clients(&mut admin);
                        f.check(counted == 1, || {
                            format!("lock_waiting_clients is {counted}; w still waits")
                        });
                        let now = lock_info(&mut admin, "k");
                        f.check(
                            now.as_ref().is_some_and(|i| {
                                i.waiters == 1
                                    && i.holder.as_deref() == Some(HOLDER.as_bytes())
                                    && i.fence == fence0
                            }),
                            || format!("LOCK.INFO k should be unchanged, with 1 waiter: {now:?}"),
                        );
                        let early = w.reply_within(Duration::from_millis(100));
                        f.check(early.is_none(), || {
                            format!("w must keep waiting; it was answered {early:?}")
                        });
                        if early.is_none() {
                            assert_eq!(release(&mut admin, "k", HOLDER), 1);
                            let r = w.reply_within(AT_ONCE);
                            let now = lock_info(&mut admin, "k");
                            match r {
                                Some(Reply::Fence(g)) => f.check(
                                    g > fence0
                                        && now.as_ref().is_some_and(|i| {
                                            i.holder.as_deref() == Some(&b"w"[..]) && i.fence == g
                                        }),
                                    || format!("w granted fence {g}, LOCK.INFO k: {now:?}"),
                                ),
                                other => f.fail(format!(
                                    "after the release, w must be granted at once; got {}",
                                    got(&other)
                                )),
                            }
                        }
                        f.0
                    }));
                    let problems =
                        r.unwrap_or_else(|p| vec![format!("stopped: {}", panic_text(&*p))]);
                    problems
                        .into_iter()
                        .map(|p| format!("[{label}] {p}"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("row thread"))
            .collect()
    });
    Findings(problems).done("operations that leave the lock in place");
}
