//! The library's overhead against the same commands sent raw (issue 24's `make bench`).
//!
//! ```text
//! cargo run --release -p redis-lock-client --example overhead
//! ```
//!
//! Starts its own redis-server with the module (`$REDIS_LOCK_MODULE`, or the workspace's
//! `target/release/libredis_lock.so`) on a free loopback port in 51000–51999, and measures:
//!
//! 1. **Uncontended lock/unlock.** Cycles per second of `LOCK.ACQUIRE k <uuid> 30000` +
//!    `LOCK.RELEASE k <uuid>` sent raw on one connection, no pipelining (blocking
//!    `redis::Connection`; and a `MultiplexedConnection` for the async side), against the
//!    library's cycle: blocking `Mutex::lock()` + drop, and async `lock().await` +
//!    `release().await` (a current-thread tokio runtime, raw and library alike). Rounds of
//!    `BENCH_ROUND_MS` (default 2000) are interleaved, three of each; the median is reported,
//!    with the spread of the rounds as the noise.
//! 2. **Keep-alive cost per held lock.** `BENCH_HOLDS` (default 1000) holds on distinct keys
//!    with a ttl of `BENCH_KA_TTL_MS` (default 3000; so an extend every second), watched for
//!    `BENCH_KA_MS` (default 3000): this process's CPU time (`getrusage`) per held lock per
//!    second, the server's `LOCK.EXTEND` calls per held lock per second, and the threads and
//!    server connections each hold adds.
//!
//! Prints a table, then one line `JSON {...}` for `clients/bench.sh`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lock_client::{aio, Mutex};

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

// -- the server ---------------------------------------------------------------------------

struct Server {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        let module = std::env::var("REDIS_LOCK_MODULE").map_or_else(
            |_| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/release/libredis_lock.so")
            },
            PathBuf::from,
        );
        assert!(module.exists(), "module not built: {}", module.display());
        let first = 51_000 + (std::process::id() % 1000) as u16;
        for i in 0..1000u16 {
            let port = 51_000 + (first - 51_000 + i * 37) % 1000;
            if TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            let dir = std::env::temp_dir().join(format!("redis-lock-overhead-{port}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("server dir");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--loadmodule")
                .arg(&module)
                .args(["--save", "", "--appendonly", "no", "--maxclients", "10000"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("log"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server");
            let mut server = Server { port, child, dir };
            if server.ready() {
                return server;
            }
        }
        panic!("no free port in 51000-51999 for redis-server");
    }

    /// Up, and ours (not another suite's server that took the port first).
    fn ready(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        let pid = format!("process_id:{}\r\n", self.child.id());
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut c) = self.client().get_connection() {
                if let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut c) {
                    return info.contains(&pid);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    /// A field of `INFO section`, as a number.
    fn info_field(&self, section: &str, field: &str) -> f64 {
        let mut c = self.client().get_connection().expect("connection");
        let info: String = redis::cmd("INFO").arg(section).query(&mut c).expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map_or(0.0, |v| {
                // `cmdstat_x:calls=N,...` or a plain number.
                let v = v.strip_prefix("calls=").unwrap_or(v);
                v.split(',')
                    .next()
                    .unwrap_or("0")
                    .trim()
                    .parse()
                    .unwrap_or(0.0)
            })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// -- the cycles ---------------------------------------------------------------------------

fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Runs `cycle` for `d`; cycles per second.
fn for_duration(d: Duration, mut cycle: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        for _ in 0..16 {
            cycle();
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn for_duration_async<F: std::future::Future<Output = ()>>(
    d: Duration,
    mut cycle: impl FnMut() -> F,
) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        for _ in 0..16 {
            cycle().await;
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn raw_cycle(con: &mut redis::Connection, key: &str) {
    let t = token();
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&t)
        .arg(30_000)
        .query(con)
        .expect("acquire");
    assert!(fence.is_some(), "uncontended");
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(&t)
        .query(con)
        .expect("release");
    assert_eq!(released, 1);
}

async fn raw_cycle_async(con: &mut redis::aio::MultiplexedConnection, key: &str) {
    let t = token();
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&t)
        .arg(30_000)
        .query_async(con)
        .await
        .expect("acquire");
    assert!(fence.is_some(), "uncontended");
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(&t)
        .query_async(con)
        .await
        .expect("release");
    assert_eq!(released, 1);
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// (max − min) / median of the rounds, in percent.
fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    100.0 * (hi - lo) / median(v)
}

// -- the keep-alive -----------------------------------------------------------------------

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn threads() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

struct KeepAliveCost {
    holds: usize,
    ttl_ms: u128,
    acquire_s: f64,
    cpu_us_per_lock_s: f64,
    extends_per_lock_s: f64,
    cpu_us_per_extend: f64,
    threads_per_hold: f64,
    conns_per_hold: f64,
    lost: usize,
}

impl KeepAliveCost {
    fn json(&self) -> String {
        format!(
            "{{\"holds\": {}, \"ttl_ms\": {}, \"acquire_s\": {:.3}, \"cpu_us_per_lock_s\": {:.2}, \
             \"extends_per_lock_s\": {:.3}, \"cpu_us_per_extend\": {:.1}, \
             \"threads_per_hold\": {:.3}, \"connections_per_hold\": {:.3}, \"lost\": {}}}",
            self.holds,
            self.ttl_ms,
            self.acquire_s,
            self.cpu_us_per_lock_s,
            self.extends_per_lock_s,
            self.cpu_us_per_extend,
            self.threads_per_hold,
            self.conns_per_hold,
            self.lost
        )
    }

    fn print(&self, api: &str) {
        println!(
            "  {api:<9} {} holds, ttl {} ms: {:.1} µs CPU per held lock per s \
             ({:.0} µs per extend), {:.2} LOCK.EXTEND/lock/s, {:.2} threads and {:.2} \
             connections per hold; acquired in {:.2} s, {} lost",
            self.holds,
            self.ttl_ms,
            self.cpu_us_per_lock_s,
            self.cpu_us_per_extend,
            self.extends_per_lock_s,
            self.threads_per_hold,
            self.conns_per_hold,
            self.acquire_s,
            self.lost
        );
    }
}

/// Watches `holds` held locks for `window`: the CPU, extends, threads and connections.
fn watch(
    server: &Server,
    holds: usize,
    ttl: Duration,
    window: Duration,
    acquire_s: f64,
    base: (f64, f64),
    sleep: &mut dyn FnMut(Duration),
) -> KeepAliveCost {
    // Every hold's first extend is due a third of the ttl after its grant (and its keep-alive
    // task starts then): wait for all of them, and a little more, before counting.
    sleep(ttl / 2);
    let (threads0, conns0) = base;
    let threads_held = threads();
    let conns_held = server.info_field("clients", "connected_clients");
    let ext0 = server.info_field("commandstats", "cmdstat_lock.extend");
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    sleep(window);
    let cpu = cpu_seconds() - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let ext = server.info_field("commandstats", "cmdstat_lock.extend") - ext0;
    let n = holds as f64;
    KeepAliveCost {
        holds,
        ttl_ms: ttl.as_millis(),
        acquire_s,
        cpu_us_per_lock_s: cpu * 1e6 / n / secs,
        extends_per_lock_s: ext / n / secs,
        cpu_us_per_extend: if ext > 0.0 { cpu * 1e6 / ext } else { 0.0 },
        threads_per_hold: (threads_held - threads0) / n,
        conns_per_hold: (conns_held - conns0) / n,
        lost: 0,
    }
}

fn keepalive_blocking(
    server: &Server,
    holds: usize,
    ttl: Duration,
    window: Duration,
) -> KeepAliveCost {
    let base = (threads(), server.info_field("clients", "connected_clients"));
    let started = Instant::now();
    let guards: Vec<_> = (0..holds)
        .map(|i| {
            Mutex::new(server.client(), format!("ka:b:{i}"))
                .ttl(ttl)
                .lock()
                .expect("lock")
        })
        .collect();
    let acquire_s = started.elapsed().as_secs_f64();
    let mut cost = watch(
        server,
        holds,
        ttl,
        window,
        acquire_s,
        base,
        &mut std::thread::sleep,
    );
    cost.lost = guards.iter().filter(|g| g.is_lost()).count();
    drop(guards);
    cost
}

fn keepalive_async(
    rt: &tokio::runtime::Runtime,
    server: &Server,
    holds: usize,
    ttl: Duration,
    window: Duration,
) -> KeepAliveCost {
    let base = (threads(), server.info_field("clients", "connected_clients"));
    let started = Instant::now();
    let guards: Vec<_> = rt.block_on(async {
        let mut guards = Vec::with_capacity(holds);
        for i in 0..holds {
            let mutex = aio::Mutex::new(server.client(), format!("ka:a:{i}")).ttl(ttl);
            guards.push(mutex.lock().await.expect("lock"));
        }
        guards
    });
    let acquire_s = started.elapsed().as_secs_f64();
    let mut sleep = |d: Duration| rt.block_on(async move { tokio::time::sleep(d).await });
    let mut cost = watch(server, holds, ttl, window, acquire_s, base, &mut sleep);
    cost.lost = guards.iter().filter(|g| g.is_lost()).count();
    rt.block_on(async {
        for g in guards {
            let _ = g.release().await;
        }
    });
    cost
}

// -- main ---------------------------------------------------------------------------------

fn main() {
    let round = env_ms("BENCH_ROUND_MS", 2000);
    let holds = std::env::var("BENCH_HOLDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000usize);
    let ka_ttl = env_ms("BENCH_KA_TTL_MS", 3000);
    let ka_window = env_ms("BENCH_KA_MS", 3000);
    let server = Server::start();
    let client = server.client();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let mut raw_con = client.get_connection().expect("connection");
    let raw_async = rt
        .block_on(client.get_multiplexed_async_connection())
        .expect("async connection");
    let mutex = Mutex::new(client.clone(), "bench:blocking");
    let amutex = aio::Mutex::new(client.clone(), "bench:async");

    const NAMES: [&str; 4] = ["raw", "blocking", "raw-async", "async"];
    let mut results: [Vec<f64>; 4] = Default::default();
    let mut run = |which: usize, round: Duration| -> f64 {
        match which {
            0 => for_duration(round, || raw_cycle(&mut raw_con, "bench:raw")),
            1 => for_duration(round, || drop(mutex.lock().expect("lock"))),
            2 => rt.block_on(for_duration_async(round, || {
                // A clone shares the one connection (an Arc).
                let mut con = raw_async.clone();
                async move { raw_cycle_async(&mut con, "bench:raw-async").await }
            })),
            _ => rt.block_on(for_duration_async(round, || async {
                let guard = amutex.lock().await.expect("lock");
                assert!(guard.release().await.expect("release"));
            })),
        }
    };
    // Warm-up (connections, allocator, CPU frequency), not counted.
    for which in 0..4 {
        run(which, Duration::from_millis(200));
    }
    for r in 0..3 {
        // Interleaved, in a rotating order, so that a burst of load elsewhere hits every
        // mode alike.
        for i in 0..4 {
            let which = (i + r) % 4;
            let rate = run(which, round);
            results[which].push(rate);
        }
    }

    println!(
        "redis-lock-client (Rust) overhead: uncontended lock/unlock, one connection, \
         median of 3 rounds of {} ms",
        round.as_millis()
    );
    println!(
        "  {:<9} {:>12} {:>8} {:>8}",
        "api", "cycles/s", "spread", "vs raw"
    );
    let mut json_cycles = Vec::new();
    for (which, name) in NAMES.iter().enumerate() {
        let med = median(&results[which]);
        let raw = median(&results[if which < 2 { 0 } else { 2 }]);
        let ratio = med / raw;
        println!(
            "  {name:<9} {med:>12.0} {:>7.1}% {ratio:>7.2}x",
            spread(&results[which])
        );
        let rounds: Vec<String> = results[which].iter().map(|r| format!("{r:.0}")).collect();
        json_cycles.push(format!(
            "\"{name}\": {{\"cycles_per_s\": {med:.0}, \"rounds\": [{}], \"spread_pct\": {:.1}, \
             \"ratio_vs_raw\": {ratio:.3}}}",
            rounds.join(", "),
            spread(&results[which])
        ));
    }

    println!("keep-alive cost (client CPU per held lock; server LOCK.EXTEND per lock):");
    let b = keepalive_blocking(&server, holds, ka_ttl, ka_window);
    b.print("blocking");
    let a = keepalive_async(&rt, &server, holds, ka_ttl, ka_window);
    a.print("async");
    println!(
        "  at the default ttl (30 s, an extend every 10 s) the per-lock rates are a tenth of \
         these at ttl 3 s"
    );
    println!(
        "JSON {{\"library\": \"rust\", \"round_ms\": {}, \"cycles\": {{{}}}, \"keepalive\": \
         {{\"blocking\": {}, \"async\": {}}}}}",
        round.as_millis(),
        json_cycles.join(", "),
        b.json(),
        a.json()
    );
}
