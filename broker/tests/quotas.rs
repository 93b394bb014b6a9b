//! Client quotas over the wire: AlterClientQuotas and DescribeClientQuotas with Kafka's
//! checks, and a producer past its `producer_byte_rate` told `throttle_time_ms` and held back —
//! its connection reads nothing more until the throttle time has passed — while another
//! connection is served at once.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, CreateTopicsRequest,
    CreateTopicsResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

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

/// Produces `bytes` bytes in one record; (error code, throttle_time_ms).
fn produce(c: &mut RawConn, bytes: usize) -> (i16, i32) {
    let value = vec![7u8; bytes];
    let batch = tributary_protocol::record_batch::build_batch(
        &[(None, Some(&value[..]))],
        1_700_000_000_000,
        None,
    );
    let r: ProduceResponse = c.request(
        ApiKey::Produce,
        9,
        &ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s("q")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch.freeze()))])]),
    );
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
    // Kafka's checks: unknown keys and entity types, values that are not positive rates.
    assert_eq!(
        alter(
            &mut c,
            vec![
                entry(Some("x"), "request_percentage", 50.0, false),
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
