//! A plaintext producer's connection moves to the shard that owns the partition it writes
//! (`connection.handover.produce.requests`) while its idempotent producer keeps requests in
//! flight: every message arrives once, in order, across the move. With the key at 0 no
//! connection moves.

mod common;

use common::{metric, rd_consume, rd_create_topics, rd_produce, start_broker};

const HANDED_OVER: &str = "tributary_connections_handed_over_total";

/// Messages each producer sends, one per request (`batch.num.messages=1`).
const MESSAGES_PER_PRODUCER: usize = 60;

fn one_partition_topic(addr: std::net::SocketAddr, name: &str) {
    rd_create_topics(
        addr,
        &[rdkafka::admin::NewTopic::new(
            name,
            1,
            rdkafka::admin::TopicReplication::Fixed(1),
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
fn produce_once(addr: std::net::SocketAddr, topic: &str, p: usize) {
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
fn values(
    addr: std::net::SocketAddr,
    scrape: std::net::SocketAddr,
    topic: &str,
    producers: usize,
) -> Vec<String> {
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
    let broker = start_broker(
        dir.path(),
        2,
        &[("connection.handover.produce.requests", "4")],
    );
    let scrape = broker.metrics_addr.expect("metrics endpoint");
    one_partition_topic(broker.addr, "moving");
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

#[test]
fn with_the_handover_off_no_connection_moves() {
    const PRODUCERS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        2,
        &[("connection.handover.produce.requests", "0")],
    );
    let scrape = broker.metrics_addr.expect("metrics endpoint");
    one_partition_topic(broker.addr, "staying");
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
