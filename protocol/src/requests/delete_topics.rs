//! DeleteTopics request (v1–v6).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct DeleteTopicsRequest {
    /// Topics by name; v6 may name a topic by id only, in which case the name is `None`.
    pub topics: Vec<(Option<String>, [u8; 16])>,
    pub timeout_ms: i32,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DeleteTopicsRequest, DecodeError> {
    let flex = flexible(api_key::DELETE_TOPICS, version);
    let mut topics = Vec::new();
    if version >= 6 {
        let n = r.array_len_required("topics", flex, 18)?;
        topics.reserve(n);
        for _ in 0..n {
            let name = r.nullable_string("topic name", flex)?;
            let id = r.uuid("topic id")?;
            r.tagged_fields(flex)?;
            topics.push((name, id));
        }
    } else {
        let n = r.array_len_required("topic_names", flex, 1)?;
        topics.reserve(n);
        for _ in 0..n {
            topics.push((Some(r.string("topic name", flex)?), [0; 16]));
        }
    }
    let timeout_ms = r.i32("timeout_ms")?;
    r.tagged_fields(flex)?;
    Ok(DeleteTopicsRequest { topics, timeout_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::delete_topics_request as kp;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 1..=6 {
            let name = TopicName(StrBytes::from_static_str("gone"));
            let req = if v >= 6 {
                kp::DeleteTopicsRequest::default()
                    .with_topics(vec![kp::DeleteTopicState::default().with_name(Some(name))])
            } else {
                kp::DeleteTopicsRequest::default().with_topic_names(vec![name])
            }
            .with_timeout_ms(5);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics[0].0.as_deref(), Some("gone"));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
