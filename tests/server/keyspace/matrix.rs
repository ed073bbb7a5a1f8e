//! The matrix: every keyspace operation against a waiter in every state, one test per
//! operation (`matrix_*`), its states run in parallel, each on its own server.

use crate::keyspace::matrix_cases::{Op, State, STATES};
use crate::keyspace::matrix_scenario::scenario;

/// Every meaningful state against `op`, in parallel (each on its own server).
fn matrix(op: Op) {
    let states: Vec<State> = STATES
        .into_iter()
        .filter(|s| op.in_multi() || !s.undelivered())
        .collect();
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .iter()
            .map(|&state| scope.spawn(move || scenario(op, state)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("scenario thread"))
            .collect()
    });
    if !problems.is_empty() {
        panic!(
            "{}: {} problem(s):\n  - {}",
            op.label(),
            problems.len(),
            problems.join("\n  - ")
        );
    }
}

macro_rules! matrix_tests {
    ($($name:ident => $op:expr,)*) => {
        $(
            #[test]
            fn $name() {
                matrix($op);
            }
        )*
    };
}

matrix_tests! {
    matrix_del => Op::Del,
    matrix_unlink => Op::Unlink,
    matrix_flushdb => Op::FlushDb,
    matrix_flushdb_sync => Op::FlushDbSync,
    matrix_flushdb_async => Op::FlushDbAsync,
    matrix_flushall => Op::FlushAll,
    matrix_flushall_sync => Op::FlushAllSync,
    matrix_flushall_async => Op::FlushAllAsync,
    matrix_rename_away => Op::RenameAway,
    matrix_renamenx_away => Op::RenameNxAway,
    matrix_rename_onto => Op::RenameOnto,
    matrix_renamenx_onto => Op::RenameNxOnto,
    matrix_move => Op::MoveAway,
    matrix_swapdb => Op::SwapDb,
    matrix_swapdb_both_held => Op::SwapDbBothHeld,
    matrix_copy_replace_onto => Op::CopyReplaceOnto,
    matrix_restore_replace_onto => Op::RestoreReplaceOnto,
    matrix_overwrite => Op::Overwrite,
    matrix_expire => Op::Expire,
    matrix_evict_allkeys_random => Op::EvictRandom,
    matrix_evict_allkeys_lru => Op::EvictLru,
    matrix_migrate => Op::Migrate,
    matrix_migrate_replace => Op::MigrateReplace,
    matrix_debug_reload => Op::DebugReload,
}
