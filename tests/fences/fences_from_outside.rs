//! Fences accepted from outside (`RESTORE`, RDB, `LOCK.APPLY` from a master or an AOF):
//! one at the top of the accepted range leaves room for the reload bound, and one far
//! above the clock floor stays behind every later fence, on the key, on fresh keys, after
//! restarts, on a promoted replica and after an AOF replay.

use crate::bursts::fences_in_one_script;
use crate::clock::{now_ms, server_time_us};
use crate::cmd;
use crate::common::*;
use crate::payloads::{far_fence, held, restore};
use crate::retries::{acquire_ready, fence_ready};
use crate::{BUCKET, CLOCK_SLACK_MS, EPOCHS, MAX_FENCE, SLOTS_PER_MS, TOP};
use redis::Value;

/// A lock at the top of the range accepted from outside (2^53-1-2^32), saved, then SIGKILL:
/// the reload raises the high-water mark by a full bucket's 16,384 slots plus 2,048 for each millisecond
/// since the save, and the 2^32 left above the top are more than enough for it: fences go on,
/// on that key and on fresh ones. One above the top is refused.
#[test]
fn a_lock_at_the_top_of_the_range_leaves_room_for_the_reload_bound() {
    let mut s = Server::new();
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    let now = now_ms();
    let hold = |t: &str, f: i64| dump::SavedHold::new(t, now + 600_000, f as u64);
    // One above the top: as a hold's fence, as the key's last fence only (version 3), and in
    // a version-2 payload.
    for (what, over) in [
        ("version 3", held(&fmt, "t", TOP + 1)),
        (
            "version 3, last fence only",
            fmt.v3(
                dump::SHARED,
                (TOP + 1) as u64,
                now,
                vec![hold("a", TOP - 1), hold("b", TOP)],
            ),
        ),
        (
            "version 2",
            fmt.v2("t", now + 600_000, (TOP + 1) as u64, now),
        ),
    ] {
        let r = cmd!(&mut c, "RESTORE", "over", 0, over);
        assert!(
            r.as_ref().is_err_and(|e| e.starts_with("ERR")),
            "{what}: {r:?}"
        );
        assert!(!exists(&mut c, "over"), "{what}");
    }
    restore(&mut c, "top", &held(&fmt, "t", TOP));
    let saved_from = server_time_us(&mut c) / 1000;
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    let loaded_by = server_time_us(&mut c) / 1000;
    assert_eq!(info(&mut c, "top").map(|i| i.fence), Some(TOP));
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    // The mark after the load: TOP + the bucket's slots + SLOTS_PER_MS × (load - save + 1),
    // with the load and the save somewhere between the two TIMEs (and the module's clock
    // within the slack); the fence is the next one of the server's epoch above it.
    let most_ms = loaded_by - saved_from + 1 + 2 * CLOCK_SLACK_MS;
    let bucket = BUCKET * EPOCHS;
    assert!(
        (TOP + bucket + SLOTS_PER_MS + 1..=TOP + bucket + SLOTS_PER_MS * most_ms + EPOCHS)
            .contains(&fresh),
        "after the reload a fresh key got TOP + {}; the bound is TOP + {bucket} + \
         {SLOTS_PER_MS} × (ms since the save + 1), at most {most_ms} ms",
        fresh - TOP
    );
    let next = fence_ready(&mut c, "top", "t");
    assert_eq!(next, fresh + EPOCHS);
    assert!(MAX_FENCE - next > 1 << 31, "room left above {next}");
}

// --------------------------------------------------- fences far above the floor (RESTORE)

/// A lock restored with a fence an hour above the clock floor: the fences after it are above
/// it on the key, on a fresh key once it is deleted, after `SAVE` and a restart with no lock
/// left to carry it (the RDB's aux data must), and after `SAVE`, as many more fences as the
/// bucket gives (a full bucket at once, then 512 a millisecond) and a SIGKILL (the reload
/// bound must cover them).
#[test]
fn fences_far_above_the_floor_stay_behind_every_later_fence() {
    let mut s = Server::new();
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    let far = far_fence();
    restore(&mut c, "far", &held(&fmt, "t", far));
    for k in 1..=3 {
        assert_eq!(
            fence(&mut c, "far", "t"),
            Some(far + k * EPOCHS),
            "continues above it"
        );
    }
    let mut max = far + 3 * EPOCHS;

    // (i) The key goes; a fresh key starts above it.
    assert_eq!(cmd!(&mut c, "DEL", "far"), Ok(Value::Int(1)));
    let other = acquire(&mut c, "other", "o", 60_000).unwrap();
    assert!(other > max, "fresh key {other} after deleting fence {max}");
    max = other;
    assert_eq!(release(&mut c, "other", "o"), 1);
    let r = cmd!(&mut c, "FLUSHALL");
    assert_eq!(r, Ok(Value::Okay));
    let other = acquire(&mut c, "other", "o", 60_000).unwrap();
    assert!(other > max, "after FLUSHALL: {other} <= {max}");
    max = other;
    assert_eq!(release(&mut c, "other", "o"), 1);

    // (ii) SAVE with no lock in the dataset, restart: only the aux data knows the mark.
    assert_eq!(cmd!(&mut c, "DBSIZE"), Ok(Value::Int(0)));
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after = acquire_ready(&mut c, "after-restart", "a", 60_000);
    assert!(
        after > max,
        "after SAVE and a restart a fresh key got {after}, but {max} was issued before \
         ({} ms of floor below it)",
        (max - after) / SLOTS_PER_MS
    );
    max = after;

    // (iii) Another far lock; SAVE; as many fences on top of it as the bucket gives;
    // SIGKILL; restart from that RDB.
    let far2 = max + 1_000_000;
    restore(&mut c, "far2", &held(&fmt, "t2", far2));
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));
    let (mut issued, mut top) = (0, far2);
    for _ in 0..4 {
        let b = fences_in_one_script(&mut c, "far2", "t2", 20_000);
        issued += b.got;
        top = top.max(b.last);
    }
    assert!(issued > BUCKET, "{issued} fences");
    assert_eq!(info(&mut c, "far2").unwrap().fence, top);
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    assert_eq!(
        info(&mut c, "far2").map(|i| i.fence),
        Some(far2),
        "the RDB's far2"
    );
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    assert!(
        fresh > top,
        "after SIGKILL a fresh key got {fresh}, but {top} was issued before ({issued} fences \
         after the SAVE)"
    );
    let next = fence_ready(&mut c, "far2", "t2");
    assert!(next > top && next > fresh, "far2: {next} after {top}");
}

/// A replica learns a fence from `LOCK.APPLY`: a far fence `RESTORE`d on the master, fenced
/// further and released there, is behind every fence the promoted replica issues.
#[test]
fn a_replica_learns_fences_from_the_master_stream() {
    let (m, r) = replica_pair();
    let mut cm = m.conn();
    let mut cr = r.conn();
    let fmt = dump::Format::of(&mut cm);
    let far = far_fence();
    restore(&mut cm, "far", &held(&fmt, "t", far));
    let mut top = far;
    for _ in 0..5 {
        top = fence(&mut cm, "far", "t").unwrap();
    }
    assert_eq!(top, far + 5 * EPOCHS);
    assert_eq!(release(&mut cm, "far", "t"), 1);
    assert_eq!(cmd!(&mut cm, "WAIT", 1, 5_000), Ok(Value::Int(1)));
    assert!(!exists(&mut cr, "far"));
    assert_eq!(cmd!(&mut cr, "REPLICAOF", "NO", "ONE"), Ok(Value::Okay));
    let fresh = acquire(&mut cr, "fresh", "f", 60_000).unwrap();
    assert!(
        fresh > top,
        "the promoted replica issued {fresh}, but the master issued {top} (the RESTOREd fence \
         was {far})"
    );
}

/// The AOF teaches the same on replay: a far fence `RESTORE`d, fenced further (`LOCK.APPLY`
/// in the AOF) and released, is behind every fence after a restart.
#[test]
fn an_aof_replay_learns_fences_from_lock_apply() {
    let mut s = Server::start(Opts::new().appendonly());
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    let far = far_fence();
    restore(&mut c, "far", &held(&fmt, "t", far));
    let mut top = far;
    for _ in 0..5 {
        top = fence(&mut c, "far", "t").unwrap();
    }
    assert_eq!(release(&mut c, "far", "t"), 1);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert!(!exists(&mut c, "far"));
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    assert!(
        fresh > top,
        "after an AOF replay a fresh key got {fresh}, but {top} was issued (RESTOREd: {far})"
    );
}
