//! The Kafka wire protocol as Tributary speaks it: framing, request headers, the API registry,
//! RecordBatch v2 views, request decoders and the hand-written Fetch response encoder.
//!
//! This crate is a pure codec: it never does I/O, never spawns, never sleeps. Every decoder takes
//! client bytes and returns `Result`; no input may panic it, and no allocation is sized from a
//! count the client sent without first checking that count against the bytes actually present.

#![forbid(unsafe_code)]

pub mod consumer_group_records;
pub mod consumer_protocol;
pub mod error_code;
pub mod frame;
pub mod fuzzing;
pub mod group_records;
pub mod header;
pub mod record_batch;
pub mod records;
pub mod registry;
pub mod requests;
pub mod response;
pub mod topic;
pub mod txn_records;
pub mod wire;

pub use error_code::ErrorCode;
pub use wire::{DecodeError, Reader};
