//! What shared holds cost in the server's memory (docs/commands.md, *Shared holds*): a key with one
//! shared holder costs no more than an exclusive lock, and each further holder at most 64
//! bytes plus its token. Measured as `used_memory`, which counts what the allocator hands
//! out (size classes included), over thousands of keys or holds so that one-off allocations
//! vanish in the average.

use crate::cmd;
use crate::common::*;
use redis::{Connection, Value};

/// A UUID's length, as clients use for tokens.
const TOKEN_LEN: usize = 36;

// `used_memory` is read without the clients' buffers (`used_memory_less_clients`): a pipeline
// of longer commands (`SHARED`) leaves a larger query buffer behind, which is not the keys'
// cost.
use crate::common::memory::used_memory_less_clients as used_memory;

fn numbered_token(i: usize) -> String {
    format!("{i:0>width$}", width = TOKEN_LEN)
}

/// Sends `commands` pipelined, `batch` at a time, and checks each reply is a fence.
fn acquire_all(c: &mut Connection, commands: &[Vec<String>], batch: usize) {
    for chunk in commands.chunks(batch) {
        let mut p = redis::pipe();
        for args in chunk {
            p.cmd(&args[0]).arg(&args[1..]);
        }
        let replies: Vec<Value> = p.query(c).expect("pipelined acquires");
        for (args, r) in chunk.iter().zip(&replies) {
            assert!(matches!(r, Value::Int(f) if *f > 0), "{args:?}: {r:?}");
        }
    }
}

/// Bytes per key that `n` keys acquired as `mode` add (`None`: exclusive).
fn per_key(mode: Option<&str>, n: usize) -> f64 {
    let s = Server::new();
    let mut c = s.conn();
    let commands: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let mut a = vec![
                "LOCK.ACQUIRE".into(),
                format!("orders:{i:0>12}"),
                numbered_token(i),
                "600000".into(),
            ];
            a.extend(mode.map(str::to_string));
            a
        })
        .collect();
    let before = used_memory(&mut c);
    // Small batches: a server may keep its largest query buffer outside the clients' (Valkey
    // 8+ shares one), and `SHARED` makes each command 12 bytes longer.
    acquire_all(&mut c, &commands, 50);
    (used_memory(&mut c) - before) as f64 / n as f64
}

#[test]
fn one_shared_holder_costs_no_more_than_an_exclusive_lock() {
    let _heavy = crate::heavy();
    const KEYS: usize = 5_000;
    let exclusive = per_key(None, KEYS);
    let shared = per_key(Some("SHARED"), KEYS);
    println!("per key: exclusive {exclusive:.1} B, one shared holder {shared:.1} B");
    // Two bytes of slack for the allocator's own bookkeeping between two servers.
    assert!(
        shared <= exclusive + 2.0,
        "one shared holder: {shared:.1} B per key against {exclusive:.1} B exclusive"
    );
}

#[test]
fn each_further_holder_costs_at_most_64_bytes_and_its_token() {
    let _heavy = crate::heavy();
    const HOLDERS: usize = 10_000;
    let s = Server::new();
    let mut c = s.conn();
    assert!(acquire_shared_first(&mut c));
    let commands: Vec<Vec<String>> = (1..=HOLDERS)
        .map(|i| {
            [
                "LOCK.ACQUIRE",
                "catalog",
                &numbered_token(i),
                "600000",
                "SHARED",
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    let alone = memory_usage(&mut c, "catalog");
    let before = used_memory(&mut c);
    acquire_all(&mut c, &commands, 1_000);
    let per_holder = (used_memory(&mut c) - before) as f64 / HOLDERS as f64;
    let holders = info(&mut c, "catalog").expect("the key").holders;
    assert_eq!(holders as usize, HOLDERS + 1);
    println!("per further holder: {per_holder:.1} B with a {TOKEN_LEN}-byte token");
    assert!(
        per_holder <= (64 + TOKEN_LEN) as f64,
        "{per_holder:.1} B per further holder"
    );
    // Released, the holds give their memory back: the key is its size with one holder again,
    // but for the key's last fence, which a released hold had (one small allocation).
    let releases: Vec<Vec<String>> = (1..=HOLDERS)
        .map(|i| {
            ["LOCK.RELEASE", "catalog", &numbered_token(i)]
                .map(String::from)
                .to_vec()
        })
        .collect();
    for chunk in releases.chunks(1_000) {
        let mut p = redis::pipe();
        for args in chunk {
            p.cmd(&args[0]).arg(&args[1..]);
        }
        let replies: Vec<i64> = p.query(&mut c).expect("pipelined releases");
        assert!(replies.iter().all(|&r| r == 1));
    }
    let after = memory_usage(&mut c, "catalog");
    assert!(
        after <= alone + 64,
        "MEMORY USAGE {after} B after every further holder released, {alone} B before"
    );
}

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    match cmd!(c, "MEMORY", "USAGE", key) {
        Ok(Value::Int(n)) => n,
        other => panic!("MEMORY USAGE {key}: {other:?}"),
    }
}

fn acquire_shared_first(c: &mut Connection) -> bool {
    matches!(
        cmd!(
            c,
            "LOCK.ACQUIRE",
            "catalog",
            numbered_token(0),
            600_000,
            "SHARED"
        ),
        Ok(Value::Int(_))
    )
}
