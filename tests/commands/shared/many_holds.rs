//! Many shared holds on one key (docs/commands.md, *Shared holds*): their leases ending together
//! are ended a batch at a time, so the server keeps answering meanwhile, and every end reaches the
//! replica; a command on a key with many holds costs about what it costs with one.

use std::time::{Duration, Instant};

use crate::common::holds::{stat, tokens};
use crate::common::{replica_pair, run, wait_replicas, wait_until};
use crate::shared::{holds, AT_ONCE};
use redis::{Connection, Value};

const HOLDS: usize = 50_000;

/// `count` shared holds on `key`, then all extended in one transaction: one instant, one
/// deadline. (Fences come at most 2,048 a millisecond, so the grants are paced; extends
/// issue none.)
fn hold_together(c: &mut Connection, key: &str, count: usize, ttl: u64) {
    let token = |i: usize| format!("reader-{i:08}");
    let mut next = 0;
    while next < count {
        let chunk: Vec<usize> = (next..count.min(next + 1_000)).collect();
        let mut p = redis::pipe();
        for &i in &chunk {
            p.cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(token(i))
                .arg(600_000)
                .arg("SHARED");
        }
        let replies: Vec<redis::RedisResult<Value>> = p
            .query::<Vec<Value>>(c)
            .map(|vs| vs.into_iter().map(Ok).collect())
            .unwrap_or_else(|e| vec![Err(e)]);
        // A refused fence (TRYAGAIN) is retried: the chunk goes again from there.
        let granted = replies
            .iter()
            .take_while(|r| matches!(r, Ok(Value::Int(_))))
            .count();
        next += granted;
        if granted < chunk.len() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut p = redis::pipe();
    p.atomic();
    for i in 0..count {
        p.cmd("LOCK.EXTEND").arg(key).arg(token(i)).arg(ttl);
    }
    let extended: Vec<i64> = p.query(c).expect("MULTI of extends");
    assert!(extended.iter().all(|&e| e == 1), "every hold extended");
}

/// 50,000 leases that end at one instant: no PING waits long for them (one turn of the
/// event loop ends at most a batch), all of them end, each counted, and the replica ends
/// with the master.
#[test]
fn fifty_thousand_leases_ending_together_do_not_stall_the_server() {
    let (master, replica) = replica_pair();
    let mut c = master.conn();
    let ends0 = stat(&mut c, "lock_lease_ends");
    let ttl = 2_000;
    let sent = Instant::now();
    hold_together(&mut c, "k", HOLDS, ttl);
    let deadline = sent + Duration::from_millis(ttl);
    assert!(
        Instant::now() + Duration::from_millis(300) < deadline,
        "the holds took too long to make to watch them end"
    );
    assert_eq!(wait_replicas(&mut c, 1, 5_000), Ok(Value::Int(1)));

    let mut ping = master.conn();
    let mut worst = Duration::ZERO;
    let mut gone_at = None;
    let stop = deadline + Duration::from_secs(10);
    while Instant::now() < stop {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut ping).expect("PING");
        if t + Duration::from_millis(100) > deadline {
            worst = worst.max(t.elapsed());
        }
        if t > deadline && !crate::common::exists(&mut ping, "k") {
            gone_at = Some(Instant::now());
            break;
        }
    }
    let gone_at = gone_at.expect("the key is gone once every lease ended");
    println!(
        "{HOLDS} leases: worst PING {worst:?}, key gone {:?} after the deadline",
        gone_at - deadline
    );
    // Ending all 50,000 in one turn took 490 ms; a batch takes about a millisecond.
    assert!(
        worst < Duration::from_millis(100),
        "a PING waited {worst:?}"
    );
    assert_eq!(stat(&mut c, "lock_lease_ends") - ends0, HOLDS as i64);
    assert_eq!(wait_replicas(&mut c, 1, 5_000), Ok(Value::Int(1)));
    let mut r = replica.conn();
    let on_replica = wait_until(AT_ONCE, || !crate::common::exists(&mut r, "k"));
    assert!(
        on_replica,
        "the replica still holds {:?}",
        tokens(&holds(&mut r, "k"))
    );
}

/// Median microseconds of one `LOCK.ACQUIRE … SHARED` + `LOCK.RELEASE` of a fresh token.
fn cycle_us(c: &mut Connection, key: &str, rounds: usize) -> f64 {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|i| {
            let token = format!("cycle-{i}");
            let t = Instant::now();
            let f = run(
                redis::cmd("LOCK.ACQUIRE")
                    .arg(key)
                    .arg(&token)
                    .arg(60_000)
                    .arg("SHARED"),
                c,
            );
            assert!(matches!(f, Ok(Value::Int(_))), "{f:?}");
            let r = run(redis::cmd("LOCK.RELEASE").arg(key).arg(&token), c);
            assert_eq!(r, Ok(Value::Int(1)));
            t.elapsed()
        })
        .collect();
    times.sort();
    times[rounds / 2].as_secs_f64() * 1e6
}

/// A hold joining and leaving 50,000 others costs about what it costs beside one: O(log H),
/// where a walk over the holds made it 120 µs more.
#[test]
fn a_command_beside_fifty_thousand_holds_costs_about_what_it_costs_beside_one() {
    let (master, _replica) = replica_pair();
    let mut c = master.conn();
    hold_together(&mut c, "few", 1, 600_000);
    hold_together(&mut c, "many", HOLDS, 600_000);
    cycle_us(&mut c, "few", 200); // warm
    let few = cycle_us(&mut c, "few", 1_000);
    let many = cycle_us(&mut c, "many", 1_000);
    println!("acquire + release: {few:.1} µs beside 1 hold, {many:.1} µs beside {HOLDS}");
    assert!(many < few * 2.0 + 20.0, "{many:.1} µs against {few:.1} µs");
}
