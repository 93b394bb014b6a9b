//! ListOffsets request (v1–v10).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// Kafka's special timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// v7+ (KIP-734): the record with the largest timestamp.
pub const MAX_TIMESTAMP: i64 = -3;
/// v8+ (KIP-405): the first offset in local storage — the log start without tiered storage.
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// v9+ (KIP-1005): the last offset in tiered storage — none without it.
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

#[derive(Debug, Clone)]
pub struct ListOffsetsRequest {
    pub isolation_level: i8,
    pub topics: Vec<ListOffsetsTopic>,
}

#[derive(Debug, Clone)]
pub struct ListOffsetsTopic {
    pub name: String,
    pub partitions: Vec<ListOffsetsPartition>,
}

#[derive(Debug, Clone, Copy)]
pub struct ListOffsetsPartition {
    pub partition: i32,
    /// The leader epoch the client believes current (v4+; -1: unknown).
    pub current_leader_epoch: i32,
    pub timestamp: i64,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<ListOffsetsRequest, DecodeError> {
    let flex = flexible(api_key::LIST_OFFSETS, version);
    r.i32("replica_id")?;
    let isolation_level = if version >= 2 {
        r.i8("isolation_level")?
    } else {
        0
    };
    let n = r.array_len_required("topics", flex, 2)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partitions", flex, 12)?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition")?;
            let current_leader_epoch = if version >= 4 {
                r.i32("current_leader_epoch")?
            } else {
                -1
            };
            let timestamp = r.i64("timestamp")?;
            r.tagged_fields(flex)?;
            partitions.push(ListOffsetsPartition {
                partition,
                current_leader_epoch,
                timestamp,
            });
        }
        r.tagged_fields(flex)?;
        topics.push(ListOffsetsTopic { name, partitions });
    }
    if version >= 10 {
        r.i32("timeout_ms")?;
    }
    r.tagged_fields(flex)?;
    Ok(ListOffsetsRequest {
        isolation_level,
        topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::list_offsets_request as kp;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 1..=10 {
            let req =
                kp::ListOffsetsRequest::default().with_topics(vec![kp::ListOffsetsTopic::default(
                )
                .with_name(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str("t"),
                ))
                .with_partitions(vec![kp::ListOffsetsPartition::default()
                    .with_partition_index(1)
                    .with_timestamp(-2)])]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics[0].partitions[0].timestamp, EARLIEST_TIMESTAMP);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
