//! The six-node cluster each test makes (three masters, one replica each, with
//! `redis-cli --cluster create`), its slot map as `CLUSTER SLOTS` reports it, and the lock that
//! runs the tests one cluster at a time.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::{info_field, wait_until, Opts, Server};
use crate::slots::SLOTS;
use redis::{Connection, Value};

/// One cluster at a time: six servers each, and timing checks.
static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A slot range as `CLUSTER SLOTS` reports it: master port and replica ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) master: u16,
    pub(crate) replicas: Vec<u16>,
}

pub(crate) fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

pub(crate) fn as_string(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub(crate) fn cluster_slots(c: &mut Connection) -> Vec<Range> {
    let v = cmd!(c, "CLUSTER", "SLOTS").expect("CLUSTER SLOTS");
    let Value::Array(ranges) = v else {
        panic!("CLUSTER SLOTS: {v:?}")
    };
    let mut out: Vec<Range> = ranges
        .iter()
        .map(|r| {
            let Value::Array(f) = r else {
                panic!("CLUSTER SLOTS range: {r:?}")
            };
            let port = |n: &Value| match n {
                Value::Array(a) => as_int(&a[1]) as u16,
                other => panic!("CLUSTER SLOTS node: {other:?}"),
            };
            let mut replicas: Vec<u16> = f[3..].iter().map(port).collect();
            replicas.sort();
            Range {
                start: as_int(&f[0]) as usize,
                end: as_int(&f[1]) as usize,
                master: port(&f[2]),
                replicas,
            }
        })
        .collect();
    out.sort_by_key(|r| r.start);
    out
}

/// Six servers in cluster mode: three masters, one replica each.
pub(crate) struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        let opts = Opts::new().extra(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
            // CLUSTER SLOTS lists a replica once its offset is known to be non-zero, which
            // for an idle master takes its first replication ping (10s by default).
            "--repl-ping-replica-period",
            "1",
        ]);
        let t0 = Instant::now();
        let nodes: Vec<Server> = (0..6).map(|_| Server::start(opts.clone())).collect();
        let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let mut create = Command::new(&cli);
        create.args(["--cluster", "create"]);
        create.args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cli}: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let created = t0.elapsed();
        let cl = Cluster { nodes };
        cl.wait_stable(|ranges| ranges.len() == 3);
        eprintln!(
            "cluster: redis-cli --cluster create {created:?}, stable after {:?}",
            t0.elapsed()
        );
        cl
    }

    pub(crate) fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    pub(crate) fn conn(&self, port: u16) -> Connection {
        self.node(port).conn()
    }

    pub(crate) fn id(&self, port: u16) -> String {
        as_string(&cmd!(&mut self.conn(port), "CLUSTER", "MYID").unwrap())
    }

    /// Waits until every node says `cluster_state:ok`, all report the same `CLUSTER SLOTS`
    /// covering every slot with one replica per range, `ok` accepts it, and every replica's
    /// link is up. Returns the ranges.
    pub(crate) fn wait_stable(&self, ok: impl Fn(&[Range]) -> bool) -> Vec<Range> {
        let mut last = Vec::new();
        let stable = wait_until(Duration::from_secs(60), || {
            let mut views = Vec::new();
            for n in &self.nodes {
                let mut c = n.conn();
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
                if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                    return false;
                }
                views.push(cluster_slots(&mut c));
            }
            last = views[0].clone();
            let covered: usize = last.iter().map(|r| r.end - r.start + 1).sum();
            if views.iter().any(|v| *v != last)
                || covered != SLOTS
                || last.iter().any(|r| r.replicas.len() != 1)
                || !ok(&last)
            {
                return false;
            }
            last.iter().flat_map(|r| &r.replicas).all(|&p| {
                info_field(&mut self.conn(p), "replication", "master_link_status").as_deref()
                    == Some("up")
            })
        });
        assert!(stable, "cluster not stable after 60s; last view {last:?}");
        last
    }

    pub(crate) fn ranges(&self) -> Vec<Range> {
        cluster_slots(&mut self.nodes[0].conn())
    }

    pub(crate) fn owner(&self, slot: usize) -> u16 {
        owner_in(&self.ranges(), slot)
    }

    pub(crate) fn replica_of(&self, master: u16) -> u16 {
        let r = self.ranges();
        r.iter().find(|r| r.master == master).unwrap().replicas[0]
    }

    pub(crate) fn masters(&self) -> Vec<u16> {
        let mut m: Vec<u16> = self.ranges().iter().map(|r| r.master).collect();
        m.sort();
        m.dedup();
        m
    }
}

pub(crate) fn owner_in(ranges: &[Range], slot: usize) -> u16 {
    ranges
        .iter()
        .find(|r| r.start <= slot && slot <= r.end)
        .unwrap_or_else(|| panic!("slot {slot} not served"))
        .master
}
