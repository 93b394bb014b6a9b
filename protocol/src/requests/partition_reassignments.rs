//! AlterPartitionReassignments (v0–1) and ListPartitionReassignments (v0) requests, KIP-455: move
//! partitions to new replicas (or cancel a move), and list the moves in progress. Both are
//! flexible from v0; v1 adds `AllowReplicationFactorChange` (KIP-860).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// One partition to move: `replicas` is the target, `None` cancels its reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignPartition {
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionReassignmentsRequest {
    pub timeout_ms: i32,
    /// v1+; `true` before.
    pub allow_replication_factor_change: bool,
    pub topics: Vec<(String, Vec<ReassignPartition>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPartitionReassignmentsRequest {
    pub timeout_ms: i32,
    /// `None`: every partition.
    pub topics: Option<Vec<(String, Vec<i32>)>>,
}

/// Smallest topic entry: a 1-byte compact name length, a 1-byte array length, empty tags.
const TOPIC_BYTES_MIN: usize = 3;
/// Smallest partition entry: its index, a 1-byte (null) replica array, empty tags.
const PARTITION_BYTES_MIN: usize = 6;

pub fn decode_alter(
    r: &mut Reader,
    version: i16,
) -> Result<AlterPartitionReassignmentsRequest, DecodeError> {
    let flex = flexible(api_key::ALTER_PARTITION_REASSIGNMENTS, version);
    let timeout_ms = r.i32("timeout_ms")?;
    let allow_replication_factor_change = if version >= 1 {
        r.bool("allow_replication_factor_change")?
    } else {
        true
    };
    let n = r.array_len_required("topics", flex, TOPIC_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("name", flex)?;
        let np = r.array_len_required("partitions", flex, PARTITION_BYTES_MIN)?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition_index")?;
            let replicas = match r.array_len("replicas", flex, 4)? {
                None => None,
                Some(nr) => {
                    let mut rs = Vec::with_capacity(nr);
                    for _ in 0..nr {
                        rs.push(r.i32("replica")?);
                    }
                    Some(rs)
                }
            };
            r.tagged_fields(flex)?;
            partitions.push(ReassignPartition {
                partition,
                replicas,
            });
        }
        r.tagged_fields(flex)?;
        topics.push((name, partitions));
    }
    r.tagged_fields(flex)?;
    Ok(AlterPartitionReassignmentsRequest {
        timeout_ms,
        allow_replication_factor_change,
        topics,
    })
}

pub fn decode_list(
    r: &mut Reader,
    version: i16,
) -> Result<ListPartitionReassignmentsRequest, DecodeError> {
    let flex = flexible(api_key::LIST_PARTITION_REASSIGNMENTS, version);
    let timeout_ms = r.i32("timeout_ms")?;
    let topics = match r.array_len("topics", flex, TOPIC_BYTES_MIN)? {
        None => None,
        Some(n) => {
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.string("name", flex)?;
                let np = r.array_len_required("partition_indexes", flex, 4)?;
                let mut ps = Vec::with_capacity(np);
                for _ in 0..np {
                    ps.push(r.i32("partition_index")?);
                }
                r.tagged_fields(flex)?;
                topics.push((name, ps));
            }
            Some(topics)
        }
    };
    r.tagged_fields(flex)?;
    Ok(ListPartitionReassignmentsRequest { timeout_ms, topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::alter_partition_reassignments_request as alter;
    use kafka_protocol::messages::list_partition_reassignments_request as list;
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn name(s: &'static str) -> TopicName {
        TopicName(StrBytes::from_static_str(s))
    }

    #[test]
    fn alter_decodes_what_an_independent_encoder_writes() {
        for (v, allow) in [(0, true), (1, true), (1, false)] {
            let req = alter::AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(7000)
                .with_allow_replication_factor_change(allow)
                .with_topics(vec![alter::ReassignableTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![
                        alter::ReassignablePartition::default()
                            .with_partition_index(0)
                            .with_replicas(Some(vec![BrokerId(3), BrokerId(4)])),
                        alter::ReassignablePartition::default()
                            .with_partition_index(2)
                            .with_replicas(None),
                    ])]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode_alter(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(
                got,
                AlterPartitionReassignmentsRequest {
                    timeout_ms: 7000,
                    allow_replication_factor_change: allow,
                    topics: vec![(
                        "t".into(),
                        vec![
                            ReassignPartition {
                                partition: 0,
                                replicas: Some(vec![3, 4])
                            },
                            ReassignPartition {
                                partition: 2,
                                replicas: None
                            }
                        ]
                    )]
                },
                "v{v}"
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_alter(r, v));
        }
    }

    #[test]
    fn list_decodes_what_an_independent_encoder_writes() {
        for all in [false, true] {
            let topics = (!all).then(|| {
                vec![list::ListPartitionReassignmentsTopics::default()
                    .with_name(name("t"))
                    .with_partition_indexes(vec![0, 1])]
            });
            let req = list::ListPartitionReassignmentsRequest::default()
                .with_timeout_ms(3000)
                .with_topics(topics);
            let mut b = BytesMut::new();
            req.encode(&mut b, 0).unwrap();
            let bytes = b.freeze();
            let got = decode_list(&mut Reader::new(bytes.clone()), 0).unwrap();
            assert_eq!(got.timeout_ms, 3000);
            let want = (!all).then(|| vec![("t".to_string(), vec![0, 1])]);
            assert_eq!(got.topics, want);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_list(r, 0));
        }
    }
}
