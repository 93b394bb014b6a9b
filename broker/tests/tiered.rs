//! Tiered storage against a real S3-compatible server started by the test (`common::s3`) and
//! against a `file://` store: closed segments leave the local disk once copied, and
//! everything reads back from offset 0 through the ordinary Fetch — with librdkafka and as
//! raw bytes; damage in the store is one partition's KAFKA_STORAGE_ERROR, never the
//! broker's; a store that cannot be reached costs nothing but the copies, which catch up.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::s3::S3Server;
use common::{metric, rd_consume, rd_create_topics, rd_produce, start_broker, wait_until, RawConn};
use kafka_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResponse;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use tributary_protocol::ErrorCode;

/// Where a test's remote log store is.
enum Store {
    File(PathBuf),
    S3(S3Server),
}

impl Store {
    fn file(dir: &Path) -> Store {
        Store::File(dir.join("store"))
    }

    fn s3(dir: &Path) -> Store {
        Store::S3(S3Server::start(&dir.join("s3")))
    }

    /// The directory its objects are files in.
    fn objects(&self) -> PathBuf {
        match self {
            Store::File(p) => p.clone(),
            Store::S3(s) => s.bucket_dir(),
        }
    }

    fn props(&self) -> Vec<(String, String)> {
        match self {
            // Reads of the file store span several chunks of its 2 KiB segments and read
            // ahead; the S3 store's reads are one chunk each.
            Store::File(p) => vec![
                (
                    "remote.log.storage.url".into(),
                    format!("file://{}", p.display()),
                ),
                ("remote.log.reader.chunk.bytes".into(), "512".into()),
            ],
            Store::S3(s) => s.broker_props("cluster-a"),
        }
    }
}

fn tiered_broker(dir: &Path, store: &Store) -> tributary_broker::server::BrokerHandle {
    let mut props: Vec<(String, String)> = vec![
        ("remote.log.storage.system.enable".into(), "true".into()),
        ("remote.log.manager.task.interval.ms".into(), "200".into()),
        ("log.retention.check.interval.ms".into(), "200".into()),
    ];
    props.extend(store.props());
    let props: Vec<(&str, &str)> = props
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    start_broker(dir, 2, &props)
}

fn create_tiered(addr: SocketAddr, topic: &str) {
    let t = NewTopic::new(topic, 1, TopicReplication::Fixed(1))
        .set("remote.storage.enable", "true")
        .set("segment.bytes", "2048")
        .set("local.retention.bytes", "1");
    rd_create_topics(addr, &[t]);
}

/// The `.log` objects in the store, by name (base offset first, so in offset order).
fn remote_logs(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![store.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    out
}

fn local_segments(dir: &Path, topic: &str) -> usize {
    std::fs::read_dir(dir.join(format!("{topic}-0")))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0)
}

/// ListOffsets v9 at `timestamp` (-2 earliest, -4 earliest local, -5 latest tiered).
fn list_offset(addr: SocketAddr, topic: &str, timestamp: i64) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let resp: ListOffsetsResponse = RawConn::connect(addr).request(ApiKey::ListOffsets, 9, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets {timestamp}");
    p.offset
}

/// A Fetch v11 at `offset`: the partition's error code and its records.
fn fetch(addr: SocketAddr, topic: &str, offset: i64) -> (i16, bytes::Bytes) {
    fetch_at_most(addr, topic, offset, 1 << 20)
}

/// The same with `max_bytes` for the partition.
fn fetch_at_most(
    addr: SocketAddr,
    topic: &str,
    offset: i64,
    max_bytes: i32,
) -> (i16, bytes::Bytes) {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)])]);
    let resp: FetchResponse = RawConn::connect(addr).request(ApiKey::Fetch, 11, &req);
    let p = &resp.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default())
}

fn messages(n: usize) -> Vec<(Option<String>, String)> {
    (0..n)
        .map(|i| {
            (
                Some(format!("k{i}")),
                format!("value-{i}-{}", "x".repeat(180)),
            )
        })
        .collect()
}

#[test]
fn closed_segments_leave_the_local_disk_and_read_back_from_offset_zero_s3() {
    let dir = tempfile::tempdir().unwrap();
    copied_segments_read_back(dir.path(), &Store::s3(dir.path()));
}

#[test]
fn closed_segments_leave_the_local_disk_and_read_back_from_offset_zero_file() {
    let dir = tempfile::tempdir().unwrap();
    copied_segments_read_back(dir.path(), &Store::file(dir.path()));
}

fn copied_segments_read_back(dir: &Path, store: &Store) {
    let data = dir.join("data");
    let broker = tiered_broker(&data, store);
    let url = store
        .props()
        .into_iter()
        .find(|(k, _)| k == "remote.log.storage.url")
        .map(|(_, v)| v)
        .expect("the store's URL");
    let store = store.objects();
    let addr = broker.addr;
    create_tiered(addr, "tiered");
    let sent = messages(200);
    rd_produce(
        addr,
        "tiered",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &sent,
    );

    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 10 && local_segments(&data, "tiered") <= 2
    });
    let local_start = list_offset(addr, "tiered", -4);
    assert!(local_start > 0, "the local log no longer starts at 0");
    assert_eq!(list_offset(addr, "tiered", -2), 0, "the log still does");
    let tiered = list_offset(addr, "tiered", -5);
    assert!(
        tiered >= local_start - 1 && tiered < 200,
        "latest tiered {tiered}"
    );

    // librdkafka reads everything back from the beginning, in order.
    let got = rd_consume(addr, "tiered", 1, sent.len());
    assert_eq!(got.len(), sent.len());
    for (i, (_, offset, key, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(key.as_ref(), sent[i].0.as_ref());
        assert_eq!(value, &sent[i].1);
    }
    let scrape = broker.metrics_addr.expect("metrics endpoint");
    assert!(metric(scrape, "tributary_remote_segments_copied_total") >= 10.0);
    assert!(metric(scrape, "tributary_remote_bytes_copied_total") > 10_000.0);
    assert!(metric(scrape, "tributary_remote_reads_total") >= 1.0);
    assert!(metric(scrape, "tributary_remote_read_bytes_total") > 10_000.0);
    assert_eq!(metric(scrape, "tributary_remote_store_errors_total"), 0.0);
    // DescribeLogDirs lists the store as a second directory, with the partition's bytes there.
    let dirs: DescribeLogDirsResponse = RawConn::connect(addr).request(
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    assert_eq!(dirs.results.len(), 2, "{dirs:?}");
    let remote = &dirs.results[1];
    assert_eq!(remote.log_dir.as_str(), url);
    let sizes: Vec<i64> = remote
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == "tiered")
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_size))
        .collect();
    let in_store: u64 = remote_logs(&store)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    assert_eq!(sizes.len(), 1, "{remote:?}");
    assert!(
        sizes[0] > 10_000 && sizes[0] as u64 <= in_store,
        "{sizes:?} of {in_store}"
    );
    // The batches a fetch at 0 returns are the first object's bytes, byte for byte.
    let (code, records) = fetch(addr, "tiered", 0);
    assert_eq!(code, 0);
    let first = std::fs::read(&remote_logs(&store)[0]).unwrap();
    assert_eq!(&records[..], &first[..]);
    // An offset in the middle of a remote segment starts at the batch holding it.
    let (code, records) = fetch(addr, "tiered", 3);
    assert_eq!(code, 0);
    assert_eq!(i64::from_be_bytes(records[..8].try_into().unwrap()), 3);

    // DeleteRecords inside the remote log: it starts there now, and the segments below go.
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("tiered", 0, rdkafka::Offset::Offset(25))
        .unwrap();
    let out = futures::executor::block_on(admin.delete_records(&tpl, &AdminOptions::new()))
        .expect("DeleteRecords");
    let p0 = out.find_partition("tiered", 0).unwrap();
    assert!(p0.error().is_ok(), "{:?}", p0.error());
    assert_eq!(
        p0.offset(),
        rdkafka::Offset::Offset(25),
        "the low watermark"
    );
    assert_eq!(list_offset(addr, "tiered", -2), 25);
    assert_eq!(
        fetch(addr, "tiered", 3).0,
        ErrorCode::OFFSET_OUT_OF_RANGE.code()
    );
    let objects_before = remote_logs(&store).len();
    wait_until("the deleted segments' objects removed", || {
        remote_logs(&store).len() < objects_before
    });
    let got = rd_consume(addr, "tiered", 1, sent.len() - 25);
    assert_eq!(got.first().map(|m| m.1), Some(25));
    assert_eq!(got.len(), sent.len() - 25);

    // Deleting the topic deletes its remote log.
    let deleted =
        futures::executor::block_on(admin.delete_topics(&["tiered"], &AdminOptions::new()))
            .expect("DeleteTopics");
    assert!(deleted[0].is_ok(), "{deleted:?}");
    wait_until("the deleted topic's objects removed", || {
        remote_logs(&store).is_empty()
    });
}

#[test]
fn records_deleted_before_their_segment_was_copied_stay_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = Store::file(dir.path());
    let broker = tiered_broker(&data, &store);
    let store = store.objects();
    let addr = broker.addr;
    let t = NewTopic::new("late", 1, TopicReplication::Fixed(1)).set("segment.bytes", "2048");
    rd_create_topics(addr, &[t]);
    let sent = messages(60);
    rd_produce(
        addr,
        "late",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &sent,
    );
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .unwrap();
    // DeleteRecords inside the first segment, before the topic is tiered at all.
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("late", 0, rdkafka::Offset::Offset(3))
        .unwrap();
    futures::executor::block_on(admin.delete_records(&tpl, &AdminOptions::new()))
        .expect("DeleteRecords");
    let on = rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic("late"))
        .set("remote.storage.enable", "true")
        .set("local.retention.bytes", "1")
        .set("segment.bytes", "2048");
    futures::executor::block_on(admin.alter_configs(&[on], &AdminOptions::new()))
        .expect("AlterConfigs");
    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 4 && local_segments(&data, "late") <= 2
    });
    // The first segment went to the store whole, but the remote log starts where the local
    // one did: offsets 0..3 stay deleted.
    assert_eq!(list_offset(addr, "late", -2), 3);
    assert_eq!(
        fetch(addr, "late", 2).0,
        ErrorCode::OFFSET_OUT_OF_RANGE.code()
    );
    let got = rd_consume(addr, "late", 1, sent.len() - 3);
    assert_eq!(got.first().map(|m| m.1), Some(3));
    assert_eq!(got.len(), sent.len() - 3);
}

/// An index sparser than a read's slack (`index.interval.bytes` far above 4 KiB): a small
/// fetch in the middle of a remote segment reads on past the batches below its offset.
#[test]
fn a_small_fetch_reads_through_a_sparse_remote_index() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = Store::file(dir.path());
    let broker = tiered_broker(&data, &store);
    let store = store.objects();
    let addr = broker.addr;
    let t = NewTopic::new("sparse", 1, TopicReplication::Fixed(1))
        .set("remote.storage.enable", "true")
        .set("segment.bytes", "16384")
        .set("index.interval.bytes", "1048576")
        .set("local.retention.bytes", "1");
    rd_create_topics(addr, &[t]);
    rd_produce(
        addr,
        "sparse",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &messages(200),
    );
    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 2 && local_segments(&data, "sparse") <= 2
    });
    assert!(
        list_offset(addr, "sparse", -4) > 40,
        "offset 40 is remote only"
    );
    // Room for one batch: the one holding offset 40, found ~10 KB past the only index entry.
    let (code, records) = fetch_at_most(addr, "sparse", 40, 100);
    assert_eq!(code, 0);
    assert_eq!(i64::from_be_bytes(records[..8].try_into().unwrap()), 40);
}

#[test]
fn a_missing_or_damaged_remote_object_is_that_partitions_storage_error_s3() {
    let dir = tempfile::tempdir().unwrap();
    damaged_objects(dir.path(), &Store::s3(dir.path()));
}

#[test]
fn a_missing_or_damaged_remote_object_is_that_partitions_storage_error_file() {
    let dir = tempfile::tempdir().unwrap();
    damaged_objects(dir.path(), &Store::file(dir.path()));
}

fn damaged_objects(dir: &Path, store: &Store) {
    let data = dir.join("data");
    let broker = tiered_broker(&data, store);
    let store = store.objects();
    let addr = broker.addr;
    create_tiered(addr, "damaged");
    rd_produce(
        addr,
        "damaged",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &messages(120),
    );
    wait_until("segments copied and deleted locally", || {
        remote_logs(&store).len() >= 6 && local_segments(&data, "damaged") <= 2
    });
    let objects = remote_logs(&store);
    // Damage a byte inside the second segment's first batch (past its 61-byte header).
    let mut bytes = std::fs::read(&objects[1]).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&objects[1], &bytes).unwrap();
    // Remove the third segment's log object.
    std::fs::remove_file(&objects[2]).unwrap();
    let base = |p: &PathBuf| -> i64 {
        let name = p.file_name().unwrap().to_string_lossy();
        name[..20].parse().unwrap()
    };
    let storage_error = ErrorCode::KAFKA_STORAGE_ERROR.code();
    assert_eq!(fetch(addr, "damaged", base(&objects[1])).0, storage_error);
    assert_eq!(fetch(addr, "damaged", base(&objects[2])).0, storage_error);
    // The rest of the log, and the broker, are unaffected.
    let (code, records) = fetch(addr, "damaged", 0);
    assert_eq!(code, 0);
    assert!(!records.is_empty());
    let local = list_offset(addr, "damaged", -4);
    let (code, records) = fetch(addr, "damaged", local);
    assert_eq!(code, 0);
    assert!(!records.is_empty());
}

#[test]
fn remote_storage_is_refused_for_compacted_topics_and_without_the_broker_switch() {
    let dir = tempfile::tempdir().unwrap();
    let create = |addr: SocketAddr, configs: &[(&str, &str)]| {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", addr.to_string())
            .create()
            .unwrap();
        let mut t = NewTopic::new("t", 1, TopicReplication::Fixed(1));
        for (k, v) in configs {
            t = t.set(k, v);
        }
        let res =
            futures::executor::block_on(admin.create_topics(&[t], &AdminOptions::new())).unwrap();
        match &res[0] {
            Ok(_) => None,
            Err((_, code)) => Some(format!("{code:?}")),
        }
    };
    let off = start_broker(&dir.path().join("off"), 1, &[]);
    let refused = create(off.addr, &[("remote.storage.enable", "true")]);
    assert_eq!(refused.as_deref(), Some("InvalidConfig"));
    drop(off);
    let on = tiered_broker(&dir.path().join("on"), &Store::file(dir.path()));
    let compacted = [
        ("remote.storage.enable", "true"),
        ("cleanup.policy", "compact"),
    ];
    assert_eq!(
        create(on.addr, &compacted).as_deref(),
        Some("InvalidConfig")
    );
    let too_local = [
        ("remote.storage.enable", "true"),
        ("retention.bytes", "1000"),
        ("local.retention.bytes", "2000"),
    ];
    assert_eq!(
        create(on.addr, &too_local).as_deref(),
        Some("InvalidConfig")
    );
    assert_eq!(create(on.addr, &[("remote.storage.enable", "true")]), None);
    // Once tiered, always (as Kafka before KIP-950): nobody would enforce the remote log's
    // retention any more.
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", on.addr.to_string())
        .create()
        .unwrap();
    let off = rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic("t"))
        .set("remote.storage.enable", "false");
    // (The rdkafka crate drops AlterConfigs' per-resource errors: the config tells.)
    futures::executor::block_on(admin.alter_configs(&[off], &AdminOptions::new()))
        .expect("AlterConfigs");
    let described = futures::executor::block_on(admin.describe_configs(
        &[rdkafka::admin::ResourceSpecifier::Topic("t")],
        &AdminOptions::new(),
    ))
    .expect("DescribeConfigs");
    let resource = described[0].as_ref().expect("the topic's configs");
    let enabled = resource
        .get("remote.storage.enable")
        .and_then(|e| e.value.clone());
    assert_eq!(
        enabled.as_deref(),
        Some("true"),
        "remote storage was turned off"
    );
}

#[test]
fn a_store_out_of_reach_keeps_the_local_log_and_the_copies_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::s3(dir.path());
    let data = dir.path().join("data");
    let broker = tiered_broker(&data, &store);
    let addr = broker.addr;
    create_tiered(addr, "outage");
    let one_batch_each = [("linger.ms", "0"), ("batch.num.messages", "1")];
    let first = messages(60);
    rd_produce(addr, "outage", &one_batch_each, &first);
    let objects = store.objects();
    wait_until("the first segments copied", || {
        remote_logs(&objects).len() >= 3
    });
    let Store::S3(server) = &mut store else {
        unreachable!()
    };
    server.stop();
    // Produce on while the store refuses connections: nothing is lost, nothing more leaves
    // the local disk.
    let second = messages(120);
    rd_produce(addr, "outage", &one_batch_each, &second[60..]);
    // 3 s in ci/test; the minute by hand (README, "Tiered storage").
    let outage = std::env::var("TRIBUTARY_STORE_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    std::thread::sleep(Duration::from_secs(outage));
    let copied = remote_logs(&objects).len();
    let local = local_segments(&data, "outage");
    assert!(local >= 5, "uncopied segments stay local: {local}");
    // What the local log holds is read as usual; the copied part waits for the store.
    let local_start = list_offset(addr, "outage", -4);
    assert!(
        local_start <= 60,
        "the new records are all local: from {local_start}"
    );
    let (code, records) = fetch(addr, "outage", 60);
    assert_eq!(code, 0);
    assert!(!records.is_empty());
    assert_eq!(
        fetch(addr, "outage", 0).0,
        ErrorCode::KAFKA_STORAGE_ERROR.code(),
        "the copied range cannot be read while the store is out of reach"
    );
    server.resume();
    wait_until("the copies caught up", || {
        remote_logs(&objects).len() > copied && local_segments(&data, "outage") <= 2
    });
    let got = rd_consume(addr, "outage", 1, 120);
    let values: Vec<&String> = got.iter().map(|m| &m.3).collect();
    let sent: Vec<&String> = second.iter().map(|m| &m.1).collect();
    assert_eq!(values, sent);
}

#[test]
fn read_committed_sees_only_the_committed_transactions_of_a_copied_range() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let t = Duration::from_secs(30);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::s3(dir.path());
    let data = dir.path().join("data");
    let broker = tiered_broker(&data, &store);
    let addr = broker.addr;
    create_tiered(addr, "txns");
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("transactional.id", "tiered-app")
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    p.init_transactions(t).expect("init_transactions");
    let mut committed = Vec::new();
    let mut all = Vec::new();
    for round in 0..8 {
        p.begin_transaction().unwrap();
        let values: Vec<String> = (0..12)
            .map(|i| format!("r{round}-{i}-{}", "y".repeat(150)))
            .collect();
        for v in &values {
            let mut rec = BaseRecord::<(), String>::to("txns").payload(v);
            while let Err((_, back)) = p.send(rec) {
                p.poll(Duration::from_millis(10));
                rec = back;
            }
        }
        p.flush(t).unwrap();
        if round % 2 == 0 {
            p.commit_transaction(t).unwrap();
            committed.extend(values.iter().cloned());
        } else {
            p.abort_transaction(t).unwrap();
        }
        all.extend(values);
    }
    // Records after the last transaction close its range's segments.
    let tail = messages(40);
    rd_produce(
        addr,
        "txns",
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
        &tail,
    );
    committed.extend(tail.iter().map(|m| m.1.clone()));
    all.extend(tail.iter().map(|m| m.1.clone()));
    let objects = store.objects();
    wait_until(
        "the transactions' segments copied and deleted locally",
        || remote_logs(&objects).len() >= 15 && list_offset(addr, "txns", -4) > 60,
    );
    let bootstrap = addr.to_string();
    let read = |isolation| common::read_topic(&bootstrap, "txns", 1, isolation, 1);
    assert_eq!(read("read_committed"), committed);
    assert_eq!(read("read_uncommitted"), all);
}

/// Every batch of the `.log` objects under `objects`, by base offset; fails if two objects hold
/// different bytes at one offset (a range copied twice as different data).
fn remote_batches(objects: &Path) -> std::collections::BTreeMap<i64, Vec<u8>> {
    let mut batches = std::collections::BTreeMap::new();
    for path in remote_logs(objects) {
        let bytes = std::fs::read(&path).unwrap();
        let mut at = 0;
        while at + 12 <= bytes.len() {
            let base = i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
            let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            let batch = bytes[at..at + 12 + len].to_vec();
            // The leader epoch (bytes 12..16) is the one field a replica may hold differently
            // only if it was written differently: it must agree too.
            if let Some(other) = batches.insert(base, batch.clone()) {
                assert_eq!(other, batch, "offset {base} copied twice as different data");
            }
            at += 12 + len;
        }
    }
    batches
}

#[test]
fn a_new_leader_continues_the_copies_and_serves_remote_reads() {
    use common::cluster::{placement, Cluster};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::s3(dir.path());
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "remote.log.storage.system.enable=true".into(),
        "remote.log.manager.task.interval.ms=200".into(),
        "log.retention.check.interval.ms=200".into(),
    ];
    cluster
        .extra
        .extend(store.props().into_iter().map(|(k, v)| format!("{k}={v}")));
    cluster.start_all();
    let bootstrap = cluster.all_bootstrap();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new("ha", 1, TopicReplication::Fixed(3))
        .set("remote.storage.enable", "true")
        .set("segment.bytes", "2048")
        .set("local.retention.bytes", "1")
        .set("min.insync.replicas", "2");
    let res =
        futures::executor::block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
    let produce = |bootstrap: &str, values: &[(Option<String>, String)]| {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            .set("batch.num.messages", "1")
            .set("message.timeout.ms", "60000");
        let p: rdkafka::producer::BaseProducer = cfg.create().unwrap();
        for (k, v) in values {
            let mut rec = rdkafka::producer::BaseRecord::<String, String>::to("ha")
                .key(k.as_ref().unwrap())
                .payload(v);
            while let Err((_, back)) = p.send(rec) {
                p.poll(Duration::from_millis(10));
                rec = back;
            }
        }
        rdkafka::producer::Producer::flush(&p, Duration::from_secs(60)).expect("all acknowledged");
    };
    let sent = messages(200);
    produce(&bootstrap, &sent[..100]);
    let objects = store.objects();
    let dirs: Vec<PathBuf> = cluster.nodes.iter().map(|n| n.dir.clone()).collect();
    let local = |node: usize| local_segments(&dirs[node], "ha");
    wait_until("copies, and every replica's local log trimmed", || {
        remote_logs(&objects).len() >= 6 && (0..3).all(|n| local(n) <= 3)
    });
    let (leader, _) = placement(&bootstrap, "ha");
    let victim = (leader - 1) as usize;
    // More to copy, and the leader killed while it copies.
    produce(&bootstrap, &sent[100..150]);
    cluster.kill(victim);
    let rest = cluster.bootstrap_except(leader);
    produce(&rest, &sent[150..]);
    // The new leader copies what its predecessor had not: the store reaches past 180.
    wait_until("the new leader copies on", || {
        let (now, _) = placement(&rest, "ha");
        let reach = remote_batches(&objects)
            .keys()
            .last()
            .copied()
            .unwrap_or(-1);
        now != leader && now > 0 && reach >= 180
    });
    let (new_leader, _) = placement(&rest, "ha");
    wait_until("the new leader's local log trimmed", || {
        local((new_leader - 1) as usize) <= 3
    });
    // Everything acknowledged reads back once, in order, from offset 0 (through the store).
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &rest)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("ha", 0, rdkafka::Offset::Beginning)
        .unwrap();
    rdkafka::consumer::Consumer::assign(&consumer, &tpl).unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got.len() < sent.len() && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            // The dead node stays in Metadata for a session (so clients keep its partitions'
            // new leaders in view); librdkafka reports its refused connections and goes on.
            // Any other error fails the test.
            use rdkafka::error::{KafkaError, RDKafkaErrorCode};
            if let Err(KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure)) = m
            {
                continue;
            }
            let m = m.expect("fetch");
            use rdkafka::message::Message;
            got.push(String::from_utf8_lossy(m.payload().unwrap()).into_owned());
        }
    }
    let want: Vec<String> = sent.iter().map(|m| m.1.clone()).collect();
    assert_eq!(got, want, "every acknowledged record once, in order");
    let batches = remote_batches(&objects);
    assert_eq!(
        batches.keys().next(),
        Some(&0),
        "the remote log starts at 0"
    );
}

#[test]
fn a_timestamp_lookup_finds_its_offset_in_the_remote_log() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::file(dir.path());
    let data = dir.path().join("data");
    let broker = tiered_broker(&data, &store);
    let addr = broker.addr;
    create_tiered(addr, "times");
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 200_000;
    let value = "t".repeat(200);
    for i in 0..100i64 {
        let mut rec = BaseRecord::<(), String>::to("times")
            .payload(&value)
            .timestamp(t0 + i * 1000);
        while let Err((_, back)) = p.send(rec) {
            p.poll(Duration::from_millis(10));
            rec = back;
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let objects = store.objects();
    wait_until("segments copied and deleted locally", || {
        remote_logs(&objects).len() >= 8 && list_offset(addr, "times", -4) > 50
    });
    assert_eq!(list_offset(addr, "times", t0 + 37_000), 37);
    assert_eq!(list_offset(addr, "times", t0 + 37_001), 38);
    assert_eq!(list_offset(addr, "times", t0 - 5), 0);
    // Past the remote log, the local one answers.
    assert_eq!(list_offset(addr, "times", t0 + 99_000), 99);
    assert_eq!(list_offset(addr, "times", t0 + 100_000), -1);
}
