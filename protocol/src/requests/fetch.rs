//! Fetch request (v4–v12) and the hand-written Fetch response: the response header and partition
//! headers are encoded here, and each partition's record bytes are appended as they came from the
//! log, without being re-encoded.

use bytes::{BufMut, Bytes};

use crate::frame::FrameBuilder;

use super::flexible;
use crate::registry::api_key;
use crate::wire::{
    put_array_len, put_empty_tagged_fields, put_null_array, put_nullable_bytes_len, put_string,
    DecodeError, Reader,
};
use crate::ErrorCode;

#[derive(Debug, Clone)]
pub struct FetchRequest {
    pub replica_id: i32,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub isolation_level: i8,
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    /// Partitions an incremental fetch removes from its session (v7+).
    pub forgotten: Vec<(String, i32)>,
}

#[derive(Debug, Clone)]
pub struct FetchTopic {
    pub name: String,
    pub partitions: Vec<FetchPartition>,
}

#[derive(Debug, Clone, Copy)]
pub struct FetchPartition {
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    /// The leader epoch the fetcher believes current (v9+; -1: unknown).
    pub current_leader_epoch: i32,
    /// The epoch of the last batch the fetcher holds (v12+; -1: none), for the leader's
    /// divergence check (KIP-595's Fetch-based truncation).
    pub last_fetched_epoch: i32,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<FetchRequest, DecodeError> {
    let flex = flexible(api_key::FETCH, version);
    let replica_id = r.i32("replica_id")?;
    let max_wait_ms = r.i32("max_wait_ms")?;
    let min_bytes = r.i32("min_bytes")?;
    let max_bytes = r.i32("max_bytes")?;
    let isolation_level = r.i8("isolation_level")?;
    let (session_id, session_epoch) = if version >= 7 {
        (r.i32("session_id")?, r.i32("session_epoch")?)
    } else {
        (0, -1)
    };
    let n_topics = r.array_len_required("topics", flex, 2)?;
    let mut topics = Vec::with_capacity(n_topics);
    for _ in 0..n_topics {
        let name = r.string("topic", flex)?;
        let n_parts = r.array_len_required("partitions", flex, 16)?;
        let mut partitions = Vec::with_capacity(n_parts);
        for _ in 0..n_parts {
            let partition = r.i32("partition")?;
            let current_leader_epoch = if version >= 9 {
                r.i32("current_leader_epoch")?
            } else {
                -1
            };
            let fetch_offset = r.i64("fetch_offset")?;
            let last_fetched_epoch = if version >= 12 {
                r.i32("last_fetched_epoch")?
            } else {
                -1
            };
            if version >= 5 {
                r.i64("log_start_offset")?;
            }
            let partition_max_bytes = r.i32("partition_max_bytes")?;
            r.tagged_fields(flex)?;
            partitions.push(FetchPartition {
                partition,
                fetch_offset,
                partition_max_bytes,
                current_leader_epoch,
                last_fetched_epoch,
            });
        }
        r.tagged_fields(flex)?;
        topics.push(FetchTopic { name, partitions });
    }
    let mut forgotten = Vec::new();
    if version >= 7 {
        let n = r.array_len_required("forgotten_topics_data", flex, 2)?;
        for _ in 0..n {
            let topic = r.string("forgotten topic", flex)?;
            let np = r.array_len_required("forgotten partitions", flex, 4)?;
            for _ in 0..np {
                forgotten.push((topic.clone(), r.i32("forgotten partition")?));
            }
            r.tagged_fields(flex)?;
        }
    }
    if version >= 11 {
        r.string("rack_id", flex)?;
    }
    r.tagged_fields(flex)?;
    Ok(FetchRequest {
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        topics,
        forgotten,
    })
}

/// One partition of a Fetch response. `records` are whole batches straight from the log.
#[derive(Debug, Clone)]
pub struct FetchPartitionResponse {
    pub partition: i32,
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
    /// The fetcher's log diverges from the leader's after this (epoch, end offset): truncate
    /// there before fetching again (v12+, tagged field 0).
    pub diverging_epoch: Option<(i32, i64)>,
}

#[derive(Debug, Clone)]
pub struct FetchTopicResponse {
    pub name: String,
    pub partitions: Vec<FetchPartitionResponse>,
}

/// Writes a Fetch response body. Record bytes are appended as they are; with `read_committed`
/// an empty aborted-transactions list is sent, otherwise null. `session_id` is sent from v7.
pub fn encode_response(
    out: &mut FrameBuilder,
    version: i16,
    error: ErrorCode,
    session_id: i32,
    read_committed: bool,
    topics: &[FetchTopicResponse],
) {
    let flex = flexible(api_key::FETCH, version);
    out.put_i32(0); // throttle_time_ms
    if version >= 7 {
        out.put_i16(error.code());
        out.put_i32(session_id);
    }
    put_array_len(out, topics.len(), flex);
    for topic in topics {
        put_string(out, &topic.name, flex);
        put_array_len(out, topic.partitions.len(), flex);
        for p in &topic.partitions {
            out.put_i32(p.partition);
            out.put_i16(p.error.code());
            out.put_i64(p.high_watermark);
            out.put_i64(p.last_stable_offset);
            if version >= 5 {
                out.put_i64(p.log_start_offset);
            }
            if read_committed {
                put_array_len(out, 0, flex);
            } else {
                put_null_array(out, flex);
            }
            if version >= 11 {
                out.put_i32(-1); // preferred_read_replica
            }
            put_nullable_bytes_len(out, Some(p.records.len()), flex);
            out.put_records(&p.records);
            match p.diverging_epoch.filter(|_| version >= 12) {
                // One tagged field: tag 0, 13 bytes (epoch, end offset, no tagged fields).
                Some((epoch, end_offset)) => {
                    out.put_u8(1);
                    out.put_u8(0);
                    out.put_u8(13);
                    out.put_i32(epoch);
                    out.put_i64(end_offset);
                    out.put_u8(0);
                }
                None => put_empty_tagged_fields(out, flex),
            }
        }
        put_empty_tagged_fields(out, flex);
    }
    put_empty_tagged_fields(out, flex);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchRequest as KpFetchRequest, FetchResponse};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    fn kp_request(version: i16) -> Bytes {
        use kafka_protocol::messages::fetch_request::{FetchPartition as P, FetchTopic as T};
        let req = KpFetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(52_428_800)
            .with_isolation_level(1)
            .with_topics(vec![T::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str("orders"),
                ))
                .with_partitions(vec![P::default()
                    .with_partition(3)
                    .with_current_leader_epoch(if version >= 9 { 5 } else { -1 })
                    .with_fetch_offset(42)
                    .with_last_fetched_epoch(if version >= 12 { 4 } else { -1 })
                    .with_partition_max_bytes(1_048_576)])]);
        let req = if version >= 7 {
            use kafka_protocol::messages::fetch_request::ForgottenTopic;
            req.with_session_id(12)
                .with_session_epoch(3)
                .with_forgotten_topics_data(vec![ForgottenTopic::default()
                    .with_topic(kafka_protocol::messages::TopicName(
                        StrBytes::from_static_str("old"),
                    ))
                    .with_partitions(vec![1, 4])])
        } else {
            req
        };
        let mut b = bytes::BytesMut::new();
        req.encode(&mut b, version).unwrap();
        b.freeze()
    }

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 4..=12 {
            let bytes = kp_request(v);
            let req = decode(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(req.max_wait_ms, 500);
            assert_eq!(req.topics[0].name, "orders");
            assert_eq!(req.topics[0].partitions[0].fetch_offset, 42);
            if v >= 12 {
                assert_eq!(req.topics[0].partitions[0].current_leader_epoch, 5);
                assert_eq!(req.topics[0].partitions[0].last_fetched_epoch, 4);
            }
            if v >= 7 {
                assert_eq!((req.session_id, req.session_epoch), (12, 3));
                assert_eq!(req.forgotten, vec![("old".into(), 1), ("old".into(), 4)]);
            }
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }

    #[test]
    fn response_parses_with_an_independent_decoder() {
        // A short batch is copied into the frame, a long one is a piece of its own.
        let short = crate::record_batch::build_batch(&[(None, Some(b"v"))], 1, None).freeze();
        let value = vec![7u8; 3 * crate::frame::RECORDS_BY_REFERENCE_MIN];
        let long = crate::record_batch::build_batch(&[(None, Some(&value))], 1, None).freeze();
        let part = |partition: i32, records: &Bytes| FetchPartitionResponse {
            partition,
            error: ErrorCode::NONE,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            records: records.clone(),
            diverging_epoch: None,
        };
        let mut diverging = part(5, &short);
        diverging.diverging_epoch = Some((3, 1234));
        let topics = vec![FetchTopicResponse {
            name: "orders".into(),
            partitions: vec![part(3, &short), part(4, &long), diverging],
        }];
        for v in 4..=12 {
            for rc in [false, true] {
                let mut out = FrameBuilder::new();
                out.put_i32(0); // the length prefix
                encode_response(&mut out, v, ErrorCode::NONE, 77, rc, &topics);
                let frame = out.finish();
                assert_eq!(frame.pieces().len(), 3, "v{v}");
                let mut bytes = Bytes::from(frame.to_vec()).slice(4..);
                let resp = FetchResponse::decode(&mut bytes, v).unwrap();
                assert_eq!(bytes.len(), 0, "v{v}");
                if v >= 7 {
                    assert_eq!(resp.session_id, 77);
                }
                let ps = &resp.responses[0].partitions;
                assert_eq!(ps[0].high_watermark, 10);
                assert_eq!(ps[0].records.as_ref(), Some(&short));
                assert_eq!(ps[1].records.as_ref(), Some(&long));
                assert_eq!(ps[2].records.as_ref(), Some(&short));
                if v >= 12 {
                    assert_eq!(ps[2].diverging_epoch.epoch, 3);
                    assert_eq!(ps[2].diverging_epoch.end_offset, 1234);
                    assert_eq!(ps[1].diverging_epoch.epoch, -1);
                }
            }
        }
    }
}
