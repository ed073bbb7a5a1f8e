//! The targets the results are checked against: issue #14's list, with issue 4's targets
//! for the Lua, fenced and `LOCK.ACQUIRE` comparisons, the exclusion checks of issues 4
//! and 13, and issue 22's for many holds on one key. Each workload states its own
//! (`Outcome::targets`).

#[allow(unused_imports)]
use crate::*;

pub(crate) struct Target {
    /// The issue that set it: `#14`, `#4`, `#13`, `#22`.
    pub(crate) issue: &'static str,
    pub(crate) what: String,
    pub(crate) measured: f64,
    /// The lowest and highest round's value, where there are rounds.
    pub(crate) range: Option<(f64, f64)>,
    pub(crate) goal: f64,
    /// true: measured ≥ goal is met; false: measured ≤ goal is met.
    pub(crate) at_least: bool,
    pub(crate) unit: &'static str,
}

impl Target {
    pub(crate) fn met(&self) -> bool {
        if self.at_least {
            self.measured >= self.goal
        } else {
            self.measured <= self.goal
        }
    }
}

/// A target without rounds to show the spread of.
pub(crate) fn target(
    issue: &'static str,
    what: impl Into<String>,
    measured: f64,
    cmp: &str,
    goal: f64,
    unit: &'static str,
) -> Target {
    Target {
        issue,
        what: what.into(),
        measured,
        range: None,
        goal,
        at_least: cmp == ">=",
        unit,
    }
}

/// A ratio of paired rounds that must reach `goal`: its median, with its range.
pub(crate) fn ratio_target(
    issue: &'static str,
    what: impl Into<String>,
    p: Paired,
    goal: f64,
) -> Target {
    Target {
        range: Some((p.min, p.max)),
        ..target(issue, what, p.median, ">=", goal, "×")
    }
}

pub(crate) fn print_targets(targets: &[Target]) {
    println!(
        "\nTargets of issue #14 (with issue 4's for the Lua, fenced and LOCK.ACQUIRE comparisons, \
         the exclusion checks of issues 4 and 13, and issue 22's for many holds); \
         [lowest–highest round]"
    );
    for t in targets {
        // A fairness index needs four decimals (0.9989 misses 0.999), a ratio two or three.
        let fine = t.unit.is_empty() && t.goal > 0.0 && t.goal < 1.0;
        let num = |x: f64, p: usize| format!("{x:.*}", if fine { 4 } else { p });
        let range = t.range.map_or(String::new(), |(lo, hi)| {
            format!("[{}–{}]", num(lo, 2), num(hi, 2))
        });
        let goal = format!(
            "{} {}{}",
            if t.at_least { "≥" } else { "≤" },
            t.goal,
            t.unit
        );
        println!(
            "  {:<4} {:<58} {:>8}{:<3} {:<15} goal {:<8} {}",
            t.issue,
            t.what,
            num(t.measured, 3),
            t.unit,
            range,
            goal,
            if t.met() { "met" } else { "MISSED" }
        );
    }
}

pub(crate) fn targets_json(targets: &[Target]) -> Json {
    Json::Arr(
        targets
            .iter()
            .map(|t| {
                let (lo, hi) = t.range.unwrap_or((f64::NAN, f64::NAN));
                obj(vec![
                    ("issue", t.issue.into()),
                    ("what", t.what.as_str().into()),
                    ("measured", t.measured.into()),
                    ("lowest_round", lo.into()),
                    ("highest_round", hi.into()),
                    ("goal", t.goal.into()),
                    ("at_least", t.at_least.into()),
                    ("met", t.met().into()),
                ])
            })
            .collect(),
    )
}
