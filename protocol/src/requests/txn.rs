//! Transaction requests a producer sends its transaction coordinator (KIP-98):
//! AddPartitionsToTxn v0–v3, AddOffsetsToTxn v0–v3, EndTxn v0–v3, and the one it sends the
//! group coordinator, TxnOffsetCommit v0–v3 (all four flexible from v3); and the one a
//! coordinator sends partition leaders, WriteTxnMarkers v1 (flexible; Kafka 4 dropped v0).
//! AddPartitionsToTxn v4 is KIP-890's batched, broker-to-broker form: several transactions,
//! each with `verify_only` (a partition leader asking the coordinator whether a partition is in
//! a transaction before a transactional produce). And the
//! admin requests of KIP-664: DescribeTransactions v0, ListTransactions v0–v1,
//! DescribeProducers v0 (all flexible).

use crate::wire::{DecodeError, Reader};

/// The first flexible version of all four requests.
const FLEXIBLE_FROM: i16 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topics: Vec<(String, Vec<i32>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsToTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub group_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub committed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitRequest {
    pub transactional_id: String,
    pub group_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// v3+ (KIP-447): the consumer's group generation and member, checked like OffsetCommit's.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<(String, Vec<TxnOffset>)>,
}

/// One marker of a WriteTxnMarkers request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkerEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub topics: Vec<(String, Vec<i32>)>,
    pub coordinator_epoch: i32,
}

/// Smallest topic entry: a 1-byte compact name length, a 1-byte array length, empty tags.
const TOPIC_BYTES_MIN: usize = 3;

/// One transaction of an AddPartitionsToTxn v4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnBatchEntry {
    pub request: AddPartitionsToTxnRequest,
    pub verify_only: bool,
}

/// AddPartitionsToTxn v4: the transactions of the batch.
pub fn decode_add_partitions_batch(
    r: &mut Reader,
    _version: i16,
) -> Result<Vec<AddPartitionsToTxnBatchEntry>, DecodeError> {
    // Smallest transaction: a 1-byte id, id and epoch, the flag, an empty topic array, tags.
    let n = r.array_len_required("transactions", true, 1 + 8 + 2 + 1 + 1 + 1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let transactional_id = r.string("transactional_id", true)?;
        let producer_id = r.i64("producer_id")?;
        let producer_epoch = r.i16("producer_epoch")?;
        let verify_only = r.bool("verify_only")?;
        let topics = decode_txn_topics(r, true)?;
        r.tagged_fields(true)?;
        out.push(AddPartitionsToTxnBatchEntry {
            request: AddPartitionsToTxnRequest {
                transactional_id,
                producer_id,
                producer_epoch,
                topics,
            },
            verify_only,
        });
    }
    r.tagged_fields(true)?;
    Ok(out)
}

fn decode_txn_topics(r: &mut Reader, flex: bool) -> Result<Vec<(String, Vec<i32>)>, DecodeError> {
    let n = r.array_len_required("topics", flex, TOPIC_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partitions", flex, 4)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32("partition")?);
        }
        r.tagged_fields(flex)?;
        topics.push((name, ps));
    }
    Ok(topics)
}

pub fn decode_add_partitions(
    r: &mut Reader,
    version: i16,
) -> Result<AddPartitionsToTxnRequest, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let transactional_id = r.string("transactional_id", flex)?;
    let producer_id = r.i64("producer_id")?;
    let producer_epoch = r.i16("producer_epoch")?;
    let topics = decode_txn_topics(r, flex)?;
    r.tagged_fields(flex)?;
    Ok(AddPartitionsToTxnRequest {
        transactional_id,
        producer_id,
        producer_epoch,
        topics,
    })
}

pub fn decode_add_offsets(
    r: &mut Reader,
    version: i16,
) -> Result<AddOffsetsToTxnRequest, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let transactional_id = r.string("transactional_id", flex)?;
    let producer_id = r.i64("producer_id")?;
    let producer_epoch = r.i16("producer_epoch")?;
    let group_id = r.string("group_id", flex)?;
    r.tagged_fields(flex)?;
    Ok(AddOffsetsToTxnRequest {
        transactional_id,
        producer_id,
        producer_epoch,
        group_id,
    })
}

pub fn decode_end_txn(r: &mut Reader, version: i16) -> Result<EndTxnRequest, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let transactional_id = r.string("transactional_id", flex)?;
    let producer_id = r.i64("producer_id")?;
    let producer_epoch = r.i16("producer_epoch")?;
    let committed = r.bool("committed")?;
    r.tagged_fields(flex)?;
    Ok(EndTxnRequest {
        transactional_id,
        producer_id,
        producer_epoch,
        committed,
    })
}

pub fn decode_txn_offset_commit(
    r: &mut Reader,
    version: i16,
) -> Result<TxnOffsetCommitRequest, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let transactional_id = r.string("transactional_id", flex)?;
    let group_id = r.string("group_id", flex)?;
    let producer_id = r.i64("producer_id")?;
    let producer_epoch = r.i16("producer_epoch")?;
    let (generation_id, member_id, group_instance_id) = if version >= 3 {
        (
            r.i32("generation_id")?,
            r.string("member_id", flex)?,
            r.nullable_string("group_instance_id", flex)?,
        )
    } else {
        (-1, String::new(), None)
    };
    let n = r.array_len_required("topics", flex, TOPIC_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        // Smallest partition entry: index, offset, a null metadata (v0–v1: no epoch).
        let np = r.array_len_required("partitions", flex, 4 + 8 + 1)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition_index")?;
            let offset = r.i64("committed_offset")?;
            let leader_epoch = if version >= 2 {
                r.i32("committed_leader_epoch")?
            } else {
                -1
            };
            let metadata = r.nullable_string("committed_metadata", flex)?;
            r.tagged_fields(flex)?;
            ps.push(TxnOffset {
                partition,
                offset,
                leader_epoch,
                metadata,
            });
        }
        r.tagged_fields(flex)?;
        topics.push((name, ps));
    }
    r.tagged_fields(flex)?;
    Ok(TxnOffsetCommitRequest {
        transactional_id,
        group_id,
        producer_id,
        producer_epoch,
        generation_id,
        member_id,
        group_instance_id,
        topics,
    })
}

/// WriteTxnMarkers v1.
pub fn decode_write_markers(
    r: &mut Reader,
    _version: i16,
) -> Result<Vec<TxnMarkerEntry>, DecodeError> {
    let flex = true;
    // Smallest marker: id, epoch, result, an empty topic array, coordinator epoch, empty tags.
    let n = r.array_len_required("markers", flex, 8 + 2 + 1 + 1 + 4 + 1)?;
    let mut markers = Vec::with_capacity(n);
    for _ in 0..n {
        let producer_id = r.i64("producer_id")?;
        let producer_epoch = r.i16("producer_epoch")?;
        let commit = r.bool("transaction_result")?;
        let nt = r.array_len_required("topics", flex, TOPIC_BYTES_MIN)?;
        let mut topics = Vec::with_capacity(nt);
        for _ in 0..nt {
            let name = r.string("topic", flex)?;
            let np = r.array_len_required("partition_indexes", flex, 4)?;
            let mut ps = Vec::with_capacity(np);
            for _ in 0..np {
                ps.push(r.i32("partition_index")?);
            }
            r.tagged_fields(flex)?;
            topics.push((name, ps));
        }
        let coordinator_epoch = r.i32("coordinator_epoch")?;
        r.tagged_fields(flex)?;
        markers.push(TxnMarkerEntry {
            producer_id,
            producer_epoch,
            commit,
            topics,
            coordinator_epoch,
        });
    }
    r.tagged_fields(flex)?;
    Ok(markers)
}

/// DescribeTransactions v0: the transactional ids.
pub fn decode_describe_transactions(
    r: &mut Reader,
    _version: i16,
) -> Result<Vec<String>, DecodeError> {
    let n = r.array_len_required("transactional_ids", true, 1)?;
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(r.string("transactional_id", true)?);
    }
    r.tagged_fields(true)?;
    Ok(ids)
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTransactionsRequest {
    pub state_filters: Vec<String>,
    pub producer_id_filters: Vec<i64>,
    /// v1+: only transactions running longer than this many ms (-1: any).
    pub duration_filter_ms: i64,
}

pub fn decode_list_transactions(
    r: &mut Reader,
    version: i16,
) -> Result<ListTransactionsRequest, DecodeError> {
    let n = r.array_len_required("state_filters", true, 1)?;
    let mut state_filters = Vec::with_capacity(n);
    for _ in 0..n {
        state_filters.push(r.string("state_filter", true)?);
    }
    let n = r.array_len_required("producer_id_filters", true, 8)?;
    let mut producer_id_filters = Vec::with_capacity(n);
    for _ in 0..n {
        producer_id_filters.push(r.i64("producer_id_filter")?);
    }
    let duration_filter_ms = if version >= 1 {
        r.i64("duration_filter")?
    } else {
        -1
    };
    r.tagged_fields(true)?;
    Ok(ListTransactionsRequest {
        state_filters,
        producer_id_filters,
        duration_filter_ms,
    })
}

/// DescribeProducers v0: the partitions, by topic.
pub fn decode_describe_producers(
    r: &mut Reader,
    _version: i16,
) -> Result<Vec<(String, Vec<i32>)>, DecodeError> {
    let n = r.array_len_required("topics", true, TOPIC_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", true)?;
        let np = r.array_len_required("partition_indexes", true, 4)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32("partition_index")?);
        }
        r.tagged_fields(true)?;
        topics.push((name, ps));
    }
    r.tagged_fields(true)?;
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{
        add_offsets_to_txn_request as ao, add_partitions_to_txn_request as ap,
        end_txn_request as et, txn_offset_commit_request as tc, GroupId, ProducerId, TopicName,
        TransactionalId,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn bytes_of<T: Encodable>(req: &T, v: i16) -> bytes::Bytes {
        let mut b = BytesMut::new();
        req.encode(&mut b, v).unwrap();
        b.freeze()
    }

    #[test]
    fn add_partitions_decodes_what_an_independent_encoder_writes() {
        for v in 0..=3 {
            let req = ap::AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
                .with_v3_and_below_producer_id(ProducerId(42))
                .with_v3_and_below_producer_epoch(3)
                .with_v3_and_below_topics(vec![ap::AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![0, 4])]);
            let bytes = bytes_of(&req, v);
            let got = decode_add_partitions(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(
                got,
                AddPartitionsToTxnRequest {
                    transactional_id: "tx".into(),
                    producer_id: 42,
                    producer_epoch: 3,
                    topics: vec![("t".into(), vec![0, 4])],
                }
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_add_partitions(r, v));
        }
    }

    #[test]
    fn add_partitions_v4_decodes_what_an_independent_encoder_writes() {
        let req = ap::AddPartitionsToTxnRequest::default().with_transactions(vec![
            ap::AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_producer_id(ProducerId(42))
                .with_producer_epoch(3)
                .with_verify_only(true)
                .with_topics(vec![ap::AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![1])]),
        ]);
        let bytes = bytes_of(&req, 4);
        let got = decode_add_partitions_batch(&mut Reader::new(bytes.clone()), 4).unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].verify_only);
        assert_eq!(got[0].request.topics, vec![("t".to_string(), vec![1])]);
        crate::requests::assert_prefixes_fail(&bytes, |r| decode_add_partitions_batch(r, 4));
    }

    #[test]
    fn add_offsets_and_end_txn_decode_what_an_independent_encoder_writes() {
        for v in 0..=3 {
            let req = ao::AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_producer_id(ProducerId(42))
                .with_producer_epoch(1)
                .with_group_id(GroupId(s("g")));
            let bytes = bytes_of(&req, v);
            let got = decode_add_offsets(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!((got.group_id.as_str(), got.producer_id), ("g", 42));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_add_offsets(r, v));

            let req = et::EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_producer_id(ProducerId(42))
                .with_producer_epoch(1)
                .with_committed(true);
            let bytes = bytes_of(&req, v);
            let got = decode_end_txn(&mut Reader::new(bytes.clone()), v).unwrap();
            assert!(got.committed);
            assert_eq!(got.transactional_id, "tx");
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_end_txn(r, v));
        }
    }

    #[test]
    fn write_markers_decodes_what_an_independent_encoder_writes() {
        use kafka_protocol::messages::write_txn_markers_request as wm;
        let req = wm::WriteTxnMarkersRequest::default().with_markers(vec![
            wm::WritableTxnMarker::default()
                .with_producer_id(ProducerId(9))
                .with_producer_epoch(2)
                .with_transaction_result(true)
                .with_topics(vec![wm::WritableTxnMarkerTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partition_indexes(vec![1, 3])])
                .with_coordinator_epoch(4),
        ]);
        let bytes = bytes_of(&req, 1);
        let got = decode_write_markers(&mut Reader::new(bytes.clone()), 1).unwrap();
        assert_eq!(
            got,
            vec![TxnMarkerEntry {
                producer_id: 9,
                producer_epoch: 2,
                commit: true,
                topics: vec![("t".into(), vec![1, 3])],
                coordinator_epoch: 4,
            }]
        );
        crate::requests::assert_prefixes_fail(&bytes, |r| decode_write_markers(r, 1));
    }

    #[test]
    fn admin_requests_decode_what_an_independent_encoder_writes() {
        use kafka_protocol::messages::{
            describe_producers_request as dp, DescribeTransactionsRequest,
            ListTransactionsRequest as Lt,
        };
        let req = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s("a")), TransactionalId(s("b"))]);
        let bytes = bytes_of(&req, 0);
        assert_eq!(
            decode_describe_transactions(&mut Reader::new(bytes.clone()), 0).unwrap(),
            vec!["a".to_string(), "b".to_string()]
        );
        crate::requests::assert_prefixes_fail(&bytes, |r| decode_describe_transactions(r, 0));
        for v in 0..=1 {
            let mut req = Lt::default()
                .with_state_filters(vec![s("Ongoing")])
                .with_producer_id_filters(vec![ProducerId(5)]);
            if v >= 1 {
                req = req.with_duration_filter(1000);
            }
            let bytes = bytes_of(&req, v);
            let got = decode_list_transactions(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.state_filters, vec!["Ongoing".to_string()]);
            assert_eq!(got.producer_id_filters, vec![5]);
            assert_eq!(got.duration_filter_ms, if v >= 1 { 1000 } else { -1 });
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_list_transactions(r, v));
        }
        let req =
            dp::DescribeProducersRequest::default().with_topics(vec![dp::TopicRequest::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0, 2])]);
        let bytes = bytes_of(&req, 0);
        assert_eq!(
            decode_describe_producers(&mut Reader::new(bytes.clone()), 0).unwrap(),
            vec![("t".to_string(), vec![0, 2])]
        );
        crate::requests::assert_prefixes_fail(&bytes, |r| decode_describe_producers(r, 0));
    }

    #[test]
    fn txn_offset_commit_decodes_what_an_independent_encoder_writes() {
        for v in 0..=3 {
            let mut req = tc::TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_group_id(GroupId(s("g")))
                .with_producer_id(ProducerId(42))
                .with_producer_epoch(1)
                .with_topics(vec![tc::TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        tc::TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(2)
                            .with_committed_offset(99)
                            .with_committed_leader_epoch(if v >= 2 { 5 } else { -1 })
                            .with_committed_metadata(Some(s("m"))),
                    ])]);
            if v >= 3 {
                req = req
                    .with_generation_id(7)
                    .with_member_id(s("member"))
                    .with_group_instance_id(None);
            }
            let bytes = bytes_of(&req, v);
            let got = decode_txn_offset_commit(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics[0].1[0].offset, 99);
            assert_eq!(got.topics[0].1[0].metadata.as_deref(), Some("m"));
            assert_eq!(got.topics[0].1[0].leader_epoch, if v >= 2 { 5 } else { -1 });
            if v >= 3 {
                assert_eq!((got.generation_id, got.member_id.as_str()), (7, "member"));
            }
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_txn_offset_commit(r, v));
        }
    }
}
