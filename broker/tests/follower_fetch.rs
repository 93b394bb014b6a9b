//! KIP-392 on three nodes in three racks with Kafka's `RackAwareReplicaSelector`: a consumer
//! with a `client.rack` reads every partition from the replica in its rack (the leader names
//! it, `preferred_read_replica`; the follower serves up to its high watermark), as each node's
//! bytes-out counter shows, and keeps reading everything, in order, across a leader's kill.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{metadata, placement, Cluster};
use common::{rd_create_topics, wait_until, RawConn};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "racked";
const BYTES_OUT: &str = "kafka_server_brokertopicmetrics_bytesout_total{topic=\"racked\"}";

fn start() -> Cluster {
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector".into(),
        "replica.lag.time.max.ms=3000".into(),
    ];
    for (i, n) in cluster.nodes.iter_mut().enumerate() {
        n.extra = vec![format!("broker.rack=rack-{}", i + 1)];
    }
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 3, TopicReplication::Fixed(3)).set("min.insync.replicas", "2")],
    );
    wait_until("every replica in sync", || {
        placement(&all, TOPIC).1 == vec![1, 2, 3]
    });
    cluster
}

fn reader(bootstrap: &str, rack: &str) -> BaseConsumer {
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{rack}"))
        .set("client.rack", rack)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    c
}

/// Reads until `n` records arrived (60 s at most): (partition, offset, value) in arrival order.
fn read(c: &BaseConsumer, n: usize) -> Vec<(i32, i64, String)> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n {
        assert!(Instant::now() < deadline, "read {} of {n}", out.len());
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.push((m.partition(), m.offset(), v));
        }
    }
    out
}

fn bytes_out(cluster: &Cluster) -> Vec<i64> {
    (0..3)
        .map(|i| cluster.gauge(i, BYTES_OUT).unwrap_or(0))
        .collect()
}

#[test]
fn each_consumer_reads_from_the_replica_in_its_rack() {
    let cluster = start();
    let all = cluster.all_bootstrap();
    // Metadata names each broker's rack.
    let m: MetadataResponse = RawConn::connect(cluster.nodes[0].client).request(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    );
    let racks: BTreeMap<i32, String> = m
        .brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                b.rack.as_ref().map(|r| r.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(racks[&1], "rack-1");
    assert_eq!(racks[&3], "rack-3");
    common::cluster::produce(&all, TOPIC, &[0, 1, 2], 300, "r");
    for rack in 1..=3usize {
        let before = bytes_out(&cluster);
        let c = reader(&all, &format!("rack-{rack}"));
        let got = read(&c, 300);
        assert_eq!(got.len(), 300);
        drop(c);
        let after = bytes_out(&cluster);
        let delta: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let total: i64 = delta.iter().sum();
        assert!(
            delta[rack - 1] * 10 >= total * 9,
            "rack-{rack}'s consumer read {delta:?} bytes from nodes 1-3: most should come from node {rack}"
        );
    }
}

#[test]
fn a_rack_consumer_reads_everything_in_order_across_a_leader_kill() {
    let mut cluster = start();
    let all = cluster.all_bootstrap();
    common::cluster::produce(&all, TOPIC, &[0, 1, 2], 150, "before");
    let c = reader(&all, "rack-1");
    let mut got = read(&c, 150);
    // Kill the leader of partition 0 unless it is the consumer's own rack's node, then the
    // leader of another partition.
    let leaders = common::cluster::leaders(&all, TOPIC);
    let victim = leaders
        .iter()
        .copied()
        .find(|l| *l != 1)
        .unwrap_or(leaders[0]);
    cluster.kill((victim - 1) as usize);
    let others = cluster.bootstrap_except(victim);
    common::cluster::produce(&others, TOPIC, &[0, 1, 2], 150, "after");
    got.extend(read(&c, 150));
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, offset, _) in &got {
        if let Some(prev) = last.insert(*p, *offset) {
            assert_eq!(
                *offset,
                prev + 1,
                "partition {p}: offsets in order, none skipped"
            );
        }
    }
    let values: std::collections::BTreeSet<&String> = got.iter().map(|(_, _, v)| v).collect();
    assert_eq!(values.len(), 300, "every record once");
}
