//! redis-rs: raw-command helpers (`Guarded` and `guarded`, `with_lock`, the `Hold` guard with
//! `read_lock`, `write_lock` and `permit`), private to this file, and the tests that use them in
//! the submodules under it (which see their parent's private items). For Rust, docs/CLIENTS.md
//! shows the client library (clients/rust) instead; these helpers were its raw recipes before
//! it, and `with_lock`'s keep-alive, unlike the library's, does not treat an extend's error or
//! the lease's end as a loss.

mod flow;
mod pattern;
mod shared_holds;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

// --- The recommended pattern, in raw commands ------------------------------------------------

/// What a guarded command came to.
#[derive(Debug, PartialEq)]
enum Guarded<T> {
    /// `fence` was the lock's current fence: the command ran, and this is its reply.
    Ran(T),
    /// The lock is not held under `fence` any more (the server's reason): nothing ran.
    Fenced(String),
}

/// Runs `command` only while `fence` is the current fence of the lock at `lock_key`. A
/// `FENCED` refusal comes back as `Guarded::Fenced`; every other error (the command's own
/// included) stays an `Err`.
fn guarded<T: redis::FromRedisValue>(
    con: &mut impl redis::ConnectionLike,
    lock_key: &str,
    fence: u64,
    command: impl redis::ToRedisArgs,
) -> redis::RedisResult<Guarded<T>> {
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(lock_key).arg(fence).arg(command);
    match cmd.query(con) {
        Ok(reply) => Ok(Guarded::Ran(reply)),
        Err(e) if e.code() == Some("FENCED") => {
            Ok(Guarded::Fenced(e.detail().unwrap_or_default().to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Runs `work(fence, lost)` holding the lock at `key`; `None` if it was still held after
/// 5 s. `lost` turns true if the lease was lost while `work` ran.
fn with_lock<T>(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    work: impl FnOnce(u64, &AtomicBool) -> T,
) -> redis::RedisResult<Option<T>> {
    let token = uuid::Uuid::new_v4().to_string(); // one fresh token per acquisition
    let mut con = client.get_connection()?;
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&token)
        .arg(ttl_ms)
        .arg("WAIT")
        .arg(5_000)
        .query(&mut con)?;
    let Some(fence) = fence else {
        return Ok(None);
    };
    // Where a failover must not lose the lock, have a replica acknowledge it first:
    //   if WAIT 1 100 replies 0: release, then retry or give up
    let lost = AtomicBool::new(false);
    let (stop, stopped) = mpsc::channel::<()>();
    let result = thread::scope(|s| {
        // Extend at a third of the ttl, on a connection of its own; stop once it is gone.
        let (lost, token) = (&lost, &token);
        let keep_alive = s.spawn(move || -> redis::RedisResult<()> {
            let mut con = client.get_connection()?;
            let every = Duration::from_millis(ttl_ms / 3);
            while stopped.recv_timeout(every) == Err(mpsc::RecvTimeoutError::Timeout) {
                let extended: bool = redis::cmd("LOCK.EXTEND")
                    .arg(key)
                    .arg(token)
                    .arg(ttl_ms)
                    .query(&mut con)?;
                if !extended {
                    lost.store(true, Ordering::SeqCst);
                    break;
                }
            }
            Ok(())
        });
        let result = work(fence, lost); // pass the fence with every write to the resource
        drop(stop);
        keep_alive.join().expect("keep-alive thread")?;
        Ok::<T, redis::RedisError>(result)
    });
    let _released: bool = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(&token)
        .query(&mut con)?;
    result.map(Some)
}

// --- Read-write locks and semaphores, in raw commands ----------------------------------------

/// One hold of a lock, on a connection of its own; released when dropped, however the work
/// under it ends.
struct Hold {
    /// The hold's fence: pass it with every write the hold protects.
    fence: u64,
    key: String,
    token: String,
    con: redis::Connection,
}

impl Drop for Hold {
    fn drop(&mut self) {
        // 0 or an error: the lease had ended, or ends on its own.
        let _: redis::RedisResult<bool> = redis::cmd("LOCK.RELEASE")
            .arg(&self.key)
            .arg(&self.token)
            .query(&mut self.con);
    }
}

/// Takes a hold of the lock at `key`: exclusive with no `options`, shared with
/// `&["SHARED"]`, one of n permits with `&["SHARED", "LIMIT", n]`. `None`, and nothing is
/// held, if it is not granted within `wait_ms`. The `WAIT` blocks the hold's connection.
fn hold(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    options: &[&str],
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    let mut con = client.get_connection()?;
    let token = uuid::Uuid::new_v4().to_string(); // one fresh token per hold
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(&token)
        .arg(ttl_ms)
        .arg(options)
        .arg("WAIT")
        .arg(wait_ms)
        .query(&mut con)?;
    Ok(fence.map(|fence| Hold {
        fence,
        key: key.to_string(),
        token,
        con,
    }))
}

/// Shared with the other readers; waits for a writer that holds the lock or queued first.
fn read_lock(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(client, key, ttl_ms, &["SHARED"], wait_ms)
}

/// Alone: waits until the readers and writers that came first have released.
fn write_lock(
    client: &redis::Client,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(client, key, ttl_ms, &[], wait_ms)
}

/// One of `permits` permits of `key`; queues, first come first served, while all are taken.
/// Every user of `key` must pass the same `permits`.
fn permit(
    client: &redis::Client,
    key: &str,
    permits: u32,
    ttl_ms: u64,
    wait_ms: u64,
) -> redis::RedisResult<Option<Hold>> {
    hold(
        client,
        key,
        ttl_ms,
        &["SHARED", "LIMIT", &permits.to_string()],
        wait_ms,
    )
}
