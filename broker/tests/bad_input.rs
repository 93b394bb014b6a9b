//! What the broker does with input a correct client never sends: each gets the error code Kafka
//! gives it, or — for framing errors — that one connection is closed while the broker serves on.

mod common;

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::{start_broker, RawConn};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tributary_protocol::record_batch::build_batch;
use tributary_protocol::ErrorCode;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut RawConn, topic: &str, partitions: i32) -> i16 {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(5000);
    let resp: CreateTopicsResponse = c.request(ApiKey::CreateTopics, 5, &req);
    resp.topics[0].error_code
}

fn produce(c: &mut RawConn, topic: &str, acks: i16, records: Bytes) -> (i16, i64) {
    let req = common::produce_request(topic, 0, acks, records);
    let resp: ProduceResponse = c.request(ApiKey::Produce, 8, &req);
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn batch(value: &str, producer: Option<(i64, i16, i32)>) -> Bytes {
    build_batch(
        &[(None, Some(value.as_bytes()))],
        1_700_000_000_000,
        producer,
    )
    .freeze()
}

/// Like [`batch`], stamped now: an idempotent producer whose last batch is older than
/// `producer.id.expiration.ms` (a day) is forgotten, as in Kafka.
fn recent_batch(value: &str, producer: Option<(i64, i16, i32)>) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    build_batch(&[(None, Some(value.as_bytes()))], now, producer).freeze()
}

fn assert_still_serving(addr: std::net::SocketAddr) {
    let mut c = RawConn::connect(addr);
    let resp: ApiVersionsResponse =
        c.request(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(resp.error_code, 0);
}

#[test]
fn framing_errors_close_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("socket.request.max.bytes", "1048576")]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("negative length", (-5i32).to_be_bytes().to_vec()),
        ("oversized length", (2_000_000i32).to_be_bytes().to_vec()),
        ("length below a header", 3i32.to_be_bytes().to_vec()),
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
        ),
        ("an unknown API key", {
            let mut b = BytesMut::new();
            b.put_i32(10);
            b.put_i16(999);
            b.put_i16(0);
            b.put_i32(1);
            b.put_i16(-1);
            b.to_vec()
        }),
        ("a truncated Metadata body", {
            let mut b = BytesMut::new();
            b.put_i32(14);
            b.put_i16(3);
            b.put_i16(4);
            b.put_i32(1);
            b.put_i16(-1);
            b.put_i32(5); // five topics follow... but none do
            b.to_vec()
        }),
        ("a Produce version below the minimum", {
            let mut b = BytesMut::new();
            b.put_i32(10);
            b.put_i16(0);
            b.put_i16(2);
            b.put_i32(1);
            b.put_i16(-1);
            b.to_vec()
        }),
    ];
    let keep = RawConn::connect(broker.addr);
    for (what, bytes) in cases {
        let mut c = RawConn::connect(broker.addr);
        c.send_raw(&bytes);
        assert!(c.is_closed(), "{what}: connection should be closed");
        assert_still_serving(broker.addr);
    }
    drop(keep);
    broker.shutdown().unwrap();
}

#[test]
fn unsupported_api_versions_version_gets_a_v0_answer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    let mut b = BytesMut::new();
    b.put_i32(10);
    b.put_i16(18);
    b.put_i16(99);
    b.put_i32(77);
    b.put_i16(-1);
    c.send_raw(&b);
    let mut frame = c.read_frame().expect("answered");
    use bytes::Buf;
    assert_eq!(frame.get_i32(), 77);
    let resp = <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut frame, 0)
        .unwrap();
    assert_eq!(resp.error_code, ErrorCode::UNSUPPORTED_VERSION.0);
    assert!(resp
        .api_keys
        .iter()
        .any(|k| k.api_key == 18 && k.max_version == 3));
    assert!(resp
        .api_keys
        .iter()
        .any(|k| k.api_key == 0 && k.min_version == 3));
    broker.shutdown().unwrap();
}

#[test]
fn produce_errors_match_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        2,
        &[
            ("message.max.bytes", "2000"),
            ("auto.create.topics.enable", "false"),
        ],
    );
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(create_topic(&mut c, "t", 1), 0);
    assert_eq!(
        create_topic(&mut c, "t", 1),
        ErrorCode::TOPIC_ALREADY_EXISTS.0
    );
    assert_eq!(
        create_topic(&mut c, "bad name!", 1),
        ErrorCode::INVALID_TOPIC_EXCEPTION.0
    );
    assert_eq!(
        create_topic(&mut c, "zero", 0),
        ErrorCode::INVALID_PARTITIONS.0
    );

    assert_eq!(produce(&mut c, "t", -1, batch("ok", None)), (0, 0));
    let mut corrupt = BytesMut::from(&batch("flip", None)[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(
        produce(&mut c, "t", -1, corrupt.freeze()).0,
        ErrorCode::CORRUPT_MESSAGE.0
    );
    assert_eq!(
        produce(&mut c, "t", -1, batch(&"x".repeat(3000), None)).0,
        ErrorCode::MESSAGE_TOO_LARGE.0
    );
    assert_eq!(
        produce(&mut c, "t", 2, batch("acks", None)).0,
        ErrorCode::INVALID_REQUIRED_ACKS.0
    );
    assert_eq!(
        produce(&mut c, "missing", -1, batch("x", None)).0,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
    );
    let mut old_magic = BytesMut::from(&batch("m", None)[..]);
    old_magic[16] = 1;
    assert_eq!(
        produce(&mut c, "t", -1, old_magic.freeze()).0,
        ErrorCode::INVALID_RECORD.0
    );
    let mut two = BytesMut::from(&batch("a", None)[..]);
    two.extend_from_slice(&batch("b", None));
    assert_eq!(
        produce(&mut c, "t", -1, two.freeze()).0,
        ErrorCode::INVALID_RECORD.0
    );
    // Only the one good batch was stored.
    assert_eq!(produce(&mut c, "t", 1, batch("next", None)), (0, 1));

    // acks=0: a stored batch gets no response and the connection serves on; a refused one
    // closes the connection, as Kafka closes it, so that the producer refreshes its metadata.
    let mut quiet = RawConn::connect(broker.addr);
    let frame = quiet.encode_request(
        ApiKey::Produce,
        8,
        &common::produce_request("t", 0, 0, batch("q", None)),
    );
    quiet.send_raw(&frame);
    let versions: ApiVersionsResponse =
        quiet.request(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(
        versions.error_code, 0,
        "the next answer is the next request's"
    );
    let refused = common::produce_request("missing", 0, 0, batch("q", None));
    let frame = quiet.encode_request(ApiKey::Produce, 8, &refused);
    quiet.send_raw(&frame);
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut quiet.stream, &mut byte).ok(),
        Some(0),
        "a refused acks=0 batch closes its connection"
    );
    assert_eq!(produce(&mut c, "t", 1, batch("after", None)), (0, 3));

    // Metadata: unknown topic with auto-create off, and an illegal name.
    let req = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name("missing"))),
            MetadataRequestTopic::default().with_name(Some(name("no/slashes"))),
        ]))
        .with_allow_auto_topic_creation(true);
    let md: MetadataResponse = c.request(ApiKey::Metadata, 9, &req);
    assert_eq!(
        md.topics[0].error_code,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
    );
    assert_eq!(
        md.topics[1].error_code,
        ErrorCode::INVALID_TOPIC_EXCEPTION.0
    );
    broker.shutdown().unwrap();
}

#[test]
fn idempotent_produce_dedupes_retries_and_rejects_gaps_and_stale_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(create_topic(&mut c, "idem", 1), 0);
    let init: InitProducerIdResponse = c.request(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert_eq!(init.error_code, 0);
    let pid = init.producer_id.0;
    let init2: InitProducerIdResponse = c.request(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert_ne!(init2.producer_id.0, pid, "producer ids are never reused");

    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("a", Some((pid, 1, 0)))),
        (0, 0)
    );
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("b", Some((pid, 1, 1)))),
        (0, 1)
    );
    // A retry of seq 0 gets its original offset and is not stored again.
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("a", Some((pid, 1, 0)))),
        (0, 0)
    );
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("gap", Some((pid, 1, 5)))).0,
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.0
    );
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("old", Some((pid, 0, 2)))).0,
        ErrorCode::INVALID_PRODUCER_EPOCH.0
    );
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("c", Some((pid, 1, 2)))),
        (0, 2)
    );
    broker.shutdown().unwrap();

    // Producer state is rebuilt from the log, and new producer ids stay above the old ones.
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("b", Some((pid, 1, 1)))),
        (0, 1)
    );
    assert_eq!(
        produce(&mut c, "idem", -1, recent_batch("d", Some((pid, 1, 3)))),
        (0, 3)
    );
    let init3: InitProducerIdResponse = c.request(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    );
    assert!(init3.producer_id.0 > init2.producer_id.0);
    broker.shutdown().unwrap();
}

fn fetch_req(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

#[test]
fn fetch_long_polls_out_of_range_and_list_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(create_topic(&mut c, "poll", 1), 0);
    assert_eq!(produce(&mut c, "poll", -1, batch("first", None)), (0, 0));

    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &fetch_req("poll", 5, 100));
    assert_eq!(
        resp.responses[0].partitions[0].error_code,
        ErrorCode::OFFSET_OUT_OF_RANGE.0
    );

    // Nothing new at offset 1: the fetch waits about max_wait_ms, then answers empty.
    let t0 = Instant::now();
    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &fetch_req("poll", 1, 400));
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "returned after {:?}",
        t0.elapsed()
    );
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 1));
    assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));

    // A produce on another connection wakes a waiting fetch long before its deadline.
    let addr = broker.addr;
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut p = RawConn::connect(addr);
        produce(&mut p, "poll", -1, batch("second", None))
    });
    let t0 = Instant::now();
    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &fetch_req("poll", 1, 10_000));
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(producer.join().unwrap(), (0, 1));
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 2);
    assert!(p.records.as_ref().is_some_and(|r| !r.is_empty()));

    let lo = |ts: i64| {
        ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("poll"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(ts)])])
    };
    let earliest: ListOffsetsResponse = c.request(ApiKey::ListOffsets, 5, &lo(-2));
    let latest: ListOffsetsResponse = c.request(ApiKey::ListOffsets, 5, &lo(-1));
    let by_time: ListOffsetsResponse = c.request(ApiKey::ListOffsets, 5, &lo(1_600_000_000_000));
    let future: ListOffsetsResponse = c.request(ApiKey::ListOffsets, 5, &lo(1_900_000_000_000));
    assert_eq!(earliest.topics[0].partitions[0].offset, 0);
    assert_eq!(latest.topics[0].partitions[0].offset, 2);
    assert_eq!(by_time.topics[0].partitions[0].offset, 0);
    assert_eq!(future.topics[0].partitions[0].offset, -1);
    broker.shutdown().unwrap();
}

#[test]
fn a_failing_disk_answers_kafka_storage_error_for_that_partition_only() {
    use tributary_storage::io::faults::{self, FileOp};
    const EIO: i32 = 5;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(create_topic(&mut c, "sick", 1), 0);
    assert_eq!(create_topic(&mut c, "well", 1), 0);
    assert_eq!(produce(&mut c, "sick", -1, batch("before", None)), (0, 0));

    let pattern = dir.path().join("sick-0").display().to_string();
    faults::inject(&pattern, FileOp::Sync, EIO, None);
    for acks in [-1, 1] {
        assert_eq!(
            produce(&mut c, "sick", acks, batch("never acknowledged", None)).0,
            ErrorCode::KAFKA_STORAGE_ERROR.0
        );
    }
    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &fetch_req("sick", 0, 0));
    assert_eq!(
        resp.responses[0].partitions[0].error_code,
        ErrorCode::KAFKA_STORAGE_ERROR.0
    );
    // The other partition, and the connection, keep working.
    assert_eq!(produce(&mut c, "well", -1, batch("fine", None)), (0, 0));
    let resp: FetchResponse = c.request(ApiKey::Fetch, 11, &fetch_req("well", 0, 0));
    assert_eq!(resp.responses[0].partitions[0].error_code, 0);
    assert!(resp.responses[0].partitions[0]
        .records
        .as_ref()
        .is_some_and(|r| !r.is_empty()));
    faults::clear(&pattern);
}

#[test]
fn delete_records_refuses_unknown_partitions_and_bad_offsets() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    assert_eq!(create_topic(&mut c, "trimmed", 1), 0);
    assert_eq!(produce(&mut c, "trimmed", -1, batch("one", None)), (0, 0));
    let part = |p: i32, o: i64| {
        DeleteRecordsPartition::default()
            .with_partition_index(p)
            .with_offset(o)
    };
    let req = DeleteRecordsRequest::default()
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(name("trimmed"))
                .with_partitions(vec![part(0, -5), part(0, 2), part(7, 0)]),
            DeleteRecordsTopic::default()
                .with_name(name("absent"))
                .with_partitions(vec![part(0, 0)]),
        ])
        .with_timeout_ms(1000);
    for v in 0..=2 {
        let resp: DeleteRecordsResponse = c.request(ApiKey::DeleteRecords, v, &req);
        let codes: Vec<Vec<(i16, i64)>> = resp
            .topics
            .iter()
            .map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.error_code, p.low_watermark))
                    .collect()
            })
            .collect();
        let (oor, unknown) = (
            ErrorCode::OFFSET_OUT_OF_RANGE.0,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
        );
        assert_eq!(
            codes,
            vec![
                vec![(oor, -1), (oor, -1), (unknown, -1)],
                vec![(unknown, -1)]
            ],
            "v{v}"
        );
    }
    // Nothing moved, and the connection still works.
    let ok: DeleteRecordsResponse = c.request(
        ApiKey::DeleteRecords,
        2,
        &DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("trimmed"))
            .with_partitions(vec![part(0, 1)])]),
    );
    assert_eq!(
        (
            ok.topics[0].partitions[0].error_code,
            ok.topics[0].partitions[0].low_watermark
        ),
        (0, 1)
    );
    broker.shutdown().unwrap();
}
