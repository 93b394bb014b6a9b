//! Partition reassignment (KIP-455) on a four-process cluster: a partition moved to other
//! brokers while an idempotent acks=all producer writes to it loses and doubles nothing, the
//! new replicas lead it, and the old ones delete their copy; bad targets are refused with
//! Kafka's codes, and a reassignment cancelled mid-way puts the original replicas back.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_partition_reassignments_response::OngoingTopicReassignment;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;

use common::cluster::{metadata, read_until_all, Cluster, Writer};
use common::{rd_create_topics, wait_until, RawConn};

const TOPIC: &str = "moving";
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// (leader, replicas in the order Metadata lists them) of partition 0.
fn placement(bootstrap: &str) -> (i32, Vec<i32>) {
    let m = metadata(bootstrap, Some(TOPIC));
    let p = &m.topics()[0].partitions()[0];
    (p.leader(), p.replicas().to_vec())
}

/// AlterPartitionReassignments v0 for partition `partition` of `TOPIC`; its error code.
fn reassign(conn: &mut RawConn, partition: i32, to: Option<&[i32]>) -> i16 {
    reassign_v(conn, 0, true, partition, to)
}

/// AlterPartitionReassignments at `version` (v1: with `allow_rf`, KIP-860); its error code.
fn reassign_v(
    conn: &mut RawConn,
    version: i16,
    allow_rf: bool,
    partition: i32,
    to: Option<&[i32]>,
) -> i16 {
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_allow_replication_factor_change(allow_rf)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    to.map(|r| r.iter().map(|&b| BrokerId(b)).collect()),
                )])]);
    let resp: AlterPartitionReassignmentsResponse =
        conn.request(ApiKey::AlterPartitionReassignments, version, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(resp.allow_replication_factor_change, allow_rf);
    resp.responses[0].partitions[0].error_code
}

/// ListPartitionReassignments v0 for every partition.
fn in_progress(conn: &mut RawConn) -> Vec<OngoingTopicReassignment> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(None);
    let resp: ListPartitionReassignmentsResponse =
        conn.request(ApiKey::ListPartitionReassignments, 0, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.topics
}

/// Four nodes and `TOPIC` (one partition, two replicas) moved onto brokers 1 and 2.
fn start() -> (Cluster, RawConn) {
    let mut cluster = Cluster::new(4);
    cluster.extra = vec!["replica.lag.time.max.ms=3000".into()];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("four brokers", || metadata(&all, None).brokers().len() == 4);
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 1, TopicReplication::Fixed(2))],
    );
    let mut conn = RawConn::connect(cluster.nodes[0].client);
    // Placement is random; a first reassignment puts it where the test wants it.
    assert_eq!(reassign(&mut conn, 0, Some(&[1, 2])), 0);
    wait_until("the partition on brokers 1 and 2", || {
        let (leader, replicas) = placement(&all);
        replicas == vec![1, 2] && [1, 2].contains(&leader) && in_progress(&mut conn).is_empty()
    });
    (cluster, conn)
}

#[test]
fn a_partition_moves_under_acks_all_writes_without_losing_or_doubling_a_record() {
    let (cluster, mut conn) = start();
    let all = cluster.all_bootstrap();
    let writer = Writer::start(
        all.clone(),
        TOPIC,
        0,
        &[("message.timeout.ms", "30000"), ("linger.ms", "2")],
        Duration::from_millis(1),
        Duration::from_secs(40),
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(reassign(&mut conn, 0, Some(&[3, 4])), 0);
    // Mid-way (or already done) Metadata lists every replica, old and new; the node that
    // answered the request has applied it.
    let (_, replicas) = placement(&cluster.bootstrap(0));
    assert!(
        replicas == vec![3, 4, 1, 2] || replicas == vec![3, 4],
        "{replicas:?}"
    );
    wait_until("the reassignment to complete", || {
        let (leader, replicas) = placement(&all);
        replicas == vec![3, 4] && [3, 4].contains(&leader) && in_progress(&mut conn).is_empty()
    });
    std::thread::sleep(Duration::from_millis(1000));
    let (sent, acked) = writer.stop();
    let acked: Vec<String> = acked.into_iter().map(|a| a.value).collect();
    assert!(
        acked.len() > 100,
        "too little was acknowledged to judge: {} of {sent}",
        acked.len()
    );
    let log = read_until_all(&all, TOPIC, &acked, Duration::from_secs(30));
    let mut seen: HashMap<&String, usize> = HashMap::new();
    for v in &log {
        *seen.entry(v).or_insert(0) += 1;
    }
    let lost: Vec<&String> = acked.iter().filter(|v| !seen.contains_key(v)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        doubled.is_empty(),
        "records written twice: {:?}",
        &doubled[..doubled.len().min(5)]
    );
    // The old replicas deleted their copy (Kafka's StopReplica with delete).
    for i in [0, 1] {
        let dir = cluster.nodes[i].dir.join(format!("{TOPIC}-0"));
        wait_until("the old replica's directory removed", || !dir.exists());
    }
    for i in [2, 3] {
        let dir = cluster.nodes[i].dir.join(format!("{TOPIC}-0"));
        assert!(dir.exists(), "{} holds no copy", dir.display());
    }
}

#[test]
fn bad_reassignments_are_refused_and_a_cancel_puts_the_original_replicas_back() {
    let (mut cluster, mut conn) = start();
    let all = cluster.all_bootstrap();
    assert_eq!(
        reassign(&mut conn, 0, Some(&[1, 9])),
        INVALID_REPLICA_ASSIGNMENT
    );
    assert_eq!(
        reassign(&mut conn, 0, Some(&[3, 3])),
        INVALID_REPLICA_ASSIGNMENT
    );
    assert_eq!(
        reassign(&mut conn, 0, Some(&[])),
        INVALID_REPLICA_ASSIGNMENT
    );
    assert_eq!(
        reassign(&mut conn, 7, Some(&[3, 4])),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(reassign(&mut conn, 0, None), NO_REASSIGNMENT_IN_PROGRESS);
    // v1 without a replication-factor change allowed (KIP-860).
    assert_eq!(
        reassign_v(&mut conn, 1, false, 0, Some(&[1, 2, 3])),
        INVALID_REPLICATION_FACTOR
    );
    assert_eq!(placement(&all).1, vec![1, 2], "nothing changed");
    // Broker 4 is down: a move onto it cannot complete, so it can be seen and cancelled.
    cluster.kill(3);
    let live = cluster.nodes[..3]
        .iter()
        .map(|n| n.client.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // Fenced (it stays registered): the quorum has a leader again if it was broker 4.
    wait_until("broker 4 fenced", || {
        metadata(&live, None).brokers().len() == 3
    });
    assert_eq!(reassign(&mut conn, 0, Some(&[1, 4])), 0);
    let ongoing = in_progress(&mut conn);
    assert_eq!(ongoing.len(), 1, "{ongoing:?}");
    let p = &ongoing[0].partitions[0];
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(ids(&p.replicas), vec![1, 4, 2]);
    assert_eq!(ids(&p.adding_replicas), vec![4]);
    assert_eq!(ids(&p.removing_replicas), vec![2]);
    assert_eq!(placement(&cluster.bootstrap(0)).1, vec![1, 4, 2]);
    assert_eq!(reassign(&mut conn, 0, None), 0);
    assert!(in_progress(&mut conn).is_empty());
    assert_eq!(placement(&cluster.bootstrap(0)).1, vec![1, 2]);
    assert_eq!(reassign(&mut conn, 0, None), NO_REASSIGNMENT_IN_PROGRESS);
    // Still served by its original replicas.
    common::cluster::produce(&live, TOPIC, &[0], 10, "after-cancel");
}

/// A replica down while its topic is deleted and created again (same name, new id) must not
/// serve the old topic's data as the new one's: at start-up it sets the old directory aside
/// (Kafka's stray partitions), and once placed on the new topic it holds only the new data.
#[test]
fn a_replica_down_while_its_topic_is_recreated_sets_the_old_data_aside() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let (mut cluster, mut conn) = start();
    let all = cluster.all_bootstrap();
    common::cluster::produce(&all, TOPIC, &[0], 20, "old");
    let node2 = cluster.nodes[1].dir.clone();
    wait_until("broker 2 holds the old data", || {
        cluster.kill(1);
        let held = common::cluster::values_on_disk(node2.clone(), TOPIC, 0).len() == 20;
        if !held {
            cluster.spawn(1);
            cluster.wait_listening(1);
        }
        held
    });
    let live = [0, 2, 3]
        .iter()
        .map(|&i| cluster.nodes[i].client.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &live)
        .create()
        .unwrap();
    // Broker 2 may have been the active controller: retried until a new one answers.
    wait_until("the topic deleted", || {
        let deleted =
            futures::executor::block_on(admin.delete_topics(&[TOPIC], &AdminOptions::new()))
                .unwrap();
        deleted.iter().all(|r| {
            r.is_ok()
                || r.as_ref().err().map(|(_, e)| *e)
                    == Some(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition)
        })
    });
    wait_until("the topic gone", || {
        metadata(&live, None)
            .topics()
            .iter()
            .all(|t| t.name() != TOPIC)
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(
            TOPIC,
            1,
            TopicReplication::Variable(&[&[1, 3]]),
        )],
    );
    common::cluster::produce(&live, TOPIC, &[0], 10, "new");

    cluster.spawn(1);
    cluster.wait_listening(1);
    let aside = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("{TOPIC}-0.")) && n.ends_with("-stray"))
            .collect()
    };
    wait_until("the old directory set aside", || aside(&node2).len() == 1);
    assert!(!node2.join(format!("{TOPIC}-0")).exists());
    assert!(cluster
        .log(1)
        .contains("stray partition directory set aside"));

    // Placed on broker 2 again, it starts empty and copies only the new topic's data.
    let mut conn2 = RawConn::connect(cluster.nodes[0].client);
    assert_eq!(reassign(&mut conn2, 0, Some(&[1, 2])), 0);
    wait_until("the move done", || {
        placement(&all).1 == vec![1, 2] && in_progress(&mut conn).is_empty()
    });
    let want: Vec<String> = (0..10).map(|i| format!("new-{i}")).collect();
    wait_until("broker 2 holds the new data", || {
        cluster.kill(1);
        let on_disk = common::cluster::values_on_disk(node2.clone(), TOPIC, 0);
        cluster.spawn(1);
        cluster.wait_listening(1);
        on_disk == want
    });
    let dir = node2.join(format!("{TOPIC}-0"));
    let recorded = std::fs::read_to_string(dir.join("partition.metadata")).unwrap();
    assert!(recorded.contains("topic_id: "), "{recorded}");
}
