//! Redis Cluster: three masters with one replica each on loopback, made with
//! `redis-cli --cluster create`, the module loaded on every node.
//!
//! - Locks on a key in every one of the 16384 slots through a small cluster-aware client
//!   (the redis crate is built without its `cluster` feature, so [`Router`] does the routing:
//!   CRC16 slots, `CLUSTER SLOTS`, following `MOVED` and `ASK`).
//! - Every `LOCK.*` command sent to the wrong node is answered `MOVED <slot> <owner>`;
//!   `COMMAND GETKEYS` names the key; hash tags put `{user1}:a` and `{user1}:b` in one slot;
//!   a transaction over two slots is refused with `CROSSSLOT`.
//! - A slot holding held locks migrated with `CLUSTER SETSLOT` + `MIGRATE … KEYS`: holder,
//!   remaining lease and fence arrive intact, the lease ends on time on the new node, and its
//!   next fences are above every fence issued for the keys on the old one (guarantee 4).
//! - `CLUSTER FAILOVER` of a master's replica keeps holder, lease and fence (guarantee 5).
//!
//! - A client waiting on the source node for a key that `MIGRATE` moves away is not granted
//!   a lock there (guarantee 1): it is answered null and retries where the key went.
//! - `LOCK.GUARD` declares its keys: `COMMAND GETKEYS` names the lock key and the guarded
//!   command's; keys in two slots get `CROSSSLOT`, the wrong node answers `MOVED`, and the
//!   guarded write reaches the replica as the write itself.
//!
//! The tests run one at a time (each makes its own six-node cluster).

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

const SLOTS: usize = 16384;
/// How far a remaining lease may be from the one read before a move, beyond the time
/// measured between the two readings (deadlines travel as Unix ms, rounded up).
const TTL_SLACK_MS: i64 = 50;
/// How late a lease end may be observed (loaded CI machines), and how early (none, beyond
/// the conversion between the wall and the monotonic clock).
const LATE: Duration = Duration::from_millis(500);
const EARLY: Duration = Duration::from_millis(10);

/// One cluster at a time: six servers each, and timing checks.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------------------- slots

/// CRC16-CCITT (XMODEM), the cluster's key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash slot of a key, hash tags included.
fn key_slot(key: &[u8]) -> usize {
    let mut k = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                k = &key[open + 1..open + 1 + len];
            }
        }
    }
    crc16(k) as usize % SLOTS
}

/// One key name for every slot: `lock:<n>` for the smallest n that hashes there.
fn key_per_slot() -> Vec<String> {
    let mut keys = vec![String::new(); SLOTS];
    let mut missing = SLOTS;
    let mut n = 0u64;
    while missing > 0 {
        let k = format!("lock:{n}");
        let s = key_slot(k.as_bytes());
        if keys[s].is_empty() {
            keys[s] = k;
            missing -= 1;
        }
        n += 1;
    }
    keys
}

// ----------------------------------------------------------------------------- cluster

/// A slot range as `CLUSTER SLOTS` reports it: master port and replica ports.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Range {
    start: usize,
    end: usize,
    master: u16,
    replicas: Vec<u16>,
}

fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn as_string(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn cluster_slots(c: &mut Connection) -> Vec<Range> {
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
struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    fn start() -> Cluster {
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

    fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn conn(&self, port: u16) -> Connection {
        self.node(port).conn()
    }

    fn id(&self, port: u16) -> String {
        as_string(&cmd!(&mut self.conn(port), "CLUSTER", "MYID").unwrap())
    }

    /// Waits until every node says `cluster_state:ok`, all report the same `CLUSTER SLOTS`
    /// covering every slot with one replica per range, `ok` accepts it, and every replica's
    /// link is up. Returns the ranges.
    fn wait_stable(&self, ok: impl Fn(&[Range]) -> bool) -> Vec<Range> {
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

    fn ranges(&self) -> Vec<Range> {
        cluster_slots(&mut self.nodes[0].conn())
    }

    fn owner(&self, slot: usize) -> u16 {
        owner_in(&self.ranges(), slot)
    }

    fn replica_of(&self, master: u16) -> u16 {
        let r = self.ranges();
        r.iter().find(|r| r.master == master).unwrap().replicas[0]
    }

    fn masters(&self) -> Vec<u16> {
        let mut m: Vec<u16> = self.ranges().iter().map(|r| r.master).collect();
        m.sort();
        m.dedup();
        m
    }
}

fn owner_in(ranges: &[Range], slot: usize) -> u16 {
    ranges
        .iter()
        .find(|r| r.start <= slot && slot <= r.end)
        .unwrap_or_else(|| panic!("slot {slot} not served"))
        .master
}

// ------------------------------------------------------------------------------ router

/// A minimal cluster client: sends a command to the node its key's slot belongs to, as far
/// as it knows, and follows `MOVED` (learning the slot's owner) and `ASK` (once, after
/// `ASKING`).
struct Router {
    seed: u16,
    slots: Vec<Option<u16>>,
    conns: HashMap<u16, Connection>,
    moved: usize,
    asked: usize,
}

/// `(slot, port)` of a `MOVED`/`ASK` error text.
fn redirect(err: &str) -> (usize, u16) {
    let parts: Vec<&str> = err.split_whitespace().collect();
    assert_eq!(parts.len(), 3, "redirection {err:?}");
    let (host, port) = parts[2].rsplit_once(':').unwrap();
    assert_eq!(host, "127.0.0.1", "redirection {err:?}");
    (parts[1].parse().unwrap(), port.parse().unwrap())
}

impl Router {
    /// A router that knows no slot yet: it sends everything to `seed` and learns from `MOVED`.
    fn new(seed: u16) -> Router {
        Router {
            seed,
            slots: vec![None; SLOTS],
            conns: HashMap::new(),
            moved: 0,
            asked: 0,
        }
    }

    fn conn(&mut self, port: u16) -> &mut Connection {
        self.conns.entry(port).or_insert_with(|| {
            let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection_with_timeout(Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connect to {port}: {e}"));
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            c
        })
    }

    /// Learns the whole slot map from `CLUSTER SLOTS`.
    fn refresh(&mut self) {
        let seed = self.seed;
        for r in cluster_slots(self.conn(seed)) {
            for s in r.start..=r.end {
                self.slots[s] = Some(r.master);
            }
        }
    }

    fn port_for(&self, key: &str) -> u16 {
        self.slots[key_slot(key.as_bytes())].unwrap_or(self.seed)
    }

    /// Runs `args` (the key is `args[1]`) on the right node.
    fn query(&mut self, args: &[&str]) -> Result<Value, String> {
        let slot = key_slot(args[1].as_bytes());
        let mut port = self.port_for(args[1]);
        let mut asking = false;
        for _ in 0..5 {
            let c = self.conn(port);
            if asking {
                assert_eq!(cmd!(c, "ASKING"), Ok(Value::Okay));
            }
            let mut cmd = redis::cmd(args[0]);
            for a in &args[1..] {
                cmd.arg(*a);
            }
            match run(&cmd, c) {
                Err(e) if e.starts_with("MOVED ") => {
                    let (s, p) = redirect(&e);
                    assert_eq!(s, slot, "{e} for {args:?}");
                    self.slots[s] = Some(p);
                    self.moved += 1;
                    (port, asking) = (p, false);
                }
                Err(e) if e.starts_with("ASK ") => {
                    let (s, p) = redirect(&e);
                    assert_eq!(s, slot, "{e} for {args:?}");
                    self.asked += 1;
                    (port, asking) = (p, true);
                }
                r => return r,
            }
        }
        panic!("more than 5 redirections for {args:?}");
    }

    /// Runs many commands, one pipeline per node (the slot map must be current).
    fn pipeline(&mut self, cmds: &[Vec<String>]) -> Vec<Value> {
        let mut by_node: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, c) in cmds.iter().enumerate() {
            by_node.entry(self.port_for(&c[1])).or_default().push(i);
        }
        let mut out = vec![Value::Nil; cmds.len()];
        for (port, idx) in by_node {
            let mut p = redis::pipe();
            for &i in &idx {
                let mut c = redis::cmd(&cmds[i][0]);
                for a in &cmds[i][1..] {
                    c.arg(a);
                }
                p.add_command(c);
            }
            let replies: Vec<Value> = p
                .query(self.conn(port))
                .unwrap_or_else(|e| panic!("pipeline on {port}: {e}"));
            assert_eq!(replies.len(), idx.len());
            for (i, v) in idx.into_iter().zip(replies) {
                out[i] = v;
            }
        }
        out
    }

    fn info(&mut self, key: &str) -> Option<LockInfo> {
        parse_info(&self.query(&["LOCK.INFO", key]).unwrap())
    }

    fn int_or_nil(&mut self, args: &[&str]) -> Option<i64> {
        match self.query(args) {
            Ok(Value::Int(i)) => Some(i),
            Ok(Value::Nil) => None,
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

// ----------------------------------------------------------------------------- helpers

fn dbsize(c: &mut Connection) -> i64 {
    as_int(&cmd!(c, "DBSIZE").unwrap())
}

fn wait_replicas(c: &mut Connection) {
    assert_eq!(
        common::wait_replicas(c, 1, 5_000),
        Ok(Value::Int(1)),
        "replica did not ack"
    );
}

/// `LOCK.INFO` read on a replica (`READONLY` lets it answer for its master's slots).
fn replica_info(replica: &Server, key: &str) -> Option<LockInfo> {
    let mut c = replica.conn();
    assert_eq!(cmd!(&mut c, "READONLY"), Ok(Value::Okay));
    info(&mut c, key)
}

/// `LOCK.INFO` of a key and the interval in which the server evaluated it.
struct Snapshot {
    info: LockInfo,
    before: Instant,
    after: Instant,
}

fn snapshot(r: &mut Router, key: &str) -> Snapshot {
    let before = Instant::now();
    let info = r.info(key).unwrap_or_else(|| panic!("{key}: no lock"));
    Snapshot {
        info,
        before,
        after: Instant::now(),
    }
}

/// The lock read now through `r` is the one of `s`: holder, fence, and the remaining lease
/// counted down by the time that passed.
#[track_caller]
fn assert_moved_intact(r: &mut Router, key: &str, s: &Snapshot) {
    let n0 = Instant::now();
    let now = r.info(key).unwrap_or_else(|| panic!("{key}: lost"));
    let n1 = Instant::now();
    assert_eq!(now.holder, s.info.holder, "{key}: holder");
    assert_eq!(now.fence, s.info.fence, "{key}: fence");
    let most = s.info.ttl - n0.saturating_duration_since(s.after).as_millis() as i64;
    let least = s.info.ttl - n1.duration_since(s.before).as_millis() as i64;
    assert!(
        now.ttl <= most + TTL_SLACK_MS && now.ttl >= least - TTL_SLACK_MS,
        "{key}: remaining lease {} after the move; from {} before it should be in \
         {least}..={most} (+-{TTL_SLACK_MS})",
        now.ttl,
        s.info.ttl
    );
}

/// Polls `key` on `c` until it is gone; asserts it went at its deadline, which lies between
/// `sent + ttl` and `replied + ttl`.
fn assert_lease_ends_on_time(
    c: &mut Connection,
    key: &str,
    ttl: u64,
    sent: Instant,
    replied: Instant,
) {
    let ttl = Duration::from_millis(ttl);
    assert!(
        Instant::now() + Duration::from_millis(200) < sent + ttl,
        "test machine too slow: {key}'s lease ended before the check"
    );
    assert!(
        wait_until(ttl + Duration::from_secs(5), || !exists(c, key)),
        "{key}: lease did not end"
    );
    let gone = Instant::now();
    assert!(
        gone + EARLY >= sent + ttl,
        "{key}: lease of {ttl:?} ended early, {:?} after the acquire was sent",
        gone - sent
    );
    assert!(
        gone <= replied + ttl + LATE,
        "{key}: lease of {ttl:?} ended {:?} late",
        gone - (replied + ttl)
    );
    eprintln!(
        "{key}: lease of {ttl:?} ended {}ms after the acquire's reply",
        (gone - replied).as_millis()
    );
}

/// A client blocked in `LOCK.ACQUIRE key <token> 10000 WAIT <timeout>` on its own connection.
fn spawn_waiter(port: u16, key: &str, timeout: u64) -> mpsc::Receiver<Result<Value, String>> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (tx, rx) = mpsc::channel();
    let key = key.to_string();
    thread::spawn(move || {
        let r = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg(token())
            .arg(10_000)
            .arg("WAIT")
            .arg(timeout)
            .query::<Value>(&mut c)
            .map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    rx
}

// ------------------------------------------------------------------------------- tests

#[test]
fn locks_route_across_all_slots_and_the_wrong_node_answers_moved() {
    let _serial = serial();
    let cl = Cluster::start();
    let ranges = cl.ranges();
    let masters = cl.masters();
    let mut c0 = cl.conn(masters[0]);

    // The client's hash is the server's, hash tags included.
    let mut samples: Vec<String> = [
        "",
        "a",
        "orders:42",
        "{user1}:a",
        "{user1}:b",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "{}x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    samples.extend((0..50).map(|i| format!("lock:{}", i * 7919)));
    for k in &samples {
        assert_eq!(
            cmd!(&mut c0, "CLUSTER", "KEYSLOT", k),
            Ok(Value::Int(key_slot(k.as_bytes()) as i64)),
            "slot of {k:?}"
        );
    }
    let keys = key_per_slot();
    let tok = |slot: usize| format!("t{slot}");

    // 1. Key by key, a router that knows nothing: everything goes to one node first and the
    //    others are found through MOVED, once per slot.
    let mut r = Router::new(masters[0]);
    let sample: Vec<usize> = (0..SLOTS).step_by(61).collect();
    let mut first = HashMap::new();
    for &s in &sample {
        let f = r
            .int_or_nil(&["LOCK.ACQUIRE", &keys[s], &tok(s), "60000"])
            .expect("free key");
        first.insert(s, f);
    }
    let elsewhere = sample
        .iter()
        .filter(|&&s| owner_in(&ranges, s) != masters[0])
        .count();
    assert!(elsewhere > sample.len() / 3);
    assert_eq!(r.moved, elsewhere, "one MOVED per slot not on the seed");
    for &s in &sample {
        r.query(&["LOCK.INFO", &keys[s]]).unwrap();
    }
    assert_eq!(r.moved, elsewhere, "the router did not learn from MOVED");

    // 2. A lock on a key in every slot, pipelined per node.
    r.refresh();
    let acquires: Vec<Vec<String>> = (0..SLOTS)
        .map(|s| {
            vec![
                "LOCK.ACQUIRE".into(),
                keys[s].clone(),
                tok(s),
                "60000".into(),
            ]
        })
        .collect();
    let t0 = Instant::now();
    let fences = r.pipeline(&acquires);
    for (s, f) in fences.iter().enumerate() {
        let f = as_int(f);
        assert!(f > 0, "slot {s}: fence {f}");
        if let Some(&f0) = first.get(&s) {
            assert_eq!(
                f, f0,
                "slot {s}: a retried acquire by the holder keeps its fence"
            );
        }
    }
    eprintln!("{SLOTS} locks, one per slot, in {:?}", t0.elapsed());
    let infos = r.pipeline(
        &(0..SLOTS)
            .map(|s| vec!["LOCK.INFO".into(), keys[s].clone()])
            .collect::<Vec<_>>(),
    );
    for (s, v) in infos.iter().enumerate() {
        let i = parse_info(v).unwrap_or_else(|| panic!("slot {s}: no lock"));
        assert_eq!(i.holder.as_deref(), Some(tok(s).as_bytes()), "slot {s}");
        assert_eq!(i.fence, as_int(&fences[s]), "slot {s}");
    }
    for rg in &ranges {
        let owned: i64 = ranges
            .iter()
            .filter(|x| x.master == rg.master)
            .map(|x| (x.end - x.start + 1) as i64)
            .sum();
        let mut mc = cl.conn(rg.master);
        assert_eq!(dbsize(&mut mc), owned, "locks on master {}", rg.master);
        assert_eq!(
            info_field(&mut mc, "lock", "lock_held"),
            Some(owned.to_string())
        );
        for s in [rg.start, (rg.start + rg.end) / 2, rg.end] {
            assert_eq!(
                cmd!(&mut mc, "CLUSTER", "COUNTKEYSINSLOT", s),
                Ok(Value::Int(1))
            );
        }
        wait_replicas(&mut mc);
        assert_eq!(
            dbsize(&mut cl.conn(rg.replicas[0])),
            owned,
            "locks on replica {}",
            rg.replicas[0]
        );
    }

    // 3. Every LOCK.* command at the wrong node: MOVED naming the slot and its owner. A
    //    replica answers MOVED too, and with READONLY it serves LOCK.INFO, not the writes.
    let s = SLOTS / 2;
    let (key, t) = (keys[s].clone(), tok(s));
    let owner = owner_in(&ranges, s);
    let owner_replica = cl.replica_of(owner);
    let held = r.info(&key).unwrap();
    let moved = format!("MOVED {s} 127.0.0.1:{owner}");
    let forms: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", &key, "other", "1000"],
        vec!["LOCK.ACQUIRE", &key, "other", "1000", "WAIT", "100"],
        vec!["LOCK.ACQUIRE", &key, &t, "1000"],
        vec!["LOCK.RELEASE", &key, &t],
        vec!["LOCK.EXTEND", &key, &t, "1000"],
        vec!["LOCK.FENCE", &key, &t],
        vec!["LOCK.INFO", &key],
    ];
    let wrong: Vec<u16> = masters
        .iter()
        .copied()
        .filter(|&m| m != owner)
        .chain([owner_replica])
        .collect();
    for &port in &wrong {
        let mut c = cl.conn(port);
        for f in &forms {
            let raw: Vec<Vec<u8>> = f.iter().map(|a| a.as_bytes().to_vec()).collect();
            assert_eq!(
                run_raw(&mut c, &raw),
                Err(moved.clone()),
                "{f:?} sent to {port}"
            );
        }
    }
    let mut ro = cl.conn(owner_replica);
    assert_eq!(cmd!(&mut ro, "READONLY"), Ok(Value::Okay));
    let ri = info(&mut ro, &key).expect("replica serves LOCK.INFO after READONLY");
    assert_eq!((ri.holder, ri.fence), (held.holder.clone(), held.fence));
    assert_err_starts(&cmd!(&mut ro, "LOCK.FENCE", &key, &t), &moved);
    assert_err_starts(&cmd!(&mut ro, "LOCK.RELEASE", &key, &t), &moved);
    let after = r.info(&key).unwrap();
    assert_eq!((after.holder, after.fence), (held.holder, held.fence));

    // 4. COMMAND GETKEYS names the key of every form; hash tags share a slot.
    for f in &forms {
        let mut args = vec!["GETKEYS"];
        args.extend(f.iter().map(|a| if *a == key { "{user1}:a" } else { *a }));
        let mut c = redis::cmd("COMMAND");
        for a in &args {
            c.arg(*a);
        }
        assert_eq!(
            run(&c, &mut c0),
            Ok(Value::Array(vec![Value::BulkString(b"{user1}:a".to_vec())])),
            "COMMAND {args:?}"
        );
    }
    let tag = key_slot(b"user1");
    for k in ["{user1}:a", "{user1}:b"] {
        assert_eq!(
            cmd!(&mut c0, "CLUSTER", "KEYSLOT", k),
            Ok(Value::Int(tag as i64))
        );
        r.int_or_nil(&["LOCK.ACQUIRE", k, "u1", "60000"]).unwrap();
    }
    let mut tc = cl.conn(owner_in(&ranges, tag));
    assert_eq!(
        cmd!(&mut tc, "EXISTS", "{user1}:a", "{user1}:b"),
        Ok(Value::Int(2))
    );
    // One transaction over both keys of the tag runs; one over two slots is refused.
    assert_eq!(cmd!(&mut tc, "MULTI"), Ok(Value::Okay));
    cmd!(&mut tc, "LOCK.RELEASE", "{user1}:a", "u1").unwrap();
    cmd!(&mut tc, "LOCK.FENCE", "{user1}:b", "u1").unwrap();
    match cmd!(&mut tc, "EXEC") {
        Ok(Value::Array(v)) => {
            assert_eq!(v[0], Value::Int(1));
            assert!(as_int(&v[1]) > 0);
        }
        other => panic!("EXEC over one hash tag: {other:?}"),
    }
    let port = owner_in(&ranges, tag);
    let two: Vec<&String> = keys
        .iter()
        .enumerate()
        .filter(|&(s, _)| owner_in(&ranges, s) == port && s != tag)
        .map(|(_, k)| k)
        .take(2)
        .collect();
    let (k1, k2) = (format!("x{{{}}}", two[0]), format!("x{{{}}}", two[1]));
    assert_ne!(key_slot(k1.as_bytes()), key_slot(k2.as_bytes()));
    assert_eq!(cmd!(&mut tc, "MULTI"), Ok(Value::Okay));
    cmd!(&mut tc, "LOCK.ACQUIRE", &k1, "x", "60000").unwrap();
    cmd!(&mut tc, "LOCK.ACQUIRE", &k2, "x", "60000").unwrap();
    assert_err_starts(&cmd!(&mut tc, "EXEC"), "CROSSSLOT");
    assert!(!exists(&mut tc, &k1) && !exists(&mut tc, &k2));

    // 5. Every lock released through the router; nothing is left on any node.
    let releases: Vec<Vec<String>> = (0..SLOTS)
        .map(|s| vec!["LOCK.RELEASE".into(), keys[s].clone(), tok(s)])
        .collect();
    for (s, v) in r.pipeline(&releases).iter().enumerate() {
        assert_eq!(*v, Value::Int(1), "release of slot {s}");
    }
    assert_eq!(
        r.query(&["LOCK.RELEASE", "{user1}:b", "u1"]),
        Ok(Value::Int(1))
    );
    for &m in &masters {
        let mut mc = cl.conn(m);
        assert_eq!(dbsize(&mut mc), 0, "master {m}");
        wait_replicas(&mut mc);
        assert_eq!(dbsize(&mut cl.conn(cl.replica_of(m))), 0);
    }
}

#[test]
fn a_held_lock_migrates_with_its_slot() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"mig");
    let from = cl.owner(slot);
    let to = *cl.masters().iter().find(|&&m| m != from).unwrap();
    let (lease, held, gone) = ("{mig}:lease", "{mig}:held", "{mig}:gone");

    // On the old node: a released key with fences, a long-held key with fences, and a lease
    // that will end on the new node.
    let mut issued = Vec::new();
    let g = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", gone, &g, "60000"]).unwrap());
    issued.push(r.int_or_nil(&["LOCK.FENCE", gone, &g]).unwrap());
    assert_eq!(r.query(&["LOCK.RELEASE", gone, &g]), Ok(Value::Int(1)));
    let h = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", held, &h, "60000"]).unwrap());
    for _ in 0..3 {
        issued.push(r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap());
    }
    let l = token();
    // Long enough to outlast a failover on a loaded machine (6 s seen), short enough to wait
    // out at the end.
    let lease_ttl = 12_000;
    let sent = Instant::now();
    issued.push(
        r.int_or_nil(&["LOCK.ACQUIRE", lease, &l, &lease_ttl.to_string()])
            .unwrap(),
    );
    let replied = Instant::now();
    let max = *issued.iter().max().unwrap();
    let snaps = [snapshot(&mut r, held), snapshot(&mut r, lease)];

    // Migrate the slot: IMPORTING on the target, MIGRATING on the source, MIGRATE its keys.
    let (from_id, to_id) = (cl.id(from), cl.id(to));
    let mut fc = cl.conn(from);
    let mut tc = cl.conn(to);
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id),
        Ok(Value::Okay)
    );
    let mut in_slot: Vec<String> = match cmd!(&mut fc, "CLUSTER", "GETKEYSINSLOT", slot, 100) {
        Ok(Value::Array(v)) => v.iter().map(as_string).collect(),
        other => panic!("GETKEYSINSLOT: {other:?}"),
    };
    in_slot.sort();
    assert_eq!(in_slot, [held, lease]);
    let t0 = Instant::now();
    assert_eq!(
        cmd!(
            &mut fc,
            "MIGRATE",
            "127.0.0.1",
            to,
            "",
            0,
            5_000,
            "KEYS",
            held,
            lease
        ),
        Ok(Value::Okay)
    );
    eprintln!("MIGRATE of 2 locks: {:?}", t0.elapsed());

    // Mid-migration the source answers ASK for them; the router follows it.
    assert_eq!(
        cmd!(&mut fc, "LOCK.INFO", held),
        Err(format!("ASK {slot} 127.0.0.1:{to}"))
    );
    assert_moved_intact(&mut r, held, &snaps[0]);
    assert_eq!(r.asked, 1);
    assert_eq!(
        r.int_or_nil(&["LOCK.ACQUIRE", lease, "thief", "1000"]),
        None
    );
    assert_eq!(r.asked, 2);

    // Hand the slot over; the router's stale map gets MOVED.
    for port in [to, from] {
        assert_eq!(
            cmd!(
                &mut cl.conn(port),
                "CLUSTER",
                "SETSLOT",
                slot,
                "NODE",
                &to_id
            ),
            Ok(Value::Okay),
            "SETSLOT NODE on {port}"
        );
    }
    cl.wait_stable(|ranges| owner_in(ranges, slot) == to);
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(0))
    );
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(2))
    );
    assert_moved_intact(&mut r, lease, &snaps[1]);
    assert_eq!(r.moved, 1, "the router should have been sent on with MOVED");
    assert_moved_intact(&mut r, held, &snaps[0]);

    // Both replicas follow: the target's has the locks, the source's has none left.
    wait_replicas(&mut tc);
    wait_replicas(&mut fc);
    for k in [held, lease] {
        let (a, b) = (
            r.info(k).unwrap(),
            replica_info(cl.node(cl.replica_of(to)), k),
        );
        let b = b.unwrap_or_else(|| panic!("{k}: not on the target's replica"));
        assert_eq!(
            (&a.holder, a.fence),
            (&b.holder, b.fence),
            "{k} on the replica"
        );
    }
    let mut frc = cl.conn(cl.replica_of(from));
    assert_eq!(
        cmd!(&mut frc, "CLUSTER", "COUNTKEYSINSLOT", slot),
        Ok(Value::Int(0))
    );

    // Nobody else gets them; fences go on above every fence issued on the old node.
    assert_eq!(r.int_or_nil(&["LOCK.ACQUIRE", held, "thief", "1000"]), None);
    let f1 = r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap();
    assert!(
        f1 > max,
        "LOCK.FENCE after the move: {f1}, issued before: {issued:?}"
    );
    assert_eq!(r.query(&["LOCK.RELEASE", held, &h]), Ok(Value::Int(1)));
    let f2 = r
        .int_or_nil(&["LOCK.ACQUIRE", held, &token(), "60000"])
        .unwrap();
    assert!(f2 > f1, "fresh acquire after release: {f2} after {f1}");
    let f3 = r
        .int_or_nil(&["LOCK.ACQUIRE", gone, &token(), "60000"])
        .unwrap();
    assert!(
        f3 > f2,
        "the key released on the old node: {f3}, max there {max}"
    );

    // The lease ends on time on the new node, and on its replica with it.
    assert_lease_ends_on_time(&mut tc, lease, lease_ttl, sent, replied);
    let f4 = r
        .int_or_nil(&["LOCK.ACQUIRE", lease, &token(), "60000"])
        .unwrap();
    assert!(f4 > f3, "after the lease ended: {f4}");
    wait_replicas(&mut tc);
}

#[test]
fn cluster_failover_keeps_holder_lease_and_fence() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"fo");
    let old = cl.owner(slot);
    let new = cl.replica_of(old);
    let (lease, held, gone) = ("{fo}:lease", "{fo}:held", "{fo}:gone");

    let mut issued = Vec::new();
    let g = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", gone, &g, "60000"]).unwrap());
    assert_eq!(r.query(&["LOCK.RELEASE", gone, &g]), Ok(Value::Int(1)));
    let h = token();
    issued.push(r.int_or_nil(&["LOCK.ACQUIRE", held, &h, "60000"]).unwrap());
    issued.push(r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap());
    let l = token();
    // Long enough to outlast a failover on a loaded machine (6 s seen), short enough to wait
    // out at the end.
    let lease_ttl = 12_000;
    let sent = Instant::now();
    issued.push(
        r.int_or_nil(&["LOCK.ACQUIRE", lease, &l, &lease_ttl.to_string()])
            .unwrap(),
    );
    let replied = Instant::now();
    let mut oc = cl.conn(old);
    wait_replicas(&mut oc);
    let max = *issued.iter().max().unwrap();
    let waiter = spawn_waiter(old, held, 0);
    assert!(
        wait_until(Duration::from_secs(10), || info(&mut oc, held)
            .unwrap()
            .waiters
            == 1),
        "waiter did not queue"
    );
    let snaps = [snapshot(&mut r, held), snapshot(&mut r, lease)];

    let mut nc = cl.conn(new);
    let t0 = Instant::now();
    assert_eq!(cmd!(&mut nc, "CLUSTER", "FAILOVER"), Ok(Value::Okay));
    cl.wait_stable(|ranges| owner_in(ranges, slot) == new);
    eprintln!("CLUSTER FAILOVER took {:?}", t0.elapsed());
    assert_eq!(
        info_field(&mut oc, "replication", "role").as_deref(),
        Some("slave")
    );
    match waiter.recv_timeout(Duration::from_secs(10)) {
        Ok(Err(e)) => eprintln!("waiter of the old master: {e:?}"),
        Ok(Ok(v)) => panic!("waiter of the old master got a reply: {v:?}"),
        Err(_) => panic!("waiter of the old master still hangs 10s after the failover"),
    }

    // The router is sent on to the new master, which has the locks as they were.
    assert_moved_intact(&mut r, held, &snaps[0]);
    assert!(r.moved >= 1);
    assert_moved_intact(&mut r, lease, &snaps[1]);
    assert_eq!(r.info(held).unwrap().waiters, 0);
    assert_eq!(r.int_or_nil(&["LOCK.ACQUIRE", held, "thief", "1000"]), None);
    let f1 = r.int_or_nil(&["LOCK.FENCE", held, &h]).unwrap();
    assert!(
        f1 > max,
        "fence after failover {f1}, issued before: {issued:?}"
    );
    let f2 = r
        .int_or_nil(&["LOCK.ACQUIRE", gone, &token(), "60000"])
        .unwrap();
    assert!(f2 > f1);
    assert_eq!(
        info_field(&mut oc, "lock", "lock_waiting_clients").as_deref(),
        Some("0")
    );

    // The lease ends on time on the new master; the old one, now its replica, follows.
    assert_lease_ends_on_time(&mut nc, lease, lease_ttl, sent, replied);
    wait_replicas(&mut nc);
    assert_eq!(replica_info(cl.node(old), lease), None);
    let a = r.info(held).unwrap();
    let b = replica_info(cl.node(old), held).expect("old master mirrors the new one");
    assert_eq!((&a.holder, a.fence), (&b.holder, b.fence));
}

/// Guarantee 1 across a slot migration: a client waiting on the source node for a lock whose
/// key `MIGRATE` moves away must not be granted a lock there (the migrated lock is held on the
/// target); a null reply or an error is fine.
#[test]
fn a_waiter_on_a_migrating_key_is_not_granted_on_the_old_node() {
    let _serial = serial();
    let cl = Cluster::start();
    let mut r = Router::new(cl.masters()[0]);
    r.refresh();
    let slot = key_slot(b"wq");
    let from = cl.owner(slot);
    let to = *cl.masters().iter().find(|&&m| m != from).unwrap();
    let key = "{wq}:k";
    let h = token();
    let f = r.int_or_nil(&["LOCK.ACQUIRE", key, &h, "60000"]).unwrap();
    let mut fc = cl.conn(from);
    let waiter = spawn_waiter(from, key, 3_000);
    assert!(
        wait_until(Duration::from_secs(10), || info(&mut fc, key)
            .unwrap()
            .waiters
            == 1),
        "waiter did not queue"
    );
    let (from_id, to_id) = (cl.id(from), cl.id(to));
    let mut tc = cl.conn(to);
    assert_eq!(
        cmd!(&mut tc, "CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut fc, "CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(
            &mut fc,
            "MIGRATE",
            "127.0.0.1",
            to,
            "",
            0,
            5_000,
            "KEYS",
            key
        ),
        Ok(Value::Okay)
    );
    let outcome = waiter
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter still hangs 10s after MIGRATE, 3s after its WAIT timeout");
    let on_source = cmd!(&mut fc, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(cmd!(&mut tc, "ASKING"), Ok(Value::Okay));
    let on_target = info(&mut tc, key);
    eprintln!(
        "waiter: {outcome:?}; keys left in the slot on the source: {on_source:?}; \
         target: {on_target:?}"
    );
    let t = on_target.expect("the lock did not arrive on the target");
    assert_eq!((t.holder.as_deref(), t.fence), (Some(h.as_bytes()), f));
    assert!(
        !matches!(outcome, Ok(Value::Int(_))),
        "the waiter was granted {outcome:?} on the source while {h} holds the lock (fence {f}) \
         on the target: two holders"
    );
    assert_eq!(
        on_source,
        Ok(Value::Int(0)),
        "a lock was left on the source"
    );
}

/// `LOCK.GUARD` in a cluster: it declares the lock key and the guarded command's keys, so the
/// cluster checks them as one command's keys: all in the slot of the node that runs it
/// (`CROSSSLOT` otherwise, whoever gets it), sent to another node it is answered `MOVED` to
/// the slot's owner, and the guarded write reaches the owner's replica (as the write itself,
/// not as `LOCK.GUARD`).
#[test]
fn lock_guard_keys_share_the_lock_slot_and_the_write_reaches_the_replica() {
    let _serial = serial();
    let cl = Cluster::start();
    let ranges = cl.ranges();
    let masters = cl.masters();
    let (lock, data) = ("{t}:lock", "{t}:data");
    let slot = key_slot(b"t");
    assert_eq!(key_slot(lock.as_bytes()), slot);
    assert_eq!(key_slot(data.as_bytes()), slot);
    let owner = owner_in(&ranges, slot);
    let replica = cl.replica_of(owner);
    let mut oc = cl.conn(owner);
    let guarded_runs = |c: &mut Connection| lock_stat(c, "lock_guarded_runs");

    // (d) COMMAND GETKEYS on a cluster node: the lock key, then the guarded command's keys.
    let getkeys = |c: &mut Connection, words: &[&str]| -> Result<Value, String> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS");
        for w in words {
            cmd.arg(*w);
        }
        run(&cmd, c)
    };
    let bulks = |keys: &[&str]| {
        Value::Array(
            keys.iter()
                .map(|k| Value::BulkString(k.as_bytes().to_vec()))
                .collect(),
        )
    };
    for &port in &masters {
        let mut c = cl.conn(port);
        assert_eq!(
            getkeys(&mut c, &["LOCK.GUARD", lock, "5", "SET", data, "v"]),
            Ok(bulks(&[lock, data])),
            "COMMAND GETKEYS on {port}"
        );
        assert_eq!(
            getkeys(
                &mut c,
                &["LOCK.GUARD", lock, "5", "MSET", "{t}:x", "1", "{t}:y", "2"]
            ),
            Ok(bulks(&[lock, "{t}:x", "{t}:y"])),
            "COMMAND GETKEYS on {port}"
        );
        assert_eq!(
            getkeys(&mut c, &["LOCK.GUARD", "a:lock", "5", "SET", "b:data", "v"]),
            Ok(bulks(&["a:lock", "b:data"])),
            "COMMAND GETKEYS on {port}"
        );
    }

    // (a) On the owner, under the fence of a real acquire, the guarded SET runs.
    let t = token();
    let f = match cmd!(&mut oc, "LOCK.ACQUIRE", lock, &t, 60_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("LOCK.ACQUIRE {lock}: {other:?}"),
    };
    let runs0 = guarded_runs(&mut oc);
    assert_eq!(
        cmd!(&mut oc, "LOCK.GUARD", lock, f, "SET", data, "v1"),
        Ok(Value::Okay)
    );
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v1".to_vec()))
    );
    assert_eq!(guarded_runs(&mut oc), runs0.map(|r| r + 1));

    // (c) Sent to a node that does not own the slot (another master, or the owner's replica,
    //     also after READONLY: it is a write), it is answered MOVED to the owner; nothing runs.
    let moved = format!("MOVED {slot} 127.0.0.1:{owner}");
    for &port in masters.iter().filter(|&&m| m != owner).chain([&replica]) {
        let mut c = cl.conn(port);
        let runs = guarded_runs(&mut c);
        assert_eq!(
            cmd!(&mut c, "LOCK.GUARD", lock, f, "SET", data, "wrong-node"),
            Err(moved.clone()),
            "LOCK.GUARD sent to {port}"
        );
        assert_eq!(guarded_runs(&mut c), runs, "LOCK.GUARD ran on {port}");
    }
    let mut rc = cl.conn(replica);
    assert_eq!(cmd!(&mut rc, "READONLY"), Ok(Value::Okay));
    assert_eq!(
        cmd!(&mut rc, "LOCK.GUARD", lock, f, "SET", data, "wrong-node"),
        Err(moved.clone()),
        "LOCK.GUARD sent to the replica after READONLY"
    );
    // A router that knows no slot yet follows the MOVED and the write runs on the owner.
    let seed = *masters.iter().find(|&&m| m != owner).unwrap();
    let mut r = Router::new(seed);
    let fs = f.to_string();
    assert_eq!(
        r.query(&["LOCK.GUARD", lock, &fs, "SET", data, "v2"]),
        Ok(Value::Okay)
    );
    assert_eq!(r.moved, 1, "the router was not sent on to the owner");
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v2".to_vec()))
    );

    // (b) Keys in two slots: CROSSSLOT, whichever node gets it; nothing changes.
    let (la, db) = ("a:lock", "b:data");
    let (sa, sb) = (key_slot(la.as_bytes()), key_slot(db.as_bytes()));
    assert_ne!(sa, sb);
    let a_owner = owner_in(&ranges, sa);
    let mut ac = cl.conn(a_owner);
    let fa = match cmd!(&mut ac, "LOCK.ACQUIRE", la, &t, 60_000) {
        Ok(Value::Int(f)) => f,
        other => panic!("LOCK.ACQUIRE {la}: {other:?}"),
    };
    let before = info(&mut ac, la);
    for &port in &masters {
        let mut c = cl.conn(port);
        let (runs, refusals) = (
            guarded_runs(&mut c),
            lock_stat(&mut c, "lock_guarded_refusals"),
        );
        assert_err_starts(
            &cmd!(&mut c, "LOCK.GUARD", la, fa, "SET", db, "v"),
            "CROSSSLOT",
        );
        assert_eq!(
            (
                guarded_runs(&mut c),
                lock_stat(&mut c, "lock_guarded_refusals")
            ),
            (runs, refusals),
            "a CROSSSLOT refusal on {port} counted"
        );
    }
    // Two slots of the same node: CROSSSLOT too (not only a slot another node owns).
    let other_slot = (0..SLOTS)
        .find(|&s| s != sa && owner_in(&ranges, s) == a_owner)
        .unwrap();
    let same_node = format!("x{{{}}}", key_per_slot()[other_slot]);
    assert_eq!(key_slot(same_node.as_bytes()), other_slot);
    assert_err_starts(
        &cmd!(&mut ac, "LOCK.GUARD", la, fa, "SET", &same_node, "v"),
        "CROSSSLOT",
    );
    assert_err_starts(
        &cmd!(
            &mut oc,
            "LOCK.GUARD",
            lock,
            f,
            "MSET",
            data,
            "v3",
            &same_node,
            "v"
        ),
        "CROSSSLOT",
    );
    let b_owner = owner_in(&ranges, sb);
    assert!(!exists(&mut cl.conn(b_owner), db), "{db} was written");
    assert!(!exists(&mut ac, &same_node), "{same_node} was written");
    let after = info(&mut ac, la);
    assert_eq!(
        after.as_ref().map(|i| (&i.holder, i.fence)),
        before.as_ref().map(|i| (&i.holder, i.fence)),
        "the lock of a refused LOCK.GUARD changed"
    );
    assert_eq!(
        cmd!(&mut oc, "GET", data),
        Ok(Value::BulkString(b"v2".to_vec()))
    );

    // (e) The guarded write reaches the owner's replica: WAIT 1, then read it there.
    assert_eq!(
        cmd!(&mut oc, "LOCK.GUARD", lock, f, "SET", data, "v4"),
        Ok(Value::Okay)
    );
    wait_replicas(&mut oc);
    assert_eq!(
        cmd!(&mut rc, "GET", data),
        Ok(Value::BulkString(b"v4".to_vec())),
        "the guarded write on the replica"
    );
    // The replica applied the SET itself, never LOCK.GUARD (it only refused, with MOVED,
    // the ones sent to it above).
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut rc)
        .unwrap();
    let calls = |name: &str| -> i64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    assert!(
        calls("set") >= 3 && calls("lock.guard") == 0,
        "the replica's INFO commandstats: {stats}"
    );
    let ri = replica_info(cl.node(replica), lock).expect("the lock on the replica");
    assert_eq!(ri.fence, f);
    eprintln!(
        "LOCK.GUARD in the cluster: slot {slot} on {owner}, MOVED from the others, CROSSSLOT \
         for {la} + {db} (slots {sa}, {sb}) and for two slots of {a_owner}; the write on \
         replica {replica}"
    );
}
