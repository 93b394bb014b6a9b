//! Partition replication, Kafka's ISR protocol, on the shard that owns each partition:
//!
//! - `leader`: what a leader keeps of its followers — each one's log end offset (the offset of
//!   its next fetch, which it sends only once what it fetched before is durable) and when it
//!   was last caught up — the high watermark over the ISR, and the ISR changes it proposes to
//!   the metadata quorum (shrink a follower behind for `replica.lag.time.max.ms`, grow it back
//!   once caught up);
//! - `fetcher`: a follower's fetch loop, one per shard and leader broker, appending what the
//!   leader returns with its offsets and epochs, truncating where the leader says the logs
//!   diverge, and moving its log start up to the leader's (DeleteRecords holds on every
//!   replica).
//!
//! The decisions are pure, in `tributary-replication` (time passed in; re-exported here); the
//! tasks only move bytes. Partitions
//! with one replica never touch any of it: their high watermark is their durable end, as
//! before replication existed.

pub mod fetcher;
pub mod leader;

pub use tributary_replication::{
    backlog_admits, divergence, truncation_target, FollowerState, IsrRules, LeaderEpoch,
    LeaderState, LinkId, OutOfSync, Turns,
};

pub use crate::conn::ReplicaLink;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use event_listener::Event;
use tributary_metadata::types::TopicPartition;

/// A partition this shard follows: whom it fetches from, at which leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follow {
    pub leader: i32,
    pub leader_epoch: LeaderEpoch,
}

/// One shard's replication state.
#[derive(Default)]
pub struct ShardReplicas {
    pub leading: RefCell<HashMap<TopicPartition, LeaderState>>,
    pub following: RefCell<HashMap<TopicPartition, Follow>>,
    /// Leader brokers with a fetcher task running on this shard.
    pub fetchers: RefCell<HashSet<i32>>,
    /// Notified when a partition starts following a leader, or follows it at a new epoch: that
    /// leader's fetcher, perhaps in a fetch the leader holds, fetches it at once.
    pub follows_changed: Event,
}

/// One partition of a follower's fetch, for the shard that leads it.
#[derive(Debug, Clone)]
pub struct ReplicaFetchItem {
    pub topic: String,
    pub partition: i32,
    pub follower: i32,
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub max_bytes: usize,
    /// The connection the fetch came over.
    pub link: LinkId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_served_in_the_order_they_were_taken() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let turns = std::rc::Rc::new(Turns::default());
                let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
                let tickets: Vec<u64> = (0..3).map(|_| turns.take()).collect();
                // Started last first: each still goes in its ticket's order.
                let tasks: Vec<_> = tickets
                    .into_iter()
                    .rev()
                    .map(|t| {
                        let (turns, order) = (turns.clone(), order.clone());
                        glommio::spawn_local(async move {
                            turns.wait(t).await;
                            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                            order.borrow_mut().push(t);
                            turns.done();
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await;
                }
                assert_eq!(*order.borrow(), vec![0, 1, 2]);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
