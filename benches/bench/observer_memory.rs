//! Workload 12b (issue 25): what a blocked observer costs in memory. On a fresh server,
//! `used_memory` with 1,000 idle connections (each has sent a `PING`), then blocked in
//! `LOCK.OBSERVE mem <fence> 0`, then answered (idle again), then blocked in `BLPOP` of a
//! missing list, then `SUBSCRIBE`d to the key's keyspace channel, each state once the
//! server's per-client buffers have settled (reply-buffer resizing off, idle query buffers
//! trimmed by the server's cron after 2 s). The latency half is `observers.rs`.

use crate::*;

const MEM_KEY: &str = "mem";
const MEM_CHANNEL: &str = "__keyspace@0__:mem";

/// 12b: `used_memory` in each state of the same connections.
pub(crate) struct MemoryStates {
    pub(crate) n: usize,
    pub(crate) idle: f64,
    pub(crate) observing: f64,
    pub(crate) answered: f64,
    pub(crate) blpop: f64,
    pub(crate) after_blpop: f64,
    pub(crate) subscribed: f64,
}

impl MemoryStates {
    pub(crate) fn per(&self, from: f64, to: f64) -> f64 {
        (to - from) / self.n as f64
    }
    pub(crate) fn observer(&self) -> f64 {
        self.per(self.idle, self.observing)
    }
    pub(crate) fn blpop(&self) -> f64 {
        self.per(self.answered, self.blpop)
    }
    pub(crate) fn subscriber(&self) -> f64 {
        self.per(self.after_blpop, self.subscribed)
    }
    pub(crate) fn left(&self) -> f64 {
        self.per(self.idle, self.answered)
    }
}

/// `used_memory` once the server's per-client buffers have settled: the query buffers of
/// clients idle for 2 s are trimmed by the server's cron (each client about once a second),
/// so it waits 3 s, then until the figure holds for 2 s (within 64 bytes in all).
pub(crate) fn settled_memory(con: &mut Connection) -> f64 {
    thread::sleep(Duration::from_secs(3));
    let began = Instant::now();
    let mut last = info_field(con, "memory", "used_memory");
    let mut steady = Instant::now();
    while began.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(250));
        let now = info_field(con, "memory", "used_memory");
        if (now - last).abs() > 64.0 {
            (last, steady) = (now, Instant::now());
        } else if steady.elapsed() >= Duration::from_secs(2) {
            return now;
        }
    }
    last
}

pub(crate) fn run_memory_states(plan: &Plan, pinned: bool) -> MemoryStates {
    let srv = Server::start(if pinned {
        Opts::new().cpu(1)
    } else {
        Opts::new()
    });
    let mut probe = srv.conn();
    // Reply buffers stay at their size (16 KB) instead of shrinking on the server's cron
    // some seconds after a client's last reply, so that the states differ in nothing else.
    let _ = reply(&mut probe, &["DEBUG", "REPLYBUFFER", "RESIZING", "0"]);
    let n = plan.observers;
    let mut fleet = Fleet::open(&srv, n + 1, plan.spin);
    let ttl = HOLD_TTL_MS.to_string();
    let fence = fence_of(&fleet.call(n, &["LOCK.ACQUIRE", MEM_KEY, HOLDER, &ttl]));
    let idle = settled_memory(&mut probe);

    let mut cmd = Vec::new();
    push_cmd(
        &mut cmd,
        &["LOCK.OBSERVE", MEM_KEY, &fence.to_string(), "0"],
    );
    fleet.send(0..n, &cmd);
    wait_blocked(&mut probe, n);
    let observing = settled_memory(&mut probe);
    fleet.expect(0..n);
    fence_of(&fleet.call(n, &["LOCK.FENCE", MEM_KEY, HOLDER]));
    let answered = settled_memory(&mut probe);

    let mut cmd = Vec::new();
    push_cmd(&mut cmd, &["BLPOP", "missing", "0"]);
    fleet.send(0..n, &cmd);
    wait_blocked(&mut probe, n);
    let blpop = settled_memory(&mut probe);
    let mut push = vec!["LPUSH", "missing"];
    push.extend(std::iter::repeat_n("x", n));
    fleet.expect(0..n);
    fleet.call(n, &push);
    let after_blpop = settled_memory(&mut probe);

    let mut cmd = Vec::new();
    push_cmd(&mut cmd, &["SUBSCRIBE", MEM_CHANNEL]);
    fleet.send(0..n, &cmd);
    let bad = fleet.collect(0..n, |_, r| contains(r, "subscribe"));
    assert_eq!(bad, 0, "SUBSCRIBE {MEM_CHANNEL}");
    let subscribed = settled_memory(&mut probe);
    MemoryStates {
        n,
        idle,
        observing,
        answered,
        blpop,
        after_blpop,
        subscribed,
    }
}
