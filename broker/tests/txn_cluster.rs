//! Transactions on a three-process cluster: a transaction over partitions led by different
//! brokers (markers reach the other leaders by WriteTxnMarkers), and the coordinator killed with
//! a transaction open — its successor, the new leader of the replicated `__transaction_state`
//! partition, takes the producer's EndTxn and commits what the dead one had accepted.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use common::cluster::{broker_ids, leaders, metadata, Cluster};
use common::{rd_create_topics, wait_until, RawConn};

const T: Duration = Duration::from_secs(60);
const TOPIC: &str = "xt";

fn send(p: &TxnProducer, tag: &str, n: usize) -> Vec<String> {
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
    let mut out = common::read_topic(bootstrap, TOPIC, 3, "read_committed", 0);
    out.sort();
    out
}

/// The node coordinating `key` — a group (`key_type` 0) or a transactional id (1) — as
/// FindCoordinator v3 answers once the coordinator is available.
fn coordinator(addr: SocketAddr, key: &str, key_type: i8) -> i32 {
    let deadline = Instant::now() + T;
    loop {
        let resp: FindCoordinatorResponse = RawConn::connect(addr).request(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(key.to_string()))
                .with_key_type(key_type),
        );
        if resp.error_code == 0 {
            return resp.node_id.0;
        }
        assert!(Instant::now() < deadline, "{resp:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three nodes with small transaction state, every one registered; the cluster and all
/// brokers' addresses.
fn start_cluster(extra: &[&str]) -> (Cluster, String) {
    let mut cluster = Cluster::new(3);
    cluster.extra = [
        "transaction.state.log.num.partitions=3",
        "min.insync.replicas=2",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        broker_ids(&metadata(&all, None)) == vec![1, 2, 3]
    });
    (cluster, all)
}

#[test]
fn a_transaction_spans_brokers_and_survives_its_coordinator() {
    let (mut cluster, all) = start_cluster(&[]);
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 3, TopicReplication::Fixed(3))],
    );
    wait_until("the topic led by more than one broker", || {
        let l = leaders(&all, TOPIC);
        l.len() == 3 && l.iter().all(|&x| x > 0) && l.iter().any(|&x| x != l[0])
    });
    let p = txn_producer(&all, "cluster-tx");
    p.begin_transaction().unwrap();
    let mut want = send(&p, "one", 30);
    p.commit_transaction(T).unwrap();
    p.begin_transaction().unwrap();
    send(&p, "dropped", 30);
    p.abort_transaction(T).unwrap();
    want.sort();
    assert_eq!(read_committed(&all), want, "markers on every leader");

    // The coordinator dies with a transaction open and its records written.
    let c = coordinator(cluster.nodes[0].client, "cluster-tx", 1);
    p.begin_transaction().unwrap();
    want.extend(send(&p, "three", 30));
    cluster.kill((c - 1) as usize);
    p.commit_transaction(T)
        .expect("the new coordinator commits the transaction");
    want.sort();
    let live = cluster.bootstrap_except(c);
    assert_eq!(read_committed(&live), want);
    // Back, the old coordinator's node serves the same committed data.
    cluster.spawn((c - 1) as usize);
    cluster.wait_listening((c - 1) as usize);
    wait_until("three brokers again", || {
        broker_ids(&metadata(&all, None)) == vec![1, 2, 3]
    });
    assert_eq!(read_committed(&all), want);
}

/// One transaction of the consume-transform-produce loop: the outputs of `batch` and the
/// consumer's next offsets, committed together — or aborted (`Err(Canceled)`) when `commit` is
/// false. `mid` runs once the outputs are written, before the offsets and the commit.
fn process(
    p: &TxnProducer,
    consumer: &BaseConsumer,
    batch: &[(i32, i64, String)],
    commit: bool,
    mid: impl FnOnce(),
) -> rdkafka::error::KafkaResult<()> {
    p.begin_transaction()?;
    for (part, _, v) in batch {
        let value = format!("t:{v}");
        let mut rec = BaseRecord::<(), String>::to("ctp-out")
            .payload(&value)
            .partition(*part);
        while let Err((e, r)) = p.send(rec) {
            if !matches!(
                e,
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull
                )
            ) {
                return Err(e);
            }
            rec = r;
            p.poll(Duration::from_millis(10));
        }
    }
    p.flush(T)?;
    mid();
    let mut offsets = TopicPartitionList::new();
    for (part, off, _) in batch {
        let next = off + 1;
        let newer = offsets
            .find_partition("ctp-in", *part)
            .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o >= next));
        if !newer {
            offsets.add_partition_offset("ctp-in", *part, Offset::Offset(next))?;
        }
    }
    let cgm = consumer
        .group_metadata()
        .ok_or(rdkafka::error::KafkaError::NoMessageReceived)?;
    p.send_offsets_to_transaction(&offsets, &cgm, T)?;
    if commit {
        p.commit_transaction(T)
    } else {
        p.abort_transaction(T)?;
        Err(rdkafka::error::KafkaError::Canceled)
    }
}

/// The client's own log on the test's stderr (shown when a test fails, or with --nocapture):
/// what a stalled transactional call was waiting for. `TXN_DEBUG` sets librdkafka's `debug`
/// contexts (`eos,broker` tells the coordinator lookups).
struct ClientLog;

impl rdkafka::ClientContext for ClientLog {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!(
            "{}.{:03} librdkafka {level:?} {fac}: {message}",
            at.as_secs(),
            at.subsec_millis()
        );
    }
}

impl rdkafka::producer::ProducerContext for ClientLog {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

// Polled by a thread of its own: the client's log is printed while a transactional call blocks.
type TxnProducer = ThreadedProducer<ClientLog>;

fn txn_producer(bootstrap: &str, id: &str) -> TxnProducer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", id)
        .set("linger.ms", "5")
        .set("transaction.timeout.ms", "30000")
        // librdkafka (2.12) sends TxnOffsetCommit through a group-coordinator lookup that
        // ignores its timeout and waits for some broker connection to come up or go down
        // (librdkafka issues 5456 and 5511). When the killed coordinator's broker handle was
        // dropped from the metadata, and every other connection stays up, nothing wakes it:
        // send_offsets_to_transaction hung until the brokers closed idle connections, ten
        // minutes on. Connections the client itself closes when idle wake it within seconds.
        .set("connections.max.idle.ms", "5000");
    if let Ok(contexts) = std::env::var("TXN_DEBUG") {
        config
            .set("debug", contexts)
            .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let p: TxnProducer = config.create_with_context(ClientLog).unwrap();
    let deadline = Instant::now() + T;
    while let Err(e) = p.init_transactions(T) {
        assert!(Instant::now() < deadline, "init_transactions: {e}");
        std::thread::sleep(Duration::from_millis(500));
    }
    p
}

/// Puts the consumer back at its group's committed offsets (what the last committed
/// transaction recorded), the start of each partition without one. Those offsets are never
/// behind `committed`, the next offsets of every transaction the loop saw commit; they may be
/// ahead (a commit that answered an error may still have completed), and `committed` takes
/// them.
fn rewind(consumer: &BaseConsumer, committed: &mut HashMap<i32, i64>) {
    let deadline = Instant::now() + T;
    loop {
        match consumer.committed(Duration::from_secs(10)) {
            Ok(group) => {
                for e in group.elements() {
                    let to = match e.offset() {
                        Offset::Offset(o) => Offset::Offset(o),
                        _ => Offset::Beginning,
                    };
                    let at = match to {
                        Offset::Offset(o) => o,
                        _ => 0,
                    };
                    let want = committed.entry(e.partition()).or_insert(0);
                    assert!(
                        at >= *want,
                        "partition {}: the group's committed offset {at} is behind {want}, \
                         committed by a transaction",
                        e.partition()
                    );
                    *want = at;
                    // A partition not fetched yet takes the offset when it starts.
                    let _ = consumer.seek(e.topic(), e.partition(), to, Duration::from_secs(10));
                }
                return;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "committed offsets: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// A consume-transform-produce loop over `TXN_CTP_RECORDS` records (default 6,000 here; the
/// issue's soak runs 100,000 by hand) with an abort every fifth transaction and the
/// coordinator's broker killed with kill -9 in the middle of a transaction, restarted later:
/// the output holds each input exactly once, and the group's committed offsets match it.
#[test]
fn consume_transform_produce_holds_each_input_once_through_a_broker_kill() {
    let n: usize = std::env::var("TXN_CTP_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6_000);
    let (cluster, all) = start_cluster(&["replica.lag.time.max.ms=3000"]);
    rd_create_topics(
        cluster.nodes[0].client,
        &[
            NewTopic::new("ctp-in", 3, TopicReplication::Fixed(3)),
            NewTopic::new("ctp-out", 3, TopicReplication::Fixed(3)),
        ],
    );
    wait_until("both topics led", || {
        leaders(&all, "ctp-in").iter().all(|&l| l > 0)
            && leaders(&all, "ctp-out").iter().all(|&l| l > 0)
    });
    common::cluster::produce(&all, "ctp-in", &[0, 1, 2], n, "m");
    let mut p = txn_producer(&all, "ctp-kill");
    // The group coordinated by the transaction coordinator's broker: the kill moves both, and
    // the group's successor must know the consumer when the producer's TxnOffsetCommit arrives.
    let txn_node = coordinator(cluster.nodes[0].client, "ctp-kill", 1);
    let group = (0..64)
        .map(|i| format!("ctp-{i}"))
        .find(|g| coordinator(cluster.nodes[0].client, g, 0) == txn_node)
        .expect("a group coordinated by the transaction coordinator's broker");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &all)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.subscribe(&["ctp-in"]).unwrap();
    let (mut round, mut failures) = (0usize, 0usize);
    // The killed node comes back 6 s later from a thread of its own: the loop may be held up
    // meanwhile inside a client call that waits for the cluster.
    let client0 = cluster.nodes[0].client;
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(cluster));
    let mut respawn: Option<std::thread::JoinHandle<()>> = None;
    let mut committed: HashMap<i32, i64> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        // Done when every input's offset is committed.
        let done = committed.values().sum::<i64>() as usize;
        if done >= n {
            break;
        }
        assert!(Instant::now() < deadline, "only {done} of {n} processed");
        let mut batch = Vec::new();
        let started = Instant::now();
        while batch.len() < 200 && started.elapsed() < Duration::from_secs(2) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                batch.push((
                    m.partition(),
                    m.offset(),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                ));
            } else if !batch.is_empty() {
                break;
            }
        }
        if batch.is_empty() {
            continue;
        }
        round += 1;
        let round_started = Instant::now();
        let outcome = if round == 4 {
            // kill -9 the coordinator between the transaction's writes and its commit: the
            // producer's offsets and commit go to its successor.
            let i = (coordinator(client0, "ctp-kill", 1) - 1) as usize;
            process(&p, &consumer, &batch, true, || {
                cluster.lock().unwrap().kill(i);
                let cluster = cluster.clone();
                respawn = Some(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(6));
                    let mut cluster = cluster.lock().unwrap();
                    cluster.spawn(i);
                    cluster.wait_listening(i);
                }));
            })
        } else {
            process(&p, &consumer, &batch, !round.is_multiple_of(5), || {})
        };
        match outcome {
            Ok(()) => {
                for (part, off, _) in &batch {
                    let next = committed.entry(*part).or_insert(0);
                    *next = (*next).max(off + 1);
                }
            }
            Err(rdkafka::error::KafkaError::Canceled) => {
                // An injected abort: the outputs and offsets went together; read them again.
                failures += 1;
                rewind(&consumer, &mut committed);
            }
            Err(e) => {
                failures += 1;
                // What a stalled soak shows first: which call failed, how, and how long it took.
                eprintln!("round {round}: {e} after {:?}", round_started.elapsed());
                if p.abort_transaction(T).is_err() {
                    // A fatal error: a new instance fences this one (its open transaction is
                    // aborted by the coordinator).
                    eprintln!("recreating the transactional producer after {e}");
                    drop(p);
                    p = txn_producer(&all, "ctp-kill");
                }
                rewind(&consumer, &mut committed);
            }
        }
    }
    if let Some(r) = respawn {
        r.join().expect("the killed node restarted");
    }
    assert!(failures >= 2, "the loop saw its injected failures");
    let mut got = common::read_topic(&all, "ctp-out", 3, "read_committed", n);
    got.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("t:m-{i}")).collect();
    want.sort();
    assert_eq!(got.len(), want.len(), "each input once in the output");
    assert_eq!(got, want);
    assert_eq!(
        common::committed_total(&consumer),
        n as i64,
        "the group's committed offsets are the input's ends"
    );
}

/// KIP-890 across brokers: a partition leader that is not the transaction's coordinator asks it
/// (AddPartitionsToTxn v4, verify only) before a transactional produce.
#[test]
fn a_leader_verifies_a_transactional_produce_with_a_remote_coordinator() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, InitProducerIdRequest,
        InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId, TopicName,
        TransactionalId,
    };
    const INVALID_TXN_STATE: i16 = 48;
    let (cluster, all) = start_cluster(&[]);
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 3, TopicReplication::Fixed(3))],
    );
    wait_until("the topic led", || {
        leaders(&all, TOPIC).iter().all(|&l| l > 0)
    });
    let id = "remote-890";
    let tid = || TransactionalId(StrBytes::from_static_str(id));
    let coordinator_addr = || {
        let c = coordinator(cluster.nodes[0].client, id, 1);
        cluster.nodes[(c - 1) as usize].client
    };
    let deadline = Instant::now() + T;
    let init = loop {
        let r: InitProducerIdResponse = RawConn::connect(coordinator_addr()).request(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(tid()))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        );
        if r.error_code == 0 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(init.error_code, 0);
    let c = coordinator(cluster.nodes[0].client, id, 1);
    // A partition whose leader is another broker than the coordinator.
    let led = leaders(&all, TOPIC);
    let Some(part) = (0..3).find(|&p| led[p as usize] != c) else {
        panic!("every partition led by the coordinator: {led:?}");
    };
    let leader_addr = cluster.nodes[(led[part as usize] - 1) as usize].client;
    let produce = || -> i16 {
        let records = tributary_protocol::record_batch::build_transactional_batch(
            &[(None, Some(b"v"))],
            1_700_000_000_000,
            (init.producer_id.0, init.producer_epoch, 0),
        );
        let req = ProduceRequest::default()
            .with_transactional_id(Some(tid()))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(part)
                    .with_records(Some(records.freeze()))])]);
        let resp: ProduceResponse = RawConn::connect(leader_addr).request(ApiKey::Produce, 8, &req);
        resp.responses[0].partition_responses[0].error_code
    };
    assert_eq!(produce(), INVALID_TXN_STATE, "not added to the transaction");
    let add: AddPartitionsToTxnResponse = RawConn::connect(coordinator_addr()).request(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid())
            .with_v3_and_below_producer_id(init.producer_id)
            .with_v3_and_below_producer_epoch(init.producer_epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![part])]),
    );
    assert_eq!(
        add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    assert_eq!(produce(), 0, "verified with the remote coordinator");
}
