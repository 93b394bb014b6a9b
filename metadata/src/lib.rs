//! # tributary-metadata
//!
//! The cluster metadata's pure half: what every node computes the same way from the same
//! input, with no executor, no I/O and no clock (time comes in as a value). It is moving here
//! from the broker a piece at a time — the image and its records, the metadata commands and
//! their `apply`, placement and reassignment, the quota records and Kafka's domain types — so
//! the compiler keeps it pure and a deterministic simulation can drive it.
//!
//! Today: the image (`catalog`), the metadata log's commands and their `apply` (`command`),
//! replica placement and elections (`placement`), reassignments (`reassign`), the active
//! controller's judgement of each broker's liveness (`liveness`),
//! `compression.type`'s codecs, the internal topics' names and which `__consumer_offsets`
//! partition holds a group, the client quota records, tiered storage's remote log metadata
//! (`remote_log`), and Kafka's nouns as types (`types`:
//! `TopicPartition`, `NodeId`, `Offset`, `ProducerId`, `ProducerEpoch`, `PartitionEpoch`,
//! `LeaderEpoch`).

#![forbid(unsafe_code)]

pub mod catalog;
pub mod command;
pub mod compression;
pub mod internal_topics;
pub mod liveness;
pub mod placement;
pub mod quota;
pub mod reassign;
pub mod remote_log;
pub mod types;
