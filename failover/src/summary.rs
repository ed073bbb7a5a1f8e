//! A mode's result as the table shows it: the checker's report, the faults injected, and
//! the grants' rate and latency over the fault period; the table of every mode with each
//! one's grants against plain's, and `--require-safe`'s decision. Pure, so unit tested.

use crate::check::{render, Report};
use crate::history::{History, Nanos, OpKind};
use crate::mode::Mode;
use crate::schedule::FaultCounts;

/// `--require-safe`: a required mode's grants per second must be at least this share of
/// plain's in the same table (issue 26: "at least half as many grants as the plain mode").
pub const MIN_GRANTS_VS_PLAIN: f64 = 0.5;

/// One mode's run, summed up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub report: Report,
    pub faults: FaultCounts,
    /// The fault period, from the first fault to the moment faults stopped, in seconds.
    pub period_s: f64,
    /// Acknowledged grants whose reply came within the fault period.
    pub period_grants: usize,
    /// Their latency, invoke → reply (in durable modes the library's `WAIT` included, and
    /// always the wait for a key another client holds), p50 and p99, in milliseconds.
    pub latency_ms: Option<(f64, f64)>,
}

impl Summary {
    /// `report` of `history`, and the faults injected from `began` to `stopped` (the
    /// history's clock).
    pub fn new(
        history: &History,
        report: Report,
        faults: FaultCounts,
        began: Nanos,
        stopped: Nanos,
    ) -> Summary {
        let mut latencies: Vec<Nanos> = history
            .ops
            .iter()
            .filter(|op| op.kind == OpKind::Acquire && op.outcome.is_ok())
            .filter(|op| (began..=stopped).contains(&op.complete))
            .map(|op| op.complete.saturating_sub(op.invoke))
            .collect();
        latencies.sort_unstable();
        let ms = |n: Nanos| n as f64 / 1e6;
        Summary {
            report,
            faults,
            period_s: stopped.saturating_sub(began) as f64 / 1e9,
            period_grants: latencies.len(),
            latency_ms: (!latencies.is_empty()).then(|| {
                (
                    ms(percentile(&latencies, 0.50)),
                    ms(percentile(&latencies, 0.99)),
                )
            }),
        }
    }

    /// Acknowledged grants per second over the fault period (0 for an empty period).
    pub fn grants_per_s(&self) -> f64 {
        if self.period_s > 0.0 {
            self.period_grants as f64 / self.period_s
        } else {
            0.0
        }
    }

    /// The table's rows: the faults, the checker's rows with the grants' rate and latency
    /// after "grants acknowledged", and, when `plain` is given, the grants against plain's.
    pub fn rows(&self, plain: Option<&Summary>) -> Vec<(String, String)> {
        let mut rows = self.faults.rows();
        let mut report = self.report.rows();
        let at = report
            .iter()
            .position(|(name, _)| name == "grants acknowledged")
            .map_or(report.len(), |i| i + 1);
        let mut grants = vec![
            (
                "fault period (s)".to_string(),
                format!("{:.1}", self.period_s),
            ),
            (
                "grants acknowledged per second in it".to_string(),
                format!("{:.1}", self.grants_per_s()),
            ),
            (
                "acknowledged grant latency p50 / p99 (ms)".to_string(),
                self.latency_ms
                    .map_or("-".into(), |(p50, p99)| format!("{p50:.1} / {p99:.1}")),
            ),
        ];
        if let Some(plain) = plain {
            grants.push((
                "grants vs plain (per second in the fault period)".to_string(),
                ratio(self.grants_per_s(), plain.grants_per_s())
                    .map_or("-".into(), |r| format!("{r:.2}")),
            ));
        }
        report.splice(at..at, grants);
        rows.extend(report);
        rows
    }
}

/// `value / plain`, when plain is above 0.
pub fn ratio(value: f64, plain: f64) -> Option<f64> {
    (plain > 0.0).then(|| value / plain)
}

/// The nearest-rank `p` percentile (0 < p ≤ 1) of `sorted` values, which must not be empty.
pub fn percentile(sorted: &[Nanos], p: f64) -> Nanos {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The table with a column per mode; with a "grants vs plain" row when plain is one.
pub fn table(columns: &[(Mode, &Summary)]) -> String {
    let plain = plain_of(columns);
    let cells: Vec<(&str, Vec<(String, String)>)> = columns
        .iter()
        .map(|(m, s)| (m.name(), s.rows(plain)))
        .collect();
    render(&cells)
}

fn plain_of<'a>(columns: &[(Mode, &'a Summary)]) -> Option<&'a Summary> {
    columns
        .iter()
        .find(|(m, _)| *m == Mode::Plain)
        .map(|(_, s)| *s)
}

/// `--require-safe`: why each of `required` fails, if it does: it has no column (its run
/// failed), it counts a violation in any violation row, a key's log was not read (its writes
/// not judged), its grants per second are below `MIN_GRANTS_VS_PLAIN` of plain's (when
/// plain is in the table), or the time bound came before `per_kind` faults of each kind
/// (`--faults-per-kind`; 0: not asked). Plain's own violations are never a failure. Empty:
/// safe.
pub fn gate(columns: &[(Mode, &Summary)], required: &[Mode], per_kind: usize) -> Vec<String> {
    let plain = plain_of(columns);
    let mut failures = Vec::new();
    for &mode in required.iter().filter(|&&m| m != Mode::Plain) {
        let name = mode.name();
        let Some((_, s)) = columns.iter().find(|(m, _)| *m == mode) else {
            failures.push(format!("{name}: no result (its run failed)"));
            continue;
        };
        if !s.faults.reached(per_kind) {
            failures.push(format!(
                "{name}: not {per_kind} faults of each kind before the time bound ({:?})",
                s.faults.injected
            ));
        }
        let r = &s.report;
        if r.violations() > 0 {
            let counted: Vec<String> = r
                .kinds()
                .iter()
                .filter(|(_, v)| v.count > 0)
                .map(|(kind, v)| format!("{kind} {}", v.count))
                .collect();
            failures.push(format!(
                "{name}: {} violations ({})",
                r.violations(),
                counted.join(", ")
            ));
        }
        if !r.unread_logs.is_empty() {
            failures.push(format!(
                "{name}: logs not read, writes not judged: {:?}",
                r.unread_logs
            ));
        }
        if let Some(p) = plain {
            if let Some(x) = ratio(s.grants_per_s(), p.grants_per_s()) {
                if x < MIN_GRANTS_VS_PLAIN {
                    failures.push(format!(
                        "{name}: {:.1} grants per second, {x:.2} of plain's {:.1} \
                         (below {MIN_GRANTS_VS_PLAIN})",
                        s.grants_per_s(),
                        p.grants_per_s()
                    ));
                }
            }
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::{gate, percentile, ratio, table, Summary};
    use crate::check::Report;
    use crate::history::{History, Op, OpKind, Outcome};
    use crate::mode::Mode;
    use crate::schedule::{Fault, FaultCounts};

    fn ms(n: u64) -> u64 {
        n * 1_000_000
    }

    fn acquire(invoke: u64, complete: u64, outcome: Outcome) -> Op {
        Op {
            client: 0,
            key: "{k0}:lock".into(),
            hold: invoke,
            kind: OpKind::Acquire,
            invoke: ms(invoke),
            complete: ms(complete),
            outcome,
            fence: None,
            ttl_ms: 3000,
            node: 7001,
        }
    }

    /// A summary of `grants` per second over 10 s, with `overlaps` overlapping pairs.
    fn summary(grants: usize, overlaps: usize) -> Summary {
        let mut report = Report::default();
        report.acquires.ok = grants * 10;
        report.overlaps.count = overlaps;
        Summary {
            report,
            period_s: 10.0,
            period_grants: grants * 10,
            latency_ms: Some((1.0, 2.0)),
            ..Summary::default()
        }
    }

    #[test]
    fn the_rate_and_latency_count_acknowledged_grants_in_the_fault_period_only() {
        let mut h = History::default();
        h.ops.push(acquire(0, 900, Outcome::Ok(1))); // before the faults
        for i in 0..100 {
            h.ops.push(acquire(
                1000 + 10 * i,
                1000 + 11 * i,
                Outcome::Ok(2 + i as i64),
            ));
        }
        h.ops
            .push(acquire(1500, 1501, Outcome::Failed("not granted".into())));
        h.ops
            .push(acquire(1500, 1502, Outcome::Unknown("timed out".into())));
        let mut extend = acquire(1500, 1600, Outcome::Ok(1));
        extend.kind = OpKind::Extend;
        h.ops.push(extend);
        h.ops.push(acquire(2990, 3001, Outcome::Ok(200))); // after: not counted
        let s = Summary::new(
            &h,
            Report::default(),
            FaultCounts::default(),
            ms(1000),
            ms(3000),
        );
        assert_eq!(s.period_grants, 100);
        assert_eq!(s.period_s, 2.0);
        assert_eq!(s.grants_per_s(), 50.0);
        // Latencies 0..=99 ms: nearest rank.
        assert_eq!(s.latency_ms, Some((49.0, 98.0)));

        let empty = Summary::new(
            &History::default(),
            Report::default(),
            FaultCounts::default(),
            5,
            5,
        );
        assert_eq!((empty.grants_per_s(), empty.latency_ms), (0.0, None));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[7], 0.5), 7);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[1, 2, 3, 4], 0.5), 2);
        assert_eq!(percentile(&[1, 2, 3, 4], 0.99), 4);
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 0.99), 990);
    }

    #[test]
    fn the_ratio_is_to_plain_when_plain_has_grants() {
        assert_eq!(ratio(50.0, 100.0), Some(0.5));
        assert_eq!(ratio(150.0, 100.0), Some(1.5));
        assert_eq!(ratio(10.0, 0.0), None);
    }

    #[test]
    fn the_table_has_the_faults_the_rate_and_against_plain_a_ratio_row() {
        let mut plain = summary(100, 7);
        plain.faults.record(Fault::Kill, false);
        plain.faults.record(Fault::Failover, true);
        let rec = summary(64, 0);
        let t = table(&[(Mode::Plain, &plain), (Mode::Recommended, &rec)]);
        let line = |start: &str| {
            t.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no row {start:?} in\n{t}"))
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(line("| faults: kill -9 master "), "1 0");
        assert_eq!(line("| faults: SENTINEL FAILOVER refused"), "1 0");
        assert_eq!(line("| grants acknowledged per second"), "100.0 64.0");
        assert_eq!(line("| acknowledged grant latency"), "1.0 / 2.0 1.0 / 2.0");
        assert_eq!(line("| grants vs plain"), "1.00 0.64");
        assert_eq!(line("| overlapping"), "7 0");
        // The rate follows "grants acknowledged".
        let names: Vec<&str> = t
            .lines()
            .map(|l| l.split('|').nth(1).unwrap().trim())
            .collect();
        let at = names
            .iter()
            .position(|n| *n == "grants acknowledged")
            .unwrap();
        assert_eq!(names[at + 1], "fault period (s)");
        // Without plain, no ratio.
        let alone = table(&[(Mode::Recommended, &rec)]);
        assert!(!alone.contains("grants vs plain"), "{alone}");
        assert!(alone.contains("faults: SIGSTOP replica 3 s"), "{alone}");
    }

    #[test]
    fn the_gate_fails_a_required_mode_with_a_violation_or_under_half_of_plain() {
        let plain = summary(100, 7);
        let half = summary(50, 0);
        let under = summary(49, 0);
        let mut lost = summary(80, 0);
        lost.report.lost_writes.count = 3;
        let mut unread = summary(80, 0);
        unread.report.unread_logs.push("{k1}:lock".into());

        // Plain's violations never fail; exactly half passes.
        assert!(gate(
            &[(Mode::Plain, &plain), (Mode::Recommended, &half)],
            &[Mode::Recommended],
            0
        )
        .is_empty());
        assert!(gate(&[(Mode::Plain, &plain)], &[Mode::Plain], 0).is_empty());
        assert!(gate(&[(Mode::Plain, &plain), (Mode::Recommended, &lost)], &[], 0).is_empty());

        let f = gate(
            &[(Mode::Plain, &plain), (Mode::Recommended, &under)],
            &[Mode::Recommended],
            0,
        );
        assert_eq!(f.len(), 1);
        assert!(
            f[0].starts_with("recommended: 49.0 grants per second, 0.49 of plain's 100.0"),
            "{f:?}"
        );

        let f = gate(
            &[(Mode::Plain, &plain), (Mode::Recommended, &lost)],
            &[Mode::Recommended],
            0,
        );
        assert_eq!(
            f,
            ["recommended: 3 violations (acknowledged guarded writes lost 3)"]
        );

        let f = gate(&[(Mode::Recommended, &unread)], &[Mode::Recommended], 0);
        assert_eq!(f.len(), 1);
        assert!(f[0].starts_with("recommended: logs not read"), "{f:?}");

        // Short of --faults-per-kind: the run proves nothing of the deployment.
        let mut short = summary(80, 0);
        short.faults.injected = [20, 20, 19, 20];
        short.faults.refused_failovers = 1;
        let f = gate(&[(Mode::Recommended, &short)], &[Mode::Recommended], 20);
        assert_eq!(
            f,
            ["recommended: not 20 faults of each kind before the time bound ([20, 20, 19, 20])"]
        );
        short.faults.injected[2] = 20;
        assert!(gate(&[(Mode::Recommended, &short)], &[Mode::Recommended], 20).is_empty());

        // Without plain, the grants are not compared; a required mode that did not run fails.
        assert!(gate(&[(Mode::Recommended, &under)], &[Mode::Recommended], 0).is_empty());
        let f = gate(
            &[(Mode::Plain, &plain)],
            &[Mode::Recommended, Mode::MinReplicas1],
            0,
        );
        assert_eq!(
            f,
            [
                "recommended: no result (its run failed)",
                "minreplicas1: no result (its run failed)"
            ]
        );
    }
}
