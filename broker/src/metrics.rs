//! Metrics: each shard's counters and latency histograms, the `Send` snapshot a shard answers a
//! scrape with, and the Prometheus text rendering (exposition format 0.0.4) of all shards'
//! snapshots. The HTTP endpoint that serves them is `metrics/http.rs`.
//!
//! Counters live on the shard in `Cell`/`RefCell`s: no locks, no atomics, and no borrow is held
//! across an `.await`. A scrape asks every shard for a snapshot over the shard channels
//! (`ShardRequest::Metrics`) and sums them here. Labels come only from what the broker already
//! bounds: API names from the registry, topics and partitions that exist.
//!
//! Names follow Kafka's JMX metrics as the Prometheus JMX exporter's standard rules map them
//! (`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` →
//! `kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`); what Kafka has no metric for is
//! named `tributary_*`, units last.

pub mod http;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use tributary_protocol::registry::SUPPORTED_APIS;
use tributary_storage::group_commit::SyncStats;

/// Upper bounds of the latency buckets, in seconds (10 µs to 10 s); one more bucket, `+Inf`,
/// takes the rest. They start at 10 µs because the stages of a request (a decode, an append, a
/// hop between shards) take microseconds, and the tails this broker is held to are fractions of
/// a millisecond above the disk's own sync time.
pub const LATENCY_BUCKETS_SECONDS: [f64; 19] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The stages a request's time is split into, each a histogram per shard
/// (`tributary_produce_stage_seconds`, `tributary_fetch_stage_seconds`,
/// `tributary_replica_fetch_stage_seconds`, `tributary_sync_round_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From a produce request's first byte read to its last, including any wait for
    /// `queued.max.request.bytes` to have room (the broker's request queue).
    ProduceReceive,
    /// Decoding, authorizing, quota accounting and validating every partition's batch, up to
    /// the last batch handed to its shard.
    ProduceValidate,
    /// A batch handed to its owning shard until that shard starts appending it: the cross-shard
    /// hop (a task spawn when the connection's shard owns the partition).
    ProduceHop,
    /// An acks=all batch of a replicated partition waiting, in arrival order, for room in the
    /// leader's backlog above the high watermark (`replica.backlog.max.bytes`).
    ProduceBacklog,
    /// Appending a batch to the partition's log buffer (producer-state checks, offsets, index).
    ProduceAppend,
    /// An appended batch until it is durable by `flush.messages`: its write to the segment
    /// file, the wait for the shard's next sync round and the sync itself.
    ProduceDurable,
    /// A durable batch of a replicated partition until the in-sync replicas have it (acks=all).
    ProduceReplicate,
    /// A produce response computed until written to the socket: the wait behind the
    /// connection's earlier responses and the write itself.
    ProduceRespond,
    /// A fetch waiting for `min_bytes` or `max_wait_ms` (its long poll).
    FetchWait,
    /// Reading one partition's records for a fetch, from the tail cache, a read-ahead or the disk.
    FetchRead,
    /// A fetch response written to the socket.
    FetchSend,
    /// A follower's fetch from its leader until answered: the leader's long poll (it answers
    /// once a fetched partition grows) and the transfer.
    ReplicaAnswer,
    /// A follower applying its leader's answer until every partition in it is durable here:
    /// appends, syncs and truncations. The leader hears of it with the next fetch.
    ReplicaApply,
    /// One group-commit sync round of the shard (`syncfs` or `fdatasync`s), or one direct
    /// `fdatasync` when rounds are off: the sync itself, per round, not per request.
    SyncRound,
}

impl Stage {
    pub const ALL: [Stage; 14] = [
        Stage::ProduceReceive,
        Stage::ProduceValidate,
        Stage::ProduceHop,
        Stage::ProduceBacklog,
        Stage::ProduceAppend,
        Stage::ProduceDurable,
        Stage::ProduceReplicate,
        Stage::ProduceRespond,
        Stage::FetchWait,
        Stage::FetchRead,
        Stage::FetchSend,
        Stage::ReplicaAnswer,
        Stage::ReplicaApply,
        Stage::SyncRound,
    ];

    /// The metric family and `stage` label value it is rendered as.
    pub fn metric(self) -> (&'static str, &'static str) {
        const PRODUCE: &str = "tributary_produce_stage_seconds";
        const FETCH: &str = "tributary_fetch_stage_seconds";
        const REPLICA: &str = "tributary_replica_fetch_stage_seconds";
        match self {
            Stage::ProduceReceive => (PRODUCE, "receive"),
            Stage::ProduceValidate => (PRODUCE, "validate"),
            Stage::ProduceHop => (PRODUCE, "hop"),
            Stage::ProduceBacklog => (PRODUCE, "backlog"),
            Stage::ProduceAppend => (PRODUCE, "append"),
            Stage::ProduceDurable => (PRODUCE, "durable"),
            Stage::ProduceReplicate => (PRODUCE, "replicate"),
            Stage::ProduceRespond => (PRODUCE, "respond"),
            Stage::FetchWait => (FETCH, "wait"),
            Stage::FetchRead => (FETCH, "read"),
            Stage::FetchSend => (FETCH, "send"),
            Stage::ReplicaAnswer => (REPLICA, "answer"),
            Stage::ReplicaApply => (REPLICA, "apply"),
            Stage::SyncRound => ("tributary_sync_round_seconds", ""),
        }
    }
}

/// A latency histogram: per-bucket (not cumulative) counts, the last one `+Inf`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; LATENCY_BUCKETS_SECONDS.len() + 1],
    pub sum_ns: u64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let i = LATENCY_BUCKETS_SECONDS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(LATENCY_BUCKETS_SECONDS.len());
        self.buckets[i] += 1;
        self.sum_ns = self
            .sum_ns
            .saturating_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        self.count += 1;
    }

    fn add(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.count += other.count;
    }
}

/// Traffic of one topic on one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicCounters {
    /// Record-batch bytes appended (duplicates of batches already in the log not counted).
    pub bytes_in: u64,
    /// Records appended.
    pub messages_in: u64,
    /// Record bytes read for fetches.
    pub bytes_out: u64,
}

/// The index of an API key in the registry: the slot its request metrics are kept in.
pub fn api_index(key: i16) -> Option<usize> {
    SUPPORTED_APIS.iter().position(|s| s.key == key)
}

/// One shard's counters. Only that shard's thread touches them.
pub struct ShardMetrics {
    /// Latency of each registry API's requests answered by this shard's connections, indexed
    /// as `SUPPORTED_APIS`.
    requests: RefCell<Vec<Histogram>>,
    /// Traffic of the partitions this shard owns, by topic.
    topics: RefCell<HashMap<String, TopicCounters>>,
    /// Per-stage latency, indexed as `Stage::ALL`.
    stages: RefCell<[Histogram; Stage::ALL.len()]>,
    /// Files made durable per sync round: how much each round shares.
    files_per_round: RefCell<CountHistogram>,
    /// Milliseconds of `throttle_time_ms` answered, by quota type.
    throttle: RefCell<[Throttled; THROTTLE_TYPES.len()]>,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        Self {
            requests: RefCell::new(vec![Histogram::default(); SUPPORTED_APIS.len()]),
            topics: RefCell::new(HashMap::new()),
            stages: RefCell::new([Histogram::default(); Stage::ALL.len()]),
            files_per_round: RefCell::new(CountHistogram::default()),
            throttle: RefCell::new([Throttled::default(); THROTTLE_TYPES.len()]),
        }
    }
}

/// Upper bounds of the files-per-sync-round buckets.
pub const FILES_PER_ROUND_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// A histogram of small counts: per-bucket (not cumulative) counts, the last one `+Inf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountHistogram {
    pub buckets: [u64; FILES_PER_ROUND_BUCKETS.len() + 1],
    pub sum: u64,
    pub count: u64,
}

impl CountHistogram {
    pub fn observe(&mut self, n: u64) {
        let i = FILES_PER_ROUND_BUCKETS
            .iter()
            .position(|&b| n <= b)
            .unwrap_or(FILES_PER_ROUND_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum += n;
        self.count += 1;
    }

    fn add(&mut self, other: &CountHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// Responses a quota delayed and the delay they carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttled {
    pub responses: u64,
    pub millis: u64,
}

/// The quota types a throttle is counted under, as Kafka's `quota.type` tags them.
pub const THROTTLE_TYPES: [&str; 3] = ["Produce", "Fetch", "Request"];

impl ShardMetrics {
    /// A request of the API at registry index `api` was answered `elapsed` after it was read.
    pub fn observe_request(&self, api: usize, elapsed: Duration) {
        if let Some(h) = self.requests.borrow_mut().get_mut(api) {
            h.observe(elapsed);
        }
    }

    /// One request, batch or round spent `elapsed` in `stage`.
    pub fn observe_stage(&self, stage: Stage, elapsed: Duration) {
        self.stages.borrow_mut()[stage as usize].observe(elapsed);
    }

    /// A sync round made `files` files durable in `elapsed`.
    pub fn observe_sync_round(&self, files: usize, elapsed: Duration) {
        self.observe_stage(Stage::SyncRound, elapsed);
        self.files_per_round.borrow_mut().observe(files as u64);
    }

    /// A response of the quota type at `THROTTLE_TYPES[kind]` carried `throttle` of delay.
    pub fn throttled(&self, kind: usize, throttle: Duration) {
        if let Some(t) = self.throttle.borrow_mut().get_mut(kind) {
            t.responses += 1;
            t.millis += throttle.as_millis() as u64;
        }
    }

    /// A batch of `records` records, `bytes` long, was appended to a partition of `topic`.
    pub fn produced(&self, topic: &str, bytes: usize, records: u64) {
        self.with_topic(topic, |c| {
            c.bytes_in += bytes as u64;
            c.messages_in += records;
        });
    }

    /// A fetch read `bytes` record bytes from a partition of `topic`.
    pub fn fetched(&self, topic: &str, bytes: usize) {
        self.with_topic(topic, |c| c.bytes_out += bytes as u64);
    }

    fn with_topic(&self, topic: &str, f: impl FnOnce(&mut TopicCounters)) {
        let mut topics = self.topics.borrow_mut();
        match topics.get_mut(topic) {
            Some(c) => f(c),
            None => f(topics.entry(topic.to_string()).or_default()),
        }
    }

    /// The request histograms and the counters of the topics `exists` keeps; the counters of
    /// deleted topics are dropped here, so the topic labels stay those of existing topics.
    pub fn snapshot(&self, exists: impl Fn(&str) -> bool) -> Recorded {
        let mut topics = self.topics.borrow_mut();
        topics.retain(|t, _| exists(t));
        Recorded {
            requests: self.requests.borrow().clone(),
            topics: topics.iter().map(|(t, c)| (t.clone(), *c)).collect(),
            stages: *self.stages.borrow(),
            files_per_round: *self.files_per_round.borrow(),
            throttle: *self.throttle.borrow(),
        }
    }
}

/// What a shard's [`ShardMetrics`] have recorded, as a scrape takes it.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    pub requests: Vec<Histogram>,
    pub topics: Vec<(String, TopicCounters)>,
    pub stages: [Histogram; Stage::ALL.len()],
    pub files_per_round: CountHistogram,
    pub throttle: [Throttled; THROTTLE_TYPES.len()],
}

/// The gauges of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionGauges {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub log_start_offset: i64,
    pub size_bytes: u64,
}

/// What one shard answers a scrape with.
#[derive(Debug, Clone, Default)]
pub struct MetricsSnapshot {
    pub shard: usize,
    /// What the shard's `ShardMetrics` recorded: request and stage histograms, topic traffic,
    /// throttles.
    pub recorded: Recorded,
    /// Committed offsets of the groups this shard coordinates: (group, topic, partition, offset).
    pub group_offsets: Vec<(String, String, i32, i64)>,
    pub partitions: Vec<PartitionGauges>,
    pub sync: SyncStats,
    pub fetch_reads: u64,
    pub fetch_read_bytes: u64,
    pub connections_refused: u64,
    pub connections_handed_over: u64,
    pub produce_requests: u64,
    pub batches_appended: u64,
    /// Log chunk reads of the shard's partitions by where their bytes came from.
    pub tail_cache_hits: u64,
    pub read_ahead_hits: u64,
    pub disk_chunk_reads: u64,
    /// `queued.max.request.bytes` of this shard and how much of it is granted now; `None`
    /// without a limit.
    pub request_memory: Option<(usize, usize)>,
    /// Tiered storage's counts; `None` when it is off.
    pub remote: Option<RemoteStats>,
}

/// What a shard's tiered storage did (counters) and has left to copy (`copy_lag_offsets`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoteStats {
    pub segments_copied: u64,
    pub bytes_copied: u64,
    pub segments_deleted: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_seconds: f64,
    pub store_errors: u64,
    /// Offsets below the last stable offset of the partitions it leads not yet in the store.
    pub copy_lag_offsets: i64,
}

/// A metric family rendered from one value of each `T`: its name, its help text, and how to
/// read the value.
type Series<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// Writes a metric's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition (format 0.0.4) of every shard's snapshot, with the
/// broker-wide `connections_open`.
pub fn render(shards: &[MetricsSnapshot], connections_open: usize) -> String {
    let mut out = String::new();
    render_requests(&mut out, shards);
    render_stages(&mut out, shards);
    render_topics(&mut out, shards);
    render_partitions(&mut out, shards);
    render_group_lag(&mut out, shards);
    render_throttles(&mut out, shards);
    header(
        &mut out,
        "kafka_server_socket_server_metrics_connection_count",
        "gauge",
        "Client connections open on the broker.",
    );
    let _ = writeln!(
        out,
        "kafka_server_socket_server_metrics_connection_count {connections_open}"
    );
    render_shards(&mut out, shards);
    out
}

/// What the metadata quorum looks like from this node.
pub struct QuorumView {
    pub leader: Option<i32>,
    pub term: u64,
    pub applied_index: u64,
    pub is_leader: bool,
}

/// The cluster's state as this node's metadata image and quorum see it, by the names Kafka's
/// KRaft metrics get from the JMX exporter.
pub fn render_cluster(out: &mut String, q: &QuorumView, image: &crate::catalog::Catalog) {
    let fenced = image.brokers.values().filter(|b| b.fenced).count();
    let offline = image
        .topics
        .values()
        .flat_map(|t| &t.assignment)
        .filter(|p| p.leader < 0)
        .count();
    let under_replicated = image
        .topics
        .values()
        .flat_map(|t| &t.assignment)
        .filter(|p| p.isr.len() < p.replicas.len())
        .count();
    let gauges: [(&str, &str, i64); 8] = [
        (
            "kafka_server_raft_metrics_current_leader",
            "Node id of the metadata quorum's leader; -1 when none is known.",
            q.leader.map_or(-1, i64::from),
        ),
        (
            "kafka_server_raft_metrics_current_epoch",
            "The metadata quorum's current term (Kafka's epoch).",
            q.term as i64,
        ),
        (
            "kafka_server_raft_metrics_high_watermark",
            "The last metadata log entry applied on this node.",
            q.applied_index as i64,
        ),
        (
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the node that is the active controller (the quorum's leader).",
            i64::from(q.is_leader),
        ),
        (
            "kafka_controller_kafkacontroller_activebrokercount",
            "Registered brokers that are not fenced.",
            (image.brokers.len() - fenced) as i64,
        ),
        (
            "kafka_controller_kafkacontroller_fencedbrokercount",
            "Registered brokers that are fenced.",
            fenced as i64,
        ),
        (
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader.",
            offline as i64,
        ),
        (
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions whose ISR is smaller than their replica set, cluster-wide.",
            under_replicated as i64,
        ),
    ];
    for (name, help, v) in gauges {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    render_liveness(out, &image.liveness);
}

/// Fencings by reason and ISR changes by direction, cluster-wide, as the metadata log counted
/// them (see `catalog::LivenessCounts`).
fn render_liveness(out: &mut String, counts: &crate::catalog::LivenessCounts) {
    let fencings = "tributary_broker_fencings_total";
    header(
        out,
        fencings,
        "counter",
        "Brokers fenced by the active controller, cluster-wide, by what it saw.",
    );
    for reason in tributary_metadata::command::FenceReason::ALL {
        let n = counts.fencings.get(reason.name()).copied().unwrap_or(0);
        let _ = writeln!(out, "{fencings}{{reason=\"{}\"}} {n}", reason.name());
    }
    let isr = "tributary_isr_changes_total";
    header(
        out,
        isr,
        "counter",
        "ISR changes a partition leader made, cluster-wide (a fenced broker leaving every ISR is counted as its fencing).",
    );
    let _ = writeln!(out, "{isr}{{change=\"shrink\"}} {}", counts.isr_shrinks);
    let _ = writeln!(out, "{isr}{{change=\"expand\"}} {}", counts.isr_expansions);
}

fn render_requests(out: &mut String, shards: &[MetricsSnapshot]) {
    let mut total = vec![Histogram::default(); SUPPORTED_APIS.len()];
    for s in shards {
        for (t, h) in total.iter_mut().zip(s.recorded.requests.iter()) {
            t.add(h);
        }
    }
    let requests = "kafka_network_requestmetrics_requests_total";
    header(out, requests, "counter", "Requests answered, by API.");
    for (spec, h) in SUPPORTED_APIS.iter().zip(total.iter()) {
        let _ = writeln!(out, "{requests}{{request=\"{}\"}} {}", spec.name, h.count);
    }
    let latency = "kafka_network_requestmetrics_totaltime_seconds";
    header(
        out,
        latency,
        "histogram",
        "Time from a request's last byte read to its response written, by API.",
    );
    for (spec, h) in SUPPORTED_APIS.iter().zip(total.iter()) {
        if h.count == 0 {
            continue;
        }
        write_histogram(out, latency, &format!("request=\"{}\"", spec.name), h);
    }
}

/// One labelled series of a latency histogram: cumulative buckets, sum and count.
fn write_histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let sum = h.sum_ns as f64 / 1e9;
    write_buckets(
        out,
        (name, labels),
        &LATENCY_BUCKETS_SECONDS,
        &h.buckets,
        sum,
        h.count,
    );
}

/// A histogram series from per-bucket counts (one more than `bounds`, the last `+Inf`):
/// cumulative `_bucket` lines, then `_sum` and `_count`.
fn write_buckets<B: std::fmt::Display>(
    out: &mut String,
    (name, labels): (&str, &str),
    bounds: &[B],
    buckets: &[u64],
    sum: impl std::fmt::Display,
    count: u64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (i, n) in buckets.iter().enumerate() {
        cumulative += n;
        let le = bounds
            .get(i)
            .map_or_else(|| "+Inf".to_string(), ToString::to_string);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
        );
    }
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{labels} {sum}");
    let _ = writeln!(out, "{name}_count{labels} {count}");
}

/// The per-stage histograms, summed over shards, and the files each sync round covered.
fn render_stages(out: &mut String, shards: &[MetricsSnapshot]) {
    let mut total = [Histogram::default(); Stage::ALL.len()];
    let mut files = CountHistogram::default();
    for s in shards {
        for (t, h) in total.iter_mut().zip(s.recorded.stages.iter()) {
            t.add(h);
        }
        files.add(&s.recorded.files_per_round);
    }
    let helps = [
        (
            "tributary_produce_stage_seconds",
            "A produce request's time by stage: receive (first to last byte, with the wait for request memory), validate (decode, authorize, validate, hand to shards), hop (to the owning shard), append, durable (write, sync-round wait and sync), replicate (to the ISR), respond (behind earlier responses, then written); per batch for hop to replicate, per request otherwise.",
        ),
        (
            "tributary_fetch_stage_seconds",
            "A fetch's time by stage: wait (long poll for min_bytes), read (per partition read), send (response written).",
        ),
        (
            "tributary_replica_fetch_stage_seconds",
            "A follower's fetch cycle by stage: answer (sent until the leader answered, its long poll included), apply (appends, syncs and truncations until all are durable here); per fetch.",
        ),
        (
            "tributary_sync_round_seconds",
            "Duration of each group-commit sync round (or direct fdatasync).",
        ),
    ];
    for (family, help) in helps {
        header(out, family, "histogram", help);
        for (stage, h) in Stage::ALL.iter().zip(total.iter()) {
            let (name, label) = stage.metric();
            if name != family {
                continue;
            }
            let labels = if label.is_empty() {
                String::new()
            } else {
                format!("stage=\"{label}\"")
            };
            write_histogram(out, name, &labels, h);
        }
    }
    let name = "tributary_sync_round_files";
    header(out, name, "histogram", "Files made durable per sync round.");
    write_buckets(
        out,
        (name, ""),
        &FILES_PER_ROUND_BUCKETS,
        &files.buckets,
        files.sum,
        files.count,
    );
}

/// Each group's committed offset and lag per partition, where this broker holds the
/// partition (its high watermark is known here); named as the widely used Kafka exporter
/// names them.
fn render_group_lag(out: &mut String, shards: &[MetricsSnapshot]) {
    let high_watermarks: HashMap<(&str, i32), i64> = shards
        .iter()
        .flat_map(|s| &s.partitions)
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let mut offsets: Vec<&(String, String, i32, i64)> =
        shards.iter().flat_map(|s| &s.group_offsets).collect();
    offsets.sort();
    let current = "kafka_consumergroup_current_offset";
    header(
        out,
        current,
        "gauge",
        "A group's committed offset, by group, topic and partition.",
    );
    for (g, t, p, o) in &offsets {
        let _ = writeln!(
            out,
            "{current}{{consumergroup=\"{}\",topic=\"{}\",partition=\"{p}\"}} {o}",
            escape(g),
            escape(t)
        );
    }
    let lag = "kafka_consumergroup_lag";
    header(
        out,
        lag,
        "gauge",
        "High watermark minus the group's committed offset, for partitions this broker holds.",
    );
    for (g, t, p, o) in &offsets {
        let Some(hw) = high_watermarks.get(&(t.as_str(), *p)) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{lag}{{consumergroup=\"{}\",topic=\"{}\",partition=\"{p}\"}} {}",
            escape(g),
            escape(t),
            (hw - o).max(0)
        );
    }
}

/// Responses a quota delayed and their delay, as Kafka's `kafka.server:type=Produce|Fetch|Request`
/// `throttle-time` sensors count them.
fn render_throttles(out: &mut String, shards: &[MetricsSnapshot]) {
    let mut total = [Throttled::default(); THROTTLE_TYPES.len()];
    for s in shards {
        for (t, x) in total.iter_mut().zip(s.recorded.throttle.iter()) {
            t.responses += x.responses;
            t.millis += x.millis;
        }
    }
    let series: [Series<Throttled, f64>; 2] = [
        (
            "tributary_quota_throttled_responses_total",
            "Responses that carried a quota's throttle_time_ms, by quota type.",
            |t| t.responses as f64,
        ),
        (
            "tributary_quota_throttle_seconds_total",
            "Throttle time those responses carried, by quota type.",
            |t| t.millis as f64 / 1e3,
        ),
    ];
    for (name, help, value) in series {
        header(out, name, "counter", help);
        for (kind, t) in THROTTLE_TYPES.iter().zip(total.iter()) {
            let _ = writeln!(out, "{name}{{type=\"{kind}\"}} {}", value(t));
        }
    }
}

fn render_topics(out: &mut String, shards: &[MetricsSnapshot]) {
    let mut topics: BTreeMap<&str, TopicCounters> = BTreeMap::new();
    for s in shards {
        for (t, c) in &s.recorded.topics {
            let sum = topics.entry(t).or_default();
            sum.bytes_in += c.bytes_in;
            sum.messages_in += c.messages_in;
            sum.bytes_out += c.bytes_out;
        }
    }
    let series: [Series<TopicCounters, u64>; 3] = [
        (
            "kafka_server_brokertopicmetrics_bytesin_total",
            "Record-batch bytes appended by produce requests, by topic.",
            |c| c.bytes_in,
        ),
        (
            "kafka_server_brokertopicmetrics_messagesin_total",
            "Records appended by produce requests, by topic.",
            |c| c.messages_in,
        ),
        (
            "kafka_server_brokertopicmetrics_bytesout_total",
            "Record bytes read for fetch requests, by topic.",
            |c| c.bytes_out,
        ),
    ];
    for (name, help, value) in series {
        header(out, name, "counter", help);
        for (t, c) in &topics {
            let _ = writeln!(out, "{name}{{topic=\"{}\"}} {}", escape(t), value(c));
        }
    }
}

fn render_partitions(out: &mut String, shards: &[MetricsSnapshot]) {
    let mut parts: Vec<&PartitionGauges> = shards.iter().flat_map(|s| &s.partitions).collect();
    parts.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let series: [Series<PartitionGauges, i64>; 4] = [
        (
            "kafka_log_log_highwatermark",
            "High watermark: the offset after the last record visible to consumers.",
            |p| p.high_watermark,
        ),
        (
            "kafka_log_log_logendoffset",
            "Offset the next appended record gets.",
            |p| p.log_end_offset,
        ),
        (
            "kafka_log_log_logstartoffset",
            "First offset still in the log.",
            |p| p.log_start_offset,
        ),
        (
            "kafka_log_log_size",
            "Bytes of record batches in the partition's segments.",
            |p| i64::try_from(p.size_bytes).unwrap_or(i64::MAX),
        ),
    ];
    for (name, help, value) in series {
        header(out, name, "gauge", help);
        for p in &parts {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                escape(&p.topic),
                p.partition,
                value(p)
            );
        }
    }
}

fn render_shards(out: &mut String, shards: &[MetricsSnapshot]) {
    let counters: [Series<MetricsSnapshot, u64>; 15] = [
        (
            "tributary_connections_refused_total",
            "Connections closed at accept by max.connections or max.connections.per.ip.",
            |s| s.connections_refused,
        ),
        (
            "tributary_connections_handed_over_total",
            "Connections the shard handed to the shard owning the partitions they produce to (connection.handover.produce.requests).",
            |s| s.connections_handed_over,
        ),
        (
            "tributary_produce_requests_total",
            "Produce requests received by the shard's connections.",
            |s| s.produce_requests,
        ),
        (
            "tributary_batches_appended_total",
            "Record batches appended to the shard's partitions.",
            |s| s.batches_appended,
        ),
        (
            "tributary_fetch_reads_total",
            "Partition reads made for fetches.",
            |s| s.fetch_reads,
        ),
        (
            "tributary_fetch_read_bytes_total",
            "Record bytes those reads returned.",
            |s| s.fetch_read_bytes,
        ),
        (
            "tributary_log_tail_cache_hits_total",
            "Log reads served from the active segment's tail kept in memory (log.tail.cache.bytes).",
            |s| s.tail_cache_hits,
        ),
        (
            "tributary_log_read_ahead_hits_total",
            "Log reads served from a chunk read ahead for an in-order reader (log.read.ahead.budget.bytes).",
            |s| s.read_ahead_hits,
        ),
        (
            "tributary_log_disk_reads_total",
            "Log reads that went to the disk: neither the tail cache nor a read-ahead held them.",
            |s| s.disk_chunk_reads,
        ),
        (
            "tributary_group_commit_rounds_total",
            "Group-commit sync rounds run.",
            |s| s.sync.rounds,
        ),
        (
            "tributary_group_commit_files_synced_total",
            "Segment files made durable by sync rounds or direct syncs.",
            |s| s.sync.files,
        ),
        (
            "tributary_group_commit_syncfs_total",
            "syncfs calls.",
            |s| s.sync.syncfs,
        ),
        (
            "tributary_group_commit_fdatasync_total",
            "fdatasync calls.",
            |s| s.sync.fdatasyncs,
        ),
        (
            "tributary_group_commit_syncfs_skipped_dirty_total",
            "Rounds that synced each file because the page cache held too much dirty data.",
            |s| s.sync.syncfs_skipped_dirty,
        ),
        (
            "tributary_group_commit_written_through_total",
            "Durable flushes that needed no sync: written O_DSYNC (log.flush.write.through).",
            |s| s.sync.written_through,
        ),
    ];
    for (name, help, value) in counters {
        header(out, name, "counter", &format!("{help} By shard."));
        for s in shards {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", s.shard, value(s));
        }
    }
    render_request_memory(out, shards);
    render_remote(out, shards);
}

/// One remote-store series: name, kind, help and how to read it off a shard's stats.
type RemoteSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&RemoteStats) -> f64,
);

/// Tiered storage's series, when it is on.
fn render_remote(out: &mut String, shards: &[MetricsSnapshot]) {
    let remote: Vec<(usize, RemoteStats)> = shards
        .iter()
        .filter_map(|s| s.remote.map(|r| (s.shard, r)))
        .collect();
    if remote.is_empty() {
        return;
    }
    let series: [RemoteSeries; 8] = [
        ("tributary_remote_segments_copied_total", "counter", "Segments copied to the remote log store.", |r| r.segments_copied as f64),
        ("tributary_remote_bytes_copied_total", "counter", "Log bytes copied to the remote log store.", |r| r.bytes_copied as f64),
        ("tributary_remote_segments_deleted_total", "counter", "Remote segments whose objects were deleted (retention, DeleteRecords, failed copies).", |r| r.segments_deleted as f64),
        ("tributary_remote_reads_total", "counter", "Fetch reads served from the remote log store.", |r| r.reads as f64),
        ("tributary_remote_read_bytes_total", "counter", "Record bytes those reads returned.", |r| r.read_bytes as f64),
        ("tributary_remote_read_seconds_total", "counter", "Time those reads took, index fetches included (divide by the reads for the mean).", |r| r.read_seconds),
        ("tributary_remote_store_errors_total", "counter", "Remote store operations that failed: copies, deletes and reads (each also a WARN line naming the object or partition).", |r| r.store_errors as f64),
        ("tributary_remote_copy_lag_offsets", "gauge", "Offsets below the last stable offset of the tiered partitions the shard leads that are not yet in the remote store.", |r| r.copy_lag_offsets as f64),
    ];
    for (name, kind, help, value) in series {
        header(out, name, kind, &format!("{help} By shard."));
        for (shard, r) in &remote {
            let _ = writeln!(out, "{name}{{shard=\"{shard}\"}} {}", value(r));
        }
    }
}

/// Each shard's `queued.max.request.bytes` in use and its size; nothing without a limit.
fn render_request_memory(out: &mut String, shards: &[MetricsSnapshot]) {
    let limited: Vec<(usize, usize, usize)> = shards
        .iter()
        .filter_map(|s| s.request_memory.map(|(cap, used)| (s.shard, cap, used)))
        .collect();
    if limited.is_empty() {
        return;
    }
    let used = "tributary_request_memory_used_bytes";
    header(
        out,
        used,
        "gauge",
        "Bytes of queued.max.request.bytes granted to requests being read or handled. By shard.",
    );
    for (shard, _, u) in &limited {
        let _ = writeln!(out, "{used}{{shard=\"{shard}\"}} {u}");
    }
    let cap = "tributary_request_memory_capacity_bytes";
    header(out, cap, "gauge", "queued.max.request.bytes of each shard.");
    for (shard, c, _) in &limited {
        let _ = writeln!(out, "{cap}{{shard=\"{shard}\"}} {c}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_take_their_upper_bound_inclusive() {
        let mut h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(11));
        assert_eq!(h.buckets[3], 1);
        assert_eq!(h.buckets[4], 1);
        assert_eq!(h.buckets[LATENCY_BUCKETS_SECONDS.len()], 1);
        assert_eq!(h.count, 3);
        assert_eq!(h.sum_ns, 11_000_201_000);
    }

    #[test]
    fn render_sums_shards_and_drops_deleted_topics() {
        let a = ShardMetrics::default();
        let b = ShardMetrics::default();
        a.produced("t", 100, 2);
        b.produced("t", 50, 1);
        b.produced("gone", 7, 1);
        a.fetched("t", 30);
        let produce = api_index(tributary_protocol::registry::api_key::PRODUCE).unwrap();
        a.observe_request(produce, Duration::from_millis(3));
        a.observe_stage(Stage::ProduceAppend, Duration::from_micros(20));
        b.observe_stage(Stage::ProduceAppend, Duration::from_micros(40));
        b.observe_sync_round(3, Duration::from_micros(700));
        let snap = |id, m: &ShardMetrics| MetricsSnapshot {
            shard: id,
            recorded: m.snapshot(|t| t != "gone"),
            request_memory: Some((1000, 10)),
            ..Default::default()
        };
        let text = render(&[snap(0, &a), snap(1, &b)], 3);
        assert!(text.contains("kafka_server_brokertopicmetrics_bytesin_total{topic=\"t\"} 150\n"));
        assert!(text.contains("kafka_server_brokertopicmetrics_messagesin_total{topic=\"t\"} 3\n"));
        assert!(text.contains("kafka_server_brokertopicmetrics_bytesout_total{topic=\"t\"} 30\n"));
        assert!(!text.contains("gone"));
        assert!(
            text.contains("kafka_network_requestmetrics_requests_total{request=\"Produce\"} 1\n")
        );
        assert!(text.contains(
            "kafka_network_requestmetrics_totaltime_seconds_bucket{request=\"Produce\",le=\"0.0025\"} 0\n"
        ));
        assert!(text.contains(
            "kafka_network_requestmetrics_totaltime_seconds_bucket{request=\"Produce\",le=\"0.005\"} 1\n"
        ));
        assert!(text.contains("kafka_server_socket_server_metrics_connection_count 3\n"));
        assert!(text.contains("tributary_request_memory_used_bytes{shard=\"1\"} 10\n"));
        assert!(text.contains(
            "tributary_produce_stage_seconds_bucket{stage=\"append\",le=\"0.000025\"} 1\n"
        ));
        assert!(text.contains(
            "tributary_produce_stage_seconds_bucket{stage=\"append\",le=\"0.00005\"} 2\n"
        ));
        assert!(text.contains("tributary_produce_stage_seconds_count{stage=\"append\"} 2\n"));
        assert!(text.contains("tributary_sync_round_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(text.contains("tributary_sync_round_files_bucket{le=\"2\"} 0\n"));
        assert!(text.contains("tributary_sync_round_files_bucket{le=\"4\"} 1\n"));
        // Every sample line is `name{labels} value` or `name value`, after its TYPE line.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
