//! Client quotas over the wire: AlterClientQuotas and DescribeClientQuotas with Kafka's
//! checks, and a producer past its `producer_byte_rate` — or a client past its
//! `request_percentage` of the shard's time — told `throttle_time_ms` and held back (its
//! connection reads nothing more until the throttle time has passed) while another connection,
//! or another client id, is served at once.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, CreateTopicsRequest,
    CreateTopicsResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use common::{start_broker, RawConn};

const INVALID_REQUEST: i16 = 42;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn entry(client: Option<&str>, key: &str, value: f64, remove: bool) -> EntryData {
    EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(client.map(s))])
        .with_ops(vec![OpData::default()
            .with_key(s(key))
            .with_value(value)
            .with_remove(remove)])
}

fn alter(c: &mut RawConn, entries: Vec<EntryData>) -> Vec<i16> {
    let r: AlterClientQuotasResponse = c.request(
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(entries),
    );
    r.entries.iter().map(|e| e.error_code).collect()
}

/// Creates topic `q`, one partition, that the produce helpers write to.
fn create_q(c: &mut RawConn) {
    let r: CreateTopicsResponse = c.request(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s("q")))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
    );
    assert_eq!(r.topics[0].error_code, 0);
}

/// Produces `bytes` bytes in one record; (error code, throttle_time_ms).
fn produce(c: &mut RawConn, bytes: usize) -> (i16, i32) {
    let r: ProduceResponse = c.request(ApiKey::Produce, 9, &produce_request(bytes, 1));
    (
        r.responses[0].partition_responses[0].error_code,
        r.throttle_time_ms,
    )
}

#[test]
fn a_producer_over_its_byte_rate_is_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(b.addr);
    create_q(&mut c);
    // Kafka's checks: keys not served, unknown entity types, values that are not positive.
    assert_eq!(
        alter(
            &mut c,
            vec![
                entry(Some("x"), "controller_mutation_rate", 50.0, false),
                entry(Some("x"), "producer_byte_rate", -1.0, false),
                EntryData::default()
                    .with_entity(vec![EntityData::default()
                        .with_entity_type(s("ip"))
                        .with_entity_name(Some(s("1.2.3.4")))])
                    .with_ops(vec![]),
            ]
        ),
        [INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST]
    );
    // The test connection's client id (`raw-test`) gets 100 KB/s; every other client the
    // default, far above what this test sends.
    assert_eq!(
        alter(
            &mut c,
            vec![
                entry(Some("raw-test"), "producer_byte_rate", 100_000.0, false),
                entry(None, "producer_byte_rate", 1e9, false),
            ]
        ),
        [0, 0]
    );
    let described: DescribeClientQuotasResponse = c.request(
        ApiKey::DescribeClientQuotas,
        1,
        &DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(s("client-id"))
            .with_match_type(0)
            .with_match(Some(s("raw-test")))]),
    );
    // A filter naming an entity type Kafka does not know is INVALID_REQUEST.
    let bad: DescribeClientQuotasResponse = c.request(
        ApiKey::DescribeClientQuotas,
        1,
        &DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(s("ip"))
            .with_match_type(2)
            .with_match(None)]),
    );
    assert_eq!(bad.error_code, INVALID_REQUEST);
    let entries = described.entries.expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].values[0].key.as_str(), "producer_byte_rate");
    assert_eq!(entries[0].values[0].value, 100_000.0);
    // 700 KB: 70 KB/s over the ten-second window, within the quota.
    assert_eq!(produce(&mut c, 700_000), (0, 0));
    // 700 KB more: 140 KB/s, 40 % over: about four seconds of throttle.
    let (code, throttle_ms) = produce(&mut c, 700_000);
    assert_eq!(code, 0, "a throttled request is still served");
    assert!((2_000..=6_000).contains(&throttle_ms), "{throttle_ms}");
    // The connection is held back: its next request is read only once the time has passed.
    let started = Instant::now();
    let _ = produce(&mut c, 10);
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(throttle_ms as u64 - 500),
        "held {held:?} of {throttle_ms} ms"
    );
    // Only that connection is held back: another one is served at once.
    let mut other = RawConn::connect(b.addr);
    let started = Instant::now();
    let r: kafka_protocol::messages::MetadataResponse = other.request(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default(),
    );
    assert!(!r.brokers.is_empty());
    assert!(started.elapsed() < Duration::from_secs(1));
    // Removing the quota frees the client.
    assert_eq!(
        alter(
            &mut c,
            vec![entry(Some("raw-test"), "producer_byte_rate", 0.0, true)]
        ),
        [0]
    );
    b.shutdown().unwrap();
}

/// Sends `req` as version `v` of `key` with client id `client_id`.
fn send_as(
    c: &mut RawConn,
    client_id: &str,
    (key, v): (ApiKey, i16),
    correlation: i32,
    req: &impl Encodable,
) {
    use bytes::BufMut;
    let mut body = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(correlation)
        .with_client_id(Some(s(client_id)))
        .encode(&mut body, key.request_header_version(v))
        .unwrap();
    req.encode(&mut body, v).unwrap();
    let mut frame = bytes::BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    c.send_raw(&frame);
}

/// A Produce of one record of `bytes` bytes to partition 0 of `q`, with `acks`.
fn produce_request(bytes: usize, acks: i16) -> ProduceRequest {
    let value = vec![7u8; bytes];
    let batch = tributary_protocol::record_batch::build_batch(
        &[(None, Some(&value[..]))],
        1_700_000_000_000,
        None,
    );
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s("q")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch.freeze()))])])
}

/// Sends Metadata v12 (all topics) with client id `client_id`; its `throttle_time_ms`.
fn metadata_as(c: &mut RawConn, client_id: &str, correlation: i32) -> i32 {
    let (key, v) = (ApiKey::Metadata, 12);
    send_as(
        c,
        client_id,
        (key, v),
        correlation,
        &MetadataRequest::default().with_topics(None),
    );
    let mut resp = c.read_frame().expect("a response");
    let header = ResponseHeader::decode(&mut resp, key.response_header_version(v)).unwrap();
    assert_eq!(header.correlation_id, correlation);
    let r = MetadataResponse::decode(&mut resp, v).expect("response decodes");
    assert!(!r.brokers.is_empty());
    r.throttle_time_ms
}

/// Requests `client_id` completes on `c` in `period`, and the throttle time they carried.
fn requests_within(c: &mut RawConn, client_id: &str, period: Duration) -> (u32, u64) {
    let started = Instant::now();
    let (mut n, mut throttled_ms) = (0u32, 0u64);
    // Bounded in count as well as time.
    while started.elapsed() < period && n < 100_000 {
        throttled_ms += metadata_as(c, client_id, n as i32) as u64;
        n += 1;
    }
    (n, throttled_ms)
}

#[test]
fn a_client_over_its_request_percentage_is_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker(dir.path(), 1, &[]);
    let mut admin = RawConn::connect(b.addr);
    // Values that are not a positive share of the shard are refused.
    assert_eq!(
        alter(
            &mut admin,
            vec![
                entry(Some("busy"), "request_percentage", -1.0, false),
                entry(Some("busy"), "request_percentage", 0.0, false),
                entry(Some("busy"), "request_percentage", f64::NAN, false),
            ]
        ),
        [INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST]
    );
    // The client `busy` may use 1 % of the shard: 100 ms of handling over the 10 s window.
    assert_eq!(
        alter(
            &mut admin,
            vec![entry(Some("busy"), "request_percentage", 1.0, false)]
        ),
        [0]
    );
    let described: DescribeClientQuotasResponse = admin.request(
        ApiKey::DescribeClientQuotas,
        1,
        &DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(s("client-id"))
            .with_match_type(0)
            .with_match(Some(s("busy")))]),
    );
    let entries = described.entries.expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].values.len(), 1);
    assert_eq!(entries[0].values[0].key.as_str(), "request_percentage");
    assert_eq!(entries[0].values[0].value, 1.0);

    // Cheap requests as fast as one connection sends them, until one is throttled.
    let mut busy = RawConn::connect(b.addr);
    let started = Instant::now();
    let mut sent = 0;
    let throttle_ms = loop {
        assert!(
            sent < 200_000 && started.elapsed() < Duration::from_secs(60),
            "no throttle after {sent} requests in {:?}",
            started.elapsed()
        );
        let t = metadata_as(&mut busy, "busy", sent);
        sent += 1;
        if t > 0 {
            break t;
        }
    };
    // Kafka bounds a request-quota throttle by one sample (quota.window.size.seconds).
    assert!((1..=1_000).contains(&throttle_ms), "{throttle_ms}");
    // The connection is held back: its next request is read only once the time has passed.
    let before = Instant::now();
    let next = metadata_as(&mut busy, "busy", sent);
    let held = before.elapsed();
    assert!(
        held + Duration::from_millis(50) >= Duration::from_millis(throttle_ms as u64),
        "held {held:?} of {throttle_ms} ms"
    );
    assert!(next > 0, "still over the quota: {next}");

    // Another client id on the shard is not throttled, and is served many times faster.
    let mut other = RawConn::connect(b.addr);
    let (others, other_throttled) =
        requests_within(&mut other, "other-app", Duration::from_secs(1));
    assert_eq!(other_throttled, 0, "another client id is not throttled");
    // The throttled client's rate is bounded: each answer holds it back in proportion to how
    // far over the quota its shard time is, so it spends most of its time held back and gets
    // a small fraction of the requests another client gets.
    let (busies, busy_throttled) = requests_within(&mut busy, "busy", Duration::from_secs(3));
    assert!(
        busy_throttled >= 1_500,
        "held back {busy_throttled} ms of 3 s by {busies} answers"
    );
    assert!(
        busies * 20 <= others * 3,
        "{others}/s for another client id, {busies} in 3 s for the throttled one"
    );
    // Removing the quota frees the client (once its last throttle has passed).
    assert_eq!(
        alter(
            &mut admin,
            vec![entry(Some("busy"), "request_percentage", 0.0, true)]
        ),
        [0]
    );
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(metadata_as(&mut busy, "busy", 1_000_000), 0);
    b.shutdown().unwrap();
}

/// As Kafka, an acks=0 produce (which gets no response to carry a throttle) is exempt from the
/// request quota: a client sending only those is never held back for its shard time, while the
/// same requests with acks=1 put it over the same quota.
#[test]
fn an_acks0_produce_is_exempt_from_the_request_quota() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker(dir.path(), 1, &[]);
    let mut admin = RawConn::connect(b.addr);
    create_q(&mut admin);
    // 0.01 % of the shard: 1 ms of handling over the 10 s window.
    for client in ["fire", "acked"] {
        assert_eq!(
            alter(
                &mut admin,
                vec![entry(Some(client), "request_percentage", 0.01, false)]
            ),
            [0]
        );
    }
    let rounds = 200;
    // acks=1: 200 produces of 64 KiB take far more than 1 ms; throttled before the end (each
    // throttled answer holds the connection back, so the loop stops at the first).
    let mut acked = RawConn::connect(b.addr);
    let mut acked_throttle = 0;
    for i in 0..rounds {
        if acked_throttle > 0 {
            break;
        }
        send_as(
            &mut acked,
            "acked",
            (ApiKey::Produce, 9),
            i,
            &produce_request(64 << 10, 1),
        );
        let mut resp = acked.read_frame().expect("a produce response");
        ResponseHeader::decode(&mut resp, ApiKey::Produce.response_header_version(9)).unwrap();
        let r = ProduceResponse::decode(&mut resp, 9).unwrap();
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        acked_throttle = acked_throttle.max(r.throttle_time_ms);
    }
    assert!(acked_throttle > 0, "acks=1 produces were never throttled");
    // acks=0: the same work, no throttle on the connection's next request.
    let mut fire = RawConn::connect(b.addr);
    for i in 0..rounds {
        send_as(
            &mut fire,
            "fire",
            (ApiKey::Produce, 9),
            i,
            &produce_request(64 << 10, 0),
        );
    }
    assert_eq!(metadata_as(&mut fire, "fire", rounds), 0);
    b.shutdown().unwrap();
}
