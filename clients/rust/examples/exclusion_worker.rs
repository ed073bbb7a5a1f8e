//! One worker of the mutual-exclusion test (`clients/rust/tests/exclusion/`, which runs 8
//! of these beside 8 of `clients/python/tests/exclusion_worker.py`): until its time is up it
//! picks one of a few keys at random, takes a [`Mutex`] on `{res:N}:lock` with a short lease,
//! makes guarded writes under the hold's fence, and releases.
//!
//! ```text
//! cargo run -p redis-lock-client --example exclusion_worker -- \
//!     --url redis://127.0.0.1:6390/ --id rs-1 --duration-ms 5000
//! ```
//!
//! Each hold writes, through `LOCK.GUARD`, `SET {res:N}:owner "<fence> <id>"` and then a few
//! `RPUSH {res:N}:log "<fence> <id> <seq>"` with short sleeps between them. All the evidence
//! is in Redis; the worker only counts, and prints one line at the end:
//! `SUMMARY id=… holds=… writes=… pushes=… fenced=… lost=… timeouts=… errors=… rogue=…`.
//!
//! `--rogue stale` and `--rogue intrude` plant violations for the test of the checker: after
//! each hold, a stale rogue waits for a newer fence in the log and then appends an entry under
//! its old fence with a plain `RPUSH` (no guard); an intruder appends, without any lock, an
//! entry under the fence of the last writer that is not itself.

use std::time::{Duration, Instant};

use redis_lock_client::{Error, GuardError, Mutex};

/// A planted misbehaviour (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rogue {
    /// After a hold, a plain write under its old fence once a newer one is in the log.
    Stale,
    /// A plain write under another worker's fence, without holding the lock.
    Intrude,
}

/// The worker's options.
#[derive(Clone, Debug)]
pub struct Args {
    pub id: String,
    pub url: String,
    pub duration: Duration,
    pub keys: u32,
    pub ttl: Duration,
    pub wait: Duration,
    /// Guarded `RPUSH`es per hold (after the `SET`).
    pub pushes: u32,
    pub rogue: Option<Rogue>,
}

impl Args {
    /// Parses `--name value` pairs; `--url`, `--id` and `--duration-ms` are required.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            id: String::new(),
            url: String::new(),
            duration: Duration::ZERO,
            keys: 3,
            ttl: Duration::from_millis(600),
            wait: Duration::from_secs(2),
            pushes: 4,
            rogue: None,
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--id" => a.id = value.clone(),
                "--url" => a.url = value.clone(),
                "--duration-ms" => a.duration = Duration::from_millis(num()?),
                "--keys" => a.keys = u32::try_from(num()?).map_err(|e| e.to_string())?,
                "--ttl-ms" => a.ttl = Duration::from_millis(num()?),
                "--wait-ms" => a.wait = Duration::from_millis(num()?),
                "--pushes" => a.pushes = u32::try_from(num()?).map_err(|e| e.to_string())?,
                "--rogue" => {
                    a.rogue = Some(match value.as_str() {
                        "stale" => Rogue::Stale,
                        "intrude" => Rogue::Intrude,
                        other => return Err(format!("--rogue {other}: stale or intrude")),
                    })
                }
                other => return Err(format!("unknown option {other}")),
            }
        }
        if a.id.is_empty() || a.url.is_empty() || a.duration.is_zero() || a.keys == 0 {
            return Err("--id, --url, --duration-ms (and --keys > 0) are required".into());
        }
        Ok(a)
    }
}

/// What a worker counts.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Holds granted.
    pub holds: u64,
    /// Guarded writes accepted (`SET` and `RPUSH`).
    pub writes: u64,
    /// Guarded `RPUSH`es accepted: its entries in the logs.
    pub pushes: u64,
    /// Guarded writes refused with `FENCED`.
    pub fenced: u64,
    /// Holds that ended lost (refused, reported lost, or gone at release).
    pub lost: u64,
    /// Acquisitions not granted within the wait.
    pub timeouts: u64,
    /// Any other error.
    pub errors: u64,
    /// Planted plain writes (rogue modes only).
    pub rogue: u64,
}

impl Counts {
    /// The summary line the test reads.
    pub fn line(&self, id: &str) -> String {
        format!(
            "SUMMARY id={id} holds={} writes={} pushes={} fenced={} lost={} timeouts={} errors={} rogue={}",
            self.holds,
            self.writes,
            self.pushes,
            self.fenced,
            self.lost,
            self.timeouts,
            self.errors,
            self.rogue
        )
    }
}

fn millis(range: std::ops::Range<u64>) -> Duration {
    Duration::from_millis(rand::random_range(range))
}

/// The last entry of `log` as (fence, worker id), if any.
fn last_entry(con: &mut redis::Connection, log: &str) -> redis::RedisResult<Option<(u64, String)>> {
    let last: Option<String> = redis::cmd("LINDEX").arg(log).arg(-1).query(con)?;
    Ok(last.and_then(|entry| {
        let mut parts = entry.split(' ');
        let fence = parts.next()?.parse().ok()?;
        Some((fence, parts.next()?.to_string()))
    }))
}

/// The planted plain write after a hold under `fence`; whether it was made.
fn misbehave(
    rogue: Rogue,
    con: &mut redis::Connection,
    log: &str,
    id: &str,
    fence: u64,
    seq: u64,
) -> redis::RedisResult<bool> {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        if let Some((last_fence, writer)) = last_entry(con, log)? {
            let under = match rogue {
                Rogue::Stale if last_fence > fence => Some(fence),
                Rogue::Intrude if writer != id => Some(last_fence),
                _ => None,
            };
            if let Some(under) = under {
                let _: i64 = redis::cmd("RPUSH")
                    .arg(log)
                    .arg(format!("{under} {id} {seq}"))
                    .query(con)?;
                return Ok(true);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(false)
}

/// Runs the worker's loop until its time is up.
pub fn run(args: &Args) -> Result<Counts, redis::RedisError> {
    let client = redis::Client::open(args.url.as_str())?;
    let mut plain = client.get_connection()?;
    let deadline = Instant::now() + args.duration;
    let mut counts = Counts::default();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        let n = rand::random_range(0..args.keys);
        let (key, log, owner) = (
            format!("{{res:{n}}}:lock"),
            format!("{{res:{n}}}:log"),
            format!("{{res:{n}}}:owner"),
        );
        let mutex = Mutex::new(client.clone(), key.as_str())
            .ttl(args.ttl)
            .wait(args.wait);
        let guard = match mutex.lock() {
            Ok(guard) => guard,
            Err(Error::Timeout) => {
                counts.timeouts += 1;
                continue;
            }
            Err(e) => {
                eprintln!("{}: acquire {key}: {e}", args.id);
                counts.errors += 1;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        counts.holds += 1;
        let fence = guard.fence();
        let mut lost = false;
        for step in 0..=args.pushes {
            let mut cmd;
            if step == 0 {
                cmd = redis::cmd("SET");
                cmd.arg(&owner).arg(format!("{fence} {}", args.id));
            } else {
                std::thread::sleep(millis(5..30));
                seq += 1;
                cmd = redis::cmd("RPUSH");
                cmd.arg(&log).arg(format!("{fence} {} {seq}", args.id));
            }
            match guard.guard::<redis::Value>(&cmd) {
                Ok(_) => {
                    counts.writes += 1;
                    counts.pushes += u64::from(step > 0);
                }
                Err(GuardError::Fenced(_)) => {
                    counts.fenced += 1;
                    lost = true;
                    break;
                }
                // `NotDurable` too, though the worker does not use durable mode.
                Err(e) => {
                    eprintln!("{}: guarded write on {key}: {e}", args.id);
                    counts.errors += 1;
                    break;
                }
            }
        }
        lost |= guard.is_lost();
        // Ok(false): the lease had ended by the time of the release.
        lost |= !matches!(guard.release(), Ok(true));
        counts.lost += u64::from(lost);
        if let Some(rogue) = args.rogue {
            seq += 1;
            if misbehave(rogue, &mut plain, &log, &args.id, fence, seq)? {
                counts.rogue += 1;
            }
        }
        std::thread::sleep(millis(0..10));
    }
    Ok(counts)
}

fn main() {
    let args = Args::parse(std::env::args().skip(1)).unwrap_or_else(|e| {
        eprintln!("exclusion_worker: {e}");
        std::process::exit(2)
    });
    match run(&args) {
        Ok(counts) => println!("{}", counts.line(&args.id)),
        Err(e) => {
            eprintln!("exclusion_worker {}: {e}", args.id);
            std::process::exit(1)
        }
    }
}
