//! Ending a prepared transaction: a COMMIT or ABORT marker (a control batch) appended to every
//! partition of the transaction by the shard that owns it (Kafka's WriteTxnMarkers, which a
//! coordinator sends to each partition's leader), then CompleteCommit / CompleteAbort written to
//! `__transaction_state`. Markers are retried until written — a partition whose leader is
//! elsewhere or moving is tried again with backoff — so a prepared transaction always completes,
//! also after a restart or a coordinator move (the new coordinator resumes it at load).
//!
//! Partitions another broker leads get their markers by WriteTxnMarkers v1 to that broker, one
//! request per leader and round.

use std::rc::Rc;
use std::time::Duration;

use tracing::{info, warn};
use tributary_metadata::types::{self, TopicPartition};
use tributary_protocol::ErrorCode;

use super::state::{TxnMeta, TxnState};
use crate::shard::{invoke_on, Shard};

/// First and largest pause between rounds of marker writes that did not all succeed.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// One marker to write.
#[derive(Debug, Clone)]
pub struct Marker {
    pub topic: String,
    pub partition: i32,
    pub producer_id: types::ProducerId,
    pub producer_epoch: types::ProducerEpoch,
    pub commit: bool,
    /// The coordinator's epoch: the leader epoch of its `__transaction_state` partition.
    pub coordinator_epoch: i32,
}

/// Writes the markers of `prepared` until all are written, then completes it. Gives up (leaving
/// it prepared for whoever coordinates it next) once this shard no longer coordinates the id.
pub async fn finish(shard: Rc<Shard>, prepared: TxnMeta) {
    let id = prepared.transactional_id.clone();
    let commit = prepared.state == TxnState::PrepareCommit;
    let mut left: Vec<TopicPartition> = prepared.partitions.iter().cloned().collect();
    let mut pause = RETRY_MIN;
    loop {
        let Some(log) = shard.txn_log(&id) else {
            info!(transactional_id = %id, "no longer coordinating a prepared transaction; its new coordinator completes it");
            return;
        };
        let coordinator_epoch = shard
            .catalog()
            .partition(super::TXN_TOPIC, shard.txns.partition_of(&id))
            .map_or(0, |r| r.leader_epoch.0);
        let mut failed = Vec::new();
        let mut remote: std::collections::BTreeMap<i32, Vec<Marker>> = Default::default();
        for TopicPartition { topic, partition } in left {
            let marker = Marker {
                topic,
                partition,
                producer_id: prepared.producer_id,
                producer_epoch: prepared.producer_epoch,
                commit,
                coordinator_epoch,
            };
            let catalog = shard.catalog();
            let Some(placed) = catalog.partition(&marker.topic, marker.partition) else {
                // A partition that no longer exists needs no marker.
                continue;
            };
            if placed.leader >= 0 && placed.leader != shard.config.node_id {
                remote.entry(placed.leader).or_default().push(marker);
                continue;
            }
            let code = write_here(&shard, &marker).await;
            if code.is_error() {
                failed.push((marker.topic, marker.partition, code));
            }
        }
        for (leader, markers) in remote {
            for (m, code) in send_remote(&shard, leader, &markers).await {
                if code.is_error() {
                    failed.push((m.topic, m.partition, code));
                }
            }
        }
        if failed.is_empty() {
            if let Err(e) = shard.txns.complete(&log, &prepared).await {
                warn!(transactional_id = %id, error = ?e, "completing a transaction failed; retrying");
                left = Vec::new();
                glommio::timer::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
                continue;
            }
            return;
        }
        warn!(transactional_id = %id, failed = ?failed, "transaction markers not written yet; retrying");
        left = failed
            .into_iter()
            .map(|(t, p, _)| TopicPartition::new(t, p))
            .collect();
        glommio::timer::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Sends `markers` (all of one transaction) to broker `leader` as one WriteTxnMarkers v1; each
/// marker with its partition's answer (a transport failure answers every one).
async fn send_remote(
    shard: &Rc<Shard>,
    leader: i32,
    markers: &[Marker],
) -> Vec<(Marker, ErrorCode)> {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let every = |code: ErrorCode| markers.iter().map(|m| (m.clone(), code)).collect();
    let Some(first) = markers.first() else {
        return Vec::new();
    };
    let Some(addr) = crate::inter_broker::broker_addr(&shard.catalog(), leader) else {
        return every(ErrorCode::BROKER_NOT_AVAILABLE);
    };
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for m in markers {
        match topics.iter_mut().find(|t| t.name.0.as_str() == m.topic) {
            Some(t) => t.partition_indexes.push(m.partition),
            None => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(m.topic.clone())))
                    .with_partition_indexes(vec![m.partition]),
            ),
        }
    }
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(first.producer_id.0))
        .with_producer_epoch(first.producer_epoch.0)
        .with_transaction_result(first.commit)
        .with_topics(topics)
        .with_coordinator_epoch(first.coordinator_epoch)]);
    let client = format!("tributary-txn-coordinator-{}", shard.config.node_id);
    let frame = crate::inter_broker::encode(ApiKey::WriteTxnMarkers, 1, 1, &client, &req);
    let security = shard.inter_broker();
    let answer = shard.broker_connections.call::<WriteTxnMarkersResponse>(
        &security,
        &addr,
        &client,
        &frame,
        ApiKey::WriteTxnMarkers,
        1,
        1,
        MARKER_RESPONSE_BYTES_MAX,
    );
    let timeout =
        Duration::from_millis(shard.config.offsets_commit_timeout_ms) + Duration::from_secs(5);
    let resp = match glommio::timer::timeout(timeout, async {
        answer
            .await
            .map_err(|e| glommio::GlommioError::IoError(std::io::Error::other(e)))
    })
    .await
    {
        Ok(r) => r,
        Err(e) => {
            warn!(leader, %addr, error = %e, "WriteTxnMarkers failed");
            return every(ErrorCode::BROKER_NOT_AVAILABLE);
        }
    };
    markers
        .iter()
        .map(|m| {
            let code = resp
                .markers
                .iter()
                .flat_map(|r| r.topics.iter())
                .filter(|t| t.name.0.as_str() == m.topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == m.partition)
                .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |p| ErrorCode(p.error_code));
            (m.clone(), code)
        })
        .collect()
}

/// The largest WriteTxnMarkers response read: a few bytes per partition.
const MARKER_RESPONSE_BYTES_MAX: usize = 1 << 20;

/// Writes one marker through the shard owning its partition, which this node must lead
/// (NOT_LEADER_OR_FOLLOWER otherwise; none is needed for a partition that no longer exists):
/// a coordinator's own partitions, and WriteTxnMarkers from another broker's coordinator.
pub async fn write_here(shard: &Rc<Shard>, marker: &Marker) -> ErrorCode {
    // A marker closes a producer's transaction: without a producer there is none to close.
    if marker.producer_id.0 < 0 {
        return ErrorCode::INVALID_REQUEST;
    }
    let catalog = shard.catalog();
    let Some(placed) = catalog.partition(&marker.topic, marker.partition) else {
        return ErrorCode::NONE;
    };
    if placed.leader != shard.config.node_id {
        return ErrorCode::NOT_LEADER_OR_FOLLOWER;
    }
    let owner = shard.owner(&marker.topic, marker.partition);
    let m = marker.clone();
    invoke_on(
        shard,
        owner,
        move |s| async move { write_local(&s, &m).await },
    )
    .await
    .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
}

/// On the shard owning the partition: appends the marker and, on a replicated partition, waits
/// until the ISR holds it (Kafka writes markers with acks=all).
async fn write_local(shard: &Rc<Shard>, marker: &Marker) -> ErrorCode {
    let Some(part) = shard.partition(&marker.topic, marker.partition) else {
        return ErrorCode::NOT_LEADER_OR_FOLLOWER;
    };
    let epoch = shard.leader_epoch_of(&marker.topic, marker.partition);
    if part.is_replicated() && epoch.is_none() {
        return ErrorCode::NOT_LEADER_OR_FOLLOWER;
    }
    let appended = part
        .append_marker(
            marker.producer_id.0,
            marker.producer_epoch.0,
            marker.commit,
            marker.coordinator_epoch,
        )
        .await;
    let end = match appended {
        Ok(out) => out.last_offset + 1,
        // A fenced producer or coordinator epoch is the sender's to hear about, not a storage
        // failure.
        Err(e @ tributary_storage::PartitionError::Sequence(_)) => {
            return crate::shard::partition_error_code(&e);
        }
        Err(e) => {
            warn!(topic = %marker.topic, partition = marker.partition, error = %e, "appending a transaction marker failed");
            return crate::shard::partition_error_code(&e);
        }
    };
    if let Err(e) = part.sync_to(end).await {
        warn!(topic = %marker.topic, partition = marker.partition, error = %e, "syncing a transaction marker failed");
        return ErrorCode::KAFKA_STORAGE_ERROR;
    }
    if let Some(epoch) = epoch {
        let timeout = Duration::from_millis(shard.config.offsets_commit_timeout_ms);
        if let Err(e) = shard
            .wait_replicated(&part, &marker.topic, marker.partition, end, epoch, timeout)
            .await
        {
            return e;
        }
    }
    if marker.topic == tributary_metadata::internal_topics::OFFSETS_TOPIC {
        shard
            .groups
            .end_txn_offsets(marker.producer_id, marker.commit);
    }
    ErrorCode::NONE
}
