//! Log compaction over the wire: a compacted topic keeps the latest value per key at its offset,
//! and `__consumer_offsets` is compacted without losing a committed offset across a restart.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{rd_create_topics, start_broker, wait_until};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PROPS: &[(&str, &str)] = &[
    ("log.cleaner.backoff.ms", "200"),
    ("offsets.topic.num.partitions", "1"),
    ("offsets.topic.segment.bytes", "1024"),
];

/// Bytes of the segment files up to their last non-zero byte: the active segment carries zeros
/// written ahead of its end (`log.segment.zero.ahead.bytes`), which hold no data.
fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            bytes
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |i| i as u64 + 1)
        })
        .sum()
}

/// Every message from the beginning of partition 0: (offset, key, value).
fn read_all(addr: SocketAddr, topic: &str) -> Vec<(i64, String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("group.id", "reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                m.offset(),
                String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => panic!("fetch failed: {e}"),
            None => {}
        }
    }
    out
}

/// Sends message i (0 ≤ i < 300) to key `key-{i % 10}` with value `i` (then `pad`), in order:
/// offset i holds i. `settings` go to the producer as well.
fn produce_keyed(addr: SocketAddr, topic: &str, pad: &str, settings: &[(&str, &str)]) {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", addr.to_string())
        .set("acks", "all")
        .set("max.in.flight", "1");
    for (k, v) in settings {
        config.set(*k, *v);
    }
    let producer: BaseProducer = config.create().unwrap();
    for i in 0..300 {
        let (k, v) = (format!("key-{}", i % 10), format!("{i}{pad}"));
        producer
            .send(BaseRecord::to(topic).key(&k).payload(&v))
            .unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Waits for the cleaner, then checks that what is left is the latest value of every key at
/// its own offset, in order.
fn check_compacted(addr: SocketAddr, topic: &str, pad: &str) {
    let mut got = Vec::new();
    wait_until("the cleaner to compact the log", || {
        got = read_all(addr, topic);
        got.len() < 100
    });
    let mut last = HashMap::new();
    for (offset, key, value) in &got {
        assert_eq!(format!("{offset}{pad}"), *value, "offsets are preserved");
        assert_eq!(format!("key-{}", offset % 10), *key);
        if let Some(prev) = last.insert(key.clone(), *offset) {
            assert!(prev < *offset);
        }
    }
    for k in 0..10 {
        assert_eq!(
            last[&format!("key-{k}")],
            290 + k,
            "latest value of key-{k}"
        );
    }
}

fn compacted_topic(name: &str) -> NewTopic<'_> {
    NewTopic::new(name, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.bytes", "2048")
}

#[test]
fn a_compacted_topic_keeps_the_latest_value_per_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    rd_create_topics(broker.addr, &[compacted_topic("table")]);
    // One message per batch.
    produce_keyed(broker.addr, "table", "", &[("batch.num.messages", "1")]);
    check_compacted(broker.addr, "table", "");
    broker.shutdown().unwrap();
}

#[test]
fn compressed_batches_are_compacted_for_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let codecs = ["gzip", "snappy", "lz4", "zstd"];
    let topics: Vec<String> = codecs.iter().map(|c| format!("table-{c}")).collect();
    let new: Vec<NewTopic<'_>> = topics.iter().map(|t| compacted_topic(t)).collect();
    rd_create_topics(broker.addr, &new);
    // Compressible values, three messages to a batch, each batch compressed by the client.
    let pad = "-".repeat(200);
    for (codec, topic) in codecs.iter().zip(&topics) {
        produce_keyed(
            broker.addr,
            topic,
            &pad,
            &[
                ("compression.codec", codec),
                ("batch.num.messages", "3"),
                ("linger.ms", "100"),
            ],
        );
    }
    for (codec, topic) in codecs.iter().zip(&topics) {
        // What reached the disk is compressed with the topic's codec.
        let pdir = dir.path().join(format!("{topic}-0"));
        let mut compressed = 0;
        for f in std::fs::read_dir(&pdir).unwrap().flatten() {
            if f.path().extension().is_some_and(|x| x == "log") {
                // Up to the zero padding after the active segment's last batch.
                let bytes = std::fs::read(f.path()).unwrap();
                let mut at = 0;
                while let Ok(h) = tributary_protocol::record_batch::validate(&bytes[at..], at) {
                    compressed += usize::from(h.compression() != 0);
                    at += h.size();
                }
            }
        }
        assert!(compressed > 0, "{codec}: the client compressed its batches");
        check_compacted(broker.addr, topic, &pad);
    }
    broker.shutdown().unwrap();
}

#[test]
fn consumer_offsets_are_compacted_and_the_last_commit_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, PROPS);
    let addr = broker.addr;
    rd_create_topics(
        addr,
        &[NewTopic::new("orders", 2, TopicReplication::Fixed(1))],
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("group.id", "committer")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    for i in 1..=400i64 {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("orders", (i % 2) as i32, Offset::Offset(i))
            .unwrap();
        consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    }
    let offsets_dir = dir.path().join("__consumer_offsets-0");
    wait_until("__consumer_offsets to be compacted", || {
        log_bytes(&offsets_dir) < 20_000
    });
    drop(consumer);
    broker.shutdown().unwrap();

    let broker = start_broker(dir.path(), 2, PROPS);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .set("group.id", "committer")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition("orders", 0);
    tpl.add_partition("orders", 1);
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("OffsetFetch");
    assert_eq!(
        committed.find_partition("orders", 0).unwrap().offset(),
        Offset::Offset(400)
    );
    assert_eq!(
        committed.find_partition("orders", 1).unwrap().offset(),
        Offset::Offset(399)
    );
    broker.shutdown().unwrap();
}
