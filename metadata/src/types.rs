//! Kafka's nouns as types, where a bare integer let one be mistaken for another. Each is a
//! transparent newtype: it is written to the image and the metadata log as the integer it
//! wraps, so the on-disk format does not change.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A partition's epoch (KRaft's `partitionEpoch`): it moves with every change of the
/// partition's replicas, ISR or leader, so an ISR change proposed against one image is refused
/// once a later change applied. Unlike the leader epoch it is never sent to clients.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PartitionEpoch(pub i32);

impl PartitionEpoch {
    /// The epoch after this one: every change of the partition's registration takes it.
    #[must_use]
    pub fn next(self) -> Self {
        let next = PartitionEpoch(self.0 + 1);
        debug_assert!(next > self, "partition epoch {} overflowed", self.0);
        next
    }

    /// Moves this epoch on to [`next`](Self::next).
    pub fn bump(&mut self) {
        *self = self.next();
    }
}

impl fmt::Display for PartitionEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition's leader epoch: it moves each time the partition gets a new leader (or the same
/// leader anew), and it is what clients and followers send back (`current_leader_epoch`), so a
/// request made against a deposed leader is refused.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// The epoch after this one: every election takes it.
    #[must_use]
    pub fn next(self) -> Self {
        let next = LeaderEpoch(self.0 + 1);
        debug_assert!(next > self, "leader epoch {} overflowed", self.0);
        next
    }

    /// Moves this epoch on to [`next`](Self::next).
    pub fn bump(&mut self) {
        *self = self.next();
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_epoch_is_written_as_its_integer() {
        assert_eq!(serde_json::to_string(&PartitionEpoch(7)).unwrap(), "7");
        let read: PartitionEpoch = serde_json::from_str("7").unwrap();
        assert_eq!(read, PartitionEpoch(7));
        assert_eq!(read.next(), PartitionEpoch(8));
    }
}
