//! `trib top` against a real broker: while a producer writes to a topic, two refreshes of the
//! view (piped, so as timestamped blocks) show the topic's bytes coming in and Produce requests.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use common::{start_broker, trib};

const TOPIC: &str = "top-watched";
/// How long the producer runs at most, should the test fail before stopping it.
const PRODUCE_DEADLINE: Duration = Duration::from_secs(90);
const VALUE_BYTES: usize = 200;
/// Records sent between flushes, and the pause after each flush: a steady trickle.
const BURST: usize = 50;
const PAUSE: Duration = Duration::from_millis(20);

/// The number a table cell starts with (`1.5KiB` → 1.5).
fn leading_number(cell: &str) -> f64 {
    let digits: String = cell
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} starts with no number"))
}

/// The cells of the row of `block` whose first cell is `first`.
fn row<'a>(block: &'a str, first: &str) -> Vec<&'a str> {
    block
        .lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no {first} row in:\n{block}"))
        .split_whitespace()
        .collect()
}

#[test]
fn top_shows_the_topic_being_produced_to() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]);
    let metrics = broker.metrics_addr.expect("the metrics endpoint is on");
    let bootstrap = broker.addr.to_string();

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("admin client");
    let created = futures::executor::block_on(admin.create_topics(
        &[NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))],
        &AdminOptions::new(),
    ))
    .expect("CreateTopics");
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");

    // A producer that keeps sending while trib watches, so both of its intervals see traffic.
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, delivered, bootstrap) = (stop.clone(), delivered.clone(), bootstrap.clone());
        std::thread::spawn(move || {
            let p: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("acks", "all")
                .set("linger.ms", "1")
                .create()
                .expect("producer");
            let value = "v".repeat(VALUE_BYTES);
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < PRODUCE_DEADLINE {
                for _ in 0..BURST {
                    p.send(BaseRecord::<(), str>::to(TOPIC).payload(value.as_str()))
                        .expect("the producer's queue has room for a burst");
                }
                p.flush(Duration::from_secs(30))
                    .expect("a burst is delivered");
                delivered.fetch_add(BURST as u64, Ordering::Relaxed);
                std::thread::sleep(PAUSE);
            }
        })
    };
    let started = Instant::now();
    while delivered.load(Ordering::Relaxed) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30) && !producer.is_finished(),
            "the producer delivered nothing"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let metrics = metrics.to_string();
    let (ok, out, err) = trib(&[
        "top",
        "--metrics",
        &metrics,
        "--iterations",
        "2",
        "--interval-ms",
        "500",
    ]);
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("the producer thread");
    assert!(ok, "trib top failed: {err}\n{out}");

    // Piped output: one block per refresh, each opened by its timestamp line.
    let blocks: Vec<&str> = out.split("--- ").filter(|b| !b.is_empty()).collect();
    assert_eq!(blocks.len(), 2, "two refreshes:\n{out}");
    assert!(
        !out.contains('\x1b'),
        "no terminal escapes when piped:\n{out}"
    );
    for block in blocks {
        assert!(
            block.contains(" UTC · 1 broker · 0.5s interval ---"),
            "{block}"
        );
        assert_eq!(row(block, &metrics)[1], "up", "{block}");
        let topic = row(block, TOPIC);
        assert!(
            leading_number(topic[1]) > 0.0,
            "bytes in/s of {TOPIC}:\n{block}"
        );
        assert!(
            leading_number(topic[2]) > 0.0,
            "messages in/s of {TOPIC}:\n{block}"
        );
        let produce = row(block, "Produce");
        assert!(
            leading_number(produce[1]) > 0.0,
            "Produce requests/s:\n{block}"
        );
        assert_ne!(produce[2], "-", "Produce p50:\n{block}");
        assert_ne!(produce[3], "-", "Produce p99:\n{block}");
        let append = row(block, "produce");
        assert!(block.contains("produce append"), "{block}");
        assert_eq!(append[1], "receive", "stages in request order:\n{block}");
    }
}

#[test]
fn top_names_the_endpoint_it_cannot_reach() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let (ok, out, err) = trib(&["top", "--metrics", &addr, "--iterations", "1"]);
    assert!(!ok, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with("trib: cannot connect to the metrics endpoint") && err.contains(&addr),
        "{err}"
    );
    assert!(err.contains("metrics.listen"), "{err}");
}
