//! Replicas, the propagation of each change, and failover: `replica` (a replica holds exactly
//! what its master holds, refuses writes, and after promotion its leases and fences go on),
//! `propagation` (what the module skips sending when nothing reads it, and that a reader
//! brought in mid-traffic misses nothing), `failover` (a replica promoted after the master
//! died, or by `FAILOVER`), `shared_holds` (the same for shared holds, compared by
//! snapshots and decoded `DUMP`s), `replica_loss` (`lock.replica-loss-pause-ms`: a master
//! that loses a replica pauses writes), and `stalls` (`lock.stall-threshold-ms`: a master
//! whose event loop stood still, as it may while a replica is promoted, pauses writes too).

#[path = "../common/mod.rs"]
mod common;

mod failover;
mod fence_epochs;
mod propagation;
mod replica;
mod replica_loss;
mod shared_holds;
mod stalls;
