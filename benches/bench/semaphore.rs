//! Workload 9: a counting semaphore under contention (issue 13). `SEM_CLIENTS` clients on one
//! `LIMIT 4` semaphore, each looping acquire → hold `sem_work()` → release: the module's
//! `LOCK.ACQUIRE sem token ttl SHARED LIMIT 4 WAIT timeout` + `LOCK.RELEASE` against a
//! Redisson-style Lua semaphore (permits in a ZSET scored by their expiry; a script drops the
//! expired ones and adds the token while fewer than 4 remain; a refused client polls every
//! 1 ms; release = `ZREM`). An in-process counter, raised after each acquire and lowered
//! before each release, proves that never more than 4 hold at once.

#[allow(unused_imports)]
use crate::*;

pub(crate) const SEM_CLIENTS: usize = CONTENDED_CLIENTS;
pub(crate) const SEM_LIMIT: u64 = 4;
/// How long a client holds its permit: the same work in both schemes. 1 ms by default;
/// `BENCH_SEM_WORK_US` sets it (a shorter hold leaves the hand-off, not the work, to set the
/// pace).
pub(crate) fn sem_work() -> Duration {
    let us = std::env::var("BENCH_SEM_WORK_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    Duration::from_micros(us)
}
/// A permit's lease: far longer than a hold, so none runs out.
pub(crate) const SEM_TTL_MS: u64 = 10_000;
/// The module's `WAIT` timeout; a wait that times out is counted as an error and retried.
pub(crate) const SEM_WAIT_MS: u64 = 10_000;
/// How often a refused Lua client tries again.
pub(crate) const SEM_POLL: Duration = Duration::from_millis(1);
pub(crate) const SEM_KEY: &str = "semaphore";
/// The Lua acquire: KEYS[1] the ZSET of permits (token → expiry, unix ms), ARGV = token,
/// limit, now (client clock, ms, as Redisson passes it), ttl (ms). 1 if acquired, else nil.
pub(crate) const LUA_SEM_ACQUIRE: &str = "\
     redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[3]) \
     if redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then \
     redis.call('zadd', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[1]) return 1 end \
     return false";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SemKind {
    /// `LOCK.ACQUIRE … SHARED LIMIT 4 WAIT timeout`, `LOCK.RELEASE`.
    Wait,
    /// `EVALSHA` of `LUA_SEM_ACQUIRE`, polling every `SEM_POLL`; `ZREM`.
    Lua,
}

/// (label, short name, scheme) of the rows; the first is compared to the second.
pub(crate) const SEM_SCHEMES: [(&str, &str, SemKind); 2] = [
    ("LOCK.ACQUIRE SHARED LIMIT 4 WAIT", "WAIT", SemKind::Wait),
    ("Lua ZSET semaphore, poll every 1 ms", "Lua", SemKind::Lua),
];

/// The permits as this process sees them: raised after an acquire replied, lowered before the
/// release is sent, so it never counts more holders than the server has.
#[derive(Default)]
pub(crate) struct Permits {
    held: AtomicU64,
    max: AtomicU64,
    violations: AtomicU64,
}

impl Permits {
    fn enter(&self) {
        let n = self.held.fetch_add(1, SeqCst) + 1;
        self.max.fetch_max(n, SeqCst);
        if n > SEM_LIMIT {
            self.violations.fetch_add(1, SeqCst);
        }
    }
    fn leave(&self) {
        self.held.fetch_sub(1, SeqCst);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One try to acquire a permit of `kind` for `token` (the module's with `WAIT SEM_WAIT_MS`
/// when `wait`): the reply, a fence or 1 if acquired, else null.
fn try_acquire(con: &mut Connection, kind: SemKind, sha: &str, token: &str, wait: bool) -> Value {
    let (ttl, limit, now) = (SEM_TTL_MS.to_string(), SEM_LIMIT.to_string(), unix_ms());
    let (now, wait_ms) = (now.to_string(), SEM_WAIT_MS.to_string());
    let mut args = match kind {
        SemKind::Wait => vec![
            "LOCK.ACQUIRE",
            SEM_KEY,
            token,
            &ttl,
            "SHARED",
            "LIMIT",
            &limit,
        ],
        SemKind::Lua => vec!["EVALSHA", sha, "1", SEM_KEY, token, &limit, &now, &ttl],
    };
    if wait && kind == SemKind::Wait {
        args.extend(["WAIT", &wait_ms]);
    }
    call(con, &args)
}

/// Gives `token`'s permit back: 1 if it held one.
fn release(con: &mut Connection, kind: SemKind, token: &str) -> Value {
    match kind {
        SemKind::Wait => call(con, &["LOCK.RELEASE", SEM_KEY, token]),
        SemKind::Lua => call(con, &["ZREM", SEM_KEY, token]),
    }
}

/// One client: acquire, hold `sem_work()`, release, until `end`. A hand-off (for Lua; the
/// module's come from `INFO lock`) is an acquisition after at least one refused try; a
/// module wait that timed out counts as an error.
fn sem_client(
    kind: SemKind,
    mut con: Connection,
    permits: &Permits,
    sha: &str,
    window: (Instant, Instant),
) -> ClientResult {
    let token = uuid::Uuid::new_v4().to_string();
    let acquire = |con: &mut Connection, r: &mut ClientResult| {
        let mut refused = 0u64;
        loop {
            match (kind, try_acquire(con, kind, sha, &token, true)) {
                (SemKind::Wait, Value::Int(f)) if f > 0 => return Some(refused),
                (SemKind::Lua, Value::Int(1)) => return Some(refused),
                (_, Value::Nil) => {
                    refused += 1;
                    r.errors += u64::from(kind == SemKind::Wait);
                    if Instant::now() >= window.1 {
                        return None;
                    }
                    if kind == SemKind::Lua {
                        thread::sleep(SEM_POLL);
                    }
                }
                (_, other) => panic!("{kind:?} acquire replied {other:?}"),
            }
        }
    };
    let hold = |con: &mut Connection, refused: u64| {
        permits.enter();
        thread::sleep(sem_work());
        permits.leave();
        (refused > 0, release(con, kind, &token) == Value::Int(1))
    };
    client_loop(&mut con, window, acquire, hold)
}

/// One scheme's results, summed over rounds: `c.handoffs` counts permits granted to a client
/// that had waited for one (module: `lock_grants`, a hold granted to a queued waiter; Lua: an
/// acquire after at least one refused try), `c.per_client` every grant.
pub(crate) struct SemRun {
    pub(crate) c: Contended,
    /// Most holders at once, in process (and, in the check run, as the server reported).
    pub(crate) max_held: u64,
    pub(crate) server_max_held: Option<i64>,
    /// Grants/s of each round (`c.rounds` holds hand-offs/s).
    pub(crate) round_grants: Vec<f64>,
}

impl SemRun {
    fn absorb(&mut self, round: SemRun) {
        self.c.absorb(round.c);
        self.max_held = self.max_held.max(round.max_held);
        self.round_grants.extend(round.round_grants);
    }
    pub(crate) fn grant_rate(&self) -> f64 {
        self.c.acquisitions() as f64 / self.c.secs
    }
}

/// Server-side holders of the semaphore right now (`LOCK.INFO` holders, or `ZCARD`).
fn server_holders(con: &mut Connection, kind: SemKind) -> i64 {
    match kind {
        SemKind::Wait => mode_and_holders(con, SEM_KEY).1,
        SemKind::Lua => match call(con, &["ZCARD", SEM_KEY]) {
            Value::Int(n) => n,
            other => panic!("ZCARD replied {other:?}"),
        },
    }
}

/// One round of `kind` for `secs`; with `sample`, a further connection reads the server's
/// holder count about every millisecond (the check run).
fn sem_round(srv: &Server, sha: &str, secs: Duration, scheme: usize, sample: bool) -> SemRun {
    let (label, short, kind) = SEM_SCHEMES[scheme];
    let mut probe = srv.conn();
    flushall(&mut probe);
    let permits = Permits::default();
    let clients: Vec<Connection> = (0..SEM_CLIENTS).map(|_| srv.conn()).collect();
    let sampler = sample.then(|| srv.conn());
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + secs;
    let cpu_and_grants = |probe: &mut Connection| {
        (
            server_cpu(probe),
            info_field(probe, "lock", "lock_grants") as u64,
        )
    };
    let client = |_, con| sem_client(kind, con, &permits, sha, (start, end));
    let (results, (c0, g0), (c1, g1), server_max) = thread::scope(|scope| {
        let sampler = sampler.map(|mut con| {
            scope.spawn(move || {
                let mut max = 0;
                while Instant::now() < end {
                    max = max.max(server_holders(&mut con, kind));
                    thread::sleep(Duration::from_millis(1));
                }
                max
            })
        });
        let window = (start, end);
        let (results, s0, s1) = run_clients(&mut probe, clients, window, client, cpu_and_grants);
        (results, s0, s1, sampler.map(|h| h.join().unwrap()))
    });
    // Everyone has released: nothing may be left of the semaphore.
    let left = call(&mut probe, &["EXISTS", SEM_KEY]) != Value::Int(0);
    let mut c = Contended::from_clients((label, short), secs, &results, c1 - c0);
    if kind == SemKind::Wait {
        c.handoffs = g1 - g0;
    }
    c.violations = permits.violations.load(SeqCst);
    c.errors += u64::from(left);
    c.close_round();
    let mut r = SemRun {
        c,
        max_held: permits.max.load(SeqCst),
        server_max_held: server_max,
        round_grants: Vec::new(),
    };
    r.round_grants.push(r.grant_rate());
    r
}

/// Checks, once, that the semaphore admits 4 and no more: 4 tokens acquire, a 5th is refused
/// (null) until one releases; then a short contended run of each scheme where the in-process
/// count reaches 4 and never exceeds it, the server's count (sampled) never exceeds 4, and
/// nothing is left. Returns (what, outcome) steps; panics otherwise.
fn check_semaphore(srv: &Server, sha: &str, secs: Duration) -> Vec<(String, String)> {
    let mut con = srv.conn();
    flushall(&mut con);
    let mut steps = Vec::new();
    let acquire = |con: &mut Connection, kind, token| try_acquire(con, kind, sha, token, false);
    for (_, short, kind) in SEM_SCHEMES {
        let tokens = ["t1", "t2", "t3", "t4", "t5"];
        for t in &tokens[..4] {
            let v = acquire(&mut con, kind, t);
            assert!(
                matches!(v, Value::Int(f) if f > 0),
                "{short}: acquire {t}: {v:?}"
            );
        }
        assert_eq!(server_holders(&mut con, kind), 4, "{short}: holders");
        let fifth = acquire(&mut con, kind, "t5");
        assert_eq!(fifth, Value::Nil, "{short}: a 5th acquire while 4 hold");
        assert_eq!(
            release(&mut con, kind, "t1"),
            Value::Int(1),
            "{short}: release"
        );
        let v = acquire(&mut con, kind, "t5");
        assert!(
            matches!(v, Value::Int(f) if f > 0),
            "{short}: 5th after a release: {v:?}"
        );
        for t in &tokens[1..] {
            assert_eq!(
                release(&mut con, kind, t),
                Value::Int(1),
                "{short}: release {t}"
            );
        }
        assert_eq!(call(&mut con, &["EXISTS", SEM_KEY]), Value::Int(0));
        steps.push((
            format!("{short}: 4 acquire, a 5th, one releases, the 5th"),
            "4 granted, null, 1, granted; all released, no key left".into(),
        ));
    }
    for i in 0..SEM_SCHEMES.len() {
        let r = sem_round(srv, sha, secs, i, true);
        let server = r.server_max_held.unwrap_or(0);
        assert!(
            r.c.violations == 0 && r.max_held == SEM_LIMIT && server <= SEM_LIMIT as i64,
            "{}: {} violations, at most {} holders in process, {server} on the server",
            r.c.label,
            r.c.violations,
            r.max_held
        );
        assert_eq!(
            r.c.errors, 0,
            "{}: failed releases, timeouts or a key left",
            r.c.label
        );
        steps.push((
            format!(
                "{}: {SEM_CLIENTS} clients, {:.1}s",
                r.c.short,
                secs.as_secs_f64()
            ),
            format!(
                "{} grants; most holders at once {} in process, {server} on the server",
                r.c.acquisitions(),
                r.max_held
            ),
        ));
    }
    steps
}

/// Workload 9's results.
pub(crate) struct Semaphore {
    pub(crate) runs: Vec<SemRun>,
    pub(crate) check: Vec<(String, String)>,
}

/// The check, then each scheme `FEW_ROUNDS` times interleaved (A B, B A, A B).
pub(crate) fn run_semaphore(ctx: &Ctx) -> Box<dyn Outcome> {
    let (srv, plan) = (ctx.srv, ctx.plan);
    eprintln!("9. Semaphore");
    let sha = text(&call(&mut srv.conn(), &["SCRIPT", "LOAD", LUA_SEM_ACQUIRE]));
    let check_secs = (plan.contended / 4).max(Duration::from_millis(300));
    let check = check_semaphore(srv, &sha, check_secs);
    let mut runs: Vec<Option<SemRun>> = SEM_SCHEMES.iter().map(|_| None).collect();
    for round in 0..FEW_ROUNDS {
        let mut order: Vec<usize> = (0..SEM_SCHEMES.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let r = sem_round(srv, &sha, plan.contended, i, false);
            eprintln!(
                "  {:<44} {:>10.0} hand-offs/s {:>8.0} grants/s  (server cpu {:>3.0}%)",
                r.c.label,
                r.c.handoff_rate(),
                r.grant_rate(),
                r.c.cpu_secs / r.c.secs * 100.0
            );
            match &mut runs[i] {
                Some(sum) => sum.absorb(r),
                slot => *slot = Some(r),
            }
        }
    }
    Box::new(Semaphore {
        runs: runs.into_iter().flatten().collect(),
        check,
    })
}

impl Semaphore {
    /// WAIT over Lua in paired rounds: (hand-offs/s, grants/s).
    pub(crate) fn ratios(&self) -> (Paired, Paired) {
        let (a, b) = (&self.runs[0], &self.runs[1]);
        (
            Paired::of(&a.c.rounds, &b.c.rounds),
            Paired::of(&a.round_grants, &b.round_grants),
        )
    }
}

impl Outcome for Semaphore {
    fn errors(&self) -> u64 {
        self.runs.iter().map(|r| r.c.errors).sum()
    }

    fn print(&self) {
        println!(
            "\n9. Semaphore: {SEM_CLIENTS} clients on one LIMIT {SEM_LIMIT} semaphore, each \
             acquire → hold {} µs → release (grant = an acquisition; hand-off = a permit granted \
             to a client that had waited for it: module `lock_grants`, Lua an acquire after a \
             refused try; wait = first try to grant, max wait includes waits cut off by the end)",
            sem_work().as_micros()
        );
        let head =
            "hand-offs/s  grants/s  wait p50  wait p99   max wait fairness max held  viol srv cpu";
        println!("  {:<36} {head}", "");
        for r in &self.runs {
            println!(
                "  {:<36} {:>11} {:>9} {:>9} {:>9} {:>10} {:>8.4} {:>8} {:>5} {:>6.0}%",
                r.c.label,
                thousands(r.c.handoff_rate()),
                thousands(r.grant_rate()),
                ms(r.c.waits.value_at_quantile(0.5)),
                ms(r.c.waits.value_at_quantile(0.99)),
                ms(micros(r.c.max_wait)),
                r.c.fairness(),
                r.max_held,
                r.c.violations,
                r.c.cpu_secs / r.c.secs * 100.0,
            );
        }
        let (handoffs, grants) = self.ratios();
        println!(
            "  WAIT/Lua, median of paired rounds [lowest–highest round] (spread): hand-offs/s \
             {} ({}), grants/s {} ({})",
            handoffs.show(),
            percent(handoffs.spread()),
            grants.show(),
            percent(grants.spread()),
        );
        print_per_client(self.runs.iter().map(|r| &r.c));
        print_check("the rounds", &self.check);
        for r in self.runs.iter().filter(|r| r.c.errors > 0) {
            println!(
                "  !! {}: {} failed releases, wait timeouts or a semaphore left behind",
                r.c.label, r.c.errors
            );
        }
    }

    fn json(&self) -> (&'static str, Json) {
        let runs = self.runs.iter().map(|r| {
            let mut j = r.c.json(&[]);
            if let Json::Obj(fields) = &mut j {
                fields.push(("grants_per_sec".into(), r.grant_rate().into()));
                fields.push(("max_held".into(), r.max_held.into()));
                let rounds = r.c.rounds.iter().map(|&x| x.into());
                fields.push(("round_handoffs_per_sec".into(), Json::Arr(rounds.collect())));
            }
            j
        });
        let (handoffs, grants) = self.ratios();
        let part = obj(vec![
            ("clients", (SEM_CLIENTS as u64).into()),
            ("limit", SEM_LIMIT.into()),
            ("work_us", (sem_work().as_micros() as u64).into()),
            ("runs", Json::Arr(runs.collect())),
            ("handoff_ratio_wait_vs_lua", handoffs.json()),
            ("grant_ratio_wait_vs_lua", grants.json()),
            ("check", check_json(&self.check, "outcome")),
        ]);
        ("semaphore", part)
    }

    /// Issue 14's target for the semaphore, and issue 13's bound on holders.
    fn targets(&self) -> Vec<Target> {
        let violations: u64 = self.runs.iter().map(|r| r.c.violations).sum();
        vec![
            ratio_target(
                "#14",
                "semaphore hand-offs/s vs Lua ZSET semaphore",
                self.ratios().0,
                3.0,
            ),
            target(
                "#13",
                "semaphore violations, more than 4 holders (both)",
                violations as f64,
                "<=",
                0.0,
                "",
            ),
        ]
    }

    fn summary(&self) -> Vec<SummaryRow> {
        let (wait, lua) = (&self.runs[0], &self.runs[1]);
        let (handoffs, grants) = self.ratios();
        vec![row(
            format!(
                "semaphore: {SEM_CLIENTS} clients on `LIMIT {SEM_LIMIT}`, each holding {}",
                match sem_work().as_micros() {
                    us if us % 1000 == 0 => format!("{} ms", us / 1000),
                    us => format!("{us} µs"),
                }
            ),
            format!(
                "{} hand-offs/s; wait p99 {}, max {}; fairness {:.4}; at most {} holders",
                thousands(wait.c.handoff_rate()),
                ms(wait.c.waits.value_at_quantile(0.99)),
                ms(micros(wait.c.max_wait)),
                wait.c.fairness(),
                wait.max_held
            ),
            format!(
                "{} the hand-offs of a Lua ZSET semaphore polling every 1 ms (its max wait {}, \
                 fairness {:.4}); grants/s {}",
                handoffs.show(),
                ms(micros(lua.c.max_wait)),
                lua.c.fairness(),
                grants.show()
            ),
        )]
    }
}
