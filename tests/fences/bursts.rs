//! What drives fences to the edge of the bucket, and how the tests watch it: a script of
//! many `LOCK.FENCE`, pipelining connections, `redis-benchmark`, and the server's fence
//! count, peak rate and `TRYAGAIN` error count.

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::clock::{floor, now_ms, server_time_us};
use crate::cmd;
use crate::common::*;
use crate::raw_replies::{time_lines_ms, try_read_lines};
use crate::TRYAGAIN;
use redis::Value;

/// `count` of `errorstat_<code>` in `INFO errorstats` (0 when absent).
pub(crate) fn error_count(c: &mut redis::Connection, code: &str) -> i64 {
    info_field(c, "errorstats", &format!("errorstat_{code}"))
        .and_then(|v| {
            v.strip_prefix("count=")
                .and_then(|n| n.split(',').next()?.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn fences_issued(c: &mut redis::Connection) -> i64 {
    lock_stat(c, "lock_fences").expect("INFO lock has lock_fences")
}

/// What [`fences_in_one_script`] saw.
#[derive(Debug)]
pub(crate) struct ScriptBurst {
    /// Fences issued, and `TRYAGAIN` replies.
    pub(crate) got: i64,
    pub(crate) refused: i64,
    pub(crate) first: i64,
    pub(crate) last: i64,
    /// The first error reply.
    pub(crate) msg: String,
    /// The server's clock right before the script and right after it (Unix µs), and
    /// (`TIME` inside it) when it began to run (Unix ms): no earlier than the time the
    /// module judges the script's commands by, the time it was called.
    pub(crate) before_us: i64,
    after_us: i64,
    pub(crate) began_ms: i64,
}

impl ScriptBurst {
    /// How long the script ran, in whole milliseconds rounded up.
    pub(crate) fn took_ms(&self) -> i64 {
        (self.after_us - self.before_us + 999) / 1000
    }
}

/// Issues `LOCK.FENCE key token` `n` times inside one script (which the module judges by
/// the time it began, but whose run may take several milliseconds), between two `TIME`s.
pub(crate) fn fences_in_one_script(
    c: &mut redis::Connection,
    key: &str,
    token: &str,
    n: usize,
) -> ScriptBurst {
    const SCRIPT: &str = r#"
        local t = redis.call('TIME')
        local began = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local got, errs, first, last, msg = 0, 0, 0, 0, ''
        for i = 1, tonumber(ARGV[2]) do
            local r = redis.pcall('LOCK.FENCE', KEYS[1], ARGV[1])
            if type(r) == 'table' and r.err then
                errs = errs + 1
                if msg == '' then msg = r.err end
            elseif type(r) == 'number' then
                got = got + 1
                if first == 0 then first = r end
                last = r
            else
                return redis.error_reply('unexpected reply to LOCK.FENCE')
            end
        end
        return {got, errs, first, last, msg, began}
    "#;
    let before_us = server_time_us(c);
    let v = cmd!(c, "EVAL", SCRIPT, 1, key, token, n)
        .unwrap_or_else(|e| panic!("EVAL of {n} LOCK.FENCE: {e}"));
    let after_us = server_time_us(c);
    let Value::Array(items) = v else {
        panic!("EVAL: {v:?}")
    };
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("EVAL: not an integer: {other:?}"),
    };
    let msg = match &items[4] {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("EVAL: {other:?}"),
    };
    ScriptBurst {
        got: int(&items[0]),
        refused: int(&items[1]),
        first: int(&items[2]),
        last: int(&items[3]),
        msg,
        before_us,
        after_us,
        began_ms: int(&items[5]),
    }
}

/// What one pipelining connection of a [`Pipeliner`] was answered.
#[derive(Debug, Default)]
pub(crate) struct Answered {
    pub(crate) fences: i64,
    pub(crate) tryagain: i64,
    /// The highest fence it was sent (fences of one key only grow: checked).
    pub(crate) max: i64,
    /// The most a batch's highest fence was ahead of the floor of the server's `TIME` read
    /// right after the batch, in fences, and that batch's (fence, Unix ms).
    pub(crate) lead: i64,
    pub(crate) lead_at: (i64, i64),
    pub(crate) other: Vec<String>,
}

/// `CONNS` connections, each writing `LOCK.FENCE key token` `DEPTH` deep and then `TIME`,
/// and reading every reply (as `redis-benchmark -c 8 -P 500` does, but it keeps going on an
/// error reply, it knows exactly which fences were acknowledged, and it reads the server's
/// clock right after each batch).
pub(crate) struct Pipeliner {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Answered>>,
}

/// What the connections of a [`Pipeliner`] share.
struct Shared {
    stop: AtomicBool,
    /// The server process to SIGKILL as soon as a batch gets `TRYAGAIN` (the bucket is
    /// empty: fences are as far ahead of the clock as they go), and when that was (Unix ms,
    /// 0 before).
    kill_pid: Option<i32>,
    killed_at: AtomicI64,
    /// Held while the server is killed, and while the connections are told to stop: once
    /// told, none kills it any more (the process may be reaped, its pid reused).
    kill_lock: Mutex<()>,
}

impl Pipeliner {
    pub(crate) const CONNS: usize = 8;
    pub(crate) const DEPTH: usize = 500;

    pub(crate) fn start(port: u16, key: &str, token: &str) -> Pipeliner {
        Pipeliner::start_killing(port, key, token, None)
    }

    pub(crate) fn start_killing(
        port: u16,
        key: &str,
        token: &str,
        kill_pid: Option<i32>,
    ) -> Pipeliner {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            kill_pid,
            killed_at: AtomicI64::new(0),
            kill_lock: Mutex::new(()),
        });
        let mut batch = resp_command(&["LOCK.FENCE", key, token]).repeat(Self::DEPTH);
        batch.extend(resp_command(&["TIME"]));
        let threads = (0..Self::CONNS)
            .map(|_| {
                let (shared, batch) = (shared.clone(), batch.clone());
                std::thread::spawn(move || pipeline(port, &batch, &shared))
            })
            .collect();
        Pipeliner { shared, threads }
    }

    /// Asks the connections to stop after the batch they are at (or when the server is
    /// gone: a connection that ends after this is no error).
    pub(crate) fn halt(&self) {
        let _killing = self.shared.kill_lock.lock().unwrap();
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    /// When a connection killed the server (Unix ms), if one did.
    pub(crate) fn killed_at(&self) -> Option<i64> {
        Some(self.shared.killed_at.load(Ordering::SeqCst)).filter(|&ms| ms > 0)
    }

    pub(crate) fn stop(self) -> Answered {
        self.halt();
        let mut all = Answered {
            lead: i64::MIN,
            ..Answered::default()
        };
        for t in self.threads {
            let a = t.join().expect("a pipelining thread failed");
            all.fences += a.fences;
            all.tryagain += a.tryagain;
            all.max = all.max.max(a.max);
            if a.lead > all.lead {
                (all.lead, all.lead_at) = (a.lead, a.lead_at);
            }
            all.other.extend(a.other);
        }
        all
    }
}

fn pipeline(port: u16, batch: &[u8], shared: &Shared) -> Answered {
    let stop = &shared.stop;
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut a = Answered {
        lead: i64::MIN,
        ..Answered::default()
    };
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    while !stop.load(Ordering::Relaxed) {
        // Every reply to LOCK.FENCE is one line, `:fence` or `-error`; TIME's is five.
        let written = s.write_all(batch);
        let lines = written
            .map_err(|_| Vec::new())
            .and_then(|()| try_read_lines(&mut s, &mut buf, Pipeliner::DEPTH + 5));
        let ended = lines.is_err();
        assert!(
            !ended || stop.load(Ordering::Relaxed),
            "the connection ended (the server is gone?)"
        );
        let lines = lines.unwrap_or_else(|read| read);
        let (fences, time) = lines.split_at(lines.len().min(Pipeliner::DEPTH));
        let (mut batch_max, tryagain) = (None, a.tryagain);
        for line in fences {
            match line.first() {
                Some(b':') => {
                    let f: i64 = std::str::from_utf8(&line[1..]).unwrap().parse().unwrap();
                    assert!(f > a.max, "fence {f} after {} on one connection", a.max);
                    a.max = f;
                    a.fences += 1;
                    batch_max = Some(f);
                }
                Some(b'-') if line[1..] == *TRYAGAIN.as_bytes() => a.tryagain += 1,
                _ => a.other.push(String::from_utf8_lossy(line).into_owned()),
            }
        }
        if ended {
            break; // the fences read before the end were acknowledged all the same
        }
        if let Some(pid) = shared.kill_pid.filter(|_| a.tryagain > tryagain) {
            let _killing = shared.kill_lock.lock().unwrap();
            if !stop.load(Ordering::SeqCst) {
                // Stop first: the other connections see the server go right after the kill.
                stop.store(true, Ordering::SeqCst);
                // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                shared.killed_at.store(now_ms(), Ordering::SeqCst);
            }
        }
        if let Some(f) = batch_max {
            let ms = time_lines_ms(time);
            if f - floor(ms) > a.lead {
                (a.lead, a.lead_at) = (f - floor(ms), (f, ms));
            }
        }
    }
    a
}

/// `redis-benchmark` (`$REDIS_BENCHMARK` overrides it): 8 connections pipelining `LOCK.FENCE
/// key token` 50 deep, until stopped. (Deeper pipelines may outrun the bucket here, and
/// redis-benchmark 7.0 stops sending on a connection that got an error reply.)
pub(crate) struct Benchmark {
    child: Child,
}

impl Benchmark {
    pub(crate) fn start(port: u16, key: &str, token: &str) -> Benchmark {
        let bin = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
        let child = Command::new(&bin)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-c", "8", "-P", "50", "-n", "1000000000", "-q"])
            .args(["LOCK.FENCE", key, token])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {bin}: {e} (install redis-tools)"));
        Benchmark { child }
    }
}

impl Drop for Benchmark {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples the server's fence count every 250 ms for `run`: the highest rate over a sample.
pub(crate) fn peak_rate(c: &mut redis::Connection, run: Duration) -> f64 {
    let t0 = Instant::now();
    let (mut last, mut at, mut peak) = (fences_issued(c), t0, 0f64);
    while t0.elapsed() < run {
        sleep(Duration::from_millis(250));
        let n = fences_issued(c);
        peak = peak.max((n - last) as f64 / at.elapsed().as_secs_f64());
        (last, at) = (n, Instant::now());
    }
    peak
}

/// Waits until the server's fence count holds still (it answered all that was sent).
pub(crate) fn settle_fences(c: &mut redis::Connection) -> i64 {
    let mut n = fences_issued(c);
    assert!(wait_until(Duration::from_secs(10), || {
        sleep(Duration::from_millis(50));
        let again = fences_issued(c);
        std::mem::replace(&mut n, again) == again
    }));
    n
}
