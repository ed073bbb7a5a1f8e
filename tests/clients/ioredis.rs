//! ioredis: `npm ci` into tests/clients/node, and the flows of its flow.js.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::common::Server;
use crate::lock_counters::{assert_flow_counts, assert_pattern_counts, assert_shared_counts};
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
}
