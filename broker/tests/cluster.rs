//! Several `tributary` processes on loopback as one cluster: a three-voter metadata quorum,
//! brokers registered and fenced through it, partitions spread over the brokers, and clients
//! that only know one address finding the rest. Also the single node's move onto the metadata
//! log: a data directory from before it keeps its topics and producer ids.
//!
//! These topics have one replica: a fenced broker's partitions have no leader until it
//! returns, as Kafka does with replication factor 1 and unclean election off. Replicated
//! partitions are `replication.rs`'s.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;

use common::cluster::{broker_ids, consume_group, leaders, metadata, produce, Cluster};
use common::{rd_create_topics, wait_until};

/// A broker session long enough that only the evidence of a death can fence within a test.
const LONG_SESSION_MS: u64 = 20_000;

fn partition_dirs(dir: &Path, topic: &str) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&format!("{topic}-"))?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn three_nodes_serve_one_cluster_with_partitions_spread_over_them() {
    let mut cluster = Cluster::new(3);
    cluster.start_all();
    let first = cluster.bootstrap(0);
    wait_until("every broker in Metadata", || {
        broker_ids(&metadata(&first, None)) == vec![1, 2, 3]
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new("spread", 6, TopicReplication::Fixed(1))],
    );
    // Every broker knows the topic soon after; its leaders are spread evenly.
    let mut led = Vec::new();
    for i in 0..3 {
        let b = cluster.bootstrap(i);
        wait_until("the topic on every broker", || {
            leaders(&b, "spread").len() == 6
        });
        led = leaders(&b, "spread");
    }
    for id in 1..=3 {
        assert_eq!(
            led.iter().filter(|&&l| l == id).count(),
            2,
            "leaders {led:?}"
        );
    }
    // Each node holds its own partitions' files, and only those.
    for n in &cluster.nodes {
        let mine: Vec<i32> = (0..6).filter(|&p| led[p as usize] == n.id).collect();
        assert_eq!(partition_dirs(&n.dir, "spread"), mine, "node {}", n.id);
    }
    // A client that knows one broker writes to all six partitions; a group reads them back
    // through whichever broker coordinates it.
    produce(&first, "spread", &[0, 1, 2, 3, 4, 5], 600, "m");
    let mut got = consume_group(&cluster.bootstrap(1), "spread", "readers", 600);
    got.sort();
    let mut want: Vec<String> = (0..600).map(|i| format!("m-{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    // A broker that does not lead a partition refuses it and says so.
    let other = (0..6).find(|&p| led[p] != 1).unwrap() as i32;
    let resp = raw_list_offsets(cluster.nodes[0].client, "spread", other);
    assert_eq!(
        resp, 6,
        "NOT_LEADER_OR_FOLLOWER from a broker that does not lead it"
    );
    // KIP-951: Fetch v16 and Produce v10 name the leader, its epoch and its endpoint, so a
    // client moves there without asking for metadata; Fetch v12 still gets the error.
    let (topic_id, placement) = raw_topic_metadata(cluster.nodes[0].client, "spread");
    let (leader, epoch) = placement[other as usize];
    assert_eq!(leader, led[other as usize]);
    let leader_addr = cluster.nodes[(leader - 1) as usize].client;
    let endpoint = vec![(
        leader,
        leader_addr.ip().to_string(),
        i32::from(leader_addr.port()),
    )];
    let moved = raw_fetch_v16(cluster.nodes[0].client, topic_id, other, -1);
    assert_eq!(moved, (6, (leader, epoch), endpoint.clone()));
    let moved = raw_produce_v10(cluster.nodes[0].client, "spread", other);
    assert_eq!(moved, (6, (leader, epoch), endpoint));
    assert_eq!(
        raw_fetch_error(cluster.nodes[0].client, "spread", other, -1),
        6
    );
    // The leader itself serves the fetch by id.
    let (error, _, endpoints) = raw_fetch_v16(leader_addr, topic_id, other, epoch);
    assert_eq!((error, endpoints), (0, vec![]));
    assert_eq!(
        raw_fetch_v16(leader_addr, uuid::Uuid::new_v4(), other, -1).0,
        100,
        "UNKNOWN_TOPIC_ID"
    );
    // kafka-metadata-quorum.sh describe: every node names the same leader and epoch; the
    // leader knows how far each voter's log reaches.
    let views: Vec<(i32, i32, i64, Vec<i64>)> = (0..3)
        .map(|i| raw_describe_quorum(cluster.nodes[i].client))
        .collect();
    let (leader, epoch, hw, _) = views[0].clone();
    assert!(
        (1..=3).contains(&leader) && epoch >= 1 && hw > 0,
        "{views:?}"
    );
    assert!(
        views.iter().all(|v| v.0 == leader && v.1 == epoch),
        "{views:?}"
    );
    let ends = &views[(leader - 1) as usize].3;
    assert_eq!(ends.len(), 3);
    assert!(
        ends.iter().all(|&e| e > 0),
        "the leader sees every voter's log: {ends:?}"
    );
    // DescribeCluster names the active controller (the quorum's leader, a broker here) on
    // every node.
    for i in 0..3 {
        assert_eq!(
            raw_describe_cluster_controller(cluster.nodes[i].client),
            leader
        );
    }
}

/// DescribeCluster v1 (broker endpoints): the controller id it names.
fn raw_describe_cluster_controller(addr: SocketAddr) -> i32 {
    use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
    let req = DescribeClusterRequest::default().with_endpoint_type(1);
    let mut conn = common::RawConn::connect(addr);
    let resp: DescribeClusterResponse = conn.request(ApiKey::DescribeCluster, 1, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.controller_id.0
}

/// DescribeQuorum v1 for `__cluster_metadata-0`: (leader, epoch, high watermark, voters' ends).
fn raw_describe_quorum(addr: SocketAddr) -> (i32, i32, i64, Vec<i64>) {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    use kafka_protocol::messages::{
        ApiKey, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: DescribeQuorumResponse = conn.request(ApiKey::DescribeQuorum, 1, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{resp:?}");
    let ends = p.current_voters.iter().map(|v| v.log_end_offset).collect();
    (p.leader_id.0, p.leader_epoch, p.high_watermark, ends)
}

/// ListOffsets v1 (latest) for one partition, raw: its error code.
fn raw_list_offsets(addr: SocketAddr, topic: &str, partition: i32) -> i16 {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut conn = common::RawConn::connect(addr);
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, 1, &req);
    resp.topics[0].partitions[0].error_code
}

#[test]
fn a_killed_broker_is_fenced_and_comes_back_with_its_data() {
    let mut cluster = Cluster::new(3);
    // A session far longer than the fencing may take: the killed process's closed
    // connections and refused ports fence it, not its silence.
    cluster.extra = vec![format!("broker.session.timeout.ms={LONG_SESSION_MS}")];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("every broker in Metadata", || {
        broker_ids(&metadata(&all, None)) == vec![1, 2, 3]
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new("fence", 3, TopicReplication::Fixed(1))],
    );
    let first = cluster.bootstrap(0);
    wait_until("the topic", || leaders(&first, "fence").len() == 3);
    let led = leaders(&first, "fence");
    produce(&all, "fence", &[0, 1, 2], 300, "before");

    // Kill the broker leading partition 0 (any of the three).
    let victim = led[0];
    let vi = (victim - 1) as usize;
    let survivor = cluster.bootstrap(if vi == 0 { 1 } else { 0 });
    let killed = Instant::now();
    cluster.kill(vi);
    // Fenced: its partitions (one replica each) have no leader. Metadata still lists the
    // broker itself for one session after its fencing (see handlers::metadata::listed).
    wait_until("the killed broker fenced", || {
        let now = leaders(&survivor, "fence");
        (0..3).all(|p| (led[p] == victim) == (now[p] == -1))
    });
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(LONG_SESSION_MS / 2),
        "fenced after {took:?}: its session, not the evidence of its death, fenced it"
    );
    let now = leaders(&survivor, "fence");
    for (p, l) in now.iter().enumerate() {
        if led[p] == victim {
            assert_eq!(*l, -1, "partition {p} of the fenced broker has no leader");
        } else {
            assert_eq!(*l, led[p], "partition {p} keeps its leader");
        }
    }
    // The others keep serving their partitions.
    let alive: Vec<i32> = (0..3).filter(|&p| led[p as usize] != victim).collect();
    produce(&survivor, "fence", &alive, 100, "during");

    // Restarted, it registers again and leads its partitions with what they held.
    cluster.spawn(vi);
    cluster.wait_listening(vi);
    wait_until("the broker back in Metadata", || {
        broker_ids(&metadata(&survivor, None)) == vec![1, 2, 3]
    });
    wait_until("its partitions led again", || {
        leaders(&survivor, "fence") == led
    });
    let m = metadata(&survivor, Some("fence"));
    produce(&all, "fence", &[0, 1, 2], 30, "after");
    // It leads at epoch 2 (fenced: 1, back: 2); epoch 0 ended where epoch 2 began, and
    // clients naming the current epoch are not turned away (KIP-320).
    let vaddr = cluster.nodes[vi].client;
    assert_eq!(raw_epoch_end(vaddr, "fence", 0, 2, 2), (0, 2, 110));
    assert_eq!(raw_epoch_end(vaddr, "fence", 0, 2, 0), (0, 0, 100));
    assert_eq!(
        raw_epoch_end(vaddr, "fence", 0, 1, 0).0,
        74,
        "FENCED_LEADER_EPOCH"
    );
    // Fetch and ListOffsets honour the epoch a client names too.
    assert_eq!(raw_fetch_error(vaddr, "fence", 0, 2), 0);
    assert_eq!(raw_fetch_error(vaddr, "fence", 0, -1), 0);
    assert_eq!(
        raw_fetch_error(vaddr, "fence", 0, 0),
        74,
        "FENCED_LEADER_EPOCH"
    );
    assert_eq!(
        raw_fetch_error(vaddr, "fence", 0, 3),
        75,
        "UNKNOWN_LEADER_EPOCH"
    );
    // From v16 a fenced epoch comes with the current leader and its endpoint (KIP-951).
    let (topic_id, _) = raw_topic_metadata(vaddr, "fence");
    let endpoint = vec![(victim, vaddr.ip().to_string(), i32::from(vaddr.port()))];
    assert_eq!(
        raw_fetch_v16(vaddr, topic_id, 0, 0),
        (74, (victim, 2), endpoint)
    );
    assert_eq!(raw_list_offsets_epoch(vaddr, "fence", 0, 1), 74);
    assert_eq!(raw_list_offsets_epoch(vaddr, "fence", 0, 2), 0);
    let got = consume_group(&all, "fence", "checker", 430);
    assert_eq!(
        got.len(),
        430,
        "every acknowledged message, metadata {:?}",
        m.topics()[0]
            .partitions()
            .iter()
            .map(|p| (p.id(), p.leader()))
            .collect::<Vec<_>>()
    );
    for i in 0..300 {
        assert!(got.contains(&format!("before-{i}")), "before-{i} lost");
    }
}

/// Fetch v12 of one partition from offset 0 naming `current` as the leader epoch: its error.
fn raw_fetch_error(addr: SocketAddr, topic: &str, partition: i32, current: i32) -> i16 {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(current)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: FetchResponse = conn.request(ApiKey::Fetch, 12, &req);
    resp.responses[0].partitions[0].error_code
}

/// Metadata v12 of `topic`: its topic id and each partition's (leader, leader epoch).
fn raw_topic_metadata(addr: SocketAddr, topic: &str) -> (uuid::Uuid, Vec<(i32, i32)>) {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))]));
    let mut conn = common::RawConn::connect(addr);
    let resp: MetadataResponse = conn.request(ApiKey::Metadata, 12, &req);
    let t = &resp.topics[0];
    assert_eq!(t.error_code, 0, "{resp:?}");
    let mut placement: Vec<(i32, i32, i32)> = t
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
        .collect();
    placement.sort_unstable();
    let placement = placement.into_iter().map(|(_, l, e)| (l, e)).collect();
    (t.topic_id, placement)
}

/// What a KIP-951 response says of one partition: its error, the leader it names (id, epoch)
/// and the endpoints it carries (id, host, port).
type LeaderHint = (i16, (i32, i32), Vec<(i32, String, i32)>);

/// Fetch v16 of one partition by topic id, naming `current` as the leader epoch.
fn raw_fetch_v16(
    addr: SocketAddr,
    topic_id: uuid::Uuid,
    partition: i32,
    current: i32,
) -> LeaderHint {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(current)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: FetchResponse = conn.request(ApiKey::Fetch, 16, &req);
    assert_eq!(resp.responses[0].topic_id, topic_id);
    let p = &resp.responses[0].partitions[0];
    let endpoints = resp
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, e.host.to_string(), e.port))
        .collect();
    (
        p.error_code,
        (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
        endpoints,
    )
}

/// Produce v10 of one record to one partition.
fn raw_produce_v10(addr: SocketAddr, topic: &str, partition: i32) -> LeaderHint {
    use kafka_protocol::messages::{ApiKey, ProduceResponse};
    let batch = tributary_protocol::record_batch::build_batch(&[(None, Some(b"v"))], 1, None);
    let req = common::produce_request(topic, partition, -1, batch.freeze());
    let mut conn = common::RawConn::connect(addr);
    let resp: ProduceResponse = conn.request(ApiKey::Produce, 10, &req);
    let p = &resp.responses[0].partition_responses[0];
    let endpoints = resp
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, e.host.to_string(), e.port))
        .collect();
    (
        p.error_code,
        (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
        endpoints,
    )
}

/// ListOffsets v4 (latest) of one partition naming `current` as the leader epoch: its error.
fn raw_list_offsets_epoch(addr: SocketAddr, topic: &str, partition: i32, current: i32) -> i16 {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(current)
                .with_timestamp(-1)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, 4, &req);
    resp.topics[0].partitions[0].error_code
}

/// OffsetForLeaderEpoch v4 for one partition, raw: (error, epoch, end offset).
fn raw_epoch_end(
    addr: SocketAddr,
    topic: &str,
    partition: i32,
    current: i32,
    epoch: i32,
) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, OffsetForLeaderEpochResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(current)
                .with_leader_epoch(epoch)])]);
    let mut conn = common::RawConn::connect(addr);
    let resp: OffsetForLeaderEpochResponse = conn.request(ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

#[test]
fn the_quorum_keeps_working_whichever_voter_is_lost() {
    let mut cluster = Cluster::new(3);
    cluster.start_all();
    // Each voter in turn is killed, so the quorum's leader is among them at some point; the
    // other two must elect one (if needed) and take metadata changes.
    for round in 0..3usize {
        cluster.kill(round);
        let other = cluster.nodes[(round + 1) % 3].client;
        let lost = cluster.nodes[round].id;
        // New partitions go to live brokers: wait until the lost one is fenced.
        wait_until("the lost voter fenced", || {
            !broker_ids(&metadata(&other.to_string(), None)).contains(&lost)
        });
        let topic = format!("after-losing-{}", round + 1);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
                ClientConfig::new()
                    .set("bootstrap.servers", other.to_string())
                    .create()
                    .unwrap();
            let t = NewTopic::new(&topic, 2, TopicReplication::Fixed(1));
            let res = futures::executor::block_on(
                admin.create_topics([&t], &rdkafka::admin::AdminOptions::new()),
            )
            .expect("CreateTopics answered");
            match &res[0] {
                Ok(_) => break,
                Err((_, e)) => {
                    assert!(
                        Instant::now() < deadline,
                        "round {round}: CreateTopics still failing: {e:?}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        produce(&other.to_string(), &topic, &[0, 1], 20, "written");
        cluster.spawn(round);
        cluster.wait_listening(round);
        let back = cluster.bootstrap(round);
        wait_until("the restarted voter knows the new topic", || {
            leaders(&back, &topic).len() == 2
        });
    }
    // All three agree on the topics.
    let names = |i: usize| {
        let mut n: Vec<String> = metadata(&cluster.bootstrap(i), None)
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        n.sort();
        n
    };
    wait_until("the same topics everywhere", || {
        names(0) == names(1) && names(1) == names(2)
    });
}

#[test]
fn a_single_node_catalog_is_imported_into_the_metadata_log() {
    let dir = tempfile::tempdir().unwrap();
    // A data directory as single-node brokers wrote it: a checksummed catalog and the end of
    // the reserved producer-id block.
    let id = uuid::Uuid::new_v4().to_string();
    let catalog = serde_json::json!({
        "version": 4,
        "cluster_id": "oldClusterIdAAAAAAAAAA",
        "topics": {"kept": {"name": "kept", "id": id, "partitions": 2, "configs": {"retention.ms": "12345"}}},
        "broker_configs": {"cluster": {}, "per_broker": {}}
    });
    write_legacy(dir.path(), "catalog.json", &catalog);
    write_legacy(
        dir.path(),
        "producer-ids.json",
        &serde_json::json!({"block_end": 7000}),
    );
    for round in 0..2 {
        let broker = common::start_broker(dir.path(), 1, &[]);
        let m = metadata(&broker.addr.to_string(), Some("kept"));
        let t = &m.topics()[0];
        assert_eq!(t.partitions().len(), 2, "round {round}");
        assert!(t
            .partitions()
            .iter()
            .all(|p| p.leader() == 0 && p.error().is_none()));
        let cluster = raw_cluster_id(broker.addr);
        assert_eq!(cluster, "oldClusterIdAAAAAAAAAA");
        let pid = raw_init_producer_id(broker.addr);
        assert!(
            pid >= 7000,
            "producer id {pid} reuses an id reserved before the import"
        );
        broker.shutdown().unwrap();
    }
    assert!(!dir.path().join("catalog.json").exists());
    assert!(dir.path().join("catalog.json.imported").exists());
}

fn write_legacy(dir: &Path, name: &str, value: &serde_json::Value) {
    let body = value.to_string();
    let env = serde_json::json!({"crc32c": crc32c::crc32c(body.as_bytes()), "body": body});
    std::fs::write(dir.join(name), env.to_string()).unwrap();
}

fn raw_cluster_id(addr: SocketAddr) -> String {
    use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
    let mut conn = common::RawConn::connect(addr);
    let resp: DescribeClusterResponse = conn.request(
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    );
    resp.cluster_id.to_string()
}

fn raw_init_producer_id(addr: SocketAddr) -> i64 {
    use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
    let mut conn = common::RawConn::connect(addr);
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60000)
        .with_producer_id(kafka_protocol::messages::ProducerId(-1))
        .with_producer_epoch(-1);
    let resp: InitProducerIdResponse = conn.request(ApiKey::InitProducerId, 1, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.producer_id.0
}
