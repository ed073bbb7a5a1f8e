//! Asking Sentinel which master it names: as a client does (`Shared::resolve`), every
//! Sentinel every 50 ms (`poll_sentinels`), and with the replication state of every data
//! server (`settled_master`, at the start and the end); from the answers, the master most
//! Sentinels name now (`Shared::current_master`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use redis::RedisError;

use crate::history::{Nanos, Node};
use crate::servers::{connect, MASTER_NAME};
use crate::shared::Shared;

/// The master this Sentinel names, by its port.
fn ask_master(conn: &mut redis::Connection) -> redis::RedisResult<Node> {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(conn)?;
    addr.get(1).and_then(|p| p.parse().ok()).ok_or_else(|| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "master address",
            format!("{addr:?}"),
        ))
    })
}

/// `INFO replication` of one data server, as its fields.
fn info_replication(port: Node) -> Option<HashMap<String, String>> {
    let mut conn = connect(port, Duration::from_millis(500)).ok()?;
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect(),
    )
}

/// The master every Sentinel names, if it is a master with both other data servers
/// following it, online.
pub fn settled_master(sentinels: &[Node], data: &[Node]) -> Option<Node> {
    let mut named = Vec::new();
    for &s in sentinels {
        let mut conn = connect(s, Duration::from_millis(500)).ok()?;
        named.push(ask_master(&mut conn).ok()?);
    }
    let master = named[0];
    if named.iter().any(|&m| m != master) || !data.contains(&master) {
        return None;
    }
    let info = info_replication(master)?;
    let online = (0..data.len())
        .filter(|i| {
            info.get(&format!("slave{i}"))
                .is_some_and(|v| v.contains("state=online"))
        })
        .count();
    if info.get("role").map(String::as_str) != Some("master") || online != data.len() - 1 {
        return None;
    }
    for &replica in data.iter().filter(|&&p| p != master) {
        let info = info_replication(replica)?;
        let ok = info.get("role").map(String::as_str) == Some("slave")
            && info.get("master_port") == Some(&master.to_string())
            && info.get("master_link_status").map(String::as_str) == Some("up");
        if !ok {
            return None;
        }
    }
    Some(master)
}

impl Shared {
    /// The master Sentinel names, asked as a client would (the first Sentinel that answers,
    /// starting from `first`); every answer goes into the history.
    pub fn resolve(&self, first: usize) -> Option<Node> {
        let n = self.sentinels.len();
        for i in 0..n {
            let s = self.sentinels[(first + i) % n];
            let at = self.now();
            let answer =
                connect(s, Duration::from_millis(300)).and_then(|mut c| ask_master(&mut c));
            if let Ok(master) = answer {
                self.observe(s, master, at);
                return Some(master);
            }
        }
        None
    }

    /// The master most Sentinels name now (for picking a fault's target).
    pub fn current_master(&self) -> Option<Node> {
        let obs = self
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut latest: HashMap<Node, (Nanos, Node)> = HashMap::new();
        for o in obs.iter() {
            let e = latest.entry(o.sentinel).or_insert((o.at, o.master));
            if o.at >= e.0 {
                *e = (o.at, o.master);
            }
        }
        let mut votes: BTreeMap<Node, usize> = BTreeMap::new();
        for (_, m) in latest.values() {
            *votes.entry(*m).or_default() += 1;
        }
        votes.into_iter().max_by_key(|&(_, v)| v).map(|(m, _)| m)
    }
}

/// Asks every Sentinel every 50 ms which master it names: the master of record over time.
pub fn poll_sentinels(shared: Arc<Shared>) {
    let mut conns: Vec<Option<redis::Connection>> = shared.sentinels.iter().map(|_| None).collect();
    while !shared.stop.load(Ordering::SeqCst) {
        for (i, &s) in shared.sentinels.iter().enumerate() {
            if conns[i].is_none() {
                conns[i] = connect(s, Duration::from_millis(300)).ok();
            }
            let Some(conn) = conns[i].as_mut() else {
                continue;
            };
            let at = shared.now();
            match ask_master(conn) {
                Ok(master) => shared.observe(s, master, at),
                Err(_) => conns[i] = None,
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Until the master of the start is settled (`settled_master`), and every Sentinel knows
/// the others and both replicas.
pub fn wait_ready(sentinels: &[Node], data: &[Node]) -> Result<(), String> {
    wait_until(
        "servers up and replicas in sync",
        Duration::from_secs(30),
        || settled_master(sentinels, data) == Some(data[0]),
    )?;
    // Without each other, Sentinels reach no quorum and nothing fails over.
    wait_until(
        "Sentinels aware of each other and of both replicas",
        Duration::from_secs(30),
        || sentinels_ready(sentinels),
    )
}

/// Polls `ready` every 100 ms until it holds, for at most `limit`.
pub fn wait_until(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if ready() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{what}: not within {limit:?}"))
}

fn sentinels_ready(sentinels: &[Node]) -> bool {
    sentinels.iter().all(|&s| {
        let Ok(mut c) = connect(s, Duration::from_millis(500)) else {
            return false;
        };
        let count = |sub: &str, c: &mut redis::Connection| {
            redis::cmd("SENTINEL")
                .arg(sub)
                .arg(MASTER_NAME)
                .query::<Vec<redis::Value>>(c)
                .map_or(0, |v| v.len())
        };
        count("replicas", &mut c) == 2 && count("sentinels", &mut c) == 2
    })
}
