//! Metadata request (v0–v12).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct MetadataRequest {
    /// `None` asks for every topic.
    pub topics: Option<Vec<MetadataTopic>>,
    pub allow_auto_topic_creation: bool,
    /// v8–v10: answer with the cluster's authorized operations.
    pub include_cluster_authorized_operations: bool,
    /// v8+: answer with each topic's authorized operations.
    pub include_topic_authorized_operations: bool,
}

#[derive(Debug, Clone)]
pub struct MetadataTopic {
    pub topic_id: [u8; 16],
    pub name: Option<String>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<MetadataRequest, DecodeError> {
    let flex = flexible(api_key::METADATA, version);
    let topics = match r.array_len("topics", flex, 1)? {
        None if version == 0 => return Err(r.malformed("topics", "null topics in Metadata v0")),
        None => None,
        // In v0 an empty list means every topic.
        Some(0) if version == 0 => None,
        Some(n) => {
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let topic_id = if version >= 10 {
                    r.uuid("topic_id")?
                } else {
                    [0; 16]
                };
                let name = if version >= 10 {
                    r.nullable_string("topic name", flex)?
                } else {
                    Some(r.string("topic name", flex)?)
                };
                r.tagged_fields(flex)?;
                topics.push(MetadataTopic { topic_id, name });
            }
            Some(topics)
        }
    };
    let allow_auto_topic_creation = if version >= 4 {
        r.bool("allow_auto_topic_creation")?
    } else {
        true
    };
    let include_cluster_authorized_operations =
        (8..=10).contains(&version) && r.bool("include_cluster_authorized_operations")?;
    let include_topic_authorized_operations =
        version >= 8 && r.bool("include_topic_authorized_operations")?;
    r.tagged_fields(flex)?;
    Ok(MetadataRequest {
        topics,
        allow_auto_topic_creation,
        include_cluster_authorized_operations,
        include_topic_authorized_operations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::metadata_request::{MetadataRequest as Kp, MetadataRequestTopic};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=12 {
            let req = Kp::default()
                .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                    kafka_protocol::messages::TopicName(StrBytes::from_static_str("a")),
                ))]))
                .with_allow_auto_topic_creation(true)
                .with_include_cluster_authorized_operations((8..=10).contains(&v))
                .with_include_topic_authorized_operations(v >= 8);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics.unwrap()[0].name.as_deref(), Some("a"));
            assert_eq!(
                got.include_cluster_authorized_operations,
                (8..=10).contains(&v)
            );
            assert_eq!(got.include_topic_authorized_operations, v >= 8);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
