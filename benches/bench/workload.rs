//! What every workload gives back, so that `main` can run any of them alone or all in turn.

#[allow(unused_imports)]
use crate::*;

/// What a workload runs against: the run's server (a workload may start its own, as 10
/// does), the baseline scripts loaded there, the plan.
pub(crate) struct Ctx<'a> {
    pub(crate) srv: &'a Server,
    pub(crate) s: &'a Scripts,
    pub(crate) plan: &'a Plan,
    /// Whether the client runs on CPU 0 and servers on CPU 1.
    pub(crate) pinned: bool,
}

/// A row of the summary table: workload | measured | vs baseline [spread].
pub(crate) type SummaryRow = [String; 3];

/// A workload's results.
pub(crate) trait Outcome {
    /// Its tables and checks (stdout).
    fn print(&self);
    /// Its key and part in `bench-results.json`.
    fn json(&self) -> (&'static str, Json);
    /// The targets it is checked against.
    fn targets(&self) -> Vec<Target>;
    /// Its rows of the summary table.
    fn summary(&self) -> Vec<SummaryRow>;
    /// Unexpected replies (failed acquires, releases, writes), flagged on the output.
    fn errors(&self) -> u64;
}

/// Runs a workload: `BENCH_ONLY` names it by its key in `main::WORKLOADS`.
pub(crate) type Runner = fn(&Ctx) -> Box<dyn Outcome>;

/// A summary row from three parts.
pub(crate) fn row(
    what: impl Into<String>,
    measured: impl Into<String>,
    vs: impl Into<String>,
) -> SummaryRow {
    [what.into(), measured.into(), vs.into()]
}
