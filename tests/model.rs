//! A reference model of the lock's contract (README; shared holds as in issue #13), written
//! here independently of `src/lock`, driven side by side with a real server through thousands
//! of seeded random operations: `LOCK.ACQUIRE` exclusive and `SHARED` (with and without
//! `LIMIT n`, with and without `WAIT`), `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE` of one hold
//! among several, `LOCK.INFO` (its six fields, in order), `LOCK.HOLDERS` (every hold, in grant
//! order), `DEL`, waiters that disconnect, time passing (short leases and short waits that run
//! out), restarts (`appendonly yes`; waiters are connections and are dropped) and `DEBUG
//! RELOAD` (locks survive; their waiters, like those of a deleted key, are answered null), and
//! the keyspace operations the server can do around a lock key: `RENAME`/`RENAMENX` between
//! two keys, `SWAPDB 0 1` twice, `FLUSHDB [ASYNC]`/`FLUSHALL ASYNC`, `COPY … REPLACE`, `DUMP` +
//! `RESTORE … REPLACE`, an overwrite (`SET` then `DEL`) and `PEXPIREAT k 1`. Every reply is
//! checked against the model, and so is the final state of every key.
//!
//! Shared holds: every holder has its own token, lease and fence. One FIFO queue per key
//! serves both kinds of request: whenever holds end (release, lease end, a downgrade) or a
//! waiter leaves the queue (timeout, hang-up), the head is granted if it is compatible, then
//! the next head, all at that instant (consecutive shared waiters are granted together, each
//! within its own `LIMIT`; a queued exclusive request holds back every shared request behind
//! it, and a request without `WAIT` is refused while anybody waits). The same token asking
//! again for the same kind renews its lease and gets its fence again; an exclusive holder
//! asking `SHARED` downgrades in place (same fence, lease renewed, compatible waiters at the
//! head granted at once); a shared holder asking for the lock exclusively is refused with an
//! error and keeps its hold as it was (the refused request carries a short lease, which the
//! hold must not take). Every new hold gets a fence above every fence issued for the key;
//! waiters granted at one instant get theirs in queue order.
//!
//! Crashes at full fence rate (`op_crash`): the server takes an RDB snapshot (`SAVE`, with
//! the AOF turned off at run time first) and the model a copy of itself; then one connection,
//! or two at once, pipelines thousands of `LOCK.FENCE` on one or two held keys (a `TRYAGAIN`
//! reply is legitimate: the module issues fences from a bucket of 8 ms' worth that it refills
//! at 2,048 a millisecond), every acknowledged fence checked to increase per key; then
//! `kill -9`, and the server starts again from the snapshot with the AOF off, the model from
//! its copy (waiters are connections: all gone; a lock whose short lease ran out while the
//! server was down is gone). From then on every fence the server issues, for any key, must
//! be above the highest fence acknowledged before the crash, not merely above the
//! snapshot's: the snapshot does not know the burst. The first such fences go out on a
//! connection made while the server is still starting (a `TRYAGAIN` there, the module's
//! refusal for a few milliseconds after a start, is retried). Then `CONFIG SET appendonly
//! yes` writes a fresh AOF from the loaded data, so that later restarts (`appendonly yes`)
//! go on from there: one server, one configuration, the AOF off only between the `SAVE` and
//! the rewrite after the crash.
//!
//! The keyspace contract: a waiter waits for a (db, key name). A lock that moves (`RENAME`)
//! or is copied (`COPY`, `RESTORE`) arrives with its holds (each its token, kind, fence and
//! lease, in grant order) and its last fence, and no waiters;
//! whenever a key's lock goes away or is replaced (deleted, renamed away, overwritten,
//! swapped out of db 0, flushed, expired), its waiters are answered null at once. Fence
//! history follows the value: the next fence of a moved or copied lock is above its fence,
//! and a fresh acquire of a missing key gets a fence above every fence the server issued.
//!
//! Timing never decides an outcome: long leases (10 min) never end during a run; a short
//! lease or a short `WAIT` puts its key *pending*, no operation touches a pending key, and a
//! `tick` sleeps until every pending deadline is well past (a generous slack) before the
//! model applies them. The op sequence is a function of the seed and the model only.
//!
//! The model itself (plain state, no server) is `tests/common/model.rs`.
//!
//! `MODEL_SEED=<n>` replays a run; `MODEL_OPS=<n>` changes its length.

mod common;

use std::collections::VecDeque;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::model::{
    AcqExpect, MHold, MKey, MLock, MWaiter, Mode, Model, Pending, Span, Want, UPGRADE_ERR,
};
use common::{info_field, parse_info, run_raw, Opts, Server};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::Value;

const DEFAULT_SEED: u64 = 0x6d6f_6465_6c21;
const DEFAULT_OPS: u64 = 3_000;

const KEYS: [&str; 4] = ["m:a", "m:b", "m:c", "m:d"];
const TOKENS: [&[u8]; 5] = [b"t0", b"t1", b"t2", b"t3", b"t\x00\xff binary"];
/// A lease that never ends during a run.
const LONG_TTL: u64 = 600_000;
/// How long past a deadline the server has to act on it (lease end, wait timeout).
const SLACK: Duration = Duration::from_millis(150);
/// Tolerance on `ttl` beyond the measured send/receive window (rounding, wall-clock
/// conversion across restarts).
const TTL_SLACK_MS: i64 = 30;
/// `LOCK.FENCE` commands pipelined in one burst before a crash: more than the module's bucket
/// (8 ms' worth, 16,384) at the top of the range.
const BURST_MIN: usize = 4_000;
const BURST_MAX: usize = 24_000;
/// The `WAIT` of a waiter that `op_contend` queues first and lets run out.
const CONTEND_WAIT_MS: u64 = 600;
/// Connections of a parallel burst.
const BURST_CONNS: usize = 2;
/// A crash step comes at least this many steps after the previous one, besides its random
/// turns, so that every full-length run has several.
const CRASH_GAP: u64 = 400;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

// ------------------------------------------------------------------- raw waiter connections

#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    Null,
    Error(String),
    Other(String),
    /// The server closed the connection.
    Closed,
}

/// A client on its own socket, for `LOCK.ACQUIRE … WAIT` whose reply is read later.
struct Sock {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Sock {
    fn connect(port: u16) -> Sock {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect waiter");
        s.set_nodelay(true).ok();
        Sock { s, buf: Vec::new() }
    }

    fn send(&mut self, args: &[&[u8]]) {
        self.s
            .write_all(&common::resp_command(args))
            .expect("send to waiter socket");
    }

    /// One reply of the shapes `LOCK.ACQUIRE` gives, within `timeout`.
    fn reply(&mut self, timeout: Duration) -> Option<Reply> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.parse() {
                return Some(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 16 * 1024];
            match self.s.read(&mut chunk) {
                Ok(0) => return Some(Reply::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(Reply::Closed),
                Err(e) => panic!("waiter socket: {e}"),
            }
        }
    }

    fn parse(&mut self) -> Option<Reply> {
        let end = self.buf.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&self.buf[1..end]).to_string();
        let r = match self.buf[0] {
            b':' => Reply::Int(line.parse().expect("integer reply")),
            b'$' | b'*' if line == "-1" => Reply::Null,
            b'_' => Reply::Null,
            b'-' => Reply::Error(line),
            _ => Reply::Other(String::from_utf8_lossy(&self.buf).to_string()),
        };
        self.buf.drain(..end + 2);
        Some(r)
    }

    /// True if the server sent anything (a reply or a close) that was not read yet.
    fn has_input(&mut self) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        self.s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = self.s.peek(&mut b);
        self.s.set_nonblocking(false).unwrap();
        r.is_ok()
    }
}

/// The reply to a command sent right after a restart (`early_calls`).
struct EarlyReply {
    reply: Option<Reply>,
    /// When the command that got `reply` was sent, and when `reply` came.
    sent: Instant,
    recv: Instant,
    /// Earlier sends of it answered `TRYAGAIN` (no fence yet) or `LOADING`.
    tryagain: u64,
    loading: u64,
}

/// Sends each of `cmds` (RESP) in turn on one connection to `port`, made as soon as a server
/// that is starting there takes one, and reads its reply; a `TRYAGAIN` or `LOADING` reply
/// sends it again a millisecond later (for up to a second).
fn early_calls(port: u16, cmds: &[Vec<u8>]) -> Result<Vec<EarlyReply>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => sleep(Duration::from_millis(1)),
            Err(e) => return Err(format!("no connection to the restarted server: {e}")),
        }
    };
    s.set_nodelay(true).ok();
    let mut sock = Sock { s, buf: Vec::new() };
    let mut out = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        let (mut tryagain, mut loading) = (0, 0);
        loop {
            let sent = Instant::now();
            sock.s
                .write_all(cmd)
                .map_err(|e| format!("send to the restarted server: {e}"))?;
            let reply = sock.reply(Duration::from_secs(10));
            let recv = Instant::now();
            match &reply {
                Some(Reply::Error(e)) if tryagain + loading < 1000 => {
                    if e.starts_with("TRYAGAIN ") {
                        tryagain += 1;
                    } else if e.starts_with("LOADING ") {
                        loading += 1;
                    } else {
                        return Err(format!("error from the restarted server: {e}"));
                    }
                    sleep(Duration::from_millis(1));
                }
                _ => {
                    out.push(EarlyReply {
                        reply,
                        sent,
                        recv,
                        tryagain,
                        loading,
                    });
                    break;
                }
            }
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------------------ the driver

/// Runs of one keyspace operation: `runs (w with waiters)`, where `w` counts the runs that
/// answered at least one waiter null (for `COPY`/`RESTORE`: that replaced a destination with
/// waiters).
#[derive(Default, Clone, Copy)]
struct Tally {
    runs: u64,
    with_waiters: u64,
}

impl Tally {
    fn add(&mut self, answered: usize) {
        self.runs += 1;
        if answered > 0 {
            self.with_waiters += 1;
        }
    }
}

impl fmt::Debug for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}w)", self.runs, self.with_waiters)
    }
}

#[derive(Default, Debug)]
struct Counts {
    acquire: u64,
    acquire_wait: u64,
    blocked: u64,
    release: u64,
    extend: u64,
    fence: u64,
    info: u64,
    del: u64,
    disconnect: u64,
    short_leases: u64,
    short_waits: u64,
    lease_ends: u64,
    grants: u64,
    wait_timeouts: u64,
    ticks: u64,
    restarts: u64,
    reloads: u64,
    sleeps: u64,
    /// Waiters answered null because their key was deleted, reloaded, renamed, replaced,
    /// swapped out, flushed or expired.
    answered_null: u64,
    // Keyspace operations (see `Tally`).
    rename: Tally,
    renamenx: Tally,
    /// `RENAME`/`RENAMENX` of a missing key: `ERR no such key`.
    rename_no_such_key: u64,
    /// `RENAMENX` onto an existing key: 0, nothing changed.
    renamenx_refused: u64,
    swapdb: Tally,
    /// Of those, the two `SWAPDB`s sent in one pipeline (waiters read after both).
    swapdb_pipelined: u64,
    flushdb: Tally,
    flushdb_async: Tally,
    flushall_async: Tally,
    copy: Tally,
    dump_restore: Tally,
    /// `COPY`/`DUMP` of a missing key: nothing copied.
    copy_no_source: u64,
    /// `COPY`/`RESTORE` whose source had waiters: they keep waiting, in order.
    copy_source_kept_waiters: u64,
    set_del: Tally,
    pexpireat: Tally,
    pexpireat_missing: u64,
    /// Time spent waiting for pending deadlines, and in restarts.
    tick_wait_ms: u64,
    restart_ms: u64,
    // Crashes at full fence rate (see `op_crash`).
    crashes: u64,
    /// Fences acknowledged in the bursts before the crashes, and `TRYAGAIN` replies there.
    crash_burst_fences: u64,
    crash_burst_tryagain: u64,
    /// The fastest burst, in fences acknowledged per millisecond.
    crash_burst_peak_per_ms: u64,
    /// Bursts on two keys at once (else one), and bursts on `BURST_CONNS` connections at
    /// once (else one).
    crash_two_key_bursts: u64,
    crash_parallel_bursts: u64,
    /// Fences taken right after the restarts (held burst keys and fresh keys), each checked
    /// against the pre-crash maximum, and the `TRYAGAIN` replies met while taking them.
    crash_first_fences: u64,
    crash_first_fresh: u64,
    crash_restart_tryagain: u64,
    /// Waiters whose connection the crash closed.
    crash_waiters_dropped: u64,
    /// Locks in the snapshot whose short lease ran out while the server was down.
    crash_lapsed: u64,
    /// Fences issued after a crash and checked against the highest one acknowledged before
    /// it, by any op (later bursts included).
    above_crash_floor: u64,
    crash_ms: u64,
    // Shared holds.
    /// Requests asking `SHARED`, and of those with `LIMIT n`.
    shared_requests: u64,
    limit_requests: u64,
    /// Shared holds taken next to other shared holds at once (`AcqExpect::Join`).
    joins: u64,
    /// Renewals by a holder asking for the kind it holds (with a `LIMIT` already reached).
    renewals: u64,
    renewals_over_limit: u64,
    /// Exclusive holders asking `SHARED`, and waiters those downgrades granted.
    downgrades: u64,
    downgrade_grants: u64,
    /// Shared holders asking for the lock exclusively: refused, the hold kept.
    upgrades_refused: u64,
    /// Shared requests refused (or queued) only because of their `LIMIT`.
    limit_refused: u64,
    /// Shared requests the holds had room for, refused (or queued) because somebody waits
    /// (an exclusive request first in the queue, or a shared one at its own limit).
    held_back: u64,
    /// Instants at which two or more waiters were granted together.
    group_grants: u64,
    /// Waiters granted because a waiter before them left the queue (timeout, hang-up).
    withdraw_grants: u64,
    /// Lease ends of a shared hold while other holds remained.
    shared_lease_ends: u64,
    /// Queues of mixed kinds built by `op_contend`.
    contends: u64,
    /// The most holds seen on one key.
    max_holders: u64,
    /// `LOCK.HOLDERS` replies checked (ops and key checks).
    holders_checked: u64,
}

struct Driver {
    server: Server,
    con: redis::Connection,
    model: Model,
    socks: Vec<Option<Sock>>,
    rng: StdRng,
    seed: u64,
    log: Vec<String>,
    counts: Counts,
    /// Steps since the last crash step (see `CRASH_GAP`).
    steps_since_crash: u64,
}

macro_rules! ensure {
    ($d:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            $d.fail(&format!($($fmt)+));
        }
    };
}

impl Driver {
    fn fail(&self, msg: &str) -> ! {
        let from = self.log.len().saturating_sub(60);
        let mut s = String::new();
        for (i, l) in self.log.iter().enumerate().skip(from) {
            s.push_str(&format!("  #{i} {l}\n"));
        }
        panic!(
            "MODEL DISAGREES (MODEL_SEED={} op #{}): {msg}\n--- last ops ---\n{s}--- model ---\n{:#?}",
            self.seed,
            self.log.len(),
            self.model.keys
        );
    }

    fn note(&mut self, s: String) {
        self.log.push(s);
    }

    fn call(&mut self, args: &[&[u8]]) -> (Value, Instant, Instant) {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let sent = Instant::now();
        let r = run_raw(&mut self.con, &v);
        let recv = Instant::now();
        match r {
            Ok(v) => (v, sent, recv),
            Err(e) => {
                let shown: Vec<String> = args.iter().map(|a| show(a)).collect();
                self.fail(&format!("{shown:?} replied error {e}"))
            }
        }
    }

    fn int_or_null(&self, what: &str, v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            Value::Nil => None,
            other => self.fail(&format!("{what}: expected integer or null, got {other:?}")),
        }
    }

    fn free_keys(&self) -> Vec<usize> {
        (0..KEYS.len())
            .filter(|&k| self.model.keys[k].pending.is_none())
            .collect()
    }

    /// A token for an op on `k`: half the time one of its holders (if any), else any token.
    fn pick_token(&mut self, k: usize) -> Vec<u8> {
        let holders: Vec<Vec<u8>> = self.model.keys[k]
            .lock
            .as_ref()
            .map(|l| l.holds.iter().map(|h| h.token.clone()).collect())
            .unwrap_or_default();
        if !holders.is_empty() && self.rng.gen_bool(0.5) {
            return holders[self.rng.gen_range(0..holders.len())].clone();
        }
        TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec()
    }

    /// The kind of a request: half exclusive, else shared, with a `LIMIT` of 1 to 4 half
    /// the time.
    fn pick_want(&mut self) -> Want {
        match self.rng.gen_range(0..4) {
            0 | 1 => Want::Exclusive,
            2 => Want::Shared(None),
            _ => Want::Shared(Some(self.rng.gen_range(1..=4))),
        }
    }

    fn short_ttl(&mut self) -> u64 {
        self.rng.gen_range(100..=200)
    }

    /// `LOCK.ACQUIRE key token ttl` with `want`'s options and `extra` (`WAIT t`), the option
    /// groups in random order.
    fn acquire_args(
        &mut self,
        k: usize,
        token: &[u8],
        ttl: u64,
        want: Want,
        extra: Option<Vec<Vec<u8>>>,
    ) -> Vec<Vec<u8>> {
        let mut groups = want.options();
        groups.extend(extra);
        groups.shuffle(&mut self.rng);
        let mut args = vec![
            b"LOCK.ACQUIRE".to_vec(),
            KEYS[k].as_bytes().to_vec(),
            token.to_vec(),
            ttl.to_string().into_bytes(),
        ];
        args.extend(groups.into_iter().flatten());
        args
    }

    /// Counts what the model expects of a request.
    fn count_request(&mut self, k: usize, want: Want, expect: AcqExpect) {
        if let Want::Shared(limit) = want {
            self.counts.shared_requests += 1;
            if limit.is_some() {
                self.counts.limit_requests += 1;
            }
        }
        let l = self.model.keys[k].lock.as_ref();
        match expect {
            AcqExpect::Join => self.counts.joins += 1,
            AcqExpect::Renew(_) => {
                self.counts.renewals += 1;
                if let (Want::Shared(Some(n)), Some(l)) = (want, l) {
                    if l.holds.len() >= n as usize {
                        self.counts.renewals_over_limit += 1;
                    }
                }
            }
            AcqExpect::Downgrade(_) => self.counts.downgrades += 1,
            AcqExpect::Upgrade => self.counts.upgrades_refused += 1,
            AcqExpect::Busy => {
                if let (Want::Shared(_), Some(l)) = (want, l) {
                    if l.admits(want) {
                        // Room for it, but somebody waits (a request without `WAIT` does
                        // not pass the queue; one with `WAIT` queues behind it).
                        self.counts.held_back += 1;
                    } else if !l.exclusive() && l.queue.is_empty() {
                        self.counts.limit_refused += 1;
                    }
                }
            }
            AcqExpect::Fresh => {}
        }
    }

    /// Applies the reply to a request the model answers at once (anything but `Busy`):
    /// `got` is the fence, or the error text. `sent`/`recv` bound when the server acted.
    #[allow(clippy::too_many_arguments)]
    fn apply_answer(
        &mut self,
        k: usize,
        token: Vec<u8>,
        want: Want,
        ttl: u64,
        expect: AcqExpect,
        got: Result<Option<i64>, String>,
        sent: Instant,
        recv: Instant,
        what: &str,
    ) {
        let deadline = Span::after(sent, recv, ttl);
        let hold = |fence| MHold {
            token: token.clone(),
            mode: want.mode(),
            fence,
            deadline,
        };
        match (expect, got) {
            (AcqExpect::Fresh, Ok(Some(f))) => {
                if let Err(e) = self.model.new_fence(k, f, true) {
                    self.fail(&format!("{what}: {e}"));
                }
                self.model.keys[k].lock = Some(MLock::new(hold(f)));
            }
            (AcqExpect::Join, Ok(Some(f))) => {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("{what}: {e}"));
                }
                self.model.keys[k]
                    .lock
                    .as_mut()
                    .unwrap()
                    .holds
                    .push(hold(f));
            }
            (AcqExpect::Renew(f0), Ok(Some(f))) => {
                ensure!(
                    self,
                    f == f0,
                    "{what}: renewal returned fence {f}, expected the same {f0}"
                );
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(&token).deadline = deadline;
            }
            (AcqExpect::Downgrade(f0), Ok(Some(f))) => {
                ensure!(
                    self,
                    f == f0,
                    "{what}: downgrade returned fence {f}, expected the same {f0}"
                );
                let l = self.model.keys[k].lock.as_mut().unwrap();
                let h = l.hold_mut(&token);
                h.mode = Mode::Shared;
                h.deadline = deadline;
                let granted = self.model.serve(k, sent);
                self.counts.downgrade_grants += granted.len() as u64;
                self.read_grants(k, granted, sent, "the downgrade");
            }
            (AcqExpect::Upgrade, Err(e)) => {
                ensure!(
                    self,
                    e == UPGRADE_ERR,
                    "{what}: refused upgrade replied {e:?}, expected {UPGRADE_ERR:?}"
                );
                // The hold is unchanged: its lease, fence and kind (checked at once).
                self.check_key(k);
                return;
            }
            (e, g) => self.fail(&format!("{what}: model {e:?}, server {g:?}")),
        }
        let n = self.model.keys[k].lock.as_ref().unwrap().holds.len() as u64;
        self.counts.max_holders = self.counts.max_holders.max(n);
    }

    // ------------------------------------------------------------------------ operations

    fn op_acquire(&mut self, k: usize, token: Vec<u8>, want: Want, short: bool) {
        self.counts.acquire += 1;
        let expect = self.model.acquire(k, &token, want);
        // A refused upgrade carries a short lease: the hold must not take it.
        let short = short || expect == AcqExpect::Upgrade;
        let ttl = if short { self.short_ttl() } else { LONG_TTL };
        self.count_request(k, want, expect);
        let args = self.acquire_args(k, &token, ttl, want, None);
        let sent = Instant::now();
        let r = run_raw(&mut self.con, &args);
        let recv = Instant::now();
        let what = format!(
            "ACQUIRE {} {} {ttl} {want} (model {expect:?})",
            KEYS[k],
            show(&token)
        );
        self.note(format!("{what} -> {r:?}"));
        let got = match r {
            Ok(v) => Ok(self.int_or_null("LOCK.ACQUIRE", &v)),
            Err(e) => Err(e),
        };
        if expect == AcqExpect::Busy {
            ensure!(self, got == Ok(None), "{what}: server {got:?}, model null");
            return;
        }
        self.apply_answer(k, token.clone(), want, ttl, expect, got, sent, recv, &what);
        if short && expect != AcqExpect::Upgrade {
            self.counts.short_leases += 1;
            let span = Span::after(sent, recv, ttl);
            self.model.keys[k].pending = Some(Pending::LeaseEnd { token, span });
        }
    }

    /// `LOCK.ACQUIRE … WAIT` on a connection of its own. `short_wait`: a timeout of 100–250
    /// ms that will run out (the key is pending until then); otherwise `WAIT 0` or a
    /// timeout far beyond the run.
    fn op_acquire_wait(&mut self, k: usize, token: Vec<u8>, want: Want, short_wait: bool) {
        let timeout: u64 = if short_wait {
            self.rng.gen_range(100..=250)
        } else if self.rng.gen_bool(0.5) {
            0
        } else {
            LONG_TTL
        };
        self.op_acquire_wait_for(k, token, want, timeout)
    }

    /// `op_acquire_wait` with `WAIT timeout`: one that is neither 0 nor `LONG_TTL` runs out
    /// during the run (the key is pending until then).
    fn op_acquire_wait_for(&mut self, k: usize, token: Vec<u8>, want: Want, timeout: u64) {
        self.counts.acquire_wait += 1;
        let short_wait = timeout != 0 && timeout != LONG_TTL;
        let expect = self.model.acquire(k, &token, want);
        self.count_request(k, want, expect);
        let wait = vec![b"WAIT".to_vec(), timeout.to_string().into_bytes()];
        let args = self.acquire_args(k, &token, LONG_TTL, want, Some(wait));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let mut sock = Sock::connect(self.server.port);
        let sent = Instant::now();
        sock.send(&args);
        let what = format!(
            "ACQUIRE {} {} {LONG_TTL} {want} WAIT {timeout} (model {expect:?})",
            KEYS[k],
            show(&token)
        );
        if expect != AcqExpect::Busy {
            let r = sock.reply(Duration::from_secs(10));
            let recv = Instant::now();
            self.note(format!("{what} -> {r:?}"));
            let got = match r {
                Some(Reply::Int(f)) => Ok(Some(f)),
                Some(Reply::Null) => Ok(None),
                Some(Reply::Error(e)) => Err(e),
                other => self.fail(&format!("{what}: server {other:?}")),
            };
            self.apply_answer(k, token, want, LONG_TTL, expect, got, sent, recv, &what);
            return;
        }
        // Queued: the server must count one more waiter (without a timeout race: a short
        // wait is not polled for, its key is pending until it runs out).
        self.counts.blocked += 1;
        let id = self.model.waiters.len();
        self.model.waiters.push(Some(MWaiter {
            key: k,
            token: token.clone(),
            want,
            ttl: LONG_TTL,
        }));
        self.model.keys[k]
            .lock
            .as_mut()
            .unwrap()
            .queue
            .push_back(id);
        self.socks.push(Some(sock));
        self.note(format!("{what} -> queued as waiter w{id}"));
        if short_wait {
            self.counts.short_waits += 1;
            self.model.keys[k].pending = Some(Pending::WaitTimeout {
                waiter: id,
                at: sent + Duration::from_millis(timeout),
            });
        } else {
            let want = self.model.keys[k].lock.as_ref().unwrap().queue.len() as i64;
            self.await_waiters(k, want, &format!("waiter w{id} joining"));
            let s = self.socks[id].as_mut().unwrap();
            ensure!(
                self,
                !s.has_input(),
                "waiter w{id} got a reply while it should wait"
            );
        }
    }

    /// Polls `LOCK.INFO` until `k` has `want` waiters.
    fn await_waiters(&mut self, k: usize, want: i64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (v, _, _) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
            let n = parse_info(&v).map_or(0, |i| i.waiters);
            if n == want {
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!("{what}: {} has {n} waiters, want {want}", KEYS[k]));
            }
            sleep(Duration::from_millis(1));
        }
    }

    /// Reads the grants the model made to `granted` (waiters of `k`, in queue order,
    /// triggered at `from` by `why`): each a new fence, above the one before.
    fn read_grants(&mut self, k: usize, granted: Vec<usize>, from: Instant, why: &str) {
        if granted.len() > 1 {
            self.counts.group_grants += 1;
        }
        for w in granted {
            self.counts.grants += 1;
            let r = self.socks[w]
                .as_mut()
                .unwrap()
                .reply(Duration::from_secs(10));
            let recv = Instant::now();
            let mw = self.model.waiters[w].take().unwrap();
            self.socks[w] = None;
            self.note(format!(
                "  waiter w{w} ({} {}) granted {} after {why} -> {r:?}",
                show(&mw.token),
                mw.want,
                KEYS[k]
            ));
            let Some(Reply::Int(f)) = r else {
                self.fail(&format!(
                    "waiter w{w} should be granted {} after {why}: {r:?}",
                    KEYS[k]
                ));
            };
            if let Err(e) = self.model.new_fence(k, f, false) {
                self.fail(&format!("grant to w{w} after {why}: {e}"));
            }
            let h = self.model.keys[k]
                .lock
                .as_mut()
                .unwrap()
                .hold_mut(&mw.token);
            h.fence = f;
            h.deadline = Span::after(from, recv, mw.ttl);
        }
        if let Some(l) = self.model.keys[k].lock.as_ref() {
            let n = l.holds.len() as u64;
            self.counts.max_holders = self.counts.max_holders.max(n);
        }
    }

    fn op_release(&mut self, k: usize, token: Vec<u8>) {
        self.counts.release += 1;
        let holds = self.model.holds(k, &token);
        let (v, sent, _) = self.call(&[b"LOCK.RELEASE", KEYS[k].as_bytes(), &token]);
        self.note(format!(
            "RELEASE {} {} -> {v:?} (model {})",
            KEYS[k],
            show(&token),
            holds as i64
        ));
        ensure!(
            self,
            v == Value::Int(holds as i64),
            "LOCK.RELEASE replied {v:?}, model {}",
            holds as i64
        );
        if holds {
            let granted = self.model.end_hold(k, &token, sent);
            self.read_grants(k, granted, sent, "the release");
        }
    }

    fn op_extend(&mut self, k: usize, token: Vec<u8>, short: bool) {
        self.counts.extend += 1;
        let ttl = if short { self.short_ttl() } else { LONG_TTL };
        let holds = self.model.holds(k, &token);
        let (v, sent, recv) = self.call(&[
            b"LOCK.EXTEND",
            KEYS[k].as_bytes(),
            &token,
            ttl.to_string().as_bytes(),
        ]);
        self.note(format!(
            "EXTEND {} {} {ttl} -> {v:?} (model {})",
            KEYS[k],
            show(&token),
            holds as i64
        ));
        ensure!(
            self,
            v == Value::Int(holds as i64),
            "LOCK.EXTEND replied {v:?}, model {}",
            holds as i64
        );
        if holds {
            let span = Span::after(sent, recv, ttl);
            let l = self.model.keys[k].lock.as_mut().unwrap();
            l.hold_mut(&token).deadline = span;
            if short {
                self.counts.short_leases += 1;
                self.model.keys[k].pending = Some(Pending::LeaseEnd { token, span });
            }
        }
    }

    fn op_fence(&mut self, k: usize, token: Vec<u8>) {
        self.counts.fence += 1;
        let holds = self.model.holds(k, &token);
        let (v, _, _) = self.call(&[b"LOCK.FENCE", KEYS[k].as_bytes(), &token]);
        let got = self.int_or_null("LOCK.FENCE", &v);
        self.note(format!(
            "FENCE {} {} -> {got:?} (model {})",
            KEYS[k],
            show(&token),
            if holds { "new" } else { "null" }
        ));
        match (holds, got) {
            (true, Some(f)) => {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("LOCK.FENCE: {e}"));
                }
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(&token).fence = f;
            }
            (false, None) => {}
            (h, g) => self.fail(&format!("LOCK.FENCE: model holds={h}, server {g:?}")),
        }
    }

    fn op_info(&mut self, k: usize) {
        self.counts.info += 1;
        let (v, sent, recv) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
        self.note(format!("INFO {} -> {:?}", KEYS[k], parse_info(&v)));
        self.check_info(k, &v, sent, recv);
    }

    fn op_holders(&mut self, k: usize) {
        let (v, sent, recv) = self.call(&[b"LOCK.HOLDERS", KEYS[k].as_bytes()]);
        self.note(format!("HOLDERS {} -> {v:?}", KEYS[k]));
        self.check_holders(k, &v, sent, recv);
    }

    /// The bounds of a ttl the server read at some instant in [`sent`, `recv`] of a lease
    /// that ends in `span`.
    fn ttl_bounds(span: Span, sent: Instant, recv: Instant) -> (i64, i64) {
        let ms = |later: Instant, earlier: Instant| -> i64 {
            if later >= earlier {
                later.duration_since(earlier).as_millis() as i64
            } else {
                -(earlier.duration_since(later).as_millis() as i64)
            }
        };
        (
            ms(span.lo, recv) - TTL_SLACK_MS,
            ms(span.hi, sent) + TTL_SLACK_MS,
        )
    }

    /// A `LOCK.INFO` reply against the model: the six fields in order (holder, fence, ttl,
    /// waiters, mode, holders), each the model's.
    fn check_info(&self, k: usize, v: &Value, sent: Instant, recv: Instant) {
        if let Value::Array(items) = v {
            let names: Vec<Vec<u8>> = items
                .iter()
                .step_by(2)
                .map(|n| match n {
                    Value::BulkString(b) => b.clone(),
                    Value::SimpleString(s) => s.clone().into_bytes(),
                    other => format!("{other:?}").into_bytes(),
                })
                .collect();
            let want: [&[u8]; 6] = [b"holder", b"fence", b"ttl", b"waiters", b"mode", b"holders"];
            ensure!(
                self,
                names.iter().map(|n| &n[..]).eq(want.iter().copied()),
                "LOCK.INFO {}: fields {:?}, expected holder, fence, ttl, waiters, mode, holders",
                KEYS[k],
                names.iter().map(|n| show(n)).collect::<Vec<_>>()
            );
        }
        let got = parse_info(v);
        let want = self.model.info(k);
        match (&want, &got) {
            (None, None) => {}
            (Some(m), Some(i)) => {
                ensure!(
                    self,
                    i.holder == m.holder
                        && i.fence == m.fence
                        && i.waiters == m.waiters as i64
                        && i.mode == m.mode
                        && i.holders == m.holders as i64,
                    "LOCK.INFO {}: server {i:?}, model {m:?} (holder {:?})",
                    KEYS[k],
                    m.holder.as_deref().map(show)
                );
                let (min, max) = Self::ttl_bounds(m.ttl, sent, recv);
                ensure!(
                    self,
                    i.ttl >= min && i.ttl <= max,
                    "LOCK.INFO {}: ttl {} outside the model's [{min}, {max}]",
                    KEYS[k],
                    i.ttl
                );
            }
            _ => self.fail(&format!(
                "LOCK.INFO {}: server {got:?}, model {want:?}",
                KEYS[k]
            )),
        }
    }

    /// A `LOCK.HOLDERS` reply against the model: null for a missing key, else one
    /// `[token, fence, ttl, mode]` per hold, in grant order, each the model's.
    fn check_holders(&mut self, k: usize, v: &Value, sent: Instant, recv: Instant) {
        self.counts.holders_checked += 1;
        let lock = self.model.keys[k].lock.as_ref();
        let Some(l) = lock else {
            ensure!(
                self,
                *v == Value::Nil,
                "LOCK.HOLDERS {}: server {v:?}, model: no such key",
                KEYS[k]
            );
            return;
        };
        let items = match v {
            Value::Array(items) if items.len() == l.holds.len() => items,
            _ => self.fail(&format!(
                "LOCK.HOLDERS {}: server {v:?}, model {} holds {:?}",
                KEYS[k],
                l.holds.len(),
                l.holds
                    .iter()
                    .map(|h| (show(&h.token), h.fence, h.mode))
                    .collect::<Vec<_>>()
            )),
        };
        for (i, (h, item)) in l.holds.iter().zip(items).enumerate() {
            let ok = match item {
                Value::Array(e) if e.len() == 4 => {
                    let (min, max) = Self::ttl_bounds(h.deadline, sent, recv);
                    e[0] == Value::BulkString(h.token.clone())
                        && e[1] == Value::Int(h.fence)
                        && matches!(e[2], Value::Int(t) if t >= min && t <= max)
                        && (e[3] == Value::BulkString(h.mode.name().as_bytes().to_vec())
                            || e[3] == Value::SimpleString(h.mode.name().into()))
                }
                _ => false,
            };
            ensure!(
                self,
                ok,
                "LOCK.HOLDERS {} entry {i}: server {item:?}, model token {} fence {} mode {} \
                 ttl within {:?} (all: {v:?})",
                KEYS[k],
                show(&h.token),
                h.fence,
                h.mode.name(),
                Self::ttl_bounds(h.deadline, sent, recv)
            );
        }
    }

    fn op_del(&mut self, k: usize) {
        self.counts.del += 1;
        let cmd: &[u8] = if self.rng.gen_bool(0.5) {
            b"DEL"
        } else {
            b"UNLINK"
        };
        let existed = self.model.keys[k].lock.is_some();
        let (v, _, _) = self.call(&[cmd, KEYS[k].as_bytes()]);
        self.note(format!(
            "{} {} -> {v:?} (model {})",
            show(cmd),
            KEYS[k],
            existed as i64
        ));
        ensure!(
            self,
            v == Value::Int(existed as i64),
            "{} replied {v:?}, model {}",
            show(cmd),
            existed as i64
        );
        if existed {
            // The key is gone; its waiters are answered null on the server's next turn (a
            // deletion may be the source side of a MIGRATE). The next fence for the key is
            // still above the deleted lock's.
            self.answer_waiters_null(k, show(cmd).as_str());
            self.model.keys[k].lock = None;
        }
    }

    /// Every waiter of `k` gets a null reply and leaves the queue. Returns how many there were.
    fn answer_waiters_null(&mut self, k: usize, why: &str) -> usize {
        let queue: Vec<usize> = match self.model.keys[k].lock.as_mut() {
            Some(l) => l.queue.drain(..).collect(),
            None => Vec::new(),
        };
        let n = queue.len();
        for w in queue {
            self.counts.answered_null += 1;
            let r = self.socks[w]
                .as_mut()
                .unwrap()
                .reply(Duration::from_secs(10));
            self.note(format!("  waiter w{w} on {} after {why} -> {r:?}", KEYS[k]));
            ensure!(
                self,
                r == Some(Reply::Null),
                "waiter w{w} on {} after {why}: {r:?}, expected null",
                KEYS[k]
            );
            self.model.waiters[w] = None;
            self.socks[w] = None;
        }
        n
    }

    /// A waiter hangs up: it leaves the queue, and whoever it held back may be granted.
    fn op_disconnect(&mut self, w: usize) {
        self.counts.disconnect += 1;
        let at = Instant::now();
        self.socks[w] = None;
        let (mw, granted) = self.model.withdraw(w, at);
        let k = mw.key;
        self.note(format!(
            "waiter w{w} ({} {} on {}) disconnects",
            show(&mw.token),
            mw.want,
            KEYS[k]
        ));
        self.counts.withdraw_grants += granted.len() as u64;
        self.read_grants(k, granted, at, &format!("w{w} hung up"));
        let want = self.model.keys[k].lock.as_ref().unwrap().queue.len() as i64;
        self.await_waiters(k, want, &format!("waiter w{w} leaving"));
    }

    /// Time passes until every pending deadline is well past; the model applies them.
    fn tick(&mut self) {
        self.counts.ticks += 1;
        let last = self
            .model
            .keys
            .iter()
            .filter_map(|mk| match &mk.pending {
                Some(Pending::LeaseEnd { span, .. }) => Some(span.hi),
                Some(Pending::WaitTimeout { at, .. }) => Some(*at),
                None => None,
            })
            .max();
        let Some(last) = last else {
            return;
        };
        let until = last + SLACK;
        let wait = until.saturating_duration_since(Instant::now());
        self.counts.tick_wait_ms += wait.as_millis() as u64;
        sleep(wait);
        for (k, key) in KEYS.iter().enumerate() {
            match self.model.keys[k].pending.take() {
                None => {}
                Some(Pending::LeaseEnd { token, span }) => {
                    self.counts.lease_ends += 1;
                    self.note(format!("  lease of {} on {key} ends", show(&token)));
                    let granted = self.model.end_hold(k, &token, span.lo);
                    let left = self.model.keys[k]
                        .lock
                        .as_ref()
                        .map_or(0, |l| l.holds.len() - granted.len());
                    if left > 0 {
                        self.counts.shared_lease_ends += 1;
                    }
                    self.read_grants(k, granted, span.lo, "the lease end");
                }
                Some(Pending::WaitTimeout { waiter, at }) => {
                    self.counts.wait_timeouts += 1;
                    let r = self.socks[waiter]
                        .as_mut()
                        .unwrap()
                        .reply(Duration::from_secs(10));
                    self.note(format!("  waiter w{waiter} on {key} times out -> {r:?}"));
                    ensure!(
                        self,
                        r == Some(Reply::Null),
                        "waiter w{waiter} should time out with null: {r:?}"
                    );
                    self.socks[waiter] = None;
                    let (_, granted) = self.model.withdraw(waiter, at);
                    self.counts.withdraw_grants += granted.len() as u64;
                    self.read_grants(k, granted, at, &format!("w{waiter} timed out"));
                }
            }
        }
        self.check_totals();
    }

    /// Server-wide figures that only the model's determinate state fixes: keys and waiters.
    fn check_totals(&mut self) {
        let (v, _, _) = self.call(&[b"DBSIZE"]);
        let keys = self.model.key_count() as i64;
        ensure!(
            self,
            v == Value::Int(keys),
            "DBSIZE {v:?}, model has {keys} keys"
        );
        let waiting = info_field(&mut self.con, "lock", "lock_waiting_clients");
        let want = self.model.waiter_count().to_string();
        ensure!(
            self,
            waiting.as_deref() == Some(want.as_str()),
            "lock_waiting_clients {waiting:?}, model {want}"
        );
        for w in 0..self.socks.len() {
            let Some(s) = self.socks[w].as_mut() else {
                continue;
            };
            if s.has_input() {
                let r = s.reply(Duration::from_millis(100));
                self.fail(&format!("waiter w{w} got {r:?} while it should wait"));
            }
        }
    }

    /// Every waiter's connection was closed without a reply (a restart or a crash).
    fn expect_waiters_closed(&mut self, why: &str) -> u64 {
        let mut n = 0;
        for w in 0..self.model.waiters.len() {
            if self.model.waiters[w].is_some() {
                let r = self.socks[w]
                    .as_mut()
                    .unwrap()
                    .reply(Duration::from_secs(10));
                ensure!(
                    self,
                    r == Some(Reply::Closed),
                    "waiter w{w} across {why}: {r:?}, expected the connection closed"
                );
                self.socks[w] = None;
                n += 1;
            }
        }
        self.model.drop_waiters();
        n
    }

    fn op_restart(&mut self) {
        self.tick();
        self.counts.restarts += 1;
        self.note("RESTART (SHUTDOWN NOSAVE, appendonly yes)".into());
        let t = Instant::now();
        self.server.restart();
        self.con = self.server.conn();
        self.counts.restart_ms += t.elapsed().as_millis() as u64;
        // Waiters are connections: the restart dropped them without a reply.
        self.expect_waiters_closed("a restart");
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    fn op_reload(&mut self) {
        self.tick();
        self.counts.reloads += 1;
        let (v, _, _) = self.call(&[b"DEBUG", b"RELOAD"]);
        self.note(format!("DEBUG RELOAD -> {v:?}"));
        ensure!(self, v == Value::Okay, "DEBUG RELOAD replied {v:?}");
        // Every lock is freed and loaded anew with its holds, leases and fences. Its waiters
        // stay connected but are answered null, as waiters of a deleted key are.
        for k in 0..KEYS.len() {
            self.answer_waiters_null(k, "DEBUG RELOAD");
        }
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
    }

    /// A crash at full fence rate. The AOF goes off and the server saves an RDB snapshot;
    /// the model keeps a copy of itself. One connection (or two at once) then pipelines a
    /// burst of `LOCK.FENCE` on one or two held keys, every acknowledged fence checked to
    /// increase per key (`TRYAGAIN` is counted: the bucket may run dry), and the server is
    /// killed with SIGKILL right after the last reply. It starts again from the snapshot with the AOF
    /// off; the model becomes its copy, without waiters (connections, all closed by the
    /// crash) and without a lock whose short lease ran out while the server was down. The
    /// burst is lost, but its fences are not forgotten: from now on every fence issued must
    /// be above the highest one acknowledged before the crash (`Model::crash_floor`), which
    /// the first fences after the restart (burst keys and a fresh key, in random order,
    /// retrying `TRYAGAIN`) check at once and every later op keeps checking. Last,
    /// `CONFIG SET appendonly yes` rewrites the AOF from the loaded data, so that the next
    /// `op_restart` (started with `appendonly yes`) finds the same state.
    fn op_crash(&mut self) {
        self.tick();
        let t0 = Instant::now();
        self.counts.crashes += 1;
        self.steps_since_crash = 0;
        // The burst keys: one or two held locks (one is acquired if none is held).
        let mut held: Vec<usize> = (0..KEYS.len())
            .filter(|&k| self.model.keys[k].lock.is_some())
            .collect();
        if held.is_empty() {
            let k = self.rng.gen_range(0..KEYS.len());
            let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
            let want = self.pick_want();
            self.op_acquire(k, t, want, false);
            held.push(k);
        }
        held.shuffle(&mut self.rng);
        let two = held.len() > 1 && self.rng.gen_bool(0.5);
        held.truncate(if two { 2 } else { 1 });
        let burst = held;
        if two {
            self.counts.crash_two_key_bursts += 1;
        }
        // Half the time another key gets a short lease, to run out while the server is down
        // (a key without waiters: a lease end with a waiter would be a grant whose timing
        // against the crash decides its fate).
        let mut lapsing = None;
        if self.rng.gen_bool(0.5) {
            let cands: Vec<usize> = (0..KEYS.len())
                .filter(|k| !burst.contains(k) && !self.has_waiters(*k))
                .collect();
            if !cands.is_empty() {
                let k = cands[self.rng.gen_range(0..cands.len())];
                // One hold of the key (of several, perhaps) runs out.
                match self.random_holder(k) {
                    Some(h) => self.op_extend(k, h, true),
                    None => {
                        let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
                        let want = self.pick_want();
                        self.op_acquire(k, t, want, true)
                    }
                }
                lapsing = Some(k);
            }
        }
        // Waiters, to be dropped by the crash.
        self.maybe_queue_waiter_anywhere(0.5);

        // The snapshot.
        self.set_appendonly(false);
        let (v, _, _) = self.call(&[b"SAVE"]);
        self.note(format!("SAVE -> {v:?}"));
        ensure!(self, v == Value::Okay, "SAVE replied {v:?}");
        let snapshot: Vec<MKey> = self.model.keys.clone();

        // The burst, at full speed: pipelined on one connection, or on several at once.
        let conns = if self.rng.gen_bool(0.5) {
            1
        } else {
            BURST_CONNS
        };
        let n = self.rng.gen_range(BURST_MIN..=BURST_MAX) / conns * conns;
        // Each `LOCK.FENCE` for one hold of a burst key (of several, perhaps).
        let plans: Vec<Vec<(usize, Vec<u8>)>> = (0..conns)
            .map(|_| {
                (0..n / conns)
                    .map(|_| {
                        let k = burst[self.rng.gen_range(0..burst.len())];
                        (k, self.random_holder(k).unwrap())
                    })
                    .collect()
            })
            .collect();
        let reqs: Vec<Vec<u8>> = plans
            .iter()
            .map(|plan| {
                let mut req = Vec::with_capacity(plan.len() * 40);
                for (k, holder) in plan {
                    req.extend_from_slice(&common::resp_command(&[
                        b"LOCK.FENCE",
                        KEYS[*k].as_bytes(),
                        &holder[..],
                    ]));
                }
                req
            })
            .collect();
        let socks: Vec<Sock> = (0..conns)
            .map(|_| Sock::connect(self.server.port))
            .collect();
        let before = self.model.max_fence;
        let sent = Instant::now();
        let replies: Vec<Vec<Option<Reply>>> = std::thread::scope(|s| {
            let threads: Vec<_> = socks
                .into_iter()
                .zip(reqs.iter().zip(&plans))
                .map(|(mut sock, (req, plan))| {
                    s.spawn(move || {
                        sock.s.write_all(req).expect("send the burst");
                        (0..plan.len())
                            .map(|_| sock.reply(Duration::from_secs(10)))
                            .collect()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let took = sent.elapsed();
        // On each connection, every fence of a key is above the one before it there (and
        // above the key's last fence); across connections, no fence of a key twice.
        let (mut acked, mut tryagain) = (0u64, 0u64);
        let mut issued: Vec<Vec<(i64, &[u8])>> = vec![Vec::new(); KEYS.len()];
        for (c, (plan, rs)) in plans.iter().zip(&replies).enumerate() {
            let mut last: Vec<i64> = (0..KEYS.len())
                .map(|k| self.model.keys[k].last_fence.unwrap_or(0))
                .collect();
            for (i, ((k, holder), r)) in plan.iter().zip(rs).enumerate() {
                let k = *k;
                match r {
                    Some(Reply::Int(f)) => {
                        ensure!(
                            self,
                            *f > last[k],
                            "burst connection {c} fence #{i} on {}: {f}, not above {} before it",
                            KEYS[k],
                            last[k]
                        );
                        last[k] = *f;
                        issued[k].push((*f, &holder[..]));
                        acked += 1;
                    }
                    Some(Reply::Error(e)) if e.starts_with("TRYAGAIN ") => tryagain += 1,
                    r => self.fail(&format!(
                        "burst connection {c} LOCK.FENCE #{i} on {} (held): {r:?}",
                        KEYS[k]
                    )),
                }
            }
        }
        for (k, mut fs) in issued.into_iter().enumerate() {
            fs.sort_unstable();
            for (f, holder) in fs {
                if let Err(e) = self.model.new_fence(k, f, false) {
                    self.fail(&format!("burst on {}: {e} (issued twice?)", KEYS[k]));
                }
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.hold_mut(holder).fence = f;
            }
        }
        let highest = self.model.max_fence;
        let per_ms = acked * 1000 / (took.as_micros() as u64).max(1);
        self.counts.crash_burst_fences += acked;
        self.counts.crash_burst_tryagain += tryagain;
        self.counts.crash_burst_peak_per_ms = self.counts.crash_burst_peak_per_ms.max(per_ms);
        if conns > 1 {
            self.counts.crash_parallel_bursts += 1;
        }
        self.note(format!(
            "burst of {n} LOCK.FENCE on {:?} over {conns} connection(s) in {took:.1?}: {acked} \
             fences ({before} -> {highest}), {tryagain} TRYAGAIN",
            burst.iter().map(|&k| KEYS[k]).collect::<Vec<_>>()
        ));
        ensure!(self, acked > 0, "no fence acknowledged in a burst of {n}");

        // The crash. While the server is down, a short lease in the snapshot runs out.
        self.server.kill9();
        let down = Instant::now();
        if let Some(k) = lapsing {
            if let Some(Pending::LeaseEnd { span, .. }) = &snapshot[k].pending {
                sleep((span.hi + SLACK).saturating_duration_since(Instant::now()));
            }
        }
        self.note("CRASH (SIGKILL after the burst's last reply)".into());
        // Waiters are connections: the crash closed them without a reply.
        self.counts.crash_waiters_dropped += self.expect_waiters_closed("a crash");
        // The model becomes its copy: the server will load the snapshot.
        self.model.keys = snapshot;
        self.model.drop_waiters();
        self.model.crash_floor = highest;
        if let Some(k) = lapsing {
            if let Some(Pending::LeaseEnd { token, .. }) = self.model.keys[k].pending.take() {
                self.counts.lease_ends += 1;
                self.counts.crash_lapsed += 1;
                self.note(format!(
                    "  lease of {} on {} ended while the server was down",
                    show(&token),
                    KEYS[k]
                ));
                // That hold only; the key has no waiters, so nobody is granted.
                let l = self.model.keys[k].lock.as_mut().unwrap();
                l.holds.retain(|h| h.token != token);
                if l.holds.is_empty() {
                    self.model.keys[k].lock = None;
                }
            }
        }

        // The first fences after the restart: a new fence for one holder of each burst key
        // and a fresh key acquired (`Some(want)`), in random order.
        let mut firsts: Vec<(usize, Vec<u8>, Option<Want>)> = Vec::new();
        for &k in &burst {
            let h = self.random_holder(k).unwrap();
            firsts.push((k, h, None));
        }
        let missing: Vec<usize> = (0..KEYS.len())
            .filter(|&k| self.model.keys[k].lock.is_none())
            .collect();
        if !missing.is_empty() {
            let k = missing[self.rng.gen_range(0..missing.len())];
            let t = TOKENS[self.rng.gen_range(0..TOKENS.len())].to_vec();
            let want = self.pick_want();
            firsts.push((k, t, Some(want)));
        }
        firsts.shuffle(&mut self.rng);
        let mut cmds: Vec<Vec<u8>> = Vec::new();
        for (k, t, fresh) in &firsts {
            cmds.push(match fresh {
                Some(want) => {
                    common::resp_command(&self.acquire_args(*k, t, LONG_TTL, *want, None))
                }
                None => common::resp_command(&[&b"LOCK.FENCE"[..], KEYS[*k].as_bytes(), t]),
            });
        }

        // The restart, from the snapshot with the AOF off. The first fences go out on a
        // connection made as soon as the port takes one, while `start_again` still waits
        // for the server to answer: the first is taken at the earliest moment the server
        // serves a command (a `TRYAGAIN`, should the module still refuse fences then, is
        // retried; this module waits that window out while it loads).
        self.server.opts.appendonly = false;
        let port = self.server.port;
        let server = &mut self.server;
        let restart = Instant::now();
        let answers = std::thread::scope(|s| {
            s.spawn(move || server.start_again());
            early_calls(port, &cmds)
        });
        self.con = self.server.conn();
        self.note(format!(
            "  restarted from the snapshot, AOF off (down {:.0?})",
            down.elapsed()
        ));
        let answers = match answers {
            Ok(a) => a,
            Err(e) => self.fail(&e),
        };
        for ((k, t, want), a) in firsts.into_iter().zip(answers) {
            self.counts.crash_restart_tryagain += a.tryagain;
            let fresh = want.is_some();
            let what = match want {
                Some(w) => format!("ACQUIRE {w}"),
                None => "FENCE".into(),
            };
            self.note(format!(
                "{what} {} {} after the crash ({:.1?} into the restart, after {} TRYAGAIN \
                 and {} LOADING) -> {:?} (model: {}, above {highest})",
                KEYS[k],
                show(&t),
                a.sent.duration_since(restart),
                a.tryagain,
                a.loading,
                a.reply,
                if fresh { "fresh key" } else { "held" }
            ));
            let Some(Reply::Int(f)) = a.reply else {
                self.fail(&format!(
                    "LOCK.{what} {} after the crash: {:?}, model: a new fence",
                    KEYS[k], a.reply
                ));
            };
            if let Err(e) = self.model.new_fence(k, f, fresh) {
                self.fail(&format!("LOCK.{what} {} after the crash: {e}", KEYS[k]));
            }
            match want {
                Some(want) => {
                    self.model.keys[k].lock = Some(MLock::new(MHold {
                        token: t,
                        mode: want.mode(),
                        fence: f,
                        deadline: Span::after(a.sent, a.recv, LONG_TTL),
                    }));
                    self.counts.acquire += 1;
                    self.counts.crash_first_fresh += 1;
                }
                None => {
                    let l = self.model.keys[k].lock.as_mut().unwrap();
                    l.hold_mut(&t).fence = f;
                }
            }
            self.counts.crash_first_fences += 1;
        }
        // The server holds the snapshot (with those fences) and nothing else.
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.set_appendonly(true);
        self.server.opts.appendonly = true;
        self.settle_keys();
        self.check_totals();
        self.counts.crash_ms += t0.elapsed().as_millis() as u64;
    }

    /// `CONFIG SET appendonly yes|no`; turning it on waits until the rewrite that writes the
    /// new AOF is done.
    fn set_appendonly(&mut self, on: bool) {
        let val: &[u8] = if on { b"yes" } else { b"no" };
        let (v, _, _) = self.call(&[b"CONFIG", b"SET", b"appendonly", val]);
        self.note(format!("CONFIG SET appendonly {} -> {v:?}", show(val)));
        ensure!(
            self,
            v == Value::Okay,
            "CONFIG SET appendonly replied {v:?}"
        );
        if !on {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut self.con)
                .expect("INFO persistence");
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            if field("aof_rewrite_in_progress").as_deref() == Some("0")
                && field("aof_rewrite_scheduled").as_deref() == Some("0")
            {
                ensure!(
                    self,
                    field("aof_enabled").as_deref() == Some("1")
                        && field("aof_last_bgrewrite_status").as_deref() == Some("ok"),
                    "AOF not written after CONFIG SET appendonly yes:\n{text}"
                );
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!("AOF rewrite not done after 10 s:\n{text}"));
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// Waits (up to `SLACK`) until `DBSIZE` is the model's: a lock loaded with its lease
    /// already ended is reported ended at once but removed by the sweep a moment later.
    fn settle_keys(&mut self) {
        let want = Value::Int(self.model.key_count() as i64);
        let deadline = Instant::now() + SLACK;
        while Instant::now() < deadline {
            let (v, _, _) = self.call(&[b"DBSIZE"]);
            if v == want {
                return;
            }
            sleep(Duration::from_millis(2));
        }
    }

    // ------------------------------------------------------------- keyspace operations

    /// Like `call`, but an error reply is returned rather than failing the run.
    fn try_call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        run_raw(&mut self.con, &v)
    }

    /// After an operation on some keys while others may be pending: the server-wide figures
    /// if nothing is pending (a short lease or wait elsewhere may have run out, and timing
    /// must not decide an outcome), else only that no waiter of a key without a pending
    /// deadline got anything.
    fn check_settled(&mut self) {
        if self.model.keys.iter().all(|mk| mk.pending.is_none()) {
            self.check_totals();
            return;
        }
        for w in 0..self.socks.len() {
            let Some(mw) = self.model.waiters[w].as_ref() else {
                continue;
            };
            if self.model.keys[mw.key].pending.is_some() {
                continue;
            }
            let s = self.socks[w].as_mut().unwrap();
            if s.has_input() {
                let r = s.reply(Duration::from_millis(100));
                self.fail(&format!("waiter w{w} got {r:?} while it should wait"));
            }
        }
    }

    /// `LOCK.INFO` of `k` checked against the model (not counted as an `info` op).
    /// And `LOCK.HOLDERS`.
    fn check_key(&mut self, k: usize) {
        let (v, sent, recv) = self.call(&[b"LOCK.INFO", KEYS[k].as_bytes()]);
        self.check_info(k, &v, sent, recv);
        let (v, sent, recv) = self.call(&[b"LOCK.HOLDERS", KEYS[k].as_bytes()]);
        self.check_holders(k, &v, sent, recv);
    }

    /// One of the holders of `k`, at random.
    fn random_holder(&mut self, k: usize) -> Option<Vec<u8>> {
        let l = self.model.keys[k].lock.as_ref()?;
        let h = &l.holds[self.rng.gen_range(0..l.holds.len())];
        Some(h.token.clone())
    }

    fn has_waiters(&self, k: usize) -> bool {
        self.model.keys[k]
            .lock
            .as_ref()
            .is_some_and(|l| !l.queue.is_empty())
    }

    /// A key without a pending deadline, other than `not`: with probability `waiters` one
    /// with waiters, else with probability `held` one with a lock, else any (each where
    /// there is one).
    fn pick_key(&mut self, not: Option<usize>, waiters: f64, held: f64) -> Option<usize> {
        let free: Vec<usize> = self
            .free_keys()
            .into_iter()
            .filter(|&k| Some(k) != not)
            .collect();
        if free.is_empty() {
            return None;
        }
        let queued: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&k| self.has_waiters(k))
            .collect();
        let locked: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&k| self.model.keys[k].lock.is_some())
            .collect();
        let from = if !queued.is_empty() && self.rng.gen_bool(waiters) {
            queued
        } else if !locked.is_empty() && self.rng.gen_bool(held) {
            locked
        } else {
            free
        };
        Some(from[self.rng.gen_range(0..from.len())])
    }

    /// Two distinct keys without pending deadlines, the source biased towards keys with
    /// waiters (whose fate is the point) or at least a lock, the destination less so, or
    /// (`to_missing`) towards a key that does not exist.
    fn pick_pair(&mut self, to_missing: bool) -> Option<(usize, usize)> {
        let k = self.pick_key(None, 0.6, 0.8)?;
        let missing: Vec<usize> = self
            .free_keys()
            .into_iter()
            .filter(|&x| x != k && self.model.keys[x].lock.is_none())
            .collect();
        if to_missing && !missing.is_empty() && self.rng.gen_bool(0.8) {
            return Some((k, missing[self.rng.gen_range(0..missing.len())]));
        }
        let k2 = self.pick_key(Some(k), 0.5, 0.0)?;
        Some((k, k2))
    }

    /// With probability `p`, if `k` is held and not pending, one more client queues for it
    /// (`WAIT` without a deadline in the run), so that the keyspace operation that follows
    /// meets waiters.
    fn maybe_queue_waiter(&mut self, k: usize, p: f64) {
        let Some(l) = self.model.keys[k].lock.as_ref() else {
            return;
        };
        if self.model.keys[k].pending.is_some() || l.queue.len() >= 4 || !self.rng.gen_bool(p) {
            return;
        }
        let shared = !l.exclusive();
        let candidates: Vec<&[u8]> = TOKENS
            .iter()
            .copied()
            .filter(|t| l.hold(t).is_none() && !self.model.queued(k, t))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let t = candidates[self.rng.gen_range(0..candidates.len())].to_vec();
        // On a shared lock mostly an exclusive request, which queues (a shared one may
        // join the holders at once).
        let want = if shared && self.rng.gen_bool(0.7) {
            Want::Exclusive
        } else {
            self.pick_want()
        };
        self.op_acquire_wait(k, t, want, false);
    }

    /// A queue of mixed kinds on held key `k` (not pending), for the grants that follow:
    /// on a shared lock an exclusive request first (which holds back the shared ones
    /// queued behind it), on an exclusive lock shared requests (granted together when it
    /// ends or downgrades), some with a `LIMIT`, perhaps an exclusive one among them. A
    /// quarter of the time the first waiter has a `WAIT` that runs out (600 ms, ample
    /// time to queue the others behind it): its key is pending, and when it leaves, those
    /// behind it that the holds admit are granted at that instant.
    fn op_contend(&mut self, k: usize) {
        let Some(l) = self.model.keys[k].lock.as_ref() else {
            return self.op_info(k);
        };
        let shared = !l.exclusive();
        let n = self.rng.gen_range(1..=3usize).min(4 - l.queue.len().min(4));
        let mut tokens: Vec<&[u8]> = TOKENS
            .iter()
            .copied()
            .filter(|t| l.hold(t).is_none() && !self.model.queued(k, t))
            .collect();
        tokens.shuffle(&mut self.rng);
        tokens.truncate(n);
        if tokens.is_empty() {
            return self.op_info(k);
        }
        self.counts.contends += 1;
        let short_first = self.rng.gen_bool(0.25);
        let started = Instant::now();
        for (i, t) in tokens.iter().enumerate() {
            let want = if (i == 0 && shared) || self.rng.gen_bool(0.2) {
                Want::Exclusive
            } else if self.rng.gen_bool(0.5) {
                Want::Shared(None)
            } else {
                Want::Shared(Some(self.rng.gen_range(1..=4)))
            };
            if i == 0 && short_first {
                self.op_acquire_wait_for(k, t.to_vec(), want, CONTEND_WAIT_MS);
            } else {
                self.op_acquire_wait(k, t.to_vec(), want, false);
            }
        }
        if short_first {
            let took = started.elapsed();
            ensure!(
                self,
                took < Duration::from_millis(CONTEND_WAIT_MS) - SLACK,
                "queueing {} waiters took {took:?}: too close to the first one's WAIT of \
                 {CONTEND_WAIT_MS} ms for the outcome not to depend on timing",
                tokens.len()
            );
        }
    }

    /// `maybe_queue_waiter` on one held key without a pending deadline, if there is one.
    fn maybe_queue_waiter_anywhere(&mut self, p: f64) {
        let k = self.pick_key(None, 0.0, 1.0);
        if let Some(k) = k {
            self.maybe_queue_waiter(k, p);
        }
    }

    /// The lock of `k` (with its waiters already answered) moves to `k2`, replacing what was
    /// there (whose waiters are answered null too). Fence history follows the value.
    fn move_lock(&mut self, k: usize, k2: usize, why: &str) -> usize {
        let n = self.answer_waiters_null(k, why) + self.answer_waiters_null(k2, why);
        let lock = self.model.keys[k].lock.take().unwrap();
        self.model.keys[k2].last_fence = Some(lock.fence);
        self.model.keys[k2].lock = Some(lock);
        n
    }

    /// `k2` gets a copy of `k`'s lock (holder, fence, lease; no waiters); `k2`'s previous
    /// waiters are answered null; `k` and its queue are unchanged.
    fn copy_lock(&mut self, k: usize, k2: usize, why: &str) -> usize {
        let n = self.answer_waiters_null(k2, why);
        let l = self.model.keys[k].lock.as_ref().unwrap();
        let copy = MLock {
            holds: l.holds.clone(),
            fence: l.fence,
            queue: VecDeque::new(),
        };
        if !l.queue.is_empty() {
            self.counts.copy_source_kept_waiters += 1;
        }
        self.model.keys[k2].last_fence = Some(copy.fence);
        self.model.keys[k2].lock = Some(copy);
        n
    }

    /// `RENAME k k2` / `RENAMENX k k2`.
    fn op_rename(&mut self, k: usize, k2: usize, nx: bool) {
        let cmd: &[u8] = if nx { b"RENAMENX" } else { b"RENAME" };
        let name = show(cmd);
        let src = self.model.keys[k].lock.is_some();
        let dst = self.model.keys[k2].lock.is_some();
        let r = self.try_call(&[cmd, KEYS[k].as_bytes(), KEYS[k2].as_bytes()]);
        let want: Result<Value, String> = if !src {
            Err("ERR no such key".into())
        } else if nx && dst {
            Ok(Value::Int(0))
        } else if nx {
            Ok(Value::Int(1))
        } else {
            Ok(Value::Okay)
        };
        self.note(format!(
            "{name} {} {} -> {r:?} (model {want:?}; source {src}, destination {dst})",
            KEYS[k], KEYS[k2]
        ));
        ensure!(
            self,
            r == want,
            "{name} {} {}: server {r:?}, model {want:?}",
            KEYS[k],
            KEYS[k2]
        );
        if !src {
            self.counts.rename_no_such_key += 1;
        } else if nx && dst {
            self.counts.renamenx_refused += 1;
        } else {
            let n = self.move_lock(k, k2, &name);
            if nx {
                self.counts.renamenx.add(n);
            } else {
                self.counts.rename.add(n);
            }
        }
        self.check_key(k);
        self.check_key(k2);
        self.check_settled();
    }

    /// `SWAPDB 0 1` and at once `SWAPDB 0 1` again (db 1 is empty): every lock comes back
    /// unchanged; every waiter (all are in db 0) is answered null at the first swap. Either
    /// pipelined, or with the waiters' replies read between the two swaps.
    fn op_swapdb(&mut self) {
        self.tick();
        // The variants take turns, so that a short run sees both.
        let pipelined = self.counts.swapdb.runs % 2 == 1;
        let mut n = 0;
        if pipelined {
            self.counts.swapdb_pipelined += 1;
            let r: redis::RedisResult<Vec<Value>> = redis::pipe()
                .cmd("SWAPDB")
                .arg(0)
                .arg(1)
                .cmd("SWAPDB")
                .arg(0)
                .arg(1)
                .query(&mut self.con);
            self.note(format!("SWAPDB 0 1; SWAPDB 0 1 (pipelined) -> {r:?}"));
            ensure!(
                self,
                matches!(&r, Ok(v) if v[..] == [Value::Okay, Value::Okay]),
                "SWAPDB 0 1 twice (pipelined) replied {r:?}"
            );
            for k in 0..KEYS.len() {
                n += self.answer_waiters_null(k, "SWAPDB");
            }
        } else {
            let (v, _, _) = self.call(&[b"SWAPDB", b"0", b"1"]);
            self.note(format!("SWAPDB 0 1 -> {v:?}"));
            ensure!(self, v == Value::Okay, "SWAPDB 0 1 replied {v:?}");
            for k in 0..KEYS.len() {
                n += self.answer_waiters_null(k, "SWAPDB");
            }
            let (v, _, _) = self.call(&[b"DBSIZE"]);
            ensure!(
                self,
                v == Value::Int(0),
                "DBSIZE {v:?} in db 0 between the swaps, expected 0"
            );
            let (v, _, _) = self.call(&[b"SWAPDB", b"0", b"1"]);
            self.note(format!("SWAPDB 0 1 (back) -> {v:?}"));
            ensure!(self, v == Value::Okay, "SWAPDB 0 1 (back) replied {v:?}");
        }
        self.counts.swapdb.add(n);
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    /// `FLUSHDB`, `FLUSHDB ASYNC` or `FLUSHALL ASYNC`: every lock gone, every waiter
    /// answered null at once.
    fn op_flush(&mut self) {
        self.tick();
        // The variants take turns, so that a short run sees all three.
        let which = (self.counts.flushdb.runs
            + self.counts.flushdb_async.runs
            + self.counts.flushall_async.runs)
            % 3;
        let args: &[&[u8]] = match which {
            0 => &[b"FLUSHDB"],
            1 => &[b"FLUSHDB", b"ASYNC"],
            _ => &[b"FLUSHALL", b"ASYNC"],
        };
        let name = args.iter().map(|a| show(a)).collect::<Vec<_>>().join(" ");
        let (v, _, _) = self.call(args);
        self.note(format!("{name} -> {v:?}"));
        ensure!(self, v == Value::Okay, "{name} replied {v:?}");
        let mut n = 0;
        for k in 0..KEYS.len() {
            n += self.answer_waiters_null(k, &name);
            self.model.keys[k].lock = None;
        }
        match which {
            0 => self.counts.flushdb.add(n),
            1 => self.counts.flushdb_async.add(n),
            _ => self.counts.flushall_async.add(n),
        }
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
    }

    /// `COPY k k2 REPLACE`, or `DUMP k` + `RESTORE k2 0 <payload> REPLACE`.
    fn op_copy(&mut self, k: usize, k2: usize, restore: bool) {
        let src = self.model.keys[k].lock.is_some();
        if restore {
            let (v, _, _) = self.call(&[b"DUMP", KEYS[k].as_bytes()]);
            let payload = match v {
                Value::BulkString(p) if src => p,
                Value::Nil if !src => {
                    self.note(format!("DUMP {} -> nil (model: missing)", KEYS[k]));
                    self.counts.copy_no_source += 1;
                    return;
                }
                other => self.fail(&format!(
                    "DUMP {}: server {other:?}, model exists={src}",
                    KEYS[k]
                )),
            };
            let r = self.try_call(&[b"RESTORE", KEYS[k2].as_bytes(), b"0", &payload, b"REPLACE"]);
            self.note(format!(
                "DUMP {} + RESTORE {} 0 <{} bytes> REPLACE -> {r:?}",
                KEYS[k],
                KEYS[k2],
                payload.len()
            ));
            ensure!(
                self,
                r == Ok(Value::Okay),
                "RESTORE {} 0 <dump of {}> REPLACE replied {r:?}",
                KEYS[k2],
                KEYS[k]
            );
            let n = self.copy_lock(k, k2, "RESTORE");
            self.counts.dump_restore.add(n);
        } else {
            let (v, _, _) =
                self.call(&[b"COPY", KEYS[k].as_bytes(), KEYS[k2].as_bytes(), b"REPLACE"]);
            self.note(format!(
                "COPY {} {} REPLACE -> {v:?} (model {})",
                KEYS[k], KEYS[k2], src as i64
            ));
            ensure!(
                self,
                v == Value::Int(src as i64),
                "COPY {} {} REPLACE replied {v:?}, model {}",
                KEYS[k],
                KEYS[k2],
                src as i64
            );
            if !src {
                self.counts.copy_no_source += 1;
            } else {
                let n = self.copy_lock(k, k2, "COPY");
                self.counts.copy.add(n);
            }
        }
        self.check_key(k);
        self.check_key(k2);
        self.check_settled();
    }

    /// An overwrite: `SET k v` (waiters answered null at once, read before the next
    /// command), then `DEL k`.
    fn op_set_del(&mut self, k: usize) {
        let (v, _, _) = self.call(&[b"SET", KEYS[k].as_bytes(), b"not a lock"]);
        self.note(format!("SET {} -> {v:?}", KEYS[k]));
        ensure!(self, v == Value::Okay, "SET {} replied {v:?}", KEYS[k]);
        let n = self.answer_waiters_null(k, "SET");
        self.model.keys[k].lock = None;
        let (v, _, _) = self.call(&[b"DEL", KEYS[k].as_bytes()]);
        self.note(format!("DEL {} -> {v:?}", KEYS[k]));
        ensure!(
            self,
            v == Value::Int(1),
            "DEL {} after SET replied {v:?}",
            KEYS[k]
        );
        self.counts.set_del.add(n);
        self.check_key(k);
        self.check_settled();
    }

    /// `PEXPIREAT k 1`: a time in the past deletes the key at once.
    fn op_pexpireat(&mut self, k: usize) {
        let existed = self.model.keys[k].lock.is_some();
        let (v, _, _) = self.call(&[b"PEXPIREAT", KEYS[k].as_bytes(), b"1"]);
        self.note(format!(
            "PEXPIREAT {} 1 -> {v:?} (model {})",
            KEYS[k], existed as i64
        ));
        ensure!(
            self,
            v == Value::Int(existed as i64),
            "PEXPIREAT {} 1 replied {v:?}, model {}",
            KEYS[k],
            existed as i64
        );
        if existed {
            let n = self.answer_waiters_null(k, "PEXPIREAT");
            self.model.keys[k].lock = None;
            self.counts.pexpireat.add(n);
        } else {
            self.counts.pexpireat_missing += 1;
        }
        self.check_key(k);
        self.check_settled();
    }

    // ------------------------------------------------------------------------- the run

    fn step(&mut self) {
        self.steps_since_crash += 1;
        if self.steps_since_crash > CRASH_GAP {
            self.op_crash();
            return;
        }
        let free = self.free_keys();
        if free.is_empty() {
            self.tick();
            return;
        }
        let k = free[self.rng.gen_range(0..free.len())];
        let roll = self.rng.gen_range(0..1060);
        match roll {
            0..=189 => {
                let t = self.pick_token(k);
                let want = self.pick_want();
                self.op_acquire(k, t, want, false)
            }
            190..=209 => {
                let t = self.pick_token(k);
                let want = self.pick_want();
                self.op_acquire(k, t, want, true)
            }
            210..=369 => {
                let short = roll >= 350;
                let t = self.pick_token(k);
                // One queue entry per token and key, and a bounded queue.
                let qlen = self.model.keys[k]
                    .lock
                    .as_ref()
                    .map_or(0, |l| l.queue.len());
                if self.model.queued(k, &t) || qlen >= 4 {
                    self.op_info(k)
                } else {
                    let want = self.pick_want();
                    self.op_acquire_wait(k, t, want, short)
                }
            }
            370..=529 => {
                let t = self.pick_token(k);
                self.op_release(k, t)
            }
            530..=609 => {
                let t = self.pick_token(k);
                self.op_extend(k, t, false)
            }
            610..=624 => {
                let t = self.pick_token(k);
                self.op_extend(k, t, true)
            }
            625..=729 => {
                let t = self.pick_token(k);
                self.op_fence(k, t)
            }
            730..=799 => self.op_info(k),
            800..=869 => self.op_holders(k),
            870..=889 => self.op_del(k),
            890..=919 => {
                let ws: Vec<usize> = self
                    .model
                    .waiters
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| {
                        w.as_ref()
                            .is_some_and(|w| self.model.keys[w.key].pending.is_none())
                    })
                    .map(|(i, _)| i)
                    .collect();
                if ws.is_empty() {
                    self.op_info(k)
                } else {
                    let w = ws[self.rng.gen_range(0..ws.len())];
                    self.op_disconnect(w)
                }
            }
            920..=959 => {
                self.counts.sleeps += 1;
                let ms = self.rng.gen_range(1..30);
                self.note(format!("sleep {ms} ms"));
                sleep(Duration::from_millis(ms));
            }
            960..=969 => self.tick(),
            970..=975 => self.op_restart(),
            976..=981 => self.op_reload(),
            982..=999 => match self.pick_key(None, 0.0, 1.0) {
                Some(k) => self.op_contend(k),
                None => self.op_info(k),
            },
            // Keyspace operations around lock keys.
            1000..=1014 => {
                let nx = self.rng.gen_bool(0.5);
                match self.pick_pair(nx) {
                    Some((k, k2)) => {
                        self.maybe_queue_waiter(k, 0.4);
                        self.maybe_queue_waiter(k2, 0.2);
                        self.op_rename(k, k2, nx)
                    }
                    None => self.op_info(k),
                }
            }
            1015..=1019 => {
                self.maybe_queue_waiter_anywhere(0.5);
                self.op_swapdb()
            }
            1020..=1025 => {
                self.maybe_queue_waiter_anywhere(0.5);
                self.op_flush()
            }
            1026..=1040 => match self.pick_pair(false) {
                Some((k, k2)) => {
                    self.maybe_queue_waiter(k, 0.3);
                    self.maybe_queue_waiter(k2, 0.3);
                    let restore = self.rng.gen_bool(0.5);
                    self.op_copy(k, k2, restore)
                }
                None => self.op_info(k),
            },
            1041..=1048 => {
                let k = self.pick_key(None, 0.6, 0.5).unwrap_or(k);
                self.maybe_queue_waiter(k, 0.3);
                self.op_set_del(k)
            }
            1049..=1056 => {
                let k = self.pick_key(None, 0.6, 0.5).unwrap_or(k);
                self.maybe_queue_waiter(k, 0.3);
                self.op_pexpireat(k)
            }
            _ => self.op_crash(),
        }
    }

    fn finish(&mut self) {
        self.tick();
        self.note("final state".into());
        for k in 0..KEYS.len() {
            self.check_key(k);
        }
        self.check_totals();
        // Drain: every holder releases, the earliest hold first; each queue is served in
        // order to the end.
        for (k, key) in KEYS.iter().enumerate() {
            while let Some(h) = self.model.keys[k]
                .lock
                .as_ref()
                .map(|l| l.holds[0].token.clone())
            {
                self.op_release(k, h);
                self.check_key(k);
            }
            let (v, _, _) = self.call(&[b"EXISTS", key.as_bytes()]);
            ensure!(self, v == Value::Int(0), "{key} left after draining");
        }
        self.check_totals();
        self.server.assert_alive();
    }
}

#[test]
fn model_agrees_with_the_server() {
    let seed = env_u64("MODEL_SEED", DEFAULT_SEED);
    let ops = env_u64("MODEL_OPS", DEFAULT_OPS);
    println!("model: MODEL_SEED={seed} MODEL_OPS={ops}");
    let server = Server::start(Opts::new().appendonly());
    let con = server.conn();
    let mut d = Driver {
        server,
        con,
        model: Model::new(KEYS.len()),
        socks: Vec::new(),
        rng: StdRng::seed_from_u64(seed),
        seed,
        log: Vec::new(),
        counts: Counts::default(),
        steps_since_crash: 0,
    };
    let t0 = Instant::now();
    for _ in 0..ops {
        d.step();
    }
    d.finish();
    d.counts.above_crash_floor = d.model.above_crash_floor;
    println!(
        "model: {ops} ops in {:.1?}, disagreements: 0; {:?}",
        t0.elapsed(),
        d.counts
    );
    assert!(
        d.counts.restarts > 0 && d.counts.reloads > 0 && d.counts.grants > 0,
        "the run should exercise restarts, reloads and grants: {:?}",
        d.counts
    );
    if ops >= DEFAULT_OPS {
        // A full-length run meets every keyspace operation, each group also with waiters.
        let c = &d.counts;
        let groups: [(&str, &[Tally]); 6] = [
            ("RENAME/RENAMENX", &[c.rename, c.renamenx]),
            ("SWAPDB", &[c.swapdb]),
            ("FLUSH", &[c.flushdb, c.flushdb_async, c.flushall_async]),
            ("COPY/RESTORE", &[c.copy, c.dump_restore]),
            ("SET+DEL", &[c.set_del]),
            ("PEXPIREAT", &[c.pexpireat]),
        ];
        for (name, tallies) in groups {
            assert!(
                tallies.iter().all(|t| t.runs > 0) && tallies.iter().any(|t| t.with_waiters > 0),
                "the run should exercise {name}, also with waiters queued: {:?}",
                d.counts
            );
        }
        assert!(
            c.crashes >= 5
                && c.crash_first_fresh > 0
                && c.crash_lapsed > 0
                && c.crash_waiters_dropped > 0
                && c.crash_two_key_bursts > 0
                && c.crash_parallel_bursts > 0,
            "the run should crash the server several times after fence bursts, also with a \
             fresh key taken after the restart, a lease lapsing while it is down, waiters \
             dropped, a burst on two keys and one on two connections: {:?}",
            d.counts
        );
        assert!(
            c.joins > 0
                && c.renewals_over_limit > 0
                && c.downgrades > 0
                && c.downgrade_grants > 0
                && c.upgrades_refused > 0
                && c.limit_refused > 0
                && c.held_back > 0
                && c.group_grants > 0
                && c.withdraw_grants > 0
                && c.shared_lease_ends > 0
                && c.max_holders >= 3,
            "the run should exercise shared holds: joins, a renewal past its LIMIT, downgrades \
             that grant waiters, refused upgrades, LIMIT refusals, shared requests held back by \
             a queue, several waiters granted at once, waiters granted when one before them \
             left, a shared lease ending next to other holds, three holders or more: {:?}",
            d.counts
        );
        assert!(
            c.rename_no_such_key > 0 && c.renamenx_refused > 0 && c.copy_source_kept_waiters > 0,
            "the run should exercise RENAME of a missing key, RENAMENX onto a lock and COPY \
             of a lock with waiters: {:?}",
            d.counts
        );
    }
}
