//! Consumer-group error codes and persistence, driven over the raw protocol so each Kafka error
//! path can be reached on purpose.

mod common;

use bytes::Bytes;
use common::{start_broker, RawConn};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

const PROPS: &[(&str, &str)] = &[
    ("group.initial.rebalance.delay.ms", "0"),
    ("group.max.size", "2"),
    ("num.partitions", "2"),
];

fn join(c: &mut RawConn, group: &str, member: &str, session_ms: i32) -> JoinGroupResponse {
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(Bytes::from_static(b"\x00\x01\x00\x00\x00\x00"))]);
    c.request(ApiKey::JoinGroup, 5, &req)
}

fn sync(c: &mut RawConn, group: &str, member: &str, generation: i32) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(s(member))
                .with_assignment(Bytes::from_static(b"assignment")),
        ]);
    c.request(ApiKey::SyncGroup, 3, &req)
}

fn commit(
    c: &mut RawConn,
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    offset: i64,
    metadata: &str,
) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_metadata(Some(s(metadata))),
                ]),
        ]);
    let resp: OffsetCommitResponse = c.request(ApiKey::OffsetCommit, 7, &req);
    resp.topics[0].partitions[0].error_code
}

fn fetch_offset(c: &mut RawConn, group: &str, topic: &str) -> (i64, String) {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![0]),
        ]));
    let resp: OffsetFetchResponse = c.request(ApiKey::OffsetFetch, 6, &req);
    let p = &resp.topics[0].partitions[0];
    (
        p.committed_offset,
        p.metadata
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

fn heartbeat(c: &mut RawConn, group: &str, member: &str, generation: i32) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member));
    let resp: HeartbeatResponse = c.request(ApiKey::Heartbeat, 3, &req);
    resp.error_code
}

fn create_topic(c: &mut RawConn, topic: &str) {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(2)
            .with_replication_factor(1)])
        .with_timeout_ms(5000);
    let resp: CreateTopicsResponse = c.request(ApiKey::CreateTopics, 5, &req);
    assert_eq!(resp.topics[0].error_code, 0);
}

#[test]
fn membership_errors_match_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let mut c = RawConn::connect(broker.addr);

    assert_eq!(
        join(&mut c, "g", "", 10).error_code,
        26,
        "INVALID_SESSION_TIMEOUT"
    );
    let first = join(&mut c, "g", "", 10_000);
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let id = first.member_id.to_string();
    assert!(!id.is_empty());
    let joined = join(&mut c, "g", &id, 10_000);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(joined.leader.as_str(), id);
    assert_eq!(joined.members.len(), 1);

    assert_eq!(
        sync(&mut c, "g", &id, 7).error_code,
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        sync(&mut c, "g", "stranger", 1).error_code,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    let synced = sync(&mut c, "g", &id, 1);
    assert_eq!(synced.error_code, 0);
    assert_eq!(synced.assignment.as_ref(), b"assignment");
    assert_eq!(heartbeat(&mut c, "g", &id, 1), 0);
    assert_eq!(heartbeat(&mut c, "g", "stranger", 1), 25);
    assert_eq!(heartbeat(&mut c, "g", &id, 0), 22);
    assert_eq!(heartbeat(&mut c, "nobody", &id, 1), 25);

    // group.max.size = 2: the second member's pending id counts, so a third is refused.
    let mut c2 = RawConn::connect(broker.addr);
    let second_id = join(&mut c2, "g", "", 10_000).member_id.to_string();
    let mut c3 = RawConn::connect(broker.addr);
    assert_eq!(
        join(&mut c3, "g", "", 10_000).error_code,
        81,
        "GROUP_MAX_SIZE_REACHED"
    );
    // The second member starts a rebalance; the first learns of it from its heartbeat.
    let rejoin = std::thread::spawn({
        let addr = broker.addr;
        move || {
            let mut c2 = RawConn::connect(addr);
            join(&mut c2, "g", &second_id, 10_000)
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(heartbeat(&mut c, "g", &id, 1), 27, "REBALANCE_IN_PROGRESS");
    let again = join(&mut c, "g", &id, 10_000);
    assert_eq!(again.generation_id, 2);
    assert_eq!(rejoin.join().unwrap().generation_id, 2);
    drop(c2);

    // Deleting a group with members is refused; an unknown group is not found.
    let del = |c: &mut RawConn, g: &str| -> i16 {
        let resp: DeleteGroupsResponse = c.request(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(g))]),
        );
        resp.results[0].error_code
    };
    assert_eq!(del(&mut c, "g"), 68, "NON_EMPTY_GROUP");
    assert_eq!(del(&mut c, "never-existed"), 69, "GROUP_ID_NOT_FOUND");
    broker.shutdown().unwrap();
}

#[test]
fn committed_offsets_validate_persist_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "t");

    // A simple consumer (no membership) commits with generation -1.
    assert_eq!(commit(&mut c, "simple", "", -1, "t", 42, "hello"), 0);
    assert_eq!(fetch_offset(&mut c, "simple", "t"), (42, "hello".into()));
    assert_eq!(
        commit(&mut c, "simple", "", -1, "t", 43, &"m".repeat(5000)),
        12,
        "OFFSET_METADATA_TOO_LARGE"
    );
    assert_eq!(
        commit(&mut c, "simple", "", -1, "missing-topic", 1, ""),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(fetch_offset(&mut c, "nobody", "t").0, -1);

    // Members must commit with their generation.
    let id = join(&mut c, "members", "", 10_000).member_id.to_string();
    let gen = join(&mut c, "members", &id, 10_000).generation_id;
    assert_eq!(sync(&mut c, "members", &id, gen).error_code, 0);
    assert_eq!(
        commit(&mut c, "members", &id, gen + 5, "t", 1, ""),
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        commit(&mut c, "members", "intruder", gen, "t", 1, ""),
        25,
        "UNKNOWN_MEMBER_ID"
    );
    assert_eq!(commit(&mut c, "members", &id, gen, "t", 7, "m"), 0);

    // Internal topics are not for clients.
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(TopicName(s("__consumer_offsets")))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(
                        tributary_protocol::record_batch::build_batch(
                            &[(None, Some(b"x"))],
                            0,
                            None,
                        )
                        .freeze(),
                    )),
            ])]);
    let resp: ProduceResponse = c.request(ApiKey::Produce, 8, &produce);
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 17,
        "INVALID_TOPIC_EXCEPTION"
    );
    broker.shutdown().unwrap();

    // Offsets and groups come back after a restart.
    let broker = start_broker(dir.path(), 1, PROPS);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(fetch_offset(&mut c, "simple", "t"), (42, "hello".into()));
    assert_eq!(fetch_offset(&mut c, "members", "t"), (7, "m".into()));
    let listed: ListGroupsResponse =
        c.request(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
    let mut names: Vec<String> = listed
        .groups
        .iter()
        .map(|g| g.group_id.to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["members", "simple"]);

    // OffsetDelete, then DeleteGroups of an empty group.
    let od = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s("simple")))
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ]),
        ]);
    let resp: OffsetDeleteResponse = c.request(ApiKey::OffsetDelete, 0, &od);
    assert_eq!(
        (resp.error_code, resp.topics[0].partitions[0].error_code),
        (0, 0)
    );
    assert_eq!(fetch_offset(&mut c, "simple", "t").0, -1);
    let resp: DeleteGroupsResponse = c.request(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("simple"))]),
    );
    assert_eq!(resp.results[0].error_code, 0);

    // FindCoordinator, batched (v4) and single (v3).
    let fc: FindCoordinatorResponse = c.request(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("a"), s("b")]),
    );
    assert_eq!(fc.coordinators.len(), 2);
    assert!(fc
        .coordinators
        .iter()
        .all(|k| k.error_code == 0 && k.port == i32::from(broker.addr.port())));
    let fc: FindCoordinatorResponse = c.request(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(s("a")),
    );
    assert_eq!((fc.error_code, fc.node_id.0), (0, 0));
    broker.shutdown().unwrap();
}

/// Kafka accepts a commit from a member of the current generation while its group prepares a
/// rebalance: eager consumers commit what they processed from their revoke callback before
/// rejoining. CompletingRebalance is the state that answers REBALANCE_IN_PROGRESS.
#[test]
fn members_commit_while_the_group_prepares_a_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "t");

    let id = join(&mut c, "eager", "", 10_000).member_id.to_string();
    let gen = join(&mut c, "eager", &id, 10_000).generation_id;
    assert_eq!(gen, 1);
    assert_eq!(sync(&mut c, "eager", &id, gen).error_code, 0);

    // Neither a commit naming no member nor one naming a generation of a group that does not
    // exist is a simple commit.
    assert_eq!(
        commit(&mut c, "eager", "", -1, "t", 1, ""),
        25,
        "UNKNOWN_MEMBER_ID"
    );
    assert_eq!(
        commit(&mut c, "no-such-group", "m", 3, "t", 1, ""),
        22,
        "ILLEGAL_GENERATION"
    );

    // A second member's join puts the group in PreparingRebalance until the first rejoins.
    let mut c2 = RawConn::connect(broker.addr);
    let second_id = join(&mut c2, "eager", "", 10_000).member_id.to_string();
    let second = std::thread::spawn({
        let addr = broker.addr;
        move || {
            let mut c2 = RawConn::connect(addr);
            join(&mut c2, "eager", &second_id, 10_000)
        }
    });
    common::wait_until("the group to prepare a rebalance", || {
        heartbeat(&mut c, "eager", &id, gen) == 27
    });
    assert_eq!(commit(&mut c, "eager", &id, gen, "t", 55, "revoked"), 0);
    assert_eq!(fetch_offset(&mut c, "eager", "t"), (55, "revoked".into()));
    assert_eq!(
        commit(&mut c, "eager", &id, gen + 1, "t", 56, ""),
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        commit(&mut c, "eager", "stranger", gen, "t", 56, ""),
        25,
        "UNKNOWN_MEMBER_ID"
    );

    // Rejoining completes the join: CompletingRebalance refuses commits until the sync.
    let again = join(&mut c, "eager", &id, 10_000);
    assert_eq!(again.generation_id, 2);
    assert_eq!(second.join().unwrap().generation_id, 2);
    assert_eq!(
        commit(&mut c, "eager", &id, 2, "t", 57, ""),
        27,
        "REBALANCE_IN_PROGRESS"
    );
    assert_eq!(fetch_offset(&mut c, "eager", "t"), (55, "revoked".into()));
    broker.shutdown().unwrap();
}
