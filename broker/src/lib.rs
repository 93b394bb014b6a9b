//! The Tributary broker: configuration, shards, listeners, routing and one handler per Kafka API.
//! `main.rs` is a thin command line around [`server::start`].

// Denied everywhere but `socket`, whose one `unsafe` borrow carries its SAFETY argument.
#![deny(unsafe_code)]

pub mod accept;
pub mod access;
pub mod authz;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod connection;
pub mod controller;
pub mod coordinator_log;
pub mod coordinators;
pub mod fetch_session;
pub mod fetch_wait;
pub mod group;
pub mod handlers;
pub mod inter_broker;
pub mod limits;
pub mod metrics;
pub mod numa;
pub mod partition_dirs;
pub mod quota;
pub mod replica;
pub mod routing;
pub mod sasl;
pub mod server;
pub mod shard;
pub mod socket;
pub mod tiered;
pub mod tls_acceptor;
pub mod tls_reload;
pub mod topic_config;
pub mod txn;
