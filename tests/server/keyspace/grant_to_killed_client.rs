//! Undelivered grant, killed: a grant whose client is killed in the same transaction, before
//! it is told, passes to the next waiter.

use std::time::Duration;

use crate::common::{
    acquire, args, exec, got, lock_info, release, waiting_clients, Findings, Reply, Server, Waiter,
};
use crate::keyspace::{AT_ONCE, HOLDER, TTL};

/// `MULTI; LOCK.RELEASE k holder; CLIENT KILL ID <head>; EXEC`: the grant made to the head is
/// not delivered (its client is gone), so it passes to the next waiter, who gets a fence and is
/// `LOCK.INFO`'s holder. Also with a `WAIT` timeout on the killed head, and with the first two
/// waiters killed in the same transaction.
#[test]
fn a_grant_whose_client_is_killed_before_delivery_passes_to_the_next_waiter() {
    let mut f = Findings::default();
    for (label, head_timeout, kill_two) in [
        ("head WAIT 0", 0, false),
        ("head WAIT 5000", 5000, false),
        ("two killed", 0, true),
    ] {
        let server = Server::new();
        let mut con = server.conn();
        let fence0 = acquire(&mut con, "k", HOLDER, TTL).unwrap();
        let mut a = Waiter::join(&server, "k", "a", TTL, head_timeout);
        let mut b = Waiter::join(&server, "k", "b", TTL, 5000);
        let mut c = Waiter::join(&server, "k", "c", TTL, 0);
        let mut cmds = vec![
            args(&["LOCK.RELEASE", "k", HOLDER]),
            args(&["CLIENT", "KILL", "ID", &a.id.to_string()]),
        ];
        if kill_two {
            cmds.push(args(&["CLIENT", "KILL", "ID", &b.id.to_string()]));
        }
        exec(&mut con, &cmds);
        let (next, rest) = if kill_two {
            (&mut c, None)
        } else {
            (&mut b, Some(&mut c))
        };
        let r = next.reply_within(AT_ONCE);
        let now = lock_info(&mut con, "k");
        match r {
            Some(Reply::Fence(g)) => f.check(
                g > fence0
                    && now.as_ref().is_some_and(|i| {
                        i.holder.as_deref() == Some(next.token.as_bytes())
                            && i.fence == g
                            && i.waiters == i64::from(!kill_two)
                    }),
                || format!("[{label}] {} granted {g}; LOCK.INFO k: {now:?}", next.token),
            ),
            other => f.fail(format!(
                "[{label}] {} must be granted the lock at once; got {}; LOCK.INFO k: {now:?}",
                next.token,
                got(&other)
            )),
        }
        let killed = a.closed_within(Duration::from_secs(2));
        f.check(killed == Ok(true), || {
            format!("[{label}] the killed head must get no reply: {killed:?}")
        });
        let counted = waiting_clients(&mut con);
        f.check(counted == i64::from(!kill_two), || {
            format!("[{label}] lock_waiting_clients is {counted}")
        });
        if let Some(c) = rest {
            assert_eq!(release(&mut con, "k", "b"), 1, "[{label}] release by b");
            let r = c.reply_within(AT_ONCE);
            f.check(matches!(r, Some(Reply::Fence(_))), || {
                format!("[{label}] c must be granted after b's release: {}", got(&r))
            });
        }
    }
    f.done("undelivered grant to a killed client");
}
