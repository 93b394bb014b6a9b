//! Transactions (KIP-98) over the wire with librdkafka's transactional producer: committed and
//! aborted transactions interleaved (read_committed sees only the committed ones, in order;
//! read_uncommitted sees everything), across a restart; zombie fencing; a transaction aborted
//! by its timeout; a consume-transform-produce loop with `send_offsets_to_transaction` and
//! injected aborts; and the coordinator's answers to bad requests.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use common::{rd_create_topics, start_broker, RawConn};

const T: Duration = Duration::from_secs(30);

/// A broker with small internal topics and a fast transaction cleaner.
fn broker(dir: &std::path::Path) -> tributary_broker::server::BrokerHandle {
    broker_with(dir, &[])
}

/// `broker`, with `extra` settings besides.
fn broker_with(
    dir: &std::path::Path,
    extra: &[(&str, &str)],
) -> tributary_broker::server::BrokerHandle {
    let mut props = vec![
        ("offsets.topic.num.partitions", "2"),
        ("transaction.state.log.num.partitions", "2"),
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "200",
        ),
        ("group.initial.rebalance.delay.ms", "0"),
    ];
    props.extend_from_slice(extra);
    start_broker(dir, 1, &props)
}

fn txn_producer(addr: SocketAddr, id: &str, extra: &[(&str, &str)]) -> BaseProducer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", addr.to_string())
        .set("transactional.id", id)
        .set("linger.ms", "1");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    let p: BaseProducer = c.create().expect("producer");
    p.init_transactions(T).expect("init_transactions");
    p
}

fn send(p: &BaseProducer, topic: &str, partition: i32, values: impl IntoIterator<Item = String>) {
    for v in values {
        let mut rec = BaseRecord::<(), String>::to(topic)
            .payload(&v)
            .partition(partition);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(T).expect("flush");
}

/// Every value of `topic` from the start, at `isolation`.
fn read_all(addr: SocketAddr, topic: &str, partitions: i32, isolation: &str) -> Vec<String> {
    common::read_topic(&addr.to_string(), topic, partitions, isolation, 0)
}

fn values(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

#[test]
fn committed_and_aborted_transactions_interleave_and_read_committed_sees_the_committed() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("tx", 1, TopicReplication::Fixed(1))],
    );
    let p = txn_producer(b.addr, "app-1", &[]);
    for (tag, commit) in [("a", true), ("b", false), ("c", true), ("d", false)] {
        p.begin_transaction().unwrap();
        send(&p, "tx", 0, values(tag, 10));
        if commit {
            p.commit_transaction(T).unwrap();
        } else {
            p.abort_transaction(T).unwrap();
        }
    }
    let mut want = values("a", 10);
    want.extend(values("c", 10));
    assert_eq!(read_all(b.addr, "tx", 1, "read_committed"), want);
    assert_eq!(read_all(b.addr, "tx", 1, "read_uncommitted").len(), 40);
    // An open transaction holds read_committed readers back at its first offset.
    p.begin_transaction().unwrap();
    send(&p, "tx", 0, values("open", 5));
    assert_eq!(read_all(b.addr, "tx", 1, "read_committed"), want);
    p.commit_transaction(T).unwrap();
    want.extend(values("open", 5));
    assert_eq!(read_all(b.addr, "tx", 1, "read_committed"), want);
    drop(p);

    // After a restart the coordinator and the partition remember it all.
    b.shutdown().unwrap();
    let b = broker(dir.path());
    assert_eq!(read_all(b.addr, "tx", 1, "read_committed"), want);
    let p = txn_producer(b.addr, "app-1", &[]);
    p.begin_transaction().unwrap();
    send(&p, "tx", 0, values("e", 3));
    p.commit_transaction(T).unwrap();
    want.extend(values("e", 3));
    assert_eq!(read_all(b.addr, "tx", 1, "read_committed"), want);
    b.shutdown().unwrap();
}

#[test]
fn a_second_instance_fences_the_first_and_its_transaction_is_never_visible() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(b.addr, &[NewTopic::new("z", 1, TopicReplication::Fixed(1))]);
    let zombie = txn_producer(b.addr, "app-z", &[]);
    zombie.begin_transaction().unwrap();
    send(&zombie, "z", 0, values("zombie", 5));
    // The new instance aborts the zombie's open transaction before it is ready.
    let fresh = txn_producer(b.addr, "app-z", &[]);
    let err = zombie.commit_transaction(T).unwrap_err();
    assert!(
        err.rdkafka_error_code().is_some(),
        "the zombie's commit fails: {err:?}"
    );
    fresh.begin_transaction().unwrap();
    send(&fresh, "z", 0, values("fresh", 5));
    fresh.commit_transaction(T).unwrap();
    assert_eq!(
        read_all(b.addr, "z", 1, "read_committed"),
        values("fresh", 5)
    );
    b.shutdown().unwrap();
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_by_the_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("slow", 1, TopicReplication::Fixed(1))],
    );
    let p = txn_producer(b.addr, "app-slow", &[("transaction.timeout.ms", "1000")]);
    p.begin_transaction().unwrap();
    send(&p, "slow", 0, values("late", 4));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        p.commit_transaction(T).is_err(),
        "the coordinator aborted it"
    );
    assert!(read_all(b.addr, "slow", 1, "read_committed").is_empty());
    assert_eq!(read_all(b.addr, "slow", 1, "read_uncommitted").len(), 4);
    b.shutdown().unwrap();
}

#[test]
fn consume_transform_produce_holds_each_input_exactly_once() {
    const N: usize = 2000;
    const BATCH: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[
            NewTopic::new("in", 2, TopicReplication::Fixed(1)),
            NewTopic::new("out", 2, TopicReplication::Fixed(1)),
        ],
    );
    let input = values("m", N);
    common::rd_produce(
        b.addr,
        "in",
        &[],
        &input.iter().map(|v| (None, v.clone())).collect::<Vec<_>>(),
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.addr.to_string())
        .set("group.id", "ctp")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.subscribe(&["in"]).unwrap();
    let p = txn_producer(b.addr, "app-ctp", &[]);
    let mut done = 0usize;
    let mut round = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < N {
        assert!(Instant::now() < deadline, "only {done} of {N} processed");
        let mut batch = Vec::new();
        while batch.len() < BATCH {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => batch.push((
                    m.partition(),
                    m.offset(),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                )),
                _ if !batch.is_empty() => break,
                _ => {}
            }
        }
        round += 1;
        p.begin_transaction().unwrap();
        for (part, _, v) in &batch {
            let value = format!("t:{v}");
            let mut rec = BaseRecord::<(), String>::to("out")
                .payload(&value)
                .partition(*part);
            while let Err((_, r)) = p.send(rec) {
                rec = r;
                p.poll(Duration::from_millis(10));
            }
        }
        p.flush(T).expect("flush");
        let mut offsets = TopicPartitionList::new();
        for (part, off, _) in &batch {
            let next = Offset::Offset(off + 1);
            match offsets.find_partition("in", *part) {
                Some(e) if matches!(e.offset(), Offset::Offset(o) if o > off + 1) => {}
                _ => {
                    offsets.add_partition_offset("in", *part, next).unwrap();
                }
            }
        }
        let cgm = consumer.group_metadata().expect("group metadata");
        p.send_offsets_to_transaction(&offsets, &cgm, T).unwrap();
        if round.is_multiple_of(4) {
            // An injected failure: the output and the offsets go together; the batch is read
            // again from the last committed offsets.
            p.abort_transaction(T).unwrap();
            let committed = consumer.committed(T).unwrap();
            for e in committed.elements() {
                let to = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    _ => Offset::Beginning,
                };
                consumer.seek(e.topic(), e.partition(), to, T).unwrap();
            }
        } else {
            p.commit_transaction(T).unwrap();
            done += batch.len();
        }
    }
    let mut out = read_all(b.addr, "out", 2, "read_committed");
    out.sort();
    let mut want: Vec<String> = input.iter().map(|v| format!("t:{v}")).collect();
    want.sort();
    assert_eq!(out.len(), want.len(), "each input once in the output");
    assert_eq!(out, want);
    // The group's committed offsets are the input's ends.
    assert_eq!(common::committed_total(&consumer), N as i64);
    let _ = consumer.commit_consumer_state(CommitMode::Sync);
    b.shutdown().unwrap();
}

fn tid(s: &'static str) -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(s))
}

#[test]
fn bad_transactional_requests_get_kafkas_codes() {
    const INVALID_TXN_STATE: i16 = 48;
    const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    const PRODUCER_FENCED: i16 = 90;
    const INVALID_PRODUCER_EPOCH: i16 = 47;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("bad", 1, TopicReplication::Fixed(1))],
    );
    let mut raw = RawConn::connect(b.addr);
    let init = |raw: &mut RawConn, timeout: i32| -> InitProducerIdResponse {
        let deadline = Instant::now() + T;
        loop {
            let r: InitProducerIdResponse = raw.request(
                ApiKey::InitProducerId,
                4,
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(tid("raw")))
                    .with_transaction_timeout_ms(timeout)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            );
            // The coordinator's partition is created and loaded at the first request.
            if r.error_code != 15 && r.error_code != 51 || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(
        init(&mut raw, 86_400_000).error_code,
        INVALID_TRANSACTION_TIMEOUT
    );
    let first = init(&mut raw, 60_000);
    assert_eq!(first.error_code, 0);
    let (pid, epoch) = (first.producer_id, first.producer_epoch);
    let end = |raw: &mut RawConn, v: i16, pid: i64, epoch: i16| -> i16 {
        let r: EndTxnResponse = raw.request(
            ApiKey::EndTxn,
            v,
            &EndTxnRequest::default()
                .with_transactional_id(tid("raw"))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true),
        );
        r.error_code
    };
    assert_eq!(
        end(&mut raw, 3, pid.0, epoch),
        INVALID_TXN_STATE,
        "nothing to end"
    );
    assert_eq!(
        end(&mut raw, 3, pid.0 + 1, epoch),
        INVALID_PRODUCER_ID_MAPPING
    );
    // A second instance bumps the epoch; the first is fenced (INVALID_PRODUCER_EPOCH before v2).
    let second = init(&mut raw, 60_000);
    assert_eq!(second.producer_epoch, epoch + 1);
    assert_eq!(end(&mut raw, 3, pid.0, epoch), PRODUCER_FENCED);
    assert_eq!(end(&mut raw, 1, pid.0, epoch), INVALID_PRODUCER_EPOCH);
    let add: AddPartitionsToTxnResponse = raw.request(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid("raw"))
            .with_v3_and_below_producer_id(second.producer_id)
            .with_v3_and_below_producer_epoch(second.producer_epoch)
            .with_v3_and_below_topics(vec![
                kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("bad")))
                    .with_partitions(vec![0, 7]),
            ]),
    );
    let codes: Vec<i16> = add.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect();
    assert_eq!(
        codes,
        vec![55, 3],
        "OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION"
    );
    b.shutdown().unwrap();
}

/// OffsetFetch v7 for group `g`, partition 0 of `topic`: (offset, error code).
fn fetch_offset(addr: SocketAddr, group: &str, topic: &str, require_stable: bool) -> (i64, i16) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_indexes(vec![0])]))
        .with_require_stable(require_stable);
    let resp: OffsetFetchResponse = RawConn::connect(addr).request(ApiKey::OffsetFetch, 7, &req);
    let p = &resp.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[test]
fn offsets_in_an_open_transaction_are_unstable_until_it_commits() {
    const UNSTABLE_OFFSET_COMMIT: i16 = 88;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("src", 1, TopicReplication::Fixed(1))],
    );
    let p = txn_producer(b.addr, "app-off", &[]);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.addr.to_string())
        .set("group.id", "g-off")
        .create()
        .unwrap();
    let cgm = consumer.group_metadata().expect("group metadata");
    let commit_offsets = |p: &BaseProducer, at: i64| {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("src", 0, Offset::Offset(at))
            .unwrap();
        p.begin_transaction().unwrap();
        p.send_offsets_to_transaction(&tpl, &cgm, T).unwrap();
    };
    commit_offsets(&p, 7);
    assert_eq!(
        fetch_offset(b.addr, "g-off", "src", true),
        (-1, UNSTABLE_OFFSET_COMMIT)
    );
    assert_eq!(fetch_offset(b.addr, "g-off", "src", false), (-1, 0));
    p.commit_transaction(T).unwrap();
    assert_eq!(fetch_offset(b.addr, "g-off", "src", true), (7, 0));
    // Each transaction's offsets are written, not taken for a retry of the one before (they
    // carry the producer's id and epoch but no sequence).
    commit_offsets(&p, 8);
    p.commit_transaction(T).unwrap();
    // Aborted offsets never show.
    commit_offsets(&p, 9);
    p.abort_transaction(T).unwrap();
    assert_eq!(fetch_offset(b.addr, "g-off", "src", true), (8, 0));
    // A new instance (a bumped epoch) commits offsets too.
    drop(p);
    let p = txn_producer(b.addr, "app-off", &[]);
    commit_offsets(&p, 10);
    p.commit_transaction(T).unwrap();
    assert_eq!(fetch_offset(b.addr, "g-off", "src", true), (10, 0));
    // Committed ones survive a restart: the log holds every transaction's offsets and markers.
    drop(p);
    b.shutdown().unwrap();
    let b = broker(dir.path());
    let deadline = Instant::now() + T;
    loop {
        let got = fetch_offset(b.addr, "g-off", "src", true);
        if got == (10, 0) || Instant::now() > deadline {
            assert_eq!(got, (10, 0), "the committed offsets replayed from the log");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    b.shutdown().unwrap();
}

#[test]
fn transactions_and_producers_are_described_and_listed() {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{
        DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
        DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse,
    };
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("desc", 1, TopicReplication::Fixed(1))],
    );
    let p = txn_producer(b.addr, "app-desc", &[]);
    p.begin_transaction().unwrap();
    send(&p, "desc", 0, values("open", 3));
    let mut raw = RawConn::connect(b.addr);
    let list = |raw: &mut RawConn, states: &[&'static str]| -> ListTransactionsResponse {
        raw.request(
            ApiKey::ListTransactions,
            1,
            &ListTransactionsRequest::default()
                .with_state_filters(
                    states
                        .iter()
                        .map(|s| StrBytes::from_static_str(s))
                        .collect(),
                )
                .with_duration_filter(-1),
        )
    };
    let ongoing = list(&mut raw, &["Ongoing"]);
    let ids: Vec<&str> = ongoing
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.as_str())
        .collect();
    assert_eq!(ids, ["app-desc"]);
    assert!(list(&mut raw, &["CompleteCommit"])
        .transaction_states
        .is_empty());
    assert_eq!(
        list(&mut raw, &["NoSuchState"]).unknown_state_filters,
        vec![StrBytes::from_static_str("NoSuchState")]
    );
    let d: DescribeTransactionsResponse = raw.request(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![tid("app-desc"), tid("nobody")]),
    );
    let s = &d.transaction_states[0];
    assert_eq!((s.error_code, s.transaction_state.as_str()), (0, "Ongoing"));
    assert_eq!(s.topics[0].topic.0.as_str(), "desc");
    assert_eq!(s.topics[0].partitions, vec![0]);
    assert!(s.transaction_start_time_ms > 0);
    assert_eq!(
        d.transaction_states[1].error_code, 105,
        "TRANSACTIONAL_ID_NOT_FOUND"
    );
    let producers = |raw: &mut RawConn| -> DescribeProducersResponse {
        raw.request(
            ApiKey::DescribeProducers,
            0,
            &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                .with_name(TopicName(StrBytes::from_static_str("desc")))
                .with_partition_indexes(vec![0, 9])]),
        )
    };
    let r = producers(&mut raw);
    let part = &r.topics[0].partitions[0];
    assert_eq!(part.error_code, 0);
    assert_eq!(part.active_producers.len(), 1);
    assert_eq!(part.active_producers[0].current_txn_start_offset, 0);
    assert_eq!(r.topics[0].partitions[1].error_code, 3, "no partition 9");
    p.commit_transaction(T).unwrap();
    let r = producers(&mut raw);
    assert_eq!(
        r.topics[0].partitions[0].active_producers[0].current_txn_start_offset, -1,
        "no transaction open"
    );
    let d: DescribeTransactionsResponse = raw.request(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("app-desc")]),
    );
    assert_eq!(
        d.transaction_states[0].transaction_state.as_str(),
        "CompleteCommit"
    );
    b.shutdown().unwrap();
}

/// `transactional.id.expiration.ms`: an id with no transaction open for that long is forgotten
/// (DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND), for good — its tombstone in
/// `__transaction_state` outlives a restart — and starts afresh with a new producer id; an id
/// with a transaction open is kept however long it has been.
#[test]
fn an_idle_transactional_id_expires_and_one_in_a_transaction_does_not() {
    use kafka_protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse};
    const NOT_FOUND: i16 = 105;
    let dir = tempfile::tempdir().unwrap();
    let expiring = [("transactional.id.expiration.ms", "1500")];
    let b = broker_with(dir.path(), &expiring);
    rd_create_topics(
        b.addr,
        &[NewTopic::new("idle", 1, TopicReplication::Fixed(1))],
    );
    let describe = |addr: SocketAddr, id: &'static str| {
        let d: DescribeTransactionsResponse = RawConn::connect(addr).request(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(vec![tid(id)]),
        );
        let s = &d.transaction_states[0];
        (
            s.error_code,
            s.transaction_state.to_string(),
            s.producer_id.0,
        )
    };
    let idle = txn_producer(b.addr, "app-idle", &[]);
    idle.begin_transaction().unwrap();
    send(&idle, "idle", 0, values("done", 2));
    idle.commit_transaction(T).unwrap();
    let (code, state, first_pid) = describe(b.addr, "app-idle");
    assert_eq!((code, state.as_str()), (0, "CompleteCommit"));
    drop(idle);
    let open = txn_producer(b.addr, "app-open", &[("transaction.timeout.ms", "60000")]);
    open.begin_transaction().unwrap();
    send(&open, "idle", 0, values("pending", 2));
    let deadline = Instant::now() + Duration::from_secs(20);
    while describe(b.addr, "app-idle").0 != NOT_FOUND {
        assert!(
            Instant::now() < deadline,
            "app-idle is still known 20 s after its last transaction"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, state, _) = describe(b.addr, "app-open");
    assert_eq!(
        (code, state.as_str()),
        (0, "Ongoing"),
        "an id in a transaction never expires"
    );
    open.commit_transaction(T).unwrap();
    drop(open);
    b.shutdown().unwrap();
    // Still forgotten after a restart: the tombstone is in the log, not only in memory.
    let b = broker_with(dir.path(), &expiring);
    assert_eq!(describe(b.addr, "app-idle").0, NOT_FOUND);
    let again = txn_producer(b.addr, "app-idle", &[]);
    again.begin_transaction().unwrap();
    send(&again, "idle", 0, values("again", 1));
    again.commit_transaction(T).unwrap();
    let (code, _, pid) = describe(b.addr, "app-idle");
    assert_eq!(code, 0);
    assert_ne!(
        pid, first_pid,
        "a forgotten id starts with a new producer id"
    );
    assert_eq!(
        read_all(b.addr, "idle", 1, "read_committed"),
        [values("done", 2), values("pending", 2), values("again", 1)].concat()
    );
    b.shutdown().unwrap();
}

/// Appends a `__transaction_state` record moving `id` to `status` (2 PrepareCommit, 3
/// PrepareAbort), as a coordinator that died before writing its markers left it, straight into
/// the partition's files of a stopped broker.
fn leave_prepared(dir: &std::path::Path, id: &str, status: i8, meta: &TxnState) {
    use tributary_protocol::txn_records::{TxnKey, TxnValue};
    let p = tributary_broker::group::partition_for_group(id, 2);
    let part_dir = dir.join(format!("__transaction_state-{p}"));
    let key = TxnKey {
        transactional_id: id.to_string(),
    }
    .encode();
    let value = TxnValue {
        producer_id: meta.producer_id.0,
        producer_epoch: meta.producer_epoch,
        timeout_ms: meta.transaction_timeout_ms,
        status,
        partitions: meta
            .topics
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
            .collect(),
        last_update_ms: meta.transaction_start_time_ms + 1,
        start_ms: meta.transaction_start_time_ms,
    }
    .encode();
    let batch = tributary_protocol::record_batch::build_batch(
        &[(Some(&key[..]), Some(&value[..]))],
        meta.transaction_start_time_ms + 1,
        None,
    );
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            tributary_storage::io::prime_executor_io(&part_dir)
                .await
                .unwrap();
            let part = tributary_storage::Partition::open(
                part_dir,
                tributary_storage::LogConfig::default(),
            )
            .await
            .unwrap();
            let out = part.append(&batch).await.unwrap();
            part.sync_to(out.last_offset + 1).await.unwrap();
            part.close().await.unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}

type TxnState = kafka_protocol::messages::describe_transactions_response::TransactionState;

fn describe(addr: SocketAddr, id: &str) -> TxnState {
    use kafka_protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse};
    let deadline = Instant::now() + T;
    loop {
        let d: DescribeTransactionsResponse = RawConn::connect(addr).request(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(id.into()))]),
        );
        let s = d.transaction_states[0].clone();
        // Right after a start the coordinator may still be loading.
        if s.error_code == 0 || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_transaction_left_prepared_is_completed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("prep", 2, TopicReplication::Fixed(1))],
    );
    let mut want = Vec::new();
    let mut left = Vec::new();
    let mut producers = Vec::new();
    for (id, status) in [("prep-commit", 2i8), ("prep-abort", 3)] {
        let p = txn_producer(b.addr, id, &[]);
        p.begin_transaction().unwrap();
        let sent = values(id, 6);
        send(&p, "prep", 0, sent[..3].to_vec());
        send(&p, "prep", 1, sent[3..].to_vec());
        if status == 2 {
            want.extend(sent);
        }
        let meta = describe(b.addr, id);
        assert_eq!(meta.transaction_state.as_str(), "Ongoing");
        assert_eq!(meta.topics[0].partitions, vec![0, 1]);
        left.push((id, status, meta));
        // Kept open past the broker's stop: the transactions stay as they are.
        producers.push(p);
    }
    b.shutdown().unwrap();
    drop(producers);
    for (id, status, meta) in &left {
        leave_prepared(dir.path(), id, *status, meta);
    }
    // Started again: the coordinator finds both prepared, writes their markers and completes
    // them; the committed one's records become visible, the aborted one's never.
    let b = broker(dir.path());
    let deadline = Instant::now() + T;
    while describe(b.addr, "prep-commit").transaction_state.as_str() != "CompleteCommit"
        || describe(b.addr, "prep-abort").transaction_state.as_str() != "CompleteAbort"
    {
        assert!(
            Instant::now() < deadline,
            "prepared transactions not completed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut got = read_all(b.addr, "prep", 2, "read_committed");
    got.sort();
    want.sort();
    assert_eq!(got, want);
    b.shutdown().unwrap();
}

#[test]
fn a_transactional_produce_outside_its_transaction_is_refused() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
    use tributary_protocol::record_batch::{build_batch, build_transactional_batch};
    const INVALID_TXN_STATE: i16 = 48;
    const INVALID_RECORD: i16 = 87;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("kip890", 1, TopicReplication::Fixed(1))],
    );
    let mut raw = RawConn::connect(b.addr);
    let deadline = Instant::now() + T;
    let init = loop {
        let r: InitProducerIdResponse = raw.request(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(tid("kip")))
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
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let produce = |raw: &mut RawConn, txn_id: Option<&'static str>, txn: bool| -> i16 {
        let records = if txn {
            build_transactional_batch(&[(None, Some(b"v"))], 1_700_000_000_000, (pid, epoch, 0))
        } else {
            build_batch(&[(None, Some(b"v"))], 1_700_000_000_000, None)
        };
        let req = ProduceRequest::default()
            .with_transactional_id(txn_id.map(tid))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("kip890")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records.freeze()))])]);
        let resp: ProduceResponse = raw.request(ApiKey::Produce, 8, &req);
        resp.responses[0].partition_responses[0].error_code
    };
    assert_eq!(
        produce(&mut raw, Some("kip"), true),
        INVALID_TXN_STATE,
        "not added"
    );
    assert_eq!(
        produce(&mut raw, None, true),
        INVALID_RECORD,
        "no transactional id"
    );
    assert_eq!(
        produce(&mut raw, Some("kip"), false),
        INVALID_RECORD,
        "not transactional"
    );
    let add: AddPartitionsToTxnResponse = raw.request(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid("kip"))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("kip890")))
                    .with_partitions(vec![0]),
            ]),
    );
    assert_eq!(
        add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    assert_eq!(produce(&mut raw, Some("kip"), true), 0, "added first");
    // Nothing is visible to read_committed until the transaction ends.
    assert!(read_all(b.addr, "kip890", 1, "read_committed").is_empty());
    assert_eq!(read_all(b.addr, "kip890", 1, "read_uncommitted"), ["v"]);
    b.shutdown().unwrap();
}

/// A READ_COMMITTED fetch waiting for `min_bytes` is not woken by records of an open
/// transaction — visible, but not readable — and answers once the transaction commits.
#[test]
fn a_read_committed_fetch_waits_for_the_last_stable_offset() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    let addr = b.addr;
    rd_create_topics(
        addr,
        &[NewTopic::new("waits", 1, TopicReplication::Fixed(1))],
    );
    let p = txn_producer(addr, "waiter", &[]);
    p.begin_transaction().unwrap();
    send(&p, "waits", 0, values("open", 5));
    // While the fetch waits: more of the open transaction, then the commit.
    let writer = std::thread::spawn(move || {
        for round in 0..3 {
            std::thread::sleep(Duration::from_millis(300));
            send(&p, "waits", 0, values(&format!("more-{round}"), 5));
        }
        std::thread::sleep(Duration::from_millis(300));
        p.commit_transaction(T).unwrap();
        Instant::now()
    });
    let mut c = RawConn::connect(addr);
    let started = Instant::now();
    let r: FetchResponse = c.request(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(10_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("waits")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    let answered = Instant::now();
    let committed_at = writer.join().unwrap();
    let part = &r.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    assert!(
        answered + Duration::from_millis(50) >= committed_at,
        "answered {:?} after the fetch began, before the commit at {:?}",
        answered - started,
        committed_at - started
    );
    assert!(
        part.records.as_ref().is_some_and(|r| !r.is_empty()),
        "the committed records"
    );
    assert!(part.last_stable_offset > 0);
    b.shutdown().unwrap();
}

/// WriteTxnMarkers is what coordinators send partition leaders; a client can send it too. Its
/// bad inputs get Kafka's codes and disturb nothing: no producer id, a producer epoch older
/// than the partition knows, a coordinator epoch older than the last marker's.
#[test]
fn bad_write_txn_markers_get_kafkas_codes() {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
    const INVALID_REQUEST: i16 = 42;
    const INVALID_PRODUCER_EPOCH: i16 = 47;
    const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path());
    rd_create_topics(
        b.addr,
        &[NewTopic::new("markers", 1, TopicReplication::Fixed(1))],
    );
    let mut raw = RawConn::connect(b.addr);
    let mut marker = |pid: i64, epoch: i16, coordinator_epoch: i32| -> i16 {
        let r: WriteTxnMarkersResponse = raw.request(
            ApiKey::WriteTxnMarkers,
            1,
            &WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("markers")))
                    .with_partition_indexes(vec![0])])]),
        );
        r.markers[0].topics[0].partitions[0].error_code
    };
    assert_eq!(
        marker(-1, 0, 0),
        INVALID_REQUEST,
        "a marker names a producer"
    );
    assert_eq!(marker(7, 3, 5), 0);
    assert_eq!(marker(7, 2, 5), INVALID_PRODUCER_EPOCH);
    assert_eq!(marker(7, 3, 4), TRANSACTION_COORDINATOR_FENCED);
    assert_eq!(marker(7, 4, 5), 0, "a newer epoch is taken");
    // The partition still takes and serves records.
    let p = txn_producer(b.addr, "after-markers", &[]);
    p.begin_transaction().unwrap();
    send(&p, "markers", 0, values("after", 3));
    p.commit_transaction(T).unwrap();
    assert_eq!(
        read_all(b.addr, "markers", 1, "read_committed"),
        values("after", 3)
    );
    b.shutdown().unwrap();
}
