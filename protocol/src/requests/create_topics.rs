//! CreateTopics request (v2–v7).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct CreateTopicsRequest {
    pub topics: Vec<CreatableTopic>,
    pub timeout_ms: i32,
    pub validate_only: bool,
}

#[derive(Debug, Clone)]
pub struct CreatableTopic {
    pub name: String,
    /// -1 means the broker default (`num.partitions`).
    pub num_partitions: i32,
    /// -1 means the broker default.
    pub replication_factor: i16,
    /// Manual replica assignments (partition index, broker ids), in request order; empty when
    /// the broker places the replicas.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<CreateTopicsRequest, DecodeError> {
    let flex = flexible(api_key::CREATE_TOPICS, version);
    let n = r.array_len_required("topics", flex, 6)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic name", flex)?;
        let num_partitions = r.i32("num_partitions")?;
        let replication_factor = r.i16("replication_factor")?;
        let n_assign = r.array_len_required("assignments", flex, 5)?;
        let mut assignments = Vec::with_capacity(n_assign);
        for _ in 0..n_assign {
            let partition = r.i32("assignment partition")?;
            let nb = r.array_len_required("broker_ids", flex, 4)?;
            let mut brokers = Vec::with_capacity(nb);
            for _ in 0..nb {
                brokers.push(r.i32("broker id")?);
            }
            r.tagged_fields(flex)?;
            assignments.push((partition, brokers));
        }
        let n_cfg = r.array_len_required("configs", flex, 2)?;
        let mut configs = Vec::with_capacity(n_cfg);
        for _ in 0..n_cfg {
            let key = r.string("config name", flex)?;
            let value = r.nullable_string("config value", flex)?;
            r.tagged_fields(flex)?;
            configs.push((key, value));
        }
        r.tagged_fields(flex)?;
        topics.push(CreatableTopic {
            name,
            num_partitions,
            replication_factor,
            assignments,
            configs,
        });
    }
    let timeout_ms = r.i32("timeout_ms")?;
    let validate_only = r.bool("validate_only")?;
    r.tagged_fields(flex)?;
    Ok(CreateTopicsRequest {
        topics,
        timeout_ms,
        validate_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::create_topics_request as kp;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 2..=7 {
            let req = kp::CreateTopicsRequest::default()
                .with_topics(vec![kp::CreatableTopic::default()
                    .with_name(kafka_protocol::messages::TopicName(
                        StrBytes::from_static_str("t"),
                    ))
                    .with_num_partitions(8)
                    .with_replication_factor(1)
                    .with_assignments(vec![
                        kp::CreatableReplicaAssignment::default()
                            .with_partition_index(0)
                            .with_broker_ids(vec![BrokerId(3), BrokerId(1)]),
                        kp::CreatableReplicaAssignment::default()
                            .with_partition_index(1)
                            .with_broker_ids(vec![]),
                    ])
                    .with_configs(vec![kp::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_static_str("segment.bytes"))
                        .with_value(Some(StrBytes::from_static_str("1048576")))])])
                .with_timeout_ms(1000)
                .with_validate_only(true);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics[0].num_partitions, 8);
            assert_eq!(
                got.topics[0].assignments,
                vec![(0, vec![3, 1]), (1, vec![])]
            );
            assert!(got.validate_only);
            assert_eq!(got.topics[0].configs[0].0, "segment.bytes");
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
