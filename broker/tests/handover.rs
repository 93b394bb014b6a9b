//! A plaintext producer's connection moves to the shard that owns the partition it writes
//! (`connection.handover.produce.requests`) while requests are in flight: every message arrives
//! once, in order, across the move, and requests pipelined on one socket are answered on it in
//! request order. With the key at 0 no connection moves.

mod common;

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use common::{
    metric, produce_request, rd_consume, rd_create_topics, rd_produce, start_broker, RawConn,
};
use tributary_broker::server::BrokerHandle;

const HANDED_OVER: &str = "tributary_connections_handed_over_total";

/// Messages each producer sends, one per request (`batch.num.messages=1`).
const MESSAGES_PER_PRODUCER: usize = 60;

/// A broker of two shards with `connection.handover.produce.requests` at `after`, its metrics
/// endpoint, and `topic` of `partitions` partitions.
fn broker(
    dir: &std::path::Path,
    after: &str,
    topic: &str,
    partitions: i32,
) -> (BrokerHandle, SocketAddr) {
    let broker = start_broker(dir, 2, &[("connection.handover.produce.requests", after)]);
    let scrape = broker.metrics_addr.expect("metrics endpoint");
    create_topic(broker.addr, topic, partitions);
    (broker, scrape)
}

fn create_topic(addr: SocketAddr, topic: &str, partitions: i32) {
    let replication = rdkafka::admin::TopicReplication::Fixed(1);
    rd_create_topics(
        addr,
        &[rdkafka::admin::NewTopic::new(
            topic,
            partitions,
            replication,
        )],
    );
}

/// Producer `p`'s messages, each value naming its producer and place.
fn messages(p: usize) -> Vec<(Option<String>, String)> {
    (0..MESSAGES_PER_PRODUCER)
        .map(|i| (None, format!("producer {p} message {i}")))
        .collect()
}

/// Produces `messages(p)` through a new producer (a new connection, which the kernel puts on
/// either shard), one message per request with up to five requests in flight.
fn produce_once(addr: SocketAddr, topic: &str, p: usize) {
    let extra = [
        ("enable.idempotence", "true"),
        ("batch.num.messages", "1"),
        ("linger.ms", "0"),
        ("max.in.flight.requests.per.connection", "5"),
    ];
    rd_produce(addr, topic, &extra, &messages(p));
}

/// The values of the topic's single partition, in offset order, once its log end shows no more
/// than the messages of `producers`: a duplicate would be one more.
fn values(addr: SocketAddr, scrape: SocketAddr, topic: &str, producers: usize) -> Vec<String> {
    let count = producers * MESSAGES_PER_PRODUCER;
    let log_end = format!("kafka_log_log_logendoffset{{topic=\"{topic}\"");
    let end = metric(scrape, &log_end);
    assert_eq!(end, count as f64, "the log holds each message once");
    let consumed = rd_consume(addr, topic, 1, count);
    let offsets: Vec<i64> = consumed.iter().map(|c| c.1).collect();
    assert_eq!(offsets, (0..count as i64).collect::<Vec<_>>());
    consumed.into_iter().map(|c| c.3).collect()
}

fn expected(producers: usize) -> Vec<String> {
    (0..producers)
        .flat_map(messages)
        .map(|(_, value)| value)
        .collect()
}

#[test]
fn a_producer_connection_moves_to_its_partitions_shard_with_requests_in_flight() {
    assert!(
        tributary_broker::config::allowed_cpus().len() >= 2,
        "this test needs two CPUs: a connection moves between two shards"
    );
    // Connections land on either shard by the hash of their ports; each producer's produce
    // connection lands on the other shard with probability 1/2, so twenty producers all
    // landing on the owner is a one-in-a-million event.
    const PRODUCERS_MAX: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let (broker, scrape) = broker(dir.path(), "4", "moving", 1);
    let mut producers = 0;
    while metric(scrape, HANDED_OVER) == 0.0 {
        assert!(
            producers < PRODUCERS_MAX,
            "no connection moved after {producers} producers"
        );
        produce_once(broker.addr, "moving", producers);
        producers += 1;
    }
    // One more after the move: the moved connection's producer is gone, a new one starts.
    produce_once(broker.addr, "moving", producers);
    producers += 1;
    assert_eq!(
        values(broker.addr, scrape, "moving", producers),
        expected(producers)
    );
    broker.shutdown().unwrap();
}

/// A record batch of one record, `value`.
fn record(value: &str) -> Bytes {
    tributary_protocol::record_batch::build_batch(
        &[(None, Some(value.as_bytes()))],
        1_700_000_000_000,
        None,
    )
    .freeze()
}

/// Produces over each of `connections` new connections, one request at a time, five rounds
/// of four requests to partition 0 of `topic` then four to partition 1 — the two shards' turn,
/// as a sticky partitioner takes them: with the handover at 4, each connection is due to move
/// after its first run on the other shard's partition, wherever it landed.
fn take_turns(addr: SocketAddr, topic: &str, connections: usize) {
    for c in 0..connections {
        let mut conn = RawConn::connect(addr);
        for round in 0..5 {
            for partition in [0, 1] {
                for i in 0..4 {
                    let value = format!("connection {c} round {round} request {i}");
                    let req = produce_request(topic, partition, -1, record(&value));
                    let r: ProduceResponse = conn.request(ApiKey::Produce, 9, &req);
                    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
                }
            }
        }
    }
}

/// With idempotence off, nothing but the broker keeps order: forty produce requests written
/// at once on one socket (the cut between the two writes inside a frame) are answered on that
/// socket, in request order, each at the next offset, though the connection moved after the
/// fourth with the rest unread; the log holds each record once, in request order.
#[test]
fn pipelined_requests_on_one_socket_are_answered_in_order_across_the_move() {
    const REQUESTS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let (broker, scrape) = broker(dir.path(), "4", "piped", 1);
    let mut written: Vec<String> = Vec::new();
    let mut moved = false;
    for attempt in 0..20 {
        let before = metric(scrape, HANDED_OVER);
        let mut conn = RawConn::connect(broker.addr);
        let mut bytes = BytesMut::new();
        let values: Vec<String> = (0..REQUESTS)
            .map(|i| format!("connection {attempt} request {i}"))
            .collect();
        for v in &values {
            let frame = conn.encode_request(
                ApiKey::Produce,
                9,
                &produce_request("piped", 0, -1, record(v)),
            );
            bytes.extend_from_slice(&frame);
        }
        let cut = bytes.len() / 2 + 3;
        conn.send_raw(&bytes[..cut]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        conn.send_raw(&bytes[cut..]);
        for (i, value) in values.into_iter().enumerate() {
            let mut frame = conn.read_frame().expect("a response on the same socket");
            let version = ApiKey::Produce.response_header_version(9);
            let header = ResponseHeader::decode(&mut frame, version).unwrap();
            assert_eq!(
                header.correlation_id,
                i as i32 + 1,
                "responses in request order"
            );
            let resp = ProduceResponse::decode(&mut frame, 9).unwrap();
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "request {i} of connection {attempt}");
            assert_eq!(
                p.base_offset,
                written.len() as i64,
                "each batch at the next offset"
            );
            written.push(value);
        }
        if metric(scrape, HANDED_OVER) > before {
            moved = true;
            break;
        }
    }
    assert!(moved, "no connection moved in twenty");
    let consumed = rd_consume(broker.addr, "piped", 1, written.len());
    let values: Vec<String> = consumed.into_iter().map(|c| c.3).collect();
    assert_eq!(values, written);
    broker.shutdown().unwrap();
}

/// A connection moves once: one whose requests take turns between the two shards'
/// partitions (as a sticky partitioner's do) moves after its first run to the other shard and
/// stays there.
#[test]
fn a_connection_that_moved_moves_no_more() {
    const CONNECTIONS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let (broker, scrape) = broker(dir.path(), "4", "turns", 2);
    take_turns(broker.addr, "turns", CONNECTIONS);
    let moves = CONNECTIONS as f64;
    common::wait_until("every connection's move counted", || {
        metric(scrape, HANDED_OVER) >= moves
    });
    assert_eq!(
        metric(scrape, HANDED_OVER),
        moves,
        "each connection moved once"
    );
    broker.shutdown().unwrap();
}

/// With the key at 0, connections that would each move (the turns above) stay, and
/// idempotent producers' messages arrive as without the handover.
#[test]
fn with_the_handover_off_no_connection_moves() {
    const PRODUCERS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let (broker, scrape) = broker(dir.path(), "0", "staying", 1);
    create_topic(broker.addr, "turns", 2);
    take_turns(broker.addr, "turns", 3);
    for p in 0..PRODUCERS {
        produce_once(broker.addr, "staying", p);
    }
    assert_eq!(
        values(broker.addr, scrape, "staying", PRODUCERS),
        expected(PRODUCERS)
    );
    assert_eq!(metric(scrape, HANDED_OVER), 0.0);
    broker.shutdown().unwrap();
}
