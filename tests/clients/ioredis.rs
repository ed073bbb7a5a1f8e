//! ioredis: `npm ci` into tests/clients/node, and the flows of its flow.js (the recipes
//! docs/CLIENTS.md shows for Node.js among them, with their keep-alive's losses).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::common::Server;
use crate::lock_counters::{
    assert_flow_counts, assert_pattern_counts, assert_shared_counts, lock_counters,
};
use crate::processes::{
    file_hash, manifest_dir, note, run_bounded, runtime, FLOW_TIMEOUT, INSTALL_TIMEOUT,
};

/// `npm ci` in tests/clients/node unless its node_modules matches package-lock.json already.
fn node_modules() -> PathBuf {
    let dir = manifest_dir().join("tests/clients/node");
    let stamp = dir.join("node_modules/.redis-lock-installed");
    let want = file_hash(&dir.join("package-lock.json"));
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        return dir;
    }
    note(&format!("npm ci in {}", dir.display()));
    run_bounded(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
        INSTALL_TIMEOUT,
        "npm ci",
    )
    .expect_success("npm ci in tests/clients/node");
    fs::write(&stamp, &want).expect("write the install stamp");
    dir
}

#[test]
fn ioredis_flow() {
    runtime("ioredis flow", &["node", "npm"]);
    let dir = node_modules();
    let run = |server: &Server, what: &str| {
        let out = run_bounded(
            Command::new("node")
                .arg("flow.js")
                .arg(server.port.to_string())
                .arg(what)
                .current_dir(&dir),
            FLOW_TIMEOUT,
            &format!("tests/clients/node/flow.js {what}"),
        )
        .expect_success(&format!("tests/clients/node/flow.js {what}"));
        note(out.stdout.trim_end());
        out.stdout
    };
    let server = Server::new();
    let out = run(&server, "flow");
    assert!(out.contains(": ok (fences"), "{out}");
    assert_flow_counts(&server, 1);
    let server = Server::new();
    let out = run(&server, "pattern");
    assert!(out.contains("pattern: ok (fences"), "{out}");
    assert_pattern_counts(&server);
    let server = Server::new();
    let out = run(&server, "shared");
    assert!(out.contains(" shared: ok (readers"), "{out}");
    assert_shared_counts(&server, 1);
    let server = Server::new();
    let out = run(&server, "loss");
    assert!(out.contains(" loss: ok (deleted: lost in"), "{out}");
    assert_loss_counts(&server);
}

/// What the server counted for the keep-alive's losses (`withLock` in flow.js `loss`): four
/// holds taken at once (a holder that makes the first `withLock` wait, and the three that are
/// lost), one grant after a wait; the first holder's and the waiter's releases, the refused
/// extender's (the server still held it) and the paused holder's end (its release or its
/// lease end); the deleted lock's release answered 0; nothing left held.
#[track_caller]
fn assert_loss_counts(server: &Server) {
    let (text, f) = lock_counters(server);
    for (name, want) in [
        ("held", 0),
        ("waiting_clients", 0),
        ("acquires", 4),
        ("contended_acquires", 1),
        ("grants", 1),
        ("wait_timeouts", 0),
    ] {
        assert_eq!(f[name], want, "lock_{name} after the losses:\n{text}");
    }
    assert_eq!(
        f["releases"] + f["lease_ends"],
        4,
        "each of those holds ends once:\n{text}"
    );
}
