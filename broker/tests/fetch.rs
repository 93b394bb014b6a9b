//! Fetch over the wire: waits that count new bytes instead of re-reading (Kafka's DelayedFetch),
//! the broker's `fetch.max.bytes` budget read in request order, and fetch sessions (KIP-227)
//! driven with raw requests as the Java client and kafka-python send them; from v13 with topics
//! named by id (KIP-516).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{start_broker, RawConn};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchRequest, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tributary_protocol::record_batch::{build_batch, validate_all};

const FETCH_VERSION: i16 = 11;
/// The newest Fetch version: topics by id, `ReplicaState`, `NodeEndpoints`.
const FETCH_VERSION_IDS: i16 = 16;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Creates `topic`; returns its topic id.
fn create_topic(c: &mut RawConn, topic: &str, partitions: i32) -> uuid::Uuid {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(5000);
    let resp: CreateTopicsResponse = c.request(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0);
    assert!(!resp.topics[0].topic_id.is_nil());
    resp.topics[0].topic_id
}

/// `req` naming its topics (and forgotten topics) by `id`, as v13+ requests do; a request of an
/// earlier version is returned as it is.
fn at_version(version: i16, id: uuid::Uuid, req: FetchRequest) -> FetchRequest {
    if version < 13 {
        return req;
    }
    let mut req = req;
    for t in &mut req.topics {
        t.topic_id = id;
    }
    for f in &mut req.forgotten_topics_data {
        f.topic_id = id;
    }
    req
}

/// Appends one batch of `values` to `topic`/`partition`; returns its base offset.
fn produce(c: &mut RawConn, topic: &str, partition: i32, values: &[&[u8]]) -> i64 {
    let records: Vec<_> = values.iter().map(|v| (None, Some(*v))).collect();
    let batch = build_batch(&records, 1_700_000_000_000, None).freeze();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let resp: ProduceResponse = c.request(ApiKey::Produce, 8, &req);
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    p.base_offset
}

fn partition(p: i32, offset: i64) -> FetchPartition {
    FetchPartition::default()
        .with_partition(p)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1 << 20)
}

fn fetch(topic: &str, parts: Vec<FetchPartition>) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(parts)])
}

/// Records in a response partition's bytes.
fn record_count(records: &Option<Bytes>) -> usize {
    let Some(r) = records else { return 0 };
    validate_all(r)
        .expect("whole, valid batches")
        .iter()
        .map(|(_, h)| h.records_count as usize)
        .sum()
}

/// (partition, records) of each partition in the response, in response order.
fn answered(resp: &FetchResponse) -> Vec<(i32, usize)> {
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, record_count(&p.records)))
        .collect()
}

/// Appends `n` single-record batches to partition 0 of `topic`, `every` apart, from a thread.
fn trickle(
    addr: SocketAddr,
    topic: &'static str,
    n: usize,
    size: usize,
    every: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = RawConn::connect(addr);
        let value = vec![b'x'; size];
        for _ in 0..n {
            std::thread::sleep(every);
            produce(&mut c, topic, 0, &[&value]);
        }
    })
}

#[test]
fn a_waiting_fetch_counts_new_bytes_instead_of_reading_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "trickle", 1);
    let reads_before = broker.fetch_stats().reads;
    // 20 small appends over about 2 s against a fetch that wants 1 MB within 3 s.
    let producer = trickle(broker.addr, "trickle", 20, 100, Duration::from_millis(100));
    let t0 = Instant::now();
    let req = fetch("trickle", vec![partition(0, 0)])
        .with_min_bytes(1_000_000)
        .with_max_wait_ms(3000);
    let resp: FetchResponse = c.request(ApiKey::Fetch, FETCH_VERSION, &req);
    let waited = t0.elapsed();
    producer.join().unwrap();
    assert!(
        waited >= Duration::from_millis(2800),
        "answered after {waited:?}, before max_wait"
    );
    assert_eq!(
        answered(&resp),
        vec![(0, 20)],
        "every append is in the answer"
    );
    // One read before the wait and one at its end; every high watermark move re-read the
    // partition before.
    let reads = broker.fetch_stats().reads - reads_before;
    assert!(reads <= 3, "{reads} partition reads for one waiting fetch");
    broker.shutdown().unwrap();
}

#[test]
fn a_waiting_fetch_answers_once_min_bytes_have_arrived() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "arrive", 1);
    let reads_before = broker.fetch_stats().reads;
    // Ten 1000-byte records 150 ms apart; 5000 bytes are there after the fifth (~0.75 s).
    let producer = trickle(broker.addr, "arrive", 10, 1000, Duration::from_millis(150));
    let t0 = Instant::now();
    let req = fetch("arrive", vec![partition(0, 0)])
        .with_min_bytes(5000)
        .with_max_wait_ms(20_000);
    let resp: FetchResponse = c.request(ApiKey::Fetch, FETCH_VERSION, &req);
    let waited = t0.elapsed();
    producer.join().unwrap();
    let got = answered(&resp)[0].1;
    assert!(
        waited < Duration::from_secs(5),
        "answered after {waited:?}, not when the bytes arrived"
    );
    assert!((5..=10).contains(&got), "{got} records");
    let bytes = resp.responses[0].partitions[0]
        .records
        .as_ref()
        .map_or(0, |r| r.len());
    assert!(bytes >= 5000, "{bytes} bytes");
    assert!(broker.fetch_stats().reads - reads_before <= 3);
    broker.shutdown().unwrap();
}

/// Overlapping reads with small partition limits each find one batch larger than their grant:
/// only the first non-empty partition may send it (KIP-74), so the response stays near the
/// budget instead of holding one oversized batch per partition.
#[test]
fn batches_larger_than_their_partition_limit_are_sent_for_one_partition_only() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("fetch.max.bytes", "65536")]);
    let mut c = RawConn::connect(broker.addr);
    let partitions = 16;
    create_topic(&mut c, "big", partitions);
    let value = vec![b'b'; 40_000];
    for p in 0..partitions {
        produce(&mut c, "big", p, &[&value]);
    }
    let parts = (0..partitions)
        .map(|p| partition(p, 0).with_partition_max_bytes(4096))
        .collect();
    let req = fetch("big", parts).with_max_wait_ms(0);
    let resp: FetchResponse = c.request(ApiKey::Fetch, FETCH_VERSION, &req);
    let with_data: Vec<i32> = answered(&resp)
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(with_data.len(), 1, "partitions with records: {with_data:?}");
}

#[test]
fn the_broker_budget_is_read_in_request_order_and_nothing_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * 1024;
    let broker = start_broker(dir.path(), 2, &[("fetch.max.bytes", "65536")]);
    let mut c = RawConn::connect(broker.addr);
    let partitions = 16;
    create_topic(&mut c, "wide", partitions);
    // 16 partitions of 16 batches of about 2 KB: 512 KB in all, eight times the budget.
    let value = vec![b'v'; 2000];
    for p in 0..partitions {
        for _ in 0..16 {
            produce(&mut c, "wide", p, &[&value]);
        }
    }
    let before = broker.fetch_stats();
    let req = fetch("wide", (0..partitions).map(|p| partition(p, 0)).collect()).with_max_wait_ms(0);
    let resp: FetchResponse = c.request(ApiKey::Fetch, FETCH_VERSION, &req);
    let after = broker.fetch_stats();
    let got = answered(&resp);
    assert_eq!(
        got.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        (0..partitions).collect::<Vec<_>>(),
        "partitions answered in request order"
    );
    // The budget is filled from the front: whole partitions, then one cut short, then none.
    let counts: Vec<usize> = got.iter().map(|(_, n)| *n).collect();
    let filled = counts.iter().take_while(|n| **n == 16).count();
    assert!(filled >= 1, "{counts:?}");
    assert!(
        counts[filled + 1..].iter().all(|n| *n == 0),
        "only a prefix of the partitions has data: {counts:?}"
    );
    let sent: usize = resp
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    assert!(sent <= budget, "{sent} bytes sent");
    assert!(
        sent > budget - 2 * 2100,
        "{sent} bytes sent: the budget was not used"
    );
    let read = after.read_bytes - before.read_bytes;
    assert!(
        read as usize <= budget,
        "{read} bytes read for a {budget}-byte response"
    );
    // A client asking for less gets less: the smaller of the two limits holds.
    let req = fetch("wide", (0..partitions).map(|p| partition(p, 0)).collect())
        .with_max_wait_ms(0)
        .with_max_bytes(10_000);
    let resp: FetchResponse = c.request(ApiKey::Fetch, FETCH_VERSION, &req);
    assert_eq!(answered(&resp)[0].1, 4, "{:?}", answered(&resp));
    assert!(answered(&resp)[1..].iter().all(|(_, n)| *n == 0));
    // Small partition limits within the budget: every partition is read (the reads overlap),
    // each returning what its limit holds.
    let small = (0..partitions)
        .map(|p| partition(p, 0).with_partition_max_bytes(3000))
        .collect();
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        FETCH_VERSION,
        &fetch("wide", small).with_max_wait_ms(0),
    );
    assert_eq!(
        answered(&resp),
        (0..partitions).map(|p| (p, 1)).collect::<Vec<_>>()
    );
    broker.shutdown().unwrap();
}

fn session_fetch(topic: &str, id: i32, epoch: i32, parts: Vec<FetchPartition>) -> FetchRequest {
    fetch(topic, parts)
        .with_session_id(id)
        .with_session_epoch(epoch)
        .with_max_wait_ms(50)
}

#[test]
fn fetch_sessions_answer_only_what_changed() {
    sessions_answer_only_what_changed(FETCH_VERSION);
}

/// The same session, keyed by topic id and forgetting by topic id.
#[test]
fn fetch_sessions_by_topic_id_answer_only_what_changed() {
    sessions_answer_only_what_changed(FETCH_VERSION_IDS);
}

fn sessions_answer_only_what_changed(version: i16) {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    let topic_id = create_topic(&mut c, "s", 3);
    produce(&mut c, "s", 0, &[b"a"]);
    let session_fetch = |topic: &str, session: i32, epoch: i32, parts: Vec<FetchPartition>| {
        at_version(
            version,
            topic_id,
            session_fetch(topic, session, epoch, parts),
        )
    };

    // A full fetch with epoch 0 creates a session and answers every partition.
    let req = session_fetch("s", 0, 0, (0..3).map(|p| partition(p, 0)).collect());
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req);
    assert_eq!(resp.error_code, 0);
    let id = resp.session_id;
    assert!(id > 0, "a session was created");
    assert_eq!(answered(&resp), vec![(0, 1), (1, 0), (2, 0)]);
    assert_eq!(broker.fetch_stats().sessions, 1);
    if version >= 13 {
        assert_eq!(resp.responses[0].topic_id, topic_id);
    }

    // Epoch 1 moves partition 0 past what it read: nothing changed, nothing is answered.
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        version,
        &session_fetch("s", id, 1, vec![partition(0, 1)]),
    );
    assert_eq!((resp.error_code, resp.session_id), (0, id));
    assert_eq!(answered(&resp), vec![]);

    // New data on partition 2 only: only partition 2 is answered.
    produce(&mut c, "s", 2, &[b"b"]);
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &session_fetch("s", id, 2, vec![]));
    assert_eq!(answered(&resp), vec![(2, 1)]);
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 1);

    // Forget partition 1 and move partition 2 on; data on 0 and 1 then shows only 0.
    let forget = ForgottenTopic::default()
        .with_topic(name("s"))
        .with_partitions(vec![1]);
    let req = at_version(
        version,
        topic_id,
        session_fetch("s", id, 3, vec![partition(2, 1)]).with_forgotten_topics_data(vec![forget]),
    );
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req);
    assert_eq!(answered(&resp), vec![]);
    produce(&mut c, "s", 0, &[b"c"]);
    produce(&mut c, "s", 1, &[b"d"]);
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &session_fetch("s", id, 4, vec![]));
    assert_eq!(answered(&resp), vec![(0, 1)]);

    // An unknown session id and a wrong epoch are session errors with no partitions.
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        version,
        &session_fetch("s", id.wrapping_add(1).max(1), 5, vec![]),
    );
    assert_eq!((resp.error_code, resp.session_id), (70, 0));
    assert!(resp.responses.is_empty());
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &session_fetch("s", id, 9, vec![]));
    assert_eq!(resp.error_code, 71);
    assert!(resp.responses.is_empty());
    // A session keeps the way it named topics: a fetch of the other kind is refused.
    let other_kind = if version >= 13 { 12 } else { 13 };
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        other_kind,
        &at_version(other_kind, topic_id, session_fetch("s", id, 5, vec![])),
    );
    assert_eq!(resp.error_code, 106, "FETCH_SESSION_TOPIC_ID_ERROR");
    assert!(resp.responses.is_empty());
    // The wrong epoch left the session as it was: epoch 5 still works.
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &session_fetch("s", id, 5, vec![]));
    assert_eq!((resp.error_code, resp.session_id), (0, id));

    // Epoch -1 closes the session; the fetch is answered in full, without one.
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        version,
        &session_fetch("s", id, -1, vec![partition(0, 0)]),
    );
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(answered(&resp), vec![(0, 2)]);
    assert_eq!(broker.fetch_stats().sessions, 0);
    let resp: FetchResponse = c.request(ApiKey::Fetch, version, &session_fetch("s", id, 6, vec![]));
    assert_eq!(resp.error_code, 70);
    broker.shutdown().unwrap();
}

/// Fetch v13–v16 name topics by id: a known id reads its records, an unknown one is
/// UNKNOWN_TOPIC_ID without failing the rest of the request, and so is the id of a topic deleted
/// since, even once a topic of the same name exists again.
#[test]
fn fetches_from_v13_name_topics_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    let id = create_topic(&mut c, "ids", 2);
    produce(&mut c, "ids", 0, &[b"a", b"b"]);
    produce(&mut c, "ids", 1, &[b"c"]);
    let unknown = uuid::Uuid::new_v4();
    let request = |id: uuid::Uuid| {
        let req = fetch("ids", vec![partition(0, 0), partition(1, 0)]).with_max_wait_ms(0);
        at_version(13, id, req)
    };
    for version in 13..=16 {
        let mut req = request(id);
        req.topics.push(
            FetchTopic::default()
                .with_topic_id(unknown)
                .with_partitions(vec![partition(0, 0)]),
        );
        let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req);
        assert_eq!(resp.error_code, 0, "v{version}");
        assert_eq!(resp.responses.len(), 2, "v{version}");
        let known = &resp.responses[0];
        assert_eq!(known.topic_id, id, "v{version}");
        let got: Vec<(i16, usize)> = known
            .partitions
            .iter()
            .map(|p| (p.error_code, record_count(&p.records)))
            .collect();
        assert_eq!(got, vec![(0, 2), (0, 1)], "v{version}");
        let missing = &resp.responses[1];
        assert_eq!(missing.topic_id, unknown);
        assert_eq!(missing.partitions[0].error_code, 100, "UNKNOWN_TOPIC_ID");
        assert!(resp.node_endpoints.is_empty(), "no partition moved");
    }
    // A follower's fetch: from v15 its id travels in `ReplicaState`; it reads by id as well,
    // on the follower path (which reads to the log end, not through the consumer's reads).
    let consumer_reads = broker.fetch_stats().reads;
    assert!(consumer_reads >= 8, "the consumer fetches above read");
    let mut by_name = None;
    for version in [12, 13, 15, 16] {
        use kafka_protocol::messages::fetch_request::ReplicaState;
        let mut req = request(id);
        req.topics.push(
            FetchTopic::default()
                .with_topic_id(unknown)
                .with_partitions(vec![partition(0, 0)]),
        );
        let req = if version >= 15 {
            req.with_replica_id(BrokerId(-1))
                .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(99)))
        } else {
            req.with_replica_id(BrokerId(99))
        };
        let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req);
        // The follower path answers a partition named by id (v13+) as it does one named by
        // name (v12). (A single-replica partition has no followers: today it is
        // NOT_LEADER_OR_FOLLOWER to one.)
        let got: Vec<(i16, usize)> = resp.responses[0]
            .partitions
            .iter()
            .map(|p| (p.error_code, record_count(&p.records)))
            .collect();
        let want = by_name.get_or_insert_with(|| got.clone());
        assert_eq!(&got, want, "v{version}");
        if version >= 13 {
            assert_eq!(resp.responses[0].topic_id, id, "v{version}");
            assert_eq!(
                resp.responses[1].partitions[0].error_code, 100,
                "v{version}"
            );
        }
    }
    assert_eq!(
        broker.fetch_stats().reads,
        consumer_reads,
        "follower fetches"
    );
    // Deleted, then created again under its name: the old id is unknown, the new one reads.
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("ids")])
        .with_timeout_ms(5000);
    let resp: DeleteTopicsResponse = c.request(ApiKey::DeleteTopics, 4, &req);
    assert_eq!(resp.responses[0].error_code, 0);
    let again = create_topic(&mut c, "ids", 2);
    assert_ne!(again, id);
    produce(&mut c, "ids", 0, &[b"z"]);
    let resp: FetchResponse = c.request(ApiKey::Fetch, 16, &request(id));
    let errors: Vec<i16> = resp.responses[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(errors, vec![100, 100]);
    let resp: FetchResponse = c.request(ApiKey::Fetch, 16, &request(again));
    assert_eq!(answered(&resp), vec![(0, 1), (1, 0)]);
    broker.shutdown().unwrap();
}

#[test]
fn the_session_cache_is_bounded_and_sessionless_fetches_hold_none() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        1,
        &[("max.incremental.fetch.session.cache.slots", "1")],
    );
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "b", 1);
    // librdkafka's fetches: session 0, epoch -1. No session.
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        FETCH_VERSION,
        &fetch("b", vec![partition(0, 0)]),
    );
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(broker.fetch_stats().sessions, 0);
    let first: FetchResponse = c.request(
        ApiKey::Fetch,
        FETCH_VERSION,
        &session_fetch("b", 0, 0, vec![partition(0, 0)]),
    );
    assert!(first.session_id > 0);
    // The one slot is taken (and not stale): the next consumer is answered without a session.
    let mut other = RawConn::connect(broker.addr);
    let second: FetchResponse = other.request(
        ApiKey::Fetch,
        FETCH_VERSION,
        &session_fetch("b", 0, 0, vec![partition(0, 0)]),
    );
    assert_eq!((second.error_code, second.session_id), (0, 0));
    assert_eq!(answered(&second), vec![(0, 0)]);
    assert_eq!(broker.fetch_stats().sessions, 1);
    broker.shutdown().unwrap();
}

#[test]
fn a_session_is_found_on_its_own_shard_and_a_full_fetch_recovers_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "r", 1);
    produce(&mut c, "r", 0, &[b"a"]);
    let resp: FetchResponse = c.request(
        ApiKey::Fetch,
        FETCH_VERSION,
        &session_fetch("r", 0, 0, vec![partition(0, 0)]),
    );
    let id = resp.session_id;
    assert!(id > 0);
    let mut epoch = 1;
    let mut not_found = 0;
    // Reconnections land on either shard (SO_REUSEPORT). On the session's shard the session
    // goes on; on the other it is not found, and a full fetch — what the Java client and
    // kafka-python send next — starts a session there.
    for _ in 0..16 {
        let mut again = RawConn::connect(broker.addr);
        let resp: FetchResponse = again.request(
            ApiKey::Fetch,
            FETCH_VERSION,
            &session_fetch("r", id, epoch, vec![]),
        );
        match resp.error_code {
            0 => {
                assert_eq!(resp.session_id, id);
                epoch += 1;
            }
            70 => {
                not_found += 1;
                let full: FetchResponse = again.request(
                    ApiKey::Fetch,
                    FETCH_VERSION,
                    &session_fetch("r", 0, 0, vec![partition(0, 0)]),
                );
                assert_eq!(full.error_code, 0);
                assert!(full.session_id > 0);
                assert_eq!(answered(&full), vec![(0, 1)]);
            }
            e => panic!("error {e}"),
        }
    }
    assert!(not_found > 0, "no connection reached the other shard");
    broker.shutdown().unwrap();
}

/// Sends a fetch for partition 0 of `topic` at `offset` wanting 1 MB within 20 s, from a
/// thread; returns the partition's error code and how long the answer took.
fn long_fetch(
    addr: SocketAddr,
    topic: &'static str,
    offset: i64,
) -> std::thread::JoinHandle<(i16, Duration)> {
    std::thread::spawn(move || {
        let mut c = RawConn::connect(addr);
        let req = fetch(topic, vec![partition(0, offset)])
            .with_min_bytes(1_000_000)
            .with_max_wait_ms(20_000);
        let t0 = Instant::now();
        let frame = c.encode_request(ApiKey::Fetch, FETCH_VERSION, &req);
        c.send_raw(&frame);
        let Some(mut resp) = c.read_frame() else {
            return (-100, t0.elapsed());
        };
        use kafka_protocol::protocol::Decodable;
        ResponseHeader::decode(
            &mut resp,
            ApiKey::Fetch.response_header_version(FETCH_VERSION),
        )
        .unwrap();
        let resp = FetchResponse::decode(&mut resp, FETCH_VERSION).unwrap();
        (resp.responses[0].partitions[0].error_code, t0.elapsed())
    })
}

#[test]
fn a_wait_ends_when_the_log_start_passes_the_offset_the_topic_goes_or_the_broker_stops() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let mut c = RawConn::connect(broker.addr);
    for topic in ["trim", "doomed", "stopping"] {
        create_topic(&mut c, topic, 1);
        for _ in 0..10 {
            produce(&mut c, topic, 0, &[b"x"]);
        }
    }
    // Offset 5 has data, far less than min_bytes: the fetch waits.
    let waiting = long_fetch(broker.addr, "trim", 5);
    std::thread::sleep(Duration::from_millis(300));
    let req = DeleteRecordsRequest::default()
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("trim"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(8)])])
        .with_timeout_ms(1000);
    let resp: DeleteRecordsResponse = c.request(ApiKey::DeleteRecords, 2, &req);
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    let (error, took) = waiting.join().unwrap();
    assert_eq!(
        error, 1,
        "OFFSET_OUT_OF_RANGE once the log starts at 8 ({took:?})"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");

    let waiting = long_fetch(broker.addr, "doomed", 5);
    std::thread::sleep(Duration::from_millis(300));
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("doomed")])
        .with_timeout_ms(5000);
    let resp: DeleteTopicsResponse = c.request(ApiKey::DeleteTopics, 4, &req);
    assert_eq!(resp.responses[0].error_code, 0);
    let (error, took) = waiting.join().unwrap();
    assert_eq!(
        error, 3,
        "UNKNOWN_TOPIC_OR_PARTITION once the topic is gone"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");

    let waiting = long_fetch(broker.addr, "stopping", 5);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    broker.shutdown().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        t0.elapsed()
    );
    let (error, took) = waiting.join().unwrap();
    assert_eq!(error, 0, "answered with what it had");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A transactional batch of two records from `producer` at sequence `seq`.
fn transactional(producer: i64, seq: i32) -> Vec<u8> {
    let mut b = build_batch(
        &[(None, Some(b"t1")), (None, Some(b"t2"))],
        1_700_000_000_000,
        Some((producer, 0, seq)),
    )
    .to_vec();
    b[22] |= 0x10; // attributes: transactional
    tributary_protocol::record_batch::reseal(&mut b, 2);
    b
}

/// Writes transactions into a stopped broker's partition directory, as transactional producers
/// and the coordinator's markers will (the produce path does not take them yet): after the
/// plain record at offset 0, producer 7's transaction at 1..=2 and producer 8's at 3..=4;
/// 7 aborts (5), 8 commits (6); producer 9's transaction at 7..=8 stays open; a plain batch at
/// 9..=10.
fn write_transactions(data_dir: std::path::PathBuf) {
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            tributary_storage::io::prime_executor_io(&data_dir)
                .await
                .unwrap();
            let config = tributary_storage::LogConfig::DEFAULT;
            let p = tributary_storage::Partition::open(data_dir.join("txn-0"), config)
                .await
                .unwrap();
            assert_eq!(p.log_end_offset(), 1);
            p.append(&transactional(7, 0)).await.unwrap();
            p.append(&transactional(8, 0)).await.unwrap();
            assert_eq!(
                p.append_marker(7, 0, false, 0).await.unwrap().base_offset,
                5
            );
            assert_eq!(p.append_marker(8, 0, true, 0).await.unwrap().base_offset, 6);
            p.append(&transactional(9, 0)).await.unwrap();
            let plain = build_batch(&[(None, Some(b"p1")), (None, Some(b"p2"))], 1, None);
            p.append(&plain).await.unwrap();
            p.close().await.unwrap();
        })
        .expect("executor")
        .join()
        .expect("join");
}

/// (base offset, is control) of each batch in a response partition's records.
fn batches_of(records: &Option<Bytes>) -> Vec<(i64, bool)> {
    let Some(r) = records else { return vec![] };
    validate_all(r)
        .expect("whole, valid batches")
        .iter()
        .map(|(_, h)| (h.base_offset, h.is_control()))
        .collect()
}

/// (producer id, first offset) of an aborted transaction in a Fetch response.
type AbortedTxn = (i64, i64);

/// Fetches from offset 0 until `end` as a consumer does: the batches (base offset, is control)
/// and the aborted transactions the responses named (`None` when every list was null). Checks
/// every response's watermarks: high watermark 11, last stable offset 7.
fn fetch_all(
    c: &mut RawConn,
    version: i16,
    req: impl Fn(i64) -> FetchRequest,
    end: i64,
) -> (Vec<(i64, bool)>, Option<Vec<AbortedTxn>>) {
    let mut batches = Vec::new();
    let mut aborted: Option<Vec<AbortedTxn>> = None;
    let mut offset = 0;
    while offset < end {
        let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req(offset));
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "v{version}");
        assert_eq!(
            (p.high_watermark, p.last_stable_offset),
            (11, 7),
            "v{version}"
        );
        let got = batches_of(&p.records);
        assert!(!got.is_empty(), "v{version}: no progress at {offset}");
        if let Some(list) = &p.aborted_transactions {
            let all = aborted.get_or_insert_with(Vec::new);
            for t in list {
                if !all.contains(&(t.producer_id.0, t.first_offset)) {
                    all.push((t.producer_id.0, t.first_offset));
                }
            }
        }
        let Some((_, last)) = validate_all(p.records.as_ref().unwrap()).unwrap().pop() else {
            break;
        };
        offset = last.last_offset() + 1;
        batches.extend(got);
    }
    (batches, aborted)
}

#[test]
fn read_committed_fetches_stop_at_the_last_stable_offset_and_name_aborted_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    create_topic(&mut c, "txn", 1);
    assert_eq!(produce(&mut c, "txn", 0, &[b"plain"]), 0);
    drop(c);
    broker.shutdown().unwrap();
    write_transactions(dir.path().to_path_buf());
    let broker = start_broker(dir.path(), 1, &[]);
    let mut c = RawConn::connect(broker.addr);
    for version in [4, FETCH_VERSION, FETCH_VERSION_IDS] {
        let id = {
            let m: MetadataResponse = c.request(
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(Some(vec![
                    metadata_request::MetadataRequestTopic::default().with_name(Some(name("txn"))),
                ])),
            );
            m.topics[0].topic_id
        };
        let req = |isolation: i8, offset: i64| {
            at_version(
                version,
                id,
                fetch("txn", vec![partition(0, offset)]).with_isolation_level(isolation),
            )
        };
        // READ_COMMITTED: below the LSO (7), with producer 7's aborted transaction named. A
        // read may return fewer batches than there are; fetch on as a consumer does.
        let (batches, aborted) = fetch_all(&mut c, version, |o| req(1, o), 7);
        assert_eq!(
            batches,
            vec![(0, false), (1, false), (3, false), (5, true), (6, true)],
            "v{version}"
        );
        assert_eq!(aborted, Some(vec![(7, 1)]), "v{version}");
        // At the LSO: nothing yet, and no error.
        let resp: FetchResponse = c.request(ApiKey::Fetch, version, &req(1, 7));
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert!(batches_of(&p.records).is_empty(), "v{version}");
        assert_eq!(p.aborted_transactions.as_ref().map(Vec::len), Some(0));
        // READ_UNCOMMITTED: everything below the high watermark, a null list, the same LSO.
        let (batches, aborted) = fetch_all(&mut c, version, |o| req(0, o), 11);
        assert_eq!(batches.len(), 7, "v{version}");
        assert_eq!(aborted, None, "v{version}");
    }
    // ListOffsets LATEST: the LSO for READ_COMMITTED (v2+), the high watermark otherwise.
    for (isolation, want) in [(1i8, 7i64), (0, 11)] {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("txn"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ])]);
        let resp: ListOffsetsResponse = c.request(ApiKey::ListOffsets, 5, &req);
        let p = &resp.topics[0].partitions[0];
        assert_eq!((p.error_code, p.offset), (0, want), "isolation {isolation}");
    }
    drop(c);
    broker.shutdown().unwrap();
}
