//! Kafka's nouns as types, where a bare integer let one be mistaken for another. Each is a
//! transparent newtype: it is written to the image and the metadata log as the integer it
//! wraps, so the on-disk format does not change. `TopicPartition` is written as the
//! `[topic, partition]` pair it replaced, for the same reason. The integer is taken (`.0`)
//! only at the edges: wire structs and storage files.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

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

/// An id or offset newtype: written as its integer, compared and hashed as it. Its `Debug`
/// is the integer's too, so an ISR in a log line still reads `[1, 2]`, not `[NodeId(1), ..]`.
macro_rules! id {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $int);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }
    };
}

id!(
    /// A broker's (or controller's) `node.id`: what replicas, the ISR and a leader name.
    NodeId(i32)
);

id!(
    /// A producer's id (Kafka's `producerId`), handed out in blocks by the controller; with
    /// its [`ProducerEpoch`] it names one producer session.
    ProducerId(i64)
);

id!(
    /// A producer's epoch (Kafka's `producerEpoch`): moved on each time its transactional id
    /// is initialised again, so the session before it is fenced.
    ProducerEpoch(i16)
);

id!(
    /// A record's position in a partition's log, counted in records from the first ever
    /// written: a `base_offset`, a `high_watermark`, a log end offset. (A byte location in a
    /// file is a `position`, never an offset.)
    Offset(i64)
);

impl Offset {
    /// The offset after this one.
    #[must_use]
    pub fn next(self) -> Self {
        self + 1
    }
}

/// `offset + n`: `n` records further on.
impl Add<i64> for Offset {
    type Output = Offset;
    fn add(self, n: i64) -> Offset {
        Offset(self.0 + n)
    }
}

impl AddAssign<i64> for Offset {
    fn add_assign(&mut self, n: i64) {
        self.0 += n;
    }
}

/// `offset - n`: `n` records back.
impl Sub<i64> for Offset {
    type Output = Offset;
    fn sub(self, n: i64) -> Offset {
        Offset(self.0 - n)
    }
}

/// `later - earlier`: the number of records between two offsets.
impl Sub for Offset {
    type Output = i64;
    fn sub(self, earlier: Offset) -> i64 {
        self.0 - earlier.0
    }
}

/// One partition of one topic: the key of everything per partition. Written as the
/// `[topic, partition]` pair it replaced (`from`/`into` the tuple), so a metadata command
/// naming partitions reads the same bytes it always did.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "(String, i32)", into = "(String, i32)")]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl From<(String, i32)> for TopicPartition {
    fn from((topic, partition): (String, i32)) -> Self {
        TopicPartition { topic, partition }
    }
}

impl From<TopicPartition> for (String, i32) {
    fn from(tp: TopicPartition) -> Self {
        (tp.topic, tp.partition)
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
        assert_eq!(serde_json::to_string(&LeaderEpoch(3).next()).unwrap(), "4");
        let mut epoch = LeaderEpoch(3);
        epoch.bump();
        assert_eq!(epoch, LeaderEpoch(4));
    }

    #[test]
    fn ids_and_offsets_are_written_as_their_integers() {
        assert_eq!(serde_json::to_string(&NodeId(3)).unwrap(), "3");
        assert_eq!(serde_json::to_string(&ProducerId(4000)).unwrap(), "4000");
        assert_eq!(serde_json::to_string(&ProducerEpoch(-1)).unwrap(), "-1");
        assert_eq!(serde_json::to_string(&Offset(42)).unwrap(), "42");
        assert_eq!(format!("{:?}", [NodeId(1), NodeId(2)]), "[1, 2]");
        let read: Offset = serde_json::from_str("42").unwrap();
        assert_eq!(read, Offset(42));
    }

    #[test]
    fn an_offset_moves_by_records() {
        assert_eq!(Offset(9).next(), Offset(10));
        assert_eq!(Offset(9) + 3, Offset(12));
        assert_eq!(Offset(9) - 3, Offset(6));
        let mut end = Offset(9);
        end += 2;
        assert_eq!(end, Offset(11));
        assert_eq!(Offset(12) - Offset(9), 3);
        assert!(Offset(9) < Offset(10));
    }

    #[test]
    fn a_topic_partition_is_written_as_the_pair_it_replaced() {
        let tuple: (String, i32) = ("orders".to_string(), 7);
        let tp = TopicPartition::new("orders", 7);
        let old = serde_json::to_vec(&tuple).unwrap();
        assert_eq!(serde_json::to_vec(&tp).unwrap(), old);
        assert_eq!(old, br#"["orders",7]"#);
        let read: TopicPartition = serde_json::from_slice(&old).unwrap();
        assert_eq!(read, tp);
        assert_eq!(tp.to_string(), "orders-7");
        // Ordered as the tuple was: by topic, then partition.
        assert!(TopicPartition::new("a", 9) < TopicPartition::new("b", 0));
        assert!(TopicPartition::new("a", 1) < TopicPartition::new("a", 2));
    }
}
