//! The lock flow from the clients people use: redis-cli, redis-py, ioredis and redis-rs, each
//! against a real server with the module. Every flow takes a token from a UUID, acquires with
//! a ttl, takes a new fence, writes through `LOCK.GUARD` (once under the current fence, which
//! lands, and once under the fence it replaced, which is refused), extends, reads
//! `LOCK.INFO`, releases, and has a second connection blocked in `LOCK.ACQUIRE … WAIT` that is
//! granted (with a larger fence) on release.
//!
//! Every flow also runs guarded-write helpers, and redis-py's `RedisCluster` runs its helper
//! against a three-master cluster (`redis_py_cluster_guard`). For the languages without a
//! client library, the helpers are the ones `docs/CLIENTS.md` shows, character for character
//! (`docs_code_blocks`): ioredis's (`node/flow.js`, with `withLock` and its keep-alive, whose
//! losses the `loss` flow checks) and the shell's (`guarded.sh`, `shared.sh`). The redis-py and
//! redis-rs helpers (`flow.py`, `redis_rs.rs`) are raw-command ones of the tests' own: the
//! docs show the client libraries (`clients/`) for those languages.
//!
//! Shared holds: every client runs read-write lock and semaphore recipes (the Node.js and shell
//! ones checked to be the code `docs/CLIENTS.md` shows): two readers hold the lock together
//! while a writer waits for both and a reader after the writer waits for it (each granted
//! within `shared_hold_checks::GRANT_WITHIN` of the release before it), the writer's guarded write lands and a
//! reader's fence is refused; three callers of a 2-permit semaphore, the third granted when
//! one releases, and one that gives up waiting without running; a reader's renewal, the
//! refused upgrade and a downgrade. The server's counters must show every step
//! (`lock_counters::assert_shared_counts`).
//!
//! redis-py is installed from `tests/clients/requirements.txt` (pinned, with hashes) into a
//! throwaway venv under `target/clients/`; ioredis with `npm ci` from
//! `tests/clients/node/package-lock.json` into that folder's `node_modules`. Both happen on
//! first use. A flow whose runtime (redis-cli, python3 with its venv module, node and npm) is
//! missing fails, naming what to install: a test that passes without having run would hide
//! that the flow was never checked.
//!
//! By client: `redis_cli`, `redis_cli_shared_holds`, `redis_py`, `ioredis` and `redis_rs` (raw
//! redis-rs helpers, its flows under it); `docs_code_blocks` checks docs/CLIENTS.md against
//! them; `processes`, `lock_counters` and `shared_hold_checks` serve them all.

#[path = "../common/mod.rs"]
mod common;

mod docs_code_blocks;
mod ioredis;
mod lock_counters;
mod processes;
mod redis_cli;
mod redis_cli_shared_holds;
mod redis_py;
mod redis_rs;
mod shared_hold_checks;
