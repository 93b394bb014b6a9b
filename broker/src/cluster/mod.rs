//! The cluster layer: the node's KRaft keys (`config`), the metadata log's commands and the
//! image they build (`command`, with `placement` and `reassign`: the metadata crate's,
//! re-exported), and `node`, which runs this
//! node's voter of the metadata quorum on shard 0: start-up, registration, publishing each
//! applied image to every shard, and the active controller's liveness checks.
//!
//! The quorum itself — Raft, its log files and its peer connections — is the
//! `tributary-quorum` crate; it knows nothing of Kafka. This layer knows nothing of Raft beyond
//! "propose a command, get its outcome once applied here".

pub mod config;
pub mod node;

// The metadata log's commands, placement, reassignment and the liveness judgement are the
// metadata crate's.
pub use tributary_metadata::{command, liveness, placement, reassign};

use std::sync::Arc;

use crate::catalog::Catalog;
use command::Outcome;

/// The state machine the quorum drives: the metadata image, replaced (not mutated) on every
/// applied entry so shards can hold the previous one.
pub struct MetadataState {
    pub image: Arc<Catalog>,
}

impl tributary_quorum::StateMachine for MetadataState {
    type Outcome = Outcome;

    fn apply(&mut self, index: u64, command: &[u8]) -> Outcome {
        let mut next = (*self.image).clone();
        let out = command::apply(&mut next, index, command);
        self.image = Arc::new(next);
        out
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&*self.image).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> anyhow::Result<()> {
        let image: Catalog = serde_json::from_slice(snapshot)
            .map_err(|e| anyhow::anyhow!("the metadata snapshot does not decode: {e}"))?;
        self.image = Arc::new(image);
        Ok(())
    }
}
