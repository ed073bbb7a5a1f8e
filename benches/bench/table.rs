//! Tables of throughput phases: variants run in interleaved rounds, printed with their
//! ratios to their baselines.

#[allow(unused_imports)]
use crate::*;

/// A table row: a measurement, its short name for ratios, and the rows it is compared to.
pub(crate) struct Row {
    pub(crate) m: Measured,
    pub(crate) short: &'static str,
    pub(crate) vs: Vec<usize>,
}

/// Rows of one workload that share a table.
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) rows: Vec<Row>,
}

impl Table {
    /// This row's throughput and server-CPU ratios to row `j`.
    pub(crate) fn ratios(&self, i: usize, j: usize) -> (f64, f64) {
        let (a, b) = (&self.rows[i].m, &self.rows[j].m);
        (throughput_ratio(a, b), cpu_ratio(a, b))
    }

    pub(crate) fn print(&self) {
        println!("\n{}", self.title);
        println!(
            "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9} {:>7} {:>4}  vs baselines: throughput | server CPU/op",
            "", "batch", "ops/s", "spread", "p50µs", "p99µs", "p999µs", "srv µs/op", "srv cpu", "err"
        );
        for (i, row) in self.rows.iter().enumerate() {
            let m = &row.m;
            let (thr, cpu): (Vec<String>, Vec<String>) = row
                .vs
                .iter()
                .map(|&j| {
                    let (t, c) = self.ratios(i, j);
                    let name = self.rows[j].short;
                    (format!("{t:.2}× {name}"), format!("{c:.2}× {name}"))
                })
                .unzip();
            let ratios = if thr.is_empty() {
                String::new()
            } else {
                format!("{} | {}", thr.join(", "), cpu.join(", "))
            };
            println!(
                "  {:<36} {:>5} {:>11} {:>6} {:>7} {:>7} {:>7} {:>9.2} {:>6.0}% {:>4}  {}",
                m.label,
                m.depth,
                thousands(m.rate()),
                percent(m.spread()),
                m.hist.value_at_quantile(0.5),
                m.hist.value_at_quantile(0.99),
                m.hist.value_at_quantile(0.999),
                m.cpu_us_per_op(),
                m.cpu_util() * 100.0,
                m.errors,
                ratios
            );
        }
    }

    pub(crate) fn json(&self) -> Json {
        let rows = self.rows.iter().enumerate().map(|(i, row)| {
            let mut j = row.m.json();
            let ratios = row.vs.iter().map(|&k| {
                let (t, c) = self.ratios(i, k);
                obj(vec![
                    ("baseline", self.rows[k].m.label.as_str().into()),
                    ("throughput_ratio", t.into()),
                    ("server_cpu_ratio", c.into()),
                ])
            });
            if let Json::Obj(fields) = &mut j {
                fields.push(("vs".into(), Json::Arr(ratios.collect())));
            }
            j
        });
        obj(vec![
            ("title", self.title.as_str().into()),
            ("rows", Json::Arr(rows.collect())),
        ])
    }

    pub(crate) fn row(&self, label: &str, depth: usize) -> &Row {
        self.rows
            .iter()
            .find(|r| r.m.label == label && r.m.depth == depth)
            .unwrap_or_else(|| panic!("no row {label} at batch {depth}"))
    }

    pub(crate) fn find(&self, label: &str, depth: usize) -> &Measured {
        &self.row(label, depth).m
    }

    /// Row `a` against row `b` at `depth`, by paired rounds: (throughput, server CPU/op).
    pub(crate) fn vs(&self, a: &str, b: &str, depth: usize) -> (Paired, Paired) {
        Paired::vs(self.find(a, depth), self.find(b, depth))
    }

    /// Unexpected replies in all rows.
    pub(crate) fn errors(&self) -> u64 {
        self.rows.iter().map(|r| r.m.errors).sum()
    }
}

/// A variant of a table: label, short name, what it runs, the variants it is compared to.
pub(crate) type Variant<'a, T> = (&'a str, &'static str, T, &'a [usize]);

/// Runs each variant at each depth of `DEPTHS`, `ROUNDS` times interleaved.
pub(crate) fn table(
    srv: &Server,
    s: &Scripts,
    plan: &Plan,
    title: &str,
    variants: &[Variant<Op>],
) -> Table {
    table_with(srv, title, &DEPTHS, variants, |op, label, depth| {
        run_phase(srv, s, plan, plan.phase, (label, op, depth))
    })
}

/// Runs `run(what, label, depth)` for each variant at each of `depths`, `ROUNDS` times
/// interleaved (A B C, C B A, ...), each from an emptied keyspace.
pub(crate) fn table_with<T: Copy>(
    srv: &Server,
    title: &str,
    depths: &[usize],
    variants: &[Variant<T>],
    mut run: impl FnMut(T, &str, usize) -> Measured,
) -> Table {
    eprintln!("{title}");
    let mut flush = srv.conn();
    let mut rows = Vec::new();
    for &depth in depths {
        let base = rows.len();
        for &(label, short, _, vs) in variants {
            let m = Measured::empty(label, depth);
            let vs = vs.iter().map(|j| base + j).collect();
            rows.push(Row { m, short, vs });
        }
        for round in 0..ROUNDS {
            let mut order: Vec<usize> = (0..variants.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                flushall(&mut flush);
                let (label, _, what, _) = variants[i];
                let m = run(what, label, depth);
                rows[base + i].m.absorb(m);
            }
        }
    }
    Table {
        title: title.to_string(),
        rows,
    }
}
