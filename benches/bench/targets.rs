//! The targets the results are checked against.

#[allow(unused_imports)]
use crate::*;

// Targets of issue 4, checked against the measurements.

pub(crate) struct Target {
    pub(crate) what: String,
    pub(crate) measured: f64,
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

pub(crate) fn target(
    what: impl Into<String>,
    measured: f64,
    cmp: &str,
    goal: f64,
    unit: &'static str,
) -> Target {
    Target {
        what: what.into(),
        measured,
        goal,
        at_least: cmp == ">=",
        unit,
    }
}
