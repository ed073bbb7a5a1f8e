//! Scripts and transactions (point 4 of the crate doc): inside a script or `MULTI`/`EXEC` a
//! lease is judged at the time the unit began, as the server judges key expiry there; the next
//! command, script or transaction judges at its own time.

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Value;

use crate::cmd;
use crate::common::*;

/// Holds `key` for `holder`, then in one script: `LOCK.INFO`, `LOCK.ACQUIRE … other`, a
/// busy wait on `TIME` past the lease's end, `LOCK.ACQUIRE … other` again and `LOCK.INFO`.
const SPANNING_SCRIPT: &str = r#"
local k, other = KEYS[1], ARGV[1]
local before = redis.call('LOCK.INFO', k)
if not before then return {'ended-before-start'} end
local ttl = before[6]
local first = redis.call('LOCK.ACQUIRE', k, other, 1000)
local t = redis.call('TIME')
local t0 = t[1] * 1000000 + t[2]
local spun = 0
repeat
  t = redis.call('TIME')
  spun = t[1] * 1000000 + t[2] - t0
until spun >= (ttl + 40) * 1000
local second = redis.call('LOCK.ACQUIRE', k, other, 1000)
local after = redis.call('LOCK.INFO', k)
return {'ran', first or 'null', second or 'null', after or 'null', ttl, math.floor(spun / 1000)}
"#;

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn a_script_judges_a_lease_at_the_time_it_began() {
    let s = Server::new();
    let mut c = s.conn();
    for attempt in 0..5 {
        let key = format!("k{attempt}");
        acquire(&mut c, &key, "holder", 100).unwrap();
        sleep(Duration::from_millis(60));
        let started = Instant::now();
        let v = cmd!(&mut c, "EVAL", SPANNING_SCRIPT, 1, &key, "other").expect("EVAL");
        let took = started.elapsed();
        let items = match v {
            Value::Array(items) => items,
            other => panic!("EVAL: {other:?}"),
        };
        if text(&items[0]) == "ended-before-start" {
            eprintln!("attempt {attempt}: the lease ended before the script began; again");
            continue;
        }
        assert_eq!(text(&items[0]), "ran");
        let (ttl, spun) = match (&items[4], &items[5]) {
            (Value::Int(t), Value::Int(s)) => (*t, *s),
            other => panic!("{other:?}"),
        };
        assert!(spun >= ttl + 40, "the script spun {spun} ms");
        assert_eq!(
            text(&items[1]),
            "null",
            "LOCK.ACQUIRE by another token at the script's start"
        );
        assert_eq!(
            text(&items[2]),
            "null",
            "LOCK.ACQUIRE by another token {spun} ms into a script that began {ttl} ms before \
             the lease's end: the lease must be judged at the script's start"
        );
        let after = parse_info(&items[3]).expect("LOCK.INFO inside the script, after the wait");
        assert_eq!(
            after.holder.as_deref(),
            Some(&b"holder"[..]),
            "{:?}",
            Lock(after.clone())
        );
        assert_eq!(
            after.ttl,
            ttl,
            "the ttl inside the script moved: {:?}",
            Lock(after.clone())
        );
        // Outside it, time moved on: the lease has ended.
        assert!(
            acquire(&mut c, &key, "other", 1000).is_some(),
            "after the script ({took:?}), another token cannot acquire an ended lease"
        );
        return;
    }
    panic!("the machine is too slow: in 5 attempts no script began within a 100 ms lease");
}

#[test]
fn a_transaction_judges_a_lease_at_the_time_exec_began() {
    let s = Server::new();
    let mut c = s.conn();
    for attempt in 0..5 {
        let key = format!("k{attempt}");
        let sent = Instant::now();
        acquire(&mut c, &key, "holder", 200).unwrap();
        sleep(Duration::from_millis(80));
        let items = exec(
            &mut c,
            &[
                args(&["LOCK.INFO", &key]),
                args(&["LOCK.ACQUIRE", &key, "other", "1000"]),
                args(&["DEBUG", "SLEEP", "0.3"]),
                args(&["LOCK.ACQUIRE", &key, "other", "1000"]),
                args(&["LOCK.INFO", &key]),
            ],
        );
        let Some(before) = parse_info(&items[0]) else {
            eprintln!("attempt {attempt}: the lease ended before EXEC; again");
            continue;
        };
        assert!(sent.elapsed() > Duration::from_millis(300));
        assert_eq!(
            items[1],
            Value::Nil,
            "acquire by another token at EXEC's start"
        );
        assert_eq!(
            items[3],
            Value::Nil,
            "acquire by another token 300 ms into an EXEC that began while the 200 ms lease \
             was held: the lease must be judged at EXEC's start"
        );
        let after = parse_info(&items[4]).expect("LOCK.INFO at the end of EXEC");
        assert_eq!(after.holder, before.holder);
        assert_eq!(after.ttl, before.ttl, "ttl moved inside EXEC");
        assert!(
            acquire(&mut c, &key, "other", 1000).is_some(),
            "after EXEC, another token cannot acquire an ended lease"
        );
        return;
    }
    panic!("the machine is too slow: in 5 attempts no EXEC began within a 200 ms lease");
}

/// A unit's start is its own: the next script, transaction or plain command, run right after
/// (pipelined behind a `DEBUG SLEEP` past the lease's end, so that no sweep runs between
/// them and the ended lock is still there), judges at its own time.
#[test]
fn the_next_script_or_command_does_not_reuse_a_units_start() {
    let s = Server::new();
    let mut c = s.conn();
    let info_script = "return redis.call('LOCK.INFO', KEYS[1])";
    let acquire_script = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 1000)";
    let mut findings = Findings::default();
    let mut judged = 0;
    for (case, first_is_exec, then) in [
        ("EVAL then EVAL", false, "eval"),
        ("EVAL then a plain command", false, "plain"),
        ("EXEC then EVAL", true, "eval"),
        ("EXEC then a plain command", true, "plain"),
        ("EVAL then EXEC", false, "exec"),
    ] {
        let key = case.to_string();
        acquire(&mut c, &key, "holder", 100).unwrap();
        let mut p = redis::pipe();
        if first_is_exec {
            p.cmd("MULTI").cmd("LOCK.INFO").arg(&key).cmd("EXEC");
        } else {
            p.cmd("EVAL").arg(info_script).arg(1).arg(&key);
        }
        p.cmd("DEBUG").arg("SLEEP").arg("0.2");
        match then {
            "eval" => {
                p.cmd("EVAL")
                    .arg(acquire_script)
                    .arg(1)
                    .arg(&key)
                    .arg("other");
            }
            "plain" => {
                p.cmd("LOCK.ACQUIRE").arg(&key).arg("other").arg(1000);
            }
            _ => {
                p.cmd("MULTI")
                    .cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg("other")
                    .arg(1000)
                    .cmd("EXEC");
            }
        }
        let replies: Vec<Value> = p.query(&mut c).expect("pipeline");
        let first = if first_is_exec {
            match &replies[2] {
                Value::Array(v) => v[0].clone(),
                other => panic!("{case}: EXEC {other:?}"),
            }
        } else {
            replies[0].clone()
        };
        let held = parse_info(&first).is_some_and(|i| i.holder.is_some());
        if !held {
            eprintln!("{case}: the lease had ended before the first unit; not judged");
            continue;
        }
        judged += 1;
        let last = replies.last().unwrap();
        let last = match (then, last) {
            ("exec", Value::Array(v)) => v[0].clone(),
            (_, v) => v.clone(),
        };
        if !matches!(last, Value::Int(f) if f > 0) {
            findings.fail(format!(
                "{case}: 200 ms after a 100 ms lease, another token got {last:?}: the first \
                 unit's start time was reused"
            ));
        }
    }
    assert!(
        judged >= 3,
        "only {judged} of 5 cases ran their first unit within the lease"
    );
    findings.done("units after a unit");
}
