//! The checker's report as issue 26's table: one column per mode, the same rows in each.

use std::fmt::Write as _;

use super::Report;

/// The table with a column per `(mode, report)`, rows named once on the left.
pub fn table(columns: &[(&str, &Report)]) -> String {
    let cells: Vec<(&str, Vec<(String, String)>)> =
        columns.iter().map(|(m, r)| (*m, r.rows())).collect();
    render(&cells)
}

/// A table with a column per `(name, rows)`, every column with the same rows, in the same
/// order; the rows' names are taken from the first column.
pub fn render(columns: &[(&str, Vec<(String, String)>)]) -> String {
    let cells: Vec<&Vec<(String, String)>> = columns.iter().map(|(_, c)| c).collect();
    let names: Vec<&String> = cells
        .first()
        .map_or(Vec::new(), |c| c.iter().map(|(n, _)| n).collect());
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    let widths: Vec<usize> = columns
        .iter()
        .zip(&cells)
        .map(|((mode, _), c)| {
            c.iter()
                .map(|(_, v)| v.len())
                .chain([mode.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let _ = write!(out, "| {:width$} |", "");
    for ((mode, _), w) in columns.iter().zip(&widths) {
        let _ = write!(out, " {mode:>w$} |");
    }
    let _ = write!(out, "\n| {} |", "-".repeat(width));
    for w in &widths {
        let _ = write!(out, " {}: |", "-".repeat(w - 1));
    }
    out.push('\n');
    for (i, name) in names.iter().enumerate() {
        let _ = write!(out, "| {name:width$} |");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, " {:>w$} |", c[i].1);
        }
        out.push('\n');
    }
    out
}

impl Report {
    /// The table of issue 26, then the operations' outcomes and examples of each violation.
    pub fn table(&self, mode: &str) -> String {
        table(&[(mode, self)]) + &self.details()
    }

    /// The table's rows: issue 26's, then the operations' outcomes.
    pub fn rows(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = vec![
            ("failovers".into(), self.failovers.to_string()),
            ("grants acknowledged".into(), self.acquires.ok.to_string()),
            (
                "grants acknowledged by a master Sentinel had already deposed".into(),
                self.deposed_grants.to_string(),
            ),
            (
                "overlapping acknowledged holds on one key (pairs)".into(),
                self.overlaps.count.to_string(),
            ),
            (
                "acknowledged grants provably lost".into(),
                self.lost_grants.count.to_string(),
            ),
            (
                "acknowledged guarded writes lost".into(),
                self.lost_writes.count.to_string(),
            ),
            (
                "guarded writes out of fence order".into(),
                self.write_order.count.to_string(),
            ),
            (
                "fence regressions / repeats".into(),
                format!(
                    "{} / {}",
                    self.fence_regressions.count, self.fence_repeats.count
                ),
            ),
            (
                "unexplained log entries".into(),
                self.unexplained_entries.count.to_string(),
            ),
        ];
        for (name, t) in [
            ("acquires", self.acquires),
            ("guarded writes", self.writes),
            ("extends", self.extends),
            ("releases", self.releases),
        ] {
            rows.push((
                format!("{name}: ok / failed / unknown"),
                format!("{} / {} / {}", t.ok, t.failed, t.unknown),
            ));
        }
        rows
    }

    /// The keys whose logs were not read, and examples of each violation.
    pub fn details(&self) -> String {
        let mut out = String::new();
        if !self.unread_logs.is_empty() {
            let _ = writeln!(
                out,
                "\nlogs not read (writes not judged): {:?}",
                self.unread_logs
            );
        }
        for (name, v) in self.kinds() {
            if !v.examples.is_empty() {
                let _ = writeln!(out, "\n{name}, e.g.:");
                for e in &v.examples {
                    let _ = writeln!(out, "  {e}");
                }
            }
        }
        out
    }
}
