//! The pacing every fence guarantee rests on: a burst takes at most a full bucket (8 ms of
//! floor) ahead of the clock, then `TRYAGAIN`, in a script and in `MULTI`/`EXEC`; and a
//! grant to a waiter with the bucket empty waits for the next millisecond.

use std::io::Write;
use std::net::TcpStream;
use std::thread::sleep;
use std::time::Duration;

use crate::bursts::fences_in_one_script;
use crate::clock::{floor, lead_ms};
use crate::cmd;
use crate::common::*;
use crate::raw_replies::{read_lines, time_lines_ms};
use crate::retries::acquire_ready;
use crate::{BUCKET, BURST_MS, CLOCK_SLACK_MS, EPOCHS, PER_MS, TRYAGAIN};
use redis::Value;

/// A burst takes at most a full bucket of fences (16,384, 8 ms of floor) ahead of the clock,
/// then `TRYAGAIN`: a script of 20,000 `LOCK.FENCE` gets the bucket (plus at most 512 for
/// each millisecond it ran, were its time to move), and its fences stay below the floor 8 ms
/// past the server's clock when it began (the module judges a script's commands by the time
/// it was called); a command a few milliseconds later gets a fence again. The same in
/// `MULTI`/`EXEC`. After a SIGKILL with nothing saved, the first fence is above them all.
#[test]
fn a_burst_takes_at_most_a_bucket_of_fences_ahead_then_tryagain() {
    const N: i64 = 20_000;
    let mut s = Server::new();
    let mut c = s.conn();
    acquire_ready(&mut c, "k", "tok", 600_000);
    sleep(Duration::from_millis(20)); // the bucket is full again
    let b = fences_in_one_script(&mut c, "k", "tok", N as usize);
    let before = b.before_us / 1000;
    eprintln!(
        "one script ({} ms): {} fences ({}..={}, the last {:.2} ms of floor ahead of TIME \
         when it began), {} refused: {:?}",
        b.took_ms(),
        b.got,
        b.first,
        b.last,
        lead_ms(b.last, b.began_ms),
        b.refused,
        b.msg
    );
    assert!(
        (BUCKET..=BUCKET + PER_MS * (b.took_ms() + 1)).contains(&b.got),
        "{} fences in a script of {} ms after the bucket filled",
        b.got,
        b.took_ms()
    );
    assert_eq!(b.got + b.refused, N);
    assert!(b.refused > 0, "no TRYAGAIN: {b:?}");
    assert_eq!(b.msg, TRYAGAIN);
    assert_eq!(b.last - b.first, (b.got - 1) * EPOCHS, "consecutive fences");
    assert!(
        b.first >= floor(before - CLOCK_SLACK_MS),
        "the first fence {} below the floor of TIME before the script ({before})",
        b.first
    );
    assert!(
        b.last < floor(b.began_ms + BURST_MS + CLOCK_SLACK_MS),
        "the last fence {} is {:.2} ms of floor ahead of TIME when the script began",
        b.last,
        lead_ms(b.last, b.began_ms)
    );
    assert_eq!(
        info(&mut c, "k").unwrap().fence,
        b.last,
        "a refusal changed the lock"
    );
    sleep(Duration::from_millis(3));
    let next = fence(&mut c, "k", "tok").unwrap();
    assert!(next > b.last, "{next} after {}", b.last);

    // The same in MULTI/EXEC (on a plain socket, pipelined: the client library turns an
    // EXEC reply with errors in it into an error), between two TIMEs, and with a TIME
    // first in the transaction.
    sleep(Duration::from_millis(20));
    let mut raw = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = resp_command(&["TIME"]);
    req.extend(resp_command(&["MULTI"]));
    req.extend(resp_command(&["TIME"]));
    req.extend(resp_command(&["LOCK.FENCE", "k", "tok"]).repeat(N as usize));
    req.extend(resp_command(&["EXEC"]));
    req.extend(resp_command(&["TIME"]));
    let writer = {
        let mut w = raw.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&req).expect("write"))
    };
    let mut buf = Vec::new();
    let before = time_lines_ms(&read_lines(&mut raw, &mut buf, 5));
    let queued = read_lines(&mut raw, &mut buf, 2 + N as usize);
    assert!(queued[0] == b"+OK" && queued[1..].iter().all(|l| l == b"+QUEUED"));
    let exec = read_lines(&mut raw, &mut buf, 1 + 5 + N as usize);
    let after = time_lines_ms(&read_lines(&mut raw, &mut buf, 5));
    writer.join().unwrap();
    assert_eq!(exec[0], format!("*{}", N + 1).as_bytes());
    let began = time_lines_ms(&exec[1..6]);
    let (mut fences, mut refused) = (Vec::new(), Vec::new());
    for l in &exec[6..] {
        let l = String::from_utf8_lossy(l);
        match l.strip_prefix(':') {
            Some(f) => fences.push(f.parse::<i64>().unwrap()),
            None => refused.push(l.strip_prefix('-').expect("an error").to_string()),
        }
    }
    let took = after - before + 1;
    eprintln!(
        "one EXEC (within {took} ms): {} fences, the last {:.2} ms of floor ahead of TIME \
         when it began, {} refused",
        fences.len(),
        lead_ms(*fences.last().unwrap(), began),
        refused.len()
    );
    assert!(
        (BUCKET..=BUCKET + PER_MS * (took + 1)).contains(&(fences.len() as i64)),
        "{} fences in one EXEC of at most {took} ms",
        fences.len()
    );
    assert!(!refused.is_empty(), "no TRYAGAIN in one EXEC");
    assert!(
        refused.iter().all(|e| e == TRYAGAIN),
        "{:?}",
        refused.first()
    );
    assert!(
        fences.windows(2).all(|w| w[1] == w[0] + EPOCHS) && fences[0] > next,
        "consecutive fences, above the last before"
    );
    assert!(fences[0] >= floor(before - CLOCK_SLACK_MS));
    let max = *fences.last().unwrap();
    assert!(
        max < floor(began + BURST_MS + CLOCK_SLACK_MS),
        "the last fence {max} is {:.2} ms of floor ahead of TIME when EXEC began",
        lead_ms(max, began)
    );

    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    let fresh = acquire_ready(&mut c, "fresh", "f", 60_000);
    assert!(
        fresh > max,
        "after SIGKILL with nothing saved: {fresh}, but {max} was issued before"
    );
}

/// A grant to a waiter while the bucket is empty waits for the next millisecond: the lock
/// stays free (a newcomer meanwhile gets null or `TRYAGAIN`, never the lock), and the waiter
/// then gets a fence above the burst's.
#[test]
fn a_grant_with_the_bucket_empty_waits_for_the_next_millisecond() {
    let s = Server::new();
    let mut c = s.conn();
    acquire_ready(&mut c, "k", "tok", 600_000);
    acquire_ready(&mut c, "g", "holder", 600_000);
    let mut w = Waiter::join(&s, "g", "waiter", 60_000, 10_000);
    // Once the bucket is full again, fences until it is empty (the last LOCK.FENCE
    // refused), then the release.
    sleep(Duration::from_millis(20));
    const SCRIPT: &str = r#"
        local last, got, r = 0, 0, nil
        for i = 1, 40000 do
            r = redis.pcall('LOCK.FENCE', KEYS[1], 'tok')
            if type(r) == 'number' then
                last = r
                got = got + 1
            elseif got > 0 then
                break
            end
        end
        if type(r) ~= 'table' then return redis.error_reply('no refusal after 40000') end
        local refusal = r.err
        local released = redis.call('LOCK.RELEASE', KEYS[2], 'holder')
        local after_release = redis.call('LOCK.INFO', KEYS[2])
        local barger = redis.pcall('LOCK.ACQUIRE', KEYS[2], 'barger', 1000)
        if type(barger) == 'table' and barger.err then barger = barger.err
        elseif barger == false then barger = 'null'
        else barger = 'fence ' .. tostring(barger) end
        return {last, got, refusal, released, after_release, barger}
    "#;
    let v = cmd!(&mut c, "EVAL", SCRIPT, 2, "k", "g").unwrap();
    let Value::Array(items) = v else {
        panic!("{v:?}")
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{other:?}"),
    };
    let (last, got, released) = match (&items[0], &items[1], &items[3]) {
        (Value::Int(l), Value::Int(g), Value::Int(r)) => (*l, *g, *r),
        other => panic!("{other:?}"),
    };
    let (refusal, barger) = (text(&items[2]), text(&items[5]));
    let after_release = parse_info(&items[4]).expect("g after the release");
    eprintln!("{got} fences up to {last}, then {refusal:?}; a newcomer got {barger:?}");
    assert!(got >= BUCKET, "{got} fences before the bucket was empty");
    assert_eq!(refusal, TRYAGAIN);
    assert_eq!(released, 1);
    assert_eq!(
        (after_release.holder, after_release.waiters),
        (None, 1),
        "right after the release with the bucket empty, the lock is free and the waiter waits"
    );
    assert!(
        barger == "null" || barger == TRYAGAIN,
        "a newcomer with the bucket empty got {barger:?} while a waiter was queued"
    );
    let granted = w.reply().expect("the waiter is granted the lock");
    assert!(granted > last, "grant {granted} after {last}");
    let i = info(&mut c, "g").unwrap();
    assert_eq!(
        (i.holder.as_deref(), i.fence),
        (Some(&b"waiter"[..]), granted)
    );
}
