//! The checker: what a history proves went wrong.
//!
//! Every rule below counts only what the history *proves*: an operation whose outcome is
//! unknown is never counted as acknowledged (it proves no hold, no write), and never
//! dismissed as failed (it may have ended a hold, or explain an entry in a log). A
//! linearizable lock on one server that never fails gives zero in every violation row,
//! whatever the timing; the unit tests plant each violation alone.
//!
//! ## Holds
//!
//! An acknowledged grant is a hold. The server granted it somewhere between the acquire's
//! send and its reply, and set its lease to end `ttl` after the moment it granted; an
//! acknowledged extend sets it to end `ttl` after the moment it ran. So the lease is known to
//! run at least until the send of the last acknowledged acquire or extend plus its `ttl`
//! (the *lease bound*). An extend of unknown outcome may have lengthened it, which the
//! history cannot show, so it is not counted (a hold is never made longer than proven).
//!
//! - The **holder's interval** runs from the grant's reply to the earlier of the lease bound
//!   and the send of the hold's first release, whatever that release's outcome: once it
//!   asks to release, the holder claims nothing.
//! - The **server's obligation** runs from the grant's reply to the earlier of the lease
//!   bound and the send of the first release that was acknowledged or of unknown outcome (it
//!   may have taken effect from its send). A release the server refused or never got
//!   (connection refused) ends nothing: the lease runs on.
//!
//! ## The violations
//!
//! - **Overlap**: two holds of one key whose holder's intervals intersect: two clients told
//!   they hold the lock at once. Counted per pair.
//! - **Lost grant**: a hold A, and a later acknowledged grant B of the key that certainly
//!   happened inside A's obligation (B's send after A's reply, B's reply before the
//!   obligation's end), both made by the master of record throughout their acquire (see
//!   [`MasterRecord`]): the master everyone was told of forgot a hold it should have kept.
//!   A grant by a deposed master is split brain, counted as an overlap, not as a loss.
//!   Counted per lost hold.
//! - **Lost guarded write**: an acknowledged guarded `RPUSH` whose fence is missing from the
//!   key's final log. One of unknown outcome may be missing or present.
//! - **Guarded-write order**: a log entry not above the entry before it (each hold writes
//!   its fence once, and `LOCK.GUARD` admits only the current hold's fence, so a log written
//!   by one lineage of masters strictly increases).
//! - **Fence regression**: an acknowledged fence lower than a fence acknowledged for the key
//!   before its acquire was sent. Counted per later grant.
//! - **Fence repeat**: one fence acknowledged to two grants of the key. Counted per grant
//!   after the first.
//! - **Unexplained log entry**: a fence in a final log that no guarded write acknowledged or
//!   of unknown outcome carried (a refused write that landed anyway).
//!
//! Grants acknowledged by a deposed master (one Sentinel had already replaced when the
//! acquire was sent) are counted too; they are how split brain shows, not a violation by
//! themselves.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::history::{History, MasterRecord, Nanos, Op, OpKind, Outcome};

/// Examples kept per violation kind.
const EXAMPLES: usize = 5;

/// One kind of violation: how many, and the first few, described.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations {
    pub count: usize,
    pub examples: Vec<String>,
}

impl Violations {
    fn add(&mut self, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example());
        }
    }
}

/// Tallies of one kind of operation by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Ok(_) => self.ok += 1,
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Unknown(_) => self.unknown += 1,
        }
    }
}

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub failovers: usize,
    pub acquires: Tally,
    pub writes: Tally,
    pub extends: Tally,
    pub releases: Tally,
    /// Acknowledged grants made by a master Sentinel had already deposed.
    pub deposed_grants: usize,
    pub overlaps: Violations,
    pub lost_grants: Violations,
    pub lost_writes: Violations,
    pub write_order: Violations,
    pub fence_regressions: Violations,
    pub fence_repeats: Violations,
    pub unexplained_entries: Violations,
    /// Keys whose final log could not be read (their writes are not judged).
    pub unread_logs: Vec<String>,
}

impl Report {
    /// Every violation counted, of every kind.
    pub fn violations(&self) -> usize {
        self.kinds().iter().map(|(_, v)| v.count).sum()
    }

    /// Every kind of violation, named.
    pub fn kinds(&self) -> [(&'static str, &Violations); 7] {
        [
            ("overlapping acknowledged holds", &self.overlaps),
            ("acknowledged grants lost", &self.lost_grants),
            ("acknowledged guarded writes lost", &self.lost_writes),
            ("guarded writes out of fence order", &self.write_order),
            ("fence regressions", &self.fence_regressions),
            ("fence repeats", &self.fence_repeats),
            ("unexplained log entries", &self.unexplained_entries),
        ]
    }
}

/// One acknowledged grant and what the history says about how long it lasted.
#[derive(Clone, Debug)]
struct Hold<'a> {
    grant: &'a Op,
    fence: u64,
    /// The holder's interval ends here (see the module's doc).
    claim_end: Nanos,
    /// The server's obligation ends here.
    owed_end: Nanos,
}

impl Hold<'_> {
    fn start(&self) -> Nanos {
        self.grant.complete
    }

    fn describe(&self) -> String {
        format!(
            "client {} hold {} fence {} from :{} acked {} ms, claimed to {} ms, owed to {} ms",
            self.grant.client,
            self.grant.hold,
            self.fence,
            self.grant.node,
            ms(self.grant.complete),
            ms(self.claim_end),
            ms(self.owed_end)
        )
    }
}

fn ms(t: Nanos) -> String {
    format!("{:.1}", t as f64 / 1e6)
}

fn lease_bound(op: &Op) -> Nanos {
    op.invoke
        .saturating_add(op.ttl_ms.saturating_mul(1_000_000))
}

/// The holds of a history, by key, in order of their grant's reply.
fn holds(history: &History) -> BTreeMap<&str, Vec<Hold<'_>>> {
    let mut by_hold: HashMap<u64, Vec<&Op>> = HashMap::new();
    for op in &history.ops {
        by_hold.entry(op.hold).or_default().push(op);
    }
    let mut out: BTreeMap<&str, Vec<Hold<'_>>> = BTreeMap::new();
    for ops in by_hold.values() {
        let Some(grant) = ops.iter().find(|o| o.kind == OpKind::Acquire) else {
            continue;
        };
        let (Outcome::Ok(_), Some(fence)) = (&grant.outcome, grant.fence) else {
            continue;
        };
        // The last acknowledged renewal sets the lease (every extend sets it anew).
        let lease = ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Acquire | OpKind::Extend) && o.outcome.is_ok())
            .max_by_key(|o| o.invoke)
            .map_or(0, |o| lease_bound(o));
        let releases = || ops.iter().filter(|o| o.kind == OpKind::Release);
        let claim_end = releases()
            .map(|o| o.invoke)
            .min()
            .map_or(lease, |r| r.min(lease));
        let owed_end = releases()
            .filter(|o| o.outcome.may_have_happened())
            .map(|o| o.invoke)
            .min()
            .map_or(lease, |r| r.min(lease));
        out.entry(grant.key.as_str()).or_default().push(Hold {
            grant,
            fence,
            claim_end,
            owed_end,
        });
    }
    for holds in out.values_mut() {
        holds.sort_by_key(|h| (h.start(), h.grant.hold));
    }
    out
}

/// Checks a history; see the module's doc for every rule.
pub fn check(history: &History) -> Report {
    let record = MasterRecord::from_observations(&history.observations);
    let mut report = Report {
        failovers: record.failovers(),
        ..Report::default()
    };
    for op in &history.ops {
        let tally = match op.kind {
            OpKind::Acquire => &mut report.acquires,
            OpKind::GuardedWrite => &mut report.writes,
            OpKind::Extend => &mut report.extends,
            OpKind::Release => &mut report.releases,
        };
        tally.add(&op.outcome);
        if op.kind == OpKind::Acquire && op.outcome.is_ok() && record.deposed(op.node, op.invoke) {
            report.deposed_grants += 1;
        }
    }
    let holds = holds(history);
    for key_holds in holds.values() {
        overlaps(key_holds, &mut report.overlaps);
        lost_grants(key_holds, &record, &mut report.lost_grants);
        fences(key_holds, &mut report);
    }
    writes(history, &mut report);
    report
}

fn overlaps(holds: &[Hold<'_>], found: &mut Violations) {
    // Holds in order of start; `active` keeps those whose claim has not ended by the
    // current one's start: each of them overlaps it.
    let mut active: Vec<&Hold<'_>> = Vec::new();
    for h in holds {
        if h.claim_end <= h.start() {
            continue; // never provably held (its lease bound passed before its reply)
        }
        active.retain(|a| a.claim_end > h.start());
        for a in &active {
            found.add(|| format!("{}  AND  {}", a.describe(), h.describe()));
        }
        active.push(h);
    }
}

fn lost_grants(holds: &[Hold<'_>], record: &MasterRecord, found: &mut Violations) {
    let legit =
        |h: &Hold<'_>| record.master_throughout(h.grant.node, h.grant.invoke, h.grant.complete);
    for a in holds.iter().filter(|a| legit(a)) {
        // Holds are sorted by reply, and B's reply falls in [A's reply, A's obligation end):
        // only that slice of the key's holds (a lease's worth) is looked at.
        let from = holds.partition_point(|b| b.start() < a.start());
        let to = holds.partition_point(|b| b.start() < a.owed_end);
        let later = holds[from..to.max(from)]
            .iter()
            .filter(|b| b.grant.hold != a.grant.hold)
            .filter(|b| b.grant.invoke >= a.start() && b.grant.complete < a.owed_end)
            .find(|b| legit(b));
        if let Some(b) = later {
            found.add(|| format!("{}  LOST TO  {}", a.describe(), b.describe()));
        }
    }
}

fn fences(holds: &[Hold<'_>], report: &mut Report) {
    // Regressions: against the highest fence acknowledged before each acquire was sent.
    let mut by_reply: Vec<&Hold<'_>> = holds.iter().collect();
    by_reply.sort_by_key(|h| h.grant.complete);
    let mut by_send: Vec<&Hold<'_>> = holds.iter().collect();
    by_send.sort_by_key(|h| h.grant.invoke);
    let mut highest: Option<&Hold<'_>> = None;
    let mut next = 0;
    for b in by_send {
        while next < by_reply.len() && by_reply[next].grant.complete < b.grant.invoke {
            let h = by_reply[next];
            if highest.is_none_or(|m| h.fence > m.fence) {
                highest = Some(h);
            }
            next += 1;
        }
        if let Some(a) = highest.filter(|a| a.fence > b.fence) {
            report
                .fence_regressions
                .add(|| format!("{}  THEN  {}", a.describe(), b.describe()));
        }
    }
    let mut seen: HashMap<u64, &Hold<'_>> = HashMap::new();
    for h in &by_reply {
        match seen.get(&h.fence) {
            Some(first) => report
                .fence_repeats
                .add(|| format!("{}  AND  {}", first.describe(), h.describe())),
            None => {
                seen.insert(h.fence, h);
            }
        }
    }
}

fn writes(history: &History, report: &mut Report) {
    let mut possible: HashMap<&str, HashSet<u64>> = HashMap::new();
    let mut acked: Vec<&Op> = Vec::new();
    for op in history
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::GuardedWrite)
    {
        let Some(fence) = op.fence else { continue };
        if op.outcome.may_have_happened() {
            possible.entry(op.key.as_str()).or_default().insert(fence);
        }
        if op.outcome.is_ok() {
            acked.push(op);
        }
    }
    let describe = |op: &Op| {
        format!(
            "client {} hold {} fence {} on :{} acked {} ms",
            op.client,
            op.hold,
            op.fence.unwrap_or(0),
            op.node,
            ms(op.complete)
        )
    };
    let mut logs: HashMap<&str, HashSet<u64>> = HashMap::new();
    for (key, log) in &history.final_logs {
        let Some(log) = log else {
            report.unread_logs.push(key.clone());
            continue;
        };
        logs.insert(key.as_str(), log.iter().copied().collect());
        for pair in log.windows(2) {
            if pair[1] <= pair[0] {
                report
                    .write_order
                    .add(|| format!("{key}: {} then {}", pair[0], pair[1]));
            }
        }
        let none = HashSet::new();
        let explained = possible.get(key.as_str()).unwrap_or(&none);
        for entry in log.iter().filter(|e| !explained.contains(e)) {
            report
                .unexplained_entries
                .add(|| format!("{key}: {entry} in the log, written by no guarded write"));
        }
    }
    for op in acked {
        // A key whose log was not read (or not asked for) cannot be judged.
        let Some(log) = logs.get(op.key.as_str()) else {
            continue;
        };
        if !log.contains(&op.fence.unwrap_or(0)) {
            report.lost_writes.add(|| describe(op));
        }
    }
}

mod table;
pub use table::{render, table};

#[cfg(test)]
mod tests;
