//! AOF rewrites, with and without the RDB preamble: a released lock's fence far above the
//! floor has no lock left to carry it, and the next fence after a restart must be above it
//! all the same. Only a rewrite without the preamble gets the high-water mark as
//! `LOCK.HIGHWATER`: a fork that writes an RDB (`BGSAVE`, a save point, a replica's sync, a
//! preamble) has it in the RDB's aux data, and leaves an idle server idle (issue 22: a mark
//! propagated for every fork counted as a change, so a save point forked for ever).

use std::time::Duration;

use crate::clock::now_ms;
use crate::cmd;
use crate::common::*;
use crate::payloads::{far_fence, held, restore};
use crate::retries::acquire_ready;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The arguments of the `LOCK.HIGHWATER` commands in an AOF file.
fn highwater_args(file: &[u8]) -> Vec<(i64, i64)> {
    aof::two_int_args(file, "LOCK.HIGHWATER")
}

/// A lock with a fence far above the floor, released, then `BGREWRITEAOF`: the rewritten AOF
/// has no lock to carry the fence, but the next fence after a restart is above it all the
/// same (in the RDB preamble's aux data, and in the `LOCK.HIGHWATER` written after the
/// rewrite began, which is all a preamble-less AOF has).
fn aof_rewrite_keeps_a_released_fence_behind(preamble: bool) {
    let opts = Opts::new().appendonly();
    let mut s = Server::start(if preamble {
        opts
    } else {
        opts.no_rdb_preamble()
    });
    let mut c = s.conn();
    let fmt = dump::Format::of(&mut c);
    let far = far_fence();
    restore(&mut c, "far", &held(&fmt, "t", far));
    let mut top = far;
    for _ in 0..3 {
        top = fence(&mut c, "far", "t").unwrap();
    }
    assert_eq!(release(&mut c, "far", "t"), 1);
    let started = now_ms();
    assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
    wait_persistence_idle_within(&mut c, Duration::from_secs(30));
    assert_eq!(
        info_field(&mut c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    // What the rewritten AOF holds: no trace of the lock, and the mark.
    let files = aof::files(&s);
    let base = &files.iter().find(|(k, _)| k == "b").expect("a base file").1;
    // An RDB preamble starts with the RDB magic: `REDIS`, or `VALKEY` from Valkey 9.
    assert_eq!(
        base.starts_with(b"REDIS") || base.starts_with(b"VALKEY"),
        preamble,
        "the base file's format"
    );
    for (kind, f) in &files {
        for gone in [&b"RESTORE"[..], b"LOCK.APPLY", b"LOCK.RELEASE"] {
            assert!(
                !contains(f, gone) && !contains(f, &gone.to_ascii_lowercase()),
                "the rewritten AOF ({kind} file) still has {}",
                String::from_utf8_lossy(gone)
            );
        }
    }
    let marks: Vec<(i64, i64)> = files
        .iter()
        .filter(|(k, _)| k == "i")
        .flat_map(|(_, f)| highwater_args(f))
        .collect();

    drop(c);
    s.restart();
    let mut c = s.conn();
    assert!(!exists(&mut c, "far"));
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    assert!(
        fresh > top,
        "after BGREWRITEAOF (RDB preamble: {preamble}) and a restart a fresh key got {fresh}, \
         but {top} was issued before; LOCK.HIGHWATER (mark, ms) in the rewritten AOF: {marks:?}"
    );
    // Without the preamble, the mark the module writes after the rewrite began is all there is.
    if !preamble {
        assert_eq!(marks.len(), 1, "LOCK.HIGHWATER in the new AOF: {marks:?}");
        let (hw, saved_ms) = marks[0];
        assert_eq!(hw, top, "the mark written after the rewrite");
        assert!(
            (started - 1_000..=now_ms()).contains(&saved_ms),
            "its time {saved_ms} (rewrite started at {started})"
        );
    }
}

#[test]
fn aof_rewrite_with_rdb_preamble_keeps_a_released_fence_behind() {
    aof_rewrite_keeps_a_released_fence_behind(true);
}

#[test]
fn aof_rewrite_without_rdb_preamble_keeps_a_released_fence_behind() {
    aof_rewrite_keeps_a_released_fence_behind(false);
}

// ------------------------------------------------------------ forks that need no mark

/// `rdb_changes_since_last_save`.
fn changes(c: &mut redis::Connection) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .and_then(|v| v.parse().ok())
        .expect("INFO persistence has rdb_changes_since_last_save")
}

/// `total_forks` of `INFO stats`.
fn forks(c: &mut redis::Connection) -> i64 {
    info_field(c, "stats", "total_forks")
        .and_then(|v| v.parse().ok())
        .expect("INFO stats has total_forks")
}

/// A server that issued a fence (the high-water mark is above 0) and released its lock:
/// nothing is left to change, and no save or rewrite runs.
fn idle_after_a_fence(s: &Server) -> redis::Connection {
    let mut c = s.conn();
    acquire(&mut c, "k", "t", 60_000).unwrap();
    assert_eq!(release(&mut c, "k", "t"), 1);
    wait_persistence_idle_within(&mut c, Duration::from_secs(30));
    c
}

/// Long enough for anything a fork set off to land: the module's sweep runs the next
/// millisecond, the child's save ends within tens of them.
const SETTLE: Duration = Duration::from_millis(300);

/// A fork that writes an RDB (`BGSAVE`, a replica's full sync) or an AOF with its RDB preamble
/// carries the high-water mark in the RDB's aux data: on an idle server it changes nothing,
/// so it leaves no change since the last save (as on a server without the module), with the
/// AOF off, on, and on without the preamble (where only a rewrite needs the mark).
#[test]
fn a_fork_on_an_idle_server_that_needs_no_mark_leaves_no_change_behind() {
    for (what, opts) in [
        ("AOF off", Opts::new()),
        ("AOF with the RDB preamble", Opts::new().appendonly()),
        (
            "AOF without the RDB preamble",
            Opts::new().appendonly().no_rdb_preamble(),
        ),
    ] {
        let s = Server::start(opts);
        let mut c = idle_after_a_fence(&s);
        assert_eq!(cmd!(&mut c, "SAVE"), Ok(redis::Value::Okay), "{what}: SAVE");
        assert_eq!(changes(&mut c), 0, "{what}: after SAVE");
        for round in 1..=2 {
            let before = forks(&mut c);
            assert!(cmd!(&mut c, "BGSAVE").is_ok(), "{what}: BGSAVE");
            wait_persistence_idle_within(&mut c, Duration::from_secs(30));
            std::thread::sleep(SETTLE);
            assert_eq!(forks(&mut c), before + 1, "{what}: BGSAVE forks once");
            assert_eq!(
                changes(&mut c),
                0,
                "{what}: BGSAVE #{round} on an idle server left a change behind \
                 (LOCK.HIGHWATER propagated for a fork that writes an RDB?)"
            );
        }
        // A replica's full synchronisation forks for the RDB it sends.
        let before = forks(&mut c);
        let r = Server::start(Opts::new().replicaof(s.port));
        wait_link_up(&mut r.conn());
        wait_persistence_idle_within(&mut c, Duration::from_secs(30));
        std::thread::sleep(SETTLE);
        assert!(forks(&mut c) > before, "{what}: the replica's sync forked");
        assert_eq!(
            changes(&mut c),
            0,
            "{what}: a replica's full sync left a change behind on its idle master"
        );
        if what == "AOF with the RDB preamble" {
            assert!(cmd!(&mut c, "BGREWRITEAOF").is_ok());
            wait_persistence_idle_within(&mut c, Duration::from_secs(30));
            std::thread::sleep(SETTLE);
            assert_eq!(
                changes(&mut c),
                0,
                "{what}: BGREWRITEAOF (its RDB preamble has the mark) left a change behind"
            );
            let marks: Vec<(i64, i64)> = aof::files(&s)
                .iter()
                .filter(|(k, _)| k == "i")
                .flat_map(|(_, f)| highwater_args(f))
                .collect();
            assert!(
                marks.is_empty(),
                "{what}: LOCK.HIGHWATER in the AOF: {marks:?}"
            );
        }
    }
}

/// With a save point of one change in one second, an idle server saves the changes it has,
/// once, and then never forks again: a save that propagated the high-water mark would count
/// a change, and fork again every two seconds for ever. With the AOF off, and with the AOF on
/// without the RDB preamble (where a rewrite, not a save, needs the mark).
#[test]
fn an_idle_server_with_a_save_point_stops_forking() {
    let servers: Vec<(&str, Server)> = [
        ("AOF off", Opts::new()),
        (
            "AOF without the RDB preamble",
            Opts::new().appendonly().no_rdb_preamble(),
        ),
    ]
    .into_iter()
    .map(|(what, opts)| (what, Server::start(opts)))
    .collect();
    let mut cons = Vec::new();
    for (what, s) in &servers {
        let mut c = idle_after_a_fence(s);
        let before = forks(&mut c);
        assert_eq!(
            cmd!(&mut c, "CONFIG", "SET", "save", "1 1"),
            Ok(redis::Value::Okay)
        );
        // The acquire and the release are saved within about two seconds.
        let saved = wait_until(Duration::from_secs(10), || forks(&mut c) > before);
        assert!(
            saved,
            "{what}: no save within 10 s of `save 1 1` with changes"
        );
        wait_persistence_idle_within(&mut c, Duration::from_secs(30));
        cons.push((*what, c));
    }
    std::thread::sleep(SETTLE);
    let at: Vec<i64> = cons.iter_mut().map(|(_, c)| forks(c)).collect();
    std::thread::sleep(Duration::from_secs(4));
    for ((what, c), at) in cons.iter_mut().zip(at) {
        let now = forks(c);
        assert_eq!(
            (now - at, changes(c)),
            (0, 0),
            "{what}: an idle server with `save 1 1` forked {} more times in 4 s and has \
             changes since its last save",
            now - at
        );
    }
}

/// The AOF switched on while the server runs, without the RDB preamble: its first file is a
/// rewrite, and the mark follows it.
#[test]
fn the_aof_switched_on_without_the_rdb_preamble_gets_the_mark() {
    let s = Server::start(Opts::new().no_rdb_preamble());
    let mut c = s.conn();
    acquire(&mut c, "k", "t", 60_000).unwrap();
    let top = fence(&mut c, "k", "t").unwrap();
    assert_eq!(release(&mut c, "k", "t"), 1);
    assert_eq!(
        cmd!(&mut c, "CONFIG", "SET", "appendonly", "yes"),
        Ok(redis::Value::Okay)
    );
    wait_persistence_idle_within(&mut c, Duration::from_secs(30));
    let marks: Vec<(i64, i64)> = aof::files(&s)
        .iter()
        .filter(|(k, _)| k == "i")
        .flat_map(|(_, f)| highwater_args(f))
        .collect();
    assert_eq!(
        marks.iter().map(|m| m.0).collect::<Vec<_>>(),
        [top],
        "LOCK.HIGHWATER in the AOF switched on without the RDB preamble: {marks:?}"
    );
}
