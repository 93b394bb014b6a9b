//! Consumer-group APIs. Each request is decoded on the connection's shard, sent as a `GroupOp`
//! to the shard that owns the group's `__consumer_offsets` partition (its coordinator), run there
//! by [`run`], and the `GroupReply` encoded back here. One module for the eleven group APIs: they
//! share the routing and the reply type.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use kafka_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsResponse, GroupId, HeartbeatResponse, SyncGroupResponse,
};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::groups::*;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::catalog::Catalog;
use crate::coordinators::{ask_group, GroupOp, GroupReply};
use crate::group::state::{JoinResult, SyncResult};
use crate::group::{CommitFrom, OFFSETS_TOPIC};
use crate::group::{DescribedGroup as Described, TopicResults};
use crate::routing::ShardId;
use crate::shard::Shard;

async fn ask(shard: &Rc<Shard>, group: &str, op: GroupOp) -> Option<GroupReply> {
    let owner = shard.group_owner(group);
    ask_group(shard, owner, op).await
}

/// What a client without READ on its group is told: joining, syncing, heartbeating and leaving
/// need it, as in Kafka.
const GROUP_DENIED: ErrorCode = ErrorCode::GROUP_AUTHORIZATION_FAILED;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    match spec.key {
        api_key::FIND_COORDINATOR => find_coordinator(shard, spec, header, r, conn).await,
        api_key::JOIN_GROUP => join_group(shard, spec, header, r, conn).await,
        api_key::SYNC_GROUP => sync_group(shard, spec, header, r, conn).await,
        api_key::HEARTBEAT => heartbeat(shard, spec, header, r, conn).await,
        api_key::LEAVE_GROUP => leave_group(shard, spec, header, r, conn).await,
        _ => admin::handle(shard, spec, header, r, conn).await,
    }
}

async fn join_group(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let peer = conn.peer;
    let denied = |g: &str| !shard.allowed(conn, AclOperation::Read, ResourceType::Group, g);
    let req = decode_all(r, |r| decode_join_group(r, v))?;
    let group = req.group_id.clone();
    let op = GroupOp::Join {
        req,
        version: v,
        client_id: header.client_id.clone().unwrap_or_default(),
        client_host: format!("/{peer}"),
    };
    let res = match denied(&group) {
        true => JoinResult::error(GROUP_DENIED, ""),
        false => match ask(shard, &group, op).await {
            Some(GroupReply::Join(j)) => j,
            _ => JoinResult::error(ErrorCode::COORDINATOR_NOT_AVAILABLE, ""),
        },
    };
    let mut resp = JoinGroupResponse::default()
        .with_error_code(res.error.code())
        .with_generation_id(res.generation_id)
        .with_protocol_name(Some(str_bytes(res.protocol_name.as_deref().unwrap_or(""))))
        .with_leader(str_bytes(&res.leader))
        .with_member_id(str_bytes(&res.member_id))
        .with_members(
            res.members
                .iter()
                .map(|(id, instance, md)| {
                    let m = JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(id))
                        .with_metadata(md.clone());
                    if v >= 5 {
                        m.with_group_instance_id(instance.as_deref().map(str_bytes))
                    } else {
                        m
                    }
                })
                .collect(),
        );
    if v >= 7 {
        resp = resp.with_protocol_type(res.protocol_type.as_deref().map(str_bytes));
        if res.error.is_error() {
            resp = resp.with_protocol_name(None);
        }
    }
    frame(spec, header, &resp)
}

async fn sync_group(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let denied = |g: &str| !shard.allowed(conn, AclOperation::Read, ResourceType::Group, g);
    let req = decode_all(r, |r| decode_sync_group(r, v))?;
    let group = req.group_id.clone();
    let res = match denied(&group) {
        true => SyncResult::error(GROUP_DENIED),
        false => match ask(shard, &group, GroupOp::Sync(req)).await {
            Some(GroupReply::Sync(s)) => s,
            _ => SyncResult::error(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        },
    };
    let mut resp = SyncGroupResponse::default()
        .with_error_code(res.error.code())
        .with_assignment(res.assignment);
    if v >= 5 {
        resp = resp
            .with_protocol_type(res.protocol_type.as_deref().map(str_bytes))
            .with_protocol_name(res.protocol_name.as_deref().map(str_bytes));
    }
    frame(spec, header, &resp)
}

async fn heartbeat(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let denied = |g: &str| !shard.allowed(conn, AclOperation::Read, ResourceType::Group, g);
    let req = decode_all(r, |r| decode_heartbeat(r, v))?;
    let group = req.group_id.clone();
    let code = match denied(&group) {
        true => GROUP_DENIED,
        false => match ask(shard, &group, GroupOp::Heartbeat(req)).await {
            Some(GroupReply::Code(c)) => c,
            _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
        },
    };
    frame(
        spec,
        header,
        &HeartbeatResponse::default().with_error_code(code.code()),
    )
}

async fn leave_group(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let denied = |g: &str| !shard.allowed(conn, AclOperation::Read, ResourceType::Group, g);
    let req = decode_all(r, |r| decode_leave_group(r, v))?;
    let group = req.group_id.clone();
    let (code, members) = match denied(&group) {
        true => (GROUP_DENIED, Vec::new()),
        false => match ask(shard, &group, GroupOp::Leave(req)).await {
            Some(GroupReply::Leave(c, m)) => (c, m),
            _ => (ErrorCode::COORDINATOR_NOT_AVAILABLE, Vec::new()),
        },
    };
    let mut resp = LeaveGroupResponse::default().with_error_code(code.code());
    if v >= 3 {
        resp = resp
            .with_error_code(
                if code == ErrorCode::COORDINATOR_NOT_AVAILABLE || code == GROUP_DENIED {
                    code.code()
                } else {
                    0
                },
            )
            .with_members(
                members
                    .into_iter()
                    .map(|(id, instance, c)| {
                        MemberResponse::default()
                            .with_member_id(str_bytes(&id))
                            .with_group_instance_id(instance.as_deref().map(str_bytes))
                            .with_error_code(c.code())
                    })
                    .collect(),
            );
    }
    frame(spec, header, &resp)
}

/// FindCoordinator key types (KIP-98).
const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

/// FindCoordinator: for each key (the one key before v4), the broker that coordinates its group
/// or transactional id, or why none is named.
async fn find_coordinator(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| decode_find_coordinator(r, v))?;
    if req.key_type == KEY_TRANSACTION {
        // Kafka creates `__transaction_state` at the first transactional request.
        super::txn::ensure_txn_topic(shard).await;
    } else if let Some(group) = req.keys.iter().find(|k| !k.is_empty()) {
        // ... and `__consumer_offsets` at the first FindCoordinator for a group.
        crate::coordinators::ensure_offsets_topic(shard, group).await;
    }
    // A coordinator seen dying is not named; the answer waits a moment for its successor
    // rather than "not available", as Metadata does.
    let me = shard.config.node_id;
    let catalog = super::common::past_doubted_leaders(shard, |catalog, doubted| {
        req.keys.iter().any(|key| {
            let (topic, p) = coordinator_partition(shard, req.key_type, key);
            catalog.partition(topic, p).is_some_and(|r| {
                super::metadata::answered_leader(r.leader, me, doubted) != r.leader
            })
        })
    })
    .await;
    let doubted = shard.doubts.doubted(std::time::Instant::now());
    let coordinator = |key: &str| -> Found {
        if let Some(refused) = key_refusal(shard, conn, req.key_type, key) {
            return Err(refused);
        }
        coordinator_of(shard, &catalog, &doubted, conn.listener, req.key_type, key)
    };
    if v >= 4 {
        let coordinators = req
            .keys
            .iter()
            .map(|k| coordinator_entry(k, coordinator(k)))
            .collect();
        return frame(
            spec,
            header,
            &FindCoordinatorResponse::default().with_coordinators(coordinators),
        );
    }
    let found = coordinator(req.keys.first().map_or("", |k| k.as_str()));
    frame(spec, header, &single_coordinator_response(v, found))
}

/// A key's coordinator as FindCoordinator answers it: its node id, host and port, or the error
/// and message it is answered with instead.
type Found =
    Result<(BrokerId, kafka_protocol::protocol::StrBytes, i32), (ErrorCode, Option<String>)>;

/// Why a key is answered with an error before its coordinator is looked up, in Kafka's order:
/// no DESCRIBE on the group or the transactional id, a key type that is neither, an empty
/// group id.
fn key_refusal(
    shard: &Shard,
    conn: crate::conn::Conn<'_>,
    key_type: i8,
    key: &str,
) -> Option<(ErrorCode, Option<String>)> {
    let txn = key_type == KEY_TRANSACTION;
    // DESCRIBE on the group or the transactional id, as in Kafka.
    let rt = if txn {
        ResourceType::TransactionalId
    } else {
        ResourceType::Group
    };
    let denied =
        (key_type == KEY_GROUP || txn) && !shard.allowed(conn, AclOperation::Describe, rt, key);
    if denied {
        Some((
            if txn {
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            } else {
                ErrorCode::GROUP_AUTHORIZATION_FAILED
            },
            None,
        ))
    } else if key_type != KEY_GROUP && !txn {
        Some((
            ErrorCode::INVALID_REQUEST,
            Some(format!("unknown coordinator key type {key_type}")),
        ))
    } else if key.is_empty() && !txn {
        Some((
            ErrorCode::INVALID_GROUP_ID,
            Some("the group id is empty".into()),
        ))
    } else {
        None
    }
}

/// The partition whose leader coordinates `key`: its `__consumer_offsets` partition (a group)
/// or `__transaction_state` partition (a transactional id).
fn coordinator_partition(shard: &Shard, key_type: i8, key: &str) -> (&'static str, i32) {
    if key_type == KEY_TRANSACTION {
        (crate::txn::TXN_TOPIC, shard.txns.partition_of(key))
    } else {
        (OFFSETS_TOPIC, shard.groups.group_partition(key))
    }
}

/// The coordinator of `key` as this node names it: the live, unfenced leader of the key's
/// partition, at its endpoint on `listener`; COORDINATOR_NOT_AVAILABLE while there is none.
fn coordinator_of(
    shard: &Shard,
    catalog: &Catalog,
    doubted: &[i32],
    listener: &str,
    key_type: i8,
    key: &str,
) -> Found {
    let (topic, p) = coordinator_partition(shard, key_type, key);
    // A leader this node doubts is not named, as in Metadata: the client asks again.
    catalog
        .partition(topic, p)
        .map(|r| super::metadata::answered_leader(r.leader, shard.config.node_id, doubted))
        .and_then(|leader| catalog.brokers.get(&leader))
        .filter(|b| !b.fenced)
        .and_then(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some((BrokerId(b.id), str_bytes(host), i32::from(port)))
        })
        .ok_or((
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            Some(format!("{topic} partition {p} has no live leader yet")),
        ))
}

/// A v4+ answer for `key`: its coordinator, or its error with node -1, no host and port -1.
fn coordinator_entry(key: &str, found: Found) -> Coordinator {
    match found {
        Ok((node, host, port)) => Coordinator::default()
            .with_key(str_bytes(key))
            .with_node_id(node)
            .with_host(host)
            .with_port(port),
        Err((code, msg)) => Coordinator::default()
            .with_key(str_bytes(key))
            .with_node_id(BrokerId(-1))
            .with_host(str_bytes(""))
            .with_port(-1)
            .with_error_code(code.code())
            .with_error_message(msg.as_deref().map(str_bytes)),
    }
}

/// A v0–v3 response, for the request's one key: its coordinator, or its error with node -1
/// and port -1. From v1 it carries the error message, null when there is no error.
fn single_coordinator_response(v: i16, found: Found) -> FindCoordinatorResponse {
    let mut resp = match found {
        Ok((node, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(node)
            .with_host(host)
            .with_port(port),
        Err((code, msg)) => {
            let r = FindCoordinatorResponse::default()
                .with_error_code(code.code())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            if v >= 1 {
                r.with_error_message(msg.as_deref().map(str_bytes))
            } else {
                r
            }
        }
    };
    if v >= 1 && resp.error_code == 0 {
        resp = resp.with_error_message(None);
    }
    resp
}

/// Marks, in an OffsetFetch answer, a partition whose offset a transaction holds.
const UNSTABLE_OFFSET: i64 = -2;
/// Marks, in an OffsetFetch answer, a partition of a topic the principal may not DESCRIBE.
const TOPIC_DENIED_OFFSET: i64 = -3;

/// A partition's error in an OffsetFetch answer from its (possibly marked) offset; `otherwise`
/// for an ordinary offset.
fn partition_code(offset: i64, otherwise: i16) -> i16 {
    match offset {
        UNSTABLE_OFFSET => ErrorCode::UNSTABLE_OFFSET_COMMIT.code(),
        TOPIC_DENIED_OFFSET => ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
        _ => otherwise,
    }
}

/// OffsetCommit, or TxnOffsetCommit with `txn` (producer id, epoch), through the group's
/// coordinator shard: per partition, its error. Partitions of topics that do not exist are
/// answered here, as Kafka does.
/// Kafka's checks on an offset commit: READ on the group (every partition refused
/// GROUP_AUTHORIZATION_FAILED without it), then READ on each topic (TOPIC_AUTHORIZATION_FAILED).
/// The refused partitions leave `req` and are returned with their codes.
pub fn authorize_commit(
    shard: &Shard,
    conn: crate::conn::Conn<'_>,
    req: &mut OffsetCommitRequest,
) -> TopicResults<ErrorCode> {
    if shard.authorizer().is_none() {
        return Vec::new();
    }
    let group_ok = shard.allowed(conn, AclOperation::Read, ResourceType::Group, &req.group_id);
    let mut denied: TopicResults<ErrorCode> = Vec::new();
    req.topics.retain(|(t, parts)| {
        let code = if !group_ok {
            ErrorCode::GROUP_AUTHORIZATION_FAILED
        } else if !shard.allowed(conn, AclOperation::Read, ResourceType::Topic, t) {
            ErrorCode::TOPIC_AUTHORIZATION_FAILED
        } else {
            return true;
        };
        denied.push((
            t.clone(),
            parts.iter().map(|p| (p.partition, code)).collect(),
        ));
        false
    });
    denied
}

pub async fn commit_offsets(
    shard: &Rc<Shard>,
    mut req: OffsetCommitRequest,
    from: CommitFrom,
) -> TopicResults<ErrorCode> {
    let group = req.group_id.clone();
    let catalog = shard.catalog();
    let mut unknown: TopicResults<ErrorCode> = Vec::new();
    for (t, parts) in &mut req.topics {
        let known = |p: i32| {
            catalog
                .topics
                .get(t.as_str())
                .is_some_and(|m| p >= 0 && p < m.partitions)
        };
        let bad: Vec<(i32, ErrorCode)> = parts
            .iter()
            .filter(|p| !known(p.partition))
            .map(|p| (p.partition, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))
            .collect();
        parts.retain(|p| known(p.partition));
        if !bad.is_empty() {
            unknown.push((t.clone(), bad));
        }
    }
    req.topics.retain(|(_, p)| !p.is_empty());
    let mut results = if req.topics.is_empty() {
        Vec::new()
    } else {
        let n: Vec<(String, Vec<i32>)> = req
            .topics
            .iter()
            .map(|(t, ps)| (t.clone(), ps.iter().map(|p| p.partition).collect()))
            .collect();
        let every = |c: ErrorCode| -> TopicResults<ErrorCode> {
            n.iter()
                .map(|(t, ps)| (t.clone(), ps.iter().map(|p| (*p, c)).collect()))
                .collect()
        };
        let op = match from {
            CommitFrom::OffsetCommit { version } => GroupOp::Commit { req, version },
            CommitFrom::Txn(id, epoch) => GroupOp::TxnCommit {
                req,
                producer: (id, epoch),
            },
        };
        match ask(shard, &group, op).await {
            Some(GroupReply::Commit(r)) => r,
            Some(GroupReply::Code(c)) => every(c),
            _ => every(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    };
    results.extend(unknown);
    results
}

/// Offsets and group administration: OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
/// DeleteGroups, OffsetDelete.
pub(super) mod admin {
    use super::*;

    pub async fn handle(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        match spec.key {
            api_key::OFFSET_COMMIT => offset_commit(shard, spec, header, r, conn).await,
            api_key::OFFSET_FETCH => offset_fetch(shard, spec, header, r, conn).await,
            api_key::LIST_GROUPS => list_groups(shard, spec, header, r, conn).await,
            api_key::DESCRIBE_GROUPS => describe_groups(shard, spec, header, r, conn).await,
            api_key::DELETE_GROUPS => delete_groups(shard, spec, header, r, conn).await,
            api_key::OFFSET_DELETE => offset_delete(shard, spec, header, r, conn).await,
            other => Err(format!("API key {other} is not a group API")),
        }
    }

    async fn offset_commit(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let mut req = decode_all(r, |r| decode_offset_commit(r, v))?;
        let denied = authorize_commit(shard, conn, &mut req);
        let mut results = if req.topics.is_empty() {
            Vec::new()
        } else {
            commit_offsets(shard, req, CommitFrom::OffsetCommit { version: v }).await
        };
        results.extend(denied);
        let topics = results
            .into_iter()
            .map(|(t, ps)| {
                OffsetCommitResponseTopic::default()
                    .with_name(topic_name(&t))
                    .with_partitions(
                        ps.into_iter()
                            .map(|(p, c)| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(c.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        frame(
            spec,
            header,
            &OffsetCommitResponse::default().with_topics(topics),
        )
    }

    /// OffsetFetch: each group's committed offsets (one group before v8), as far as the
    /// principal may DESCRIBE the group and its topics.
    async fn offset_fetch(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let groups = decode_all(r, |r| decode_offset_fetch(r, v))?;
        let mut answers = Vec::with_capacity(groups.len());
        for g in groups {
            let id = g.group_id.clone();
            let all_topics = g.topics.is_none();
            // DESCRIBE on the group, as in Kafka.
            let allowed = shard.allowed(conn, AclOperation::Describe, ResourceType::Group, &id);
            let (code, mut topics, unstable) = match allowed {
                false => (
                    ErrorCode::GROUP_AUTHORIZATION_FAILED,
                    Vec::new(),
                    Vec::new(),
                ),
                true => match ask(shard, &id, GroupOp::Fetch(g)).await {
                    Some(GroupReply::Fetch(c, t, u)) => (c, t, u),
                    _ => (ErrorCode::COORDINATOR_NOT_AVAILABLE, Vec::new(), Vec::new()),
                },
            };
            mark_unstable(&mut topics, &unstable);
            hide_denied_topics(shard, conn, all_topics, &mut topics);
            answers.push((id, code, topics));
        }
        let resp = if v >= 8 {
            groups_response(answers)
        } else {
            single_group_response(v, answers)
        };
        frame(spec, header, &resp)
    }

    /// One group's OffsetFetch answer: its id, its error, and per partition the committed
    /// (offset, leader epoch, metadata), the offset possibly a mark (`UNSTABLE_OFFSET`,
    /// `TOPIC_DENIED_OFFSET`).
    type GroupOffsets = (String, ErrorCode, TopicResults<(i64, i32, String)>);

    /// Marks each partition named in `unstable` with `UNSTABLE_OFFSET`.
    fn mark_unstable(topics: &mut TopicResults<(i64, i32, String)>, unstable: &[TopicPartition]) {
        // A partition a transaction holds an offset for: no offset yet, and
        // UNSTABLE_OFFSET_COMMIT, so the consumer retries (KIP-447).
        for (t, ps) in topics {
            for (p, entry) in ps.iter_mut() {
                if unstable.iter().any(|u| u.topic == *t && u.partition == *p) {
                    *entry = (UNSTABLE_OFFSET, -1, String::new());
                }
            }
        }
    }

    /// Keeps from the principal the offsets of topics it may not DESCRIBE: left out of a fetch
    /// of all the group's offsets (`all_topics`), marked denied in a fetch that names them.
    fn hide_denied_topics(
        shard: &Shard,
        conn: crate::conn::Conn<'_>,
        all_topics: bool,
        topics: &mut TopicResults<(i64, i32, String)>,
    ) {
        // DESCRIBE on each topic, as in Kafka: a topic asked for by name without
        // it answers TOPIC_AUTHORIZATION_FAILED, and a fetch of all the group's
        // offsets leaves it out.
        let visible = |t: &str| shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, t);
        if all_topics {
            topics.retain(|(t, _)| visible(t));
        } else {
            for (t, ps) in topics {
                if !visible(t) {
                    for (_, entry) in ps.iter_mut() {
                        *entry = (TOPIC_DENIED_OFFSET, -1, String::new());
                    }
                }
            }
        }
    }

    /// The v8+ response: every group asked for, each with its error and its partitions'.
    fn groups_response(answers: Vec<GroupOffsets>) -> OffsetFetchResponse {
        OffsetFetchResponse::default().with_groups(
            answers
                .into_iter()
                .map(|(id, code, topics)| {
                    OffsetFetchResponseGroup::default()
                        .with_group_id(GroupId(str_bytes(&id)))
                        .with_error_code(code.code())
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(t, ps)| {
                                    OffsetFetchResponseTopics::default()
                                        .with_name(topic_name(&t))
                                        .with_partitions(
                                            ps.into_iter()
                                                .map(|(p, (o, e, md))| {
                                                    OffsetFetchResponsePartitions::default()
                                                        .with_partition_index(p)
                                                        .with_committed_offset(o.max(-1))
                                                        .with_committed_leader_epoch(e)
                                                        .with_metadata(Some(str_bytes(&md)))
                                                        .with_error_code(partition_code(o, 0))
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    /// The response before v8, for the request's one group: the group's error goes in each
    /// partition's before v2 and in the response's from v2; the leader epoch from v5.
    fn single_group_response(v: i16, answers: Vec<GroupOffsets>) -> OffsetFetchResponse {
        let (_, code, topics) =
            answers
                .into_iter()
                .next()
                .unwrap_or((String::new(), ErrorCode::NONE, Vec::new()));
        let mut resp = OffsetFetchResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(topic_name(&t))
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, (o, e, md))| {
                                    let part = OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o.max(-1))
                                        .with_metadata(Some(str_bytes(&md)))
                                        .with_error_code(partition_code(
                                            o,
                                            if v < 2 { code.code() } else { 0 },
                                        ));
                                    if v >= 5 {
                                        part.with_committed_leader_epoch(e)
                                    } else {
                                        part
                                    }
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
        if v >= 2 {
            resp = resp.with_error_code(code.code());
        }
        resp
    }

    async fn list_groups(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let filter = decode_all(r, |r| decode_list_groups(r, v))?;
        let cluster_describe = shard.allowed_on_cluster(conn, AclOperation::Describe);
        let lists = futures::future::join_all(
            (0..shard.shards).map(|s| ask_group(shard, ShardId(s), GroupOp::List)),
        )
        .await;
        let groups = lists
            .into_iter()
            .flat_map(|l| match l {
                Some(GroupReply::List(gs)) => gs,
                _ => Vec::new(),
            })
            .filter(|g| filter.keeps(&g.state, g.group_type))
            // DESCRIBE on the cluster lists every group; otherwise those the principal
            // may describe, as in Kafka.
            .filter(|g| {
                cluster_describe
                    || shard.allowed(
                        conn,
                        AclOperation::Describe,
                        ResourceType::Group,
                        &g.group_id,
                    )
            })
            .map(|g| {
                let mut listed = ListedGroup::default()
                    .with_group_id(GroupId(str_bytes(&g.group_id)))
                    .with_protocol_type(str_bytes(&g.protocol_type));
                if v >= 4 {
                    listed = listed.with_group_state(str_bytes(&g.state));
                }
                if v >= 5 {
                    listed = listed.with_group_type(str_bytes(g.group_type));
                }
                listed
            })
            .collect();
        frame(
            spec,
            header,
            &ListGroupsResponse::default().with_groups(groups),
        )
    }

    async fn describe_groups(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let (ids, include_ops) = decode_all(r, |r| {
            decode_group_ids_and_ops(r, api_key::DESCRIBE_GROUPS, v)
        })?;
        let ops = crate::handlers::common::authorized_operations::when(
            include_ops,
            crate::handlers::common::authorized_operations::GROUP,
        );
        let mut groups = Vec::with_capacity(ids.len());
        for id in ids {
            if !shard.allowed(conn, AclOperation::Describe, ResourceType::Group, &id) {
                groups.push(
                    DescribedGroup::default()
                        .with_group_id(GroupId(str_bytes(&id)))
                        .with_error_code(ErrorCode::GROUP_AUTHORIZATION_FAILED.code()),
                );
                continue;
            }
            let d = match ask(shard, &id, GroupOp::Describe(id.clone())).await {
                Some(GroupReply::Describe(d)) => d,
                _ => Described {
                    group_id: id.clone(),
                    state: "Dead",
                    protocol_type: String::new(),
                    protocol: String::new(),
                    members: Vec::new(),
                },
            };
            groups.push(
                DescribedGroup::default()
                    .with_group_id(GroupId(str_bytes(&d.group_id)))
                    .with_group_state(str_bytes(d.state))
                    .with_protocol_type(str_bytes(&d.protocol_type))
                    .with_protocol_data(str_bytes(&d.protocol))
                    .with_authorized_operations(ops)
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|m| {
                                let dm = DescribedGroupMember::default()
                                    .with_member_id(str_bytes(&m.member_id))
                                    .with_client_id(str_bytes(&m.client_id))
                                    .with_client_host(str_bytes(&m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment);
                                if v >= 4 {
                                    dm.with_group_instance_id(
                                        m.group_instance_id.as_deref().map(str_bytes),
                                    )
                                } else {
                                    dm
                                }
                            })
                            .collect(),
                    ),
            );
        }
        frame(
            spec,
            header,
            &DescribeGroupsResponse::default().with_groups(groups),
        )
    }

    async fn delete_groups(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let ids = decode_all(r, |r| decode_group_ids(r, api_key::DELETE_GROUPS, v))?;
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            let code = if !shard.allowed(conn, AclOperation::Delete, ResourceType::Group, &id) {
                ErrorCode::GROUP_AUTHORIZATION_FAILED
            } else {
                match ask(shard, &id, GroupOp::Delete(id.clone())).await {
                    Some(GroupReply::Code(c)) => c,
                    _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
                }
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(GroupId(str_bytes(&id)))
                    .with_error_code(code.code()),
            );
        }
        frame(
            spec,
            header,
            &DeleteGroupsResponse::default().with_results(results),
        )
    }

    async fn offset_delete(
        shard: &Rc<Shard>,
        spec: &ApiSpec,
        header: &RequestHeader,
        r: &mut Reader,
        conn: crate::conn::Conn<'_>,
    ) -> HandlerResult {
        let v = header.api_version;
        let mut req = decode_all(r, |r| decode_offset_delete(r, v))?;
        let id = req.group_id.clone();
        // DELETE on the group, and READ on each topic, as in Kafka: a topic without it
        // keeps its offsets and answers TOPIC_AUTHORIZATION_FAILED.
        let allowed = shard.allowed(conn, AclOperation::Delete, ResourceType::Group, &id);
        let (readable, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|(t, _)| shard.allowed(conn, AclOperation::Read, ResourceType::Topic, t));
        req.topics = readable;
        let (code, mut topics) = match allowed {
            false => (ErrorCode::GROUP_AUTHORIZATION_FAILED, Vec::new()),
            true => match ask(shard, &id, GroupOp::OffsetDelete(req)).await {
                Some(GroupReply::OffsetDelete(c, t)) => (c, t),
                Some(GroupReply::Code(c)) => (c, Vec::new()),
                _ => (ErrorCode::COORDINATOR_NOT_AVAILABLE, Vec::new()),
            },
        };
        if code == ErrorCode::NONE {
            for (t, ps) in denied {
                let ps = ps
                    .into_iter()
                    .map(|p| (p, ErrorCode::TOPIC_AUTHORIZATION_FAILED))
                    .collect();
                topics.push((t, ps));
            }
        }
        let topics = topics
            .into_iter()
            .map(|(t, ps)| {
                OffsetDeleteResponseTopic::default()
                    .with_name(topic_name(&t))
                    .with_partitions(
                        ps.into_iter()
                            .map(|(p, c)| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(c.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        frame(
            spec,
            header,
            &OffsetDeleteResponse::default()
                .with_error_code(code.code())
                .with_topics(topics),
        )
    }
}
