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
    backlog_admits, divergence, truncation_target, FollowerState, IsrRules, LeaderState, LinkId,
    OutOfSync, Turns,
};

pub use crate::conn::ReplicaLink;

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
