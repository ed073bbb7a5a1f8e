//! The failover harness of issue 26. The history and its checker (`history`, `check`) are
//! pure, so that every rule of the checker is unit tested against planted histories without
//! a server; the rest is the harness that `src/bin/failover.rs` wires together:
//!
//! - `mode`: what a mode changes in servers and locks; `schedule`: the kinds of fault, their
//!   count, and modes run in parallel kept together; `summary`: a mode's result as the
//!   table shows it, the table of every mode, and `--require-safe`'s decision (all pure);
//! - `args`: the flags;
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

pub mod schedule;

pub mod summary;

pub mod args;

pub mod servers;

pub mod shared;

pub mod sentinel;

pub mod workload;

pub mod faults;

pub mod report;
