//! One token, one hold (docs/commands.md, `LOCK.ACQUIRE`: the same token asking again renews its
//! hold under the same fence), however the second request arrives: queued twice from two
//! connections (a retry from a pool), queued behind its own grant, after a downgrade, or with the
//! first grant taken back because its client left. Each state must also save, restore, reload and
//! replicate: a lock with one token twice was refused by the loader.

use std::time::{Duration, Instant};

use crate::common::holds::{assert_same_holds, holders, tokens, Hold, Pending};
use crate::common::{release, replica_pair, run, wait_replicas, wait_until, Server};
use crate::shared::{exclusive, holds, AT_ONCE, TTL};
use redis::{Connection, Value};

/// Two connections queue the same shared request with one token: both are told the same
/// fence, the key has one hold, and `LIMIT 2` still has a permit for another token.
#[test]
fn one_token_queued_twice_shared_holds_once() {
    let (master, replica) = replica_pair();
    let mut c = master.conn();
    exclusive(&mut c, "k", "x", TTL);
    let opts = ["SHARED", "LIMIT", "2", "WAIT", "5000"];
    let first = Pending::join(&master, "k", "a", TTL, &opts);
    let again = Pending::join(&master, "k", "a", TTL, &opts);
    assert_eq!(release(&mut c, "k", "x"), 1);
    let (f1, _) = first.granted_within(AT_ONCE, "first request");
    let (f2, _) = again.granted_within(AT_ONCE, "the same request again");
    assert_eq!(f1, f2, "one token, one hold, one fence");
    let hs = holds(&mut c, "k");
    assert_eq!(tokens(&hs), ["a"], "{hs:?}");
    assert_eq!(hs[0].fence, f1);
    // The second permit is free for another token.
    let b = crate::shared::try_shared(&mut c, "k", "b", TTL, &["LIMIT", "2"]);
    assert!(b.is_some(), "LIMIT 2 with one hold admits b");
    survives_everywhere(&replica, &mut c);
    // One release ends a's hold everywhere.
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(tokens(&holds(&mut c, "k")), ["b"]);
    survives_everywhere(&replica, &mut c);
}

/// Exclusive: the second request of a token, queued behind the first, renews the hold the
/// first was granted (same fence) as soon as it is at the head.
#[test]
fn one_token_queued_twice_exclusive_renews() {
    let (master, replica) = replica_pair();
    let mut c = master.conn();
    exclusive(&mut c, "k", "x", TTL);
    let first = Pending::join(&master, "k", "a", 5_000, &["WAIT", "5000"]);
    let again = Pending::join(&master, "k", "a", TTL, &["WAIT", "5000"]);
    assert_eq!(release(&mut c, "k", "x"), 1);
    let (f1, _) = first.granted_within(AT_ONCE, "first request");
    let (f2, _) = again.granted_within(AT_ONCE, "the same request again");
    assert_eq!(f1, f2);
    let hs = holds(&mut c, "k");
    assert_eq!(tokens(&hs), ["a"]);
    assert!(
        hs[0].ttl > 5_000,
        "renewed to the second request's ttl: {hs:?}"
    );
    survives_everywhere(&replica, &mut c);
    // A reload answers waiters (the key was replaced), so z queues after it.
    let behind = Pending::join(&master, "k", "z", TTL, &["WAIT", "5000"]);
    behind.still_waiting(Duration::from_millis(200), "z waits for a");
    assert_eq!(release(&mut c, "k", "a"), 1);
    behind.granted_within(AT_ONCE, "z after a");
}

/// An exclusive grant to a, then a's queued shared request: a downgrade in place (same
/// fence), not a second hold; the shared request behind it joins.
#[test]
fn one_token_queued_exclusive_then_shared_downgrades() {
    let (master, replica) = replica_pair();
    let mut c = master.conn();
    exclusive(&mut c, "k", "x", TTL);
    let write = Pending::join(&master, "k", "a", TTL, &["WAIT", "5000"]);
    let read = Pending::join(&master, "k", "a", TTL, &["SHARED", "WAIT", "5000"]);
    let other = Pending::join(&master, "k", "b", TTL, &["SHARED", "WAIT", "5000"]);
    assert_eq!(release(&mut c, "k", "x"), 1);
    let (f1, _) = write.granted_within(AT_ONCE, "exclusive grant");
    let (f2, _) = read.granted_within(AT_ONCE, "downgrade");
    other.granted_within(AT_ONCE, "b joins the downgraded hold");
    assert_eq!(f1, f2);
    let hs = holds(&mut c, "k");
    assert_eq!(tokens(&hs), ["a", "b"], "{hs:?}");
    assert!(hs.iter().all(|h| h.mode == "shared"), "{hs:?}");
    survives_everywhere(&replica, &mut c);
}

/// The first of two requests of one token is granted and its client killed before the
/// reply goes out; the second was told it holds the lock (a renewal of the same hold). The
/// departed client's grant is not taken back from under it, on the master or the replica.
#[test]
fn a_withdrawn_grant_of_a_repeated_token_stays_with_the_other_request() {
    let (master, replica) = replica_pair();
    let mut c = master.conn();
    exclusive(&mut c, "k", "x", TTL);
    let opts = ["SHARED", "WAIT", "5000"];
    let doomed = Pending::join(&master, "k", "a", TTL, &opts);
    let again = Pending::join(&master, "k", "a", TTL, &opts);
    let killed = transaction(
        &mut c,
        &["LOCK.RELEASE k x", &format!("CLIENT KILL ID {}", doomed.id)],
    );
    assert_eq!(killed, vec![Value::Int(1), Value::Int(1)], "{killed:?}");
    let (f, _) = again.granted_within(AT_ONCE, "the request that stayed");
    std::thread::sleep(Duration::from_millis(100)); // the sweep takes withdrawals back
    let hs = holds(&mut c, "k");
    assert_eq!(tokens(&hs), ["a"], "{hs:?}");
    assert_eq!(hs[0].fence, f);
    survives_everywhere(&replica, &mut c);

    // Without the second request, the departed client's grant is taken back, there too.
    exclusive(&mut c, "j", "x", TTL);
    let alone = Pending::join(&master, "j", "a", TTL, &opts);
    transaction(
        &mut c,
        &["LOCK.RELEASE j x", &format!("CLIENT KILL ID {}", alone.id)],
    );
    let gone = wait_until(Duration::from_secs(2), || holders(&mut c, "j").is_none());
    assert!(
        gone,
        "a's undelivered grant was not taken back: {:?}",
        holders(&mut c, "j")
    );
    survives_everywhere(&replica, &mut c);

    // Both requests of one token leave before either is told: nobody holds the hold, so it
    // is taken back, and the waiter behind them gets the lock.
    exclusive(&mut c, "i", "x", TTL);
    let one = Pending::join(&master, "i", "a", TTL, &opts);
    let two = Pending::join(&master, "i", "a", TTL, &opts);
    let next = Pending::join(&master, "i", "z", TTL, &["WAIT", "5000"]);
    let kill = |p: &Pending| format!("CLIENT KILL ID {}", p.id);
    transaction(&mut c, &["LOCK.RELEASE i x", &kill(&one), &kill(&two)]);
    next.granted_within(AT_ONCE, "z, once both of a's grants were taken back");
    assert_eq!(tokens(&holds(&mut c, "i")), ["z"]);
    survives_everywhere(&replica, &mut c);
}

/// `MULTI`, `commands`, `EXEC`: the replies of `EXEC`.
fn transaction(c: &mut Connection, commands: &[&str]) -> Vec<Value> {
    redis::cmd("MULTI").query::<()>(c).expect("MULTI");
    for line in commands {
        let mut cmd = redis::Cmd::new();
        for word in line.split(' ') {
            cmd.arg(word);
        }
        cmd.query::<()>(c).expect("queued");
    }
    match run(&redis::cmd("EXEC"), c) {
        Ok(Value::Array(replies)) => replies,
        other => panic!("EXEC: {other:?}"),
    }
}

/// The locks of db 0 as they are now: `DUMP`/`RESTORE` gives each back, `DEBUG RELOAD`
/// keeps them, and the replica holds the same.
fn survives_everywhere(replica: &Server, c: &mut Connection) {
    let seen = Instant::now();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).expect("KEYS");
    let before: Vec<(String, Vec<Hold>)> = keys
        .iter()
        .filter_map(|k| holders(c, k).map(|hs| (k.clone(), loose(hs))))
        .collect();
    for (k, hs) in &before {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(k).query(c).expect("DUMP");
        let copy = format!("{k}:restored");
        let restored = run(
            redis::cmd("RESTORE")
                .arg(&copy)
                .arg(0)
                .arg(dump)
                .arg("REPLACE"),
            c,
        );
        assert_eq!(restored, Ok(Value::Okay), "RESTORE of {k}'s own DUMP");
        assert_same_holds(
            hs,
            &holds(c, &copy),
            seen.elapsed(),
            &format!("{k} restored"),
        );
        redis::cmd("DEL").arg(&copy).query::<i64>(c).expect("DEL");
    }
    assert_eq!(
        wait_replicas(c, 1, 2000),
        Ok(Value::Int(1)),
        "replica acked"
    );
    let mut r = replica.conn();
    for (k, hs) in &before {
        let on_replica = holders(&mut r, k).unwrap_or_default();
        assert_same_holds(
            hs,
            &on_replica,
            seen.elapsed(),
            &format!("{k} on the replica"),
        );
    }
    let reloaded = run(redis::cmd("DEBUG").arg("RELOAD"), c);
    assert_eq!(reloaded, Ok(Value::Okay), "DEBUG RELOAD");
    for (k, hs) in &before {
        assert_same_holds(
            hs,
            &holds(c, k),
            seen.elapsed(),
            &format!("{k} after DEBUG RELOAD"),
        );
    }
}

/// Holds as another copy may show them: deadlines travel in whole milliseconds (as Unix
/// time, or as the time left), so a copy's ttl may read up to a millisecond or two higher.
fn loose(hs: Vec<Hold>) -> Vec<Hold> {
    hs.into_iter()
        .map(|h| Hold {
            ttl: h.ttl + 2,
            ..h
        })
        .collect()
}
