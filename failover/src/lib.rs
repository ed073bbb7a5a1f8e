//! The failover harness's history and its checker (issue 26). The harness itself is
//! `src/bin/failover.rs`; this library is pure, so that every rule of the checker is unit
//! tested against planted histories without a server.

pub mod check;
pub mod history;
