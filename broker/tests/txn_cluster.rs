//! Transactions on a three-process cluster: a transaction over partitions led by different
//! brokers (markers reach the other leaders by WriteTxnMarkers), and the coordinator killed with
//! a transaction open — its successor, the new leader of the replicated `__transaction_state`
//! partition, takes the producer's EndTxn and commits what the dead one had accepted.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use common::cluster::{broker_ids, leaders, metadata, Cluster};
use common::{rd_create_topics, wait_until, RawConn};

const T: Duration = Duration::from_secs(60);
const TOPIC: &str = "xt";

fn send(p: &BaseProducer, tag: &str, n: usize) -> Vec<String> {
    let mut sent = Vec::new();
    for i in 0..n {
        let v = format!("{tag}-{i}");
        let mut rec = BaseRecord::<(), String>::to(TOPIC)
            .payload(&v)
            .partition((i % 3) as i32);
        while let Err((_, r)) = p.send(rec) {
            rec = r;
            p.poll(Duration::from_millis(10));
        }
        sent.push(v);
    }
    p.flush(T).expect("flush");
    sent
}

fn read_committed(bootstrap: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + T;
    let mut last = Instant::now();
    while Instant::now() < deadline && last.elapsed() < Duration::from_secs(3) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            last = Instant::now();
        }
    }
    out.sort();
    out
}

/// The node coordinating transactional id `id`, as FindCoordinator v3 answers.
fn coordinator(addr: SocketAddr, id: &'static str) -> i32 {
    let mut conn = RawConn::connect(addr);
    let resp: FindCoordinatorResponse = conn.request(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str(id))
            .with_key_type(1),
    );
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.node_id.0
}

#[test]
fn a_transaction_spans_brokers_and_survives_its_coordinator() {
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "transaction.state.log.num.partitions=3".into(),
        "min.insync.replicas=2".into(),
    ];
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        broker_ids(&metadata(&all, None)) == vec![1, 2, 3]
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 3, TopicReplication::Fixed(3))],
    );
    wait_until("the topic led by more than one broker", || {
        let l = leaders(&all, TOPIC);
        l.len() == 3 && l.iter().all(|&x| x > 0) && l.iter().any(|&x| x != l[0])
    });
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &all)
        .set("transactional.id", "cluster-tx")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    p.init_transactions(T).expect("init_transactions");
    p.begin_transaction().unwrap();
    let mut want = send(&p, "one", 30);
    p.commit_transaction(T).unwrap();
    p.begin_transaction().unwrap();
    send(&p, "dropped", 30);
    p.abort_transaction(T).unwrap();
    want.sort();
    assert_eq!(read_committed(&all), want, "markers on every leader");

    // The coordinator dies with a transaction open and its records written.
    let c = coordinator(cluster.nodes[0].client, "cluster-tx");
    p.begin_transaction().unwrap();
    want.extend(send(&p, "three", 30));
    cluster.kill((c - 1) as usize);
    p.commit_transaction(T)
        .expect("the new coordinator commits the transaction");
    want.sort();
    let live: String = cluster
        .nodes
        .iter()
        .filter(|n| n.id != c)
        .map(|n| n.client.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(read_committed(&live), want);
    // Back, the old coordinator's node serves the same committed data.
    cluster.spawn((c - 1) as usize);
    cluster.wait_listening((c - 1) as usize);
    wait_until("three brokers again", || {
        broker_ids(&metadata(&all, None)) == vec![1, 2, 3]
    });
    assert_eq!(read_committed(&all), want);
}
