//! Crashes right after fences ran as far ahead of the clock as the bucket lets them: a
//! burst at full rate then SIGKILL, and the first fence asked for as soon as the server is
//! back. Nothing saved knows the burst; every later fence must still be above it.

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::bursts::{
    error_count, fences_in_one_script, fences_issued, peak_rate, settle_fences, Benchmark,
    Pipeliner,
};
use crate::clock::{floor, lead_ms, now_ms, server_time_us};
use crate::cmd;
use crate::common::*;
use crate::raw_replies::read_lines;
use crate::retries::{acquire_ready, fence_ready};
use crate::{BUCKET, BURST_MS, CLOCK_SLACK_MS, SLOTS_PER_MS, START_GUARD, TRYAGAIN};
use redis::Value;

/// A burst of `LOCK.FENCE` at the highest rate 8 pipelining connections reach, after an RDB
/// was saved: whatever of it the bucket refuses is answered `TRYAGAIN`, and no fence is more
/// than 8 ms of floor ahead of the server's clock read right after it. Then SIGKILL and a
/// restart from that older RDB: every fence after it is above every fence acknowledged
/// before the crash, for the same key and for a fresh one. Then a burst from
/// `redis-benchmark`, SIGKILL and a restart with no RDB at all, where only the clock floor
/// (and the pacing that keeps fences near it) can keep fences apart.
#[test]
fn a_burst_at_full_rate_then_sigkill_never_reissues_a_fence() {
    let mut s = Server::new();
    let mut c = s.conn();
    let f0 = acquire_ready(&mut c, "fk", "tok", 600_000);
    assert_eq!(cmd!(&mut c, "SAVE"), Ok(Value::Okay));

    let (fences0, tryagain0) = (fences_issued(&mut c), error_count(&mut c, "TRYAGAIN"));
    let t = Instant::now();
    let p = Pipeliner::start(s.port, "fk", "tok");
    let peak = peak_rate(&mut c, Duration::from_secs(5));
    let acked = p.stop();
    let took = t.elapsed();
    let issued = settle_fences(&mut c) - fences0;
    let tryagain = error_count(&mut c, "TRYAGAIN") - tryagain0;
    let max = info(&mut c, "fk").expect("fk").fence;
    let read_at = server_time_us(&mut c) / 1000;
    eprintln!(
        "burst ({} connections, {} deep): {issued} fences in {took:.1?} ({:.0}/s on average, \
         {peak:.0}/s at the peak over 250 ms), {tryagain} TRYAGAIN replies; highest fence \
         acknowledged {}, at most {:.2} ms of floor ahead of TIME right after it",
        Pipeliner::CONNS,
        Pipeliner::DEPTH,
        issued as f64 / took.as_secs_f64(),
        acked.max,
        acked.lead as f64 / SLOTS_PER_MS as f64
    );
    assert!(
        acked.other.is_empty(),
        "other replies: {:?}",
        &acked.other[..1]
    );
    assert_eq!(
        (acked.fences, acked.tryagain),
        (issued, tryagain),
        "replies read vs the server's counts"
    );
    assert_eq!(
        acked.max, max,
        "the highest fence acknowledged is the key's last"
    );
    assert!(issued > 50_000, "the burst issued only {issued} fences");
    // Fences keep to the clock: none is more than the bucket's 8 ms of floor ahead of the
    // server's clock when it was issued, read here by the TIME after each batch (which comes
    // after the batch's fences, so it reads a clock no earlier than theirs).
    let (fence, at) = acked.lead_at;
    assert!(
        acked.lead < (BURST_MS + CLOCK_SLACK_MS) * SLOTS_PER_MS,
        "fence {fence} was {:.2} ms of floor ahead of the server's clock ({at}) right after \
         it; the bucket allows {BURST_MS}",
        lead_ms(fence, at)
    );
    assert!(
        max < floor(read_at + BURST_MS + CLOCK_SLACK_MS),
        "the last fence {max} is {:.2} ms of floor ahead of TIME read after the burst",
        lead_ms(max, read_at)
    );

    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    let i = info(&mut c, "fk").expect("fk from the RDB");
    assert_eq!(
        (i.fence, i.holder.as_deref()),
        (f0, Some(&b"tok"[..])),
        "the RDB saved before the burst"
    );
    let next = fence_ready(&mut c, "fk", "tok");
    assert!(
        next > max,
        "after the restart fk got fence {next}, but {max} was acknowledged before the crash"
    );
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    assert!(
        fresh > max && fresh > next,
        "a fresh key got fence {fresh}, but {max} was acknowledged before the crash"
    );

    // redis-benchmark, then nothing on disk: the floor alone.
    let (fences0, tryagain0) = (fences_issued(&mut c), error_count(&mut c, "TRYAGAIN"));
    let b = Benchmark::start(s.port, "fk", "tok");
    let bench_peak = peak_rate(&mut c, Duration::from_secs(3));
    drop(b);
    let issued = settle_fences(&mut c) - fences0;
    let tryagain = error_count(&mut c, "TRYAGAIN") - tryagain0;
    let max = info(&mut c, "fk").expect("fk").fence;
    let read_at = server_time_us(&mut c) / 1000;
    eprintln!(
        "redis-benchmark -c 8 -P 50: {issued} fences in 3 s, {bench_peak:.0}/s at the peak, \
         {tryagain} TRYAGAIN replies"
    );
    assert!(
        issued > 1_000,
        "redis-benchmark issued only {issued} fences"
    );
    assert!(
        max < floor(read_at + BURST_MS + CLOCK_SLACK_MS),
        "the last fence {max} is {:.2} ms of floor ahead of TIME read after the burst",
        lead_ms(max, read_at)
    );
    drop(c);
    s.kill9();
    let _ = fs::remove_file(s.dir.join("dump.rdb"));
    s.start_again();
    let mut c = s.conn();
    assert!(!exists(&mut c, "fk"), "nothing was to be loaded");
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    let again = acquire_ready(&mut c, "fk", "tok", 60_000);
    assert!(
        fresh > max && again > fresh,
        "with no RDB, fences {fresh} and {again} after the crash, but {max} was acknowledged \
         before it"
    );
    eprintln!(
        "restart with no RDB: the first fence is {:.1} ms of floor above the highest before",
        (fresh - max) as f64 / SLOTS_PER_MS as f64
    );
}

/// Right after a restart, the first command that asks for a fence (sent as soon as the
/// server accepts connections, so that the server runs it as soon as it runs anything) is
/// either refused with `TRYAGAIN` (no fence until 9 ms after the module loaded) or given a
/// fence above every fence acknowledged before the crash; a retry a few milliseconds later
/// gets a fence, above them too. (The module spends those 9 ms while it loads, so the first
/// command should get a fence; `TRYAGAIN` would be as correct.) Nothing is saved: only the
/// clock floor and that wait keep the fences apart. Before each crash, fences go as far
/// ahead of the clock as they can: in every third round a script takes a full bucket and the
/// server is killed right after its reply (8 ms of floor ahead of the time the script was
/// judged by, but the script itself takes longer than that); in the others 8 connections
/// pipeline `LOCK.FENCE` as fast as the server answers, and the server is killed as soon as
/// a batch gets `TRYAGAIN` (where the server outruns 512 fences a millisecond, as here,
/// the bucket empties and fences are nearly 8 ms ahead of the real clock at the kill, about
/// as long as the restart takes without the wait).
#[test]
fn right_after_a_restart_no_fence_is_below_one_from_before_the_crash() {
    const ROUNDS: usize = 9;
    let mut s = Server::new();
    let mut c = s.conn();
    let mut refused_first = 0;
    for round in 0..ROUNDS {
        let k = format!("k{round}");
        acquire_ready(&mut c, &k, "tok", 600_000);
        // The bucket is full again.
        sleep(Duration::from_millis(20));
        let (max, burst) = if round % 3 == 0 {
            let b = fences_in_one_script(&mut c, &k, "tok", 20_000);
            assert!(b.got >= BUCKET, "{b:?}");
            drop(c);
            s.kill9();
            let burst = format!(
                "a script of {} fences up to {}, {:.2} ms of floor ahead of TIME when it began, \
                 {} ms long",
                b.got,
                b.last,
                lead_ms(b.last, b.began_ms),
                b.took_ms()
            );
            (b.last, burst)
        } else {
            // Killed by the connection whose batch first gets TRYAGAIN, or else after 2 s.
            let pid = info_field(&mut c, "server", "process_id").expect("process_id");
            let p = Pipeliner::start_killing(s.port, &k, "tok", pid.parse().ok());
            wait_until(Duration::from_secs(2), || p.killed_at().is_some());
            p.halt();
            s.kill9();
            let killed_at = p.killed_at();
            let killed_at_ms = killed_at.unwrap_or_else(now_ms);
            drop(c);
            let a = p.stop();
            assert!(a.other.is_empty(), "other replies: {:?}", &a.other[..1]);
            let burst = format!(
                "{} fences pipelined and {} TRYAGAIN, killed {}; the last acknowledged {} \
                 ({:.2} ms of floor ahead of the clock at the kill; at most {:.2} ahead of TIME \
                 after a batch)",
                a.fences,
                a.tryagain,
                if killed_at.is_some() {
                    "at the first TRYAGAIN"
                } else {
                    "after 2 s"
                },
                a.max,
                lead_ms(a.max, killed_at_ms),
                a.lead as f64 / SLOTS_PER_MS as f64
            );
            (a.max, burst)
        };
        let t = Instant::now();
        let (first, sent) =
            ask_as_soon_as_it_restarts(&mut s, &["LOCK.ACQUIRE", "first", "f", "60000"]);
        eprintln!(
            "round {round}: {burst}; after SIGKILL the first LOCK.ACQUIRE, sent {sent:.1?} after \
             the restart began ({:.1?} to be ready), got {first:?}",
            t.elapsed(),
        );
        let mut above = max;
        match first.strip_prefix(':') {
            Some(f) => {
                let f: i64 = f.parse().unwrap();
                assert!(
                    f > max,
                    "the first fence after the restart is {f}, but {max} was acknowledged \
                     before the crash ({:.2} ms of floor below it)",
                    (max - f) as f64 / SLOTS_PER_MS as f64
                );
                above = f;
            }
            None => {
                assert_eq!(first, format!("-{TRYAGAIN}"), "the first LOCK.ACQUIRE");
                refused_first += 1;
            }
        }
        sleep(START_GUARD);
        c = s.conn();
        let again = acquire(&mut c, "again", "a", 60_000);
        assert!(
            again.is_some_and(|f| f > above),
            "a retry {START_GUARD:?} after the first answer got {again:?}; {max} was \
             acknowledged before the crash, {above} after"
        );
        assert_eq!(release(&mut c, "again", "a"), 1);
    }
    eprintln!("{refused_first} of {ROUNDS} first LOCK.ACQUIREs after a restart got TRYAGAIN");
}

/// Starts the (stopped) server again, and sends `args` on a connection made as soon as the
/// server accepts one: the reply's one line, and when the command was sent (after the start
/// began).
fn ask_as_soon_as_it_restarts(s: &mut Server, args: &[&str]) -> (String, Duration) {
    let port = s.port;
    let request = resp_command(args);
    let t0 = Instant::now();
    let asker = std::thread::spawn(move || {
        let deadline = t0 + Duration::from_secs(20);
        let mut conn = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(conn) => break conn,
                Err(e) if Instant::now() > deadline => panic!("cannot connect: {e}"),
                Err(_) => sleep(Duration::from_micros(100)),
            }
        };
        conn.set_nodelay(true).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn.write_all(&request).expect("write");
        let sent = t0.elapsed();
        let line = read_lines(&mut conn, &mut Vec::new(), 1).remove(0);
        (String::from_utf8(line).unwrap(), sent)
    });
    s.start_again();
    asker.join().expect("the asking thread failed")
}
