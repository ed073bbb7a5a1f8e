//! A long job that notices a lost lock. It holds the lock with a 1 s lease that its
//! keep-alive extends every third of a second, and checks the hold between steps. Halfway
//! through, another connection deletes the lock key (as an operator, a FLUSHDB or a failover
//! could): the next extend answers 0, the hold is reported lost, and the job stops. Its late
//! write, under the fence it was given, is refused once another worker holds the lock.

use std::thread::{sleep, spawn};
use std::time::Duration;

use redis::Commands;
use redis_lock_client::{Error, GuardError, LossReason, Mutex};

const LOCK: &str = "{example:report}:lock";
const REPORT: &str = "{example:report}:result";

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;
    let _: () = con.del(REPORT)?;
    let mutex = Mutex::new(client.clone(), LOCK).ttl(Duration::from_secs(1));

    let job = mutex.lock()?;
    let mut other = client.get_connection()?;
    let deleter = spawn(move || {
        sleep(Duration::from_millis(500)); // the lock vanishes 0.5 s into the job
        other.del::<_, ()>(LOCK)
    });
    let mut steps = 0;
    while steps < 30 && !job.is_lost() {
        sleep(Duration::from_millis(100)); // one step of 0.1 s: 30 are three leases long
        steps += 1;
    }
    if !job.is_lost() {
        job.guard::<()>(redis::cmd("SET").arg(REPORT).arg("complete"))?;
    }
    deleter.join().expect("the deleting thread panicked")?;
    let reason = job.signal().reason().expect("the hold is lost");
    println!("stopped after {steps} of 30 steps: {reason}");
    assert!(steps < 30, "the job noticed the loss and stopped");
    assert!(matches!(reason, LossReason::NotHeld), "an extend said 0");

    let next = mutex.lock()?;
    let _: () = next.guard(redis::cmd("SET").arg(REPORT).arg("by the next holder"))?;
    let late = format!("partial: {steps} steps"); // a write that comes too late
    match job.guard::<()>(redis::cmd("SET").arg(REPORT).arg(late)) {
        Err(GuardError::Fenced(refused)) => println!("late write refused: {refused}"),
        other => panic!("the lost job's write must be refused, got {other:?}"),
    }
    drop(next);
    let report: String = con.get(REPORT)?;
    assert_eq!(report, "by the next holder", "the late write did not run");
    println!("ok");
    Ok(())
}
