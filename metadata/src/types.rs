//! Kafka's nouns as types, where a bare integer let one be mistaken for another. Each is a
//! transparent newtype: it is written to the image and the metadata log as the integer it
//! wraps, so the on-disk format does not change.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An epoch newtype: ordered, written as its integer, moved on by one at a time.
macro_rules! epoch {
    ($(#[$doc:meta])* $name:ident, $what:literal, $when:literal) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub i32);

        impl $name {
            #[doc = concat!("The epoch after this one: ", $when, " takes it.")]
            #[must_use]
            pub fn next(self) -> Self {
                let next = $name(self.0 + 1);
                debug_assert!(next > self, concat!($what, " {} overflowed"), self.0);
                next
            }

            /// Moves this epoch on to [`next`](Self::next).
            pub fn bump(&mut self) {
                *self = self.next();
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

epoch!(
    /// A partition's epoch (KRaft's `partitionEpoch`): it moves with every change of the
    /// partition's replicas, ISR or leader, so an ISR change proposed against one image is
    /// refused once a later change applied. Unlike the leader epoch it is never sent to clients.
    PartitionEpoch,
    "partition epoch",
    "every change of the partition's registration"
);

epoch!(
    /// A partition's leader epoch: it moves each time the partition gets a new leader (or the
    /// same leader anew), and it is what clients and followers send back
    /// (`current_leader_epoch`), so a request made against a deposed leader is refused.
    LeaderEpoch,
    "leader epoch",
    "every election"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_epoch_is_written_as_its_integer() {
        assert_eq!(serde_json::to_string(&PartitionEpoch(7)).unwrap(), "7");
        let read: PartitionEpoch = serde_json::from_str("7").unwrap();
        assert_eq!(read, PartitionEpoch(7));
        assert_eq!(read.next(), PartitionEpoch(8));
        assert_eq!(serde_json::to_string(&LeaderEpoch(3).next()).unwrap(), "4");
        let mut epoch = LeaderEpoch(3);
        epoch.bump();
        assert_eq!(epoch, LeaderEpoch(4));
    }
}
