//! OffsetForLeaderEpoch request (v2–v4; Kafka 4.0 removed v0–v1, KIP-896): the end offset of a leader epoch, which consumers use
//! to detect log truncation after a leader change (KIP-320).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// "No epoch given" in `current_leader_epoch`.
pub const NO_EPOCH: i32 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochQuery {
    pub partition: i32,
    /// The epoch the client believes current; [`NO_EPOCH`] skips the check.
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is asked for.
    pub leader_epoch: i32,
}

#[derive(Debug, Clone)]
pub struct OffsetForLeaderEpochRequest {
    /// v3+: -1 for a consumer, a broker id for a follower.
    pub replica_id: i32,
    pub topics: Vec<(String, Vec<EpochQuery>)>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<OffsetForLeaderEpochRequest, DecodeError> {
    let flex = flexible(api_key::OFFSET_FOR_LEADER_EPOCH, version);
    let replica_id = if version >= 3 {
        r.i32("replica_id")?
    } else {
        -2
    };
    let n = r.array_len_required("topics", flex, 2)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partitions", flex, 8)?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition")?;
            let current_leader_epoch = r.i32("current_leader_epoch")?;
            let leader_epoch = r.i32("leader_epoch")?;
            r.tagged_fields(flex)?;
            partitions.push(EpochQuery {
                partition,
                current_leader_epoch,
                leader_epoch,
            });
        }
        r.tagged_fields(flex)?;
        topics.push((name, partitions));
    }
    r.tagged_fields(flex)?;
    Ok(OffsetForLeaderEpochRequest { replica_id, topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::offset_for_leader_epoch_request as kp;
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 2..=4 {
            let mut req = kp::OffsetForLeaderEpochRequest::default().with_topics(vec![
                kp::OffsetForLeaderTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![kp::OffsetForLeaderPartition::default()
                        .with_partition(2)
                        .with_current_leader_epoch(5)
                        .with_leader_epoch(4)]),
            ]);
            if v >= 3 {
                req = req.with_replica_id(BrokerId(-1));
            }
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            let want = EpochQuery {
                partition: 2,
                current_leader_epoch: 5,
                leader_epoch: 4,
            };
            assert_eq!(got.topics, vec![("t".to_string(), vec![want])]);
            if v >= 3 {
                assert_eq!(got.replica_id, -1);
            }
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
