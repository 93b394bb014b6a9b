//! # tributary-quorum
//!
//! The cluster-metadata Raft quorum, run on a glommio executor. Built on raft-rs (`RawNode`),
//! which supplies only the consensus module; this crate supplies the rest:
//!
//! - **the durable log** (`storage`): an append-only entry file, a hard-state file and a snapshot
//!   file in the metadata directory, with checksums, torn-tail recovery and compaction;
//! - **the in-memory log** raft-rs reads (`mem_log`) — the metadata log is small;
//! - **the transport** (`transport`): length-prefixed raft messages over TCP between the
//!   configured voters, a handshake that refuses anyone else, reconnects with capped backoff;
//! - **the driver** (`driver`): one task owning the `RawNode`, ticking, stepping, and handling
//!   each `Ready`;
//! - **the handle** [`Quorum`]: open, propose and await the outcome, read the state machine, see
//!   who leads, shut down.
//!
//! It owns the quorum's directory, its listener and its peer connections. It must not know
//! Kafka: commands are opaque bytes applied by the caller's [`StateMachine`], and no broker type
//! appears here. Node ids are Kafka `node.id`s; raft ids (node id + 1, since raft-rs reserves 0)
//! never leave the crate. Membership is static: every node starts with all configured voters.
//! Nodes outside the voters are **observers** (`observer`): they follow the committed log by
//! fetching it from a voter, hold it in memory only, and forward their proposals.
//!
//! **Durability rule.** Entries, term and vote are on disk (`fdatasync` on the executor's
//! blocking thread) before raft's `persisted_messages()` are sent — votes and append
//! acknowledgements — and before `advance()`. The commit index is written with them when they
//! change, otherwise at most once per heartbeat interval and at shutdown: Raft does not need it
//! durable, it only lets a restart apply more before `open` returns. Received snapshots are on
//! disk before they are restored into the state machine. A proposal resolves only once its
//! entry is committed and applied on the proposing node. No file-system call runs on the
//! executor thread.

#![forbid(unsafe_code)]

mod config;
mod core;
mod doubts;
mod driver;
mod logger;
mod mem_log;
mod observer;
mod quorum;
// Public for the integration tests (and a future log-dump tool), which read the files
// directly; not part of the API the broker codes against.
#[doc(hidden)]
pub mod storage;
mod transport;

pub use crate::core::Evidence;
pub use config::{
    QuorumConfig, Role, DEFAULT_ELECTION_TIMEOUT, DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_PROPOSAL_TIMEOUT, DEFAULT_SNAPSHOT_EVERY_ENTRIES,
};
pub use doubts::{PeerDoubts, ENDED_DOUBT_MAX, GONE_DOUBT_MAX};
pub use quorum::{Quorum, COMMAND_BYTES_MAX};
pub use transport::{FRAME_BYTES_MAX, HANDSHAKE_MAGIC, HANDSHAKE_VERSION};

/// The replicated state the quorum's log builds, supplied by the caller. Its methods run on
/// the quorum's driver task and must not call back into the [`Quorum`] holding it.
pub trait StateMachine: 'static {
    type Outcome: Clone + 'static;
    /// Applies one committed command, deterministically (same result on every node). `index`
    /// is the raft log index.
    fn apply(&mut self, index: u64, command: &[u8]) -> Self::Outcome;
    /// The whole state as bytes, for a snapshot. Must fit in a transport frame
    /// ([`FRAME_BYTES_MAX`]) to reach a follower that fell behind.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> anyhow::Result<()>;
}

/// Why a proposal did not resolve with an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error(
        "no quorum leader is known, or the leader cannot reach a majority; retry once a leader \
         is elected"
    )]
    NoLeader,
    #[error(
        "this node is not the quorum leader at term {term} any more; the decision is left to the \
         new leader"
    )]
    NotLeader { term: u64 },
    #[error(
        "the proposal was not applied within the proposal timeout; it may still be applied, \
         so check the state before retrying a command that is not idempotent"
    )]
    Timeout,
    #[error("the quorum is shut down; reopen it to propose")]
    Shutdown,
    #[error("command of {len} bytes exceeds the {max}-byte limit; split it into smaller commands")]
    TooLarge { len: usize, max: usize },
    #[error("the quorum stopped after a storage failure ({0}); fix the disk and restart the node")]
    Io(String),
}
