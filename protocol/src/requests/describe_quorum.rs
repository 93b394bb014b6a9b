//! DescribeQuorum request (v0–v1, KIP-595): the state of the metadata quorum's partition
//! (`__cluster_metadata-0`), as `kafka-metadata-quorum.sh describe` asks for it.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeQuorumRequest {
    /// (topic, partitions) asked about.
    pub topics: Vec<(String, Vec<i32>)>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DescribeQuorumRequest, DecodeError> {
    let flex = flexible(api_key::DESCRIBE_QUORUM, version);
    // Smallest topic: a 1-byte (compact) name, an empty partition array and no tagged fields.
    let n = r.array_len_required("topics", flex, 3)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic_name", flex)?;
        let np = r.array_len_required("partitions", flex, 5)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32("partition_index")?);
            r.tagged_fields(flex)?;
        }
        r.tagged_fields(flex)?;
        topics.push((name, ps));
    }
    r.tagged_fields(flex)?;
    Ok(DescribeQuorumRequest { topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_quorum_request as kp;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=1 {
            let req =
                kp::DescribeQuorumRequest::default().with_topics(vec![kp::TopicData::default()
                    .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
                    .with_partitions(vec![kp::PartitionData::default().with_partition_index(0)])]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(
                got.topics,
                vec![("__cluster_metadata".to_string(), vec![0])]
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
