//! DeleteRecords request (v0–v2): move partitions' log start offsets forward.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// "Up to the high watermark", as an offset in a DeleteRecords request.
pub const HIGH_WATERMARK: i64 = -1;

#[derive(Debug, Clone)]
pub struct DeleteRecordsRequest {
    /// Per topic, its `(partition, offset)` pairs: records below `offset` are deleted.
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
    pub timeout_ms: i32,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DeleteRecordsRequest, DecodeError> {
    let flex = flexible(api_key::DELETE_RECORDS, version);
    let n = r.array_len_required("topics", flex, 2)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partitions", flex, 12)?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition_index")?;
            let offset = r.i64("offset")?;
            r.tagged_fields(flex)?;
            partitions.push((partition, offset));
        }
        r.tagged_fields(flex)?;
        topics.push((name, partitions));
    }
    let timeout_ms = r.i32("timeout_ms")?;
    r.tagged_fields(flex)?;
    Ok(DeleteRecordsRequest { topics, timeout_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::delete_records_request as kp;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=2 {
            let req = kp::DeleteRecordsRequest::default()
                .with_topics(vec![kp::DeleteRecordsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![
                        kp::DeleteRecordsPartition::default()
                            .with_partition_index(3)
                            .with_offset(42),
                        kp::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(HIGH_WATERMARK),
                    ])])
                .with_timeout_ms(7);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics, vec![("t".into(), vec![(3, 42), (0, -1)])]);
            assert_eq!(got.timeout_ms, 7);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
