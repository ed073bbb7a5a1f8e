//! A mutex with guarded writes: four threads add to one counter, each read-modify-write done
//! under the lock and written through `LOCK.GUARD`. Then a holder that paused past its lease
//! wakes up and writes with its old fence: the server refuses it, and the data is untouched.

use std::thread::{scope, sleep};
use std::time::Duration;

use redis::Commands;
use redis_lock_client::{Error, GuardError, Mutex};

const LOCK: &str = "{example:counter}:lock"; // one hash tag for the lock and its data
const COUNTER: &str = "{example:counter}:value";

fn add_ten(client: &redis::Client, mutex: &Mutex) -> Result<(), Error> {
    let mut con = client.get_connection()?;
    for _ in 0..10 {
        // Waits in the key's FIFO queue; released when `guard` is dropped.
        let guard = mutex.lock()?;
        // Reads need no guard; the write runs only while the guard's fence is current.
        let value: Option<i64> = con.get(COUNTER)?;
        let _: () = guard.guard(redis::cmd("SET").arg(COUNTER).arg(value.unwrap_or(0) + 1))?;
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;
    let _: () = con.del(COUNTER)?;
    // A 10 s lease, which the guard's keep-alive extends every third of it.
    let mutex = Mutex::new(client.clone(), LOCK).ttl(Duration::from_secs(10));

    scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| add_ten(&client, &mutex)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })?;
    let counter: i64 = con.get(COUNTER)?;
    println!("counter: {counter}");
    assert_eq!(counter, 40, "four threads x ten increments make 40");

    // A holder that stops extending (think: a long GC pause) loses its lease; someone else
    // gets the lock, and the sleeper's write, with the fence it was given, is refused.
    let sleeper = Mutex::new(client.clone(), LOCK).ttl(Duration::from_millis(300));
    let sleeper = sleeper.no_keepalive().lock()?;
    sleep(Duration::from_millis(400));
    let next = mutex.lock()?;
    println!(
        "fences: sleeper {}, next holder {}",
        sleeper.fence(),
        next.fence()
    );
    match sleeper.guard::<()>(redis::cmd("SET").arg(COUNTER).arg(0)) {
        Err(GuardError::Fenced(refused)) => println!("late write refused: {refused}"),
        other => panic!("a write under an old fence must be refused, got {other:?}"),
    }
    assert!(next.fence() > sleeper.fence(), "fences only go up");
    drop(next);
    assert_eq!(
        con.get::<_, i64>(COUNTER)?,
        40,
        "the refused write did not run"
    );
    assert!(sleeper.is_lost(), "the sleeper's client saw its lease end");
    assert!(!sleeper.release()?, "nothing left to release");
    println!("ok");
    Ok(())
}
