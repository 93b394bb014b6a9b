//! The partition log: segment files written with direct I/O, recovery of a torn tail, an
//! in-memory batch index, and per-producer sequence state for idempotence.
//!
//! `storage` touches files, never sockets. The deciding parts — batch scanning for recovery and
//! producer sequence checks — are plain functions in `scan` and `producer_state`, tested without
//! a runtime; `partition` and `io` are the only modules that talk to glommio.

pub mod io;
pub mod log_start;
pub mod partition;
pub mod producer_state;
pub mod scan;

pub use partition::{AppendOutcome, LogConfig, Partition, PartitionError, ReadOutcome};
