//! DescribeLogDirs request (v1–v4): the log directories and the size of each partition in them.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct DescribeLogDirsRequest {
    /// `None` asks for every partition.
    pub topics: Option<Vec<(String, Vec<i32>)>>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DescribeLogDirsRequest, DecodeError> {
    let flex = flexible(api_key::DESCRIBE_LOG_DIRS, version);
    let topics = match r.array_len("topics", flex, 2)? {
        None => None,
        Some(n) => {
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.string("topic", flex)?;
                let np = r.array_len_required("partitions", flex, 4)?;
                let mut partitions = Vec::with_capacity(np);
                for _ in 0..np {
                    partitions.push(r.i32("partition")?);
                }
                r.tagged_fields(flex)?;
                topics.push((name, partitions));
            }
            Some(topics)
        }
    };
    r.tagged_fields(flex)?;
    Ok(DescribeLogDirsRequest { topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_log_dirs_request as kp;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 1..=4 {
            for topics in [
                None,
                Some(vec![kp::DescribableLogDirTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![0, 3])]),
            ] {
                let all = topics.is_none();
                let req = kp::DescribeLogDirsRequest::default().with_topics(topics);
                let mut b = BytesMut::new();
                req.encode(&mut b, v).unwrap();
                let bytes = b.freeze();
                let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
                match got.topics {
                    None => assert!(all),
                    Some(t) => assert_eq!(t, vec![("t".to_string(), vec![0, 3])]),
                }
                crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
            }
        }
    }
}
