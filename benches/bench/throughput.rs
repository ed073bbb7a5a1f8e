//! Throughput phases (workloads 1, 2, 3, 6b and 10): what an op sends, the connections'
//! loops, and one measured phase.

#[allow(unused_imports)]
use crate::*;

/// What one op of a throughput phase sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    /// `LOCK.ACQUIRE key token ttl`, then `LOCK.RELEASE key token`.
    LockCycle,
    /// `SET key token NX PX ttl`, then `EVALSHA` compare-and-delete.
    LuaCycle,
    /// `SET key token PX ttl`, then `DEL key`.
    FloorCycle,
    /// `MINLOCK.ACQUIRE key token ttl`, then `MINLOCK.RELEASE key token`: the least a lock
    /// that is a module type costs (`tests/support/minimal_lock.c`).
    MinimalCycle,
    /// `EVALSHA` (`SET NX PX` + `INCR key:fence`), then `EVALSHA` compare-and-delete.
    LuaFencedCycle,
    /// `LOCK.ACQUIRE` on a fresh key.
    LockAcquire,
    /// `SET NX PX` on a fresh key.
    SetNx,
    /// `LOCK.INFO` of a held lock.
    LockInfo,
    /// `GET` of a string lock.
    Get,
}

impl Op {
    pub(crate) fn steps(self) -> usize {
        match self {
            Op::LockCycle
            | Op::LuaCycle
            | Op::FloorCycle
            | Op::MinimalCycle
            | Op::LuaFencedCycle => 2,
            Op::LockAcquire | Op::SetNx | Op::LockInfo | Op::Get => 1,
        }
    }

    /// Whether every op sends the same commands (so a batch is encoded once).
    fn fixed(self) -> bool {
        matches!(self, Op::LockInfo | Op::Get)
    }

    /// The key of op number `n` of connection `t`: cycles go round a keyspace, fresh-key ops
    /// never repeat a key, reads read one key.
    pub(crate) fn key(self, t: usize, n: u64) -> String {
        let mut k = String::new();
        self.write_key(t, n, &mut k);
        k
    }

    fn write_key(self, t: usize, n: u64, out: &mut String) {
        let i = match self {
            Op::LockAcquire | Op::SetNx => n,
            Op::LockInfo | Op::Get => 0,
            _ => n % KEYSPACE,
        };
        out.clear();
        write!(out, "lk:{t}:{i:09}").unwrap();
    }

    pub(crate) fn encode(
        self,
        step: usize,
        (key, token, ttl): (&str, &str, &str),
        s: &Scripts,
        buf: &mut Vec<u8>,
    ) {
        match (self, step) {
            (Op::LockCycle | Op::LockAcquire, 0) => {
                push_cmd(buf, &["LOCK.ACQUIRE", key, token, ttl])
            }
            (Op::LockCycle, _) => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            (Op::LuaCycle | Op::SetNx, 0) => push_cmd(buf, &["SET", key, token, "NX", "PX", ttl]),
            (Op::FloorCycle, 0) => push_cmd(buf, &["SET", key, token, "PX", ttl]),
            (Op::FloorCycle, _) => push_cmd(buf, &["DEL", key]),
            (Op::MinimalCycle, 0) => push_cmd(buf, &["MINLOCK.ACQUIRE", key, token, ttl]),
            (Op::MinimalCycle, _) => push_cmd(buf, &["MINLOCK.RELEASE", key, token]),
            (Op::LuaFencedCycle, 0) => {
                let fence_key = format!("{key}:fence");
                let sha = &s.fenced_acquire;
                push_cmd(buf, &["EVALSHA", sha, "2", key, &fence_key, token, ttl])
            }
            (Op::LuaCycle | Op::LuaFencedCycle, _) => {
                push_cmd(buf, &["EVALSHA", &s.release, "1", key, token])
            }
            (Op::LockInfo, _) => push_cmd(buf, &["LOCK.INFO", key]),
            (Op::Get, _) => push_cmd(buf, &["GET", key]),
            (Op::SetNx, _) | (Op::LockAcquire, _) => unreachable!(),
        }
    }

    /// Whether `r` is the reply of a successful step (a lock taken, released, read).
    pub(crate) fn accepts(self, step: usize, r: Reply) -> bool {
        match (self, step) {
            (Op::LockCycle | Op::MinimalCycle | Op::LockAcquire | Op::LuaFencedCycle, 0) => {
                r.is_fence()
            }
            (Op::LuaCycle | Op::FloorCycle | Op::SetNx, 0) => r.is_ok(),
            // RESP2 flat array: 6 fields since shared holds (issue 13), 4 before.
            (Op::LockInfo, _) => matches!(r.array_len(), Some(12 | 8)),
            (Op::Get, _) => r.is_bulk(),
            (_, _) => r.int() == Some(1),
        }
    }

    /// How to remove the keys a fresh-key op left behind.
    pub(crate) fn cleanup(self, key: &str, token: &str, buf: &mut Vec<u8>) {
        match self {
            Op::LockAcquire => push_cmd(buf, &["LOCK.RELEASE", key, token]),
            Op::SetNx => push_cmd(buf, &["DEL", key]),
            _ => {}
        }
    }
}

/// One measured phase, or the sum of its rounds.
pub(crate) struct Measured {
    pub(crate) label: String,
    pub(crate) depth: usize,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) cpu_secs: f64,
    /// CPU time of the other servers probed (a replica), over the windows.
    pub(crate) other_cpu_secs: f64,
    /// Bytes added to the replication stream and to the AOF over the windows.
    pub(crate) repl_bytes: f64,
    pub(crate) aof_bytes: f64,
    pub(crate) errors: u64,
    /// ops/s of each round.
    pub(crate) rounds: Vec<f64>,
    /// Server CPU µs per op of each round.
    pub(crate) round_cpu: Vec<f64>,
}

impl Measured {
    pub(crate) fn empty(label: &str, depth: usize) -> Measured {
        Measured {
            label: label.to_string(),
            depth,
            ops: 0,
            secs: 0.0,
            hist: new_hist(),
            cpu_secs: 0.0,
            other_cpu_secs: 0.0,
            repl_bytes: 0.0,
            aof_bytes: 0.0,
            errors: 0,
            rounds: Vec::new(),
            round_cpu: Vec::new(),
        }
    }
    /// Adds one more round of the same phase.
    pub(crate) fn absorb(&mut self, round: Measured) {
        self.ops += round.ops;
        self.secs += round.secs;
        self.cpu_secs += round.cpu_secs;
        self.other_cpu_secs += round.other_cpu_secs;
        self.repl_bytes += round.repl_bytes;
        self.aof_bytes += round.aof_bytes;
        self.errors += round.errors;
        self.hist.add(&round.hist).unwrap();
        self.rounds.extend(round.rounds);
        self.round_cpu.extend(round.round_cpu);
    }
    /// (max − min) / mean of the rounds' ops/s: how far one round can be trusted (NaN for
    /// a single round).
    pub(crate) fn spread(&self) -> f64 {
        if self.rounds.len() < 2 {
            return f64::NAN;
        }
        let max = self.rounds.iter().cloned().fold(f64::MIN, f64::max);
        let min = self.rounds.iter().cloned().fold(f64::MAX, f64::min);
        let mean = self.rounds.iter().sum::<f64>() / self.rounds.len() as f64;
        (max - min) / mean
    }
    pub(crate) fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    pub(crate) fn cpu_us_per_op(&self) -> f64 {
        self.cpu_secs * 1e6 / self.ops as f64
    }
    pub(crate) fn cpu_util(&self) -> f64 {
        self.cpu_secs / self.secs
    }
    pub(crate) fn json(&self) -> Json {
        let mut fields = vec![
            ("name", self.label.as_str().into()),
            ("pipeline", (self.depth as u64).into()),
            ("ops", self.ops.into()),
            ("seconds", self.secs.into()),
            ("ops_per_sec", self.rate().into()),
            ("p50_us", self.hist.value_at_quantile(0.5).into()),
            ("p99_us", self.hist.value_at_quantile(0.99).into()),
            ("p999_us", self.hist.value_at_quantile(0.999).into()),
            ("max_us", self.hist.max().into()),
            ("server_cpu_us_per_op", self.cpu_us_per_op().into()),
            ("server_cpu_util", self.cpu_util().into()),
            ("errors", self.errors.into()),
            ("spread", self.spread().into()),
            (
                "round_ops_per_sec",
                Json::Arr(self.rounds.iter().map(|&r| r.into()).collect()),
            ),
        ];
        if self.repl_bytes > 0.0 {
            let per_op = self.repl_bytes / self.ops as f64;
            fields.push(("replication_bytes_per_op", per_op.into()));
        }
        if self.aof_bytes > 0.0 {
            fields.push((
                "aof_bytes_per_op",
                (self.aof_bytes / self.ops as f64).into(),
            ));
        }
        obj(fields)
    }
}

/// The measurement window, shared by every thread of a phase.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

pub(crate) struct ThreadResult {
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    pub(crate) hist: Histogram<u64>,
}

impl ThreadResult {
    pub(crate) fn new() -> ThreadResult {
        ThreadResult {
            ops: 0,
            errors: 0,
            hist: new_hist(),
        }
    }

    /// Runs `batch` (which returns its unexpected replies) until the window ends, counting
    /// the `depth` ops of each batch that ends inside the window.
    pub(crate) fn run(w: Window, depth: usize, mut batch: impl FnMut() -> u64) -> ThreadResult {
        let mut r = ThreadResult::new();
        loop {
            let began = Instant::now();
            if began >= w.end {
                break;
            }
            r.errors += batch();
            let done = Instant::now();
            if done >= w.start && done < w.end {
                r.ops += depth as u64;
                r.hist.record(micros(done - began)).unwrap();
            }
        }
        r
    }
}

/// One connection's loop: batches of `depth` ops until the window ends.
pub(crate) fn drive(
    op: Op,
    depth: usize,
    t: usize,
    mut pipe: Pipe,
    s: &Scripts,
    w: Window,
) -> ThreadResult {
    let token = uuid::Uuid::new_v4().to_string();
    let (ttl, hold) = (TTL_MS.to_string(), HOLD_TTL_MS.to_string());
    let key0 = op.key(t, 0);
    match op {
        Op::LockInfo => drop(pipe.int(&["LOCK.ACQUIRE", &key0, &token, &hold])),
        Op::Get => pipe.expect(&["SET", &key0, &token, "PX", &hold], |r| r.is_ok()),
        _ => {}
    }
    let mut bufs: Vec<Vec<u8>> = vec![Vec::with_capacity(4096); op.steps()];
    let mut keys: Vec<String> = vec![String::new(); depth];
    let mut n = 0u64;
    let mut encode = |bufs: &mut [Vec<u8>], n: u64| {
        for (i, k) in keys.iter_mut().enumerate() {
            op.write_key(t, n + i as u64, k);
        }
        for (step, buf) in bufs.iter_mut().enumerate() {
            buf.clear();
            for k in &keys {
                op.encode(step, (k, &token, &ttl), s, buf);
            }
        }
    };
    if op.fixed() {
        encode(&mut bufs, 0);
    }
    let r = ThreadResult::run(w, depth, || {
        if !op.fixed() {
            encode(&mut bufs, n);
        }
        n += depth as u64;
        let mut bad = 0;
        for (step, buf) in bufs.iter().enumerate() {
            bad += pipe.round_trip(buf, depth, |_, r| op.accepts(step, r));
        }
        bad
    });
    // Fresh-key ops leave their keys behind: remove them, unmeasured, so that the next phase
    // starts from an empty keyspace and an empty lease index.
    if matches!(op, Op::LockAcquire | Op::SetNx) {
        let token = &token;
        load(
            &mut pipe,
            0..n as usize,
            1,
            |i, buf| op.cleanup(&op.key(t, i as u64), token, buf),
            |r| r.int() == Some(1),
        );
    }
    r
}

/// Runs `op` on `CONNS` connections for one warm-up and a measurement window of `phase`.
pub(crate) fn run_phase(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    phase: Duration,
    (label, op, depth): (&str, Op, usize),
) -> Measured {
    run_threads(srv, plan, phase, (label, depth), |t, pipe, w| {
        drive(op, depth, t, pipe, s, w)
    })
}

/// Runs `drive(t, connection, window)` on `CONNS` connections, one thread each, for one
/// warm-up and a measurement window of `phase`, and reads the server's CPU time, replication
/// offset and AOF size at the window's start and end.
pub(crate) fn run_threads(
    srv: &Server,
    plan: &Plan,
    phase: Duration,
    what: (&str, usize),
    drive: impl Fn(usize, Pipe, Window) -> ThreadResult + Sync,
) -> Measured {
    run_threads_on(&[srv], plan, phase, what, drive)
}

/// `run_threads` on `servers[0]`, also reading the CPU time of the others (a replica).
pub(crate) fn run_threads_on(
    servers: &[&Server],
    plan: &Plan,
    phase: Duration,
    (label, depth): (&str, usize),
    drive: impl Fn(usize, Pipe, Window) -> ThreadResult + Sync,
) -> Measured {
    let srv = servers[0];
    let mut probe = srv.conn();
    let mut others: Vec<Connection> = servers[1..].iter().map(|s| s.conn()).collect();
    let mut other_cpu = || -> f64 { others.iter_mut().map(server_cpu).sum() };
    let pipes: Vec<Pipe> = (0..CONNS)
        .map(|_| Pipe::open(srv).spinning(plan.spin))
        .collect();
    let t0 = Instant::now();
    let w = Window {
        start: t0 + plan.warmup,
        end: t0 + plan.warmup + phase,
    };
    let drive = &drive;
    let (results, s0, s1, other) = thread::scope(|scope| {
        let handles: Vec<_> = pipes
            .into_iter()
            .enumerate()
            .map(|(t, pipe)| scope.spawn(move || drive(t, pipe, w)))
            .collect();
        sleep_until(w.start);
        let (s0, o0) = (Sample::take(&mut probe), other_cpu());
        sleep_until(w.end);
        let (s1, o1) = (Sample::take(&mut probe), other_cpu());
        let results: Vec<ThreadResult> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, s0, s1, o1 - o0)
    });
    let mut m = Measured::empty(label, depth);
    m.secs = (w.end - w.start).as_secs_f64();
    m.cpu_secs = s1.cpu - s0.cpu;
    m.other_cpu_secs = other;
    m.repl_bytes = s1.repl - s0.repl;
    m.aof_bytes = s1.aof - s0.aof;
    for r in results {
        m.ops += r.ops;
        m.errors += r.errors;
        m.hist.add(&r.hist).unwrap();
    }
    m.rounds.push(m.rate());
    m.round_cpu.push(m.cpu_us_per_op());
    eprintln!(
        "  {:<44} batch {:>2}: {:>10.0} ops/s  (server cpu {:>3.0}%)",
        label,
        depth,
        m.rate(),
        m.cpu_util() * 100.0
    );
    m
}
