//! The partition log: segment files written with direct I/O, sparse offset and time indexes
//! persisted per closed segment, recovery of a torn tail, retention, and per-producer sequence
//! state for idempotence.
//!
//! `storage` touches files, never sockets. The deciding parts — batch scanning, the sparse
//! indexes and their file format, producer sequence checks — are plain code in `scan`, `index`
//! and `producer_state`, tested without a runtime. Files are opened, read, written and synced
//! only through `io` (the glommio file seam); `partition` and `group_commit` use glommio's
//! timers, semaphores and tasks besides.

pub mod cleaner;
pub mod codec;
pub mod fair_lock;
pub mod group_commit;
pub mod index;
pub mod io;
pub mod leader_epoch;
pub mod log_start;
pub mod partition;
pub mod producer_state;
pub mod scan;
pub mod segment;
mod tail;
pub mod txn;

pub use partition::{
    remote_slice, AppendOutcome, LogConfig, OpenStats, Partition, PartitionError, ReadOutcome,
    RemoteSlice, SegmentCopy,
};
