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
