//! DeleteRecords on a replicated partition holds on every replica (KIP-107): the followers take
//! the leader's log start offset from its fetch answers and delete the segments below it, so
//! whichever replica leads later — after the leader is killed, and after it rejoins — answers
//! ListOffsets EARLIEST and a consumer reading from the beginning at the deleted-up-to offset.
//! A replica that was down while the leader deleted past its log end finds its fetch offset
//! below the leader's log start (OFFSET_OUT_OF_RANGE) and starts over there.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use common::cluster::{metadata, placement, produce, Cluster};
use common::{rd_create_topics, wait_until};

const TOPIC: &str = "trimmed";
/// Small segments, so a DeleteRecords leaves whole segments below the new log start.
const SEGMENT_BYTES: &str = "2048";
/// The first DeleteRecords, with every replica up.
const FIRST_DELETE_BEFORE: i64 = 200;
/// How long a consumer may take to return its first record.
const FIRST_RECORD_WAIT: Duration = Duration::from_secs(30);

/// DeleteRecords of partition 0 below `before`, with librdkafka's admin client (it asks the
/// leader): the low watermark answered.
fn delete_records(bootstrap: &str, before: i64) -> i64 {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Offset(before))
        .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let out =
        futures::executor::block_on(admin.delete_records(&tpl, &opts)).expect("DeleteRecords");
    let p = out
        .find_partition(TOPIC, 0)
        .expect("the partition in the answer");
    assert!(p.error().is_ok(), "DeleteRecords: {:?}", p.error());
    match p.offset() {
        Offset::Offset(low) => low,
        other => panic!("DeleteRecords answered the low watermark {other:?}"),
    }
}

/// ListOffsets v1 EARLIEST of partition 0 on the broker at `addr`, raw: (error, offset).
fn earliest(addr: SocketAddr) -> (i16, i64) {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-2)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, 1, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// The offset of the first record a consumer assigned partition 0 from the beginning gets.
fn first_offset(bootstrap: &str) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = Instant::now() + FIRST_RECORD_WAIT;
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            return m.offset();
        }
    }
    panic!("no record from {bootstrap} within {FIRST_RECORD_WAIT:?}");
}

/// The value of `series` (name and labels) on node `i`'s metrics endpoint.
fn metric_on(cluster: &Cluster, i: usize, series: &str) -> Option<i64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(cluster.nodes[i].metrics).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let series = format!("{series} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
}

/// Node `i`'s log start offset of partition 0, from its metrics endpoint.
fn log_start_on(cluster: &Cluster, i: usize) -> Option<i64> {
    let series = format!("kafka_log_log_logstartoffset{{topic=\"{TOPIC}\",partition=\"0\"}}");
    metric_on(cluster, i, &series)
}

/// A follower's fetch cycles show in its stage histograms: answered fetches, and answers
/// applied (appended and made durable).
fn assert_follower_stages(cluster: &Cluster, leader: i32) {
    let stage = |i: usize, s: &str| {
        let series = format!("tributary_replica_fetch_stage_seconds_count{{stage=\"{s}\"}}");
        metric_on(cluster, i, &series).unwrap_or(-1)
    };
    for (i, node) in cluster.nodes.iter().enumerate() {
        if node.id == leader {
            continue;
        }
        let (answer, apply) = (stage(i, "answer"), stage(i, "apply"));
        assert!(
            answer > 0 && apply > 0,
            "node {}: answer {answer}, apply {apply}",
            node.id
        );
    }
}

/// The base offset of the oldest segment file of partition 0 in node `i`'s data directory.
fn oldest_segment_on(cluster: &Cluster, i: usize) -> Option<i64> {
    let dir = cluster.nodes[i].dir.join(format!("{TOPIC}-0"));
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse::<i64>().ok()
        })
        .min()
}

/// Waits until every running node's copy starts at `low`: the followers learn it from their
/// next fetch answer (Kafka's DeleteRecords itself waits for that).
fn wait_log_start_everywhere(cluster: &Cluster, low: i64) {
    for (i, node) in cluster.nodes.iter().enumerate() {
        if node.child.is_none() {
            continue;
        }
        wait_until(&format!("node {} starts its log at {low}", node.id), || {
            log_start_on(cluster, i) == Some(low)
        });
    }
}

/// The broker `leader` answers EARLIEST with `low`, and a consumer reading from the beginning
/// through it starts there.
fn assert_serves_from(cluster: &Cluster, leader: i32, low: i64, when: &str) {
    let addr = cluster.nodes[(leader - 1) as usize].client;
    // Just elected, it may not have applied the image that makes it the leader yet.
    wait_until(
        &format!("{when}: node {leader} answers ListOffsets"),
        || earliest(addr).0 == 0,
    );
    assert_eq!(
        earliest(addr),
        (0, low),
        "{when}: ListOffsets EARLIEST on the leader, node {leader}"
    );
    assert_eq!(
        first_offset(&addr.to_string()),
        low,
        "{when}: the first record a consumer reads from the beginning on node {leader}"
    );
}

fn start() -> Cluster {
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "replica.lag.time.max.ms=3000".into(),
        // Leadership moves only when the test moves it.
        "auto.leader.rebalance.enable=false".into(),
    ];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 1, TopicReplication::Fixed(3))
            .set("segment.bytes", SEGMENT_BYTES)
            .set("min.insync.replicas", "2")],
    );
    wait_until("every replica in sync", || {
        placement(&all, TOPIC).1 == vec![1, 2, 3]
    });
    cluster
}

#[test]
fn deleted_records_stay_deleted_whichever_replica_leads() {
    let mut cluster = start();
    let all = cluster.all_bootstrap();
    // Ten produces of thirty: batches of about a kilobyte, two to a segment.
    for round in 0..10 {
        produce(&all, TOPIC, &[0], 30, &format!("a{round}"));
    }
    assert_follower_stages(&cluster, placement(&all, TOPIC).0);
    let mut log_end: i64 = 300;
    let mut low = FIRST_DELETE_BEFORE;
    assert_eq!(delete_records(&all, low), low);
    wait_log_start_everywhere(&cluster, low);
    for i in 0..cluster.nodes.len() {
        let oldest = oldest_segment_on(&cluster, i).expect("segment files");
        assert!(
            oldest > 0 && oldest <= low,
            "node {}: the segments wholly below {low} are deleted (oldest starts at {oldest})",
            cluster.nodes[i].id
        );
    }
    let mut leaders_seen = Vec::new();
    for round in 0..3 {
        let (leader, _) = placement(&all, TOPIC);
        assert!(leader > 0, "round {round}: no leader");
        assert_serves_from(&cluster, leader, low, &format!("round {round}, before"));
        let li = (leader - 1) as usize;
        cluster.kill(li);
        let others = cluster.bootstrap_except(leader);
        wait_until("another replica leads", || {
            let (l, _) = placement(&others, TOPIC);
            l > 0 && l != leader
        });
        let (now, _) = placement(&others, TOPIC);
        leaders_seen.push(now);
        assert_serves_from(&cluster, now, low, &format!("round {round}, new leader"));
        // While the old leader is down: more records, and deleted past its log end, so its
        // first fetch on return is below the new leader's log start.
        let tag = format!("r{round}");
        produce(&others, TOPIC, &[0], 100, &tag);
        log_end += 100;
        low = log_end - 50;
        assert_eq!(delete_records(&others, low), low, "round {round}");
        assert_serves_from(&cluster, now, low, &format!("round {round}, deleted again"));
        cluster.spawn(li);
        cluster.wait_listening(li);
        wait_until("the old leader back in the ISR", || {
            placement(&all, TOPIC).1 == vec![1, 2, 3]
        });
        wait_log_start_everywhere(&cluster, low);
        assert_serves_from(&cluster, now, low, &format!("round {round}, rejoined"));
    }
    leaders_seen.sort_unstable();
    leaders_seen.dedup();
    assert_eq!(
        leaders_seen.len(),
        3,
        "each replica led once: {leaders_seen:?}"
    );
}
