//! Seeded fuzzing of `RESTORE` with lock payloads (README guarantee 6: bad input costs
//! nothing), and checks that long fuzzed runs do not grow the server's `used_memory`.
//!
//! `cargo fuzz` needs a nightly toolchain, which this project does not use; these tests
//! generate inputs from a seeded RNG instead, so that any failure replays exactly:
//! `FUZZ_SEED=<n>` replays a run and `FUZZ_RESTORES=<n>` changes its length.
//!
//! A DUMP payload is the RDB encoding of one value, the 2-byte RDB version and a CRC-64
//! (Jones, little-endian) of everything before it. A lock is RDB type 7 (module, v2), the
//! 64-bit module type id (the type's name in the high 54 bits, its encoding version in the
//! low 10), then the values the module saved, each behind an opcode (5: string, 2: unsigned;
//! signed values are saved as unsigned), then the EOF opcode 0. Encoding version 2: token,
//! deadline in Unix ms, fence, and the Unix ms the value was saved at; on `RESTORE` the lease
//! is the time it had left then (deadline - saved_at), and more than ten years of it is
//! refused. Encoding version 1 (still loaded): token, absolute deadline, fence. A fence is
//! valid from 1 to 2^53-1.
//!
//! Every generated payload gets a correct CRC (unless a test means otherwise), so it reaches
//! the module's `rdb_load`. Every reply must be `OK` or an `ERR` error; an accepted value
//! must be a sane lock that behaves like one, with the lease the payload gives it; the server
//! must stay up; fences must stay positive and increasing; and after thousands of iterations
//! (with `FLUSHALL` between batches) `used_memory` must be where it was.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

const DEFAULT_SEED: u64 = 0x7265_7374_6f72;
const DEFAULT_RESTORES: u64 = 5_000;
const BATCH: u64 = 250;
/// How much the memory figure may grow over a run: a leak of one byte per iteration
/// exceeds it. (The servers run with `latency-tracking no`; see `Fuzz::new`.)
const MEMORY_NOISE: i64 = 4 * 1024;
/// A batch whose figure exceeds every earlier one by more than this is a "new high".
const NEW_HIGH: i64 = 1024;
/// New highs allowed in a run (a steady leak makes one after almost every batch).
const MAX_NEW_HIGHS: usize = 3;
/// A restored lease shorter than this is only watched until it ends: the checks that use the
/// lock could outlast it.
const SHORT_LEASE_MS: i64 = 200;
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ------------------------------------------------------------------------ DUMP encoding

/// `body` + the 2-byte RDB version + a correct CRC.
fn with_trailer(body: &[u8], version: [u8; 2]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// The widths an RDB length can be written in; any width that holds the value is valid.
#[derive(Clone, Copy, Debug)]
enum Width {
    Six,
    Fourteen,
    ThirtyTwo,
    SixtyFour,
}

fn enc_len(n: u64, w: Width) -> Vec<u8> {
    match w {
        Width::Six => vec![n as u8 & 0x3f],
        Width::Fourteen => vec![0x40 | ((n >> 8) as u8 & 0x3f), n as u8],
        Width::ThirtyTwo => {
            let mut v = vec![0x80];
            v.extend_from_slice(&(n as u32).to_be_bytes());
            v
        }
        Width::SixtyFour => {
            let mut v = vec![0x81];
            v.extend_from_slice(&n.to_be_bytes());
            v
        }
    }
}

fn min_width(n: u64) -> Width {
    if n < 1 << 6 {
        Width::Six
    } else if n < 1 << 14 {
        Width::Fourteen
    } else if n <= u32::MAX as u64 {
        Width::ThirtyTwo
    } else {
        Width::SixtyFour
    }
}

/// Any width that can hold `n`.
fn some_width(rng: &mut StdRng, n: u64) -> Width {
    const ALL: [Width; 4] = [
        Width::Six,
        Width::Fourteen,
        Width::ThirtyTwo,
        Width::SixtyFour,
    ];
    let from = match min_width(n) {
        Width::Six => 0,
        Width::Fourteen => 1,
        Width::ThirtyTwo => 2,
        Width::SixtyFour => 3,
    };
    ALL[rng.gen_range(from..ALL.len())]
}

/// Decodes an RDB length at `at`: (value, bytes used). `None` for the special encodings.
fn dec_len(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *b.get(at)?;
    match first >> 6 {
        0 => Some(((first & 0x3f) as u64, 1)),
        1 => Some(((((first & 0x3f) as u64) << 8) | *b.get(at + 1)? as u64, 2)),
        _ if first == 0x80 => Some((
            u32::from_be_bytes(b.get(at + 1..at + 5)?.try_into().ok()?) as u64,
            5,
        )),
        _ if first == 0x81 => Some((
            u64::from_be_bytes(b.get(at + 1..at + 9)?.try_into().ok()?),
            9,
        )),
        _ => None,
    }
}

const OP_EOF: u8 = 0;
const OP_UINT: u8 = 2;
const OP_STRING: u8 = 5;

/// The low bits of a module type id that hold the encoding version.
const ENCVER_MASK: u64 = 0x3ff;
/// The largest fence issued: 2^53-1.
const MAX_FENCE: u64 = (1 << 53) - 1;
/// The largest fence accepted from outside: 2^32 below the largest issued, so that one key
/// cannot leave the server without fences.
const TOP: u64 = MAX_FENCE - (1 << 32);
/// The longest lease a `RESTORE` may bring: ten years, in ms.
const MAX_LEFT_MS: i64 = 315_360_000_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A lock's saved fields, and how each is written.
#[derive(Clone, Debug)]
struct LockBody {
    /// The module type id, with the encoding version in its low 10 bits.
    module_id: u64,
    token: Vec<u8>,
    /// Unix ms, a signed value saved as unsigned.
    deadline: u64,
    fence: u64,
    /// The fourth field of encoding version 2: the Unix ms the value was saved at (signed).
    /// `None` writes the three fields of version 1.
    saved_at: Option<u64>,
    widths: [Width; 4],
}

/// What the module must do with a well-formed lock body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Refused,
    /// Loaded, with this lease.
    Loaded(Lease),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    /// Exactly this many ms left from the moment of the `RESTORE` (version 2).
    Left(i64),
    /// Until this absolute Unix ms (version 1).
    Until(i64),
}

impl LockBody {
    fn encver(&self) -> u64 {
        self.module_id & ENCVER_MASK
    }

    /// The same lock in the other encoding version's id and layout: version 1 drops the save
    /// time, version 2 adds `saved_at`.
    fn into_version(mut self, encver: u64, saved_at: Option<u64>) -> LockBody {
        self.module_id = (self.module_id & !ENCVER_MASK) | encver;
        self.saved_at = saved_at;
        self.widths[3] = min_width(saved_at.unwrap_or(0));
        self
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![7];
        b.extend(enc_len(self.module_id, Width::SixtyFour));
        b.push(OP_STRING);
        b.extend(enc_len(self.token.len() as u64, self.widths[0]));
        b.extend_from_slice(&self.token);
        b.push(OP_UINT);
        b.extend(enc_len(self.deadline, self.widths[1]));
        b.push(OP_UINT);
        b.extend(enc_len(self.fence, self.widths[2]));
        if let Some(saved_at) = self.saved_at {
            b.push(OP_UINT);
            b.extend(enc_len(saved_at, self.widths[3]));
        }
        b.push(OP_EOF);
        b
    }

    /// Parses a lock body as DUMP writes it; `None` if the token is written in one of the
    /// special encodings (an integer, or LZF-compressed), which this file does not decode.
    fn parse(b: &[u8]) -> Option<LockBody> {
        assert_eq!(b[0], 7, "RDB_TYPE_MODULE_2");
        let (module_id, n) = dec_len(b, 1).unwrap();
        assert_eq!(n, 9);
        let mut at = 10;
        assert_eq!(b[at], OP_STRING);
        let (len, n) = dec_len(b, at + 1)?;
        at += 1 + n;
        let token = b[at..at + len as usize].to_vec();
        at += len as usize;
        let mut uints = Vec::new();
        while b[at] == OP_UINT {
            let (v, n) = dec_len(b, at + 1).unwrap();
            uints.push(v);
            at += 1 + n;
        }
        assert_eq!(b[at], OP_EOF);
        assert_eq!(at + 1, b.len(), "trailing bytes in a lock body");
        let want = match module_id & ENCVER_MASK {
            1 => 2,
            2 => 3,
            v => panic!("DUMP wrote encoding version {v}"),
        };
        assert_eq!(
            uints.len(),
            want,
            "fields of a lock of version {module_id:#x}"
        );
        Some(LockBody {
            module_id,
            token,
            deadline: uints[0],
            fence: uints[1],
            saved_at: uints.get(2).copied(),
            widths: [
                min_width(len),
                min_width(uints[0]),
                min_width(uints[1]),
                min_width(uints.get(2).copied().unwrap_or(0)),
            ],
        })
    }

    /// What the module does with this lock, read at Unix ms `now`: it loads a token of 1 to
    /// 256 bytes, a fence of 1 to 2^53-1-2^32, and a lease no longer than the longest
    /// `lock.max-ttl` (ten years) could give; for version 2 the lease is `deadline - saved_at`
    /// (refused if that overflows), for version 1 it runs to the absolute `deadline`. Only a
    /// version's own layout loads. (Version 1's ten-year bound depends on the server's clock:
    /// the generators keep deadlines a day away from it.)
    fn expect(&self, now: i64) -> Expect {
        let sane = (1..=256).contains(&self.token.len()) && (1..=TOP).contains(&self.fence);
        let deadline = self.deadline as i64;
        let lease = match (self.encver(), self.saved_at) {
            (1, None) if deadline <= now + MAX_LEFT_MS => Some(Lease::Until(deadline)),
            (2, Some(saved_at)) => deadline
                .checked_sub(saved_at as i64)
                .filter(|left| *left <= MAX_LEFT_MS)
                .map(Lease::Left),
            _ => None,
        };
        match lease {
            Some(lease) if sane => Expect::Loaded(lease),
            _ => Expect::Refused,
        }
    }
}

/// What a real lock's DUMP looks like on this server.
struct Sample {
    body: Vec<u8>,
    version: [u8; 2],
    /// The module type id (with the encoding version in its low 10 bits).
    module_id: u64,
    /// The decoded fields, when the token is saved as a plain string.
    lock: Option<LockBody>,
}

fn sample(c: &mut redis::Connection, token: &[u8], ttl: u64) -> Sample {
    let key = "sample";
    cmd!(c, "DEL", key).unwrap();
    assert!(cmd!(c, "LOCK.ACQUIRE", key, token, ttl).is_ok_and(|v| matches!(v, Value::Int(_))));
    let p = match cmd!(c, "DUMP", key) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP: {other:?}"),
    };
    cmd!(c, "DEL", key).unwrap();
    let n = p.len();
    assert_eq!(
        crc64(&p[..n - 8]),
        u64::from_le_bytes(p[n - 8..].try_into().unwrap()),
        "this file's CRC-64 disagrees with the server's"
    );
    let body = p[..n - 10].to_vec();
    let lock = LockBody::parse(&body);
    if let Some(lock) = &lock {
        assert_eq!(lock.token, token);
        assert_eq!(lock.encode(), body, "re-encoding a parsed DUMP changes it");
    }
    Sample {
        module_id: dec_len(&body, 1).unwrap().0,
        body,
        version: [p[n - 10], p[n - 9]],
        lock,
    }
}

// -------------------------------------------------------------------------- the checks

#[derive(Default, Debug)]
struct Tally {
    restores: u64,
    accepted: u64,
    refused: u64,
    locks_exercised: u64,
}

/// One server under fuzz, and what was done to it.
struct Fuzz {
    server: Server,
    con: redis::Connection,
    tally: Tally,
    /// The last fence the probe key got: fences must stay positive and increasing, also
    /// after loads that were refused.
    probe_fence: i64,
    what: String,
}

impl Fuzz {
    fn new() -> Fuzz {
        // Native types get Redis's own deep checks, so that a random body that happens to
        // be a list or a hash cannot crash the server for reasons outside this module.
        // No per-command latency histograms: Redis allocates one (~24 KiB) the first time
        // each command runs, which would read as growth.
        let server = Server::start(Opts::new().extra(&[
            "--sanitize-dump-payload",
            "yes",
            "--latency-tracking",
            "no",
        ]));
        let con = server.conn();
        Fuzz {
            server,
            con,
            tally: Tally::default(),
            probe_fence: 0,
            what: String::new(),
        }
    }

    #[track_caller]
    fn fail(&mut self, msg: &str) -> ! {
        let alive = self.server.is_alive();
        panic!("{}: {msg} (server alive: {alive})", self.what)
    }

    /// Runs one `RESTORE` and checks what the server did with it; returns whether it was
    /// accepted. With `expect`, the outcome must be that one, and a loaded lock must have
    /// that lease.
    fn restore(&mut self, key: &str, payload: &[u8], expect: Option<Expect>) -> bool {
        self.tally.restores += 1;
        let sent = Instant::now();
        let r = cmd!(&mut self.con, "RESTORE", key, 0, payload, "REPLACE");
        let ok = match &r {
            Ok(Value::Okay) => true,
            Err(e) if e.starts_with("ERR ") => false,
            other => self.fail(&format!("RESTORE replied {other:?}")),
        };
        match expect {
            Some(Expect::Refused) if ok => self.fail("accepted, but the rules say it is refused"),
            Some(Expect::Loaded(_)) if !ok => {
                self.fail(&format!("refused ({r:?}), but the rules say it loads"))
            }
            _ => {}
        }
        if ok {
            self.tally.accepted += 1;
            let lease = match expect {
                Some(Expect::Loaded(lease)) => Some(lease),
                _ => None,
            };
            self.check_accepted(key, lease, sent);
        } else {
            self.tally.refused += 1;
            match cmd!(&mut self.con, "EXISTS", key) {
                Ok(Value::Int(0)) => {}
                other => self.fail(&format!("a refused RESTORE left the key: {other:?}")),
            }
        }
        self.check_probe();
        ok
    }

    /// Checks the lease of a restored lock (`None`: the lease had ended) against `lease`,
    /// the `RESTORE` having been sent at `sent`. A lease given as time left is exact: never
    /// more than it, never less than it minus the time the commands took. An absolute one is
    /// read against this machine's clock, which is the server's (100 ms of slack).
    fn check_lease(&mut self, got: &Option<LockInfo>, lease: Lease, sent: Instant) {
        let took = sent.elapsed().as_millis() as i64 + 2;
        let (left, slack) = match lease {
            Lease::Left(left) => (left, 0),
            Lease::Until(deadline) => (deadline.saturating_sub(now_ms() - took), 100),
        };
        let ok = match got {
            // Ended: fine if it had no time left, or too little to outlast the commands.
            None => left <= took + slack,
            Some(i) => {
                i.ttl <= left.saturating_add(slack) && i.ttl >= left.saturating_sub(took + slack)
            }
        };
        if !ok {
            self.fail(&format!(
                "restored lease {lease:?}: LOCK.INFO {got:?} within {took} ms of the RESTORE"
            ));
        }
    }

    /// Whatever was accepted must be a sane lock that behaves like one (or a value of a
    /// native type, when the body was not a module value at all); with `lease`, the lease
    /// the payload gives it.
    fn check_accepted(&mut self, key: &str, lease: Option<Lease>, sent: Instant) {
        let ty = match cmd!(&mut self.con, "TYPE", key) {
            Ok(Value::SimpleString(s)) => s,
            other => self.fail(&format!("TYPE: {other:?}")),
        };
        if ty == "none" {
            // A lease that had ended (or ended at once): the sweep took the key away.
            if let Some(lease) = lease {
                self.check_lease(&None, lease, sent);
            }
            return;
        }
        if ty != "redislock" {
            if lease.is_some() {
                self.fail(&format!("a lock body restored as a {ty}"));
            }
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        }
        let got = match cmd!(&mut self.con, "LOCK.INFO", key) {
            Ok(v) => parse_info(&v),
            Err(e) => self.fail(&format!("LOCK.INFO of a restored lock: {e}")),
        };
        if let Some(lease) = lease {
            self.check_lease(&got, lease, sent);
        }
        let Some(i) = got else {
            // A lease that ended before the restore: the key goes away.
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        };
        if (0..SHORT_LEASE_MS).contains(&i.ttl) {
            // Too short to outlast the checks below: it must end on its own, on time.
            let c = &mut self.con;
            if !wait_until(Duration::from_secs(5), || !exists(c, key)) {
                self.fail(&format!("a restored {} ms lease did not end", i.ttl));
            }
            return;
        }
        self.tally.locks_exercised += 1;
        let Some(holder) = i.holder.clone() else {
            self.fail(&format!("restored lock without a holder: {i:?}"));
        };
        if holder.is_empty()
            || holder.len() > 256
            || i.fence <= 0
            || i.fence as u64 > MAX_FENCE
            || i.ttl < 0
            || i.ttl > MAX_LEFT_MS
            || i.waiters != 0
        {
            self.fail(&format!("restored lock is not sane: {i:?}"));
        }
        let c = &mut self.con;
        let f = cmd!(c, "LOCK.FENCE", key, holder.as_slice());
        let f = match f {
            Ok(Value::Int(f)) if f > i.fence && f > self.probe_fence && f as u64 <= MAX_FENCE => f,
            other => self.fail(&format!(
                "LOCK.FENCE of a restored lock (fence {}, fences issued up to {}): {other:?}",
                i.fence, self.probe_fence
            )),
        };
        self.probe_fence = self.probe_fence.max(f);
        let c = &mut self.con;
        let checks = [
            (
                cmd!(c, "LOCK.ACQUIRE", key, "someone-else", 1000),
                Value::Nil,
            ),
            (
                cmd!(c, "LOCK.EXTEND", key, holder.as_slice(), 60_000),
                Value::Int(1),
            ),
            (
                cmd!(c, "LOCK.ACQUIRE", key, holder.as_slice(), 60_000),
                Value::Int(f),
            ),
        ];
        for (got, want) in checks {
            if got != Ok(want.clone()) {
                self.fail(&format!("restored lock: got {got:?}, want {want:?}"));
            }
        }
        // It dumps and restores again as the same lock, with the time it had left.
        let renewed = Instant::now();
        let c = &mut self.con;
        let again = match cmd!(c, "DUMP", key) {
            Ok(Value::BulkString(b)) => b,
            other => self.fail(&format!("DUMP of a restored lock: {other:?}")),
        };
        let c = &mut self.con;
        if cmd!(c, "RESTORE", "copy", 0, again.as_slice(), "REPLACE") != Ok(Value::Okay) {
            self.fail("a restored lock's own DUMP does not restore");
        }
        let copy = info(&mut self.con, "copy");
        if copy.as_ref().map(|c| (&c.holder, c.fence)) != Some((&Some(holder.clone()), f)) {
            self.fail(&format!("round trip changed the lock: {copy:?}"));
        }
        // DUMP rounds the deadline up and the save time down (to the millisecond): the copy
        // may hold up to 2 ms more than the lease had left, never less.
        let took = renewed.elapsed().as_millis() as i64 + 2;
        if copy
            .as_ref()
            .is_some_and(|c| c.ttl > 60_000 + 2 || c.ttl < 60_000 - took)
        {
            self.fail(&format!(
                "round trip of a 60000 ms lease: {copy:?} within {took} ms"
            ));
        }
        let c = &mut self.con;
        let r = cmd!(c, "LOCK.RELEASE", key, holder.as_slice());
        if r != Ok(Value::Int(1)) {
            self.fail(&format!(
                "LOCK.RELEASE of a restored lock by its holder: {r:?}"
            ));
        }
        let c = &mut self.con;
        cmd!(c, "DEL", key, "copy").unwrap();
    }

    /// Blocks `n` clients in `LOCK.ACQUIRE … WAIT` at once, then answers them all (a `DEL`
    /// of the key answers its waiters null) and closes them.
    fn saturate_temp_clients(&mut self, n: usize) {
        assert!(acquire(&mut self.con, "saturate", "holder", 60_000).is_some());
        let mut socks: Vec<TcpStream> = (0..n)
            .map(|i| {
                let mut s = TcpStream::connect(("127.0.0.1", self.server.port)).unwrap();
                let tok = format!("w{i:02}");
                let req = format!(
                    "*6\r\n$12\r\nLOCK.ACQUIRE\r\n$8\r\nsaturate\r\n$3\r\n{tok}\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n"
                );
                s.write_all(req.as_bytes()).unwrap();
                s
            })
            .collect();
        let con = &mut self.con;
        assert!(
            wait_until(Duration::from_secs(30), || {
                info(con, "saturate").is_some_and(|i| i.waiters == n as i64)
            }),
            "{n} waiters did not queue"
        );
        cmd!(&mut self.con, "DEL", "saturate").unwrap();
        for s in socks.iter_mut() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"$-1\r\n", "a waiter of a deleted key is answered null");
        }
    }

    /// A fresh key still gets a positive fence above every fence seen so far.
    fn check_probe(&mut self) {
        let f = acquire(&mut self.con, "probe", "probe-token", 60_000);
        match f {
            Some(f) if f > self.probe_fence => self.probe_fence = f,
            other => self.fail(&format!(
                "fresh key's fence {other:?}, but {} was issued before",
                self.probe_fence
            )),
        }
        assert_eq!(release(&mut self.con, "probe", "probe-token"), 1);
    }

    /// `used_memory` less what the clients' buffers take (`mem_clients_normal`), which
    /// varies with the size of the last payload and is not the module's.
    fn used_memory(&mut self) -> i64 {
        // Both fields from one INFO reply, so that they describe the same instant.
        let text: String = redis::cmd("INFO")
            .arg("memory")
            .query(&mut self.con)
            .expect("INFO memory");
        let field = |f: &str| -> i64 {
            let prefix = format!("{f}:");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
                .unwrap_or_else(|| panic!("INFO memory has no {f}"))
        };
        field("used_memory") - field("mem_clients_normal")
    }

    /// Waits until the server counts `n` connected clients (it has seen every hang-up).
    fn await_clients(&mut self, n: usize) {
        let want = n.to_string();
        let mut clients = None;
        let con = &mut self.con;
        // (Closed connections take a moment to be noticed, longer under valgrind.)
        wait_until(Duration::from_secs(30), || {
            clients = info_field(con, "clients", "connected_clients");
            clients.as_deref() == Some(want.as_str())
        });
        if clients.as_deref() != Some(want.as_str()) {
            let list = cmd!(&mut self.con, "CLIENT", "LIST");
            panic!("{clients:?} clients connected, expected {n}: {list:?}");
        }
    }

    /// `FLUSHALL`, then the memory figure once the server is idle again.
    fn settled_memory(&mut self) -> i64 {
        assert_eq!(cmd!(&mut self.con, "FLUSHALL"), Ok(Value::Okay));
        self.await_clients(1);
        self.used_memory()
    }

    /// The settled memory figure once it holds still for over a second: the server frees
    /// some start-up allocations on its first cron runs (module temp clients beyond the
    /// pool's 8 spare ones).
    fn stable_memory(&mut self) -> i64 {
        let mut last = self.settled_memory();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(1_200));
            let now = self.settled_memory();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    /// Runs `iters` iterations of `one` in batches of `BATCH` with `FLUSHALL` between them;
    /// the first batch warms up. Then the memory figure must end within `MEMORY_NOISE` of
    /// where it started, and make at most `MAX_NEW_HIGHS` new highs on the way (a leak, even
    /// of a few bytes on some iterations, makes one after almost every batch).
    fn run(&mut self, iters: u64, mut one: impl FnMut(&mut Fuzz, u64)) {
        let t0 = Instant::now();
        let warm = BATCH.min(iters);
        for i in 0..warm {
            one(self, i);
        }
        let before = self.stable_memory();
        let mut figures = vec![before];
        let mut i = warm;
        while i < iters {
            let end = (i + BATCH).min(iters);
            while i < end {
                one(self, i);
                i += 1;
            }
            figures.push(self.settled_memory());
            self.server.assert_alive();
        }
        let mut after = *figures.last().unwrap();
        if after - before > MEMORY_NOISE {
            // Spare module temp clients beyond 8 are freed by the next cron runs.
            after = self.stable_memory();
            figures.push(after);
        }
        let new_highs = (1..figures.len())
            .filter(|&n| figures[n] > figures[..n].iter().max().unwrap() + NEW_HIGH)
            .count();
        println!(
            "  {iters} iterations in {:.1?}: {:?}\n  memory (used_memory - mem_clients_normal) \
             after each batch of {BATCH}: {figures:?}: {before} -> {after} ({:+} bytes, \
             {new_highs} new highs)",
            t0.elapsed(),
            self.tally,
            after - before
        );
        assert!(
            after - before <= MEMORY_NOISE && new_highs <= MAX_NEW_HIGHS,
            "memory grew by {} bytes over {} iterations, with {new_highs} new highs: {figures:?}",
            after - before,
            iters - warm
        );
        self.server.assert_alive();
        assert_eq!(
            cmd!(&mut self.con, "PING"),
            Ok(Value::SimpleString("PONG".into()))
        );
    }
}

// ----------------------------------------------------------------------- the generators

fn interesting_u64(rng: &mut StdRng) -> u64 {
    let now_ms = now_ms() as u64;
    match rng.gen_range(0..16) {
        0 => 0,
        1 => 1,
        2 => rng.gen_range(0..64),
        3 => now_ms + rng.gen_range(0..120_000),
        4 => now_ms.saturating_sub(rng.gen_range(0..120_000)),
        5 => (now_ms << 11) + rng.gen_range(0..1_000_000),
        6 => i64::MAX as u64,
        7 => (i64::MAX as u64) + 1,
        8 => u64::MAX,
        9 => (-1i64) as u64,
        10 => 1 << rng.gen_range(0..64),
        11 => MAX_FENCE + rng.gen_range(1..=3),
        12 => ((now_ms + rng.gen_range(0..7_200_000)) << 11) + rng.gen_range(0..2048),
        13 => (now_ms as i64 + [-1, 1][rng.gen_range(0..2)] * 3_600_000) as u64,
        _ => rng.gen(),
    }
}

/// A fence for a field edit. Never a valid one within 2^24 of 2^53-1: a lock restored with
/// such a fence leaves the server no fence to issue, for any key, ever after (the high-water
/// mark never goes down), which would end the run's checks; the edge has its own test
/// (`restored_fences_at_the_top_of_the_range`).
fn interesting_fence(rng: &mut StdRng) -> u64 {
    let f = interesting_u64(rng);
    if (MAX_FENCE - (1 << 24)..=MAX_FENCE).contains(&f) {
        MAX_FENCE + 1
    } else {
        f
    }
}

/// A lease as deadline - saved_at, around the edges of what `RESTORE` accepts.
fn interesting_left(rng: &mut StdRng) -> i64 {
    match rng.gen_range(0..14) {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => rng.gen_range(1..120_000),
        4 => -rng.gen_range(1..120_000),
        5 => MAX_LEFT_MS,
        6 => MAX_LEFT_MS + 1,
        7 => MAX_LEFT_MS - rng.gen_range(1..1_000_000),
        8 => MAX_LEFT_MS + rng.gen_range(1..1_000_000),
        9 => i64::MAX,
        10 => i64::MIN,
        11 => -MAX_LEFT_MS,
        12 => 20_000,
        _ => rng.gen(),
    }
}

/// An absolute version-1 deadline, kept a day away from the ten-year bound (which moves
/// with the clock).
fn interesting_v1_deadline(rng: &mut StdRng) -> u64 {
    let now = now_ms();
    let d = match rng.gen_range(0..8) {
        0 => now + rng.gen_range(1..120_000),
        1 => now - rng.gen_range(0..120_000),
        2 => now + MAX_LEFT_MS - 86_400_000,
        3 => now + MAX_LEFT_MS + 86_400_000,
        4 => now - 3_600_000 + 20_000,
        _ => interesting_u64(rng) as i64,
    };
    let edge = now + MAX_LEFT_MS;
    if (edge - 86_400_000 + 1..edge + 86_400_000).contains(&d) {
        (edge + 86_400_000) as u64
    } else {
        d as u64
    }
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.gen()).collect()
}

/// One module value item: an opcode and a plausible (or not) value.
fn random_item(rng: &mut StdRng, out: &mut Vec<u8>) {
    let op = match rng.gen_range(0..10) {
        0..=3 => OP_STRING,
        4..=7 => OP_UINT,
        8 => rng.gen_range(0..=6),
        _ => rng.gen(),
    };
    random_item_of(rng, out, op);
}

fn random_item_of(rng: &mut StdRng, out: &mut Vec<u8>, op: u8) {
    out.push(op);
    match op {
        OP_STRING => {
            let len: u64 = match rng.gen_range(0..8) {
                0 => 0,
                1 => 256,
                2 => 257,
                3 => rng.gen_range(1..64),
                4 => rng.gen_range(64..400),
                5 => interesting_u64(rng),
                _ => rng.gen_range(1..40),
            };
            if rng.gen_bool(0.1) {
                // The special encodings: integer-as-string and LZF.
                out.push(0xc0 | rng.gen_range(0..4));
                out.extend(random_bytes(rng, 12));
                return;
            }
            let w = some_width(rng, len);
            out.extend(enc_len(len, w));
            let have = if rng.gen_bool(0.85) {
                (len as usize).min(400)
            } else {
                rng.gen_range(0..=(len as usize).min(400))
            };
            out.extend((0..have).map(|_| rng.gen::<u8>()));
        }
        OP_UINT | 1 => {
            let v = interesting_u64(rng);
            let w = some_width(rng, v);
            out.extend(enc_len(v, w));
        }
        3 => out.extend_from_slice(&rng.gen::<f32>().to_le_bytes()),
        4 => out.extend_from_slice(&rng.gen::<f64>().to_le_bytes()),
        _ => out.extend(random_bytes(rng, 8)),
    }
}

/// (a) A random body behind a correct trailer.
fn random_body(rng: &mut StdRng, s: &Sample) -> Vec<u8> {
    let id = s.module_id;
    let mut b = Vec::new();
    match rng.gen_range(0..20) {
        // Shaped like a lock (string, then two or three unsigned values, EOF) with random
        // values, under the id of encoding version 2 or 1.
        0..=4 => {
            b.push(7);
            let id = if rng.gen_bool(0.3) {
                (id & !ENCVER_MASK) | 1
            } else {
                id
            };
            b.extend(enc_len(id, Width::SixtyFour));
            random_item_of(rng, &mut b, OP_STRING);
            for _ in 0..rng.gen_range(2..=3) {
                random_item_of(rng, &mut b, OP_UINT);
            }
            if rng.gen_bool(0.9) {
                b.push(OP_EOF);
            }
        }
        // The lock's own type, then module items in random order and number.
        5..=11 => {
            b.push(7);
            b.extend(enc_len(id, Width::SixtyFour));
            for _ in 0..rng.gen_range(0..6) {
                random_item(rng, &mut b);
            }
            if rng.gen_bool(0.7) {
                b.push(OP_EOF);
            }
            if rng.gen_bool(0.1) {
                b.extend(random_bytes(rng, 16));
            }
        }
        // The lock's own type, then raw bytes.
        12..=14 => {
            b.push(7);
            b.extend(enc_len(id, Width::SixtyFour));
            b.extend(random_bytes(rng, 100));
        }
        // RDB_TYPE_MODULE (v1, no opcodes), with the lock's id.
        15..=16 => {
            b.push(6);
            b.extend(enc_len(id, Width::SixtyFour));
            b.extend(random_bytes(rng, 60));
        }
        // An unknown module id (another encoding version of this type, or random).
        17 => {
            b.push(7);
            let other = if rng.gen_bool(0.5) {
                (id & !ENCVER_MASK) | rng.gen_range(0..1024)
            } else {
                rng.gen()
            };
            b.extend(enc_len(other, Width::SixtyFour));
            b.extend(random_bytes(rng, 40));
        }
        // Anything at all.
        _ => b.extend(random_bytes(rng, 80)),
    }
    b
}

/// (b) A real lock's DUMP, mutated: field edits (values, encoding versions, layouts),
/// bit flips, byte sets, truncations, insertions, deletions. Returns the body and, for pure
/// field edits, what the rules say the module does with it.
fn mutated_body(rng: &mut StdRng, s: &Sample) -> (Vec<u8>, Option<Expect>) {
    if let Some(mut l) = s.lock.clone().filter(|_| rng.gen_bool(0.4)) {
        // A well-formed lock with edited fields: the outcome is known.
        for _ in 0..rng.gen_range(1..=2) {
            match rng.gen_range(0..11) {
                0 => {
                    l.token = match rng.gen_range(0..6) {
                        0 => Vec::new(),
                        1 => vec![b'x'; 256],
                        2 => vec![b'x'; 257],
                        3 => random_bytes(rng, 300),
                        _ => {
                            let n = rng.gen_range(1..=256);
                            (0..n).map(|_| rng.gen()).collect()
                        }
                    }
                }
                1 => l.deadline = interesting_u64(rng),
                2 => l.fence = interesting_fence(rng),
                3 if l.saved_at.is_some() => l.saved_at = Some(interesting_u64(rng)),
                // A lease of some length, saved at some time (an hour away, say).
                4 if l.saved_at.is_some() => {
                    let saved_at = if rng.gen_bool(0.5) {
                        interesting_u64(rng)
                    } else {
                        l.saved_at.unwrap()
                    };
                    l.saved_at = Some(saved_at);
                    l.deadline = (saved_at as i64).wrapping_add(interesting_left(rng)) as u64;
                }
                // deadline - saved_at overflows.
                5 if l.saved_at.is_some() => {
                    let (d, at) =
                        [(i64::MAX, -1), (i64::MIN, 1), (i64::MAX, i64::MIN)][rng.gen_range(0..3)];
                    l.deadline = d as u64;
                    l.saved_at = Some(at as u64);
                }
                // Version 1: three fields, an absolute deadline.
                6 => {
                    l = l.into_version(1, None);
                    l.deadline = interesting_v1_deadline(rng);
                }
                // A version's id with the other version's layout.
                7 => {
                    l = match l.saved_at {
                        Some(at) => l.into_version(1, Some(at)),
                        None => l.into_version(2, None),
                    }
                }
                // An encoding version this module never wrote, with either layout.
                8 => {
                    let v = [0, 3, 4, 1023, rng.gen_range(3..1024)][rng.gen_range(0..5)];
                    let at = l.saved_at.or(Some(now_ms() as u64)).filter(|_| rng.gen());
                    l = l.into_version(v, at);
                }
                _ => {}
            }
        }
        let lens = [
            l.token.len() as u64,
            l.deadline,
            l.fence,
            l.saved_at.unwrap_or(0),
        ];
        for (w, n) in l.widths.iter_mut().zip(lens) {
            *w = some_width(rng, n);
        }
        return (l.encode(), Some(l.expect(now_ms())));
    }
    let mut b = s.body.clone();
    for _ in 0..rng.gen_range(1..=3) {
        if b.is_empty() {
            break;
        }
        let i = rng.gen_range(0..b.len());
        match rng.gen_range(0..7) {
            0 => b[i] ^= 1 << rng.gen_range(0..8),
            1 => {
                b[i] = [0x00, 0x01, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xc0, 0xc3, 0xff]
                    [rng.gen_range(0..10)]
            }
            2 => b.truncate(i),
            3 => {
                let extra = random_bytes(rng, 12);
                b.splice(i..i, extra);
            }
            4 => {
                let end = rng.gen_range(i..=b.len().min(i + 12));
                b.drain(i..end);
            }
            5 if b.len() > 11 => {
                // A length field: the token's, written as some other value.
                let v = interesting_u64(rng) % 1024;
                let (_, n) = dec_len(&b, 11).unwrap_or((0, 1));
                let w = some_width(rng, v);
                b.splice(11..(11 + n).min(b.len()), enc_len(v, w));
            }
            _ => {
                // Duplicate a slice.
                let end = rng.gen_range(i..=b.len().min(i + 12));
                let dup = b[i..end].to_vec();
                b.splice(end..end, dup);
            }
        }
    }
    (b, None)
}

fn samples(c: &mut redis::Connection) -> Vec<Sample> {
    // Random bytes do not compress, so they are saved as plain strings; the last two are
    // saved as an integer and LZF-compressed, and are only mutated byte-wise.
    let mut rng = StdRng::seed_from_u64(7);
    let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.gen()).collect() };
    let mut v = Vec::new();
    for (token, ttl) in [
        (b"t".to_vec(), 60_000),
        (b"tok".to_vec(), 1),
        (noise(36), 60_000),
        (noise(63), 60_000),
        (noise(64), 60_000),
        (noise(256), 60_000),
        (b"12345".to_vec(), 60_000),
        (vec![b'y'; 200], 60_000),
    ] {
        v.push(sample(c, &token, ttl));
    }
    assert!(v[..6].iter().all(|s| s.lock.is_some()));
    assert!(
        v[6..].iter().all(|s| s.lock.is_none()),
        "integer and LZF tokens"
    );
    v
}

// ------------------------------------------------------------------------------ the tests

#[test]
fn restore_of_random_bodies_with_a_valid_checksum() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (random bodies): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut f = Fuzz::new();
    let s = samples(&mut f.con);
    f.run(iters, |f, i| {
        let body = random_body(&mut rng, &s[0]);
        let version = if rng.gen_bool(0.95) {
            s[0].version
        } else {
            rng.gen()
        };
        f.what = format!("random body #{i} {body:02x?} version {version:02x?}");
        f.restore("k", &with_trailer(&body, version), None);
    });
    assert!(f.tally.refused > 0);
}

#[test]
fn restore_of_mutated_lock_dumps() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (mutated DUMPs): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5a5a);
    let mut f = Fuzz::new();
    let samples = samples(&mut f.con);
    let mut known = (0u64, 0u64, 0u64);
    f.run(iters, |f, i| {
        let s = &samples[rng.gen_range(0..samples.len())];
        let (body, expect) = mutated_body(&mut rng, s);
        let keep_crc = rng.gen_bool(0.03) && body != s.body;
        let payload = if keep_crc {
            // The original trailer on a changed body: the checksum must catch it.
            let mut p = body.clone();
            p.extend_from_slice(&s.version);
            let mut orig = s.body.clone();
            orig.extend_from_slice(&s.version);
            p.extend_from_slice(&crc64(&orig).to_le_bytes());
            p
        } else {
            with_trailer(&body, s.version)
        };
        f.what = format!("mutation #{i} {body:02x?} (expect {expect:?}, stale crc {keep_crc})");
        let expect = expect.filter(|_| !keep_crc);
        let ok = f.restore("k", &payload, expect);
        if keep_crc && ok {
            f.fail("a payload with a wrong checksum was accepted");
        }
        if let Some(want) = expect {
            known.0 += 1;
            if let Expect::Loaded(lease) = want {
                known.1 += 1;
                known.2 += matches!(lease, Lease::Until(_)) as u64;
            }
        }
    });
    println!(
        "  field edits with a known outcome: {} ({} loadable, {} of them version 1)",
        known.0, known.1, known.2
    );
    // About 30% of the mutations are field edits; of those, about 40% load.
    assert!(
        known.1 > iters / 20 && known.2 > iters / 200 && known.0 - known.1 > iters / 20,
        "too few field edits with a known outcome: {known:?}"
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0);
}

/// A sample lock (version 2) with its fence, deadline and save time set, as a payload.
fn payload_of(s: &Sample, edit: impl FnOnce(&mut LockBody)) -> Vec<u8> {
    let mut l = s.lock.clone().unwrap();
    edit(&mut l);
    let lens = [
        l.token.len() as u64,
        l.deadline,
        l.fence,
        l.saved_at.unwrap_or(0),
    ];
    for (w, n) in l.widths.iter_mut().zip(lens) {
        *w = min_width(n);
    }
    with_trailer(&l.encode(), s.version)
}

/// Fences are accepted from outside from 1 to 2^53-1-2^32: exact as doubles, with room for
/// 2^32 more above them (a key near 2^53 would leave the whole server without fences, since
/// the high-water mark is the server's). A `RESTORE` of a larger one is refused and leaves
/// nothing behind in the fence issuer; one at the top is accepted, later fences (on it and
/// on fresh keys) go on above it, and the dataset still saves and loads. (That no fence is
/// issued past 2^53-1 is a unit test of `src/fence.rs`: reaching it takes 2^32 fences.)
///
/// (Before: `rdb_load` accepted any fence up to 2^63-1, and the next fence was replied as a
/// negative integer.)
#[test]
fn restored_fences_at_the_top_of_the_range() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, b"tok", 60_000);
    let with_fence = |fence: u64| payload_of(&s, |l| l.fence = fence);
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    for fence in [
        TOP + 1,
        MAX_FENCE,
        MAX_FENCE + 1,
        1 << 62,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX,
        0,
    ] {
        let r = cmd!(c, "RESTORE", "k", 0, with_fence(fence).as_slice());
        assert_err_starts(&r, "ERR");
        assert!(
            !exists(c, "k"),
            "fence {fence}: a refused RESTORE left the key"
        );
        // Nothing of it lingers: a fresh key's fence is the next one at the clock floor.
        let n = acquire(c, "fresh", "a", 10_000).unwrap();
        let floor = |ms: i64| (ms as u64) << 11;
        assert!(
            n > last && (n as u64) < floor(now_ms() + 60_000),
            "after refusing fence {fence}: a fresh key got {n} (before: {last})"
        );
        last = n;
        assert_eq!(release(c, "fresh", "a"), 1);
    }
    // The top of the range: accepted, and later fences go on above it, on any key.
    let r = cmd!(c, "RESTORE", "k", 0, with_fence(TOP).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    assert_eq!(info(c, "k").unwrap().fence as u64, TOP);
    assert_eq!(fence(c, "k", "tok"), Some((TOP + 1) as i64));
    assert_eq!(
        acquire(c, "fresh", "a", 10_000),
        Some((TOP + 2) as i64),
        "a fresh key after the top"
    );
    assert_eq!(release(c, "k", "tok"), 1);
    assert_eq!(acquire(c, "k", "b", 10_000), Some((TOP + 3) as i64));
    // A lock at the top saves and loads again.
    let r = cmd!(c, "RESTORE", "top", 0, with_fence(TOP).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    assert_eq!(cmd!(c, "DEBUG", "RELOAD"), Ok(Value::Okay));
    let i = info(c, "top").expect("the lock at the top after DEBUG RELOAD");
    assert_eq!(i.fence as u64, TOP);
    let next = fence(c, "top", "tok").unwrap() as u64;
    assert!(
        next > TOP + 3 && next <= MAX_FENCE,
        "after DEBUG RELOAD the next fence is {next}"
    );
    assert_eq!(cmd!(c, "SAVE"), Ok(Value::Okay));
    f.server.assert_alive();
}

/// Encoding version 2 carries the lease as the time it had left when dumped
/// (deadline - saved_at), whatever the clock of the server that dumped it said: exactly that,
/// never more, never less than it less the time the commands took. Up to ten years of it;
/// more, or a difference that overflows, is refused.
#[test]
fn version_2_payloads_restore_with_the_time_they_had_left() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, b"tok", 60_000);
    let now = now_ms();
    let hour = 3_600_000;
    // (saved_at, deadline - saved_at, what the module does)
    let cases: [(i64, i64, Expect); 13] = [
        (now, 20_000, Expect::Loaded(Lease::Left(20_000))),
        (now - hour, 20_000, Expect::Loaded(Lease::Left(20_000))),
        (now + hour, 20_000, Expect::Loaded(Lease::Left(20_000))),
        (0, 20_000, Expect::Loaded(Lease::Left(20_000))),
        (
            now - hour,
            MAX_LEFT_MS,
            Expect::Loaded(Lease::Left(MAX_LEFT_MS)),
        ),
        (now + hour, MAX_LEFT_MS + 1, Expect::Refused),
        (now, 0, Expect::Loaded(Lease::Left(0))),
        (now + hour, -1, Expect::Loaded(Lease::Left(-1))),
        (now - hour, -20_000, Expect::Loaded(Lease::Left(-20_000))),
        (1, i64::MIN + 1, Expect::Loaded(Lease::Left(i64::MIN + 1))),
        (-1, i64::MAX, Expect::Refused),
        // deadline - saved_at overflows (deadline wraps to i64::MIN): i64::MIN - 1,
        // i64::MIN - i64::MAX.
        (1, i64::MAX, Expect::Refused),
        (i64::MAX, 1, Expect::Refused),
    ];
    for (saved_at, left, expect) in cases {
        // The overflowing ones wrap here, as the module reads them back.
        let deadline = saved_at.wrapping_add(left);
        f.what = format!("saved_at {saved_at}, deadline {deadline} (left {left})");
        let payload = payload_of(&s, |l| {
            l.saved_at = Some(saved_at as u64);
            l.deadline = deadline as u64;
        });
        assert_eq!(
            s.lock.clone().map(|mut l| {
                l.saved_at = Some(saved_at as u64);
                l.deadline = deadline as u64;
                l.expect(now)
            }),
            Some(expect),
            "{}: this file's rules",
            f.what
        );
        f.restore("k", &payload, Some(expect));
    }
    // The lease left ends on time, however far the dumping server's clock was.
    let payload = payload_of(&s, |l| {
        l.saved_at = Some((now - hour) as u64);
        l.deadline = (now - hour + 300) as u64;
    });
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut f.con, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let c = &mut f.con;
    assert!(wait_until(Duration::from_secs(5), || !exists(c, "k")));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(299) && took < Duration::from_millis(1_300),
        "a 300 ms lease restored from a clock an hour behind ended after {took:?}"
    );
}

/// A version-1 payload (three fields under the type id of encoding version 1, as the module
/// dumped them before version 2) still restores, its deadline read as absolute Unix ms; and
/// the lock then dumps as version 2.
#[test]
fn version_1_payloads_still_restore_with_an_absolute_deadline() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, b"tok", 60_000);
    let v1 = |deadline: i64, fence: u64| {
        let l = s.lock.clone().unwrap().into_version(1, None);
        let mut l = LockBody {
            deadline: deadline as u64,
            fence,
            ..l
        };
        l.widths = [
            min_width(l.token.len() as u64),
            min_width(l.deadline),
            min_width(l.fence),
            Width::Six,
        ];
        assert_eq!(l.encver(), 1);
        let body = l.encode();
        (with_trailer(&body, s.version), l)
    };
    let now = now_ms();
    let hour = 3_600_000;
    let fence0 = s.lock.as_ref().unwrap().fence;
    for (deadline, fence) in [
        (now + 20_000, fence0),
        (now + hour, fence0 + 5),
        // Read as time left it would be 20 s; as absolute it is long over.
        (now - hour + 20_000, fence0 + 6),
        (now - 1, fence0 + 7),
        (now + MAX_LEFT_MS - 86_400_000, fence0 + 8),
        (now + MAX_LEFT_MS + 86_400_000, fence0 + 9),
        (now + 20_000, MAX_FENCE + 1),
        (now + 20_000, 0),
    ] {
        let (payload, l) = v1(deadline, fence);
        let expect = l.expect(now_ms());
        f.what = format!("version 1, deadline {deadline} (now {now}), fence {fence}");
        f.restore("k", &payload, Some(expect));
    }
    // A version-1 lock dumps as version 2, with its lease as time left.
    let (payload, _) = v1(now_ms() + 30_000, fence0);
    let c = &mut f.con;
    assert_eq!(
        cmd!(c, "RESTORE", "v1", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let dumped = match cmd!(c, "DUMP", "v1") {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP: {other:?}"),
    };
    let l = LockBody::parse(&dumped[..dumped.len() - 10]).unwrap();
    assert_eq!(l.encver(), 2, "{l:?}");
    let left = l.deadline as i64 - l.saved_at.unwrap() as i64;
    assert!(
        (28_000..=30_001).contains(&left),
        "a version-1 lock with 30 s left dumped with {left} ms left: {l:?}"
    );
}

/// A long run of malformed and well-formed `LOCK.*` commands, `WAIT`s that time out and
/// waiters that hang up, with `FLUSHALL` between batches: `used_memory` must not grow.
#[test]
fn long_runs_of_bad_commands_and_waits_do_not_grow_memory() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES) * 2;
    println!("memory under commands: FUZZ_SEED={seed} iterations={iters}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0xa11c);
    let mut f = Fuzz::new();
    let port = f.server.port;
    // Redis 7.0 gives every blocked module client two "temp clients" (~17 KiB each with
    // their reply buffers, not counted as clients' memory) from a pool that keeps 8 spare
    // ones (modulesCron frees the rest once a second); a timer or server event borrows one
    // more for its context. The pool so grows and shrinks with the number of clients blocked
    // at once, which would read as memory coming and going. This run blocks at most 3 at
    // once (2 hangers and this connection): 6 temp clients and one for a timer stay within
    // the 8 spare ones, so the pool neither grows nor shrinks. Block 3 once first, so that it
    // holds its 8 before the first measurement.
    f.saturate_temp_clients(3);
    let mut hangers: Vec<TcpStream> = Vec::new();
    f.run(iters, |f, i| {
        let key = format!("k{}", rng.gen_range(0..4));
        let k = || -> Vec<u8> { key.clone().into_bytes() };
        let tok = format!("t{}", rng.gen_range(0..3));
        let t = || -> Vec<u8> { tok.clone().into_bytes() };
        // Waiters are connections: they must all be gone before the memory is measured at
        // the end of each batch (batches of `Fuzz::run`; the last one may be shorter).
        let last_of_batch = i % BATCH == BATCH - 1 || i + 1 == iters;
        let args: Vec<Vec<u8>> = match rng.gen_range(0..12) {
            0 => vec!["LOCK.ACQUIRE".into(), k(), t(), "60000".into()],
            1 => vec!["LOCK.ACQUIRE".into(), k(), t(), "5".into()],
            // A wait that times out (the holder is another token) or is granted at once.
            2 => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                t(),
                "60000".into(),
                "WAIT".into(),
                "1".into(),
            ],
            3 => vec!["LOCK.RELEASE".into(), k(), t()],
            4 => vec!["LOCK.EXTEND".into(), k(), t(), "30000".into()],
            5 => vec!["LOCK.FENCE".into(), k(), t()],
            6 => vec!["LOCK.INFO".into(), k()],
            7 => vec!["DEL".into(), k()],
            8 => {
                // A waiter on its own socket that hangs up before (or after) it is served.
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let req = format!(
                    "*6\r\n$12\r\nLOCK.ACQUIRE\r\n${}\r\n{key}\r\n$1\r\nw\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
                    key.len()
                );
                s.write_all(req.as_bytes()).unwrap();
                hangers.push(s);
                if hangers.len() > 2 || rng.gen_bool(0.3) {
                    hangers.remove(0);
                }
                if last_of_batch {
                    hangers.clear();
                }
                // The server has seen every hang-up before the next command, so that no
                // more than 3 clients are ever blocked at once (see above).
                f.await_clients(1 + hangers.len());
                return;
            }
            // Malformed: bad numbers, bad tokens, bad options, wrong arity.
            9 => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                vec![b'x'; rng.gen_range(255..300)],
                ["0", "-1", "1e3", "", "99999999999999999999"][rng.gen_range(0..5)].into(),
                ["WAIT", "NX", "wait"][rng.gen_range(0..3)].into(),
            ],
            10 => vec![
                ["LOCK.EXTEND", "LOCK.RELEASE", "LOCK.FENCE", "LOCK.INFO", "LOCK.APPLY"]
                    [rng.gen_range(0..5)]
                .into(),
                k(),
                random_bytes(&mut rng, 40),
                random_bytes(&mut rng, 8),
                random_bytes(&mut rng, 8),
                random_bytes(&mut rng, 8),
            ],
            _ => vec![
                "LOCK.ACQUIRE".into(),
                k(),
                Vec::new(),
                "100".into(),
                "WAIT".into(),
                "-5".into(),
            ],
        };
        f.what = format!("command #{i}");
        match run_raw(&mut f.con, &args) {
            Ok(_) => {}
            Err(e) if e.starts_with("ERR ") || e.starts_with("WRONGTYPE") => {}
            Err(e) => f.fail(&format!("{args:?}: {e}")),
        }
        if last_of_batch {
            hangers.clear();
            f.await_clients(1);
        }
    });
}
