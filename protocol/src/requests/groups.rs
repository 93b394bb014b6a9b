//! Consumer-group request decoders: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

use bytes::Bytes;

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

fn strings(r: &mut Reader, what: &'static str, flex: bool) -> Result<Vec<String>, DecodeError> {
    let n = r.array_len_required(what, flex, 1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.string(what, flex)?);
    }
    Ok(out)
}

fn bytes_field(r: &mut Reader, what: &'static str, flex: bool) -> Result<Bytes, DecodeError> {
    r.nullable_bytes(what, flex)?
        .ok_or_else(|| r.malformed(what, "null where bytes are required"))
}

#[derive(Debug, Clone)]
pub struct FindCoordinatorRequest {
    /// 0 = group, 1 = transaction.
    pub key_type: i8,
    pub keys: Vec<String>,
}

pub fn decode_find_coordinator(
    r: &mut Reader,
    v: i16,
) -> Result<FindCoordinatorRequest, DecodeError> {
    let flex = flexible(api_key::FIND_COORDINATOR, v);
    let mut keys = Vec::new();
    if v <= 3 {
        keys.push(r.string("key", flex)?);
    }
    let key_type = if v >= 1 { r.i8("key_type")? } else { 0 };
    if v >= 4 {
        keys = strings(r, "coordinator_keys", flex)?;
    }
    r.tagged_fields(flex)?;
    Ok(FindCoordinatorRequest { key_type, keys })
}

#[derive(Debug, Clone)]
pub struct JoinGroupRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

pub fn decode_join_group(r: &mut Reader, v: i16) -> Result<JoinGroupRequest, DecodeError> {
    let flex = flexible(api_key::JOIN_GROUP, v);
    let group_id = r.string("group_id", flex)?;
    let session_timeout_ms = r.i32("session_timeout_ms")?;
    let rebalance_timeout_ms = if v >= 1 {
        r.i32("rebalance_timeout_ms")?
    } else {
        session_timeout_ms
    };
    let member_id = r.string("member_id", flex)?;
    let group_instance_id = if v >= 5 {
        r.nullable_string("group_instance_id", flex)?
    } else {
        None
    };
    let protocol_type = r.string("protocol_type", flex)?;
    let n = r.array_len_required("protocols", flex, 2)?;
    let mut protocols = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("protocol name", flex)?;
        let metadata = bytes_field(r, "protocol metadata", flex)?;
        r.tagged_fields(flex)?;
        protocols.push((name, metadata));
    }
    r.tagged_fields(flex)?;
    Ok(JoinGroupRequest {
        group_id,
        session_timeout_ms,
        rebalance_timeout_ms,
        member_id,
        group_instance_id,
        protocol_type,
        protocols,
    })
}

#[derive(Debug, Clone)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

pub fn decode_sync_group(r: &mut Reader, v: i16) -> Result<SyncGroupRequest, DecodeError> {
    let flex = flexible(api_key::SYNC_GROUP, v);
    let group_id = r.string("group_id", flex)?;
    let generation_id = r.i32("generation_id")?;
    let member_id = r.string("member_id", flex)?;
    let group_instance_id = if v >= 3 {
        r.nullable_string("group_instance_id", flex)?
    } else {
        None
    };
    let (protocol_type, protocol_name) = if v >= 5 {
        (
            r.nullable_string("protocol_type", flex)?,
            r.nullable_string("protocol_name", flex)?,
        )
    } else {
        (None, None)
    };
    let n = r.array_len_required("assignments", flex, 2)?;
    let mut assignments = Vec::with_capacity(n);
    for _ in 0..n {
        let member = r.string("assignment member_id", flex)?;
        let assignment = bytes_field(r, "assignment", flex)?;
        r.tagged_fields(flex)?;
        assignments.push((member, assignment));
    }
    r.tagged_fields(flex)?;
    Ok(SyncGroupRequest {
        group_id,
        generation_id,
        member_id,
        group_instance_id,
        protocol_type,
        protocol_name,
        assignments,
    })
}

#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

pub fn decode_heartbeat(r: &mut Reader, v: i16) -> Result<HeartbeatRequest, DecodeError> {
    let flex = flexible(api_key::HEARTBEAT, v);
    let group_id = r.string("group_id", flex)?;
    let generation_id = r.i32("generation_id")?;
    let member_id = r.string("member_id", flex)?;
    let group_instance_id = if v >= 3 {
        r.nullable_string("group_instance_id", flex)?
    } else {
        None
    };
    r.tagged_fields(flex)?;
    Ok(HeartbeatRequest {
        group_id,
        generation_id,
        member_id,
        group_instance_id,
    })
}

#[derive(Debug, Clone)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    /// (member_id, group_instance_id); v0–2 carry exactly one member without an instance id.
    pub members: Vec<(String, Option<String>)>,
}

pub fn decode_leave_group(r: &mut Reader, v: i16) -> Result<LeaveGroupRequest, DecodeError> {
    let flex = flexible(api_key::LEAVE_GROUP, v);
    let group_id = r.string("group_id", flex)?;
    let mut members = Vec::new();
    if v <= 2 {
        members.push((r.string("member_id", flex)?, None));
    } else {
        let n = r.array_len_required("members", flex, 2)?;
        members.reserve(n);
        for _ in 0..n {
            let member_id = r.string("member_id", flex)?;
            let instance = r.nullable_string("group_instance_id", flex)?;
            if v >= 5 {
                r.nullable_string("reason", flex)?;
            }
            r.tagged_fields(flex)?;
            members.push((member_id, instance));
        }
    }
    r.tagged_fields(flex)?;
    Ok(LeaveGroupRequest { group_id, members })
}

#[derive(Debug, Clone)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<(String, Vec<CommitPartition>)>,
}

#[derive(Debug, Clone)]
pub struct CommitPartition {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

pub fn decode_offset_commit(r: &mut Reader, v: i16) -> Result<OffsetCommitRequest, DecodeError> {
    let flex = flexible(api_key::OFFSET_COMMIT, v);
    let group_id = r.string("group_id", flex)?;
    let generation_id = r.i32("generation_id")?;
    let member_id = r.string("member_id", flex)?;
    let group_instance_id = if v >= 7 {
        r.nullable_string("group_instance_id", flex)?
    } else {
        None
    };
    if (2..=4).contains(&v) {
        r.i64("retention_time_ms")?;
    }
    let n = r.array_len_required("topics", flex, 2)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partitions", flex, 14)?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("partition_index")?;
            let offset = r.i64("committed_offset")?;
            let leader_epoch = if v >= 6 {
                r.i32("committed_leader_epoch")?
            } else {
                -1
            };
            let metadata = r.nullable_string("committed_metadata", flex)?;
            r.tagged_fields(flex)?;
            parts.push(CommitPartition {
                partition,
                offset,
                leader_epoch,
                metadata,
            });
        }
        r.tagged_fields(flex)?;
        topics.push((name, parts));
    }
    r.tagged_fields(flex)?;
    Ok(OffsetCommitRequest {
        group_id,
        generation_id,
        member_id,
        group_instance_id,
        topics,
    })
}

/// Topics with partition indexes, as OffsetFetch and OffsetDelete name them.
pub type TopicPartitions = Vec<(String, Vec<i32>)>;

#[derive(Debug, Clone)]
pub struct OffsetFetchGroup {
    pub group_id: String,
    /// `None` asks for every committed partition of the group.
    pub topics: Option<TopicPartitions>,
    /// v7+ (KIP-447): partitions with transactional offsets not yet committed answer
    /// UNSTABLE_OFFSET_COMMIT instead of their last stable offset.
    pub require_stable: bool,
    /// v9+ (KIP-848): the member of a consumer group asking, and its epoch; `None` and -1 for
    /// a client outside the group (an admin, a classic member).
    pub member_id: Option<String>,
    pub member_epoch: i32,
}

fn fetch_topics(r: &mut Reader, flex: bool) -> Result<Option<TopicPartitions>, DecodeError> {
    let Some(n) = r.array_len("topics", flex, 2)? else {
        return Ok(None);
    };
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", flex)?;
        let np = r.array_len_required("partition_indexes", flex, 4)?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32("partition index")?);
        }
        r.tagged_fields(flex)?;
        topics.push((name, parts));
    }
    Ok(Some(topics))
}

pub fn decode_offset_fetch(r: &mut Reader, v: i16) -> Result<Vec<OffsetFetchGroup>, DecodeError> {
    let flex = flexible(api_key::OFFSET_FETCH, v);
    let mut groups = Vec::new();
    if v <= 7 {
        let group_id = r.string("group_id", flex)?;
        let topics = fetch_topics(r, flex)?;
        if v == 1 && topics.is_none() {
            return Err(r.malformed("topics", "null topics in OffsetFetch v1"));
        }
        groups.push(OffsetFetchGroup {
            group_id,
            topics,
            require_stable: false,
            member_id: None,
            member_epoch: -1,
        });
    } else {
        let n = r.array_len_required("groups", flex, 2)?;
        groups.reserve(n);
        for _ in 0..n {
            let group_id = r.string("group_id", flex)?;
            let (member_id, member_epoch) = if v >= 9 {
                (
                    r.nullable_string("member_id", flex)?,
                    r.i32("member_epoch")?,
                )
            } else {
                (None, -1)
            };
            let topics = fetch_topics(r, flex)?;
            r.tagged_fields(flex)?;
            groups.push(OffsetFetchGroup {
                group_id,
                topics,
                require_stable: false,
                member_id,
                member_epoch,
            });
        }
    }
    if v >= 7 {
        let stable = r.bool("require_stable")?;
        for g in &mut groups {
            g.require_stable = stable;
        }
    }
    r.tagged_fields(flex)?;
    Ok(groups)
}

/// ListGroups' filters: by state (v4+) and by group type (v5+, KIP-848); empty keeps all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListGroupsFilter {
    pub states: Vec<String>,
    pub types: Vec<String>,
}

impl ListGroupsFilter {
    /// Whether a group in `state` of `group_type` ("classic", "consumer") is listed; both
    /// compared ignoring case, as Kafka does.
    pub fn keeps(&self, state: &str, group_type: &str) -> bool {
        let any = |filter: &[String], value: &str| {
            filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
        };
        any(&self.states, state) && any(&self.types, group_type)
    }
}

pub fn decode_list_groups(r: &mut Reader, v: i16) -> Result<ListGroupsFilter, DecodeError> {
    let flex = flexible(api_key::LIST_GROUPS, v);
    let states = if v >= 4 {
        strings(r, "states_filter", flex)?
    } else {
        Vec::new()
    };
    let types = if v >= 5 {
        strings(r, "types_filter", flex)?
    } else {
        Vec::new()
    };
    r.tagged_fields(flex)?;
    Ok(ListGroupsFilter { states, types })
}

/// DescribeGroups and DeleteGroups both carry a list of group ids.
pub fn decode_group_ids(r: &mut Reader, api: i16, v: i16) -> Result<Vec<String>, DecodeError> {
    decode_group_ids_and_ops(r, api, v).map(|(groups, _)| groups)
}

/// The group ids, and whether a DescribeGroups (v3+) asks for authorized operations.
pub fn decode_group_ids_and_ops(
    r: &mut Reader,
    api: i16,
    v: i16,
) -> Result<(Vec<String>, bool), DecodeError> {
    let flex = flexible(api, v);
    let groups = strings(r, "groups", flex)?;
    let include_authorized_operations =
        api == api_key::DESCRIBE_GROUPS && v >= 3 && r.bool("include_authorized_operations")?;
    r.tagged_fields(flex)?;
    Ok((groups, include_authorized_operations))
}

#[derive(Debug, Clone)]
pub struct OffsetDeleteRequest {
    pub group_id: String,
    pub topics: TopicPartitions,
}

pub fn decode_offset_delete(r: &mut Reader, _v: i16) -> Result<OffsetDeleteRequest, DecodeError> {
    let group_id = r.string("group_id", false)?;
    let n = r.array_len_required("topics", false, 2)?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("topic", false)?;
        let np = r.array_len_required("partitions", false, 4)?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32("partition_index")?);
        }
        topics.push((name, parts));
    }
    Ok(OffsetDeleteRequest { group_id, topics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::lookup;
    use bytes::BytesMut;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::{
        join_group_request, leave_group_request, offset_commit_request, offset_delete_request,
        offset_fetch_request, sync_group_request,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn enc<R: Encodable>(req: &R, v: i16) -> Bytes {
        let mut b = BytesMut::new();
        req.encode(&mut b, v).unwrap();
        b.freeze()
    }

    fn s(x: &str) -> StrBytes {
        StrBytes::from_string(x.to_string())
    }

    fn versions(key: i16) -> std::ops::RangeInclusive<i16> {
        let spec = lookup(key).unwrap();
        spec.min_version..=spec.max_version
    }

    #[test]
    fn join_sync_heartbeat_leave() {
        for v in versions(api_key::JOIN_GROUP) {
            let mut req = kp::JoinGroupRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_session_timeout_ms(10_000)
                .with_member_id(s("m"))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"meta"))]);
            if v >= 1 {
                req = req.with_rebalance_timeout_ms(20_000);
            }
            let bytes = enc(&req, v);
            let got = decode_join_group(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.protocols[0].0, "range");
            assert_eq!(
                got.rebalance_timeout_ms,
                if v >= 1 { 20_000 } else { 10_000 }
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_join_group(r, v));
        }
        for v in versions(api_key::SYNC_GROUP) {
            let req = kp::SyncGroupRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(3)
                .with_member_id(s("m"))
                .with_assignments(vec![
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s("m"))
                        .with_assignment(Bytes::from_static(b"a")),
                ]);
            let bytes = enc(&req, v);
            let got = decode_sync_group(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!((got.generation_id, got.assignments.len()), (3, 1));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_sync_group(r, v));
        }
        for v in versions(api_key::HEARTBEAT) {
            let req = kp::HeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(2)
                .with_member_id(s("m"));
            let bytes = enc(&req, v);
            assert_eq!(
                decode_heartbeat(&mut Reader::new(bytes.clone()), v)
                    .unwrap()
                    .generation_id,
                2
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_heartbeat(r, v));
        }
        for v in versions(api_key::LEAVE_GROUP) {
            let req = if v <= 2 {
                kp::LeaveGroupRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_member_id(s("m"))
            } else {
                kp::LeaveGroupRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_members(vec![
                        leave_group_request::MemberIdentity::default().with_member_id(s("m"))
                    ])
            };
            let bytes = enc(&req, v);
            assert_eq!(
                decode_leave_group(&mut Reader::new(bytes.clone()), v)
                    .unwrap()
                    .members[0]
                    .0,
                "m"
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_leave_group(r, v));
        }
    }

    #[test]
    fn offsets_and_group_admin() {
        for v in versions(api_key::OFFSET_COMMIT) {
            let req = kp::OffsetCommitRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id_or_member_epoch(1)
                .with_member_id(s("m"))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(4)
                                .with_committed_offset(99)
                                .with_committed_metadata(Some(s("md"))),
                        ]),
                ]);
            let bytes = enc(&req, v);
            let got = decode_offset_commit(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.topics[0].1[0].offset, 99);
            assert_eq!(got.topics[0].1[0].metadata.as_deref(), Some("md"));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_offset_commit(r, v));
        }
        for v in versions(api_key::OFFSET_FETCH) {
            let topics = Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partition_indexes(vec![0, 1]),
            ]);
            let req = if v <= 7 {
                kp::OffsetFetchRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_topics(topics)
            } else {
                kp::OffsetFetchRequest::default().with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s("g")))
                        .with_member_id((v >= 9).then(|| s("member-1")))
                        .with_member_epoch(if v >= 9 { 4 } else { -1 })
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(TopicName(s("t")))
                                .with_partition_indexes(vec![0, 1]),
                        ])),
                ])
            };
            let bytes = enc(&req, v);
            let got = decode_offset_fetch(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got[0].topics.as_ref().unwrap()[0].1, vec![0, 1]);
            if v >= 9 {
                assert_eq!(got[0].member_id.as_deref(), Some("member-1"));
                assert_eq!(got[0].member_epoch, 4);
            }
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_offset_fetch(r, v));
        }
        for v in versions(api_key::FIND_COORDINATOR) {
            let req = if v <= 3 {
                kp::FindCoordinatorRequest::default().with_key(s("g"))
            } else {
                kp::FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g"), s("h")])
            };
            let bytes = enc(&req, v);
            let got = decode_find_coordinator(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.keys[0], "g");
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_find_coordinator(r, v));
        }
        for v in versions(api_key::DESCRIBE_GROUPS).filter(|v| *v >= 3) {
            let bytes = enc(
                &kp::DescribeGroupsRequest::default()
                    .with_groups(vec![GroupId(s("g"))])
                    .with_include_authorized_operations(true),
                v,
            );
            let got =
                decode_group_ids_and_ops(&mut Reader::new(bytes), api_key::DESCRIBE_GROUPS, v);
            assert_eq!(got.unwrap(), (vec!["g".to_string()], true));
        }
        for v in versions(api_key::DESCRIBE_GROUPS) {
            let bytes = enc(
                &kp::DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
                v,
            );
            assert_eq!(
                decode_group_ids(&mut Reader::new(bytes.clone()), api_key::DESCRIBE_GROUPS, v)
                    .unwrap(),
                vec!["g"]
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| {
                decode_group_ids(r, api_key::DESCRIBE_GROUPS, v)
            });
        }
        for v in versions(api_key::DELETE_GROUPS) {
            let bytes = enc(
                &kp::DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
                v,
            );
            assert_eq!(
                decode_group_ids(&mut Reader::new(bytes.clone()), api_key::DELETE_GROUPS, v)
                    .unwrap(),
                vec!["g"]
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| {
                decode_group_ids(r, api_key::DELETE_GROUPS, v)
            });
        }
        let req = kp::OffsetDeleteRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(2),
                    ]),
            ]);
        let bytes = enc(&req, 0);
        assert_eq!(
            decode_offset_delete(&mut Reader::new(bytes.clone()), 0)
                .unwrap()
                .topics[0]
                .1,
            vec![2]
        );
        crate::requests::assert_prefixes_fail(&bytes, |r| decode_offset_delete(r, 0));
    }
}
