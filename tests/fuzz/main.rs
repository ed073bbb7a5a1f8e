//! The seeded fuzzers (docs/guarantees.md, guarantee 6: bad input costs nothing): `args`
//! (malformed argument vectors of every command) and `restore` (`RESTORE` with lock payloads,
//! and the server's memory over long fuzzed runs). `FUZZ_SEED` replays a run, `FUZZ_COMMANDS`
//! and `FUZZ_RESTORES` change its length.

#[path = "../common/mod.rs"]
mod common;

mod args;
mod restore;
