//! kill -9 the broker process again and again while a producer writes with acks=all, then check
//! that every acknowledged message is readable at the offset it was acknowledged with, that each
//! partition's offsets are contiguous, and that no offset ever changes its data.
//!
//! The loop runs with sync rounds after the writes (`log.flush.write.through=false`), and with
//! every write `O_DSYNC` and no sync (the default) alternating with them. `KILL_ROUNDS` sets the number of
//! rounds of each (default 50, and 20 for the second); the soak run is
//! `KILL_ROUNDS=1000 cargo test --release -p tributary-broker --test crash`. `SEED=` replays the
//! kill timings.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::free_addr;
use common::BrokerProcess;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tributary_protocol::fuzzing::SeededRng;

const TOPIC: &str = "crash";
const PARTITIONS: i32 = 4;
const KILL_ROUNDS_DEFAULT: usize = 50;
/// Rounds of the write-through loop: it shares the recovery code the first loop covers.
const WRITE_THROUGH_KILL_ROUNDS_DEFAULT: usize = 20;
/// Verify the whole log every this many rounds (and after the last).
const VERIFY_EVERY: usize = 10;

fn start(dir: &Path, log: &Path, sets: &[&str]) -> (BrokerProcess, SocketAddr) {
    let addr = free_addr();
    (BrokerProcess::spawn(dir, log, addr, sets), addr)
}

type Acks = Arc<Mutex<Vec<(i32, i64, String)>>>;

struct AckCtx(Acks);
impl ClientContext for AckCtx {}
impl ProducerContext for AckCtx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Ok(m) = result {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            self.0.lock().unwrap().push((m.partition(), m.offset(), v));
        }
    }
}

fn create_topic(addr: SocketAddr) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .unwrap();
    // Small segments, so that rolls happen under the kills too.
    let topic =
        NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1)).set("segment.bytes", "65536");
    let res = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
}

/// Produces until `kill_at`, kills the broker, and returns what was acknowledged and, for each
/// partition of the topic whose active segment the broker held open, whether it was open
/// `O_DSYNC`.
fn produce_and_kill(
    addr: SocketAddr,
    broker: &mut BrokerProcess,
    round: usize,
    kill_at: Instant,
) -> (Vec<(i32, i64, String)>, Vec<bool>) {
    let acks: Acks = Arc::default();
    let producer: BaseProducer<AckCtx> = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "10000")
        .create_with_context(AckCtx(acks.clone()))
        .unwrap();
    let mut i = 0u64;
    while Instant::now() < kill_at {
        let v = format!("r{round}-m{i}");
        let key = i.to_string();
        if producer
            .send(BaseRecord::to(TOPIC).key(&key).payload(&v))
            .is_ok()
        {
            i += 1;
        }
        // About 16 k messages a second: enough to have many batches in flight at each kill,
        // few enough that reading the whole log back stays quick.
        if i.is_multiple_of(16) {
            producer.poll(Duration::from_millis(1));
        }
    }
    producer.poll(Duration::ZERO);
    // Partitions still opening after a restart may not have their files open yet.
    let dsync = segments_open_dsync(broker.id());
    broker.kill().expect("SIGKILL");
    // What was not acknowledged before the kill never will be.
    producer.purge(PurgeConfig::default().queue().inflight());
    producer.poll(Duration::from_millis(100));
    let acked = std::mem::take(&mut *acks.lock().unwrap());
    (acked, dsync)
}

/// For each partition of the test's topic whose active (last) segment file process `pid`
/// holds open, whether that file is open `O_DSYNC`, as the kernel reports its status flags.
/// Closed segments are left out: they are only read, and keep the handle they were opened with.
fn segments_open_dsync(pid: u32) -> Vec<bool> {
    // O_SYNC is O_DSYNC and one more bit; a write-through segment has O_DSYNC alone.
    const O_DSYNC: u32 = 0o10000;
    const O_SYNC: u32 = 0o4010000;
    let mut active: HashMap<std::path::PathBuf, (std::path::PathBuf, bool)> = HashMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let Some(dir) = target.parent() else {
            continue;
        };
        let in_topic = dir
            .file_name()
            .is_some_and(|d| d.to_string_lossy().starts_with(&format!("{TOPIC}-")));
        if !in_topic || target.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let fd = entry.file_name().to_string_lossy().into_owned();
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        let dsync = flags & O_SYNC == O_DSYNC;
        // Segment files are named by their zero-padded base offset: the last sorts last.
        let last = active
            .entry(dir.to_path_buf())
            .or_insert((target.clone(), dsync));
        if target > last.0 {
            *last = (target, dsync);
        }
    }
    active.into_values().map(|(_, dsync)| dsync).collect()
}

/// Reads every partition to its high watermark and checks it against what was acknowledged and
/// what earlier verifications saw.
fn verify(
    addr: SocketAddr,
    acked: &[(i32, i64, String)],
    seen: &mut HashMap<(i32, i64), String>,
    round: usize,
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("group.id", "crash-verify")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in 0..PARTITIONS {
        let (low, high) = consumer
            .fetch_watermarks(TOPIC, p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(low, 0);
        ends.insert(p, high);
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut next: HashMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while next.iter().any(|(p, o)| *o < ends[p]) {
        assert!(
            Instant::now() < deadline,
            "round {round}: read stalled at {next:?} of {ends:?}"
        );
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("fetch");
        let (p, o) = (m.partition(), m.offset());
        assert_eq!(
            o, next[&p],
            "round {round}: partition {p} offsets are not contiguous"
        );
        next.insert(p, o + 1);
        let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        if let Some(before) = seen.insert((p, o), v.clone()) {
            assert_eq!(
                before, v,
                "round {round}: partition {p} offset {o} changed its data"
            );
        }
    }
    for (p, o, v) in acked {
        assert!(
            *o < ends[p],
            "round {round}: acknowledged {p}/{o} is past the log end"
        );
        assert_eq!(
            seen.get(&(*p, *o)),
            Some(v),
            "round {round}: acknowledged message at {p}/{o} lost or changed"
        );
    }
}

fn kill_rounds(default: usize) -> usize {
    std::env::var("KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn kill_9_in_a_loop_loses_no_acknowledged_message() {
    kill_loop(kill_rounds(KILL_ROUNDS_DEFAULT), |_| false);
}

/// Every other round writes through: each restart recovers what the other mode wrote.
#[test]
fn kill_9_in_a_loop_with_writes_through_loses_no_acknowledged_message() {
    let rounds = kill_rounds(WRITE_THROUGH_KILL_ROUNDS_DEFAULT);
    kill_loop(rounds, |round| round % 2 == 0);
}

/// Runs `rounds` kills; `write_through(round)` says whether that round's broker runs with
/// `log.flush.write.through`.
fn kill_loop(rounds: usize, write_through: impl Fn(usize) -> bool) {
    let mut rng = SeededRng::from_env("kill -9 loop");
    let mut files_checked = 0;
    eprintln!("KILL_ROUNDS={rounds}");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("broker.log");
    let mut seen = HashMap::new();
    let mut acked = Vec::new();
    for round in 0..=rounds {
        let through = write_through(round);
        let sets: &[&str] = match through {
            true => &["log.flush.write.through=true"],
            false => &["log.flush.write.through=false"],
        };
        let (mut broker, addr) = start(&data, &log, sets);
        if round == 0 {
            create_topic(addr);
        }
        if round % VERIFY_EVERY == 0 || round == rounds {
            verify(addr, &acked, &mut seen, round);
        }
        if round == rounds {
            broker.kill().unwrap();
            break;
        }
        let kill_after = Duration::from_millis(50 + rng.below(300) as u64);
        let (acknowledged, dsync) =
            produce_and_kill(addr, &mut broker, round, Instant::now() + kill_after);
        assert!(
            dsync.iter().all(|d| *d == through),
            "round {round}: segment files open O_DSYNC: {dsync:?}, expected {through}"
        );
        files_checked += dsync.len();
        acked.extend(acknowledged);
    }
    eprintln!(
        "{rounds} kills, {} acknowledged messages, all present",
        acked.len()
    );
    assert!(
        !acked.is_empty(),
        "nothing was acknowledged; the test proved nothing"
    );
    assert!(files_checked > 0, "no segment file's flags were checked");
}
