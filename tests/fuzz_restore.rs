//! Seeded fuzzing of `RESTORE` with lock payloads (README guarantee 6: bad input costs
//! nothing), and checks that long fuzzed runs do not grow the server's `used_memory`.
//!
//! `cargo fuzz` needs a nightly toolchain, which this project does not use; these tests
//! generate inputs from a seeded RNG instead, so that any failure replays exactly:
//! `FUZZ_SEED=<n>` replays a run and `FUZZ_RESTORES=<n>` changes its length.
//!
//! How a lock is written in a DUMP payload, in each encoding version, is in
//! `tests/common/dump.rs`, which reads and builds them. In short: RDB type 7, the 64-bit
//! module type id (encoding version in the low 10 bits), the saved values behind opcodes
//! (5: string, 2: unsigned; signed values as unsigned), EOF, then the RDB version and a
//! CRC-64. Version 3 (what the module writes): saved_at, mode (0 exclusive, 1 shared), the
//! key's last fence, a count of holds (at least 1; exactly 1 when exclusive), then each hold
//! as token, deadline, fence (at most the last fence). Version 2: token, deadline, fence,
//! saved_at. On `RESTORE` each lease is the time it had left then (deadline - saved_at), and
//! more than ten years of it is refused. Version 1 (still loaded): token, absolute deadline,
//! fence. A token is 1 to 256 bytes; a fence from outside is valid from 1 to 2^53-1-2^32.
//!
//! Every generated payload gets a correct CRC (unless a test means otherwise), so it reaches
//! the module's `rdb_load`. Every reply must be `OK` or an `ERR` error; an accepted value
//! must be a sane lock, whose `LOCK.INFO` and `LOCK.HOLDERS` agree, that behaves like one,
//! with the holds, fences and leases the payload gives it; the server must stay up; fences
//! must stay positive and increasing; and after thousands of iterations (with `FLUSHALL`
//! between batches) `used_memory` must be where it was.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::dump::{
    self, with_trailer, Dump, Format, Hold, Holder, Layout, LockBody, Width, ENCVER_MASK,
    EXCLUSIVE, OP_EOF, OP_STRING, OP_UINT, SHARED,
};
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

/// The largest fence issued: 2^53-1.
const MAX_FENCE: u64 = (1 << 53) - 1;
/// The largest fence accepted from outside: 2^32 below the largest issued, so that one key
/// cannot leave the server without fences.
const TOP: u64 = MAX_FENCE - (1 << 32);
/// The longest lease a `RESTORE` may bring: ten years, in ms.
const MAX_LEFT_MS: i64 = 315_360_000_000;
/// The longest token.
const MAX_TOKEN: usize = 256;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Any width that can hold `n`.
fn some_width(rng: &mut StdRng, n: u64) -> Width {
    let widths = Width::holding(n);
    widths[rng.gen_range(0..widths.len())]
}

// ----------------------------------------------------------------------------- the rules

/// What the module must do with a well-formed lock body.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    Refused,
    Loaded(Loaded),
}

/// A lock as it must load: its mode, the key's last fence, and its holds in grant order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Loaded {
    /// `exclusive` or `shared`, as `LOCK.INFO` and `LOCK.HOLDERS` name it.
    mode: &'static str,
    last_fence: u64,
    holds: Vec<Want>,
}

/// One hold as it must load.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Want {
    token: Vec<u8>,
    fence: u64,
    lease: Lease,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    /// Exactly this many ms left from the moment of the `RESTORE` (versions 2 and 3).
    Left(i64),
    /// Until this absolute Unix ms (version 1).
    Until(i64),
}

impl Expect {
    /// Each hold's lease, if it loads.
    fn leases(&self) -> Option<Vec<Lease>> {
        match self {
            Expect::Refused => None,
            Expect::Loaded(l) => Some(l.holds.iter().map(|h| h.lease).collect()),
        }
    }
}

/// What the module does with lock body `l`, read at Unix ms `now`. Only a version's own
/// layout loads. Every hold needs a token of 1 to 256 bytes, a fence of 1 to 2^53-1-2^32,
/// and a lease no longer than the longest `lock.max-ttl` (ten years) could give: for versions
/// 2 and 3 the lease is `deadline - saved_at` (refused if that overflows), for version 1 it
/// runs to the absolute `deadline`. Version 3 also needs a mode of 0 or 1, a count of holds
/// that is the number written, at least 1 and exactly 1 when exclusive, a last fence of 1 to
/// 2^53-1-2^32, no hold's fence above it, and no two holds with one token or one fence (no
/// command can make them). (Version 1's ten-year bound depends on the
/// server's clock: the generators keep deadlines a day away from it.)
fn distinct(holds: &[Hold]) -> bool {
    let tokens: std::collections::HashSet<&[u8]> = holds.iter().map(|h| &h.token[..]).collect();
    let fences: std::collections::HashSet<u64> = holds.iter().map(|h| h.fence).collect();
    tokens.len() == holds.len() && fences.len() == holds.len()
}

fn rules(l: &LockBody, now: i64) -> Expect {
    let fence_ok = |f: u64| (1..=TOP).contains(&f);
    let hold_ok = |h: &Hold| (1..=MAX_TOKEN).contains(&h.token.len()) && fence_ok(h.fence);
    let left = |h: &Hold, saved_at: i64| {
        h.deadline
            .checked_sub(saved_at)
            .filter(|left| *left <= MAX_LEFT_MS)
            .map(Lease::Left)
    };
    let want = |h: &Hold, lease: Lease| Want {
        token: h.token.clone(),
        fence: h.fence,
        lease,
    };
    let loaded = match (l.encver(), &l.layout) {
        (1, Layout::V1(h)) if hold_ok(h) && h.deadline <= now + MAX_LEFT_MS => Some(Loaded {
            mode: "exclusive",
            last_fence: h.fence,
            holds: vec![want(h, Lease::Until(h.deadline))],
        }),
        (2, Layout::V2 { hold, saved_at }) if hold_ok(hold) => {
            left(hold, *saved_at).map(|lease| Loaded {
                mode: "exclusive",
                last_fence: hold.fence,
                holds: vec![want(hold, lease)],
            })
        }
        (
            3,
            Layout::V3 {
                saved_at,
                mode,
                last_fence,
                count,
                holds,
            },
        ) if (*mode == SHARED || (*mode == EXCLUSIVE && *count == 1))
            && *count >= 1
            && *count == holds.len() as u64
            && fence_ok(*last_fence)
            && holds.iter().all(|h| hold_ok(h) && h.fence <= *last_fence)
            && distinct(holds) =>
        {
            holds
                .iter()
                .map(|h| left(h, *saved_at).map(|lease| want(h, lease)))
                .collect::<Option<Vec<_>>>()
                .map(|holds| Loaded {
                    mode: if *mode == SHARED {
                        "shared"
                    } else {
                        "exclusive"
                    },
                    last_fence: *last_fence,
                    holds,
                })
        }
        _ => None,
    };
    loaded.map_or(Expect::Refused, Expect::Loaded)
}

/// A real lock's DUMP on this server.
fn sample(c: &mut redis::Connection, tokens: &[&[u8]], ttl: u64, shared: bool) -> Dump {
    let key = "sample";
    cmd!(c, "DEL", key).unwrap();
    for (n, token) in tokens.iter().enumerate() {
        let r = if shared {
            cmd!(c, "LOCK.ACQUIRE", key, *token, ttl + n as u64, "SHARED")
        } else {
            cmd!(c, "LOCK.ACQUIRE", key, *token, ttl)
        };
        assert!(r.is_ok_and(|v| matches!(v, Value::Int(_))));
    }
    let p = dump::dump(c, key);
    cmd!(c, "DEL", key).unwrap();
    let d = Dump::read(&p);
    assert_eq!(d.encver(), dump::ENCVER, "the module dumps version 3");
    if let Some(lock) = &d.lock {
        let (_, mode, _, holds) = d.v3();
        assert_eq!(mode, if shared { SHARED } else { EXCLUSIVE });
        let got: Vec<&[u8]> = holds.iter().map(|h| &h.token[..]).collect();
        assert_eq!(got, tokens, "the holds in grant order");
        assert_eq!(
            lock.encode(),
            d.body,
            "re-encoding a parsed DUMP changes it"
        );
    }
    d
}

/// The format of a sample's payloads.
fn format_of(s: &Dump) -> Format {
    Format {
        type_id: s.module_id & !ENCVER_MASK,
        rdb_version: s.rdb_version,
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
    /// those holds, fences and leases.
    fn restore(&mut self, key: &str, payload: &[u8], expect: Option<&Expect>) -> bool {
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
            let want = match expect {
                Some(Expect::Loaded(want)) => Some(want),
                _ => None,
            };
            self.check_accepted(key, want, sent);
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

    /// `LOCK.INFO` and `LOCK.HOLDERS` of `key` in one `MULTI`, so that both describe the
    /// same instant; they must agree: both null or neither, as many entries as holders, each
    /// in the lock's mode, the exclusive holder the only entry, the longest lease left the
    /// `ttl`, no entry's fence above the key's, no token twice.
    fn state(&mut self, key: &str) -> Option<(LockInfo, Vec<Holder>)> {
        let replies = exec(
            &mut self.con,
            &[args(&["LOCK.INFO", key]), args(&["LOCK.HOLDERS", key])],
        );
        let (i, h) = (parse_info(&replies[0]), dump::parse_holders(&replies[1]));
        let (i, h) = match (i, h) {
            (None, None) => return None,
            (Some(i), Some(h)) => (i, h),
            (i, h) => self.fail(&format!("LOCK.INFO {i:?} but LOCK.HOLDERS {h:?}")),
        };
        let tokens: std::collections::HashSet<&[u8]> = h.iter().map(|e| &e.token[..]).collect();
        let agree = h.len() as i64 == i.holders
            && h.iter().all(|e| e.mode == i.mode && e.fence <= i.fence)
            && h.iter().map(|e| e.ttl).max().unwrap_or(-1) == i.ttl
            && (i.mode != "exclusive" || i.holder.as_ref() == h.first().map(|e| &e.token))
            && tokens.len() == h.len();
        if !agree {
            self.fail(&format!(
                "LOCK.INFO {i:?} disagrees with LOCK.HOLDERS {h:?}"
            ));
        }
        Some((i, h))
    }

    /// Checks the holds of a restored lock (`None`: every lease had ended) against `want`,
    /// the `RESTORE` having been sent at `sent`: the live ones, in grant order, with their
    /// tokens, fences and leases. A lease given as time left is exact: never more than it,
    /// never less than it minus the time the commands took; a hold with no more left than
    /// that may have ended. An absolute one is read against this machine's clock, which is
    /// the server's (100 ms of slack).
    fn check_holds(&mut self, got: &Option<(LockInfo, Vec<Holder>)>, want: &Loaded, sent: Instant) {
        let took = sent.elapsed().as_millis() as i64 + 2;
        let empty = Vec::new();
        let entries = got.as_ref().map_or(&empty, |(_, h)| h);
        let mut next = entries.iter().peekable();
        let mut ok = true;
        for w in &want.holds {
            let (left, slack) = match w.lease {
                Lease::Left(left) => (left, 0),
                Lease::Until(deadline) => (deadline.saturating_sub(now_ms() - took), 100),
            };
            let here = next
                .peek()
                .is_some_and(|e| e.token == w.token && e.fence as u64 == w.fence);
            if here {
                let e = next.next().unwrap();
                ok &= e.mode == want.mode
                    && e.ttl <= left.saturating_add(slack)
                    && e.ttl >= left.saturating_sub(took + slack);
            } else {
                // Ended: fine if it had no time left, or too little to outlast the commands.
                ok &= left <= took + slack;
            }
        }
        ok &= next.next().is_none();
        if let Some((i, _)) = got {
            ok &= i.fence as u64 == want.last_fence && i.mode == want.mode && i.waiters == 0;
        }
        if !ok {
            self.fail(&format!(
                "restored {want:?}: LOCK.INFO and LOCK.HOLDERS {got:?} within {took} ms of the \
                 RESTORE"
            ));
        }
    }

    /// Whatever was accepted must be a sane lock that behaves like one (or a value of a
    /// native type, when the body was not a module value at all); with `want`, the holds the
    /// payload gives it.
    fn check_accepted(&mut self, key: &str, want: Option<&Loaded>, sent: Instant) {
        let ty = match cmd!(&mut self.con, "TYPE", key) {
            Ok(Value::SimpleString(s)) => s,
            other => self.fail(&format!("TYPE: {other:?}")),
        };
        if ty == "none" {
            // Leases that had ended (or ended at once): the sweep took the key away.
            if let Some(want) = want {
                self.check_holds(&None, want, sent);
            }
            return;
        }
        if ty != "redislock" {
            if want.is_some() {
                self.fail(&format!("a lock body restored as a {ty}"));
            }
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        }
        let got = self.state(key);
        if let Some(want) = want {
            self.check_holds(&got, want, sent);
        }
        let Some((_, entries)) = got else {
            // Leases that ended before the restore: the key goes away.
            cmd!(&mut self.con, "DEL", key).unwrap();
            return;
        };
        let short: Vec<Vec<u8>> = entries
            .iter()
            .filter(|e| e.ttl < SHORT_LEASE_MS)
            .map(|e| e.token.clone())
            .collect();
        if !short.is_empty() {
            // Too short to outlast the checks below: they must end on their own, on time.
            let c = &mut self.con;
            let ended = wait_until(Duration::from_secs(5), || {
                dump::holders(c, key).is_none_or(|h| !h.iter().any(|e| short.contains(&e.token)))
            });
            if !ended {
                self.fail(&format!(
                    "restored leases of under {SHORT_LEASE_MS} ms did not end"
                ));
            }
        }
        let Some((i, entries)) = self.state(key) else {
            // Every lease ended: the key goes away on its own, on time.
            let c = &mut self.con;
            if !wait_until(Duration::from_secs(5), || !exists(c, key)) {
                self.fail("every restored lease ended, but the key stayed");
            }
            return;
        };
        self.tally.locks_exercised += 1;
        for e in &entries {
            if e.token.is_empty()
                || e.token.len() > MAX_TOKEN
                || e.fence <= 0
                || e.ttl <= 0
                || e.ttl > MAX_LEFT_MS
            {
                self.fail(&format!("restored hold is not sane: {e:?} in {i:?}"));
            }
        }
        if i.fence <= 0 || i.fence as u64 > MAX_FENCE || i.waiters != 0 {
            self.fail(&format!("restored lock is not sane: {i:?}"));
        }
        self.exercise(key, &i, &entries);
    }

    /// Uses a restored lock as its holders would: each gets a new fence above every fence
    /// before, renews its lease and asks again for what it holds (the same fence back);
    /// nobody else gets an exclusive hold, and someone else gets a shared one only where the
    /// lock is shared. Then it dumps and restores as the same lock, with each lease's time
    /// left, and when every holder has released it the key is gone.
    fn exercise(&mut self, key: &str, i: &LockInfo, entries: &[Holder]) {
        let shared = i.mode == "shared";
        let mut top = i.fence.max(self.probe_fence);
        let mut fences = Vec::new();
        for e in entries {
            let c = &mut self.con;
            match cmd!(c, "LOCK.FENCE", key, e.token.as_slice()) {
                Ok(Value::Int(f)) if f > top && f as u64 <= MAX_FENCE => {
                    top = f;
                    fences.push(f);
                }
                other => self.fail(&format!(
                    "LOCK.FENCE of restored hold {e:?} (fences issued up to {top}): {other:?}"
                )),
            }
        }
        let c = &mut self.con;
        let r = cmd!(c, "LOCK.ACQUIRE", key, "someone-else", 1000);
        if r != Ok(Value::Nil) {
            self.fail(&format!("someone else asked for {i:?} exclusively: {r:?}"));
        }
        let c = &mut self.con;
        match cmd!(c, "LOCK.ACQUIRE", key, "someone-else", 1000, "SHARED") {
            Ok(Value::Nil) if !shared => {}
            Ok(Value::Int(f)) if shared && f > top => {
                top = f;
                let c = &mut self.con;
                assert_eq!(release(c, key, "someone-else"), 1);
            }
            other => self.fail(&format!("someone else asked {i:?} for a share: {other:?}")),
        }
        self.probe_fence = self.probe_fence.max(top);
        // The first renewal below: every lease has run at most since then.
        let renewed = Instant::now();
        for (e, &f) in entries.iter().zip(&fences) {
            let t = e.token.as_slice();
            let c = &mut self.con;
            let mut checks = vec![
                (cmd!(c, "LOCK.EXTEND", key, t, 60_000), Ok(Value::Int(1))),
                if shared {
                    (
                        cmd!(c, "LOCK.ACQUIRE", key, t, 60_000, "SHARED"),
                        Ok(Value::Int(f)),
                    )
                } else {
                    (cmd!(c, "LOCK.ACQUIRE", key, t, 60_000), Ok(Value::Int(f)))
                },
            ];
            if shared {
                let r = cmd!(c, "LOCK.ACQUIRE", key, t, 60_000);
                let upgrade = "ERR the token holds the lock shared";
                let r = match r {
                    Err(e) if e.starts_with(upgrade) => Err(upgrade.to_string()),
                    other => other,
                };
                checks.push((r, Err(upgrade.to_string())));
            }
            for (got, want) in checks {
                if got != want {
                    self.fail(&format!("restored hold {e:?}: got {got:?}, want {want:?}"));
                }
            }
        }
        // It dumps and restores again as the same lock, with the time each hold had left.
        let c = &mut self.con;
        let again = dump::dump(c, key);
        let c = &mut self.con;
        if cmd!(c, "RESTORE", "copy", 0, again.as_slice(), "REPLACE") != Ok(Value::Okay) {
            self.fail("a restored lock's own DUMP does not restore");
        }
        let copy = self.state("copy");
        // DUMP rounds the deadline up and the save time down (to the millisecond): the copy
        // may hold up to 2 ms more than the lease had left, never less.
        let took = renewed.elapsed().as_millis() as i64 + 2;
        let same = copy.as_ref().is_some_and(|(ci, ch)| {
            ci.fence == top
                && ci.mode == i.mode
                && ch.len() == entries.len()
                && ch.iter().zip(entries).zip(&fences).all(|((c, e), &f)| {
                    c.token == e.token
                        && c.fence == f
                        && c.ttl <= 60_000 + 2
                        && c.ttl >= 60_000 - took
                })
        });
        if !same {
            self.fail(&format!(
                "round trip of {i:?} {entries:?} with fences {fences:?} (key's {top}) and \
                 60000 ms leases: {copy:?} within {took} ms"
            ));
        }
        for e in entries {
            let c = &mut self.con;
            let r = cmd!(c, "LOCK.RELEASE", key, e.token.as_slice());
            if r != Ok(Value::Int(1)) {
                self.fail(&format!("LOCK.RELEASE of restored hold {e:?}: {r:?}"));
            }
        }
        if exists(&mut self.con, key) {
            let left = dump::holders(&mut self.con, key);
            self.fail(&format!(
                "every holder released, but the key is left: {left:?}"
            ));
        }
        let c = &mut self.con;
        cmd!(c, "DEL", "copy").unwrap();
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
            out.extend(dump::enc_len_as(len, w));
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
            out.extend(dump::enc_len_as(v, w));
        }
        3 => out.extend_from_slice(&rng.gen::<f32>().to_le_bytes()),
        4 => out.extend_from_slice(&rng.gen::<f64>().to_le_bytes()),
        _ => out.extend(random_bytes(rng, 8)),
    }
}

/// (a) A random body behind a correct trailer.
fn random_body(rng: &mut StdRng, s: &Dump) -> Vec<u8> {
    let id = s.module_id;
    let mut b = Vec::new();
    match rng.gen_range(0..20) {
        // Shaped like a lock of version 1 or 2 (string, then two or three unsigned values,
        // EOF) with random values, under the id of encoding version 3, 2 or 1.
        0..=2 => {
            b.push(7);
            let id = (id & !ENCVER_MASK) | rng.gen_range(1..=3);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            random_item_of(rng, &mut b, OP_STRING);
            for _ in 0..rng.gen_range(2..=3) {
                random_item_of(rng, &mut b, OP_UINT);
            }
            if rng.gen_bool(0.9) {
                b.push(OP_EOF);
            }
        }
        // Shaped like a lock of version 3 (four unsigned values, then a few holds of a
        // string and two unsigned values, EOF) with random values, under the id of
        // encoding version 3 (mostly) or 2.
        3..=4 => {
            b.push(7);
            let id = (id & !ENCVER_MASK) | if rng.gen_bool(0.8) { 3 } else { 2 };
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            for _ in 0..4 {
                random_item_of(rng, &mut b, OP_UINT);
            }
            for _ in 0..rng.gen_range(0..=4) {
                random_item_of(rng, &mut b, OP_STRING);
                random_item_of(rng, &mut b, OP_UINT);
                random_item_of(rng, &mut b, OP_UINT);
            }
            if rng.gen_bool(0.9) {
                b.push(OP_EOF);
            }
        }
        // The lock's own type, then module items in random order and number.
        5..=11 => {
            b.push(7);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            for _ in 0..rng.gen_range(0..8) {
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
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
            b.extend(random_bytes(rng, 100));
        }
        // RDB_TYPE_MODULE (v1, no opcodes), with the lock's id.
        15..=16 => {
            b.push(6);
            b.extend(dump::enc_len_as(id, Width::SixtyFour));
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
            b.extend(dump::enc_len_as(other, Width::SixtyFour));
            b.extend(random_bytes(rng, 40));
        }
        // Anything at all.
        _ => b.extend(random_bytes(rng, 80)),
    }
    b
}

/// A token of a valid length or not: empty, 256 bytes, 257, up to 300, or 1 to 256 random
/// bytes.
fn interesting_token(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..6) {
        0 => Vec::new(),
        1 => vec![b'x'; MAX_TOKEN],
        2 => vec![b'x'; MAX_TOKEN + 1],
        3 => random_bytes(rng, 300),
        _ => {
            let n = rng.gen_range(1..=MAX_TOKEN);
            (0..n).map(|_| rng.gen()).collect()
        }
    }
}

/// A version-3 mode: mostly a valid one, else 2, 3, 255, 2^64-1 or anything.
fn interesting_mode(rng: &mut StdRng) -> u64 {
    match rng.gen_range(0..8) {
        0..=1 => EXCLUSIVE,
        2..=3 => SHARED,
        4 => rng.gen_range(2..=3),
        5 => 255,
        6 => u64::MAX,
        _ => rng.gen(),
    }
}

/// A count of holds for a list of `n`: right, one off, 0, or huge.
fn interesting_count(rng: &mut StdRng, n: u64) -> u64 {
    match rng.gen_range(0..9) {
        0 => 0,
        1 => n.saturating_sub(1),
        2 => n + 1,
        3 => n + rng.gen_range(2..100),
        4 => 1 << 32,
        5 => u64::MAX,
        6 => i64::MAX as u64 + 1,
        7 => rng.gen(),
        _ => n,
    }
}

/// The layout of encoding version `v` (1, 2 or 3) with `l`'s holds (version 1 and 2 keep
/// the first), its save time (now if it has none), and a mode that fits the holds.
fn layout_of_version(rng: &mut StdRng, l: &Layout, v: u64) -> Layout {
    let now = now_ms();
    let holds = l.holds().to_vec();
    let first = holds
        .first()
        .cloned()
        .unwrap_or_else(|| Hold::new("t", now + 60_000, 1));
    let saved_at = l.saved_at().unwrap_or(now);
    match v {
        1 => Layout::V1(first),
        2 => Layout::V2 {
            hold: first,
            saved_at,
        },
        _ => {
            let holds = if holds.is_empty() { vec![first] } else { holds };
            let mode = if holds.len() > 1 || rng.gen() {
                SHARED
            } else {
                EXCLUSIVE
            };
            let last = holds.iter().map(|h| h.fence).max().unwrap();
            Layout::v3(mode, last, saved_at, holds)
        }
    }
}

/// Makes every token of `l` distinct (the known-outcome generators write each token once;
/// a token twice has its own test, `a_token_holds_a_lock_once`).
fn distinct_tokens(l: &mut LockBody) {
    if let Layout::V3 { holds, .. } = &mut l.layout {
        for n in 1..holds.len() {
            if holds[..n].iter().any(|h| h.token == holds[n].token) {
                holds[n].token = format!("distinct-{n}").into_bytes();
            }
        }
    }
}

/// The field edits of [`edit`], by number.
const EDITS: u32 = 20;
/// The edits that are about version 3's holds: mode, count, last fence, hold lists,
/// exclusive with several holds, leases beyond ten years, a hold's fence.
const V3_EDITS: [u32; 9] = [2, 9, 10, 11, 12, 13, 14, 15, 19];

/// Hold `i` of `l` (the one of versions 1 and 2).
fn hold_at(l: &mut LockBody, i: usize) -> Option<&mut Hold> {
    match &mut l.layout {
        Layout::V1(h) | Layout::V2 { hold: h, .. } => Some(h),
        Layout::V3 { holds, .. } => holds.get_mut(i),
    }
}

/// Edit `kind` of a lock body's fields (its values, its encoding version, its layout).
fn edit(rng: &mut StdRng, l: &mut LockBody, kind: u32) {
    let n = l.layout.holds().len();
    let i = rng.gen_range(0..n.max(1));
    let saved_at = l.layout.saved_at();
    match kind {
        0 => {
            if let Some(h) = hold_at(l, i) {
                h.token = interesting_token(rng);
            }
        }
        1 => {
            if let Some(h) = hold_at(l, i) {
                h.deadline = interesting_u64(rng) as i64;
            }
        }
        // A hold's fence; mostly the key's last fence stays above it.
        2 => {
            let f = interesting_fence(rng);
            let keep_last = rng.gen_bool(0.7);
            if let Some(h) = hold_at(l, i) {
                h.fence = f;
            }
            if let Layout::V3 { last_fence, .. } = &mut l.layout {
                if keep_last {
                    *last_fence = (*last_fence).max(f);
                }
            }
        }
        3 => match &mut l.layout {
            Layout::V2 { saved_at, .. } | Layout::V3 { saved_at, .. } => {
                *saved_at = interesting_u64(rng) as i64
            }
            Layout::V1(_) => {}
        },
        // Leases of some length, saved at some time (an hour away, say).
        4 => {
            let Some(old) = saved_at else { return };
            let at = if rng.gen_bool(0.5) {
                interesting_u64(rng) as i64
            } else {
                old
            };
            match &mut l.layout {
                Layout::V2 { saved_at, hold } => {
                    *saved_at = at;
                    hold.deadline = at.wrapping_add(interesting_left(rng));
                }
                Layout::V3 {
                    saved_at, holds, ..
                } => {
                    *saved_at = at;
                    for h in holds {
                        h.deadline = at.wrapping_add(interesting_left(rng));
                    }
                }
                Layout::V1(_) => {}
            }
        }
        // deadline - saved_at overflows.
        5 => {
            let (d, at) =
                [(i64::MAX, -1), (i64::MIN, 1), (i64::MAX, i64::MIN)][rng.gen_range(0..3)];
            match &mut l.layout {
                Layout::V2 { saved_at, .. } | Layout::V3 { saved_at, .. } => *saved_at = at,
                Layout::V1(_) => return,
            }
            if let Some(h) = hold_at(l, i) {
                h.deadline = d;
            }
        }
        // Version 1: three fields, an absolute deadline.
        6 => {
            let mut v1 = layout_of_version(rng, &l.layout, 1);
            if let Layout::V1(h) = &mut v1 {
                h.deadline = interesting_v1_deadline(rng) as i64;
            }
            *l = l.clone().with_encver(1);
            l.layout = v1;
        }
        // A version's id with another version's layout.
        7 => {
            let have = l.encver().clamp(1, 3);
            let other = [1, 2, 3]
                .into_iter()
                .filter(|v| *v != have)
                .collect::<Vec<_>>();
            let v = other[rng.gen_range(0..2)];
            l.layout = layout_of_version(rng, &l.layout, v);
        }
        // An encoding version this module never wrote, with any layout.
        8 => {
            let v = [0, 4, 5, 1023, rng.gen_range(4..1024)][rng.gen_range(0..5)];
            let layout = rng.gen_range(1..=3);
            l.layout = layout_of_version(rng, &l.layout, layout);
            *l = l.clone().with_encver(v);
        }
        9 => {
            if let Layout::V3 { mode, .. } = &mut l.layout {
                *mode = interesting_mode(rng);
            }
        }
        10 => {
            if let Layout::V3 { count, holds, .. } = &mut l.layout {
                *count = interesting_count(rng, holds.len() as u64);
            }
        }
        // The key's last fence: anything, or below a hold's.
        11 => {
            if let Layout::V3 {
                last_fence, holds, ..
            } = &mut l.layout
            {
                *last_fence = match holds.get(i) {
                    Some(h) if rng.gen() => h.fence.saturating_sub(rng.gen_range(1..3)),
                    _ => interesting_fence(rng),
                };
            }
        }
        // A list of holds cut short (its count kept), or emptied.
        12 => {
            if let Layout::V3 { holds, .. } = &mut l.layout {
                let keep = if rng.gen() {
                    0
                } else {
                    holds.len().saturating_sub(1)
                };
                holds.truncate(keep);
            }
        }
        // One more hold, of some lease, under the last fence; mostly counted.
        13 => {
            if let Layout::V3 {
                saved_at,
                last_fence,
                count,
                holds,
                ..
            } = &mut l.layout
            {
                let fence = if (1..=TOP).contains(last_fence) {
                    rng.gen_range(1..=*last_fence)
                } else {
                    interesting_fence(rng)
                };
                let token = format!("more-{}", holds.len()).into_bytes();
                let deadline = saved_at.wrapping_add(interesting_left(rng));
                holds.insert(
                    rng.gen_range(0..=holds.len()),
                    Hold {
                        token,
                        deadline,
                        fence,
                    },
                );
                if rng.gen_bool(0.8) {
                    *count = holds.len() as u64;
                }
            }
        }
        // Exclusive, with two holds or more.
        14 => {
            if let Layout::V3 {
                mode,
                count,
                holds,
                saved_at,
                last_fence,
            } = &mut l.layout
            {
                *mode = EXCLUSIVE;
                while holds.len() < 2 {
                    let n = holds.len();
                    holds.push(Hold::new(
                        format!("x{n}"),
                        saved_at.wrapping_add(60_000),
                        *last_fence,
                    ));
                }
                *count = holds.len() as u64;
            }
        }
        // A lease beyond ten years (or just at it).
        15 => {
            let extra = [0, 1, 1_000, 86_400_000, i64::MAX / 2][rng.gen_range(0..5)];
            if let Some(at) = saved_at {
                if let Some(h) = hold_at(l, i) {
                    h.deadline = at.saturating_add(MAX_LEFT_MS).saturating_add(extra);
                }
            }
        }
        16 => {
            l.layout = layout_of_version(rng, &l.layout, 2);
            *l = l.clone().with_encver(2);
        }
        17 => {
            l.layout = layout_of_version(rng, &l.layout, 3);
            *l = l.clone().with_encver(3);
        }
        // Shared becomes exclusive (refused with several holds) and back.
        18 => {
            if let Layout::V3 { mode, .. } = &mut l.layout {
                if *mode <= 1 {
                    *mode = 1 - *mode;
                }
            }
        }
        // A hold's fence above the key's last fence.
        19 => {
            if let Layout::V3 {
                last_fence, holds, ..
            } = &mut l.layout
            {
                if let Some(h) = holds.get_mut(i) {
                    h.fence = last_fence.saturating_add(rng.gen_range(1..1_000));
                }
            }
        }
        _ => {}
    }
}

/// (b) A real lock's DUMP, mutated: field edits (values, encoding versions, layouts),
/// bit flips, byte sets, truncations, insertions, deletions. Returns the body and, for pure
/// field edits, what the rules say the module does with it. With `v3`, the field edits are
/// mostly those of version 3's holds.
fn mutated_body(rng: &mut StdRng, s: &Dump, v3: bool) -> (Vec<u8>, Option<Expect>) {
    let edits = if v3 { 0.6 } else { 0.4 };
    if let Some(mut l) = s.lock.clone().filter(|_| rng.gen_bool(edits)) {
        // A well-formed lock with edited fields: the outcome is known.
        for _ in 0..rng.gen_range(1..=2) {
            let kind = if v3 && rng.gen_bool(0.7) {
                V3_EDITS[rng.gen_range(0..V3_EDITS.len())]
            } else {
                rng.gen_range(0..EDITS)
            };
            edit(rng, &mut l, kind);
        }
        distinct_tokens(&mut l);
        let body = l.encode_with(|n| some_width(rng, n));
        return (body, Some(rules(&l, now_ms())));
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
                // A length field: the first value's, written as some other value.
                let v = interesting_u64(rng) % 1024;
                let (_, n) = dump::dec_len(&b, 11).unwrap_or((0, 1));
                let w = some_width(rng, v);
                b.splice(11..(11 + n).min(b.len()), dump::enc_len_as(v, w));
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

/// Exclusive locks of one hold. Random bytes do not compress, so they are saved as plain
/// strings; the last two are saved as an integer and LZF-compressed, and are only mutated
/// byte-wise.
fn samples(c: &mut redis::Connection) -> Vec<Dump> {
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
        v.push(sample(c, &[&token], ttl, false));
    }
    assert!(v[..6].iter().all(|s| s.lock.is_some()));
    assert!(
        v[6..].iter().all(|s| s.lock.is_none()),
        "integer and LZF tokens"
    );
    v
}

/// Marks the sample whose holds' leases are cut to a few ms (`with_short_leases`).
const SHORT_LEASES: u64 = 0;

/// `d` with its holds' deadlines at 1, 2, 3… ms after its save time, re-encoded.
fn with_short_leases(mut d: Dump) -> Dump {
    let lock = d.lock.as_mut().expect("plain tokens");
    if let Layout::V3 {
        saved_at, holds, ..
    } = &mut lock.layout
    {
        for (n, h) in holds.iter_mut().enumerate() {
            h.deadline = *saved_at + 1 + n as i64;
        }
    }
    d.body = lock.encode();
    d
}

/// Shared locks of 1 to 6 holds, of plain tokens of many lengths; the last also has an
/// integer and an LZF-compressed token, and is only mutated byte-wise.
fn shared_samples(c: &mut redis::Connection) -> Vec<Dump> {
    let mut rng = StdRng::seed_from_u64(13);
    let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.gen()).collect() };
    let sets: Vec<(Vec<Vec<u8>>, u64)> = vec![
        (vec![b"r1".to_vec()], 60_000),
        (vec![b"a".to_vec(), b"b".to_vec()], 60_000),
        (vec![noise(8), noise(40), noise(3)], 60_000),
        (vec![noise(64), b"x".to_vec(), noise(256)], 60_000),
        ((0..6).map(|n| noise(1 + n * 9)).collect(), 60_000),
        // Leases of 1 to 3 ms (see below): restored, they are over (or nearly).
        (vec![b"s".to_vec(), b"t".to_vec(), noise(20)], SHORT_LEASES),
        (
            vec![b"plain".to_vec(), b"12345".to_vec(), vec![b'y'; 200]],
            60_000,
        ),
    ];
    let mut v = Vec::new();
    for (tokens, ttl) in &sets {
        let tokens: Vec<&[u8]> = tokens.iter().map(|t| &t[..]).collect();
        if *ttl == SHORT_LEASES {
            // Taken with long leases, which a slow server (valgrind) cannot see end before
            // the DUMP, then cut to 1, 2 and 3 ms after the dump's save time.
            v.push(with_short_leases(sample(c, &tokens, 60_000, true)));
        } else {
            v.push(sample(c, &tokens, *ttl, true));
        }
    }
    let last = v.len() - 1;
    assert!(v[..last].iter().all(|s| s.lock.is_some()));
    assert!(v[last].lock.is_none(), "integer and LZF tokens");
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
            s[0].rdb_version
        } else {
            rng.gen()
        };
        f.what = format!("random body #{i} {body:02x?} version {version:02x?}");
        f.restore("k", &with_trailer(&body, version), None);
    });
    assert!(f.tally.refused > 0);
}

/// Field edits with a known outcome, by what the rules say.
#[derive(Debug, Default)]
struct Known {
    edits: u64,
    refused: u64,
    /// Loadable, by encoding version.
    loaded: [u64; 4],
    /// Loadable shared locks of two holds or more.
    loaded_shared: u64,
}

impl Known {
    fn note(&mut self, body: &[u8], expect: &Expect) {
        self.edits += 1;
        match expect {
            Expect::Refused => self.refused += 1,
            Expect::Loaded(l) => {
                let v = LockBody::parse(body).map_or(0, |b| b.encver() as usize);
                self.loaded[v.min(3)] += 1;
                self.loaded_shared += (l.mode == "shared" && l.holds.len() > 1) as u64;
            }
        }
    }
}

/// Runs `iters` mutated DUMPs of `samples` against `f`; what the field edits were.
fn mutation_run(f: &mut Fuzz, samples: &[Dump], seed: u64, iters: u64, v3: bool) -> Known {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut known = Known::default();
    f.run(iters, |f, i| {
        let s = &samples[rng.gen_range(0..samples.len())];
        let (body, expect) = mutated_body(&mut rng, s, v3);
        let keep_crc = rng.gen_bool(0.03) && body != s.body;
        let payload = if keep_crc {
            // The original trailer on a changed body: the checksum must catch it.
            let mut p = body.clone();
            p.extend_from_slice(&s.rdb_version);
            let mut orig = s.body.clone();
            orig.extend_from_slice(&s.rdb_version);
            p.extend_from_slice(&crc64(&orig).to_le_bytes());
            p
        } else {
            with_trailer(&body, s.rdb_version)
        };
        f.what = format!("mutation #{i} {body:02x?} (expect {expect:?}, stale crc {keep_crc})");
        let expect = expect.filter(|_| !keep_crc);
        let ok = f.restore("k", &payload, expect.as_ref());
        if keep_crc && ok {
            f.fail("a payload with a wrong checksum was accepted");
        }
        if let Some(want) = &expect {
            known.note(&body, want);
        }
    });
    println!("  field edits with a known outcome: {known:?}");
    known
}

#[test]
fn restore_of_mutated_lock_dumps() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (mutated DUMPs): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut f = Fuzz::new();
    let samples = samples(&mut f.con);
    let known = mutation_run(&mut f, &samples, seed ^ 0x5a5a, iters, false);
    // About 30% of the mutations are field edits; of those, about a third load, of every
    // version.
    let loaded: u64 = known.loaded.iter().sum();
    assert!(
        loaded > iters / 20
            && known.loaded[1] > iters / 200
            && known.loaded[2] > iters / 200
            && known.loaded[3] > iters / 50
            && known.refused > iters / 20,
        "too few field edits with a known outcome: {known:?}"
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0);
}

/// Mutated DUMPs of shared locks of several holds (version 3): bad modes, counts of 0,
/// exclusive with 2 holds or more, a hold's fence above the key's last fence, lists of holds
/// cut short, huge counts, tokens empty or over 256 bytes, leases over ten years, and bytes
/// flipped, cut, inserted. Every one is refused or restores as a consistent lock with the
/// holds the rules say, the server stays up, and memory does not grow.
#[test]
fn restore_of_mutated_shared_dumps() {
    let seed = env_u64("FUZZ_SEED", DEFAULT_SEED);
    let iters = env_u64("FUZZ_RESTORES", DEFAULT_RESTORES);
    println!("restore fuzz (mutated shared DUMPs): FUZZ_SEED={seed} FUZZ_RESTORES={iters}");
    let mut f = Fuzz::new();
    let samples = shared_samples(&mut f.con);
    let known = mutation_run(&mut f, &samples, seed ^ 0x5ea7, iters, true);
    assert!(
        known.loaded_shared > iters / 50 && known.refused > iters / 10,
        "too few field edits with a known outcome: {known:?}"
    );
    assert!(f.tally.accepted > 0 && f.tally.refused > 0 && f.tally.locks_exercised > 0);
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
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let (saved_at, _, _, holds) = s.v3();
    let hold = holds[0].clone();
    // The key's last fence and its holder's.
    let with_fence = |fence: u64| {
        let h = Hold {
            fence,
            ..hold.clone()
        };
        fmt.v3(EXCLUSIVE, fence, saved_at, vec![h])
    };
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

/// (saved_at, deadline - saved_at, the lease left if it loads) around the edges of what
/// `RESTORE` accepts, read at Unix ms `now`.
fn lease_cases(now: i64) -> [(i64, i64, Option<i64>); 13] {
    let hour = 3_600_000;
    [
        (now, 20_000, Some(20_000)),
        (now - hour, 20_000, Some(20_000)),
        (now + hour, 20_000, Some(20_000)),
        (0, 20_000, Some(20_000)),
        (now - hour, MAX_LEFT_MS, Some(MAX_LEFT_MS)),
        (now + hour, MAX_LEFT_MS + 1, None),
        (now, 0, Some(0)),
        (now + hour, -1, Some(-1)),
        (now - hour, -20_000, Some(-20_000)),
        (1, i64::MIN + 1, Some(i64::MIN + 1)),
        (-1, i64::MAX, None),
        // deadline - saved_at overflows (deadline wraps to i64::MIN): i64::MIN - 1,
        // i64::MIN - i64::MAX.
        (1, i64::MAX, None),
        (i64::MAX, 1, None),
    ]
}

/// Encoding version 2 carries the lease as the time it had left when dumped
/// (deadline - saved_at), whatever the clock of the server that dumped it said: exactly that,
/// never more, never less than it less the time the commands took. Up to ten years of it;
/// more, or a difference that overflows, is refused.
#[test]
fn version_2_payloads_restore_with_the_time_they_had_left() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let fence0 = s.v3().2;
    let now = now_ms();
    let hour = 3_600_000;
    let v2 = |saved_at: i64, deadline: i64| {
        let hold = Hold::new("tok", deadline, fence0);
        fmt.body(2, Layout::V2 { hold, saved_at })
    };
    for (saved_at, left, loads) in lease_cases(now) {
        // The overflowing ones wrap here, as the module reads them back.
        let deadline = saved_at.wrapping_add(left);
        f.what = format!("saved_at {saved_at}, deadline {deadline} (left {left})");
        let body = v2(saved_at, deadline);
        let expect = rules(&body, now);
        assert_eq!(
            expect.leases(),
            loads.map(|l| vec![Lease::Left(l)]),
            "{}: this file's rules",
            f.what
        );
        f.restore("k", &fmt.payload(&body), Some(&expect));
    }
    // The lease left ends on time, however far the dumping server's clock was.
    let payload = fmt.payload(&v2(now - hour, now - hour + 300));
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

/// Encoding version 3 carries each hold's lease as the time it had left when dumped, as
/// version 2 does its one: a shared lock whose first hold has each lease of
/// [`lease_cases`] and whose other two have 20 s and 40 s left loads with exactly those
/// (the ones over already gone), or is refused as a whole. Each lease then ends on time.
#[test]
fn version_3_payloads_restore_each_hold_with_the_time_it_had_left() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b", b"c"], 60_000, true);
    let fmt = format_of(&s);
    let (_, _, last, holds) = s.v3();
    let holds = holds.to_vec();
    let now = now_ms();
    let hour = 3_600_000;
    let v3 = |saved_at: i64, lefts: [i64; 3]| {
        let holds = holds
            .iter()
            .zip(lefts)
            .map(|(h, left)| Hold {
                deadline: saved_at.wrapping_add(left),
                ..h.clone()
            })
            .collect();
        fmt.body(3, Layout::v3(SHARED, last, saved_at, holds))
    };
    for (saved_at, left, loads) in lease_cases(now) {
        for lefts in [[left, 20_000, 40_000], [40_000, 20_000, left]] {
            f.what = format!("saved_at {saved_at}, holds with {lefts:?} left");
            let body = v3(saved_at, lefts);
            let expect = rules(&body, now);
            let want = loads.map(|_| lefts.map(Lease::Left).to_vec());
            assert_eq!(expect.leases(), want, "{}: this file's rules", f.what);
            f.restore("k", &fmt.payload(&body), Some(&expect));
        }
    }
    // Each lease left ends on time, however far the dumping server's clock was: one after
    // 300 ms, one after 600 ms, the last after 900 ms.
    let at = now_ms() - hour;
    let payload = fmt.payload(&v3(at, [600, 900, 300]));
    let t0 = Instant::now();
    assert_eq!(
        cmd!(&mut f.con, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let mut ends = Vec::new();
    for live in [2, 1, 0] {
        let c = &mut f.con;
        assert!(wait_until(Duration::from_secs(5), || {
            dump::holders(c, "k").map_or(0, |h| h.len()) == live
        }));
        ends.push(t0.elapsed());
    }
    let ms = |n: u64| Duration::from_millis(n);
    assert!(
        ends.iter()
            .zip([300, 600, 900])
            .all(|(t, at)| *t >= ms(at - 1) && *t < ms(at + 1_000)),
        "leases of 300, 600 and 900 ms restored from a clock an hour behind ended after \
         {ends:?}"
    );
    // The sweep removes the key within a few ms of its last lease's end.
    let c = &mut f.con;
    assert!(
        wait_until(Duration::from_millis(200), || !exists(c, "k")),
        "the key outlived its last lease by 200 ms"
    );
}

/// A shared lock of three holds, with different leases and fences (one fenced again after
/// the others joined), dumped on one server and restored on another: the payload is version
/// 3 with every hold in grant order, and `LOCK.HOLDERS` on the second server lists the same
/// tokens, fences and mode, each with the time it had left (never more than 2 ms over, never
/// less than it less the time the move took); `LOCK.INFO` agrees.
#[test]
fn shared_holds_move_to_another_server_with_the_time_each_had_left() {
    let from = Server::new();
    let to = Server::new();
    let (mut a, mut b) = (from.conn(), to.conn());
    for (token, ttl) in [("r1", 20_000), ("r2", 40_000), ("r3", 30_000)] {
        let r = cmd!(&mut a, "LOCK.ACQUIRE", "k", token, ttl, "SHARED");
        assert!(matches!(r, Ok(Value::Int(_))), "{token}: {r:?}");
    }
    let refenced = fence(&mut a, "k", "r1").expect("a new fence for r1");
    let t0 = Instant::now();
    // Both in one MULTI, so that they describe the same instant.
    let replies = exec(
        &mut a,
        &[args(&["LOCK.HOLDERS", "k"]), args(&["DUMP", "k"])],
    );
    let before = dump::parse_holders(&replies[0]).expect("the shared lock");
    let Value::BulkString(payload) = &replies[1] else {
        panic!("DUMP: {:?}", replies[1]);
    };
    let d = Dump::read(payload);
    let (saved_at, mode, last, holds) = d.v3();
    assert_eq!(mode, SHARED, "{d:?}");
    assert_eq!(last as i64, refenced, "the key's last fence: {d:?}");
    assert_eq!(
        holds
            .iter()
            .map(|h| (h.token.clone(), h.fence as i64))
            .collect::<Vec<_>>(),
        before
            .iter()
            .map(|h| (h.token.clone(), h.fence))
            .collect::<Vec<_>>(),
        "the payload's holds in grant order"
    );
    // DUMP reads the clock when it runs, LOCK.HOLDERS at the start of the MULTI; each rounds
    // up to the millisecond.
    let multi_took = t0.elapsed().as_millis() as i64 + 1;
    for (h, e) in holds.iter().zip(&before) {
        let left = h.deadline - saved_at;
        assert!(
            left >= e.ttl - multi_took && left <= e.ttl + 2,
            "{h:?} saved {left} ms left, LOCK.HOLDERS said {e:?} ({multi_took} ms)"
        );
    }
    assert_eq!(
        cmd!(&mut b, "RESTORE", "k", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    // Both in one MULTI, so that they describe the same instant.
    let replies = exec(
        &mut b,
        &[args(&["LOCK.HOLDERS", "k"]), args(&["LOCK.INFO", "k"])],
    );
    let took = t0.elapsed().as_millis() as i64;
    let after = dump::parse_holders(&replies[0]).expect("the restored lock");
    let i = parse_info(&replies[1]).expect("the restored lock");
    assert_eq!(after.len(), 3, "{after:?}");
    for (e, was) in after.iter().zip(&before) {
        assert!(
            e.token == was.token
                && e.fence == was.fence
                && e.mode == "shared"
                && e.ttl <= was.ttl + 2
                && e.ttl >= was.ttl - took,
            "moved {was:?} is {e:?} ({took} ms later)"
        );
    }
    assert!(
        i.mode == "shared"
            && i.holders == 3
            && i.fence == refenced
            && i.ttl == after.iter().map(|e| e.ttl).max().unwrap(),
        "LOCK.INFO {i:?} of {after:?}"
    );
    // The moved holds are the lock's on the second server: a new hold is fenced above them.
    let r = cmd!(&mut b, "LOCK.ACQUIRE", "k", "r4", 10_000, "SHARED");
    assert!(
        matches!(r, Ok(Value::Int(f)) if f > refenced),
        "a new shared hold after the move: {r:?}"
    );
}

/// A version-1 payload (three fields under the type id of encoding version 1, as the module
/// dumped them before version 2) still restores, its deadline read as absolute Unix ms; and
/// the lock then dumps as version 3.
#[test]
fn version_1_payloads_still_restore_with_an_absolute_deadline() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"tok"], 60_000, false);
    let fmt = format_of(&s);
    let fence0 = s.v3().2;
    let v1 = |deadline: i64, fence: u64| {
        let body = fmt.body(1, Layout::V1(Hold::new("tok", deadline, fence)));
        (fmt.payload(&body), body)
    };
    let now = now_ms();
    let hour = 3_600_000;
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
        let (payload, body) = v1(deadline, fence);
        let expect = rules(&body, now_ms());
        f.what = format!("version 1, deadline {deadline} (now {now}), fence {fence}");
        f.restore("k", &payload, Some(&expect));
    }
    // A version-1 lock dumps as version 3, with its lease as time left.
    let (payload, _) = v1(now_ms() + 30_000, fence0);
    let c = &mut f.con;
    assert_eq!(
        cmd!(c, "RESTORE", "v1", 0, payload.as_slice()),
        Ok(Value::Okay)
    );
    let d = Dump::read(&dump::dump(c, "v1"));
    let (saved_at, mode, last, holds) = d.v3();
    let left = holds[0].deadline - saved_at;
    assert!(
        mode == EXCLUSIVE
            && last == fence0
            && holds.len() == 1
            && holds[0].token == b"tok"
            && holds[0].fence == fence0
            && (28_000..=30_001).contains(&left),
        "a version-1 lock with 30 s left dumped with {left} ms left: {d:?}"
    );
}

/// What a fresh key's fence says of the fence issuer after a refusal: the next one above
/// `last`, at the clock floor (nothing of the refused payload's fences is left in it).
fn fresh_fence_after(c: &mut redis::Connection, last: i64, what: &str) -> i64 {
    let n = acquire(c, "fresh", "a", 10_000).unwrap();
    let floor = |ms: i64| (ms as u64) << 11;
    assert!(
        n > last && (n as u64) < floor(now_ms() + 60_000),
        "after refusing {what}: a fresh key got {n} (before: {last})"
    );
    assert_eq!(release(c, "fresh", "a"), 1);
    n
}

/// Version-3 payloads that break one rule each, all with valid checksums and otherwise
/// sane holds whose fences are an hour of floor ahead of the clock: each is refused (an
/// `ERR`), leaves no key and nothing in the fence issuer, and the server stays up.
#[test]
fn version_3_payloads_that_break_a_rule_are_refused() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let now = now_ms();
    let far = ((now + 3_600_000) as u64) << 11;
    let hold = |t: &str, left: i64, fence: u64| Hold::new(t, now + left, fence);
    let three = || {
        vec![
            hold("a", 20_000, far),
            hold("b", 40_000, far + 2),
            hold("c", 30_000, far + 1),
        ]
    };
    let v3 = |mode, last, count, holds| {
        fmt.body(
            3,
            Layout::V3 {
                saved_at: now,
                mode,
                last_fence: last,
                count,
                holds,
            },
        )
    };
    let cases: Vec<(&str, LockBody)> = vec![
        ("mode 2", v3(2, far + 2, 3, three())),
        ("mode 2^64-1", v3(u64::MAX, far + 2, 3, three())),
        ("count 0, no holds", v3(SHARED, far, 0, vec![])),
        ("count 0, holds after it", v3(SHARED, far + 2, 0, three())),
        (
            "exclusive, 2 holds",
            v3(EXCLUSIVE, far + 2, 2, three()[..2].to_vec()),
        ),
        ("exclusive, 3 holds", v3(EXCLUSIVE, far + 2, 3, three())),
        (
            "a hold's fence above the last",
            v3(SHARED, far + 1, 3, three()),
        ),
        (
            "a list cut short",
            v3(SHARED, far + 2, 3, three()[..2].to_vec()),
        ),
        ("a list with no holds", v3(SHARED, far + 2, 3, vec![])),
        ("count 2^32", v3(SHARED, far + 2, 1 << 32, three())),
        ("count 2^64-1", v3(SHARED, far + 2, u64::MAX, three())),
        ("count 2^63", v3(SHARED, far + 2, 1 << 63, three())),
        ("an empty token", {
            let mut h = three();
            h[1].token.clear();
            v3(SHARED, far + 2, 3, h)
        }),
        ("a token of 257 bytes", {
            let mut h = three();
            h[2].token = vec![b'z'; MAX_TOKEN + 1];
            v3(SHARED, far + 2, 3, h)
        }),
        ("a token of 4,096 bytes", {
            let mut h = three();
            h[0].token = vec![b'z'; 4_096];
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease of ten years and 1 ms", {
            let mut h = three();
            h[1].deadline = now + MAX_LEFT_MS + 1;
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease of 2^62 ms", {
            let mut h = three();
            h[2].deadline = now + (1 << 62);
            v3(SHARED, far + 2, 3, h)
        }),
        ("a lease whose deadline - saved_at overflows", {
            let mut h = three();
            h[0].deadline = i64::MIN + 5;
            v3(SHARED, far + 2, 3, h)
        }),
        ("a hold's fence 0", {
            let mut h = three();
            h[2].fence = 0;
            v3(SHARED, far + 2, 3, h)
        }),
        (
            "a last fence above 2^53-1-2^32",
            v3(SHARED, TOP + 1, 3, three()),
        ),
        ("a last fence and a hold's above 2^53-1-2^32", {
            let mut h = three();
            h[1].fence = TOP + 1;
            v3(SHARED, TOP + 1, 3, h)
        }),
        ("version 3's values under version 2's id", {
            v3(SHARED, far + 2, 3, three()).with_encver(2)
        }),
        ("version 2's values under version 3's id", {
            let hold = hold("a", 20_000, far);
            fmt.body(
                2,
                Layout::V2 {
                    hold,
                    saved_at: now,
                },
            )
            .with_encver(3)
        }),
        ("version 3's values under version 4's id", {
            v3(SHARED, far + 2, 3, three()).with_encver(4)
        }),
    ];
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    for (what, body) in &cases {
        assert_eq!(
            rules(body, now),
            Expect::Refused,
            "{what}: this file's rules"
        );
        let c = &mut f.con;
        let r = cmd!(c, "RESTORE", "k", 0, fmt.payload(body).as_slice());
        assert!(
            r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
            "{what}: RESTORE replied {r:?}"
        );
        assert!(!exists(c, "k"), "{what}: a refused RESTORE left the key");
        last = fresh_fence_after(c, last, what);
    }
    // The same holds under a valid header load, as a check of the cases.
    let c = &mut f.con;
    let body = v3(SHARED, far + 2, 3, three());
    assert!(matches!(rules(&body, now), Expect::Loaded(_)));
    let r = cmd!(c, "RESTORE", "k", 0, fmt.payload(&body).as_slice());
    assert_eq!(r, Ok(Value::Okay));
    let got = dump::holders(c, "k").expect("the sane lock");
    assert_eq!(
        got.iter().map(|h| h.fence as u64).collect::<Vec<_>>(),
        [far, far + 2, far + 1]
    );
    f.server.assert_alive();
}

/// Values after a lock's last one (a hold more than version 3's count, a value after
/// version 2's save time): the module reads the lock it expects, and Redis then refuses the
/// payload for the value where the EOF opcode should be. That refusal must cost nothing
/// either (README guarantee 6): no key, and nothing of the payload's fences (an hour of floor
/// ahead of the clock) left in the fence issuer.
#[test]
fn values_after_the_last_one_are_refused_and_leave_no_fence_behind() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let now = now_ms();
    // Each case's fences are its own hours of floor ahead of the clock.
    let far = |hours: i64| ((now + hours * 3_600_000) as u64) << 11;
    let holds = vec![
        Hold::new("a", now + 20_000, far(1)),
        Hold::new("b", now + 40_000, far(1) + 1),
    ];
    let counted_one = fmt.body(
        3,
        Layout::V3 {
            saved_at: now,
            mode: SHARED,
            last_fence: far(1) + 1,
            count: 1,
            holds,
        },
    );
    // Version 2 with one more unsigned value before the EOF.
    let hold = Hold::new("a", now + 20_000, far(2));
    let mut v2 = fmt
        .body(
            2,
            Layout::V2 {
                hold,
                saved_at: now,
            },
        )
        .encode();
    v2.pop();
    v2.extend([OP_UINT, 5, OP_EOF]);
    let cases = [
        (
            "version 3, a hold more than counted",
            counted_one.encode(),
            far(1),
        ),
        ("version 2, a value after the save time", v2, far(2)),
    ];
    let c = &mut f.con;
    let mut last = acquire(c, "fresh", "a", 10_000).unwrap();
    assert_eq!(release(c, "fresh", "a"), 1);
    let mut lingered = Vec::new();
    for (what, body, fences) in cases {
        let r = cmd!(
            c,
            "RESTORE",
            "k",
            0,
            with_trailer(&body, fmt.rdb_version).as_slice()
        );
        assert!(
            r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
            "{what}: RESTORE replied {r:?}"
        );
        assert!(!exists(c, "k"), "{what}: a refused RESTORE left the key");
        let n = acquire(c, "fresh", "a", 10_000).unwrap();
        assert_eq!(release(c, "fresh", "a"), 1);
        if !(n > last && (n as u64) < fences) {
            lingered.push(format!(
                "{what}: a fresh key then got {n} (before: {last}; the payload's fences from \
                 {fences})"
            ));
        }
        last = n;
    }
    assert!(
        lingered.is_empty(),
        "refused payloads left fences behind: {lingered:#?}"
    );
}

/// A token holds a key once (`LOCK.ACQUIRE` of a token that holds it renews that hold), so
/// a version-3 payload with one token in two holds is not a lock the module could have
/// saved: it is refused, as other impossible values are.
#[test]
fn a_token_holds_a_lock_once() {
    let mut f = Fuzz::new();
    let s = sample(&mut f.con, &[b"a", b"b"], 60_000, true);
    let fmt = format_of(&s);
    let (_, _, last, holds) = s.v3();
    let now = now_ms();
    let mut holds = holds.to_vec();
    holds.push(Hold {
        deadline: now + 50_000,
        ..holds[0].clone()
    });
    let payload = fmt.v3(SHARED, last, now, holds);
    let c = &mut f.con;
    let r = cmd!(c, "RESTORE", "k", 0, payload.as_slice());
    let got = dump::holders(c, "k");
    assert!(
        r.as_ref().is_err_and(|e| e.starts_with("ERR ")),
        "RESTORE of a lock held twice by token a replied {r:?}; LOCK.HOLDERS: {got:?}"
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
