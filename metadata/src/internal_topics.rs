//! The topics the cluster keeps for itself, by Kafka's names, and where a key lands in them.

/// Consumer groups' state and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Transaction coordinators' state.
pub const TXN_TOPIC: &str = "__transaction_state";

/// Internal topics: listed in metadata as internal, never written by clients.
pub fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TXN_TOPIC
}

/// The partition of `__consumer_offsets` that holds `group` (and of `__transaction_state` that
/// holds a transactional id): Kafka's `abs(key.hashCode) % partitions`, so a key lands where it
/// would on Kafka.
pub fn partition_for_group(group: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_land_where_kafka_puts_them() {
        // Java: "my-group".hashCode() == -1906497762; abs % 50 == 12.
        assert_eq!(partition_for_group("my-group", 50), 12);
        assert!((0..50).contains(&partition_for_group("", 50)));
        assert_eq!(partition_for_group("anything", 1), 0);
    }

    #[test]
    fn only_the_cluster_topics_are_internal() {
        assert!(is_internal(OFFSETS_TOPIC));
        assert!(is_internal(TXN_TOPIC));
        assert!(!is_internal("orders"));
        assert!(!is_internal("__consumer_offsets2"));
    }
}
