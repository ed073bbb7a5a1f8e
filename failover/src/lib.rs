//! The failover harness of issue 26. The history and its checker (`history`, `check`) are
//! pure, so that every rule of the checker is unit tested against planted histories without
//! a server; the rest is the harness that `src/bin/failover.rs` wires together:
//!
//! - `args`: the flags; `mode`: what a mode changes in servers and locks;
//! - `servers`: the redis-server and Sentinel processes; `sentinel`: asking Sentinel which
//!   master it names, and the master of record;
//! - `shared`: the state every thread of a run shares;
//! - `workload`: the client threads; `faults`: the fault schedule and its injection;
//! - `report`: the settled master at the end, the final read, the history and the table.
//!
//! Each module imports only modules declared before it below.

pub mod history;

pub mod check;

pub mod mode;

pub mod args;

pub mod servers;

pub mod shared;

pub mod sentinel;

pub mod workload;

pub mod faults;

pub mod report;
