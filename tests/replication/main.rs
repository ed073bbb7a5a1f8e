//! Replicas, the propagation of each change, and failover: `replica` (a replica holds exactly
//! what its master holds, refuses writes, and after promotion its leases and fences go on),
//! `propagation` (what the module skips sending when nothing reads it, and that a reader
//! brought in mid-traffic misses nothing), `failover` (a replica promoted after the master
//! died, or by `FAILOVER`), `shared_holds` (the same for shared holds, compared by
//! snapshots and decoded `DUMP`s), and `replica_loss` (`lock.replica-loss-pause-ms`: a master
//! that loses a replica pauses writes).

#[path = "../common/mod.rs"]
mod common;

mod failover;
mod fence_epochs;
mod propagation;
mod replica;
mod replica_loss;
mod shared_holds;
