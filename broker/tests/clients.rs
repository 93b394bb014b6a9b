//! A real broker driven by a real Kafka client (librdkafka through the `rdkafka` crate).

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{rd_consume, rd_produce, start_broker};

#[test]
fn keyed_messages_over_eight_partitions_keep_per_key_order_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("num.partitions", "8")]);
    let n = 20_000;
    let messages: Vec<_> = (0..n)
        .map(|i| (Some(format!("key-{}", i % 50)), format!("{i}")))
        .collect();
    rd_produce(
        broker.addr,
        "orders",
        &[("enable.idempotence", "true"), ("linger.ms", "5")],
        &messages,
    );
    let got = rd_consume(broker.addr, "orders", 8, n);
    assert_eq!(got.len(), n);
    let mut last_per_key: HashMap<String, i64> = HashMap::new();
    let mut partition_of_key: HashMap<String, i32> = HashMap::new();
    for (partition, _offset, key, value) in &got {
        let key = key.clone().expect("keyed");
        let v: i64 = value.parse().unwrap();
        let prev = last_per_key.insert(key.clone(), v);
        assert!(
            prev.is_none_or(|p| p < v),
            "key {key} out of order: {prev:?} then {v}"
        );
        assert_eq!(
            *partition_of_key.entry(key).or_insert(*partition),
            *partition
        );
    }
    let used: std::collections::HashSet<i32> = got.iter().map(|m| m.0).collect();
    assert!(
        used.len() > 4,
        "keys should spread over partitions: {used:?}"
    );
    broker.shutdown().unwrap();
}

#[test]
fn every_compression_codec_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        let messages: Vec<_> = (0..500)
            .map(|i| (None, format!("{codec} message {i} {}", "x".repeat(i % 40))))
            .collect();
        rd_produce(
            broker.addr,
            &topic,
            &[("compression.type", codec)],
            &messages,
        );
        let got = rd_consume(broker.addr, &topic, 1, 500);
        let values: Vec<String> = got.into_iter().map(|m| m.3).collect();
        let expected: Vec<String> = messages.into_iter().map(|m| m.1).collect();
        assert_eq!(values, expected, "codec {codec}");
    }
    broker.shutdown().unwrap();
}

#[test]
fn data_survives_a_restart_and_offsets_continue() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("num.partitions", "3")]);
    let first: Vec<_> = (0..300)
        .map(|i| (Some(format!("k{i}")), format!("before-{i}")))
        .collect();
    rd_produce(broker.addr, "durable", &[], &first);
    broker.shutdown().unwrap();

    let broker = start_broker(dir.path(), 1, &[("num.partitions", "3")]);
    let second: Vec<_> = (0..300)
        .map(|i| (Some(format!("k{i}")), format!("after-{i}")))
        .collect();
    rd_produce(broker.addr, "durable", &[], &second);
    let got = rd_consume(broker.addr, "durable", 3, 600);
    assert_eq!(got.len(), 600);
    let mut per_partition: HashMap<i32, Vec<i64>> = HashMap::new();
    for m in &got {
        per_partition.entry(m.0).or_default().push(m.1);
    }
    for offsets in per_partition.values() {
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, &expected, "offsets are contiguous from 0");
    }
    assert_eq!(
        got.iter().filter(|m| m.3.starts_with("before-")).count(),
        300
    );
    broker.shutdown().unwrap();
}

#[test]
fn metadata_lists_created_topics_and_the_broker() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("num.partitions", "4")]);
    rd_produce(broker.addr, "listed", &[], &[(None, "x".into())]);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .create()
        .unwrap();
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    assert_eq!(md.brokers().len(), 1);
    assert_eq!(md.brokers()[0].port(), i32::from(broker.addr.port()));
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == "listed")
        .expect("topic listed");
    assert_eq!(t.partitions().len(), 4);
    assert!(t.partitions().iter().all(|p| p.leader() == 0));
    broker.shutdown().unwrap();
}
