//! Guarantee 2 (leases and WAIT timeouts run on the server's monotonic clock) and guarantee 4
//! (fences never go backwards) while redis-server's wall clock is stepped an hour forward and
//! back. The step is made by `tests/support/wallshift.c`, an LD_PRELOAD library that offsets
//! only the realtime clocks (`clock_gettime(CLOCK_REALTIME*)`, `gettimeofday`, `time`) by a
//! number of milliseconds read from a file this test rewrites. (libfaketime deadlocks Debian's
//! jemalloc-linked redis-server at start-up, hence a library of our own, and the server runs
//! with `jemalloc-bg-thread no`.)
//!
//! The contrast is in the same test: a `SET … PX` string key, whose expiry Redis keeps on the
//! wall clock, expires at once at the forward step and, set before the backward step,
//! outlives its ttl by an hour.

use crate::cmd;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::wallclock::WallClock;
use crate::common::*;
use redis::Value;

const HOUR_MS: i64 = 3_600_000;
/// Lease length and WAIT timeout measured across a step.
const TTL: u64 = 1500;
/// Lease of the lock granted to the waiter.
const GRANT_TTL: u64 = 1000;
/// When, after the locks are taken, the wall clock is stepped.
const STEP_AT: Duration = Duration::from_millis(400);
/// How late a lease end, grant or WAIT timeout may be observed (noisy CI; the server's cron
/// backstop runs every 100 ms).
const SLACK: Duration = Duration::from_millis(500);

// The wall-clock shifter is `common::wallclock`.

// Waiters are `common::Waiter`s, read without blocking (`reply_within(Duration::ZERO)`).

// ------------------------------------------------------------------------------- checks

#[track_caller]
fn assert_within(what: &str, at: Instant, earliest: Instant, latest: Instant) {
    let ms = |i: Instant| i.saturating_duration_since(earliest).as_millis() as i64;
    assert!(
        at >= earliest,
        "{what} came {} ms EARLY",
        earliest.duration_since(at).as_millis()
    );
    assert!(
        at <= latest,
        "{what} came {} ms late (allowed {} ms)",
        ms(at),
        ms(latest)
    );
}

/// What one step phase observed, in ms past the earliest allowed instant.
struct Lateness {
    lease_end: i64,
    grant: i64,
    wait_timeout: i64,
    granted_lease_end: i64,
}

/// Takes locks and queues waiters, steps the wall clock to `offset_ms` `STEP_AT` later, and
/// checks that every lease end, grant and WAIT timeout comes on time on the monotonic clock.
/// The contrast `SET … PX` key is set before the step; its fate is checked by the caller.
fn locks_across_a_step(
    s: &Server,
    clock: &WallClock,
    phase: &str,
    offset_ms: i64,
    string_key: &str,
    string_expires_at_step: bool,
) -> Lateness {
    let mut c = s.conn();
    let k = |n: &str| format!("{phase}:{n}");
    let t0 = Instant::now();
    // A lease that just runs out, one that a waiter is queued on, and the string contrast.
    acquire(&mut c, &k("solo"), "solo-holder", TTL).unwrap();
    let held_fence = acquire(&mut c, &k("held"), "holder", TTL).unwrap();
    assert_eq!(
        cmd!(&mut c, "SET", string_key, "v", "PX", TTL),
        Ok(Value::Okay)
    );
    let t1 = Instant::now();
    // A long lease, so that its waiter can only leave by timing out.
    acquire(&mut c, &k("long"), "long-holder", 600_000).unwrap();
    let mut granted = Waiter::join(s, &k("held"), "waiter", GRANT_TTL, 0);
    let mut timed_out = Waiter::join(s, &k("long"), "impatient", 600_000, TTL);
    // When the server was seen to count it as waiting: its wait started before this.
    let timed_out_joined = Instant::now();

    sleep(STEP_AT.saturating_sub(t0.elapsed()));
    clock.step(&mut c, offset_ms);
    let stepped = Instant::now();
    assert!(
        stepped < t0 + Duration::from_millis(TTL - 300),
        "too slow: the step came {} ms after the locks were taken",
        stepped.duration_since(t0).as_millis()
    );
    // Nothing ended or was granted at the step.
    for (key, holder, waiters) in [
        (k("solo"), "solo-holder", 0),
        (k("held"), "holder", 1),
        (k("long"), "long-holder", 1),
    ] {
        let i = info(&mut c, &key).unwrap_or_else(|| panic!("{key} ended at the step"));
        assert_eq!(i.holder.as_deref(), Some(holder.as_bytes()), "{key}: {i:?}");
        assert_eq!(i.waiters, waiters, "{key}: {i:?}");
        let left = TTL as i64 - t0.elapsed().as_millis() as i64;
        if key != k("long") {
            assert!(
                i.ttl <= TTL as i64 && i.ttl >= left - 100,
                "{key}: remaining lease {} ms after the step, expected about {left}",
                i.ttl
            );
        }
    }
    assert_eq!(
        exists(&mut c, string_key),
        !string_expires_at_step,
        "{phase}: the SET PX contrast key, {} ms into its {TTL} ms ttl (did the step happen?)",
        t0.elapsed().as_millis()
    );
    assert_eq!(
        granted.reply_within(Duration::ZERO),
        None,
        "waiter granted at the step"
    );
    assert_eq!(
        timed_out.reply_within(Duration::ZERO),
        None,
        "WAIT timed out at the step"
    );

    // Watch everything end, on the monotonic clock.
    let (mut lease_end, mut grant, mut timeout, mut granted_end) = (None, None, None, None);
    let give_up = t0 + Duration::from_millis(TTL + GRANT_TTL) + Duration::from_secs(6);
    while lease_end.is_none() || grant.is_none() || timeout.is_none() || granted_end.is_none() {
        assert!(
            Instant::now() < give_up,
            "phase {phase}: still waiting: lease end {lease_end:?}, grant {grant:?}, \
             WAIT timeout {timeout:?}, granted lease end {granted_end:?} (INFO held: {:?})",
            info(&mut c, &k("held"))
        );
        if lease_end.is_none() && !exists(&mut c, &k("solo")) {
            lease_end = Some(Instant::now());
        }
        if grant.is_none() {
            if let Some(r) = granted.reply_within(Duration::ZERO) {
                let Reply::Fence(f) = r else {
                    panic!("the waiter got {r:?} instead of the lock")
                };
                assert!(f > held_fence, "grant fence {f} <= {held_fence}");
                grant = Some(Instant::now());
            }
        }
        if grant.is_some() && granted_end.is_none() && !exists(&mut c, &k("held")) {
            granted_end = Some(Instant::now());
        }
        if timeout.is_none() {
            if let Some(r) = timed_out.reply_within(Duration::ZERO) {
                assert_eq!(
                    r,
                    Reply::Null,
                    "the impatient waiter was granted a held lock"
                );
                timeout = Some(Instant::now());
            }
        }
        sleep(Duration::from_millis(5));
    }
    let (lease_end, grant, timeout, granted_end) = (
        lease_end.unwrap(),
        grant.unwrap(),
        timeout.unwrap(),
        granted_end.unwrap(),
    );
    let ttl = Duration::from_millis(TTL);
    let gttl = Duration::from_millis(GRANT_TTL);
    assert_within(
        &format!("{phase}: lease end"),
        lease_end,
        t0 + ttl,
        t1 + ttl + SLACK,
    );
    assert_within(
        &format!("{phase}: grant to the waiter"),
        grant,
        t0 + ttl,
        t1 + ttl + SLACK,
    );
    assert_within(
        &format!("{phase}: WAIT timeout"),
        timeout,
        timed_out.sent + ttl,
        timed_out_joined + ttl + SLACK,
    );
    assert_within(
        &format!("{phase}: end of the granted lease"),
        granted_end,
        t0 + ttl + gttl,
        grant + gttl + SLACK,
    );
    // The long lease is untouched.
    let i = info(&mut c, &k("long")).unwrap();
    assert_eq!(i.holder.as_deref(), Some(&b"long-holder"[..]));
    assert!(i.ttl > 590_000 && i.waiters == 0, "{i:?}");
    let late = |at: Instant, earliest: Instant| at.duration_since(earliest).as_millis() as i64;
    Lateness {
        lease_end: late(lease_end, t0 + ttl),
        grant: late(grant, t0 + ttl),
        wait_timeout: late(timeout, timed_out.sent + ttl),
        granted_lease_end: late(granted_end, t0 + ttl + gttl),
    }
}

#[test]
fn leases_and_waits_run_on_the_monotonic_clock_across_wall_steps() {
    let clock = WallClock::at("wallshift", 0);
    let s = clock.start_checked(Opts::new(), 0);
    let mut c = s.conn();

    // +1 hour. Contrast: a SET PX key, set 400 ms before with a 1500 ms ttl, is gone at once.
    let forward = locks_across_a_step(&s, &clock, "fwd", HOUR_MS, "fwd:string", true);

    // Back by one hour (to the real time), with a SET PX key set before the step: it now
    // outlives its 1500 ms ttl by an hour.
    let backward = locks_across_a_step(&s, &clock, "back", 0, "back:string", false);
    assert!(
        exists(&mut c, "back:string"),
        "the SET PX key set before the backward step expired on time: did the step happen?"
    );
    let pttl = match cmd!(&mut c, "PTTL", "back:string") {
        Ok(Value::Int(n)) => n,
        other => panic!("PTTL: {other:?}"),
    };
    assert!(
        pttl > HOUR_MS - 60_000,
        "SET PX key set before the backward step: PTTL {pttl}, expected about an hour"
    );
    for (name, l) in [("+1h", forward), ("-1h", backward)] {
        eprintln!(
            "{name} step: late by (ms) lease end {}, grant {}, WAIT timeout {}, granted lease end {}",
            l.lease_end, l.grant, l.wait_timeout, l.granted_lease_end
        );
    }
    eprintln!("SET PX key set before the -1h step: PTTL {pttl} ms after its {TTL} ms ttl ran out");
}

#[test]
fn fences_keep_increasing_across_a_backward_wall_step() {
    let clock = WallClock::at("wallshift", 0);
    let s = clock.start_checked(Opts::new(), 0);
    let mut c = s.conn();
    if info_field(&mut c, "server", "valkey_version").is_some() {
        // Valkey loads modules with RTLD_DEEPBIND: the module's own clock_gettime binds to
        // libc, past the LD_PRELOAD shifter, so only the server's clock would step here.
        eprintln!("skipped on Valkey: LD_PRELOAD cannot shift a module's wall clock there");
        return;
    }
    let mut issued = vec![acquire(&mut c, "k", "a", 600_000).unwrap()];
    issued.push(fence(&mut c, "k", "a").unwrap());

    // +1 hour: the clock floor jumps ahead, and the fences with it. The module re-reads the
    // wall clock every cron tick (100 ms), so the step shows in fences within a tick.
    clock.step(&mut c, HOUR_MS);
    let mut f = 0;
    let carried = wait_until(Duration::from_secs(2), || {
        f = fence(&mut c, "k", "a").unwrap();
        issued.push(f);
        (f >> 11) >= unix_ms() + HOUR_MS - 60_000
    });
    assert!(
        carried,
        "fence {f} does not carry the +1h wall clock after 2 s (ms {}): did the step happen?",
        f >> 11
    );
    issued.push(acquire(&mut c, "g", "b", 600_000).unwrap());
    issued.push(fence(&mut c, "g", "b").unwrap());
    let before_back = *issued.iter().max().unwrap();

    // Back to one hour behind the real time: two hours back from the fences just issued.
    // Past a few cron ticks, so that the module's wall clock has stepped back too.
    clock.step(&mut c, -HOUR_MS);
    sleep(Duration::from_millis(500));
    let mut after = vec![fence(&mut c, "k", "a").unwrap()];
    assert_eq!(release(&mut c, "g", "b"), 1);
    after.push(acquire(&mut c, "g", "c", 600_000).unwrap());
    after.push(acquire(&mut c, "fresh", "d", 600_000).unwrap());
    for i in 0..500 {
        let key = format!("fresh{}", i % 50);
        after.push(match fence(&mut c, &key, "d") {
            Some(f) => f,
            None => acquire(&mut c, &key, "d", 600_000).unwrap(),
        });
    }
    after.push(fence(&mut c, "k", "a").unwrap());
    assert!(
        after[0] > before_back,
        "fence {} after the backward step is not above {before_back}",
        after[0]
    );
    for w in after.windows(2) {
        assert!(w[1] > w[0], "fences went backwards: {} then {}", w[0], w[1]);
    }
    // The lease of k, taken before both steps, is untouched.
    let i = info(&mut c, "k").unwrap();
    assert_eq!(i.holder.as_deref(), Some(&b"a"[..]));
    assert!(i.ttl > 550_000 && i.ttl <= 600_000, "{i:?}");
}
