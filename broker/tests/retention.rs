//! Log start offset over the wire: DeleteRecords through librdkafka's admin client, retention
//! settings changed at runtime, and what fetches and ListOffsets see afterwards.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{rd_consume, rd_create_topics, start_broker, wait_until, RawConn};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tributary_protocol::ErrorCode;

fn admin(addr: SocketAddr) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .unwrap()
}

fn create(addr: SocketAddr, topic: &str, configs: &[(&str, &str)]) {
    let mut t = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    rd_create_topics(addr, &[t]);
}

/// Produces `n` messages of ~200 bytes stamped `timestamp_ms`, one batch per message, acks=all.
fn produce_at(addr: SocketAddr, topic: &str, n: usize, timestamp_ms: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("max.in.flight", "1")
        .create()
        .unwrap();
    let value = "v".repeat(200);
    for i in 0..n {
        let key = i.to_string();
        producer
            .send(
                BaseRecord::to(topic)
                    .key(&key)
                    .payload(&value)
                    .timestamp(timestamp_ms),
            )
            .expect("queued");
        producer.flush(Duration::from_secs(30)).expect("delivered");
    }
}

fn watermarks(addr: SocketAddr, topic: &str) -> (i64, i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .unwrap();
    consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("ListOffsets")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn fetch_error(addr: SocketAddr, topic: &str, offset: i64) -> i16 {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = RawConn::connect(addr).request(ApiKey::Fetch, 11, &req);
    resp.responses[0].partitions[0].error_code
}

#[test]
fn delete_records_moves_the_log_start_for_fetch_list_offsets_and_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let addr = broker.addr;
    create(addr, "dr", &[("segment.bytes", "2048")]);
    produce_at(addr, "dr", 60, now_ms());
    assert_eq!(watermarks(addr, "dr"), (0, 60));

    let delete = |offsets: &[(i32, i64)]| {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets {
            tpl.add_partition_offset("dr", *p, Offset::Offset(*o))
                .unwrap();
        }
        futures::executor::block_on(admin(addr).delete_records(&tpl, &AdminOptions::new()))
    };
    let out = delete(&[(0, 45)]).expect("DeleteRecords");
    let p0 = out.find_partition("dr", 0).unwrap();
    assert!(p0.error().is_ok(), "{:?}", p0.error());
    assert_eq!(
        p0.offset(),
        Offset::Offset(45),
        "the low watermark comes back"
    );
    assert_eq!(watermarks(addr, "dr"), (45, 60));
    assert_eq!(
        fetch_error(addr, "dr", 44),
        ErrorCode::OFFSET_OUT_OF_RANGE.0
    );
    assert_eq!(fetch_error(addr, "dr", 45), ErrorCode::NONE.0);
    let got = rd_consume(addr, "dr", 1, 15);
    assert_eq!(
        got.iter().map(|m| m.1).collect::<Vec<_>>(),
        (45..60).collect::<Vec<_>>()
    );
    // Segments wholly below the new start are gone from disk.
    let logs = std::fs::read_dir(dir.path().join("dr-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(logs < 20, "{logs} segment files remain");

    // Past the high watermark is out of range, and changes nothing.
    let out = delete(&[(0, 61)]).expect("DeleteRecords");
    let err = out.find_partition("dr", 0).unwrap().error().unwrap_err();
    assert_eq!(
        err.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::OffsetOutOfRange),
        "{err:?}"
    );
    assert_eq!(watermarks(addr, "dr"), (45, 60));

    // The start survives a restart.
    broker.shutdown().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    assert_eq!(watermarks(broker.addr, "dr"), (45, 60));
    broker.shutdown().unwrap();
}

#[test]
fn retention_changed_at_runtime_deletes_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("log.retention.check.interval.ms", "100")]);
    let addr = broker.addr;
    create(addr, "aged", &[("segment.bytes", "2048")]);
    // Two hours old: within the 7-day default, so nothing goes.
    produce_at(addr, "aged", 30, now_ms() - 2 * 3_600_000);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(watermarks(addr, "aged"), (0, 30));

    let alter = |set: &[(&str, &str)]| {
        let mut a = AlterConfig::new(ResourceSpecifier::Topic("aged"));
        a = a.set("segment.bytes", "2048");
        for (k, v) in set {
            a = a.set(k, v);
        }
        let res =
            futures::executor::block_on(admin(addr).alter_configs([&a], &AdminOptions::new()))
                .expect("AlterConfigs");
        assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
    };
    // One hour: every segment is past it, so the log rolls and starts at its end.
    alter(&[("retention.ms", "3600000")]);
    wait_until("retention.ms to delete every segment", || {
        watermarks(addr, "aged") == (30, 30)
    });
    assert_eq!(
        fetch_error(addr, "aged", 29),
        ErrorCode::OFFSET_OUT_OF_RANGE.0
    );
    produce_at(addr, "aged", 40, now_ms());
    assert_eq!(watermarks(addr, "aged"), (30, 70));

    // A size limit: the oldest fresh segments go, at least the limit is kept.
    alter(&[("retention.ms", "3600000"), ("retention.bytes", "4096")]);
    wait_until("retention.bytes to delete segments", || {
        watermarks(addr, "aged").0 > 30
    });
    let (low, high) = watermarks(addr, "aged");
    assert!(high - low >= 4096 / 300, "kept only {low}..{high}");
    let got = rd_consume(addr, "aged", 1, (high - low) as usize);
    assert_eq!(
        got.iter().map(|m| m.1).collect::<Vec<_>>(),
        (low..high).collect::<Vec<_>>()
    );
    broker.shutdown().unwrap();
}

#[test]
fn compacted_topics_ignore_time_and_size_retention() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        2,
        &[
            ("log.retention.check.interval.ms", "100"),
            ("log.retention.ms", "1000"),
            ("log.retention.bytes", "1024"),
        ],
    );
    let addr = broker.addr;
    create(
        addr,
        "kept",
        &[("segment.bytes", "2048"), ("cleanup.policy", "compact")],
    );
    create(addr, "dropped", &[("segment.bytes", "2048")]);
    produce_at(addr, "kept", 20, now_ms() - 3_600_000);
    produce_at(addr, "dropped", 20, now_ms() - 3_600_000);
    wait_until("the broker-wide retention to apply", || {
        watermarks(addr, "dropped").0 > 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(watermarks(addr, "kept"), (0, 20));
    broker.shutdown().unwrap();
}
