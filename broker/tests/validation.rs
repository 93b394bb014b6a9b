//! Record validation on the produce path, as Kafka's `LogValidator`: batches whose records do not
//! match their header, key-less records on compacted topics, out-of-range timestamps, and the
//! broker's own rewrites — LogAppendTime stamping and `compression.type` recompression — checked
//! over the wire with raw requests and with librdkafka.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use common::{start_broker, RawConn};
use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tributary_protocol::record_batch::{self, build_batch, KeyValue, RECORD_BATCH_HEADER_BYTES};
use tributary_protocol::ErrorCode;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn create_topic(c: &mut RawConn, topic: &str, configs: &[(&str, &str)]) {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
        .with_timeout_ms(5000);
    let resp: CreateTopicsResponse = c.request(ApiKey::CreateTopics, 5, &req);
    assert_eq!(
        resp.topics[0].error_code, 0,
        "{topic}: {:?}",
        resp.topics[0].error_message
    );
}

/// Produces one batch to partition 0; returns the partition's response.
fn produce(
    c: &mut RawConn,
    topic: &str,
    records: Bytes,
) -> produce_response::PartitionProduceResponse {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let mut resp: ProduceResponse = c.request(ApiKey::Produce, 8, &req);
    resp.responses.remove(0).partition_responses.remove(0)
}

/// Fetches partition 0 from `offset`: (high watermark, record bytes).
fn fetch(c: &mut RawConn, topic: &str, offset: i64) -> (i64, Bytes) {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &req);
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (p.high_watermark, p.records.clone().unwrap_or_default())
}

fn batch(records: &[KeyValue<'_>], base_timestamp: i64) -> BytesMut {
    build_batch(records, base_timestamp, None)
}

/// Rewrites header bytes of a built batch and reseals its CRC, so only the edit is wrong.
fn edit_and_reseal(b: &mut BytesMut, edit: impl FnOnce(&mut [u8])) {
    edit(b);
    let count = i32::from_be_bytes(b[57..61].try_into().unwrap());
    record_batch::reseal(b, count);
    record_batch::validate(b, 0).expect("the edited batch has a valid CRC");
}

#[test]
fn records_must_match_the_batch_header() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "v", &[]);
    create_topic(&mut c, "fixed", &[]);
    let now = now_ms();

    // One record under a header claiming 2^31 - 1 (with a consistent last offset delta).
    let mut huge = batch(&[(None, Some(b"one"))], now);
    edit_and_reseal(&mut huge, |b| {
        b[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    });
    let resp = produce(&mut c, "v", huge.freeze());
    assert_eq!(resp.error_code, ErrorCode::INVALID_RECORD.0);
    assert!(
        resp.error_message
            .as_deref()
            .is_some_and(|m| m.contains("declares")),
        "{:?}",
        resp.error_message
    );
    assert_eq!(
        fetch(&mut c, "v", 0).0,
        0,
        "the high watermark did not move"
    );

    // The second record's offset delta is 2, not its index 1.
    let mut skipping = batch(&[(None, Some(b"a")), (None, Some(b"b"))], now);
    let first_len = usize::from(skipping[RECORD_BATCH_HEADER_BYTES] >> 1) + 1;
    let delta_at = RECORD_BATCH_HEADER_BYTES + first_len + 3; // length, attributes, timestamp
    assert_eq!(skipping[delta_at], 2, "zig-zag 1");
    edit_and_reseal(&mut skipping, |b| b[delta_at] = 4);
    let resp = produce(&mut c, "v", skipping.freeze());
    assert_eq!(resp.error_code, ErrorCode::INVALID_RECORD.0);
    assert!(resp
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("offset delta")));

    // Bytes left over after the counted records.
    let mut extra = batch(&[(None, Some(b"a")), (None, Some(b"b"))], now);
    edit_and_reseal(&mut extra, |b| {
        b[23..27].copy_from_slice(&0i32.to_be_bytes());
        b[57..61].copy_from_slice(&1i32.to_be_bytes());
    });
    assert_eq!(
        produce(&mut c, "v", extra.freeze()).error_code,
        ErrorCode::INVALID_RECORD.0
    );
    assert_eq!(fetch(&mut c, "v", 0).0, 0);

    // A header max timestamp the records do not have is replaced by theirs, as Kafka does: it
    // would otherwise steer the time index and retention.
    let mut far = batch(&[(None, Some(b"a")), (None, Some(b"b"))], now);
    edit_and_reseal(&mut far, |b| {
        b[35..43].copy_from_slice(&i64::MAX.to_be_bytes())
    });
    let resp = produce(&mut c, "fixed", far.freeze());
    assert_eq!((resp.error_code, resp.base_offset), (0, 0));
    let (_, stored) = fetch(&mut c, "fixed", 0);
    let h = record_batch::validate(&stored, 0).expect("the rewritten batch's CRC is valid");
    assert_eq!((h.base_timestamp, h.max_timestamp), (now, now + 1));

    // A valid batch is still accepted at offset 0.
    let ok = produce(&mut c, "v", batch(&[(None, Some(b"fine"))], now).freeze());
    assert_eq!(
        (ok.error_code, ok.base_offset, ok.log_append_time_ms),
        (0, 0, -1)
    );
    assert_eq!(fetch(&mut c, "v", 0).0, 1);
    broker.shutdown().unwrap();
}

#[test]
fn compacted_topics_refuse_records_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "table", &[("cleanup.policy", "compact")]);
    let now = now_ms();
    let resp = produce(
        &mut c,
        "table",
        batch(
            &[
                (Some(b"k"), Some(b"v")),
                (None, Some(b"no key")),
                (Some(b"k2"), Some(b"v")),
                (None, Some(b"no key either")),
            ],
            now,
        )
        .freeze(),
    );
    assert_eq!(resp.error_code, ErrorCode::INVALID_RECORD.0);
    assert!(resp
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("Compacted topic cannot accept message without key")));
    // Each bad record is named by its index in the batch (Produce v8+, Kafka's
    // `record_errors`), so that a client fails those records and not the others.
    let listed: Vec<(i32, bool)> = resp
        .record_errors
        .iter()
        .map(|e| {
            let m = e.batch_index_error_message.as_deref().unwrap_or("");
            (
                e.batch_index,
                m.contains("without key in topic partition table-0"),
            )
        })
        .collect();
    assert_eq!(listed, vec![(1, true), (3, true)]);
    assert_eq!(
        fetch(&mut c, "table", 0).0,
        0,
        "nothing of the batch appended"
    );
    // Keyed records and keyed tombstones are accepted.
    let resp = produce(
        &mut c,
        "table",
        batch(&[(Some(b"k"), Some(b"v")), (Some(b"k"), None)], now).freeze(),
    );
    assert_eq!((resp.error_code, resp.base_offset), (0, 0));
    broker.shutdown().unwrap();
}

#[test]
fn create_time_timestamps_must_be_within_the_configured_bounds() {
    let dir = tempfile::tempdir().unwrap();
    // The broker allows records an hour ahead (Kafka 4's default) and any age ...
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "default", &[]);
    // ... and this topic one minute either way.
    create_topic(
        &mut c,
        "tight",
        &[
            ("message.timestamp.before.max.ms", "60000"),
            ("message.timestamp.after.max.ms", "60000"),
        ],
    );
    let now = now_ms();
    let hour = 3_600_000;
    let one = |ts: i64| batch(&[(None, Some(b"x"))], ts).freeze();
    assert_eq!(
        produce(&mut c, "default", one(now + 2 * hour)).error_code,
        ErrorCode::INVALID_TIMESTAMP.0,
        "two hours ahead"
    );
    assert_eq!(
        produce(&mut c, "default", one(now + hour / 2)).error_code,
        0
    );
    assert_eq!(produce(&mut c, "default", one(1_000)).error_code, 0, "1970");
    assert_eq!(
        produce(&mut c, "default", one(-1)).error_code,
        0,
        "no timestamp"
    );

    let resp = produce(&mut c, "tight", one(now - hour));
    assert_eq!(resp.error_code, ErrorCode::INVALID_TIMESTAMP.0);
    assert!(resp
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("out of range")));
    assert_eq!(
        resp.record_errors
            .iter()
            .map(|e| e.batch_index)
            .collect::<Vec<_>>(),
        vec![0]
    );
    assert_eq!(
        produce(&mut c, "tight", one(now + 5 * 60_000)).error_code,
        ErrorCode::INVALID_TIMESTAMP.0
    );
    assert_eq!(produce(&mut c, "tight", one(now)).error_code, 0);
    // build_batch's records are a millisecond apart: the last of 1000 is 999 ms after the
    // first, which is in range; each record is checked, not only the first.
    let many: Vec<KeyValue<'_>> = (0..1000).map(|_| (None, Some(&b"y"[..]))).collect();
    assert_eq!(
        produce(&mut c, "tight", batch(&many, now + 60_000 - 500).freeze()).error_code,
        ErrorCode::INVALID_TIMESTAMP.0
    );

    // A batch a producer marked LogAppendTime: Kafka reads its records' timestamps as its max
    // timestamp and checks that like a CreateTime one; without a timestamp it is refused.
    let mut marked = batch(&[(None, Some(b"x"))], now);
    record_batch::set_log_append_time(&mut marked, now);
    assert_eq!(produce(&mut c, "default", marked.freeze()).error_code, 0);
    let mut marked = batch(&[(None, Some(b"x"))], now);
    record_batch::set_log_append_time(&mut marked, -1);
    assert_eq!(
        produce(&mut c, "default", marked.freeze()).error_code,
        ErrorCode::INVALID_TIMESTAMP.0
    );
    broker.shutdown().unwrap();
}

#[test]
fn log_append_time_topics_carry_the_brokers_time() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Message, Timestamp};
    use rdkafka::{Offset, TopicPartitionList};

    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(
        &mut c,
        "stamped",
        &[("message.timestamp.type", "LogAppendTime")],
    );
    // The producer's timestamps do not matter: not even ones far out of CreateTime's bounds.
    let before = now_ms();
    let resp = produce(
        &mut c,
        "stamped",
        batch(&[(None, Some(b"a")), (None, Some(b"b"))], 5).freeze(),
    );
    let after = now_ms();
    assert_eq!(resp.error_code, 0);
    let appended = resp.log_append_time_ms;
    assert!(
        (before..=after).contains(&appended),
        "{before} <= {appended} <= {after}"
    );
    let (_, bytes) = fetch(&mut c, "stamped", 0);
    let h = record_batch::validate(&bytes, 0).expect("the stamped batch's CRC is valid");
    assert!(h.is_log_append_time());
    assert_eq!((h.base_timestamp, h.max_timestamp), (5, appended));

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .set("group.id", "stamped-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("stamped", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 2 && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            seen.push(m.expect("fetch ok").timestamp());
        }
    }
    assert_eq!(
        seen,
        vec![Timestamp::LogAppendTime(appended); 2],
        "librdkafka reads the broker's timestamp type and time"
    );
    broker.shutdown().unwrap();
}

#[test]
fn topic_compression_type_recompresses_batches() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    let targets = [
        ("gz", "gzip", 1),
        ("sn", "snappy", 2),
        ("lz", "lz4", 3),
        ("zs", "zstd", 4),
    ];
    for (topic, codec, _) in targets {
        create_topic(&mut c, topic, &[("compression.type", codec)]);
    }
    create_topic(&mut c, "plain", &[("compression.type", "uncompressed")]);
    let messages: Vec<(Option<String>, String)> = (0..50)
        .map(|i| {
            (
                Some(format!("k{i}")),
                format!("value {i} {}", "z".repeat(100)),
            )
        })
        .collect();
    // librdkafka sends uncompressed batches to the codec topics and lz4 ones to plain.
    let plain_producer = [("compression.type", "none")];
    for (topic, _, _) in targets {
        common::rd_produce(broker.addr, topic, &plain_producer, &messages);
    }
    common::rd_produce(
        broker.addr,
        "plain",
        &[("compression.type", "lz4")],
        &messages,
    );
    let expected = targets.iter().map(|&(topic, _, codec)| (topic, codec));
    for (topic, codec) in expected.chain([("plain", 0)]) {
        let (hw, bytes) = fetch(&mut c, topic, 0);
        assert_eq!(hw, 50);
        let batches = record_batch::validate_all(&bytes).expect("stored batches are valid");
        assert!(!batches.is_empty());
        for (_, h) in &batches {
            assert_eq!(h.compression(), codec, "{topic}");
        }
        let read = common::rd_consume(broker.addr, topic, 1, 50);
        let got: Vec<(Option<String>, String)> =
            read.into_iter().map(|(_, _, k, v)| (k, v)).collect();
        assert_eq!(got, messages, "{topic}");
    }
    broker.shutdown().unwrap();
}

/// A compressed batch is inflated to be checked, within `log.cleaner.batch.inflated.max.bytes`;
/// one that inflates past it is refused, and compressed records are checked like plain ones.
#[test]
fn compressed_batches_are_inflated_within_the_bound_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        1,
        &[("log.cleaner.batch.inflated.max.bytes", "1048576")],
    );
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "z", &[]);
    create_topic(&mut c, "zc", &[("cleanup.policy", "compact")]);
    let now = now_ms();
    let gzip = |b: &BytesMut| -> Bytes {
        let section =
            tributary_storage::codec::compress(1, &b[RECORD_BATCH_HEADER_BYTES..], b"").unwrap();
        Bytes::from(record_batch::with_records(b, 1, &section))
    };

    let big = vec![0u8; 2 << 20];
    let bomb = gzip(&batch(&[(None, Some(&big[..]))], now));
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let resp = produce(&mut c, "z", bomb);
    assert_eq!(resp.error_code, ErrorCode::MESSAGE_TOO_LARGE.0);
    assert!(resp
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("log.cleaner.batch.inflated.max.bytes")));

    let mut lying = batch(&[(None, Some(b"one"))], now);
    edit_and_reseal(&mut lying, |b| {
        b[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    });
    assert_eq!(
        produce(&mut c, "z", gzip(&lying)).error_code,
        ErrorCode::INVALID_RECORD.0
    );
    assert_eq!(
        produce(&mut c, "zc", gzip(&batch(&[(None, Some(b"v"))], now))).error_code,
        ErrorCode::INVALID_RECORD.0
    );
    let mut garbage = BytesMut::from(&batch(&[(None, Some(b"v"))], now)[..]);
    edit_and_reseal(&mut garbage, |b| b[22] |= 1); // gzip over bytes that are not gzip
    assert_eq!(
        produce(&mut c, "z", garbage.freeze()).error_code,
        ErrorCode::CORRUPT_MESSAGE.0
    );
    assert_eq!(fetch(&mut c, "z", 0).0, 0);
    let resp = produce(
        &mut c,
        "z",
        gzip(&batch(&[(None, Some(&big[..1000]))], now)),
    );
    assert_eq!((resp.error_code, resp.base_offset), (0, 0));
    broker.shutdown().unwrap();
}
