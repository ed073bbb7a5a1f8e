//! Ratios over paired rounds: a variant's round against its baseline's round next to it, the
//! median over rounds reported with the lowest and highest round's ratio.

#[allow(unused_imports)]
use crate::*;

/// A ratio of paired rounds: its median and range over the rounds.
#[derive(Clone, Copy)]
pub(crate) struct Paired {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Paired {
    /// Each round of `a` over the round of `b` next to it.
    pub(crate) fn of(a: &[f64], b: &[f64]) -> Paired {
        let r = paired_ratios(a, b);
        Paired {
            median: paired_median(a, b),
            min: r.first().copied().unwrap_or(f64::NAN),
            max: r.last().copied().unwrap_or(f64::NAN),
        }
    }
    /// `a`'s throughput and server CPU per op against `b`'s (CPU: `b`'s µs/op over `a`'s, so
    /// above 1 means `a` costs less).
    pub(crate) fn vs(a: &Measured, b: &Measured) -> (Paired, Paired) {
        (
            Paired::of(&a.rounds, &b.rounds),
            Paired::of(&b.round_cpu, &a.round_cpu),
        )
    }
    /// (max − min) / median of the rounds' ratios.
    pub(crate) fn spread(&self) -> f64 {
        (self.max - self.min) / self.median
    }
    /// `0.97× [0.95–0.99]`.
    pub(crate) fn show(&self) -> String {
        format!("{:.2}× [{:.2}–{:.2}]", self.median, self.min, self.max)
    }
    pub(crate) fn json(&self) -> Json {
        obj(vec![
            ("median", self.median.into()),
            ("min", self.min.into()),
            ("max", self.max.into()),
            ("spread", self.spread().into()),
        ])
    }
}

/// The median over rounds of `a`'s ops/s over `b`'s in the same round. Rounds of a variant
/// and its baselines run next to each other, so a slow spell of a shared machine shows in
/// both halves of a pair; one long aggregate would carry it into the ratio.
pub(crate) fn throughput_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&a.rounds, &b.rounds)
}

/// As `throughput_ratio`, for server CPU per op (`b`'s over `a`'s: above 1 means `a` costs less).
pub(crate) fn cpu_ratio(a: &Measured, b: &Measured) -> f64 {
    paired_median(&b.round_cpu, &a.round_cpu)
}

pub(crate) fn paired_median(a: &[f64], b: &[f64]) -> f64 {
    let r = paired_ratios(a, b);
    match r.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => r[n / 2],
        n => (r[n / 2 - 1] + r[n / 2]) / 2.0,
    }
}

/// Each round's `a` over `b`'s round next to it, sorted.
pub(crate) fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    assert_eq!(a.len(), b.len(), "rounds to pair");
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(f64::total_cmp);
    r
}

/// Rows of a table compared by paired rounds: (variant, baseline) labels, at some depths.
pub(crate) struct Comparisons<'a> {
    pub(crate) table: &'a Table,
    pub(crate) pairs: &'a [(&'a str, &'a str)],
    pub(crate) depths: &'a [usize],
}

impl Comparisons<'_> {
    fn each(&self) -> impl Iterator<Item = (&Row, &Row, (Paired, Paired))> + '_ {
        self.depths.iter().flat_map(move |&depth| {
            self.pairs.iter().map(move |&(a, b)| {
                let (a, b) = (self.table.row(a, depth), self.table.row(b, depth));
                (a, b, Paired::vs(&a.m, &b.m))
            })
        })
    }

    /// One line per pair and depth: throughput and server CPU/op, median [lowest–highest].
    pub(crate) fn print(&self) {
        println!("  ratios, median of paired rounds [lowest–highest round] (spread of the ratio):");
        for (a, b, (thr, cpu)) in self.each() {
            let name = format!("{}/{}", a.short, b.short);
            println!(
                "    {name:<18} batch {:>2}: throughput {} ({}), server CPU/op {}",
                a.m.depth,
                thr.show(),
                percent(thr.spread()),
                cpu.show(),
            );
        }
    }

    pub(crate) fn json(&self) -> Json {
        let ratios = self.each().map(|(a, b, (thr, cpu))| {
            obj(vec![
                ("variant", a.m.label.as_str().into()),
                ("baseline", b.m.label.as_str().into()),
                ("pipeline", (a.m.depth as u64).into()),
                ("throughput", thr.json()),
                ("server_cpu", cpu.json()),
            ])
        });
        Json::Arr(ratios.collect())
    }
}
