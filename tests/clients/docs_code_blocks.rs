//! The code blocks docs/CLIENTS.md (and the README) show are, character for character, in the
//! files whose flows run them.

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
/// in the file that runs it (by its language tag, from `runs`), and every language of `runs`
/// has one: what the page shows is what the tests run.
#[track_caller]
fn assert_doc_blocks_run(doc: &str, heading: &str, runs: &[(&str, &str)]) {
    let read = |rel: &str| {
        fs::read_to_string(manifest_dir().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    let blocks = code_blocks(section(&read(doc), heading));
    for (lang, block) in &blocks {
        let file = runs
            .iter()
            .find(|(l, _)| l == lang)
            .map(|(_, f)| f)
            .unwrap_or_else(|| panic!("a `{lang}` block in {doc} `{heading}`, which no flow runs"));
        assert!(
            contains_block(&read(file), block),
            "this `{lang}` block of {doc} `{heading}` is not, as shown, in {file}:\n{block}"
        );
    }
    for (lang, _) in runs {
        assert!(
            blocks.iter().any(|(l, _)| l == lang),
            "no `{lang}` block in {doc} `{heading}`"
        );
    }
}

/// Every code block of the "Guarded writes" section of docs/CLIENTS.md is, character for
/// character, in the file whose flow runs it.
#[test]
fn docs_guarded_helpers_are_the_ones_the_flows_run() {
    let runs = [
        ("python", "tests/clients/flow.py"),
        ("js", "tests/clients/node/flow.js"),
        ("rust", "tests/clients/redis_rs.rs"),
        ("sh", "tests/clients/guarded.sh"),
    ];
    assert_doc_blocks_run("docs/CLIENTS.md", "## Guarded writes", &runs);
}

/// The read-write lock and semaphore recipes of docs/CLIENTS.md, in every language, and the
/// README's uses of them, are, character for character, what the flows run
/// (`redis_py_flow`, `ioredis_flow`, `redis_rs_shared_holds`, `redis_cli_shared_holds`).
#[test]
fn docs_shared_recipes_are_the_ones_the_flows_run() {
    let runs = [
        ("python", "tests/clients/flow.py"),
        ("js", "tests/clients/node/flow.js"),
        ("rust", "tests/clients/redis_rs.rs"),
        ("sh", "tests/clients/shared.sh"),
    ];
    assert_doc_blocks_run("docs/CLIENTS.md", "### Read-write lock", &runs);
    assert_doc_blocks_run("docs/CLIENTS.md", "### Semaphore", &runs);
    assert_doc_blocks_run(
        "README.md",
        "### Read-write locks and semaphores",
        &[("python", "tests/clients/flow.py")],
    );
}
