//! Tiered storage against a `file://` remote log store: closed segments leave the local disk
//! once copied, and everything reads back from offset 0 through the ordinary Fetch — with
//! librdkafka and as raw bytes — and damage in the store is one partition's
//! KAFKA_STORAGE_ERROR, never the broker's.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use common::{rd_consume, rd_create_topics, rd_produce, start_broker, wait_until, RawConn};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use tributary_protocol::ErrorCode;

fn tiered_broker(dir: &Path, store: &Path) -> tributary_broker::server::BrokerHandle {
    let url = format!("file://{}", store.display());
    start_broker(
        dir,
        2,
        &[
            ("remote.log.storage.system.enable", "true"),
            ("remote.log.storage.url", &url),
            ("remote.log.manager.task.interval.ms", "200"),
            ("log.retention.check.interval.ms", "200"),
        ],
    )
}

fn create_tiered(addr: SocketAddr, topic: &str) {
    let t = NewTopic::new(topic, 1, TopicReplication::Fixed(1))
        .set("remote.storage.enable", "true")
        .set("segment.bytes", "2048")
        .set("local.retention.bytes", "1");
    rd_create_topics(addr, &[t]);
}

/// The `.log` objects in the store, by name (base offset first, so in offset order).
fn remote_logs(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![store.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    out
}

fn local_segments(dir: &Path, topic: &str) -> usize {
    std::fs::read_dir(dir.join(format!("{topic}-0")))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0)
}

/// ListOffsets v9 at `timestamp` (-2 earliest, -4 earliest local, -5 latest tiered).
fn list_offset(addr: SocketAddr, topic: &str, timestamp: i64) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let resp: ListOffsetsResponse = RawConn::connect(addr).request(ApiKey::ListOffsets, 9, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets {timestamp}");
    p.offset
}

/// A Fetch v11 at `offset`: the partition's error code and its records.
fn fetch(addr: SocketAddr, topic: &str, offset: i64) -> (i16, bytes::Bytes) {
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
    let p = &resp.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default())
}

fn messages(n: usize) -> Vec<(Option<String>, String)> {
    (0..n)
        .map(|i| {
            (
                Some(format!("k{i}")),
                format!("value-{i}-{}", "x".repeat(180)),
            )
        })
        .collect()
}

#[test]
fn closed_segments_leave_the_local_disk_and_read_back_from_offset_zero() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let data = dir.path().join("data");
    let broker = tiered_broker(&data, &store);
    let addr = broker.addr;
    create_tiered(addr, "tiered");
    let sent = messages(200);
    rd_produce(
        addr,
        "tiered",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &sent,
    );

    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 10 && local_segments(&data, "tiered") <= 2
    });
    let local_start = list_offset(addr, "tiered", -4);
    assert!(local_start > 0, "the local log no longer starts at 0");
    assert_eq!(list_offset(addr, "tiered", -2), 0, "the log still does");
    let tiered = list_offset(addr, "tiered", -5);
    assert!(
        tiered >= local_start - 1 && tiered < 200,
        "latest tiered {tiered}"
    );

    // librdkafka reads everything back from the beginning, in order.
    let got = rd_consume(addr, "tiered", 1, sent.len());
    assert_eq!(got.len(), sent.len());
    for (i, (_, offset, key, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(key.as_ref(), sent[i].0.as_ref());
        assert_eq!(value, &sent[i].1);
    }
    // The batches a fetch at 0 returns are the first object's bytes, byte for byte.
    let (code, records) = fetch(addr, "tiered", 0);
    assert_eq!(code, 0);
    let first = std::fs::read(&remote_logs(&store)[0]).unwrap();
    assert_eq!(&records[..], &first[..]);
    // An offset in the middle of a remote segment starts at the batch holding it.
    let (code, records) = fetch(addr, "tiered", 3);
    assert_eq!(code, 0);
    assert_eq!(i64::from_be_bytes(records[..8].try_into().unwrap()), 3);
}

#[test]
fn a_missing_or_damaged_remote_object_is_that_partitions_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let data = dir.path().join("data");
    let broker = tiered_broker(&data, &store);
    let addr = broker.addr;
    create_tiered(addr, "damaged");
    rd_produce(
        addr,
        "damaged",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &messages(120),
    );
    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 6 && local_segments(&data, "damaged") <= 2
    });
    let objects = remote_logs(&store);
    // Damage a byte inside the second segment's first batch (past its 61-byte header).
    let mut bytes = std::fs::read(&objects[1]).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&objects[1], &bytes).unwrap();
    // Remove the third segment's log object.
    std::fs::remove_file(&objects[2]).unwrap();
    let base = |p: &PathBuf| -> i64 {
        let name = p.file_name().unwrap().to_string_lossy();
        name[..20].parse().unwrap()
    };
    let storage_error = ErrorCode::KAFKA_STORAGE_ERROR.code();
    assert_eq!(fetch(addr, "damaged", base(&objects[1])).0, storage_error);
    assert_eq!(fetch(addr, "damaged", base(&objects[2])).0, storage_error);
    // The rest of the log, and the broker, are unaffected.
    let (code, records) = fetch(addr, "damaged", 0);
    assert_eq!(code, 0);
    assert!(!records.is_empty());
    let local = list_offset(addr, "damaged", -4);
    let (code, records) = fetch(addr, "damaged", local);
    assert_eq!(code, 0);
    assert!(!records.is_empty());
}

#[test]
fn remote_storage_is_refused_for_compacted_topics_and_without_the_broker_switch() {
    let dir = tempfile::tempdir().unwrap();
    let create = |addr: SocketAddr, configs: &[(&str, &str)]| {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", addr.to_string())
            .create()
            .unwrap();
        let mut t = NewTopic::new("t", 1, TopicReplication::Fixed(1));
        for (k, v) in configs {
            t = t.set(k, v);
        }
        let res =
            futures::executor::block_on(admin.create_topics(&[t], &AdminOptions::new())).unwrap();
        match &res[0] {
            Ok(_) => None,
            Err((_, code)) => Some(format!("{code:?}")),
        }
    };
    let off = start_broker(&dir.path().join("off"), 1, &[]);
    let refused = create(off.addr, &[("remote.storage.enable", "true")]);
    assert_eq!(refused.as_deref(), Some("InvalidConfig"));
    drop(off);
    let store = dir.path().join("store");
    let on = tiered_broker(&dir.path().join("on"), &store);
    let compacted = [
        ("remote.storage.enable", "true"),
        ("cleanup.policy", "compact"),
    ];
    assert_eq!(
        create(on.addr, &compacted).as_deref(),
        Some("InvalidConfig")
    );
    let too_local = [
        ("remote.storage.enable", "true"),
        ("retention.bytes", "1000"),
        ("local.retention.bytes", "2000"),
    ];
    assert_eq!(
        create(on.addr, &too_local).as_deref(),
        Some("InvalidConfig")
    );
    assert_eq!(create(on.addr, &[("remote.storage.enable", "true")]), None);
}
