//! The operations a coordinator runs on the shard that owns its internal partition: a group's
//! (`__consumer_offsets`) and a transactional id's (`__transaction_state`). The handlers of the
//! group and transaction APIs send them there (`ask_group`, `ask_txn`: closures the shard runs) and
//! turn the replies into responses; the shard runs them here, against its coordinators.

use std::rc::Rc;

use tracing::warn;
use tributary_metadata::types::{ProducerEpoch, ProducerId, TopicPartition};
use tributary_protocol::requests::groups::*;
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

use crate::group::consumer::{Caller, HeartbeatAnswer, Refusal, TopicsImage};
use crate::group::state::{JoinResult, SyncResult};
use crate::group::{CommitFrom, OFFSETS_TOPIC};
use crate::group::{DescribedConsumerGroup, ListedGroup};
use crate::group::{DescribedGroup as Described, MemberResults, TopicResults};
use crate::routing::ShardId;
use crate::shard::{invoke_on, Shard};
use crate::txn::TXN_TOPIC;
use tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest;

/// A group operation, sent to the group's coordinator shard.
pub enum GroupOp {
    Join {
        req: JoinGroupRequest,
        version: i16,
        client_id: String,
        client_host: String,
    },
    Sync(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    Leave(LeaveGroupRequest),
    /// OffsetCommit at its version.
    Commit {
        req: OffsetCommitRequest,
        version: i16,
    },
    /// TxnOffsetCommit: offsets in the transaction of producer (id, epoch).
    TxnCommit {
        req: OffsetCommitRequest,
        producer: (ProducerId, ProducerEpoch),
    },
    Fetch(OffsetFetchGroup),
    Describe(String),
    List,
    Delete(String),
    OffsetDelete(OffsetDeleteRequest),
    /// KIP-848's ConsumerGroupHeartbeat.
    ConsumerHeartbeat {
        req: ConsumerGroupHeartbeatRequest,
        caller: Caller,
    },
    ConsumerDescribe(String),
}

pub enum GroupReply {
    Join(JoinResult),
    Sync(SyncResult),
    Code(ErrorCode),
    Leave(ErrorCode, MemberResults),
    Commit(TopicResults<ErrorCode>),
    /// The group's error, its offsets, and the partitions whose offsets a transaction holds
    /// (UNSTABLE_OFFSET_COMMIT when the request requires stable offsets).
    Fetch(
        ErrorCode,
        TopicResults<(i64, i32, String)>,
        Vec<TopicPartition>,
    ),
    Describe(Described),
    List(Vec<ListedGroup>),
    OffsetDelete(ErrorCode, TopicResults<ErrorCode>),
    ConsumerHeartbeat(Result<HeartbeatAnswer, Refusal>),
    ConsumerDescribe(Option<DescribedConsumerGroup>),
}

impl GroupOp {
    /// The group the operation is about; `None` for List, which is about every group.
    pub fn group_id(&self) -> Option<&str> {
        match self {
            GroupOp::Join { req, .. } => Some(&req.group_id),
            GroupOp::Sync(r) => Some(&r.group_id),
            GroupOp::Heartbeat(r) => Some(&r.group_id),
            GroupOp::Leave(r) => Some(&r.group_id),
            GroupOp::Commit { req: r, .. } | GroupOp::TxnCommit { req: r, .. } => Some(&r.group_id),
            GroupOp::Fetch(r) => Some(&r.group_id),
            GroupOp::Describe(id) | GroupOp::Delete(id) => Some(id),
            GroupOp::OffsetDelete(r) => Some(&r.group_id),
            GroupOp::ConsumerHeartbeat { req, .. } => Some(&req.group_id),
            GroupOp::ConsumerDescribe(id) => Some(id),
            GroupOp::List => None,
        }
    }
}

/// Runs group operation `op` on shard `to` and awaits its reply; `None` when that shard is
/// gone.
pub async fn ask_group(shard: &Rc<Shard>, to: ShardId, op: GroupOp) -> Option<GroupReply> {
    if let Some(group) = op.group_id() {
        ensure_offsets_topic(shard, group).await;
    }
    invoke_on(shard, to, move |s| async move { run_group(&s, op).await }).await
}

/// How long a request that found no `__consumer_offsets` waits for it to be created and for
/// its group's coordinator to be loaded.
const OFFSETS_TOPIC_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `__consumer_offsets` is created when a client first needs a group coordinator, as in
/// Kafka (not at start-up). Returns at once while it exists; after asking for it, once the
/// coordinator of `group` is ready — loaded by its shard here, or led by another broker — or
/// after [`OFFSETS_TOPIC_WAIT`] (the request then answers as it finds things: a client
/// retries COORDINATOR_NOT_AVAILABLE).
pub async fn ensure_offsets_topic(shard: &Rc<Shard>, group: &str) {
    if shard.catalog().topics.contains_key(OFFSETS_TOPIC) {
        return;
    }
    let created = crate::controller::ask(shard, |s, c| async move {
        c.create_offsets_topic(&s.config).await
    })
    .await
    .unwrap_or(false);
    let deadline = std::time::Instant::now() + OFFSETS_TOPIC_WAIT;
    while created && std::time::Instant::now() < deadline {
        if coordinator_ready(shard, group).await {
            return;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Whether `group`'s coordinator can answer: its `__consumer_offsets` partition has a leader,
/// and when it is this node, the owning shard has loaded it.
async fn coordinator_ready(shard: &Rc<Shard>, group: &str) -> bool {
    let catalog = shard.catalog();
    let p = shard.groups.group_partition(group);
    let Some(leader) = catalog.partition(OFFSETS_TOPIC, p).map(|r| r.leader) else {
        return false;
    };
    if leader != shard.config.node_id {
        return leader >= 0;
    }
    let group = group.to_string();
    invoke_on(shard, shard.group_owner(&group), move |s| async move {
        s.group_log(&group).is_some()
    })
    .await
    .unwrap_or(false)
}

/// Runs transaction operation `op` on shard `to` and awaits its reply; `None` when that shard
/// is gone.
pub async fn ask_txn(shard: &Rc<Shard>, to: ShardId, op: TxnOp) -> Option<TxnReply> {
    invoke_on(shard, to, move |s| async move { run_txn(&s, op).await }).await
}

/// Runs one operation on the coordinator shard.
async fn run_group(shard: &Rc<Shard>, op: GroupOp) -> GroupReply {
    let Some(group) = op.group_id() else {
        // List is about no one group: it answers with every group this shard holds.
        return GroupReply::List(shard.groups.list());
    };
    match group_coordinator(shard, group) {
        Ok(log) => run_group_op(shard, &log, op).await,
        Err(gone) => group_unavailable(op, gone),
    }
}

/// The `__consumer_offsets` partition holding `group`, when this shard owns and has loaded
/// it; else the error the client gets ([`coordinator_gone`]).
fn group_coordinator(shard: &Shard, group: &str) -> Result<Rc<Partition>, ErrorCode> {
    match shard.group_log(group) {
        Some(log) => Ok(log),
        None => Err(coordinator_gone(
            shard,
            OFFSETS_TOPIC,
            shard.groups.group_partition(group),
        )),
    }
}

/// The error for an operation whose coordinator partition (`partition` of the internal topic
/// `topic`) this shard has not loaded: NOT_COORDINATOR when another broker leads it, else
/// COORDINATOR_NOT_AVAILABLE (no leader yet, or this node leads it and is still loading it).
fn coordinator_gone(shard: &Shard, topic: &str, partition: i32) -> ErrorCode {
    // Another broker leads the partition: the client asks FindCoordinator again.
    let moved = shard
        .catalog()
        .partition(topic, partition)
        .is_some_and(|r| r.leader >= 0 && r.leader != shard.config.node_id);
    if moved {
        ErrorCode::NOT_COORDINATOR
    } else {
        ErrorCode::COORDINATOR_NOT_AVAILABLE
    }
}

/// The reply to `op` when this shard does not coordinate its group, carrying `gone`.
fn group_unavailable(op: GroupOp, gone: ErrorCode) -> GroupReply {
    match op {
        GroupOp::Join { req, .. } => GroupReply::Join(JoinResult::error(gone, &req.member_id)),
        GroupOp::Sync(_) => GroupReply::Sync(SyncResult::error(gone)),
        GroupOp::Leave(_) => GroupReply::Leave(gone, Vec::new()),
        GroupOp::Fetch(_) => GroupReply::Fetch(gone, Vec::new(), Vec::new()),
        GroupOp::OffsetDelete(_) => GroupReply::OffsetDelete(gone, Vec::new()),
        GroupOp::ConsumerHeartbeat { .. } => GroupReply::ConsumerHeartbeat(Err(Refusal {
            code: gone,
            message: "this broker does not coordinate the group now".into(),
        })),
        _ => GroupReply::Code(gone),
    }
}

/// Runs `op` against this shard's group coordinator, whose group lives in `log`.
async fn run_group_op(shard: &Rc<Shard>, log: &Rc<Partition>, op: GroupOp) -> GroupReply {
    let g = &shard.groups;
    match op {
        // `run_group` answers List before it looks for a coordinator; the same answer here.
        GroupOp::List => GroupReply::List(g.list()),
        op @ (GroupOp::Join { .. }
        | GroupOp::Sync(_)
        | GroupOp::Heartbeat(_)
        | GroupOp::Leave(_)) => run_membership_op(shard, log, op).await,
        GroupOp::Commit { req, version } => {
            let from = CommitFrom::OffsetCommit { version };
            GroupReply::Commit(g.commit(log, req, from).await)
        }
        GroupOp::TxnCommit { req, producer } => {
            let from = CommitFrom::Txn(producer.0, producer.1);
            GroupReply::Commit(g.commit(log, req, from).await)
        }
        GroupOp::Fetch(req) => fetch_reply(g, &req),
        GroupOp::ConsumerHeartbeat { req, caller } => {
            GroupReply::ConsumerHeartbeat(consumer_heartbeat(shard, log, req, caller).await)
        }
        GroupOp::ConsumerDescribe(id) => {
            GroupReply::ConsumerDescribe(g.describe_consumer_group(&id))
        }
        GroupOp::Describe(id) => GroupReply::Describe(g.describe(&id)),
        GroupOp::Delete(id) => GroupReply::Code(g.delete_group(log, &id).await),
        GroupOp::OffsetDelete(req) => {
            let (code, topics) = g.delete_offsets(log, req).await;
            GroupReply::OffsetDelete(code, topics)
        }
    }
}

/// JoinGroup, SyncGroup, Heartbeat and LeaveGroup: to the classic group, or to the consumer
/// group that holds the id (its classic members; see `group::migration`).
async fn run_membership_op(shard: &Rc<Shard>, log: &Rc<Partition>, op: GroupOp) -> GroupReply {
    let g = &shard.groups;
    match op {
        GroupOp::Join {
            req,
            version,
            client_id,
            client_host,
        } if g.consumer_group_has_members(&req.group_id) => {
            let caller = (version, client_id, client_host);
            GroupReply::Join(join_consumer_group(shard, log, req, caller).await)
        }
        GroupOp::Join {
            req,
            version,
            client_id,
            client_host,
        } => {
            let member = req.member_id.clone();
            match g.join(req, version, client_id, client_host) {
                Err(e) => GroupReply::Join(*e),
                Ok(rx) => GroupReply::Join(rx.await.unwrap_or_else(|_| {
                    JoinResult::error(ErrorCode::REBALANCE_IN_PROGRESS, &member)
                })),
            }
        }
        GroupOp::Sync(req) if g.is_consumer_group(&req.group_id) => {
            let topics = subscribable_topics(&shard.catalog());
            GroupReply::Sync(g.sync_consumer_group(&req, &topics))
        }
        GroupOp::Sync(req) => {
            let group_id = req.group_id.clone();
            match g.sync(req) {
                Err(e) => GroupReply::Sync(e),
                Ok((rx, completed)) => {
                    if completed {
                        let _ = g.persist_group(log, &group_id).await;
                    }
                    GroupReply::Sync(
                        rx.await.unwrap_or_else(|_| {
                            SyncResult::error(ErrorCode::REBALANCE_IN_PROGRESS)
                        }),
                    )
                }
            }
        }
        GroupOp::Heartbeat(req) if g.is_consumer_group(&req.group_id) => {
            GroupReply::Code(g.heartbeat_consumer_group(&req))
        }
        GroupOp::Heartbeat(req) => GroupReply::Code(g.heartbeat(req)),
        GroupOp::Leave(req) if g.is_consumer_group(&req.group_id) => {
            let (code, members) = g.leave_consumer_group(&req);
            match g.persist_consumer(log, &req.group_id).await {
                Ok(()) => GroupReply::Leave(code, members),
                Err(e) => GroupReply::Leave(write_refusal(e), Vec::new()),
            }
        }
        GroupOp::Leave(req) => {
            let group_id = req.group_id.clone();
            let (code, members, emptied) = g.leave(req);
            if emptied {
                let _ = g.persist_group(log, &group_id).await;
            }
            GroupReply::Leave(code, members)
        }
        _ => unreachable!("run_group_op sends only membership operations here"),
    }
}

/// OffsetFetch's answer: the offsets, which of them a transaction holds (when stable offsets
/// are required), or the group's refusal of the member's epoch.
fn fetch_reply(g: &crate::group::GroupCoordinator, req: &OffsetFetchGroup) -> GroupReply {
    let offsets = g.fetch_offsets(req);
    let unstable = if req.require_stable {
        offsets
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |(p, _)| TopicPartition::new(t, *p)))
            .filter(|tp| g.has_pending_offset(&req.group_id, tp))
            .collect()
    } else {
        Vec::new()
    };
    match fetch_refusal(g, req) {
        Some(code) => GroupReply::Fetch(code, Vec::new(), Vec::new()),
        None => GroupReply::Fetch(ErrorCode::NONE, offsets, unstable),
    }
}

/// An OffsetFetch v9+ from a consumer group's member at an epoch the group does not hold: the
/// group's error. A fetch without a member (null id, epoch -1) is always answered.
fn fetch_refusal(g: &crate::group::GroupCoordinator, req: &OffsetFetchGroup) -> Option<ErrorCode> {
    let member = req.member_id.as_deref().unwrap_or("");
    if member.is_empty() && req.member_epoch < 0 {
        return None;
    }
    g.consumer_offset_check(&req.group_id, member, req.member_epoch)?
        .err()
}

/// A ConsumerGroupHeartbeat, answered once what it changed is durable, as in Kafka.
async fn consumer_heartbeat(
    shard: &Rc<Shard>,
    log: &Rc<Partition>,
    req: ConsumerGroupHeartbeatRequest,
    caller: Caller,
) -> Result<HeartbeatAnswer, Refusal> {
    let g = &shard.groups;
    let catalog = shard.catalog();
    let topics = subscribable_topics(&catalog);
    let own = catalog.group_configs.get(&req.group_id);
    // A refused heartbeat changed nothing.
    let answer = g.consumer_heartbeat(&req, &caller, &topics, own)?;
    // The group's type may have changed (an upgrade, or a downgrade by this leave).
    match g.persist_group(log, &req.group_id).await {
        Err(code) => Err(Refusal {
            code: write_refusal(code),
            message: format!("the group's state could not be written (error {})", code.0),
        }),
        Ok(()) => Ok(answer),
    }
}

/// A classic JoinGroup to a consumer group with members, answered once what it changed is
/// durable.
async fn join_consumer_group(
    shard: &Rc<Shard>,
    log: &Rc<Partition>,
    req: JoinGroupRequest,
    caller: (i16, String, String),
) -> JoinResult {
    let g = &shard.groups;
    let topics = subscribable_topics(&shard.catalog());
    let answer = g.join_consumer_group(&req, caller, &topics);
    if answer.error.is_error() {
        return answer;
    }
    match g.persist_consumer(log, &req.group_id).await {
        Ok(()) => answer,
        Err(code) => JoinResult::error(write_refusal(code), &answer.member_id),
    }
}

/// What a member is told when the coordinator could not write its group's state: to find the
/// coordinator again when this broker no longer leads the partition, else to retry.
fn write_refusal(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::NOT_LEADER_OR_FOLLOWER | ErrorCode::NOT_COORDINATOR => {
            ErrorCode::NOT_COORDINATOR
        }
        _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
    }
}

/// The topics a consumer group may subscribe to: every topic of the image but the internal
/// ones, with its id and partition count.
pub fn subscribable_topics(catalog: &crate::catalog::Catalog) -> TopicsImage {
    catalog
        .topics
        .values()
        .filter(|t| !crate::group::is_internal(&t.name))
        .map(|t| (t.name.clone(), (t.uuid().into_bytes(), t.partitions)))
        .collect()
}

/// How long EndTxn waits for its markers before answering anyway.
const END_TXN_MARKER_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// An operation on the shard coordinating a transactional id.
pub enum TxnOp {
    Init {
        id: String,
        timeout_ms: i32,
        given: (ProducerId, ProducerEpoch),
    },
    AddPartitions {
        id: String,
        producer: (ProducerId, ProducerEpoch),
        partitions: Vec<TopicPartition>,
    },
    End {
        id: String,
        producer: (ProducerId, ProducerEpoch),
        commit: bool,
    },
    /// KIP-890: is the partition in the id's ongoing transaction at this producer?
    Verify {
        id: String,
        producer: (ProducerId, ProducerEpoch),
        partition: TopicPartition,
    },
    /// DescribeTransactions, for one id.
    Describe(String),
    /// ListTransactions: every id this shard coordinates.
    List,
    /// DescribeProducers: the producers of a partition this shard owns.
    Producers { topic: String, partition: i32 },
}

impl TxnOp {
    pub fn id(&self) -> &str {
        match self {
            TxnOp::Init { id, .. }
            | TxnOp::AddPartitions { id, .. }
            | TxnOp::End { id, .. }
            | TxnOp::Verify { id, .. }
            | TxnOp::Describe(id) => id,
            TxnOp::List | TxnOp::Producers { .. } => "",
        }
    }
}

pub enum TxnReply {
    Init(Result<(ProducerId, ProducerEpoch), ErrorCode>),
    Code(ErrorCode),
    Described(Result<crate::txn::state::TxnMeta, ErrorCode>),
    Listed(Vec<crate::txn::state::TxnMeta>),
    Producers(Result<Vec<tributary_storage::producer_state::ProducerSummary>, ErrorCode>),
}

/// Runs one operation on the coordinator shard (DescribeProducers: on the partition's).
async fn run_txn(shard: &Rc<Shard>, op: TxnOp) -> TxnReply {
    match op {
        TxnOp::List => return TxnReply::Listed(shard.txns.list()),
        TxnOp::Producers { topic, partition } => {
            return TxnReply::Producers(partition_producers(shard, &topic, partition));
        }
        _ => {}
    }
    let id = op.id().to_string();
    let Some(log) = shard.txn_log(&id) else {
        let code = coordinator_gone(shard, TXN_TOPIC, shard.txns.partition_of(&id));
        return match op {
            TxnOp::Init { .. } => TxnReply::Init(Err(code)),
            TxnOp::Describe(_) => TxnReply::Described(Err(code)),
            _ => TxnReply::Code(code),
        };
    };
    run_txn_op(shard, &log, op).await
}

/// DescribeProducers: the producers of `partition` of `topic`, when this broker leads it and
/// this shard holds it; else NOT_LEADER_OR_FOLLOWER.
fn partition_producers(
    shard: &Shard,
    topic: &str,
    partition: i32,
) -> Result<Vec<tributary_storage::producer_state::ProducerSummary>, ErrorCode> {
    let led = shard
        .catalog()
        .partition(topic, partition)
        .is_some_and(|r| r.leader == shard.config.node_id);
    match shard.partition(topic, partition) {
        Some(part) if led => Ok(part.producers()),
        _ => Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
    }
}

/// Runs `op` against this shard's transaction coordinator, whose id lives in `log`.
async fn run_txn_op(shard: &Rc<Shard>, log: &Rc<Partition>, op: TxnOp) -> TxnReply {
    let t = &shard.txns;
    match op {
        TxnOp::Init {
            id,
            timeout_ms,
            given,
        } => init_producer_id(shard, log, &id, timeout_ms, given).await,
        TxnOp::AddPartitions {
            id,
            producer,
            partitions,
        } => TxnReply::Code(
            t.add_partitions(log, &id, producer, &partitions)
                .await
                .err()
                .unwrap_or(ErrorCode::NONE),
        ),
        TxnOp::End {
            id,
            producer,
            commit,
        } => end_txn(shard, log, &id, producer, commit).await,
        TxnOp::Verify {
            id,
            producer,
            partition,
        } => TxnReply::Code(t.verify(&id, producer, &partition)),
        TxnOp::Describe(id) => {
            TxnReply::Described(t.describe(&id).ok_or(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND))
        }
        TxnOp::List | TxnOp::Producers { .. } => TxnReply::Code(ErrorCode::NONE),
    }
}

/// InitProducerId for transactional id `id`: a new producer id comes from the controller
/// (through shard 0) when the id needs one. When an older producer instance left a transaction
/// open, the coordinator aborts it and answers CONCURRENT_TRANSACTIONS; the abort's markers are
/// written in the background.
async fn init_producer_id(
    shard: &Rc<Shard>,
    log: &Rc<Partition>,
    id: &str,
    timeout_ms: i32,
    given: (ProducerId, ProducerEpoch),
) -> TxnReply {
    // Boxed: a shard call from inside a shard request handler would make the handler's
    // future recursive.
    let allocate = || -> std::pin::Pin<Box<dyn std::future::Future<Output = _> + '_>> {
        Box::pin(async move {
            let allocated =
                crate::controller::ask(shard, |_, c| async move { c.allocate_producer_id().await });
            match allocated.await {
                Some(Ok(pid)) => Ok(ProducerId(pid)),
                Some(Err(e)) => {
                    warn!(error = %e, "producer id allocation failed");
                    Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
                }
                None => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            }
        })
    };
    match shard
        .txns
        .init_producer_id(log, id, timeout_ms, given, allocate)
        .await
    {
        Ok(p) => TxnReply::Init(Ok(p)),
        Err((code, aborting)) => {
            if let Some(prepared) = aborting {
                glommio::spawn_local(crate::txn::markers::finish(shard.clone(), prepared)).detach();
            }
            TxnReply::Init(Err(code))
        }
    }
}

/// EndTxn: prepares the commit or abort of the id's transaction and writes its markers in the
/// background, answering once they are written or after [`END_TXN_MARKER_WAIT`], whichever
/// comes first. A retry of a completed EndTxn has no markers left to write.
async fn end_txn(
    shard: &Rc<Shard>,
    log: &Rc<Partition>,
    id: &str,
    producer: (ProducerId, ProducerEpoch),
    commit: bool,
) -> TxnReply {
    match shard.txns.end_txn(log, id, producer, commit).await {
        Ok(Some(prepared)) => {
            // Kafka answers once the transaction is prepared and the producer's next
            // transaction waits (CONCURRENT_TRANSACTIONS, and a client backoff) until the
            // markers are written. Waiting a moment for them here saves that backoff when
            // they are quick; slow ones carry on in the background.
            let markers =
                glommio::spawn_local(crate::txn::markers::finish(shard.clone(), prepared)).detach();
            futures_lite::future::or(
                async {
                    let _ = markers.await;
                },
                glommio::timer::sleep(END_TXN_MARKER_WAIT),
            )
            .await;
            TxnReply::Code(ErrorCode::NONE)
        }
        Ok(None) => TxnReply::Code(ErrorCode::NONE),
        Err(e) => TxnReply::Code(e),
    }
}
