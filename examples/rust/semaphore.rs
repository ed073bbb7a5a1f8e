//! A semaphore of 2 permits: six workers call a rate-limited API, never more than two at a
//! time; the others queue first come, first served and are granted the moment a permit comes
//! back. Every permit is a hold of its own, with its own token, lease and fence.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::thread::{scope, sleep};
use std::time::Duration;

use redis_lock_client::{Error, Semaphore};

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = redis::Client::open(url)?;
    // Every user of the key passes the same number of permits.
    let api_calls = Semaphore::new(client, "example:api-calls", 2).ttl(Duration::from_secs(10));
    let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0)); // in this process only
    let tokens = std::sync::Mutex::new(HashSet::new());

    scope(|s| {
        let call_api = || -> Result<(), Error> {
            let permit = api_calls.acquire()?; // waits up to 10 s in the key's queue
            tokens.lock().unwrap().insert(permit.token().to_string());
            most.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
            sleep(Duration::from_millis(100)); // the call itself
            running.fetch_sub(1, SeqCst);
            Ok(()) // `permit` dropped: released, and the next in the queue granted
        };
        let workers: Vec<_> = (0..6).map(|_| s.spawn(call_api)).collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })?;
    let (most, distinct) = (most.into_inner(), tokens.into_inner().unwrap().len());
    println!("6 calls, at most {most} at a time, {distinct} distinct permits");
    assert!(most == 2 && distinct == 6, "two at a time, each its own");

    // With both permits taken, a third caller that will not wait is turned away at once.
    let (a, b) = (api_calls.acquire()?, api_calls.acquire()?);
    let holders = api_calls.holders()?;
    let shown: Vec<_> = holders.iter().map(|h| (&h.token[..8], h.mode)).collect();
    println!("holders: {shown:?}");
    let at_once = api_calls.clone().wait(Duration::ZERO); // zero: ask once, do not queue
    match at_once.acquire() {
        Err(Error::Timeout) => println!("third caller: not granted"),
        other => panic!("a third permit must not be granted, got {other:?}"),
    }
    a.release()?;
    let c = at_once.acquire()?; // a permit came back
    assert_eq!(api_calls.holders()?.len(), 2, "still two holders");
    drop((b, c));
    println!("ok");
    Ok(())
}
