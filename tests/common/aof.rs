//! Reading a server's AOF files: the manifest's base file, the incremental file, and the
//! commands of a text AOF (RESP arrays of bulk strings).
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;

use super::Server;

/// The content of the last base file (`type b`) the AOF manifest of `s` lists.
pub fn latest_base(s: &Server) -> Vec<u8> {
    let dir = s.dir.join("appendonlydir");
    let manifest = fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    let base = manifest
        .lines()
        .filter(|l| l.contains("type b"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .next_back()
        .expect("base file in manifest")
        .to_string();
    fs::read(dir.join(base)).expect("read base AOF")
}

/// Every file the AOF manifest of `s` lists, in its order: (type, content), the type as the
/// manifest writes it (`b` base, `h` history, `i` incremental).
pub fn files(s: &Server) -> Vec<(String, Vec<u8>)> {
    let dir = s.dir.join("appendonlydir");
    let manifest = fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    manifest
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let name = w.get(w.iter().position(|x| *x == "file")? + 1)?.to_string();
            let kind = w.get(w.iter().position(|x| *x == "type")? + 1)?.to_string();
            Some((kind, fs::read(dir.join(&name)).expect("AOF file")))
        })
        .collect()
}

/// The path of an incremental AOF file (`*.incr.aof`) of `s`.
pub fn incr_path(s: &Server) -> PathBuf {
    let dir = s.dir.join("appendonlydir");
    fs::read_dir(&dir)
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file")
}

/// The content of an incremental AOF file of `s` (see [`incr_path`]).
pub fn incr(s: &Server) -> Vec<u8> {
    fs::read(incr_path(s)).expect("read the incremental AOF")
}

/// The commands of a text AOF file (RESP arrays of bulk strings), in order, each as its
/// arguments' bytes.
pub fn commands(b: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line(b: &[u8], at: &mut usize) -> String {
        let end = *at + b[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let s = String::from_utf8_lossy(&b[*at..end]).into_owned();
        *at = end + 2;
        s
    }
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let head = line(b, &mut at);
        let n: usize = head
            .strip_prefix('*')
            .unwrap_or_else(|| panic!("AOF: expected an array, got {head:?}"))
            .parse()
            .unwrap();
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(b, &mut at)
                .strip_prefix('$')
                .expect("AOF: bulk string")
                .parse()
                .unwrap();
            cmd.push(b[at..at + len].to_vec());
            at += len + 2;
        }
        out.push(cmd);
    }
    out
}

/// The first two arguments, as integers (-1 where one is not), of every command `name` (in
/// any case) in an AOF file, which may begin with an RDB preamble: the file is read as lines,
/// so that the binary preamble does not stop it.
pub fn two_int_args(file: &[u8], name: &str) -> Vec<(i64, i64)> {
    let text = String::from_utf8_lossy(file);
    let lines: Vec<&str> = text.split("\r\n").collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.eq_ignore_ascii_case(name) {
            let num = |j: usize| -> i64 { lines[j].parse().unwrap_or(-1) };
            out.push((num(i + 2), num(i + 4)));
        }
    }
    out
}

/// [`commands`], each argument as text.
pub fn text_commands(b: &[u8]) -> Vec<Vec<String>> {
    commands(b)
        .into_iter()
        .map(|c| {
            c.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect()
}
