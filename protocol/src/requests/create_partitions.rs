//! CreatePartitions request (v0–v3): grow topics' partition counts.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsTopic {
    pub name: String,
    /// The new total partition count.
    pub count: i32,
    /// Brokers for each new partition's replicas, when the client assigns them.
    pub assignments: Option<Vec<Vec<i32>>>,
}

#[derive(Debug, Clone)]
pub struct CreatePartitionsRequest {
    pub topics: Vec<CreatePartitionsTopic>,
    pub timeout_ms: i32,
    pub validate_only: bool,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<CreatePartitionsRequest, DecodeError> {
    let flex = flexible(api_key::CREATE_PARTITIONS, version);
    // Smallest topic: a 1-byte (compact) name length, a count, a null assignment array.
    let n = r.array_len_required("topics", flex, 6)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic name", flex)?;
        let count = r.i32("count")?;
        let assignments = match r.array_len("assignments", flex, 1)? {
            None => None,
            Some(na) => {
                let mut out = Vec::with_capacity(na);
                for _ in 0..na {
                    let nb = r.array_len_required("broker_ids", flex, 4)?;
                    let mut ids = Vec::with_capacity(nb);
                    for _ in 0..nb {
                        ids.push(r.i32("broker_id")?);
                    }
                    r.tagged_fields(flex)?;
                    out.push(ids);
                }
                Some(out)
            }
        };
        r.tagged_fields(flex)?;
        topics.push(CreatePartitionsTopic {
            name,
            count,
            assignments,
        });
    }
    let timeout_ms = r.i32("timeout_ms")?;
    let validate_only = r.bool("validate_only")?;
    r.tagged_fields(flex)?;
    Ok(CreatePartitionsRequest {
        topics,
        timeout_ms,
        validate_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::create_partitions_request as kp;
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=3 {
            let req = kp::CreatePartitionsRequest::default()
                .with_topics(vec![
                    kp::CreatePartitionsTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_count(5)
                        .with_assignments(Some(vec![kp::CreatePartitionsAssignment::default()
                            .with_broker_ids(vec![BrokerId(0), BrokerId(2)])])),
                    kp::CreatePartitionsTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("u")))
                        .with_count(2)
                        .with_assignments(None),
                ])
                .with_timeout_ms(9)
                .with_validate_only(true);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(
                got.topics,
                vec![
                    CreatePartitionsTopic {
                        name: "t".into(),
                        count: 5,
                        assignments: Some(vec![vec![0, 2]]),
                    },
                    CreatePartitionsTopic {
                        name: "u".into(),
                        count: 2,
                        assignments: None,
                    },
                ]
            );
            assert_eq!(got.timeout_ms, 9);
            assert!(got.validate_only);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
