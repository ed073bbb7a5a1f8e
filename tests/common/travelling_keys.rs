//! The keys that travel: [`populate`] leaves shared holds, an exclusive key, a full `LIMIT`
//! semaphore with waiters, a downgraded key and a key whose holds were all released; after
//! they travel, [`fences_go_on`] checks that the kinds still exclude each other and that
//! every new fence is above every fence issued before.

use crate::common::holds::holders;
use crate::common::holds::{acquire_shared, Pending};
use crate::common::*;

/// Keys [`populate`] leaves behind (`gone` has no key any more).
pub const KEYS: [&str; 5] = ["rw", "ex", "sem", "dg", "gone"];

/// What [`populate`] did.
pub struct Populated {
    /// Every fence the server issued, with its key.
    pub issued: Vec<(&'static str, i64)>,
    /// (key, token) of each hold left.
    pub holds: Vec<(&'static str, &'static str)>,
    /// Waiters queued on `sem` (a shared one with `LIMIT 2`, then an exclusive one).
    pub waiters: Vec<Pending>,
}

impl Populated {
    pub fn max(&self) -> i64 {
        self.issued.iter().map(|(_, f)| *f).max().unwrap()
    }

    /// The largest fence issued for `key` (0 if none).
    pub fn max_of(&self, key: &str) -> i64 {
        self.issued
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, f)| *f)
            .max()
            .unwrap_or(0)
    }
}

/// Where the keys went: the whole dataset (with the server's fence high-water mark: a
/// restart, a reload, a replica), or the keys alone to another server (`RESTORE`, `MIGRATE`),
/// where each key's fences go on above its own (docs/guarantees.md, "How fences are made": moves).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Went {
    Dataset,
    Moved,
}

/// - `rw`: shared holds s1, s2, s3 with leases of 60, 45 and 30 s, granted in that order;
///   s2 fenced again (its fence is then above s3's); s4 joined, was fenced and released (the
///   key's last fence is above every live hold's);
/// - `ex`: exclusive, fenced again;
/// - `sem`: a `LIMIT 2` semaphore, full (p1, p2), with a shared and an exclusive waiter;
/// - `dg`: taken exclusively and downgraded to shared in place;
/// - `gone`: two shared holds, fenced, both released (no key, only its fences).
pub fn populate(s: &Server) -> Populated {
    let mut c = s.conn();
    let mut issued = Vec::new();
    // `what` begins with the key.
    let mut got = |f: Option<i64>, what: &'static str| -> i64 {
        let f = f.unwrap_or_else(|| panic!("{what}: not granted"));
        issued.push((what.split(' ').next().unwrap(), f));
        f
    };
    got(acquire_shared(&mut c, "rw", "s1", 60_000, None), "rw s1");
    got(acquire_shared(&mut c, "rw", "s2", 45_000, None), "rw s2");
    got(acquire_shared(&mut c, "rw", "s3", 30_000, None), "rw s3");
    got(fence(&mut c, "rw", "s2"), "rw s2 fence");
    got(acquire_shared(&mut c, "rw", "s4", 50_000, None), "rw s4");
    got(fence(&mut c, "rw", "s4"), "rw s4 fence");
    assert_eq!(release(&mut c, "rw", "s4"), 1);

    got(acquire(&mut c, "ex", "e1", 50_000), "ex e1");
    got(fence(&mut c, "ex", "e1"), "ex e1 fence");

    got(
        acquire_shared(&mut c, "sem", "p1", 40_000, Some(2)),
        "sem p1",
    );
    got(
        acquire_shared(&mut c, "sem", "p2", 35_000, Some(2)),
        "sem p2",
    );
    assert_eq!(
        acquire_shared(&mut c, "sem", "p3", 35_000, Some(2)),
        None,
        "LIMIT 2 with 2 holders"
    );
    let waiters = vec![
        Pending::join(
            s,
            "sem",
            "q1",
            40_000,
            &["SHARED", "LIMIT", "2", "WAIT", "0"],
        ),
        Pending::join(s, "sem", "q2", 40_000, &["WAIT", "0"]),
    ];

    let d = got(acquire(&mut c, "dg", "d1", 20_000), "dg d1");
    assert_eq!(
        acquire_shared(&mut c, "dg", "d1", 55_000, None),
        Some(d),
        "downgrade keeps the fence"
    );

    got(
        acquire_shared(&mut c, "gone", "g1", 60_000, None),
        "gone g1",
    );
    got(
        acquire_shared(&mut c, "gone", "g2", 60_000, None),
        "gone g2",
    );
    got(fence(&mut c, "gone", "g1"), "gone g1 fence");
    assert_eq!(release(&mut c, "gone", "g1"), 1);
    assert_eq!(release(&mut c, "gone", "g2"), 1);
    assert!(!exists(&mut c, "gone"));

    // What the interface promises for these keys, before anything travels.
    let rw = holders(&mut c, "rw").expect("rw");
    let tokens: Vec<&str> = rw.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens, ["s1", "s2", "s3"], "grant order: {rw:?}");
    assert!(rw.iter().all(|h| h.mode == "shared"), "{rw:?}");
    assert!(
        rw[1].fence > rw[2].fence,
        "s2 was fenced after s3 joined: {rw:?}"
    );
    let i = info(&mut c, "rw").unwrap();
    assert!(
        i.fence > rw.iter().map(|h| h.fence).max().unwrap(),
        "rw's last fence (s4's) is above every live hold's: {i:?} {rw:?}"
    );
    let i = info(&mut c, "sem").unwrap();
    assert_eq!((i.mode.as_str(), i.holders, i.waiters), ("shared", 2, 2));
    let i = info(&mut c, "dg").unwrap();
    assert_eq!((i.mode.as_str(), i.holders, i.fence), ("shared", 1, d));
    Populated {
        issued,
        holds: vec![
            ("rw", "s1"),
            ("rw", "s2"),
            ("rw", "s3"),
            ("ex", "e1"),
            ("sem", "p1"),
            ("sem", "p2"),
            ("dg", "d1"),
        ],
        waiters,
    }
}

/// After the keys travelled to `s`: the kinds still exclude each other, the semaphore is
/// still full, and every new fence (a hold's `LOCK.FENCE`, a new shared hold, a fresh key) is
/// above every fence issued before: before on that server, or (keys moved alone) for that key.
pub fn fences_go_on(s: &Server, p: &Populated, went: Went, what: &str, f: &mut Findings) {
    let mut c = s.conn();
    let bound = |key: &str| match went {
        Went::Dataset => p.max(),
        // `gone` did not move (no key): it is a fresh key on the other server.
        Went::Moved if key == "gone" => 0,
        Went::Moved => p.max_of(key),
    };
    f.check(acquire(&mut c, "rw", "x", 1_000).is_none(), || {
        format!("{what}: exclusive acquire of a shared key granted")
    });
    f.check(
        acquire_shared(&mut c, "ex", "x", 1_000, None).is_none(),
        || format!("{what}: shared acquire of an exclusive key granted"),
    );
    f.check(
        acquire_shared(&mut c, "sem", "x", 1_000, Some(2)).is_none(),
        || format!("{what}: LIMIT 2 granted to a third holder"),
    );
    // Also each above the one before: one server's fences only go up.
    let mut last = 0;
    for (key, token) in &p.holds {
        match fence(&mut c, key, token) {
            Some(n) => {
                let max = bound(key);
                f.check(n > last && n > max, || {
                    format!(
                        "{what}: {key} {token}: LOCK.FENCE {n}, the one before {last}, max before {max}"
                    )
                });
                last = last.max(n);
            }
            None => f.fail(format!("{what}: {key} {token}: cannot LOCK.FENCE")),
        }
    }
    for (key, token) in [
        ("rw", "s5"),
        ("dg", "d2"),
        ("gone", "g3"),
        ("never-used", "n"),
    ] {
        match acquire_shared(&mut c, key, token, 10_000, None) {
            Some(n) => {
                let max = bound(key);
                f.check(n > last && n > max, || {
                    format!(
                        "{what}: {key} {token}: new shared hold's fence {n}, the one before \
                         {last}, max before {max}"
                    )
                });
                last = last.max(n);
            }
            None => f.fail(format!("{what}: {key} {token}: shared acquire refused")),
        }
    }
}
