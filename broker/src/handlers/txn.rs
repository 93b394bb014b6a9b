//! The transaction APIs a producer calls (KIP-98): InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn — each run on the shard coordinating the id
//! (`txn::TxnCoordinator`) — and TxnOffsetCommit, which the group coordinator takes;
//! WriteTxnMarkers, which coordinators send partition leaders; and the admin APIs of KIP-664,
//! DescribeTransactions, ListTransactions (what this broker coordinates) and DescribeProducers.
//! Also `__transaction_state`'s creation at the first transactional request, as Kafka creates
//! it.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, EndTxnResponse, InitProducerIdResponse, ProducerId,
};
use tracing::{info, warn};
use tributary_metadata::types::{self, TopicPartition};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::groups::{CommitPartition, OffsetCommitRequest};
use tributary_protocol::requests::init_producer_id::InitProducerIdRequest;
use tributary_protocol::requests::txn;
use tributary_protocol::{ErrorCode, Reader};

use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::controller::NewTopic;
use crate::coordinators::ask_txn;
use crate::coordinators::{TxnOp, TxnReply};
use crate::group::OFFSETS_TOPIC;
use crate::routing::ShardId;
use crate::shard::Shard;
use crate::txn::TXN_TOPIC;

/// KIP-890 part 1 before a transactional produce: INVALID_TXN_STATE unless the coordinator
/// holds `partition` in `id`'s ongoing transaction at `producer` (INVALID_PRODUCER_EPOCH for an
/// older epoch). A coordinator on this node is asked directly; one on another broker with
/// AddPartitionsToTxn v4 `verify_only`, as Kafka's partition leaders ask.
pub async fn verify(
    shard: &Rc<Shard>,
    id: &str,
    producer: (i64, i16),
    partition: (&str, i32),
) -> ErrorCode {
    let catalog = shard.catalog();
    let p = shard.txns.partition_of(id);
    let leader = catalog.partition(TXN_TOPIC, p).map_or(-1, |r| r.leader);
    let code = if leader != shard.config.node_id {
        verify_remote(shard, leader, id, producer, partition).await
    } else {
        let op = TxnOp::Verify {
            id: id.to_string(),
            producer: wire_producer(producer.0, producer.1),
            partition: TopicPartition::new(partition.0, partition.1),
        };
        verify_code(ask(shard, op).await)
    };
    // A coordinator that cannot answer now is a retriable produce error, as Kafka answers it
    // (NOT_ENOUGH_REPLICAS: old clients retry it).
    match code {
        ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
            ErrorCode::NOT_ENOUGH_REPLICAS
        }
        c => c,
    }
}

/// A producer id and epoch as a request carries them.
fn wire_producer(id: i64, epoch: i16) -> (types::ProducerId, types::ProducerEpoch) {
    (types::ProducerId(id), types::ProducerEpoch(epoch))
}

/// The largest AddPartitionsToTxn response read back: a few bytes per partition.
const VERIFY_RESPONSE_BYTES_MAX: usize = 1 << 16;

async fn verify_remote(
    shard: &Rc<Shard>,
    coordinator: i32,
    id: &str,
    producer: (i64, i16),
    partition: (&str, i32),
) -> ErrorCode {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::ApiKey;
    let Some(addr) = crate::inter_broker::broker_addr(&shard.catalog(), coordinator) else {
        return ErrorCode::COORDINATOR_NOT_AVAILABLE;
    };
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(transactional_id(id))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_verify_only(true)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name(partition.0))
                .with_partitions(vec![partition.1])]),
    ]);
    let client = format!("tributary-partition-leader-{}", shard.config.node_id);
    let frame = crate::inter_broker::encode(ApiKey::AddPartitionsToTxn, 4, 1, &client, &req);
    let security = shard.inter_broker();
    let exchange = shard.broker_connections.call::<AddPartitionsToTxnResponse>(
        &security,
        &addr,
        &client,
        &frame,
        ApiKey::AddPartitionsToTxn,
        4,
        1,
        VERIFY_RESPONSE_BYTES_MAX,
    );
    let answer = futures_lite::future::or(exchange, async {
        glommio::timer::sleep(crate::inter_broker::CONNECT_TIMEOUT * 2).await;
        Err("timed out".to_string())
    })
    .await;
    match answer {
        Ok(resp) => resp
            .results_by_transaction
            .first()
            .and_then(|t| t.topic_results.first())
            .and_then(|t| t.results_by_partition.first())
            .map_or(ErrorCode::COORDINATOR_NOT_AVAILABLE, |p| {
                ErrorCode(p.partition_error_code)
            }),
        Err(e) => {
            warn!(coordinator, %addr, error = %e, "verifying a transactional produce with its coordinator failed");
            ErrorCode::COORDINATOR_NOT_AVAILABLE
        }
    }
}

/// AddPartitionsToTxn's per-partition results: unknown partitions fail and the others are not
/// attempted, as in Kafka; otherwise the coordinator's answer for all.
async fn add_partitions(
    shard: &Rc<Shard>,
    req: &txn::AddPartitionsToTxnRequest,
    v: i16,
    conn: crate::conn::Conn<'_>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let catalog = shard.catalog();
    let known = |t: &str, p: i32| {
        catalog
            .topics
            .get(t)
            .is_some_and(|m| p >= 0 && p < m.partitions)
    };
    // Kafka's checks: WRITE on the transactional id, then on each topic; a refused topic
    // leaves the others OPERATION_NOT_ATTEMPTED.
    let id_denied = !shard.allowed(
        conn,
        AclOperation::Write,
        ResourceType::TransactionalId,
        &req.transactional_id,
    );
    let topic_denied = |t: &str| !shard.allowed(conn, AclOperation::Write, ResourceType::Topic, t);
    let any_topic_denied = req.topics.iter().any(|(t, _)| topic_denied(t));
    let all_known = req
        .topics
        .iter()
        .all(|(t, ps)| ps.iter().all(|p| known(t, *p)));
    let refused = id_denied || any_topic_denied;
    let code = if refused {
        ErrorCode::NONE
    } else if all_known {
        let op = TxnOp::AddPartitions {
            id: req.transactional_id.clone(),
            producer: wire_producer(req.producer_id, req.producer_epoch),
            partitions: req
                .topics
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
                .collect(),
        };
        ask_code(shard, op, v).await
    } else {
        ErrorCode::NONE
    };
    req.topics
        .iter()
        .map(|(t, ps)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(t))
                .with_results_by_partition(
                    ps.iter()
                        .map(|p| {
                            let c = if id_denied {
                                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                            } else if topic_denied(t) {
                                ErrorCode::TOPIC_AUTHORIZATION_FAILED
                            } else if refused {
                                ErrorCode::OPERATION_NOT_ATTEMPTED
                            } else if all_known {
                                code
                            } else if known(t, *p) {
                                ErrorCode::OPERATION_NOT_ATTEMPTED
                            } else {
                                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                            };
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(c.code())
                        })
                        .collect(),
                )
        })
        .collect()
}

/// What a produce is refused with when verification fails: an older epoch is
/// INVALID_PRODUCER_EPOCH and an unknown producer INVALID_TXN_STATE, as the produce path answers.
fn verify_code(reply: Option<TxnReply>) -> ErrorCode {
    match reply {
        Some(TxnReply::Code(ErrorCode::PRODUCER_FENCED)) => ErrorCode::INVALID_PRODUCER_EPOCH,
        Some(TxnReply::Code(ErrorCode::INVALID_PRODUCER_ID_MAPPING)) => {
            ErrorCode::INVALID_TXN_STATE
        }
        Some(TxnReply::Code(c)) => c,
        _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
    }
}

/// An operation answered with a code, as a version-`v` client reads it.
async fn ask_code(shard: &Rc<Shard>, op: TxnOp, v: i16) -> ErrorCode {
    match ask(shard, op).await {
        Some(TxnReply::Code(c)) => for_version(c, v, 2),
        _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
    }
}

/// Every `transaction.abort.timed.out.transaction.cleanup.interval.ms`: aborts the
/// transactions this shard coordinates that outlived their timeout (their markers follow) and
/// forgets ids idle for `transactional.id.expiration.ms`.
pub async fn tick(shard: Rc<Shard>) {
    let log_of = |id: &str| shard.txn_log(id);
    for prepared in shard.txns.abort_expired(log_of).await {
        glommio::spawn_local(crate::txn::markers::finish(shard.clone(), prepared)).detach();
    }
    let expired = shard.txns.expire_ids(log_of).await;
    if expired > 0 {
        info!(expired, "transactional ids expired");
    }
}

async fn ask(shard: &Rc<Shard>, op: TxnOp) -> Option<TxnReply> {
    let owner = shard.txn_owner(op.id());
    ask_txn(shard, owner, op).await
}

/// Creates `__transaction_state` if it does not exist yet (Kafka creates it at the first
/// transactional request): `transaction.state.log.num.partitions` partitions, compacted, over
/// the live brokers. Returns whether it exists now.
pub async fn ensure_txn_topic(shard: &Rc<Shard>) -> bool {
    let catalog = shard.catalog();
    if catalog.topics.contains_key(TXN_TOPIC) {
        return true;
    }
    let c = &shard.config;
    let live = catalog.live_brokers().count().max(1);
    let rf = c.transaction_state_log_replication_factor.min(live);
    let min_isr = c.transaction_state_log_min_isr.min(rf);
    let topic = NewTopic {
        name: TXN_TOPIC.to_string(),
        partitions: c.transaction_state_log_num_partitions,
        replication_factor: rf as i32,
        configs: vec![
            ("cleanup.policy".into(), "compact".into()),
            ("min.insync.replicas".into(), min_isr.to_string()),
            (
                "segment.bytes".into(),
                c.transaction_state_log_segment_bytes.to_string(),
            ),
        ],
        assignment: None,
    };
    info!(
        partitions = topic.partitions,
        replication_factor = rf,
        "creating {TXN_TOPIC}"
    );
    let created = crate::controller::ask(shard, |s, c| async move {
        c.create_topics(&s, vec![topic]).await
    })
    .await;
    match created.as_deref() {
        Some([(code, _)])
            if *code == ErrorCode::NONE || *code == ErrorCode::TOPIC_ALREADY_EXISTS =>
        {
            true
        }
        other => {
            warn!(result = ?other, "creating {TXN_TOPIC} failed; transactional requests wait for it");
            false
        }
    }
}

fn transactional_id(id: &str) -> kafka_protocol::messages::TransactionalId {
    kafka_protocol::messages::TransactionalId(str_bytes(id))
}

/// Old versions know no PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH, as Kafka answers them.
fn for_version(code: ErrorCode, version: i16, fenced_from: i16) -> ErrorCode {
    if code == ErrorCode::PRODUCER_FENCED && version < fenced_from {
        ErrorCode::INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

/// InitProducerId with a transactional id.
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    req: InitProducerIdRequest,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let id = req.transactional_id.clone().unwrap_or_default();
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !shard.allowed(
        conn,
        AclOperation::Write,
        ResourceType::TransactionalId,
        &id,
    ) {
        return frame(
            spec,
            header,
            &resp.with_error_code(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()),
        );
    }
    let out = if !ensure_txn_topic(shard).await {
        Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    } else {
        let op = TxnOp::Init {
            id,
            timeout_ms: req.transaction_timeout_ms,
            given: wire_producer(req.producer_id, req.producer_epoch),
        };
        match ask(shard, op).await {
            Some(TxnReply::Init(r)) => r,
            _ => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    };
    let resp = match out {
        Ok((pid, epoch)) => resp
            .with_producer_id(ProducerId(pid.0))
            .with_producer_epoch(epoch.0),
        Err(code) => resp.with_error_code(for_version(code, v, 3).code()),
    };
    frame(spec, header, &resp)
}

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    match spec.key {
        api_key::ADD_PARTITIONS_TO_TXN if v >= 4 => {
            add_partitions_batched(shard, spec, header, r, conn).await
        }
        api_key::ADD_PARTITIONS_TO_TXN => add_partitions_to_txn(shard, spec, header, r, conn).await,
        api_key::ADD_OFFSETS_TO_TXN => add_offsets_to_txn(shard, spec, header, r, conn).await,
        api_key::END_TXN => end_txn(shard, spec, header, r, conn).await,
        api_key::TXN_OFFSET_COMMIT => txn_offset_commit(shard, spec, header, r, conn).await,
        api_key::WRITE_TXN_MARKERS => write_txn_markers(shard, spec, header, r, conn).await,
        api_key::DESCRIBE_TRANSACTIONS => describe_transactions(shard, spec, header, r, conn).await,
        api_key::LIST_TRANSACTIONS => list_transactions(shard, spec, header, r, conn).await,
        api_key::DESCRIBE_PRODUCERS => describe_producers(shard, spec, header, r, conn).await,
        other => Err(format!("api key {other} is not a transaction API")),
    }
}

async fn add_partitions_batched(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResult;
    let v = header.api_version;
    let batch = decode_all(r, |r| txn::decode_add_partitions_batch(r, v))?;
    // The batched form is broker-to-broker: CLUSTER_ACTION on the cluster.
    if !shard.allowed_on_cluster(conn, AclOperation::ClusterAction) {
        return frame(
            spec,
            header,
            &AddPartitionsToTxnResponse::default()
                .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code()),
        );
    }
    let mut results = Vec::with_capacity(batch.len());
    for entry in batch {
        let req = &entry.request;
        let topics = if entry.verify_only {
            // KIP-890: a partition leader asks before a transactional produce.
            let mut topics = Vec::with_capacity(req.topics.len());
            for (t, ps) in &req.topics {
                let mut parts = Vec::with_capacity(ps.len());
                for p in ps {
                    let op = TxnOp::Verify {
                        id: req.transactional_id.clone(),
                        producer: wire_producer(req.producer_id, req.producer_epoch),
                        partition: TopicPartition::new(t.clone(), *p),
                    };
                    parts.push(
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(*p)
                            .with_partition_error_code(verify_code(ask(shard, op).await).code()),
                    );
                }
                topics.push(
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(topic_name(t))
                        .with_results_by_partition(parts),
                );
            }
            topics
        } else {
            add_partitions(shard, req, v, conn).await
        };
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(transactional_id(&req.transactional_id))
                .with_topic_results(topics),
        );
    }
    frame(
        spec,
        header,
        &AddPartitionsToTxnResponse::default().with_results_by_transaction(results),
    )
}

async fn add_partitions_to_txn(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| txn::decode_add_partitions(r, v))?;
    let results = add_partitions(shard, &req, v, conn).await;
    frame(
        spec,
        header,
        &AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
    )
}

/// Whether the connection's principal lacks WRITE on the transactional id `id`.
fn id_denied(shard: &Shard, conn: crate::conn::Conn<'_>, id: &str) -> bool {
    !shard.allowed(conn, AclOperation::Write, ResourceType::TransactionalId, id)
}

async fn add_offsets_to_txn(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| txn::decode_add_offsets(r, v))?;
    // The group's offsets partition joins the transaction: its marker makes the
    // transaction's offsets visible.
    let p = shard.groups.group_partition(&req.group_id);
    let code = if id_denied(shard, conn, &req.transactional_id) {
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    } else if !shard.allowed(conn, AclOperation::Read, ResourceType::Group, &req.group_id) {
        ErrorCode::GROUP_AUTHORIZATION_FAILED
    } else {
        // The partition must exist for the transaction's marker to reach it.
        crate::coordinators::ensure_offsets_topic(shard, &req.group_id).await;
        let op = TxnOp::AddPartitions {
            id: req.transactional_id,
            producer: wire_producer(req.producer_id, req.producer_epoch),
            partitions: vec![TopicPartition::new(OFFSETS_TOPIC, p)],
        };
        ask_code(shard, op, v).await
    };
    frame(
        spec,
        header,
        &AddOffsetsToTxnResponse::default().with_error_code(code.code()),
    )
}

async fn end_txn(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| txn::decode_end_txn(r, v))?;
    let code = if id_denied(shard, conn, &req.transactional_id) {
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    } else {
        let op = TxnOp::End {
            id: req.transactional_id,
            producer: wire_producer(req.producer_id, req.producer_epoch),
            commit: req.committed,
        };
        ask_code(shard, op, v).await
    };
    frame(
        spec,
        header,
        &EndTxnResponse::default().with_error_code(code.code()),
    )
}

async fn txn_offset_commit(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| txn::decode_txn_offset_commit(r, v))?;
    let txn_denied = id_denied(shard, conn, &req.transactional_id);
    let mut commit = OffsetCommitRequest {
        group_id: req.group_id,
        generation_id: req.generation_id,
        member_id: req.member_id,
        group_instance_id: req.group_instance_id,
        topics: req
            .topics
            .into_iter()
            .map(|(t, ps)| {
                let ps = ps
                    .into_iter()
                    .map(|p| CommitPartition {
                        partition: p.partition,
                        offset: p.offset,
                        leader_epoch: p.leader_epoch,
                        metadata: p.metadata,
                    })
                    .collect();
                (t, ps)
            })
            .collect(),
    };
    let producer = wire_producer(req.producer_id, req.producer_epoch);
    // WRITE on the transactional id, then READ on the group and each topic.
    let denied: Vec<(String, Vec<(i32, ErrorCode)>)> = if txn_denied {
        std::mem::take(&mut commit.topics)
            .into_iter()
            .map(|(t, ps)| {
                let codes = ps
                    .iter()
                    .map(|p| {
                        (
                            p.partition,
                            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        )
                    })
                    .collect();
                (t, codes)
            })
            .collect()
    } else {
        super::groups::authorize_commit(shard, conn, &mut commit)
    };
    let mut results = if commit.topics.is_empty() {
        Vec::new()
    } else {
        super::groups::commit_offsets(
            shard,
            commit,
            crate::group::CommitFrom::Txn(producer.0, producer.1),
        )
        .await
    };
    results.extend(denied);
    let topics = results
        .into_iter()
        .map(|(t, ps)| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic_name(&t))
                .with_partitions(
                    ps.into_iter()
                        .map(|(p, c)| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(for_version(c, v, 2).code())
                        })
                        .collect(),
                )
        })
        .collect();
    frame(
        spec,
        header,
        &TxnOffsetCommitResponse::default().with_topics(topics),
    )
}

async fn write_txn_markers(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
        WriteTxnMarkersResponse,
    };
    let req = decode_all(r, |r| txn::decode_write_markers(r, v))?;
    // Coordinators send markers: CLUSTER_ACTION on the cluster.
    let cluster_ok = shard.allowed_on_cluster(conn, AclOperation::ClusterAction);
    let mut results = Vec::with_capacity(req.len());
    for m in req {
        let mut topics = Vec::with_capacity(m.topics.len());
        for (topic, partitions) in m.topics {
            let mut parts = Vec::with_capacity(partitions.len());
            for partition in partitions {
                let marker = crate::txn::markers::Marker {
                    topic: topic.clone(),
                    partition,
                    producer_id: types::ProducerId(m.producer_id),
                    producer_epoch: types::ProducerEpoch(m.producer_epoch),
                    commit: m.commit,
                    coordinator_epoch: m.coordinator_epoch,
                };
                let code = if cluster_ok {
                    crate::txn::markers::write_here(shard, &marker).await
                } else {
                    ErrorCode::CLUSTER_AUTHORIZATION_FAILED
                };
                parts.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(partition)
                        .with_error_code(code.code()),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(parts),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(m.producer_id))
                .with_topics(topics),
        );
    }
    frame(
        spec,
        header,
        &WriteTxnMarkersResponse::default().with_markers(results),
    )
}

async fn describe_transactions(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    use kafka_protocol::messages::describe_transactions_response::{
        DescribeTransactionsResponse, TopicData, TransactionState,
    };
    let ids = decode_all(r, |r| txn::decode_describe_transactions(r, v))?;
    let mut states = Vec::with_capacity(ids.len());
    for id in ids {
        // DESCRIBE on the transactional id, as in Kafka.
        let reply = if shard.allowed(
            conn,
            AclOperation::Describe,
            ResourceType::TransactionalId,
            &id,
        ) {
            ask(shard, TxnOp::Describe(id.clone())).await
        } else {
            Some(TxnReply::Described(Err(
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            )))
        };
        let out = TransactionState::default()
            .with_transactional_id(transactional_id(&id))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_state(str_bytes(""))
            .with_transaction_start_time_ms(-1);
        states.push(match reply {
            Some(TxnReply::Described(Ok(m))) => {
                let mut topics: Vec<TopicData> = Vec::new();
                for tp in &m.partitions {
                    let (t, p) = (&tp.topic, &tp.partition);
                    match topics.last_mut().filter(|d| d.topic.0.as_str() == t) {
                        Some(d) => d.partitions.push(*p),
                        None => topics.push(
                            TopicData::default()
                                .with_topic(topic_name(t))
                                .with_partitions(vec![*p]),
                        ),
                    }
                }
                out.with_transaction_state(str_bytes(m.state.name()))
                    .with_transaction_timeout_ms(m.timeout_ms)
                    .with_transaction_start_time_ms(m.start_ms)
                    .with_producer_id(ProducerId(m.producer_id.0))
                    .with_producer_epoch(m.producer_epoch.0)
                    .with_topics(topics)
            }
            Some(TxnReply::Described(Err(code))) => out.with_error_code(code.code()),
            _ => out.with_error_code(ErrorCode::COORDINATOR_NOT_AVAILABLE.code()),
        });
    }
    frame(
        spec,
        header,
        &DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

async fn list_transactions(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    use kafka_protocol::messages::list_transactions_response::{
        ListTransactionsResponse, TransactionState,
    };
    let req = decode_all(r, |r| txn::decode_list_transactions(r, v))?;
    const STATES: [&str; 8] = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ];
    let unknown: Vec<String> = req
        .state_filters
        .iter()
        .filter(|f| !STATES.contains(&f.as_str()))
        .cloned()
        .collect();
    let lists = futures::future::join_all(
        (0..shard.shards).map(|s| ask_txn(shard, ShardId(s), TxnOp::List)),
    )
    .await;
    let now = crate::coordinator_log::now_ms();
    let mut txns: Vec<crate::txn::state::TxnMeta> = lists
        .into_iter()
        .flat_map(|r| match r {
            Some(TxnReply::Listed(l)) => l,
            _ => Vec::new(),
        })
        .filter(|m| {
            req.state_filters.is_empty() || req.state_filters.iter().any(|f| f == m.state.name())
        })
        // Only the ids the principal may describe, as in Kafka.
        .filter(|m| {
            shard.allowed(
                conn,
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &m.transactional_id,
            )
        })
        .filter(|m| {
            req.producer_id_filters.is_empty() || req.producer_id_filters.contains(&m.producer_id.0)
        })
        .filter(|m| {
            req.duration_filter_ms < 0
                || (m.start_ms >= 0 && now - m.start_ms > req.duration_filter_ms)
        })
        .collect();
    txns.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    let states = txns
        .iter()
        .map(|m| {
            TransactionState::default()
                .with_transactional_id(transactional_id(&m.transactional_id))
                .with_producer_id(ProducerId(m.producer_id.0))
                .with_transaction_state(str_bytes(m.state.name()))
        })
        .collect();
    frame(
        spec,
        header,
        &ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown.iter().map(|u| str_bytes(u)).collect())
            .with_transaction_states(states),
    )
}

async fn describe_producers(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    use kafka_protocol::messages::describe_producers_response::{
        DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
    };
    let topics = decode_all(r, |r| txn::decode_describe_producers(r, v))?;
    let catalog = shard.catalog();
    let mut out = Vec::with_capacity(topics.len());
    for (topic, partitions) in topics {
        let mut parts = Vec::with_capacity(partitions.len());
        // READ on the topic, as in Kafka.
        let denied = !shard.allowed(conn, AclOperation::Read, ResourceType::Topic, &topic);
        for p in partitions {
            let answer = if denied {
                Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
            } else if catalog.partition(&topic, p).is_none() {
                Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
            } else {
                let op = TxnOp::Producers {
                    topic: topic.clone(),
                    partition: p,
                };
                let owner = shard.owner(&topic, p);
                match ask_txn(shard, owner, op).await {
                    Some(TxnReply::Producers(r)) => r,
                    _ => Err(ErrorCode::UNKNOWN_SERVER_ERROR),
                }
            };
            let part = PartitionResponse::default().with_partition_index(p);
            parts.push(match answer {
                Ok(producers) => part.with_active_producers(
                    producers
                        .iter()
                        .map(|s| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(s.producer_id))
                                .with_producer_epoch(i32::from(s.epoch))
                                .with_last_sequence(s.last_sequence)
                                .with_last_timestamp(s.last_timestamp)
                                .with_coordinator_epoch(s.coordinator_epoch)
                                .with_current_txn_start_offset(s.txn_first_offset.unwrap_or(-1))
                        })
                        .collect(),
                ),
                Err(code) => part.with_error_code(code.code()),
            });
        }
        out.push(
            TopicResponse::default()
                .with_name(topic_name(&topic))
                .with_partitions(parts),
        );
    }
    frame(
        spec,
        header,
        &DescribeProducersResponse::default().with_topics(out),
    )
}
