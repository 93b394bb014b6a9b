//! ElectLeaders request (v0–v2): move partitions' leadership to their preferred replica, or —
//! unclean — to any live replica of a partition that has no leader.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// Kafka's `ElectionType`.
pub const PREFERRED: i8 = 0;
pub const UNCLEAN: i8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectLeadersRequest {
    pub election_type: i8,
    /// `None`: every partition.
    pub partitions: Option<Vec<(String, Vec<i32>)>>,
    pub timeout_ms: i32,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<ElectLeadersRequest, DecodeError> {
    let flex = flexible(api_key::ELECT_LEADERS, version);
    let election_type = if version >= 1 {
        r.i8("election_type")?
    } else {
        PREFERRED
    };
    // Smallest topic: a 1-byte (compact) name length and an empty partition array.
    let partitions = match r.array_len("topic_partitions", flex, 2)? {
        None => None,
        Some(n) => {
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let topic = r.string("topic", flex)?;
                let np = r.array_len_required("partitions", flex, 4)?;
                let mut ps = Vec::with_capacity(np);
                for _ in 0..np {
                    ps.push(r.i32("partition")?);
                }
                r.tagged_fields(flex)?;
                topics.push((topic, ps));
            }
            Some(topics)
        }
    };
    let timeout_ms = r.i32("timeout_ms")?;
    r.tagged_fields(flex)?;
    Ok(ElectLeadersRequest {
        election_type,
        partitions,
        timeout_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::elect_leaders_request as kp;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=2 {
            for all in [false, true] {
                let mut req = kp::ElectLeadersRequest::default().with_timeout_ms(5000);
                if v >= 1 {
                    req = req.with_election_type(UNCLEAN);
                }
                if !all {
                    req = req.with_topic_partitions(Some(vec![kp::TopicPartitions::default()
                        .with_topic(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(vec![0, 2])]));
                } else {
                    req = req.with_topic_partitions(None);
                }
                let mut b = BytesMut::new();
                req.encode(&mut b, v).unwrap();
                let bytes = b.freeze();
                let got = decode(&mut Reader::new(bytes.clone()), v).unwrap();
                assert_eq!(got.election_type, if v >= 1 { UNCLEAN } else { PREFERRED });
                assert_eq!(got.timeout_ms, 5000);
                if all {
                    assert_eq!(got.partitions, None);
                } else {
                    assert_eq!(got.partitions, Some(vec![("t".to_string(), vec![0, 2])]));
                }
                crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
            }
        }
    }
}
