//! redis-py: its venv (made once per test process), the flows of tests/clients/flow.py, and
//! `RedisCluster` running the guarded-write helper on a three-master cluster.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{wait_until, Opts, Server};
use crate::lock_counters::{
    assert_flow_counts, assert_pattern_counts, assert_shared_counts, lock_counters,
};
use crate::processes::{
    file_hash, manifest_dir, note, run_bounded, runtime, target_dir, FLOW_TIMEOUT, INSTALL_TIMEOUT,
};
use crate::redis_cli::redis_cli_bin;

/// A venv with tests/clients/requirements.txt installed, under target/clients/ and named by the
/// file's hash; made on first use. Built under a temporary name and renamed into place, so a
/// half-made venv is never used; made once per test process (two tests use it).
fn python_venv() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(make_python_venv).clone()
}

fn make_python_venv() -> PathBuf {
    let reqs = manifest_dir().join("tests/clients/requirements.txt");
    let root = target_dir().join("clients");
    let venv = root.join(format!("python-{}", file_hash(&reqs)));
    let python = venv.join("bin/python");
    if python.exists() {
        let ok = run_bounded(
            Command::new(&python).args(["-c", "import redis"]),
            FLOW_TIMEOUT,
            "venv check",
        );
        if ok.status.success() {
            return venv;
        }
        note(&format!("{} is broken; making it again", venv.display()));
        let _ = fs::remove_dir_all(&venv);
    }
    fs::create_dir_all(&root).expect("create target/clients");
    let tmp = root.join(format!("python-tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    note(&format!("installing redis-py into {}", venv.display()));
    run_bounded(
        Command::new("python3").args(["-m", "venv"]).arg(&tmp),
        INSTALL_TIMEOUT,
        "python3 -m venv",
    )
    .expect_success("python3 -m venv");
    run_bounded(
        Command::new(tmp.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-input", "--require-hashes", "--only-binary", ":all:"])
            .arg("-r")
            .arg(&reqs),
        INSTALL_TIMEOUT,
        "pip install",
    )
    .expect_success("pip install -r tests/clients/requirements.txt");
    if fs::rename(&tmp, &venv).is_err() {
        // Another test run made it meanwhile.
        let _ = fs::remove_dir_all(&tmp);
    }
    venv
}

#[test]
fn redis_py_flow() {
    runtime("redis-py flow", &["python3"]);
    let venv = python_venv();
    let script = manifest_dir().join("tests/clients/flow.py");
    let run = |server: &Server, what: &str| {
        let out = run_bounded(
            Command::new(venv.join("bin/python"))
                .arg(&script)
                .arg(server.port.to_string())
                .arg(what),
            FLOW_TIMEOUT,
            &format!("tests/clients/flow.py {what}"),
        )
        .expect_success(&format!("tests/clients/flow.py {what}"));
        note(out.stdout.trim_end());
        out.stdout
    };
    let server = Server::new();
    let out = run(&server, "flow");
    assert_eq!(
        out.matches(": ok (fences").count(),
        2,
        "both RESP2 and RESP3 flows must report ok: {out}"
    );
    assert_flow_counts(&server, 2);
    let server = Server::new();
    let out = run(&server, "pattern");
    assert!(out.contains("pattern: ok (fences"), "{out}");
    assert_pattern_counts(&server);
    let server = Server::new();
    let out = run(&server, "shared");
    assert_eq!(
        out.matches(" shared: ok (readers").count(),
        2,
        "both RESP2 and RESP3 shared runs must report ok: {out}"
    );
    assert_shared_counts(&server, 2);
}

// ---------------------------------------------------------------------------------------------
// redis-py's RedisCluster

/// Three cluster-enabled servers with the module, made masters without replicas by
/// `redis-cli --cluster create` (as tests/cluster/ makes its larger cluster); returned once
/// every node knows all three and serves all 16384 slots.
fn small_cluster() -> Vec<Server> {
    let opts = Opts::new().extra(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
    ]);
    let nodes: Vec<Server> = (0..3).map(|_| Server::start(opts.clone())).collect();
    run_bounded(
        Command::new(redis_cli_bin())
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"]),
        FLOW_TIMEOUT,
        "redis-cli --cluster create",
    )
    .expect_success("redis-cli --cluster create");
    let mut last = String::new();
    let ready = wait_until(Duration::from_secs(60), || {
        nodes.iter().all(|n| {
            last = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut n.conn())
                .unwrap();
            [
                "cluster_state:ok",
                "cluster_slots_ok:16384",
                "cluster_known_nodes:3",
            ]
            .iter()
            .all(|want| last.lines().any(|l| l.trim() == *want))
        })
    });
    assert!(ready, "the cluster is not ready after 60 s:\n{last}");
    nodes
}

/// redis-py's `RedisCluster` routes `LOCK.GUARD` by the keys `COMMAND GETKEYS` names, straight
/// to the master of a hash tag's slot (docs/CLIENTS.md, *Guarded writes in a cluster*), and
/// the raw `guarded` helper of tests/clients/flow.py works through it unchanged:
/// `tests/clients/cluster_guard.py` acquires `{order:42}:lock`, writes
/// `{order:42}:data` under the fence (checked on the owning master, and on the others that it
/// is not there), is refused under a stale fence, and finds keys of two slots refused by
/// `RedisCluster` and by the server (`CROSSSLOT`).
#[test]
fn redis_py_cluster_guard() {
    runtime("redis-py RedisCluster", &["python3", &redis_cli_bin()]);
    let venv = python_venv();
    let nodes = small_cluster();
    let script = manifest_dir().join("tests/clients/cluster_guard.py");
    // The seed is the first node, which owns slots 0-5460: {order:42} hashes to slot 8691.
    let out = run_bounded(
        Command::new(venv.join("bin/python"))
            .arg(&script)
            .arg(nodes[0].port.to_string()),
        FLOW_TIMEOUT,
        "tests/clients/cluster_guard.py",
    )
    .expect_success("tests/clients/cluster_guard.py");
    note(out.stdout.trim_end());
    assert!(out.stdout.contains("RedisCluster: ok"), "{}", out.stdout);
    // Counted on one master only: four commands run, two refused (the CROSSSLOT one never
    // reached the module).
    let counts: Vec<(i64, i64)> = nodes
        .iter()
        .map(|n| {
            let (_, f) = lock_counters(n);
            (f["guarded_runs"], f["guarded_refusals"])
        })
        .collect();
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [(0, 0), (0, 0), (4, 2)],
        "LOCK.GUARD counters by node: {counts:?}"
    );
}
