//! Idempotent-producer state limits against a real broker: `producer.id.expiration.ms` (idle
//! producers are forgotten by the shard's periodic pass) and
//! `producer.state.partition.max.producers`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{start_broker, RawConn};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tributary_protocol::record_batch::build_batch;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut RawConn, topic: &str) {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(5000);
    let resp: CreateTopicsResponse = c.request(ApiKey::CreateTopics, 5, &req);
    assert_eq!(resp.topics[0].error_code, 0);
}

/// Produces one batch to partition 0; (error code, base offset).
fn produce(c: &mut RawConn, topic: &str, records: Bytes) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.request(ApiKey::Produce, 8, &req);
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A one-record batch stamped now from `(producer id, epoch, sequence)`.
fn batch(producer: (i64, i16, i32)) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    build_batch(&[(None, Some(b"v"))], now, Some(producer)).freeze()
}

#[test]
fn an_idle_producer_is_forgotten_after_producer_id_expiration_ms() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        1,
        &[
            ("producer.id.expiration.ms", "2000"),
            ("log.retention.check.interval.ms", "100"),
        ],
    );
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "exp");
    assert_eq!(produce(&mut c, "exp", batch((7, 0, 0))), (0, 0));
    // Known: a retry is answered with its original offset and not stored again.
    assert_eq!(produce(&mut c, "exp", batch((7, 0, 0))), (0, 0));
    // Idle well past the expiration (the shard checks every 100 ms).
    std::thread::sleep(Duration::from_millis(3000));
    // Forgotten: the same batch is new data now, at the next offset.
    assert_eq!(produce(&mut c, "exp", batch((7, 0, 0))), (0, 1));
    broker.shutdown().unwrap();
}

#[test]
fn a_partition_keeps_at_most_max_producers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        1,
        &[("producer.state.partition.max.producers", "2")],
    );
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "bounded");
    for (i, pid) in [1, 2, 3].into_iter().enumerate() {
        assert_eq!(
            produce(&mut c, "bounded", batch((pid, 0, 0))),
            (0, i as i64)
        );
    }
    // Producer 3 is known; producer 1, the least recently used, was evicted for it, so its
    // retry is stored again.
    assert_eq!(produce(&mut c, "bounded", batch((3, 0, 0))), (0, 2));
    assert_eq!(produce(&mut c, "bounded", batch((1, 0, 0))), (0, 3));
    broker.shutdown().unwrap();
}
