//! CreatePartitions with an explicit replica assignment on replicated topics, over the wire
//! against three `tributary` processes: each new partition gets exactly the brokers given
//! (the first its preferred leader), as many as the topic's partitions have replicas, and takes
//! and serves records at once; an assignment of the wrong size, naming a broker twice or one
//! that is not registered, or the wrong number of them, is INVALID_REPLICA_ASSIGNMENT saying
//! what was wrong. The topics come three ways, as a replication factor reaches a topic:
//! CreateTopics with `replication_factor=3`, auto-creation under `default.replication.factor=3`,
//! and CreateTopics with a manual assignment.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsResponse;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::{ApiKey, BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use common::cluster::{metadata, produce, Cluster};
use common::{rd_create_topics, wait_until, RawConn};

const INVALID_REPLICA_ASSIGNMENT: i16 = RDKafkaErrorCode::InvalidReplicaAssignment as i16;

/// (replicas in order, leader, sorted ISR) of each partition of `topic`, in partition order.
fn partitions(bootstrap: &str, topic: &str) -> Vec<(Vec<i32>, i32, Vec<i32>)> {
    let m = metadata(bootstrap, Some(topic));
    let mut ps: Vec<_> = m.topics()[0]
        .partitions()
        .iter()
        .map(|p| {
            let mut isr = p.isr().to_vec();
            isr.sort_unstable();
            (p.id(), (p.replicas().to_vec(), p.leader(), isr))
        })
        .collect();
    ps.sort_by_key(|(id, _)| *id);
    ps.into_iter().map(|(_, p)| p).collect()
}

/// Asks for `topic`'s metadata allowing auto-creation (librdkafka's metadata calls cannot).
fn auto_create(addr: SocketAddr, topic: &str) {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))]))
        .with_allow_auto_topic_creation(true);
    let _: MetadataResponse = RawConn::connect(addr).request(ApiKey::Metadata, 9, &req);
}

/// One CreatePartitions topic as a raw request (to read the error message too):
/// (error code, message).
fn raw_grow(addr: SocketAddr, topic: &str, count: i32, assignment: &[&[i32]]) -> (i16, String) {
    let assignments = assignment
        .iter()
        .map(|r| {
            CreatePartitionsAssignment::default()
                .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
        })
        .collect();
    let t = CreatePartitionsTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.into())))
        .with_count(count)
        .with_assignments(Some(assignments));
    let req = CreatePartitionsRequest::default()
        .with_topics(vec![t])
        .with_timeout_ms(20_000);
    let resp: CreatePartitionsResponse =
        RawConn::connect(addr).request(ApiKey::CreatePartitions, 3, &req);
    assert_eq!(resp.results.len(), 1);
    let r = &resp.results[0];
    let msg = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, msg.unwrap_or_default())
}

/// Grows `topic` to `count` partitions with `assignment` through librdkafka's admin client.
fn grow(bootstrap: &str, topic: &str, count: usize, assignment: &[&[i32]]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let o = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let p = NewPartitions::new(topic, count).assign(assignment);
    let res =
        futures::executor::block_on(admin.create_partitions([&p], &o)).expect("CreatePartitions");
    assert_eq!(res.len(), 1);
    if let Err((_, code)) = &res[0] {
        panic!("CreatePartitions {topic} to {count} with {assignment:?}: {code:?}");
    }
}

/// Every payload in `parts` of `topic` from the start, read until `count` arrived (60 s at
/// most): (partition, payload).
fn read_parts(bootstrap: &str, topic: &str, parts: &[i32], count: usize) -> Vec<(i32, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("read-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < count && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.push((m.partition(), v));
        }
    }
    out
}

/// Grows `topic` (two partitions, three replicas) by two partitions on the brokers given, and
/// checks where they went and that they take and serve records.
fn grow_and_use(cluster: &Cluster, topic: &str) {
    let all = cluster.all_bootstrap();
    wait_until(
        &format!("{topic}: two partitions with three replicas"),
        || {
            let ps = partitions(&all, topic);
            ps.len() == 2 && ps.iter().all(|(r, _, isr)| r.len() == 3 && isr.len() == 3)
        },
    );
    let given: [&[i32]; 2] = [&[3, 1, 2], &[2, 3, 1]];
    grow(&all, topic, 4, &given);
    wait_until(
        &format!("{topic}: the new partitions led and in sync"),
        || {
            let ps = partitions(&all, topic);
            ps.len() == 4
                && ps[2..]
                    .iter()
                    .zip(given)
                    .all(|((r, leader, isr), g)| r == g && *leader == g[0] && isr == &[1, 2, 3])
        },
    );
    produce(&all, topic, &[2, 3], 40, topic);
    let got = read_parts(&all, topic, &[2, 3], 40);
    assert_eq!(got.len(), 40, "{topic}: read back {got:?}");
    for p in [2, 3] {
        assert_eq!(
            got.iter().filter(|(q, _)| *q == p).count(),
            20,
            "{topic}: partition {p} holds what was produced to it: {got:?}"
        );
    }
    for i in 0..40 {
        let v = format!("{topic}-{i}");
        assert!(got.iter().any(|(_, g)| *g == v), "{topic}: {v} missing");
    }
}

/// The refusals, each on `topic` (four partitions of three replicas by now): the code and what
/// the message must say.
fn refuses_bad_assignments(addr: SocketAddr, topic: &str) {
    let cases: [(i32, &[&[i32]], &str); 5] = [
        (5, &[&[1, 2]], "with 2 replica(s)"),
        (5, &[&[2]], "with 1 replica(s)"),
        (5, &[&[1, 2, 1]], "broker 1 more than once"),
        (
            5,
            &[&[1, 2, 7]],
            "broker 7, but no such broker is registered",
        ),
        (6, &[&[1, 2, 3]], "add 2 additional partition(s), but 1"),
    ];
    for (count, assignment, says) in cases {
        let (code, msg) = raw_grow(addr, topic, count, assignment);
        assert_eq!(
            code, INVALID_REPLICA_ASSIGNMENT,
            "{topic} to {count} with {assignment:?}: {msg}"
        );
        assert!(
            msg.contains(says),
            "{topic} with {assignment:?}: {msg:?} should say {says:?}"
        );
    }
    assert_eq!(
        partitions(&addr.to_string(), topic).len(),
        4,
        "nothing added"
    );
}

#[test]
fn explicit_assignments_on_replicated_topics_place_the_new_partitions_as_given() {
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "default.replication.factor=3".into(),
        "num.partitions=2".into(),
    ];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    let addr = cluster.nodes[0].client;
    rd_create_topics(
        addr,
        &[
            NewTopic::new("rf3", 2, TopicReplication::Fixed(3)),
            NewTopic::new(
                "manual",
                2,
                TopicReplication::Variable(&[&[1, 2, 3], &[2, 3, 1]]),
            ),
        ],
    );
    auto_create(addr, "auto");
    for topic in ["rf3", "auto", "manual"] {
        grow_and_use(&cluster, topic);
        refuses_bad_assignments(addr, topic);
    }
}
