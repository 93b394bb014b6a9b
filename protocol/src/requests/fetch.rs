//! Fetch request (v4–v16) and the hand-written Fetch response: the response header and partition
//! headers are encoded here, and each partition's record bytes are appended as they came from the
//! log, without being re-encoded.
//!
//! From v13 topics are named by topic id (KIP-516) in the request, its forgotten topics and the
//! response; v15 moves the follower's id into the tagged `ReplicaState` (KIP-903); v16 adds the
//! response's `NodeEndpoints`, the endpoints of the leaders named by partitions' `CurrentLeader`
//! (KIP-951).

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::FrameBuilder;

use super::flexible;
use crate::registry::api_key;
use crate::wire::{
    put_array_len, put_empty_tagged_fields, put_null_array, put_nullable_bytes_len, put_string,
    put_uvarint, DecodeError, Reader,
};
use crate::ErrorCode;

/// A topic id as it travels: 16 bytes, all zero meaning none (Kafka's `Uuid.ZERO_UUID`).
pub type TopicId = [u8; 16];

/// The topic id of a request that names topics by name (before v13).
pub const NO_TOPIC_ID: TopicId = [0; 16];

/// First version naming topics by id.
pub const TOPIC_IDS_FROM: i16 = 13;
/// First version carrying the follower's id in the tagged `ReplicaState`, not `ReplicaId`.
pub const REPLICA_STATE_FROM: i16 = 15;
/// First version whose response carries `NodeEndpoints` (KIP-951).
pub const NODE_ENDPOINTS_FROM: i16 = 16;

/// The request's top-level tag holding `ReplicaState` (v15+).
const REPLICA_STATE_TAG: u32 = 1;
/// The response partition's tags, and the response's.
const DIVERGING_EPOCH_TAG: u8 = 0;
const CURRENT_LEADER_TAG: u8 = 1;
const NODE_ENDPOINTS_TAG: u32 = 0;

#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// The follower's broker id, or -1 for a consumer (v15+: from `ReplicaState`).
    pub replica_id: i32,
    /// The follower's broker epoch (v15+; -1: unknown).
    pub replica_epoch: i64,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub isolation_level: i8,
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    /// Partitions an incremental fetch removes from its session (v7+).
    pub forgotten: Vec<ForgottenPartition>,
    /// The consumer's `client.rack` (v11+, KIP-392); empty when it has none.
    pub rack_id: String,
}

#[derive(Debug, Clone)]
pub struct FetchTopic {
    /// The topic's name; empty from v13, where the broker resolves `topic_id` to it.
    pub name: String,
    /// The topic's id (v13+), else [`NO_TOPIC_ID`].
    pub topic_id: TopicId,
    pub partitions: Vec<FetchPartition>,
}

/// One partition an incremental fetch removes from its session: by name before v13, by topic id
/// from v13 (`topic` is then empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgottenPartition {
    pub topic: String,
    pub topic_id: TopicId,
    pub partition: i32,
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
    let ids = version >= TOPIC_IDS_FROM;
    let replica_id = if version < REPLICA_STATE_FROM {
        r.i32("replica_id")?
    } else {
        -1
    };
    let max_wait_ms = r.i32("max_wait_ms")?;
    let min_bytes = r.i32("min_bytes")?;
    let max_bytes = r.i32("max_bytes")?;
    let isolation_level = r.i8("isolation_level")?;
    let (session_id, session_epoch) = if version >= 7 {
        (r.i32("session_id")?, r.i32("session_epoch")?)
    } else {
        (0, -1)
    };
    let n_topics = r.array_len_required("topics", flex, if ids { 17 } else { 2 })?;
    let mut topics = Vec::with_capacity(n_topics);
    for _ in 0..n_topics {
        let (name, topic_id) = topic_ref(r, ids, flex)?;
        let n_parts = r.array_len_required("partitions", flex, 16)?;
        let mut partitions = Vec::with_capacity(n_parts);
        for _ in 0..n_parts {
            partitions.push(decode_partition(r, version, flex)?);
        }
        r.tagged_fields(flex)?;
        topics.push(FetchTopic {
            name,
            topic_id,
            partitions,
        });
    }
    let mut forgotten = Vec::new();
    if version >= 7 {
        let n = r.array_len_required("forgotten_topics_data", flex, if ids { 17 } else { 2 })?;
        for _ in 0..n {
            let (topic, topic_id) = topic_ref(r, ids, flex)?;
            let np = r.array_len_required("forgotten partitions", flex, 4)?;
            for _ in 0..np {
                forgotten.push(ForgottenPartition {
                    topic: topic.clone(),
                    topic_id,
                    partition: r.i32("forgotten partition")?,
                });
            }
            r.tagged_fields(flex)?;
        }
    }
    let rack_id = if version >= 11 {
        r.string("rack_id", flex)?
    } else {
        String::new()
    };
    let mut replica = (replica_id, -1);
    if flex {
        let count = r.uvarint("tagged field count")?;
        for _ in 0..count {
            let tag = r.uvarint("tag")?;
            let size = r.uvarint("tagged field size")? as usize;
            let value = r.bytes("tagged field", size)?;
            if tag == REPLICA_STATE_TAG && version >= REPLICA_STATE_FROM {
                replica = replica_state(value)?;
            }
        }
    }
    Ok(FetchRequest {
        replica_id: replica.0,
        replica_epoch: replica.1,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
    })
}

/// A topic as a request names it: by name before v13, by id from v13.
fn topic_ref(r: &mut Reader, ids: bool, flex: bool) -> Result<(String, TopicId), DecodeError> {
    if ids {
        Ok((String::new(), r.uuid("topic_id")?))
    } else {
        Ok((r.string("topic", flex)?, NO_TOPIC_ID))
    }
}

fn decode_partition(
    r: &mut Reader,
    version: i16,
    flex: bool,
) -> Result<FetchPartition, DecodeError> {
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
    Ok(FetchPartition {
        partition,
        fetch_offset,
        partition_max_bytes,
        current_leader_epoch,
        last_fetched_epoch,
    })
}

/// The tagged `ReplicaState` struct: (replica id, replica epoch), then its own tagged fields.
fn replica_state(value: Bytes) -> Result<(i32, i64), DecodeError> {
    let mut r = Reader::new(value);
    let id = r.i32("replica_state.replica_id")?;
    let epoch = r.i64("replica_state.replica_epoch")?;
    r.tagged_fields(true)?;
    r.expect_end("replica_state")?;
    Ok((id, epoch))
}

/// One partition of a Fetch response. `records` are whole batches straight from the log.
#[derive(Debug, Clone)]
pub struct FetchPartitionResponse {
    pub partition: i32,
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The aborted transactions overlapping `records`, as (producer id, first offset): sent
    /// in a READ_COMMITTED response (v4+), where the consumer drops those producers' records;
    /// a READ_UNCOMMITTED response sends null whatever this holds.
    pub aborted_transactions: Vec<(i64, i64)>,
    pub records: Bytes,
    /// The fetcher's log diverges from the leader's after this (epoch, end offset): truncate
    /// there before fetching again (v12+, tagged field 0).
    pub diverging_epoch: Option<(i32, i64)>,
    /// The partition's leader as this broker knows it (v12+, tagged field 1); set on
    /// NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH from v16 (KIP-951).
    pub current_leader: Option<CurrentLeader>,
    /// The replica the consumer should read this partition from (v11+, KIP-392); -1: here.
    pub preferred_read_replica: i32,
}

/// A partition's leader and leader epoch; -1/-1 when none is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentLeader {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

/// A broker's advertised endpoint, as `NodeEndpoints` carries it (Fetch v16+, Produce v10+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FetchTopicResponse {
    /// Sent before v13.
    pub name: String,
    /// Sent from v13.
    pub topic_id: TopicId,
    pub partitions: Vec<FetchPartitionResponse>,
}

/// Writes a Fetch response body. Record bytes are appended as they are; with `read_committed`
/// each partition's aborted transactions are sent, otherwise null. `session_id` is sent from v7,
/// `node_endpoints` (when not empty) from v16.
pub fn encode_response(
    out: &mut FrameBuilder,
    version: i16,
    error: ErrorCode,
    session_id: i32,
    read_committed: bool,
    topics: &[FetchTopicResponse],
    node_endpoints: &[NodeEndpoint],
) {
    encode_throttled_response(
        out,
        version,
        0,
        error,
        session_id,
        read_committed,
        topics,
        node_endpoints,
    );
}

/// [`encode_response`] telling the client how long a quota holds it back (KIP-219).
#[allow(clippy::too_many_arguments)]
pub fn encode_throttled_response(
    out: &mut FrameBuilder,
    version: i16,
    throttle_time_ms: i32,
    error: ErrorCode,
    session_id: i32,
    read_committed: bool,
    topics: &[FetchTopicResponse],
    node_endpoints: &[NodeEndpoint],
) {
    let flex = flexible(api_key::FETCH, version);
    out.put_i32(throttle_time_ms);
    if version >= 7 {
        out.put_i16(error.code());
        out.put_i32(session_id);
    }
    put_array_len(out, topics.len(), flex);
    for topic in topics {
        if version >= TOPIC_IDS_FROM {
            out.put_slice(&topic.topic_id);
        } else {
            put_string(out, &topic.name, flex);
        }
        put_array_len(out, topic.partitions.len(), flex);
        for p in &topic.partitions {
            encode_partition(out, version, flex, read_committed, p);
        }
        put_empty_tagged_fields(out, flex);
    }
    if version >= NODE_ENDPOINTS_FROM && !node_endpoints.is_empty() {
        let mut field = BytesMut::new();
        encode_node_endpoints(&mut field, node_endpoints);
        out.put_u8(1);
        put_uvarint(out, NODE_ENDPOINTS_TAG);
        put_uvarint(out, len_u32(field.len()));
        out.put_slice(&field);
    } else {
        put_empty_tagged_fields(out, flex);
    }
}

fn encode_partition(
    out: &mut FrameBuilder,
    version: i16,
    flex: bool,
    read_committed: bool,
    p: &FetchPartitionResponse,
) {
    out.put_i32(p.partition);
    out.put_i16(p.error.code());
    out.put_i64(p.high_watermark);
    out.put_i64(p.last_stable_offset);
    if version >= 5 {
        out.put_i64(p.log_start_offset);
    }
    if read_committed {
        put_array_len(out, p.aborted_transactions.len(), flex);
        for &(producer_id, first_offset) in &p.aborted_transactions {
            out.put_i64(producer_id);
            out.put_i64(first_offset);
            put_empty_tagged_fields(out, flex);
        }
    } else {
        put_null_array(out, flex);
    }
    if version >= 11 {
        out.put_i32(p.preferred_read_replica);
    }
    put_nullable_bytes_len(out, Some(p.records.len()), flex);
    out.put_records(&p.records);
    if !flex {
        return;
    }
    // Tagged fields in tag order; each value's size is fixed: (i32, i64) or (i32, i32), then an
    // empty tagged-field section of its own.
    let diverging = p.diverging_epoch;
    let leader = p.current_leader;
    out.put_u8(u8::from(diverging.is_some()) + u8::from(leader.is_some()));
    if let Some((epoch, end_offset)) = diverging {
        out.put_u8(DIVERGING_EPOCH_TAG);
        out.put_u8(13);
        out.put_i32(epoch);
        out.put_i64(end_offset);
        out.put_u8(0);
    }
    if let Some(l) = leader {
        out.put_u8(CURRENT_LEADER_TAG);
        out.put_u8(9);
        out.put_i32(l.leader_id);
        out.put_i32(l.leader_epoch);
        out.put_u8(0);
    }
}

/// The `NodeEndpoints` array (flexible encoding), as Fetch v16 and Produce v10 carry it.
fn encode_node_endpoints(out: &mut BytesMut, endpoints: &[NodeEndpoint]) {
    put_array_len(out, endpoints.len(), true);
    for e in endpoints {
        out.put_i32(e.node_id);
        put_string(out, &e.host, true);
        out.put_i32(e.port);
        match &e.rack {
            Some(rack) => put_string(out, rack, true),
            None => put_uvarint(out, 0),
        }
        put_empty_tagged_fields(out, true);
    }
}

fn len_u32(len: usize) -> u32 {
    // A handful of endpoints: far below 4 GiB.
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchRequest as KpFetchRequest, FetchResponse};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    const ORDERS_ID: TopicId = [7; 16];
    const OLD_ID: TopicId = [9; 16];

    fn kp_request(version: i16, replica_id: i32) -> Bytes {
        use kafka_protocol::messages::fetch_request::{
            FetchPartition as P, FetchTopic as T, ReplicaState,
        };
        use kafka_protocol::messages::TopicName;
        let topic = if version >= TOPIC_IDS_FROM {
            T::default().with_topic_id(uuid::Uuid::from_bytes(ORDERS_ID))
        } else {
            T::default().with_topic(TopicName(StrBytes::from_static_str("orders")))
        };
        let req = KpFetchRequest::default()
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(52_428_800)
            .with_isolation_level(1)
            .with_topics(vec![topic.with_partitions(vec![P::default()
                .with_partition(3)
                .with_current_leader_epoch(if version >= 9 { 5 } else { -1 })
                .with_fetch_offset(42)
                .with_last_fetched_epoch(if version >= 12 { 4 } else { -1 })
                .with_partition_max_bytes(1_048_576)])]);
        let req = if version >= REPLICA_STATE_FROM {
            req.with_replica_state(
                ReplicaState::default()
                    .with_replica_id(replica_id.into())
                    .with_replica_epoch(if replica_id >= 0 { 77 } else { -1 }),
            )
        } else {
            req.with_replica_id(replica_id.into())
        };
        let req = if version >= 12 {
            // A cluster id (tag 0) the decoder skips.
            req.with_cluster_id(Some(StrBytes::from_static_str("c1")))
        } else {
            req
        };
        let req = if version >= 7 {
            use kafka_protocol::messages::fetch_request::ForgottenTopic;
            let old = if version >= TOPIC_IDS_FROM {
                ForgottenTopic::default().with_topic_id(uuid::Uuid::from_bytes(OLD_ID))
            } else {
                ForgottenTopic::default().with_topic(TopicName(StrBytes::from_static_str("old")))
            };
            req.with_session_id(12)
                .with_session_epoch(3)
                .with_forgotten_topics_data(vec![old.with_partitions(vec![1, 4])])
        } else {
            req
        };
        let mut b = bytes::BytesMut::new();
        req.encode(&mut b, version).unwrap();
        b.freeze()
    }

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 4..=16 {
            for replica_id in [-1, 2] {
                let bytes = kp_request(v, replica_id);
                let req = decode(&mut Reader::new(bytes.clone()), v).unwrap();
                assert_eq!(req.replica_id, replica_id, "v{v}");
                assert_eq!(req.max_wait_ms, 500);
                let t = &req.topics[0];
                if v >= TOPIC_IDS_FROM {
                    assert_eq!((t.name.as_str(), t.topic_id), ("", ORDERS_ID), "v{v}");
                } else {
                    assert_eq!((t.name.as_str(), t.topic_id), ("orders", NO_TOPIC_ID));
                }
                assert_eq!(t.partitions[0].fetch_offset, 42);
                if v >= 12 {
                    assert_eq!(t.partitions[0].current_leader_epoch, 5);
                    assert_eq!(t.partitions[0].last_fetched_epoch, 4);
                }
                if v >= REPLICA_STATE_FROM && replica_id >= 0 {
                    assert_eq!(req.replica_epoch, 77);
                } else {
                    assert_eq!(req.replica_epoch, -1);
                }
                if v >= 7 {
                    assert_eq!((req.session_id, req.session_epoch), (12, 3));
                    let (name, id) = if v >= TOPIC_IDS_FROM {
                        ("", OLD_ID)
                    } else {
                        ("old", NO_TOPIC_ID)
                    };
                    let forgotten: Vec<_> = [1, 4]
                        .map(|partition| ForgottenPartition {
                            topic: name.into(),
                            topic_id: id,
                            partition,
                        })
                        .into();
                    assert_eq!(req.forgotten, forgotten);
                }
                crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
            }
        }
    }

    /// A v16 consumer fetch written out field by field from the schema: no `ReplicaId`, topics
    /// by id, an empty rack id, no tagged fields.
    #[test]
    fn decodes_a_v16_fetch_built_by_hand() {
        let mut b = BytesMut::new();
        b.put_i32(100); // max_wait_ms
        b.put_i32(1); // min_bytes
        b.put_i32(1 << 20); // max_bytes
        b.put_i8(0); // isolation_level
        b.put_i32(0); // session_id
        b.put_i32(-1); // session_epoch
        b.put_u8(2); // one topic
        b.put_slice(&ORDERS_ID);
        b.put_u8(2); // one partition
        b.put_i32(0); // partition
        b.put_i32(-1); // current_leader_epoch
        b.put_i64(10); // fetch_offset
        b.put_i32(-1); // last_fetched_epoch
        b.put_i64(-1); // log_start_offset
        b.put_i32(4096); // partition_max_bytes
        b.put_u8(0); // partition tagged fields
        b.put_u8(0); // topic tagged fields
        b.put_u8(1); // no forgotten topics
        b.put_u8(1); // rack_id ""
                     // ReplicaState { replica_id: 3, replica_epoch: 9 } as tag 1.
        b.put_u8(1);
        b.put_u8(1);
        b.put_u8(13);
        b.put_i32(3);
        b.put_i64(9);
        b.put_u8(0);
        let bytes = b.freeze();
        let req = decode(&mut Reader::new(bytes.clone()), 16).unwrap();
        assert_eq!((req.replica_id, req.replica_epoch), (3, 9));
        assert_eq!(req.topics[0].topic_id, ORDERS_ID);
        assert_eq!(req.topics[0].partitions[0].fetch_offset, 10);
        assert_eq!(req.topics[0].partitions[0].partition_max_bytes, 4096);
        crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, 16));
    }

    #[test]
    fn response_parses_with_an_independent_decoder() {
        // A short batch is copied into the frame, a long one is a piece of its own.
        let short = crate::record_batch::build_batch(&[(None, Some(b"v"))], 1, None).freeze();
        let value = vec![7u8; 3 * crate::frame::RECORDS_BY_REFERENCE_MIN];
        let long = crate::record_batch::build_batch(&[(None, Some(&value))], 1, None).freeze();
        let part = |partition: i32, records: &Bytes| FetchPartitionResponse {
            preferred_read_replica: -1,
            partition,
            error: ErrorCode::NONE,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            aborted_transactions: vec![(41, 2), (42, 7)],
            records: records.clone(),
            diverging_epoch: None,
            current_leader: None,
        };
        let mut diverging = part(5, &short);
        diverging.diverging_epoch = Some((3, 1234));
        let mut moved = part(6, &Bytes::new());
        moved.error = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        moved.current_leader = Some(CurrentLeader {
            leader_id: 2,
            leader_epoch: 8,
        });
        let mut both = diverging.clone();
        both.partition = 7;
        both.current_leader = moved.current_leader;
        let topics = vec![FetchTopicResponse {
            name: "orders".into(),
            topic_id: ORDERS_ID,
            partitions: vec![part(3, &short), part(4, &long), diverging, moved, both],
        }];
        let endpoints = [
            NodeEndpoint {
                node_id: 2,
                host: "broker-2.example".into(),
                port: 9093,
                rack: None,
            },
            NodeEndpoint {
                node_id: 4,
                host: "h4".into(),
                port: 9094,
                rack: Some("r1".into()),
            },
        ];
        for v in 4..=16 {
            for rc in [false, true] {
                let mut out = FrameBuilder::new();
                out.put_i32(0); // the length prefix
                encode_response(&mut out, v, ErrorCode::NONE, 77, rc, &topics, &endpoints);
                let frame = out.finish();
                assert_eq!(frame.pieces().len(), 3, "v{v}");
                let mut bytes = Bytes::from(frame.to_vec()).slice(4..);
                let resp = FetchResponse::decode(&mut bytes, v).unwrap();
                assert_eq!(bytes.len(), 0, "v{v}");
                if v >= 7 {
                    assert_eq!(resp.session_id, 77);
                }
                let t = &resp.responses[0];
                if v >= TOPIC_IDS_FROM {
                    assert_eq!(t.topic_id, uuid::Uuid::from_bytes(ORDERS_ID), "v{v}");
                } else {
                    assert_eq!(t.topic.0.as_str(), "orders", "v{v}");
                }
                let ps = &t.partitions;
                assert_eq!(ps[0].high_watermark, 10);
                let aborted = ps[0].aborted_transactions.as_ref().map(|a| {
                    a.iter()
                        .map(|t| (t.producer_id.0, t.first_offset))
                        .collect::<Vec<_>>()
                });
                assert_eq!(aborted, rc.then(|| vec![(41, 2), (42, 7)]), "v{v}");
                assert_eq!(ps[0].records.as_ref(), Some(&short));
                assert_eq!(ps[1].records.as_ref(), Some(&long));
                assert_eq!(ps[2].records.as_ref(), Some(&short));
                assert_eq!(ps[3].error_code, ErrorCode::NOT_LEADER_OR_FOLLOWER.code());
                if v >= 12 {
                    assert_eq!(ps[2].diverging_epoch.epoch, 3);
                    assert_eq!(ps[2].diverging_epoch.end_offset, 1234);
                    assert_eq!(ps[1].diverging_epoch.epoch, -1);
                    assert_eq!(ps[1].current_leader.leader_id, -1);
                    for p in &ps[3..] {
                        assert_eq!(p.current_leader.leader_id, 2, "v{v}");
                        assert_eq!(p.current_leader.leader_epoch, 8, "v{v}");
                    }
                    assert_eq!(ps[4].diverging_epoch.end_offset, 1234);
                }
                if v >= NODE_ENDPOINTS_FROM {
                    let got: Vec<_> = resp
                        .node_endpoints
                        .iter()
                        .map(|e| {
                            (
                                e.node_id.0,
                                e.host.to_string(),
                                e.port,
                                e.rack.as_ref().map(|r| r.to_string()),
                            )
                        })
                        .collect();
                    let want: Vec<_> = endpoints
                        .iter()
                        .map(|e| (e.node_id, e.host.clone(), e.port, e.rack.clone()))
                        .collect();
                    assert_eq!(got, want, "v{v}");
                } else {
                    assert!(resp.node_endpoints.is_empty());
                }
            }
        }
    }

    #[test]
    fn no_endpoints_leave_the_v16_response_without_tagged_fields() {
        let topics = vec![];
        let mut with_none = FrameBuilder::new();
        encode_response(&mut with_none, 16, ErrorCode::NONE, 0, false, &topics, &[]);
        let bytes = with_none.finish().to_vec();
        // throttle, error, session id, empty topics array, empty tagged fields.
        assert_eq!(bytes.len(), 4 + 2 + 4 + 1 + 1);
        assert_eq!(bytes.last(), Some(&0));
    }
}
