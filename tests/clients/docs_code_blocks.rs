//! The code blocks docs/CLIENTS.md shows for the languages without a client library (Node.js
//! and the shell) are, character for character, in the files whose flows run them.

use std::fs;

use crate::processes::manifest_dir;

/// The fenced code blocks of a Markdown text: (language tag, body).
fn code_blocks(md: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in md.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => blocks.push(open.take().unwrap()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    blocks
}

/// The text under the heading line `heading` (e.g. `## Guarded writes`) of a Markdown text, up
/// to the next heading of the same or a higher level (lines in code blocks are not headings).
fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let start = md
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no `{heading}` section"))
        + heading.len()
        + 2;
    let body = &md[start..];
    let mut in_code = false;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
                return &body[..offset];
            }
        }
        offset += line.len();
    }
    body
}

/// Whether `file` contains `block` line for line, at its own indentation or shifted right as
/// a whole (a snippet that runs inside a function or a `with` block).
fn contains_block(file: &str, block: &str) -> bool {
    if file.contains(block) {
        return true;
    }
    let first = block.lines().next().unwrap_or_default();
    file.lines()
        .filter_map(|line| line.strip_suffix(first))
        .filter(|indent| indent.chars().all(|c| c == ' '))
        .any(|indent| {
            let shifted: String = block
                .lines()
                .map(|l| match l {
                    "" => "\n".to_string(),
                    l => format!("{indent}{l}\n"),
                })
                .collect();
            file.contains(&shifted)
        })
}

/// Every code block of the section `heading` of the file `doc` is, character for character,
/// in a file that runs blocks of its language tag (from `runs`, (language, file) pairs; a
/// language may have several files), and every file of `runs` has a block shown: what the
/// page shows is what the tests run.
#[track_caller]
fn assert_doc_blocks_run(doc: &str, heading: &str, runs: &[(&str, &str)]) {
    let read = |rel: &str| {
        fs::read_to_string(manifest_dir().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    let blocks = code_blocks(section(&read(doc), heading));
    let mut shown = vec![false; runs.len()];
    for (lang, block) in &blocks {
        let files: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].0 == lang).collect();
        assert!(
            !files.is_empty(),
            "a `{lang}` block in {doc} `{heading}`, which no flow runs"
        );
        let found = files
            .iter()
            .find(|&&i| contains_block(&read(runs[i].1), block))
            .unwrap_or_else(|| {
                let names: Vec<&str> = files.iter().map(|&i| runs[i].1).collect();
                panic!(
                    "this `{lang}` block of {doc} `{heading}` is not, as shown, in {}:\n{block}",
                    names.join(" or ")
                )
            });
        shown[*found] = true;
    }
    for (i, (lang, file)) in runs.iter().enumerate() {
        assert!(
            shown[i],
            "no `{lang}` block of {doc} `{heading}` comes from {file}"
        );
    }
}

/// The Node.js recipes of docs/CLIENTS.md (`withLock` with its keep-alive, `Fenced` and
/// `guarded`, `withHold`, `withReadLock`, `withWriteLock` and `withPermit`) are, character for
/// character, in tests/clients/node/flow.js, whose flows run them (`ioredis_flow`: pattern,
/// shared holds and the keep-alive's losses).
#[test]
fn docs_node_recipes_are_the_ones_the_flows_run() {
    assert_doc_blocks_run(
        "docs/CLIENTS.md",
        "## Node.js (ioredis)",
        &[("js", "tests/clients/node/flow.js")],
    );
}

/// The shell helpers of docs/CLIENTS.md (`guarded`; `locked`, `read_locked`, `write_locked`
/// and `with_permit`) are, character for character, in tests/clients/guarded.sh and
/// tests/clients/shared.sh, which `redis_cli_flow` and `redis_cli_shared_holds` source and run.
#[test]
fn docs_shell_helpers_are_the_ones_the_flows_run() {
    assert_doc_blocks_run(
        "docs/CLIENTS.md",
        "## The shell (redis-cli)",
        &[
            ("sh", "tests/clients/guarded.sh"),
            ("sh", "tests/clients/shared.sh"),
        ],
    );
}
