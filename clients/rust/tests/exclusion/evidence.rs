//! What the logs in Redis show: fences in order, one worker per fence, each worker's
//! writes in sequence and all of them landed.

use super::*;

#[derive(Debug, Default)]
pub(crate) struct Evidence {
    pub(crate) entries: usize,
    pub(crate) by_lang: HashMap<Lang, usize>,
    pub(crate) by_worker: HashMap<String, u64>,
    pub(crate) fences: usize,
    /// An entry under a fence lower than one before it in the same log.
    pub(crate) decreases: usize,
    /// An entry under a fence that another worker wrote under first.
    pub(crate) shared: usize,
    /// A worker's entries out of its own order (a duplicate or a reordering).
    pub(crate) reordered: usize,
    /// Malformed entries, or an owner key that contradicts its log.
    pub(crate) other: usize,
    /// What each violation is, and whose entry it was.
    pub(crate) violations: Vec<(String, String)>,
}

impl Evidence {
    pub(crate) fn violated(&mut self, writer: &str, what: String) {
        self.violations.push((writer.to_string(), what));
    }

    pub(crate) fn count(&self) -> usize {
        self.violations.len()
    }
}

/// Reads `{res:n}:log` and `{res:n}:owner` for every key and checks them: in each log the
/// fences never decrease, the entries under one fence are one worker's, and each worker's
/// entries keep its order; the owner key is the last hold's.
pub(crate) fn check(con: &mut redis::Connection, keys: u32) -> Evidence {
    let mut ev = Evidence::default();
    for n in 0..keys {
        let log_key = format!("{{res:{n}}}:log");
        let log: Vec<String> = redis::cmd("LRANGE")
            .arg(&log_key)
            .arg(0)
            .arg(-1)
            .query(con)
            .expect("LRANGE");
        let mut max = 0u64;
        let mut writer_of: HashMap<u64, String> = HashMap::new();
        let mut last_seq: HashMap<String, u64> = HashMap::new();
        for (i, entry) in log.iter().enumerate() {
            let parts: Vec<&str> = entry.split(' ').collect();
            let (Some(fence), Some(seq), [_, id, _]) = (
                parts.first().and_then(|f| f.parse::<u64>().ok()),
                parts.get(2).and_then(|s| s.parse::<u64>().ok()),
                parts.as_slice(),
            ) else {
                ev.other += 1;
                ev.violated("?", format!("{log_key}[{i}] malformed: {entry:?}"));
                continue;
            };
            let id = id.to_string();
            ev.entries += 1;
            *ev.by_worker.entry(id.clone()).or_insert(0) += 1;
            if let Some(lang) = Lang::of(&id) {
                *ev.by_lang.entry(lang).or_insert(0) += 1;
            }
            if fence < max {
                ev.decreases += 1;
                ev.violated(
                    &id,
                    format!("{log_key}[{i}] {entry:?}: fence {fence} after fence {max}"),
                );
            }
            max = max.max(fence);
            let first = writer_of.entry(fence).or_insert_with(|| id.clone());
            if *first != id {
                ev.shared += 1;
                let what = format!("{log_key}[{i}] {entry:?}: fence {fence} was {first}'s");
                ev.violated(&id, what);
            }
            let before = last_seq.insert(id.clone(), seq).unwrap_or(0);
            if seq <= before {
                ev.reordered += 1;
                ev.violated(
                    &id,
                    format!("{log_key}[{i}] {entry:?}: after {id}'s seq {before}"),
                );
            }
        }
        ev.fences += writer_of.len();
        // Every hold writes the owner before its log entries, and guarded writes land only
        // under the key's newest fence: the owner's fence is at least the log's last one, and
        // at that fence it names the same worker.
        let owner: Option<String> = redis::cmd("GET")
            .arg(format!("{{res:{n}}}:owner"))
            .query(con)
            .expect("GET");
        if let Some(owner) = owner {
            let parsed = owner
                .split_once(' ')
                .and_then(|(f, id)| Some((f.parse::<u64>().ok()?, id.to_string())));
            let consistent = parsed.as_ref().is_some_and(|(fence, id)| {
                *fence > max || (*fence == max && writer_of.get(&max) == Some(id))
            });
            if !consistent && (max > 0 || parsed.is_none()) {
                ev.other += 1;
                ev.violated(
                    "?",
                    format!("{{res:{n}}}:owner {owner:?} against the log's last fence {max}"),
                );
            }
        }
    }
    ev
}
