//! A follower fetches a new replicated partition at once: its fetcher to that leader may be
//! parked in a long poll on the partitions it already follows (`replica.fetch.wait.max.ms`),
//! and the new partition's first write must not wait for that poll to end before the high
//! watermark covers it.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use tributary_protocol::record_batch::build_batch;

use common::cluster::{leaders, metadata, placement, Cluster};
use common::{rd_create_topics, wait_until, RawConn};

/// Far above the bound below, so a fetch parked for it cannot pass for a prompt one.
const FETCH_WAIT_MS: u64 = 5000;
/// New topics measured; the best one counts, so one slow moment of a loaded machine does not.
const NEW_TOPICS: usize = 5;
/// From an acks=1 write to the high watermark covering it, for the best of the new topics.
const HIGH_WATERMARK_LAG_MAX: Duration = Duration::from_millis(200);
/// How often the leader's high watermark is asked for.
const POLL_PAUSE: Duration = Duration::from_millis(1);

/// One acks=1 produce of a single record to partition 0 of `topic`, raw; its error code.
fn produce_acks_1(conn: &mut RawConn, topic: &str) -> i16 {
    let batch = build_batch(&[(None, Some(b"v".as_slice()))], 1_700_000_000_000, None).freeze();
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(3000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))])]);
    let resp: ProduceResponse = conn.request(ApiKey::Produce, 8, &req);
    resp.responses[0].partition_responses[0].error_code
}

/// ListOffsets v1 LATEST of partition 0 of `topic`: the high watermark (-1 on an error).
fn high_watermark(conn: &mut RawConn, topic: &str) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, 1, &req);
    let p = &resp.topics[0].partitions[0];
    if p.error_code == 0 {
        p.offset
    } else {
        -1
    }
}

/// Creates `topic` (one partition, three replicas), writes one record with acks=1 to its
/// leader and returns how long after the acknowledgement the leader's high watermark covered it.
fn write_to_new_topic(cluster: &Cluster, topic: &str) -> Duration {
    let all = cluster.all_bootstrap();
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(topic, 1, TopicReplication::Fixed(3))],
    );
    wait_until("the new topic has a leader", || {
        placement(&all, topic).0 > 0
    });
    let (leader, _) = placement(&all, topic);
    let addr: SocketAddr = cluster.nodes[(leader - 1) as usize].client;
    let mut conn = RawConn::connect(addr);
    // The leader may take a moment to apply the image that makes it lead.
    let deadline = Instant::now() + Duration::from_secs(30);
    while produce_acks_1(&mut conn, topic) != 0 {
        assert!(
            Instant::now() < deadline,
            "{topic}: the leader takes no write"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let acked = Instant::now();
    let limit = Duration::from_millis(FETCH_WAIT_MS * 3);
    while high_watermark(&mut conn, topic) < 1 {
        assert!(
            acked.elapsed() < limit,
            "{topic}: the high watermark never covered the write"
        );
        std::thread::sleep(POLL_PAUSE);
    }
    acked.elapsed()
}

#[test]
fn a_new_partitions_high_watermark_follows_an_acks_1_write_at_once() {
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![format!("replica.fetch.wait.max.ms={FETCH_WAIT_MS}")];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    // Partitions led by every broker: each broker's fetcher to each other broker is running,
    // parked on them, when the new topics come.
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new("existing", 3, TopicReplication::Fixed(3))],
    );
    wait_until(
        "every broker leads an existing partition, all in sync",
        || {
            let mut l = leaders(&all, "existing");
            l.sort_unstable();
            let m = metadata(&all, Some("existing"));
            l == vec![1, 2, 3]
                && m.topics()[0]
                    .partitions()
                    .iter()
                    .all(|p| p.isr().len() == 3)
        },
    );
    let lags: Vec<Duration> = (0..NEW_TOPICS)
        .map(|i| write_to_new_topic(&cluster, &format!("fresh-{i}")))
        .collect();
    eprintln!("high watermark behind the acks=1 write by {lags:?}");
    let best = lags.iter().min().copied().unwrap_or(Duration::MAX);
    assert!(
        best < HIGH_WATERMARK_LAG_MAX,
        "the high watermark of a new partition trailed an acks=1 write by {lags:?} \
         (replica.fetch.wait.max.ms={FETCH_WAIT_MS})"
    );
}
