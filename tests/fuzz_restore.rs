//! Seeded fuzzing of `RESTORE` with lock payloads (SPEC guarantee 6: bad input costs
//! nothing), and checks that long fuzzed runs do not grow the server's `used_memory`.
//!
//! `cargo fuzz` needs a nightly toolchain, which this project does not use; these tests
//! generate inputs from a seeded RNG instead, so that any failure replays exactly:
//! `FUZZ_SEED=<n>` replays a run and `FUZZ_RESTORES=<n>` changes its length.
//!
//! A DUMP payload is the RDB encoding of one value, the 2-byte RDB version and a CRC-64
//! (Jones, little-endian) of everything before it. A lock is RDB type 7 (module, v2), the
//! 64-bit module type id, then the values the module saved, each behind an opcode (5: string,
//! 2: unsigned), then the EOF opcode 0: token, absolute deadline in Unix ms, fence.
//!
//! Every generated payload gets a correct CRC (unless a test means otherwise), so it reaches
//! the module's `rdb_load`. Every reply must be `OK` or an `ERR` error; an accepted value
//! must be a sane lock that behaves like one; the server must stay up; fences must stay
//! positive and increasing; and after thousands of iterations (with `FLUSHALL` between
//! batches) `used_memory` must be where it was.

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

/// A lock's saved fields, and how each is written.
#[derive(Clone, Debug)]
struct LockBody {
    module_id: u64,
    token: Vec<u8>,
    deadline: u64,
    fence: u64,
    widths: [Width; 3],
}

impl LockBody {
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
        assert_eq!(b[at], OP_UINT);
        let (deadline, n) = dec_len(b, at + 1).unwrap();
        at += 1 + n;
        assert_eq!(b[at], OP_UINT);
        let (fence, n) = dec_len(b, at + 1).unwrap();
        at += 1 + n;
        assert_eq!(b[at], OP_EOF);
        assert_eq!(at + 1, b.len(), "trailing bytes in a lock body");
        Some(LockBody {
            module_id,
            token,
            deadline,
            fence,
            widths: [min_width(len), min_width(deadline), min_width(fence)],
        })
    }

    /// Whether the module loads this lock: a token of 1 to 256 bytes, a positive fence of at
    /// most 2^62 (room to issue larger ones), and a lease no longer than the longest
    /// `lock.max-ttl` (ten years) could give.
    fn valid(&self) -> bool {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        (1..=256).contains(&self.token.len())
            && (1..=1u64 << 62).contains(&self.fence)
            && (self.deadline as i64) <= now_ms + 315_360_000_000
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
    /// accepted.
    fn restore(&mut self, key: &str, payload: &[u8]) -> bool {
        self.tally.restores += 1;
        let r = cmd!(&mut self.con, "RESTORE", key, 0, payload, "REPLACE");
        let ok = match &r {
            Ok(Value::Okay) => true,
            Err(e) if e.starts_with("ERR ") => false,
            other => self.fail(&format!("RESTORE replied {other:?}")),
        };
        if ok {
            self.tally.accepted += 1;
            self.check_accepted(key);
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

    /// Whatever was accepted must be a sane lock that behaves like one (or a value of a
    /// native type, when the body was not a module value at all).
    fn check_accepted(&mut self, key: &str) {
        let ty = match cmd!(&mut self.con, "TYPE", key) {
            Ok(Value::SimpleString(s)) => s,
            other => self.fail(&format!("TYPE: {other:?}")),
        };
        if ty != "redislock" {
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        }
        let got = match cmd!(&mut self.con, "LOCK.INFO", key) {
            Ok(v) => parse_info(&v),
            Err(e) => self.fail(&format!("LOCK.INFO of a restored lock: {e}")),
        };
        let Some(i) = got else {
            // A lease that ended before the restore: the key goes away.
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        };
        self.tally.locks_exercised += 1;
        let Some(holder) = i.holder.clone() else {
            self.fail(&format!("restored lock without a holder: {i:?}"));
        };
        if holder.is_empty() || holder.len() > 256 || i.fence <= 0 || i.ttl < 0 || i.waiters != 0 {
            self.fail(&format!("restored lock is not sane: {i:?}"));
        }
        let c = &mut self.con;
        let f = cmd!(c, "LOCK.FENCE", key, holder.as_slice());
        let f = match f {
            Ok(Value::Int(f)) if f > i.fence => f,
            other => self.fail(&format!(
                "LOCK.FENCE of a restored lock (fence {}): {other:?}",
                i.fence
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
        // It dumps and restores again as the same lock.
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
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    match rng.gen_range(0..12) {
        0 => 0,
        1 => 1,
        2 => rng.gen_range(0..64),
        3 => now_ms + rng.gen_range(0..120_000),
        4 => now_ms.saturating_sub(rng.gen_range(0..120_000)),
        5 => (now_ms << 10) + rng.gen_range(0..1_000_000),
        6 => i64::MAX as u64,
        7 => (i64::MAX as u64) + 1,
        8 => u64::MAX,
        9 => (-1i64) as u64,
        10 => 1 << rng.gen_range(0..64),
        _ => rng.gen(),
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
        // Shaped like a lock (string, unsigned, unsigned, EOF) with random values.
        0..=4 => {
            b.push(7);
            b.extend(enc_len(id, Width::SixtyFour));
            random_item_of(rng, &mut b, OP_STRING);
            random_item_of(rng, &mut b, OP_UINT);
            random_item_of(rng, &mut b, OP_UINT);
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
                (id & !0x3ff) | rng.gen_range(0..1024)
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

/// (b) A real lock's DUMP, mutated: field edits, bit flips, byte sets, truncations,
/// insertions, deletions. Returns the body and, for pure field edits, whether the SPEC
/// says it must load.
fn mutated_body(rng: &mut StdRng, s: &Sample) -> (Vec<u8>, Option<bool>) {
    if let Some(mut l) = s.lock.clone().filter(|_| rng.gen_bool(0.4)) {
        // A well-formed lock with edited fields: the outcome is known.
        match rng.gen_range(0..5) {
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
            2 => l.fence = interesting_u64(rng),
            _ => {}
        }
        let lens = [l.token.len() as u64, l.deadline, l.fence];
        for (w, n) in l.widths.iter_mut().zip(lens) {
            *w = some_width(rng, n);
        }
        return (l.encode(), Some(l.valid()));
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
        f.restore("k", &with_trailer(&body, version));
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
    let mut known = (0u64, 0u64);
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
        let ok = f.restore("k", &payload);
        if keep_crc && ok {
            f.fail("a payload with a wrong checksum was accepted");
        }
        if let Some(want) = expect.filter(|_| !keep_crc) {
            known.0 += 1;
            known.1 += want as u64;
            if ok != want {
                f.fail(&format!("accepted={ok}, but the SPEC says loadable={want}"));
            }
        }
    });
    println!(
        "  field edits with a known outcome: {} ({} loadable)",
        known.0, known.1
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0);
}

/// FINDING: a `RESTORE`d lock whose fence is near the top of the signed 64-bit range
/// (`rdb_load` accepts any fence up to 2^63-1) pushes the server's high-water mark there:
/// the next fence issued, for that key or for any fresh key of the server, is 2^63 or more
/// and is replied as a negative integer, and the RDB saved afterwards holds a fence that
/// `rdb_load` refuses, so the server cannot load it (`DEBUG RELOAD` fails and empties the
/// dataset; a restart aborts).
#[test]
fn restored_fence_near_the_top_of_the_range_keeps_fences_positive() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, b"tok", 60_000);
    let mut l = s.lock.clone().unwrap();
    l.fence = i64::MAX as u64;
    l.widths[2] = Width::SixtyFour;
    let payload = with_trailer(&l.encode(), s.version);
    // Either RESTORE refuses a fence with no room above it, or fences stay positive.
    let r = cmd!(&mut f.con, "RESTORE", "k", 0, payload.as_slice());
    if r == Ok(Value::Okay) {
        let next = cmd!(&mut f.con, "LOCK.FENCE", "k", "tok");
        assert!(
            matches!(next, Ok(Value::Int(n)) if n > 0),
            "LOCK.FENCE after restoring fence 2^63-1: {next:?}"
        );
        let fresh = acquire(&mut f.con, "fresh", "a", 10_000);
        assert!(
            fresh.is_some_and(|n| n > 0),
            "a fresh key's fence: {fresh:?}"
        );
        assert_eq!(cmd!(&mut f.con, "DEBUG", "RELOAD"), Ok(Value::Okay));
        assert!(info(&mut f.con, "fresh").is_some());
    } else {
        // Refused: nothing of it may linger in the fence issuer.
        let fresh = acquire(&mut f.con, "fresh", "a", 10_000);
        assert!(fresh.is_some_and(|n| n > 0 && n < 1 << 62), "{fresh:?}");
    }
    f.server.assert_alive();
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
