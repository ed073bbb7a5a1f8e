//! Number formatting and the JSON written to `bench-results.json`.

#[allow(unused_imports)]
use crate::*;

// Output helpers: numbers, and a small hand-written JSON tree.

pub(crate) fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub(crate) fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.0}%", x * 100.0)
    } else {
        "-".into()
    }
}

pub(crate) fn ms(us: u64) -> String {
    format!("{:.2}ms", us as f64 / 1000.0)
}

pub(crate) fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}×")
    } else {
        "∞×".into()
    }
}

/// The steps of a workload's check, each as (what was done, what came back).
pub(crate) fn print_check(before: &str, steps: &[(String, String)]) {
    println!("  check (once, before {before}):");
    for (what, reply) in steps {
        println!("    {what:<54} -> {reply}");
    }
}

/// The steps of a check, each as `{"step": …, <outcome>: …}`.
pub(crate) fn check_json(steps: &[(String, String)], outcome: &str) -> Json {
    let steps = steps.iter().map(|(what, reply)| {
        Json::Obj(vec![
            ("step".into(), what.as_str().into()),
            (outcome.into(), reply.as_str().into()),
        ])
    });
    Json::Arr(steps.collect())
}

/// The summary table in Markdown, ready for docs/performance.md, with the machine and the command.
pub(crate) fn print_summary(rows: &[SummaryRow], machine: &Machine, plan: &Plan) {
    let quick = if plan.quick {
        " — BENCH_QUICK: a short smoke run, noisy"
    } else {
        ""
    };
    println!(
        "
Summary (Markdown; ratios: median of paired rounds [lowest–highest round]){quick}
"
    );
    println!("| workload | measured | vs baseline [spread] |");
    println!("| --- | --- | --- |");
    for [what, measured, vs] in rows {
        println!("| {what} | {measured} | {vs} |");
    }
    println!(
        "
{}; `{}`.",
        machine.line(),
        command_line()
    );
}

/// Writes the results, with the time of the run, to `$BENCH_JSON` or `bench-results.json` at
/// the crate root, after printing the total run time.
pub(crate) fn write_results(mut fields: Vec<(&str, Json)>, began: Instant) {
    let total = began.elapsed();
    println!("\nTotal run time: {:.0} s", total.as_secs_f64());
    let unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    fields.insert(0, ("generated_unix", unix.into()));
    fields.push(("total_seconds", total.as_secs_f64().into()));
    let mut out = String::new();
    obj(fields).render(&mut out, 0);
    out.push('\n');
    let path = std::env::var("BENCH_JSON").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("bench-results.json"),
        PathBuf::from,
    );
    fs::write(&path, out).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    println!("Results written to {}", path.display());
}

pub(crate) enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

pub(crate) fn obj(fields: Vec<(&str, Json)>) -> Json {
    Json::Obj(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

impl From<f64> for Json {
    fn from(x: f64) -> Json {
        if x.is_finite() {
            Json::Num(x)
        } else {
            Json::Null
        }
    }
}
impl From<u64> for Json {
    fn from(x: u64) -> Json {
        Json::Num(x as f64)
    }
}
impl From<bool> for Json {
    fn from(x: bool) -> Json {
        Json::Bool(x)
    }
}
impl From<&str> for Json {
    fn from(x: &str) -> Json {
        Json::Str(x.to_string())
    }
}
impl From<String> for Json {
    fn from(x: String) -> Json {
        Json::Str(x)
    }
}

impl Json {
    pub(crate) fn render(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => write!(out, "{b}").unwrap(),
            Json::Num(x) if x.fract() == 0.0 && x.abs() < 1e15 => write!(out, "{x:.0}").unwrap(),
            Json::Num(x) => write!(out, "{x}").unwrap(),
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items) if items.iter().all(|i| matches!(i, Json::Num(_))) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.render(out, indent);
                }
                out.push(']');
            }
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    pad(out, indent + 2);
                    item.render(out, indent + 2);
                }
                out.push('\n');
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    pad(out, indent + 2);
                    Json::Str(k.clone()).render(out, indent + 2);
                    out.push_str(": ");
                    v.render(out, indent + 2);
                }
                out.push('\n');
                pad(out, indent);
                out.push('}');
            }
        }
    }
}
