//! Each violation planted alone in a small history, a clean history with every kind of
//! unknown outcome, and a simulated correct server under random timing: zero.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use rand::{Rng, SeedableRng};

use super::{check, Report};
use crate::history::{History, MasterRecord, Nanos, Node, Observation, Op, OpKind, Outcome};

const X: Node = 7001;
const Y: Node = 7002;
const SENTINELS: [Node; 3] = [26001, 26002, 26003];

fn t(ms: u64) -> Nanos {
    ms * 1_000_000
}

fn ok(v: i64) -> Outcome {
    Outcome::Ok(v)
}

fn failed() -> Outcome {
    Outcome::Failed("refused".into())
}

fn unknown() -> Outcome {
    Outcome::Unknown("timed out".into())
}

/// A history under construction; times in milliseconds.
#[derive(Default)]
struct Plant {
    h: History,
    holds: HashMap<u64, (u32, String, Option<u64>, Node)>,
    next: u64,
}

impl Plant {
    /// Sentinel named `masters[i].1` from `masters[i].0` on, every Sentinel within 2 ms.
    fn masters(mut self, masters: &[(u64, Node)]) -> Self {
        for &(at, node) in masters {
            for (i, s) in SENTINELS.iter().enumerate() {
                self.h.observations.push(Observation {
                    at: t(at + i as u64),
                    sentinel: *s,
                    master: node,
                });
            }
        }
        self
    }

    fn log(mut self, key: &str, fences: &[u64]) -> Self {
        self.h
            .final_logs
            .insert(key.to_string(), Some(fences.to_vec()));
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        hold: u64,
        kind: OpKind,
        at: (u64, u64),
        outcome: Outcome,
        ttl_ms: u64,
        node: Option<Node>,
    ) {
        let (client, key, fence, grant_node) = self.holds[&hold].clone();
        self.h.ops.push(Op {
            client,
            key,
            hold,
            kind,
            invoke: t(at.0),
            complete: t(at.1),
            outcome,
            fence,
            ttl_ms,
            node: node.unwrap_or(grant_node),
        });
    }

    /// An acquire by `client` on `node`; `fence` None: not acknowledged (`outcome` says how).
    fn acquire(
        &mut self,
        client: u32,
        key: &str,
        node: Node,
        at: (u64, u64),
        outcome: Outcome,
        ttl_ms: u64,
    ) -> u64 {
        self.next += 1;
        let fence = match outcome {
            Outcome::Ok(f) => Some(f as u64),
            _ => None,
        };
        self.holds
            .insert(self.next, (client, key.to_string(), fence, node));
        self.push(self.next, OpKind::Acquire, at, outcome, ttl_ms, None);
        self.next
    }

    fn grant(&mut self, client: u32, key: &str, node: Node, at: (u64, u64), fence: u64) -> u64 {
        self.acquire(client, key, node, at, ok(fence as i64), 3000)
    }

    fn write(&mut self, hold: u64, at: (u64, u64), outcome: Outcome) {
        self.push(hold, OpKind::GuardedWrite, at, outcome, 0, None);
    }

    fn extend(&mut self, hold: u64, at: (u64, u64), outcome: Outcome, ttl_ms: u64) {
        self.push(hold, OpKind::Extend, at, outcome, ttl_ms, None);
    }

    fn release(&mut self, hold: u64, at: (u64, u64), outcome: Outcome) {
        self.push(hold, OpKind::Release, at, outcome, 0, None);
    }

    fn check(&self) -> Report {
        check(&self.h)
    }
}

/// The violation counts, in the order of `Report::kinds`.
fn counts(r: &Report) -> [usize; 7] {
    [
        r.overlaps.count,
        r.lost_grants.count,
        r.lost_writes.count,
        r.write_order.count,
        r.fence_regressions.count,
        r.fence_repeats.count,
        r.unexplained_entries.count,
    ]
}

#[test]
fn clean_history_reports_nothing() {
    let mut p = Plant::default().masters(&[(0, X), (5000, Y)]);
    let a = p.grant(1, "a", X, (10, 12), 100);
    p.write(a, (13, 14), ok(1));
    p.extend(a, (15, 16), ok(1), 3000);
    p.release(a, (17, 18), ok(1));
    // Queued behind `a`: sent before a's reply, granted after its release.
    let b = p.grant(2, "a", X, (11, 19), 101);
    p.write(b, (20, 21), ok(2));
    p.extend(b, (22, 30), unknown(), 3000);
    p.release(b, (31, 40), unknown());
    // Unknown and refused acquires prove no hold.
    p.acquire(3, "a", X, (20, 40), unknown(), 3000);
    p.acquire(1, "a", X, (41, 42), failed(), 3000);
    // After the failover, on the new master.
    let c = p.grant(2, "a", Y, (5100, 5102), 200);
    p.write(c, (5103, 5104), unknown()); // landed
    p.release(c, (5105, 5106), ok(1));
    let d = p.grant(3, "a", Y, (5200, 5201), 201);
    p.write(d, (5202, 5203), unknown()); // did not land
    p.write(d, (5204, 5205), failed()); // refused, did not land
    p.release(d, (5206, 5207), ok(1));
    let e = p.grant(1, "b", Y, (5300, 5301), 202);
    p.write(e, (5302, 5303), ok(1));
    p.release(e, (5304, 5305), failed()); // refused: the lease runs on, nobody else came
                                          // The deposed master grants a key nobody else used: split brain, but no violation.
    let f = p.grant(4, "c", X, (5400, 5401), 300);
    p.release(f, (5402, 5403), ok(1));
    let p = p.log("a", &[100, 101, 200]).log("b", &[202]).log("c", &[]);
    let r = p.check();
    assert_eq!(counts(&r), [0; 7], "{}", r.table("plain"));
    assert_eq!(r.violations(), 0);
    assert_eq!(r.failovers, 1);
    assert_eq!(r.acquires.ok, 6);
    assert_eq!(r.acquires.unknown, 1);
    assert_eq!(r.acquires.failed, 1);
    assert_eq!(r.deposed_grants, 1);
    assert_eq!((r.writes.ok, r.writes.failed, r.writes.unknown), (3, 1, 2));
}

#[test]
fn overlap_from_split_brain_is_caught() {
    let mut p = Plant::default().masters(&[(0, X), (1000, Y)]);
    // X was deposed at 1000 and still grants; Y grants the same key meanwhile.
    let a = p.grant(1, "a", X, (1500, 1501), 500);
    p.release(a, (1600, 1601), ok(1));
    let b = p.grant(2, "a", Y, (1550, 1551), 501);
    p.release(b, (1700, 1701), ok(1));
    let r = p.check();
    assert_eq!(counts(&r), [1, 0, 0, 0, 0, 0, 0], "{}", r.table("plain"));
    assert_eq!(r.deposed_grants, 1);
    assert_eq!(r.overlaps.examples.len(), 1);
}

#[test]
fn overlap_ends_at_the_first_release_sent() {
    let mut p = Plant::default().masters(&[(0, X), (1000, Y)]);
    let a = p.grant(1, "a", X, (1500, 1501), 500);
    p.release(a, (1540, 1560), unknown());
    let b = p.grant(2, "a", Y, (1550, 1551), 501);
    p.release(b, (1700, 1701), ok(1));
    assert_eq!(p.check().overlaps.count, 0);
}

#[test]
fn lost_grant_is_caught() {
    let mut p = Plant::default().masters(&[(0, X), (2000, Y)]);
    // Granted by X as master of record, lease 10 s; X dies, the release is refused (never
    // sent), Y is promoted without the hold and grants the key within the lease.
    let a = p.acquire(1, "a", X, (100, 101), ok(100), 10_000);
    p.release(a, (2500, 2501), failed());
    let b = p.grant(2, "a", Y, (3000, 3001), 200);
    p.release(b, (3002, 3003), ok(1));
    let r = p.check();
    assert_eq!(counts(&r), [0, 1, 0, 0, 0, 0, 0], "{}", r.table("plain"));
    assert_eq!(r.deposed_grants, 0);
}

#[test]
fn lost_grant_needs_the_hold_to_be_owed() {
    for release in [unknown(), ok(1)] {
        let mut p = Plant::default().masters(&[(0, X), (2000, Y)]);
        let a = p.acquire(1, "a", X, (100, 101), ok(100), 10_000);
        // May have been released (or was): the server owed it nothing after the send.
        p.release(a, (2500, 2501), release);
        let b = p.grant(2, "a", Y, (3000, 3001), 200);
        p.release(b, (3002, 3003), ok(1));
        assert_eq!(counts(&p.check()), [0; 7]);
    }
}

#[test]
fn an_extend_of_unknown_outcome_lengthens_nothing() {
    for (extend, want) in [(unknown(), 0), (failed(), 0), (ok(1), 1)] {
        let mut p = Plant::default().masters(&[(0, X)]);
        let a = p.acquire(1, "a", X, (100, 101), ok(100), 1000);
        p.extend(a, (500, 600), extend, 1000);
        // After the acquire's lease bound (1100), before the extend's (1500).
        let b = p.grant(2, "a", X, (1200, 1201), 200);
        p.release(b, (1202, 1203), ok(1));
        let r = p.check();
        assert_eq!(r.overlaps.count, want, "{}", r.table("plain"));
        assert_eq!(r.lost_grants.count, want);
    }
}

#[test]
fn lost_guarded_write_is_caught() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (10, 11), 100);
    p.write(a, (12, 13), ok(1));
    p.release(a, (14, 15), ok(1));
    let b = p.grant(2, "a", X, (20, 21), 101);
    p.write(b, (22, 23), unknown()); // may be missing
    p.release(b, (24, 25), ok(1));
    let c = p.grant(3, "a", X, (30, 31), 102);
    p.write(c, (32, 33), failed()); // known missing
    p.release(c, (34, 35), ok(1));
    let r = p.log("a", &[]).check();
    assert_eq!(counts(&r), [0, 0, 1, 0, 0, 0, 0], "{}", r.table("plain"));
}

#[test]
fn writes_of_an_unread_log_are_not_judged() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (10, 11), 100);
    p.write(a, (12, 13), ok(1));
    p.release(a, (14, 15), ok(1));
    p.h.final_logs.insert("a".into(), None);
    let r = p.check();
    assert_eq!(counts(&r), [0; 7]);
    assert_eq!(r.unread_logs, vec!["a".to_string()]);
}

#[test]
fn guarded_writes_out_of_order_are_caught() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (1, 2), 1);
    p.write(a, (2, 3), ok(1));
    p.release(a, (4, 5), ok(1));
    let b = p.grant(2, "a", X, (10, 20), 3);
    p.write(b, (21, 22), ok(2));
    p.release(b, (30, 31), ok(1));
    // Sent before b's grant was acknowledged: its lower fence is no regression.
    let c = p.grant(3, "a", X, (15, 40), 2);
    p.write(c, (41, 42), ok(3));
    p.release(c, (43, 44), ok(1));
    let r = p.log("a", &[1, 3, 2]).check();
    assert_eq!(counts(&r), [0, 0, 0, 1, 0, 0, 0], "{}", r.table("plain"));
}

#[test]
fn fence_regression_is_caught() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (10, 20), 300);
    p.release(a, (30, 31), ok(1));
    let b = p.grant(2, "a", X, (40, 50), 200);
    p.release(b, (60, 61), ok(1));
    // Another key's fences are its own.
    let c = p.grant(3, "b", X, (70, 71), 100);
    p.release(c, (72, 73), ok(1));
    let r = p.check();
    assert_eq!(counts(&r), [0, 0, 0, 0, 1, 0, 0], "{}", r.table("plain"));
}

#[test]
fn fence_repeat_is_caught() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (10, 20), 300);
    p.release(a, (30, 31), ok(1));
    let b = p.grant(2, "a", X, (40, 50), 300);
    p.release(b, (60, 61), ok(1));
    let r = p.check();
    assert_eq!(counts(&r), [0, 0, 0, 0, 0, 1, 0], "{}", r.table("plain"));
}

#[test]
fn unexplained_log_entry_is_caught() {
    let mut p = Plant::default().masters(&[(0, X)]);
    let a = p.grant(1, "a", X, (10, 11), 100);
    p.write(a, (12, 13), failed()); // refused, yet in the log
    p.release(a, (14, 15), ok(1));
    let r = p.log("a", &[100]).check();
    assert_eq!(counts(&r), [0, 0, 0, 0, 0, 0, 1], "{}", r.table("plain"));
}

#[test]
fn master_of_record_follows_the_first_sentinel_to_move() {
    let obs = |at: u64, sentinel: Node, master: Node| Observation {
        at: t(at),
        sentinel,
        master,
    };
    let [s1, s2, s3] = SENTINELS;
    let record = MasterRecord::from_observations(&[
        obs(0, s1, X),
        obs(0, s2, X),
        obs(300, s3, Y), // first heard of late, already moved: no change by itself
        obs(100, s1, Y),
        obs(150, s2, X), // lagging: still names X
        obs(200, s2, Y),
    ]);
    assert_eq!(record.changes(), &[(t(0), X), (t(100), Y)]);
    assert_eq!(record.failovers(), 1);
    assert!(record.deposed(X, t(120)));
    assert!(!record.deposed(X, t(50)));
    assert!(!record.deposed(Y, t(50)));
    assert!(record.master_throughout(X, t(10), t(99)));
    assert!(!record.master_throughout(X, t(10), t(100)));
    assert_eq!(record.at(t(99)), Some(X));
}

/// A correct lock on one server that never fails, driven by clients with random latencies,
/// pauses past their lease, and replies lost after the server acted (or before): every rule
/// must find nothing, whatever the timing.
#[test]
fn a_correct_server_under_random_timing_reports_nothing() {
    for seed in 0..20 {
        let r = check(&simulate(seed, false));
        assert_eq!(counts(&r), [0; 7], "seed {seed}: {}", r.table("sim"));
        assert!(r.acquires.ok > 50, "seed {seed}: {:?}", r.acquires);
    }
}

/// The same server, forgetting a hold now and then (as a promoted replica that never had
/// it): the simulation is sharp enough for the rules to see it.
#[test]
fn a_server_that_forgets_holds_is_caught() {
    let mut caught = 0;
    for seed in 0..20 {
        let r = check(&simulate(seed, true));
        assert_eq!(r.fence_regressions.count + r.fence_repeats.count, 0);
        if r.overlaps.count > 0 && r.lost_grants.count > 0 {
            caught += 1;
        }
    }
    assert!(caught >= 15, "caught in {caught} of 20 seeds");
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Apply,
    Reply,
}

fn simulate(seed: u64, forgets: bool) -> History {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let ttl_ms = 20;
    let mut h = History::default();
    for s in SENTINELS {
        h.observations.push(Observation {
            at: 0,
            sentinel: s,
            master: X,
        });
    }
    // The server: one key, its holder (hold id), lease deadline, last fence, and log.
    let mut holder: Option<(u64, Nanos, u64)> = None;
    let mut last_fence = 0u64;
    let mut log: Vec<u64> = Vec::new();
    // Per client: the hold it is working on and the next step of its loop.
    let clients = 6u32;
    let mut state: Vec<(u64, Option<u64>, OpKind)> = (0..clients)
        .map(|c| (u64::from(c) + 1, None, OpKind::Acquire))
        .collect();
    let mut next_hold = u64::from(clients) + 1;
    let mut pending: HashMap<u32, Op> = HashMap::new();
    let mut events = BinaryHeap::new();
    for c in 0..clients {
        events.push(Reverse((t(rng.gen_range(0..5)), Step::Reply, c)));
    }
    while let Some(Reverse((now, step, c))) = events.pop() {
        if now > t(3000) {
            break;
        }
        if step == Step::Apply {
            let op = pending.get_mut(&c).expect("pending op");
            if let Some((_, deadline, _)) = holder {
                if deadline <= now || (forgets && rng.gen_range(0..30) == 0) {
                    holder = None;
                }
            }
            let held_by_me = matches!(holder, Some((hold, _, _)) if hold == op.hold);
            let result = match op.kind {
                OpKind::Acquire if holder.is_none() => {
                    last_fence += 1 + rng.gen_range(0..3);
                    holder = Some((op.hold, now + t(ttl_ms), last_fence));
                    op.fence = Some(last_fence);
                    Some(last_fence as i64)
                }
                OpKind::Acquire => None,
                OpKind::GuardedWrite if held_by_me => {
                    log.push(op.fence.expect("fence"));
                    Some(log.len() as i64)
                }
                OpKind::Extend if held_by_me => {
                    let (hold, _, fence) = holder.expect("held");
                    holder = Some((hold, now + t(ttl_ms), fence));
                    Some(1)
                }
                OpKind::Release if held_by_me => {
                    holder = None;
                    Some(1)
                }
                _ => None,
            };
            // One reply in ten is lost (the server may or may not have acted: here it did).
            op.outcome = match result {
                _ if rng.gen_range(0..10) == 0 => Outcome::Unknown("reply lost".into()),
                Some(v) => Outcome::Ok(v),
                None => Outcome::Failed("refused".into()),
            };
            if !op.outcome.is_ok() && op.kind == OpKind::Acquire {
                op.fence = None;
            }
            events.push(Reverse((now + t(rng.gen_range(0..4)), Step::Reply, c)));
            continue;
        }
        // A reply: record the op, pick the next one (sometimes after a pause past the lease).
        let (hold, fence, kind) = state[c as usize];
        let mut next = (hold, fence, kind);
        if let Some(mut op) = pending.remove(&c) {
            op.complete = now;
            let granted = op.kind == OpKind::Acquire && op.outcome.is_ok();
            next = match op.kind {
                OpKind::Acquire if granted => (op.hold, op.fence, OpKind::GuardedWrite),
                OpKind::Acquire => (op.hold, None, OpKind::Acquire),
                OpKind::GuardedWrite => (op.hold, op.fence, OpKind::Extend),
                OpKind::Extend => (op.hold, op.fence, OpKind::Release),
                OpKind::Release => (op.hold, None, OpKind::Acquire),
            };
            h.ops.push(op);
        }
        if next.2 == OpKind::Acquire {
            next.0 = next_hold;
            next_hold += 1;
        }
        state[c as usize] = next;
        let pause = if rng.gen_range(0..20) == 0 {
            rng.gen_range(15..40)
        } else {
            rng.gen_range(0..3)
        };
        let invoke = now + t(pause);
        // A request lost before it reached the server: unknown, and nothing happened.
        let lost_request = rng.gen_range(0..30) == 0;
        pending.insert(
            c,
            Op {
                client: c,
                key: "a".into(),
                hold: next.0,
                kind: next.2,
                invoke,
                complete: invoke,
                outcome: Outcome::Unknown("request lost".into()),
                fence: next.1,
                ttl_ms: if matches!(next.2, OpKind::Acquire | OpKind::Extend) {
                    ttl_ms
                } else {
                    0
                },
                node: X,
            },
        );
        let step = if lost_request {
            Step::Reply
        } else {
            Step::Apply
        };
        events.push(Reverse((invoke + t(rng.gen_range(0..4)), step, c)));
    }
    // Ops still in flight never completed: unknown, as the harness records them at the end.
    for (_, mut op) in pending {
        op.complete = t(3001);
        op.outcome = Outcome::Unknown("in flight at the end".into());
        if op.kind == OpKind::Acquire {
            op.fence = None;
        }
        h.ops.push(op);
    }
    let mut logs = BTreeMap::new();
    logs.insert("a".to_string(), Some(log));
    h.final_logs = logs;
    h
}
