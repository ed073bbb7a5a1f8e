//! A read-write lock: two readers hold it together; a writer queues until both release; a
//! reader that comes after the writer waits behind it (readers cannot starve a writer). Only
//! the writer's exclusive hold can guard a write.

use std::thread::{scope, sleep};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock_client::{Error, GuardError, Mode, RwLock};

const LOCK: &str = "{example:catalog}:lock";
const PRICES: &str = "{example:catalog}:prices";

/// Waits until `n` clients are queued for the lock (`LOCK.INFO`'s `waiters`).
fn wait_for_waiters(rw: &RwLock, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rw.info().ok().flatten().map_or(0, |info| info.waiters) < n {
        assert!(Instant::now() < deadline, "{n} clients queued");
        sleep(Duration::from_millis(10));
    }
}

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = redis::Client::open(url)?;
    let _: () = client.get_connection()?.set(PRICES, "v1")?;
    let rw = RwLock::new(client.clone(), LOCK).ttl(Duration::from_secs(10));

    let (r1, r2) = (rw.read()?, rw.read()?); // two shared holds at once
    let info = rw.info()?.expect("held");
    let fences = (r1.fence(), r2.fence());
    println!(
        "held {:?} by {}; fences {fences:?}",
        info.mode, info.holders
    );
    assert!(
        info.mode == Mode::Shared && info.holders == 2,
        "two readers"
    );
    match r1.guard::<()>(redis::cmd("SET").arg(PRICES).arg("oops")) {
        Err(GuardError::Fenced(refused)) => println!("reader's write refused: {refused}"),
        other => panic!("a reader's hold must not guard a write, got {other:?}"),
    }
    assert!(!r1.is_lost(), "that refusal does not end the reader's hold");

    let events = std::sync::Mutex::new(Vec::new());
    let log = |event: String| events.lock().unwrap().push(event);
    scope(|s| {
        let writer = s.spawn(|| -> Result<(), Error> {
            let w = rw.write()?;
            log("writer".into());
            w.guard::<()>(redis::cmd("SET").arg(PRICES).arg("v2"))?;
            Ok(()) // `w` dropped: released
        });
        wait_for_waiters(&rw, 1); // the writer queues behind the readers...
        let late_reader = s.spawn(|| -> Result<(), Error> {
            let _r = rw.read()?;
            let prices: String = client.get_connection()?.get(PRICES)?;
            log(format!("late reader read {prices}"));
            Ok(())
        });
        wait_for_waiters(&rw, 2); // ...and the late reader behind the writer
        log("readers release".into());
        r1.release()?;
        r2.release()?;
        writer.join().expect("writer panicked")?;
        late_reader.join().expect("reader panicked")
    })?;
    let events = events.into_inner().unwrap();
    println!("{}", events.join(" -> "));
    let fifo = ["readers release", "writer", "late reader read v2"];
    assert_eq!(events, fifo, "FIFO: the writer first");
    println!("ok");
    Ok(())
}
