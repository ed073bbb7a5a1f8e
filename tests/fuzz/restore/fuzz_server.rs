//! One server under fuzz ([`Fuzz`]): what was done to it, and the check of each `RESTORE`
//! (a well-formed reply, the outcome the rules give, no key left by a refusal, fences still
//! increasing). The checks of an accepted lock are in `restored_lock_checks`, the batched
//! runs and their memory figure in `memory_runs`.

use std::time::Instant;

use crate::cmd;
use crate::common::*;
use crate::restore::rules::Expect;
use redis::Value;

#[derive(Default, Debug)]
pub(crate) struct Tally {
    restores: u64,
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    pub(crate) locks_exercised: u64,
}

/// One server under fuzz, and what was done to it.
pub(crate) struct Fuzz {
    pub(crate) server: Server,
    pub(crate) con: redis::Connection,
    pub(crate) tally: Tally,
    /// The last fence the probe key got: fences must stay positive and increasing, also
    /// after loads that were refused.
    pub(crate) probe_fence: i64,
    pub(crate) what: String,
}

impl Fuzz {
    pub(crate) fn new() -> Fuzz {
        // Native types get Redis's own deep checks, so that a random body that happens to
        // be a list or a hash cannot crash the server for reasons outside this module.
        // No per-command latency histograms: Redis allocates one (~24 KiB) the first time
        // each command runs, which would read as growth.
        let server = Server::start(Opts::new().extra(&[
            "--sanitize-dump-payload",
            "yes",
            "--latency-tracking",
            "no",
        ]));
        let con = server.conn();
        Fuzz {
            server,
            con,
            tally: Tally::default(),
            probe_fence: 0,
            what: String::new(),
        }
    }

    #[track_caller]
    pub(crate) fn fail(&mut self, msg: &str) -> ! {
        let alive = self.server.is_alive();
        panic!("{}: {msg} (server alive: {alive})", self.what)
    }

    /// Runs one `RESTORE` and checks what the server did with it; returns whether it was
    /// accepted. With `expect`, the outcome must be that one, and a loaded lock must have
    /// those holds, fences and leases.
    pub(crate) fn restore(&mut self, key: &str, payload: &[u8], expect: Option<&Expect>) -> bool {
        self.tally.restores += 1;
        let sent = Instant::now();
        let r = cmd!(&mut self.con, "RESTORE", key, 0, payload, "REPLACE");
        let ok = match &r {
            Ok(Value::Okay) => true,
            Err(e) if e.starts_with("ERR ") => false,
            other => self.fail(&format!("RESTORE replied {other:?}")),
        };
        match expect {
            Some(Expect::Refused) if ok => self.fail("accepted, but the rules say it is refused"),
            Some(Expect::Loaded(_)) if !ok => {
                self.fail(&format!("refused ({r:?}), but the rules say it loads"))
            }
            _ => {}
        }
        if ok {
            self.tally.accepted += 1;
            let want = match expect {
                Some(Expect::Loaded(want)) => Some(want),
                _ => None,
            };
            self.check_accepted(key, want, sent);
        } else {
            self.tally.refused += 1;
            match cmd!(&mut self.con, "EXISTS", key) {
                Ok(Value::Int(0)) => {}
                other => self.fail(&format!("a refused RESTORE left the key: {other:?}")),
            }
        }
        self.check_probe();
        ok
    }

    /// A fresh key still gets a positive fence above every fence seen so far.
    fn check_probe(&mut self) {
        let f = acquire(&mut self.con, "probe", "probe-token", 60_000);
        match f {
            Some(f) if f > self.probe_fence => self.probe_fence = f,
            other => self.fail(&format!(
                "fresh key's fence {other:?}, but {} was issued before",
                self.probe_fence
            )),
        }
        assert_eq!(release(&mut self.con, "probe", "probe-token"), 1);
    }
}
