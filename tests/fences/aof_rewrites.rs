//! AOF rewrites, with and without the RDB preamble: a released lock's fence far above the
//! floor has no lock left to carry it, and the next fence after a restart must be above it
//! all the same.

use std::fs;
use std::time::Duration;

use crate::clock::now_ms;
use crate::cmd;
use crate::common::*;
use crate::payloads::{far_fence, held, restore};
use crate::retries::acquire_ready;

fn wait_persistence_idle(c: &mut redis::Connection) {
    let idle = wait_until(Duration::from_secs(30), || {
        info_field(c, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    assert!(idle, "background save/rewrite did not finish in 30s");
}

/// The files the AOF manifest lists: (type, content).
fn aof_files(s: &Server) -> Vec<(String, Vec<u8>)> {
    let dir = s.dir.join("appendonlydir");
    let manifest = fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    manifest
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let name = w.get(w.iter().position(|x| *x == "file")? + 1)?.to_string();
            let kind = w.get(w.iter().position(|x| *x == "type")? + 1)?.to_string();
            Some((kind, fs::read(dir.join(&name)).expect("AOF file")))
        })
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The arguments of the `LOCK.HIGHWATER` commands in an AOF file.
fn highwater_args(file: &[u8]) -> Vec<(i64, i64)> {
    let text = String::from_utf8_lossy(file);
    let lines: Vec<&str> = text.split("\r\n").collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.eq_ignore_ascii_case("LOCK.HIGHWATER") {
            let num = |j: usize| -> i64 { lines[j].parse().unwrap_or(-1) };
            out.push((num(i + 2), num(i + 4)));
        }
    }
    out
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
    wait_persistence_idle(&mut c);
    assert_eq!(
        info_field(&mut c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    // What the rewritten AOF holds: no trace of the lock, and the mark.
    let files = aof_files(&s);
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
