//! Shared holds and replicas: a full sync, live replication of each kind of change, and
//! promotion of the replica after the master dies; master and replica are compared by
//! snapshots and by decoded `DUMP`s.

use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::dump::{compare_dumps, decode_dump, dump};
use crate::common::holds::acquire_shared;
use crate::common::holds::{holders, Pending};
use crate::common::snapshots::{compare, snap};
use crate::common::travelling_keys::{fences_go_on, populate, Populated, Went, KEYS};
use crate::common::*;

/// How late a lease end may be observed (loaded machines), and how early (none, beyond the
/// conversion between the wall and the monotonic clock).
const LATE: Duration = Duration::from_millis(500);
const EARLY: Duration = Duration::from_millis(10);
use redis::Value;

/// Waits until the replica has processed everything the master sent.
use crate::common::sync_replica as sync;

/// Master and replica hold the same (snapshots and decoded `DUMP`s).
fn mirrored(m: &Server, r: &Server, keys: &[&str], what: &str, f: &mut Findings) {
    let mut mc = m.conn();
    let mut rc = r.conn();
    sync(&mut mc);
    let a = snap(&mut mc, keys);
    let b = snap(&mut rc, keys);
    compare(&a, &b, what, f);
    for k in keys {
        compare_dumps(&mut mc, &mut rc, k, what, f);
    }
}

#[test]
fn full_sync_carries_every_hold() {
    let m = Server::new();
    let p = populate(&m);
    let r = Server::start(Opts::new().replicaof(m.port));
    let mut rc = r.conn();
    wait_link_up(&mut rc);
    let mut f = Findings::default();
    mirrored(&m, &r, &KEYS, "full sync", &mut f);
    // The waiters stay on the master only.
    let mut mc = m.conn();
    f.check(info(&mut mc, "sem").is_some_and(|i| i.waiters == 2), || {
        "master lost its waiters".into()
    });
    // The stream goes on from there.
    assert_eq!(release(&mut mc, "rw", "s2"), 1);
    mirrored(&m, &r, &KEYS, "full sync, then a release", &mut f);
    // Promoted, the replica issues fences above everything the master did.
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let p = Populated {
        holds: p.holds.into_iter().filter(|h| *h != ("rw", "s2")).collect(),
        ..p
    };
    fences_go_on(&r, &p, Went::Dataset, "full sync + promotion", &mut f);
    f.done("full sync");
}

/// Each change to shared holds reaches the replica as it happens: `LOCK.HOLDERS`,
/// `LOCK.INFO` and the decoded `DUMP` agree on master and replica after every step.
#[test]
fn live_replication_mirrors_each_change() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut f = Findings::default();
    let keys = ["L", "D", "G"];
    let step = |what: &str, f: &mut Findings| mirrored(&m, &r, &keys, what, f);

    // Acquire shared, then others join.
    acquire_shared(&mut mc, "L", "s1", 30_000, None).unwrap();
    step("acquire shared", &mut f);
    acquire_shared(&mut mc, "L", "s2", 20_000, None).unwrap();
    let t3 = Instant::now();
    acquire_shared(&mut mc, "L", "s3", 1_000, None).unwrap();
    let replied3 = Instant::now();
    step("two join", &mut f);
    // A shared holder renews its lease: same fence.
    let f1 = holders(&mut mc, "L").unwrap()[0].fence;
    assert_eq!(acquire_shared(&mut mc, "L", "s1", 40_000, None), Some(f1));
    step("renewal", &mut f);
    // One releases.
    assert_eq!(release(&mut mc, "L", "s2"), 1);
    step("release of one", &mut f);
    // One shared hold's lease ends; the others hold on.
    let ended = wait_until(Duration::from_secs(3), || {
        holders(&mut mc, "L").is_some_and(|hs| hs.iter().all(|h| h.token != "s3"))
    });
    assert!(ended, "s3's lease did not end on the master");
    let at = Instant::now();
    f.check(
        at + EARLY >= t3 + Duration::from_secs(1) && at <= replied3 + Duration::from_secs(1) + LATE,
        || format!("s3's lease of 1 s ended {:?} after its acquire", at - t3),
    );
    step("a shared hold's lease end", &mut f);
    let mut rc = r.conn();
    let d = decode_dump(&dump(&mut rc, "L"));
    let toks: Vec<&[u8]> = d.holds.iter().map(|h| h.token.as_slice()).collect();
    f.check(toks == [b"s1".as_slice()], || {
        format!("the replica still keeps an ended or released hold: {d:?}")
    });
    // LOCK.FENCE and LOCK.EXTEND on one hold.
    fence(&mut mc, "L", "s1").unwrap();
    step("LOCK.FENCE of one hold", &mut f);
    acquire_shared(&mut mc, "L", "s4", 25_000, None).unwrap();
    assert_eq!(extend(&mut mc, "L", "s4", 50_000), 1);
    step("LOCK.EXTEND of one hold", &mut f);

    // Downgrade in place, granting the shared waiter at the head at once; an exclusive
    // waiter behind it stays queued.
    let fd = acquire(&mut mc, "D", "x", 30_000).unwrap();
    let y = Pending::join(&m, "D", "y", 20_000, &["SHARED", "WAIT", "0"]);
    let z = Pending::join(&m, "D", "z", 20_000, &["WAIT", "0"]);
    step("exclusive hold with two waiters", &mut f);
    assert_eq!(acquire_shared(&mut mc, "D", "x", 25_000, None), Some(fd));
    let ry = y.reply_within(Duration::from_secs(2)).map(|(r, _)| r);
    f.check(matches!(ry, Some(Ok(Value::Int(n))) if n > fd), || {
        format!("shared waiter y after the downgrade: {ry:?}")
    });
    step("downgrade + grant to a shared waiter", &mut f);
    // Both shared holds go: the exclusive waiter is granted.
    assert_eq!(release(&mut mc, "D", "x"), 1);
    assert_eq!(release(&mut mc, "D", "y"), 1);
    let rz = z.reply_within(Duration::from_secs(2)).map(|(r, _)| r);
    f.check(matches!(rz, Some(Ok(Value::Int(_)))), || {
        format!("exclusive waiter z: {rz:?}")
    });
    step("grant to an exclusive waiter", &mut f);

    // Consecutive shared waiters granted together when the exclusive hold ends.
    acquire(&mut mc, "G", "e", 30_000).unwrap();
    let w1 = Pending::join(&m, "G", "w1", 20_000, &["SHARED", "WAIT", "0"]);
    let w2 = Pending::join(&m, "G", "w2", 15_000, &["SHARED", "WAIT", "0"]);
    assert_eq!(release(&mut mc, "G", "e"), 1);
    for (n, w) in [("w1", &w1), ("w2", &w2)] {
        let got = w.reply_within(Duration::from_secs(2)).map(|(r, _)| r);
        f.check(matches!(got, Some(Ok(Value::Int(_)))), || {
            format!("shared waiter {n}: {got:?}")
        });
    }
    step("grant to two shared waiters", &mut f);
    let g = holders(&mut rc, "G").unwrap_or_default();
    let toks: Vec<&str> = g.iter().map(|h| h.token.as_str()).collect();
    f.check(toks == ["w1", "w2"], || format!("G on the replica: {g:?}"));

    // The last holds go: the keys go on the replica too.
    for (k, t) in [
        ("G", "w1"),
        ("G", "w2"),
        ("D", "z"),
        ("L", "s1"),
        ("L", "s4"),
    ] {
        assert_eq!(release(&mut mc, k, t), 1, "release {k} {t}");
    }
    step("last releases", &mut f);
    for k in keys {
        f.check(!exists(&mut rc, k), || format!("{k} still on the replica"));
    }
    f.done("live replication");
}

/// A shared grant taken back from a client killed before its reply went out (docs/commands.md,
/// `LOCK.ACQUIRE`, "Leaving"): `MULTI; LOCK.RELEASE k x; CLIENT KILL ID <a>; EXEC` grants the
/// queued `a` inside the transaction and kills it before it is told. The grant reached the replica,
/// so its end must too: the replica holds what the master holds, nothing at a key where `a` was
/// alone, and only `b` where the shared waiter `b` was granted with `a`.
#[test]
fn a_withdrawn_shared_grant_ends_on_the_replica_too() {
    let (m, r) = replica_pair();
    let mut mc = m.conn();
    let mut rc = r.conn();
    let mut f = Findings::default();
    for (key, stays) in [("alone", None), ("with-b", Some("b"))] {
        acquire(&mut mc, key, "x", 100_000).unwrap();
        let a = Pending::join(&m, key, "a", 100_000, &["SHARED", "WAIT", "0"]);
        let b = stays.map(|t| Pending::join(&m, key, t, 100_000, &["SHARED", "WAIT", "0"]));
        let mut other = m.conn();
        exec(
            &mut other,
            &[
                args(&["LOCK.RELEASE", key, "x"]),
                args(&["CLIENT", "KILL", "ID", &a.id.to_string()]),
            ],
        );
        match a.reply_within(Duration::from_secs(2)) {
            Some((Err(e), _)) if e.starts_with("connection") => {}
            other => panic!("{key}: the killed waiter a must get no reply: {other:?}"),
        }
        if let Some(b) = &b {
            b.granted_within(Duration::from_secs(2), key);
        }
        let want: Vec<&str> = stays.into_iter().collect();
        let settled = wait_until(Duration::from_secs(2), || {
            holders(&mut mc, key).map(|hs| hs.iter().map(|h| h.token.clone()).collect::<Vec<_>>())
                == (!want.is_empty()).then(|| want.iter().map(|t| t.to_string()).collect())
        });
        assert!(
            settled,
            "{key}: the master holds {:?}, not {want:?}, after a's grant was taken back",
            holders(&mut mc, key)
        );
        sync(&mut mc);
        let on_replica = holders(&mut rc, key);
        let tokens: Vec<String> = on_replica
            .iter()
            .flatten()
            .map(|h| h.token.clone())
            .collect();
        f.check(tokens == want, || {
            format!(
                "{key}: after a's shared grant was taken back the replica holds {tokens:?} \
                 (the master {want:?}): the end of the withdrawn grant was not propagated"
            )
        });
        f.check(exists(&mut rc, key) == stays.is_some(), || {
            format!(
                "{key}: on the replica the key exists: {}",
                exists(&mut rc, key)
            )
        });
        mirrored(
            &m,
            &r,
            &[key],
            &format!("{key}: a withdrawn shared grant"),
            &mut f,
        );
    }
    f.done("a withdrawn shared grant on the replica");
}

/// The master dies; the replica is promoted: its holds are the master's, a shared hold's
/// lease and an exclusive one end on time there (and only that hold), the other holds stay,
/// and every new fence is above every fence the master issued.
#[test]
fn promoted_replica_keeps_holds_ends_leases_on_time_and_fences_go_on() {
    let (mut m, r) = replica_pair();
    let mut p = populate(&m);
    let mut mc = m.conn();
    let t_h1 = Instant::now();
    p.issued.push((
        "P",
        acquire_shared(&mut mc, "P", "h1", 3_000, None).unwrap(),
    ));
    let replied_h1 = Instant::now();
    p.issued.push((
        "P",
        acquire_shared(&mut mc, "P", "h2", 60_000, None).unwrap(),
    ));
    let t_e = Instant::now();
    p.issued
        .push(("E", acquire(&mut mc, "E", "e2", 3_500).unwrap()));
    let replied_e = Instant::now();
    sync(&mut mc);
    let mut keys = KEYS.to_vec();
    keys.extend(["P", "E"]);
    let before = snap(&mut mc, &keys);
    m.kill9();
    let mut rc = r.conn();
    assert_eq!(cmd!(&mut rc, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let after = snap(&mut rc, &keys);
    let mut f = Findings::default();
    compare(&before, &after, "promotion", &mut f);
    assert!(
        replied_h1.elapsed() < Duration::from_millis(2_500),
        "test machine too slow: the promotion took until h1's lease end"
    );

    // The leases end on time on the new master, h1 alone on P.
    let (mut h1_end, mut e_end) = (None, None);
    wait_until(Duration::from_secs(8), || {
        if h1_end.is_none()
            && holders(&mut rc, "P").is_some_and(|hs| hs.iter().all(|h| h.token != "h1"))
        {
            h1_end = Some(Instant::now());
        }
        if e_end.is_none() && !exists(&mut rc, "E") {
            e_end = Some(Instant::now());
        }
        h1_end.is_some() && e_end.is_some()
    });
    for (what, end, sent, replied, ttl) in [
        ("P h1 (shared)", h1_end, t_h1, replied_h1, 3_000),
        ("E e2 (exclusive)", e_end, t_e, replied_e, 3_500),
    ] {
        let ttl = Duration::from_millis(ttl);
        match end {
            Some(end) => f.check(
                end + EARLY >= sent + ttl && end <= replied + ttl + LATE,
                || {
                    format!(
                        "{what}: lease of {ttl:?} ended {:?} after its acquire on the new master",
                        end - sent
                    )
                },
            ),
            None => f.fail(format!("{what}: lease did not end on the new master")),
        }
    }
    match holders(&mut rc, "P").as_deref() {
        Some([h]) => f.check(h.token == "h2" && h.mode == "shared", || {
            format!("P: {h:?}")
        }),
        other => f.fail(format!("P after h1's lease end: {other:?}")),
    }
    let d = decode_dump(&dump(&mut rc, "P"));
    f.check(d.holds.len() == 1 && d.holds[0].token == b"h2", || {
        format!("P keeps the ended hold: {d:?}")
    });
    p.holds.push(("P", "h2"));
    fences_go_on(&r, &p, Went::Dataset, "promotion", &mut f);
    let mut rc = r.conn();
    let n = acquire(&mut rc, "E", "new", 1_000);
    f.check(n.is_some_and(|n| n > p.max()), || {
        format!("E after its lease end on the new master: {n:?}")
    });
    f.done("promotion");
}
