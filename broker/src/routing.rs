//! Partition ownership: exactly one shard owns each partition, and this function says which.

/// Index of a shard (one per pinned core).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardId(pub usize);

/// The shard that owns `topic`/`partition` among `shards`. Partitions of one topic are spread
/// round-robin from a per-topic starting shard, so a topic with N ≥ shards partitions uses every
/// core and different small topics land on different cores.
pub fn shard_for(topic: &str, partition: i32, shards: usize) -> ShardId {
    assert!(shards > 0);
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    ShardId(start.wrapping_add(partition.max(0) as usize) % shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_partitions_and_is_stable() {
        let owners: Vec<usize> = (0..8).map(|p| shard_for("orders", p, 4).0).collect();
        for s in 0..4 {
            assert_eq!(owners.iter().filter(|o| **o == s).count(), 2);
        }
        assert_eq!(shard_for("orders", 3, 4), shard_for("orders", 3, 4));
        assert_eq!(shard_for("x", 5, 1), ShardId(0));
    }
}
