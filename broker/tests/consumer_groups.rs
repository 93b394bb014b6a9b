//! KIP-848 consumer groups over the wire: librdkafka with `group.protocol=consumer` joining,
//! sharing partitions, leaving, committing and resuming, following a regex subscription; and
//! the error paths a well-behaved client does not take, over the raw protocol.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{rd_create_topics, rd_produce, start_broker, RawConn};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;

/// Fast heartbeats so that reconciliation takes tenths of a second, not the default 5 s steps.
const PROPS: &[(&str, &str)] = &[
    ("group.consumer.min.heartbeat.interval.ms", "100"),
    ("group.consumer.heartbeat.interval.ms", "300"),
    ("group.consumer.min.session.timeout.ms", "1000"),
    ("group.consumer.session.timeout.ms", "6000"),
];

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn consumer(addr: SocketAddr, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut cfg = rdkafka::config::ClientConfig::new();
    cfg.set("bootstrap.servers", addr.to_string())
        .set("group.id", group)
        .set("group.protocol", "consumer")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("consumer")
}

fn create(addr: SocketAddr, topic: &str, partitions: i32) {
    rd_create_topics(
        addr,
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
    );
}

fn produce(addr: SocketAddr, topic: &str, n: usize, tag: &str) {
    let messages: Vec<(Option<String>, String)> = (0..n)
        .map(|i| (Some(format!("k{i}")), format!("{tag}-{i}")))
        .collect();
    rd_produce(addr, topic, &[], &messages);
}

fn owned(c: &BaseConsumer) -> BTreeSet<(String, i32)> {
    c.assignment()
        .expect("assignment")
        .elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// Polls every consumer in turn (each poll serves its heartbeats) until `done` holds, keeping
/// each message read by consumer index; fails after 60 s naming `what`.
fn poll_until(
    consumers: &[&BaseConsumer],
    read: &mut BTreeMap<usize, Vec<String>>,
    what: &str,
    mut done: impl FnMut(&BTreeMap<usize, Vec<String>>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(read) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        for (i, c) in consumers.iter().enumerate() {
            if let Some(m) = c.poll(Duration::from_millis(20)) {
                let m = m.expect("consume");
                let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                read.entry(i).or_default().push(v);
            }
        }
    }
}

fn total(read: &BTreeMap<usize, Vec<String>>) -> usize {
    read.values().map(Vec::len).sum()
}

#[test]
fn members_share_partitions_leave_and_resume_from_their_commits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let addr = broker.addr;
    create(addr, "events", 6);
    produce(addr, "events", 600, "a");

    let one = consumer(addr, "g", &[]);
    one.subscribe(&["events"]).unwrap();
    let mut read = BTreeMap::new();
    poll_until(
        &[&one],
        &mut read,
        "the first member's 6 partitions",
        |_| owned(&one).len() == 6,
    );
    let two = consumer(addr, "g", &[]);
    two.subscribe(&["events"]).unwrap();
    // Nothing is committed yet, so a moved partition is read again from the start by its new
    // owner (at least once): every record is read, some twice.
    let distinct =
        |r: &BTreeMap<usize, Vec<String>>| r.values().flatten().collect::<BTreeSet<_>>().len();
    poll_until(
        &[&one, &two],
        &mut read,
        "the partitions shared 3 and 3",
        |r| {
            let (a, b) = (owned(&one), owned(&two));
            a.len() == 3 && b.len() == 3 && a.is_disjoint(&b) && distinct(r) == 600
        },
    );
    one.commit_consumer_state(CommitMode::Sync).unwrap();
    two.commit_consumer_state(CommitMode::Sync).unwrap();

    // The second member leaves: the first takes all six back.
    drop(two);
    poll_until(
        &[&one],
        &mut read,
        "the first member owning 6 again",
        |_| owned(&one).len() == 6,
    );
    drop(one);

    // A member of the same group starts from the committed offsets: only what came after.
    produce(addr, "events", 60, "b");
    let three = consumer(addr, "g", &[]);
    three.subscribe(&["events"]).unwrap();
    let mut later = BTreeMap::new();
    poll_until(&[&three], &mut later, "the 60 new records", |r| {
        total(r) >= 60
    });
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Some(m) = three.poll(Duration::from_millis(50)) {
            let m = m.unwrap();
            panic!(
                "read a record again: {:?}",
                m.payload().map(String::from_utf8_lossy)
            );
        }
    }
    assert!(
        later[&0].iter().all(|v| v.starts_with("b-")),
        "{:?}",
        later[&0]
    );
}

#[test]
fn a_regex_subscription_picks_up_a_topic_created_later() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, PROPS);
    let addr = broker.addr;
    create(addr, "orders-eu", 2);
    create(addr, "payments", 1);
    produce(addr, "orders-eu", 20, "eu");
    produce(addr, "payments", 5, "pay");
    let c = consumer(addr, "regex", &[]);
    c.subscribe(&["^orders-.*"]).unwrap();
    let mut read = BTreeMap::new();
    poll_until(&[&c], &mut read, "orders-eu", |r| total(r) >= 20);
    create(addr, "orders-us", 3);
    produce(addr, "orders-us", 30, "us");
    poll_until(&[&c], &mut read, "orders-us", |r| total(r) >= 50);
    assert!(
        read[&0].iter().all(|v| !v.starts_with("pay")),
        "read a topic the regex does not match"
    );
    assert_eq!(owned(&c).len(), 5);
}

fn heartbeat(
    conn: &mut RawConn,
    version: i16,
    edit: impl FnOnce(ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("raw")))
        .with_member_id(s("member-a"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(s("raw-topic"))]))
        .with_topic_partitions(Some(Vec::new()));
    conn.request(ApiKey::ConsumerGroupHeartbeat, version, &edit(req))
}

#[test]
fn bad_heartbeats_and_mixed_protocols_get_kafkas_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let addr = broker.addr;
    create(addr, "raw-topic", 4);
    let mut c = RawConn::connect(addr);
    let code = |r: &ConsumerGroupHeartbeatResponse| r.error_code;

    // Refused before any state changes.
    let r = heartbeat(&mut c, 1, |q| q.with_member_id(s("")));
    assert_eq!(code(&r), 42, "INVALID_REQUEST: {:?}", r.error_message);
    let r = heartbeat(&mut c, 1, |q| q.with_server_assignor(Some(s("sticky"))));
    assert_eq!(code(&r), 112, "UNSUPPORTED_ASSIGNOR");
    let r = heartbeat(&mut c, 1, |q| {
        q.with_subscribed_topic_regex(Some(s("(unclosed")))
    });
    assert_eq!(code(&r), 128, "INVALID_REGULAR_EXPRESSION");
    let r = heartbeat(&mut c, 1, |q| q.with_member_epoch(3));
    assert_eq!(
        code(&r),
        25,
        "UNKNOWN_MEMBER_ID for a group that does not exist"
    );

    // A member joins and gets all four partitions at epoch 1.
    let r = heartbeat(&mut c, 1, |q| q);
    assert_eq!(code(&r), 0, "{:?}", r.error_message);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.heartbeat_interval_ms, 300);
    let assigned = r.assignment.expect("an assignment");
    assert_eq!(assigned.topic_partitions.len(), 1);
    let topic_id = assigned.topic_partitions[0].topic_id;
    assert_eq!(assigned.topic_partitions[0].partitions, vec![0, 1, 2, 3]);

    // An epoch ahead of the member's is fenced.
    let r = heartbeat(&mut c, 1, |q| {
        q.with_member_epoch(5).with_topic_partitions(None)
    });
    assert_eq!(code(&r), 110, "FENCED_MEMBER_EPOCH");

    // Offsets at the member's epoch are taken; behind it, STALE_MEMBER_EPOCH.
    let commit_as = |c: &mut RawConn, group: &str, epoch: i32, version: i16| -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(epoch)
            .with_member_id(s("member-a"))
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("raw-topic")))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(7),
                    ]),
            ]);
        let resp: OffsetCommitResponse = c.request(ApiKey::OffsetCommit, version, &req);
        resp.topics[0].partitions[0].error_code
    };
    let commit = |c: &mut RawConn, epoch: i32| commit_as(c, "raw", epoch, 9);
    assert_eq!(commit(&mut c, 1), 0);
    // A member of this protocol commits with v9 or above (Kafka: "OffsetCommit version 9 or
    // above must be used by members using the modern group protocol").
    assert_eq!(commit_as(&mut c, "raw", 1, 8), 35, "UNSUPPORTED_VERSION");
    // An epoch for a group that does not exist: GROUP_ID_NOT_FOUND from v9 on, before it
    // ILLEGAL_GENERATION.
    assert_eq!(commit_as(&mut c, "nope", 3, 9), 69, "GROUP_ID_NOT_FOUND");
    assert_eq!(commit_as(&mut c, "nope", 3, 8), 22, "ILLEGAL_GENERATION");
    assert_eq!(commit(&mut c, 0), 113, "STALE_MEMBER_EPOCH");
    assert_eq!(
        commit(&mut c, 2),
        113,
        "STALE_MEMBER_EPOCH, as Kafka answers any other epoch"
    );

    // A classic member may join a group the consumer protocol runs (a mixed group; see
    // `a_classic_group_upgrades_...`), but only with the consumer protocol's type.
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("raw")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(""))
        .with_protocol_type(s("connect"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(bytes::Bytes::from_static(b"\x00\x01\x00\x00\x00\x00"))]);
    let r: JoinGroupResponse = c.request(ApiKey::JoinGroup, 5, &join);
    assert_eq!(r.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");

    // The group as ConsumerGroupDescribe and ListGroups v5 show it.
    let d: ConsumerGroupDescribeResponse = c.request(
        ApiKey::ConsumerGroupDescribe,
        0,
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(s("raw")), GroupId(s("nope"))]),
    );
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!((g.group_epoch, g.assignment_epoch), (1, 1));
    assert_eq!(g.assignor_name.as_str(), "uniform");
    assert_eq!(g.members.len(), 1);
    assert_eq!(
        g.members[0].assignment.topic_partitions[0]
            .topic_name
            .as_str(),
        "raw-topic"
    );
    assert_eq!(d.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
    let l: ListGroupsResponse = c.request(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]),
    );
    let listed: Vec<_> = l
        .groups
        .iter()
        .map(|g| (g.group_id.as_str(), g.group_type.as_str()))
        .collect();
    assert_eq!(listed, vec![("raw", "consumer")]);

    // Metadata by topic id (as the consumer looks up the topics of its assignment).
    let m: MetadataResponse = c.request(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default()
                .with_topic_id(topic_id)
                .with_name(None),
            metadata_request::MetadataRequestTopic::default()
                .with_topic_id(uuid::Uuid::from_bytes([3; 16]))
                .with_name(None),
        ])),
    );
    assert_eq!(
        m.topics[0].name.as_ref().map(|n| n.as_str()),
        Some("raw-topic")
    );
    assert_eq!(m.topics[0].partitions.len(), 4);
    assert_eq!(m.topics[1].error_code, 100, "UNKNOWN_TOPIC_ID");

    // The member leaves; the group is empty and may be deleted.
    let r = heartbeat(&mut c, 1, |q| {
        q.with_member_epoch(-1).with_topic_partitions(None)
    });
    assert_eq!((code(&r), r.member_epoch), (0, -1));
    let del: DeleteGroupsResponse = c.request(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("raw"))]),
    );
    assert_eq!(del.results[0].error_code, 0);
}

#[test]
fn a_member_keeps_its_epoch_and_partitions_across_a_coordinator_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    create(broker.addr, "raw-topic", 4);
    let mut c = RawConn::connect(broker.addr);
    let joined = heartbeat(&mut c, 1, |q| q);
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1));
    let r = heartbeat(&mut c, 1, |q| {
        q.with_member_id(s("member-b"))
            .with_subscribed_topic_regex(Some(s("raw-.*")))
            .with_subscribed_topic_names(None)
    });
    assert_eq!((r.error_code, r.member_epoch), (0, 2));
    drop(c);
    broker.shutdown().unwrap();

    // The group is rebuilt from __consumer_offsets: both members are known at their epochs.
    let broker = start_broker(dir.path(), 1, PROPS);
    let mut c = RawConn::connect(broker.addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let r = loop {
        let r = heartbeat(&mut c, 1, |q| {
            q.with_member_epoch(1).with_topic_partitions(None)
        });
        // COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE while the partition loads.
        if ![14, 15].contains(&r.error_code) || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(r.member_epoch, 1, "member-a still owes its revocation");
    let d: ConsumerGroupDescribeResponse = c.request(
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("raw"))]),
    );
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_epoch, 2);
    let mut members: Vec<(&str, i32)> = g
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.member_epoch))
        .collect();
    members.sort();
    assert_eq!(members, vec![("member-a", 1), ("member-b", 2)]);
    let b = g
        .members
        .iter()
        .find(|m| m.member_id.as_str() == "member-b")
        .unwrap();
    assert_eq!(
        b.subscribed_topic_regex.as_ref().map(|r| r.as_str()),
        Some("raw-.*")
    );
    broker.shutdown().unwrap();
}

/// A member on a three-node cluster whose group coordinator is killed -9: the next
/// coordinator rebuilds the group from `__consumer_offsets` and the member goes on at its epoch,
/// never losing its partitions, and reads everything written across the kill.
#[test]
fn a_member_keeps_its_partitions_when_its_coordinator_is_killed() {
    use common::cluster::{metadata, placement, Cluster};
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "group.consumer.min.heartbeat.interval.ms=100".into(),
        "group.consumer.heartbeat.interval.ms=300".into(),
        "replica.lag.time.max.ms=3000".into(),
    ];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    common::wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new("cg", 4, TopicReplication::Fixed(3)).set("min.insync.replicas", "2")],
    );
    common::wait_until("every replica in sync", || {
        placement(&all, "cg").1 == vec![1, 2, 3]
    });
    common::cluster::produce(&all, "cg", &[0, 1, 2, 3], 200, "before");
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &all)
        .set("group.id", "survivor")
        .set("group.protocol", "consumer")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&["cg"]).unwrap();
    let mut read = BTreeMap::new();
    poll_until(&[&c], &mut read, "the 200 records before", |r| {
        total(r) >= 200 && owned(&c).len() == 4
    });

    let coordinator = find_coordinator(cluster.nodes[0].client, "survivor");
    let describe = |addr: SocketAddr| -> Option<(i32, i32)> {
        let mut conn = RawConn::connect(addr);
        let d: ConsumerGroupDescribeResponse = conn.request(
            ApiKey::ConsumerGroupDescribe,
            0,
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("survivor"))]),
        );
        let g = d.groups.first().filter(|g| g.error_code == 0)?;
        Some((g.group_epoch, g.members.first()?.member_epoch))
    };
    let before = describe(cluster.nodes[(coordinator - 1) as usize].client).expect("described");
    cluster.kill((coordinator - 1) as usize);
    let others = cluster.bootstrap_except(coordinator);
    common::cluster::produce(&others, "cg", &[0, 1, 2, 3], 200, "after");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fewest = 4;
    while total(&read) < 400 {
        assert!(Instant::now() < deadline, "read {} of 400", total(&read));
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            read.entry(0).or_default().push(v);
        }
        fewest = fewest.min(owned(&c).len());
    }
    assert_eq!(
        fewest, 4,
        "the member lost partitions when its coordinator moved"
    );
    let now = find_coordinator(
        others.split(',').next().unwrap().parse().unwrap(),
        "survivor",
    );
    assert_ne!(now, coordinator);
    let after = describe(cluster.nodes[(now - 1) as usize].client)
        .expect("described by the new coordinator");
    assert_eq!(after, before, "the group and member epochs carried over");
    let distinct: BTreeSet<&String> = read.values().flatten().collect();
    assert_eq!(distinct.len(), 400);
}

/// The node coordinating `group`, as FindCoordinator v1 answers it through `addr`.
fn find_coordinator(addr: SocketAddr, group: &str) -> i32 {
    let req = FindCoordinatorRequest::default()
        .with_key(s(group))
        .with_key_type(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp: FindCoordinatorResponse =
            RawConn::connect(addr).request(ApiKey::FindCoordinator, 1, &req);
        if resp.error_code == 0 {
            return resp.node_id.0;
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator for {group}: {resp:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_groups_own_configs_change_what_its_members_are_told() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, PROPS);
    create(broker.addr, "raw-topic", 1);
    let mut c = RawConn::connect(broker.addr);
    let alter = |c: &mut RawConn, key: &str, value: &str| -> (i16, Option<String>) {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(s("raw"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s(key))
                    .with_config_operation(0)
                    .with_value(Some(s(value)))]),
        ]);
        let r: IncrementalAlterConfigsResponse =
            c.request(ApiKey::IncrementalAlterConfigs, 1, &req);
        let r = &r.responses[0];
        (
            r.error_code,
            r.error_message.as_ref().map(|m| m.to_string()),
        )
    };
    assert_eq!(heartbeat(&mut c, 1, |q| q).heartbeat_interval_ms, 300);
    assert_eq!(
        alter(&mut c, "consumer.heartbeat.interval.ms", "900"),
        (0, None)
    );
    let r = heartbeat(&mut c, 1, |q| {
        q.with_member_epoch(1).with_topic_partitions(None)
    });
    assert_eq!((r.error_code, r.heartbeat_interval_ms), (0, 900));
    // Outside the broker's bounds, or not a group config: INVALID_CONFIG, saying why.
    let (code, msg) = alter(&mut c, "consumer.session.timeout.ms", "500");
    assert_eq!(code, 40, "{msg:?}");
    assert!(msg
        .unwrap()
        .contains("group.consumer.min.session.timeout.ms"));
    assert_eq!(alter(&mut c, "session.timeout.ms", "10000").0, 40);
    let d: DescribeConfigsResponse = c.request(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(s("raw"))
                .with_configuration_keys(None),
        ]),
    );
    let configs: BTreeMap<String, (String, i8)> = d.results[0]
        .configs
        .iter()
        .map(|e| {
            (
                e.name.to_string(),
                (
                    e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                    e.config_source,
                ),
            )
        })
        .collect();
    assert_eq!(
        configs["consumer.heartbeat.interval.ms"],
        ("900".to_string(), 8)
    );
    assert_eq!(
        configs["consumer.session.timeout.ms"],
        ("6000".to_string(), 5)
    );
}

/// The type ListGroups v5 gives `group` ("classic", "consumer"), or "" when it is not listed.
fn group_type(addr: SocketAddr, group: &str) -> String {
    let l: ListGroupsResponse =
        RawConn::connect(addr).request(ApiKey::ListGroups, 5, &ListGroupsRequest::default());
    l.groups
        .iter()
        .find(|g| g.group_id.as_str() == group)
        .map(|g| g.group_type.to_string())
        .unwrap_or_default()
}

/// Whether the consumers own `n` partitions between them, none twice.
fn cover(consumers: &[&BaseConsumer], n: usize) -> bool {
    let sets: Vec<BTreeSet<(String, i32)>> = consumers.iter().map(|c| owned(c)).collect();
    let all: BTreeSet<&(String, i32)> = sets.iter().flatten().collect();
    all.len() == n && sets.iter().map(BTreeSet::len).sum::<usize>() == n
}

#[test]
fn a_classic_group_upgrades_when_a_consumer_member_joins_and_downgrades_when_it_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let mut props = PROPS.to_vec();
    props.push(("group.initial.rebalance.delay.ms", "0"));
    let broker = start_broker(dir.path(), 2, &props);
    let addr = broker.addr;
    create(addr, "mixed", 6);
    produce(addr, "mixed", 600, "a");
    let classic = |client: &str| {
        consumer(
            addr,
            "mixed-g",
            &[
                ("group.protocol", "classic"),
                ("client.id", client),
                ("session.timeout.ms", "6000"),
                ("heartbeat.interval.ms", "200"),
            ],
        )
    };
    let (c1, c2) = (classic("c1"), classic("c2"));
    c1.subscribe(&["mixed"]).unwrap();
    c2.subscribe(&["mixed"]).unwrap();
    let mut read = BTreeMap::new();
    poll_until(
        &[&c1, &c2],
        &mut read,
        "two classic members sharing",
        |_| cover(&[&c1, &c2], 6) && !owned(&c1).is_empty() && !owned(&c2).is_empty(),
    );
    assert_eq!(group_type(addr, "mixed-g"), "classic");

    // A member of the consumer protocol joins: the group becomes a consumer group, and the
    // classic members rejoin it and give it partitions.
    let k = consumer(addr, "mixed-g", &[]);
    k.subscribe(&["mixed"]).unwrap();
    poll_until(
        &[&c1, &c2, &k],
        &mut read,
        "three members of two protocols sharing",
        |_| cover(&[&c1, &c2, &k], 6) && [&c1, &c2, &k].iter().all(|c| !owned(c).is_empty()),
    );
    assert_eq!(group_type(addr, "mixed-g"), "consumer");
    let d: ConsumerGroupDescribeResponse = RawConn::connect(addr).request(
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("mixed-g"))]),
    );
    let mut types: Vec<i8> = d.groups[0].members.iter().map(|m| m.member_type).collect();
    types.sort();
    assert_eq!(
        types,
        vec![0, 0, 1],
        "two classic members and one of the consumer protocol"
    );

    // It leaves: only classic members remain, and the group is classic again.
    k.unsubscribe();
    poll_until(
        &[&c1, &c2, &k],
        &mut read,
        "the classic members owning everything",
        |_| owned(&k).is_empty() && cover(&[&c1, &c2], 6),
    );
    drop(k);
    common::wait_until("the group to be classic again", || {
        group_type(addr, "mixed-g") == "classic"
    });
    poll_until(&[&c1, &c2], &mut read, "all 600 messages read", |r| {
        r.values().flatten().collect::<BTreeSet<_>>().len() == 600
    });
    // Stable as a classic group: both still share the partitions.
    poll_until(
        &[&c1, &c2],
        &mut read,
        "two classic members sharing again",
        |_| cover(&[&c1, &c2], 6) && !owned(&c1).is_empty() && !owned(&c2).is_empty(),
    );
}
