//! Rule 6: `CLIENT PAUSE … WRITE` holds lease ends (grants and key removals) until writes
//! resume, as it holds core key expiry.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::{
    self, acquire, args, exists, findings_of, got, lock_info, must, release, Findings, Reply,
    Server, Waiter,
};
use crate::rules::{AT_ONCE, HOLDER, TTL};

/// A write sent during a write pause on its own socket: its reply marks when writes resumed.
fn write_probe(server: &Server) -> Waiter {
    let mut p = Waiter::send_args(server, 0, "probe-lock", "probe", "1000", "0");
    // LOCK.ACQUIRE of a free key is a write: held back by the pause, answered when it ends.
    assert!(
        p.reply_within(Duration::from_millis(50)).is_none(),
        "a write went through during CLIENT PAUSE WRITE"
    );
    p
}

/// Reproduction 8: after `CLIENT PAUSE … WRITE`, a lease that ends during the pause is not
/// handed to its waiter (`LOCK.INFO` still reads; the waiter has no reply) until the pause
/// ends, by `CLIENT UNPAUSE` or by its timeout; then the waiter is granted at once. A lease
/// that ends with no waiter leaves its key in place until writes resume, as core key expiry
/// does.
#[test]
fn repro8_client_pause_write_holds_lease_ends_until_writes_resume() {
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = [PauseCase::Unpause, PauseCase::Timeout, PauseCase::NoWaiter]
            .into_iter()
            .map(|case| scope.spawn(move || findings_of(|| pause_case(case))))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("pause thread"))
            .collect()
    });
    Findings(problems).done("CLIENT PAUSE WRITE");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PauseCase {
    /// A waiter; the pause ends by `CLIENT UNPAUSE`.
    Unpause,
    /// A waiter; the pause ends by its timeout.
    Timeout,
    /// No waiter; the pause ends by its timeout.
    NoWaiter,
}

fn pause_case(case: PauseCase) -> Vec<String> {
    let server = Server::new();
    let mut con = server.conn();
    let mut f = Findings::default();
    let label = format!("[{case:?}]");
    let acquired = Instant::now();
    acquire(&mut con, "k", HOLDER, 300).unwrap();
    let mut w = (case != PauseCase::NoWaiter).then(|| Waiter::join(&server, "k", "w", TTL, 0));
    let pause_ms = if case == PauseCase::Unpause {
        1500
    } else {
        900
    };
    must(
        &mut con,
        &args(&["CLIENT", "PAUSE", &pause_ms.to_string(), "WRITE"]),
    );
    let mut probe = (case != PauseCase::Unpause).then(|| write_probe(&server));

    // Well past the lease's end, inside the pause.
    sleep((acquired + Duration::from_millis(600)).saturating_duration_since(Instant::now()));
    let mut answered_in_pause = false;
    if let Some(w) = w.as_mut() {
        let r = w.reply_within(Duration::ZERO);
        answered_in_pause = r.is_some();
        f.check(r.is_none(), || {
            format!(
                "{label} the lease ended during CLIENT PAUSE WRITE: the waiter must not be \
                 granted yet; got {r:?}"
            )
        });
    }
    let asked = Instant::now();
    let read = cmd!(&mut con, "LOCK.INFO", "k");
    f.check(read.is_ok() && asked.elapsed() < AT_ONCE, || {
        format!(
            "{label} LOCK.INFO must read during the pause: {read:?} after {:?}",
            asked.elapsed()
        )
    });
    let kept = exists(&mut con, "k");
    f.check(kept, || {
        format!(
            "{label} the lease ended during the write pause: the key must stay until writes resume"
        )
    });

    // Writes resume.
    let resumed = if case == PauseCase::Unpause {
        must(&mut con, &args(&["CLIENT", "UNPAUSE"]));
        Instant::now()
    } else {
        let p = probe.as_mut().unwrap();
        match p.reply_within(Duration::from_secs(3)) {
            Some(Reply::Fence(_)) => {}
            other => panic!("{label} the probe write: {other:?}"),
        }
        p.answered.unwrap()
    };
    match w.as_mut() {
        Some(_) if answered_in_pause => {} // reported above
        Some(w) => {
            let r = w.reply_by(resumed + AT_ONCE);
            let now = lock_info(&mut con, "k");
            match r {
                Some(Reply::Fence(g)) => f.check(
                    now.as_ref()
                        .is_some_and(|i| i.holder.as_deref() == Some(&b"w"[..]) && i.fence == g),
                    || format!("{label} w granted {g}; LOCK.INFO k: {now:?}"),
                ),
                other => f.fail(format!(
                    "{label} once writes resume the waiter must be granted within {AT_ONCE:?}; \
                     got {}; LOCK.INFO k: {now:?}",
                    got(&other)
                )),
            }
            let early = w
                .answered
                .is_some_and(|t| t + Duration::from_millis(5) < resumed);
            f.check(!early, || {
                format!("{label} the waiter was granted before writes resumed")
            });
        }
        None => {
            let removed = common::wait_until(AT_ONCE, || !exists(&mut con, "k"));
            f.check(removed, || {
                format!(
                    "{label} once writes resume, the ended lease's key must go within {AT_ONCE:?}"
                )
            });
        }
    }
    // The holder's lease ended: its release finds nothing.
    let r = release(&mut con, "k", HOLDER);
    f.check(r == 0, || format!("{label} the ended holder released: {r}"));
    f.0
}
