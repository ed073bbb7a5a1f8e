//! A minimal cluster-aware client (the redis crate is built without its `cluster` feature):
//! routes by slot, follows `MOVED` and `ASK`, and counts them for the tests to check.

use std::collections::HashMap;
use std::time::Duration;

use crate::cluster_setup::cluster_slots;
use crate::cmd;
use crate::common::{parse_info, run, LockInfo};
use crate::slots::{key_slot, SLOTS};
use redis::{Connection, Value};

/// A minimal cluster client: sends a command to the node its key's slot belongs to, as far
/// as it knows, and follows `MOVED` (learning the slot's owner) and `ASK` (once, after
/// `ASKING`).
pub(crate) struct Router {
    seed: u16,
    slots: Vec<Option<u16>>,
    conns: HashMap<u16, Connection>,
    pub(crate) moved: usize,
    pub(crate) asked: usize,
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
    pub(crate) fn new(seed: u16) -> Router {
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
    pub(crate) fn refresh(&mut self) {
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
    pub(crate) fn query(&mut self, args: &[&str]) -> Result<Value, String> {
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
    pub(crate) fn pipeline(&mut self, cmds: &[Vec<String>]) -> Vec<Value> {
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

    pub(crate) fn info(&mut self, key: &str) -> Option<LockInfo> {
        parse_info(&self.query(&["LOCK.INFO", key]).unwrap())
    }

    pub(crate) fn int_or_nil(&mut self, args: &[&str]) -> Option<i64> {
        match self.query(args) {
            Ok(Value::Int(i)) => Some(i),
            Ok(Value::Nil) => None,
            other => panic!("{args:?}: {other:?}"),
        }
    }
}
