//! `tributary-bench run WORKLOAD.yaml`: replays an OpenMessaging Benchmark (OMB) workload file —
//! the flat YAML that OMB's `workloads/` directory holds — against a Kafka-compatible broker,
//! with OMB's Kafka driver's semantics mapped onto this crate's load machinery:
//!
//! - `topics` new topics of `partitionsPerTopic` partitions each (named `PREFIX-RUNID-NNNN`, so
//!   every run starts empty, as OMB's do), deleted at the end unless `--keep-topics`;
//! - `producersPerTopic` producers per topic, together publishing `producerRate` messages per
//!   second across all topics (OMB's rate is the aggregate too), payloads of `messageSize`
//!   random bytes; `producerRate: 0` publishes as fast as possible (OMB instead searches for the
//!   highest rate the consumers keep up with);
//! - `subscriptionsPerTopic` consumer groups per topic (an OMB subscription is a Kafka consumer
//!   group), each of `consumerPerSubscription` consumers that subscribe to the topic, so every
//!   subscription receives every message;
//! - `warmupDurationMinutes` (OMB's default, 1, when absent) of traffic whose figures are thrown
//!   away, then `testDurationMinutes` measured; `--duration`, `--warmup` and `--duration-scale`
//!   shorten either for hand and CI runs.
//!
//! It reports publish and consume rates, publish (acknowledgement) latency and end-to-end
//! latency (from the send timestamp in each payload to its receipt, one sample per subscription)
//! over the measured phase, and the broker's CPU with `--broker-pid`.
//!
//! The parser is a small one for flat `key: value` lines, which is all OMB workloads use; it
//! refuses nesting, unknown keys and features it would otherwise silently ignore.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use serde_json::{json, Value};

use crate::cpu;
use crate::load::{self, LoadArgs, Shared};
use crate::report::{self, Run};

/// Bytes at the start of every payload that carry its send time, from which end-to-end latency
/// is measured; a workload's `messageSize` must leave room for them.
const TIMESTAMP_BYTES: usize = 8;

/// Distinct keys OMB's `KEY_ROUND_ROBIN` distributor cycles through (its `UNIQUE_COUNT`).
const OMB_KEY_COUNT: u64 = 10_000;

/// OMB's warm-up when a workload does not give `warmupDurationMinutes`.
const DEFAULT_WARMUP_MINUTES: f64 = 1.0;

/// Longest wait for created topics to show all their partitions in the metadata.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for every consumer group to have all its topic's partitions assigned.
const GROUPS_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a consumer republishes the size of its assignment for the readiness check.
const ASSIGNMENT_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Per-partition fetch size of the consumers, as OMB's Kafka driver configures it.
const MAX_PARTITION_FETCH_BYTES: &str = "10485760";

/// Every key an OMB workload may hold (OMB's `Workload` class), and nothing else.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "topics",
    "partitionsPerTopic",
    "keyDistributor",
    "messageSize",
    "useRandomizedPayloads",
    "randomBytesRatio",
    "randomizedPayloadPoolSize",
    "payloadFile",
    "subscriptionsPerTopic",
    "producersPerTopic",
    "consumerPerSubscription",
    "producerRate",
    "consumerBacklogSizeGB",
    "backlogDrainRatio",
    "testDurationMinutes",
    "warmupDurationMinutes",
];

/// Keys without which a workload means nothing (OMB would silently take them as 0).
const REQUIRED_KEYS: &[&str] = &[
    "topics",
    "partitionsPerTopic",
    "messageSize",
    "subscriptionsPerTopic",
    "producersPerTopic",
    "consumerPerSubscription",
    "producerRate",
    "testDurationMinutes",
];

/// Keys accepted and ignored, with why: payloads here are always `messageSize` random bytes.
const IGNORED_KEYS: &[&str] = &[
    "payloadFile",
    "useRandomizedPayloads",
    "randomBytesRatio",
    "randomizedPayloadPoolSize",
    "backlogDrainRatio",
];

/// How producers key their messages (OMB's `keyDistributor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// `NO_KEY`: unkeyed; the client spreads messages over the partitions.
    None,
    /// `KEY_ROUND_ROBIN`: each message takes the next of `OMB_KEY_COUNT` keys.
    RoundRobin,
}

/// A parsed workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub topics: u32,
    pub partitions_per_topic: u32,
    pub keys: Keys,
    pub message_size: usize,
    pub subscriptions_per_topic: u32,
    pub consumer_per_subscription: u32,
    pub producers_per_topic: u32,
    /// Messages per second over all producers; 0 = as fast as they can.
    pub producer_rate: f64,
    pub test_minutes: f64,
    pub warmup_minutes: f64,
    /// Keys present in the file that this replay ignores (see `IGNORED_KEYS`).
    pub ignored: Vec<String>,
}

/// One `key: value` line.
struct Entry {
    line: usize,
    value: String,
}

/// The value part of a line: a quoted string, or plain text up to a ` #` comment.
fn scalar(raw: &str, line: usize, key: &str) -> Result<String> {
    let raw = raw.trim();
    for q in ['"', '\''] {
        if let Some(body) = raw.strip_prefix(q) {
            let Some(end) = body.find(q) else {
                bail!("line {line}: `{key}`: unterminated {q}-quoted value");
            };
            let rest = body[end + 1..].trim();
            if !rest.is_empty() && !rest.starts_with('#') {
                bail!("line {line}: `{key}`: unexpected text after the quoted value: {rest:?}");
            }
            return Ok(body[..end].to_string());
        }
    }
    let value = match raw.find(" #") {
        Some(i) => raw[..i].trim_end(),
        None if raw.starts_with('#') => "",
        None => raw,
    };
    if value.is_empty() {
        bail!(
            "line {line}: `{key}` has no value (nested YAML is not supported; OMB workloads are \
             flat `key: value` lines)"
        );
    }
    if value.starts_with(['|', '>', '[', '{', '&', '*', '!']) {
        bail!(
            "line {line}: `{key}: {value}`: block, flow, anchor and tagged YAML values are not \
             supported; OMB workloads are flat `key: value` lines"
        );
    }
    Ok(value.to_string())
}

/// Splits a workload file into its keys, refusing what a flat OMB workload cannot hold.
fn entries(text: &str) -> Result<HashMap<String, Entry>> {
    let mut out: HashMap<String, Entry> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if trimmed == "---" && out.is_empty() {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            bail!(
                "line {line}: indented line {trimmed:?}: nested YAML is not supported; OMB \
                 workloads are flat `key: value` lines"
            );
        }
        let Some((key, value)) = raw.split_once(':') else {
            bail!("line {line}: expected `key: value`, found {trimmed:?}");
        };
        let key = key.trim();
        if !KNOWN_KEYS.contains(&key) {
            bail!(
                "line {line}: unknown key `{key}`; an OpenMessaging Benchmark workload has: {}",
                KNOWN_KEYS.join(", ")
            );
        }
        let value = scalar(value, line, key)?;
        if let Some(first) = out.get(key) {
            bail!(
                "line {line}: `{key}` given twice (first on line {})",
                first.line
            );
        }
        out.insert(key.to_string(), Entry { line, value });
    }
    Ok(out)
}

/// Typed reads of the entries, each error naming the line and the key.
struct Fields(HashMap<String, Entry>);

impl Fields {
    fn raw(&self, key: &str) -> Option<&Entry> {
        self.0.get(key)
    }

    /// A whole number; YAML's `_` digit separators are allowed.
    fn int(&self, key: &str) -> Result<Option<u64>> {
        let Some(e) = self.raw(key) else {
            return Ok(None);
        };
        e.value
            .replace('_', "")
            .parse::<u64>()
            .map(Some)
            .with_context(|| {
                format!(
                    "line {}: `{key}: {}` must be a whole number, 0 or more",
                    e.line, e.value
                )
            })
    }

    fn required_int(&self, key: &str) -> Result<u64> {
        self.int(key)?
            .with_context(|| format!("required key `{key}` is missing"))
    }

    /// A whole number that must fit `u32` and be at least `min`.
    fn count(&self, key: &str, min: u64) -> Result<u32> {
        let v = self.required_int(key)?;
        let line = self.raw(key).map(|e| e.line).unwrap_or(0);
        if v < min {
            bail!("line {line}: `{key}: {v}` must be at least {min}");
        }
        // Kafka counts partitions in an i32; no count here needs more.
        match i32::try_from(v) {
            Ok(_) => Ok(v as u32),
            Err(_) => bail!(
                "line {line}: `{key}: {v}` is too large (at most {})",
                i32::MAX
            ),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>> {
        let Some(e) = self.raw(key) else {
            return Ok(None);
        };
        match e.value.replace('_', "").parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => bail!(
                "line {}: `{key}: {}` must be a number, 0 or more",
                e.line,
                e.value
            ),
        }
    }
}

impl Workload {
    /// Parses an OMB workload; `default_name` names it if the file has no `name`.
    pub fn parse(text: &str, default_name: &str) -> Result<Self> {
        let f = Fields(entries(text)?);
        for key in REQUIRED_KEYS {
            if f.raw(key).is_none() {
                bail!("required key `{key}` is missing");
            }
        }
        if let Some(gb) = f.int("consumerBacklogSizeGB")? {
            if gb > 0 {
                let line = f.raw("consumerBacklogSizeGB").map(|e| e.line).unwrap_or(0);
                bail!(
                    "line {line}: `consumerBacklogSizeGB: {gb}`: building and draining a backlog \
                     is not supported, only 0 (consumers keep up with producers); measure a \
                     backlog drain with `tributary-bench produce` then `consume`"
                );
            }
        }
        if let Some(r) = f.number("backlogDrainRatio")? {
            if r > 1.0 {
                let line = f.raw("backlogDrainRatio").map(|e| e.line).unwrap_or(0);
                bail!("line {line}: `backlogDrainRatio: {r}` must be between 0 and 1");
            }
        }
        let keys = match f.raw("keyDistributor").map(|e| (e.line, e.value.as_str())) {
            None | Some((_, "NO_KEY")) => Keys::None,
            Some((_, "KEY_ROUND_ROBIN")) => Keys::RoundRobin,
            Some((line, other)) => bail!(
                "line {line}: `keyDistributor: {other}` is not supported; use NO_KEY or \
                 KEY_ROUND_ROBIN"
            ),
        };
        let message_size = f.required_int("messageSize")?;
        if message_size < TIMESTAMP_BYTES as u64 {
            let line = f.raw("messageSize").map(|e| e.line).unwrap_or(0);
            bail!(
                "line {line}: `messageSize: {message_size}` must be at least {TIMESTAMP_BYTES}: \
                 each payload starts with its send time, from which end-to-end latency is measured"
            );
        }
        let subscriptions_per_topic = f.count("subscriptionsPerTopic", 0)?;
        let consumer_per_subscription = f.count("consumerPerSubscription", 0)?;
        if subscriptions_per_topic > 0 && consumer_per_subscription == 0 {
            bail!(
                "`consumerPerSubscription: 0` with `subscriptionsPerTopic: \
                 {subscriptions_per_topic}`: a subscription needs at least one consumer"
            );
        }
        Ok(Workload {
            name: f
                .raw("name")
                .map(|e| e.value.clone())
                .unwrap_or_else(|| default_name.to_string()),
            topics: f.count("topics", 1)?,
            partitions_per_topic: f.count("partitionsPerTopic", 1)?,
            keys,
            message_size: message_size as usize,
            subscriptions_per_topic,
            consumer_per_subscription,
            producers_per_topic: f.count("producersPerTopic", 1)?,
            producer_rate: f.required_int("producerRate")? as f64,
            test_minutes: f.required_int("testDurationMinutes")? as f64,
            warmup_minutes: f
                .int("warmupDurationMinutes")?
                .map_or(DEFAULT_WARMUP_MINUTES, |m| m as f64),
            ignored: IGNORED_KEYS
                .iter()
                .filter(|k| f.raw(k).is_some())
                .map(|k| k.to_string())
                .collect(),
        })
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading workload {}", path.display()))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::parse(&text, &stem).with_context(|| format!("workload {}", path.display()))
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name, "topics": self.topics, "partitionsPerTopic": self.partitions_per_topic,
            "keyDistributor": match self.keys { Keys::None => "NO_KEY", Keys::RoundRobin => "KEY_ROUND_ROBIN" },
            "messageSize": self.message_size, "subscriptionsPerTopic": self.subscriptions_per_topic,
            "consumerPerSubscription": self.consumer_per_subscription,
            "producersPerTopic": self.producers_per_topic, "producerRate": self.producer_rate,
            "testDurationMinutes": self.test_minutes, "warmupDurationMinutes": self.warmup_minutes,
        })
    }
}

#[derive(Args, Clone)]
pub struct RunArgs {
    /// An OpenMessaging Benchmark workload file (see bench/workloads/).
    pub workload: PathBuf,
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// A librdkafka client setting for every client of the run (repeatable); applied after the
    /// run's own settings, so it can override them.
    #[arg(short = 'X', long = "client-config", value_name = "KEY=VALUE")]
    pub client_config: Vec<String>,
    /// Kafka's client security properties (as trib --command-config); `-X` overrides them.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    /// A topic setting for the topics the run creates (repeatable), e.g.
    /// `--topic-config retention.bytes=1073741824` to bound the disk a long run fills.
    #[arg(long = "topic-config", value_name = "KEY=VALUE")]
    pub topic_config: Vec<String>,
    /// Topic names are PREFIX-RUNID-NNNN.
    #[arg(long, default_value = "omb")]
    pub topic_prefix: String,
    /// Leave the run's topics on the broker instead of deleting them at the end.
    #[arg(long)]
    pub keep_topics: bool,
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// 0, 1 or all (OMB's Kafka drivers use all).
    #[arg(long, default_value = "all")]
    pub acks: String,
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// OMB's Kafka drivers use 1.
    #[arg(long, default_value_t = 1)]
    pub linger_ms: u64,
    /// OMB's Kafka latency driver uses 131072.
    #[arg(long, default_value_t = 131_072)]
    pub batch_size: usize,
    /// Measured phase in seconds, instead of the workload's testDurationMinutes.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Warm-up in seconds, instead of the workload's warmupDurationMinutes.
    #[arg(long, value_name = "SECONDS")]
    pub warmup: Option<f64>,
    /// Multiply the workload's test and warm-up durations by this (--duration and --warmup,
    /// when given, are used as they are).
    #[arg(long, default_value_t = 1.0)]
    pub duration_scale: f64,
    /// Process id of a broker whose CPU over the measured phase is reported; repeatable.
    #[arg(long = "broker-pid", value_name = "PID")]
    pub broker_pids: Vec<u32>,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Write summary.json, latency.hgrm (publish), e2e-latency.hgrm and the SVGs here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

impl RunArgs {
    /// The (warm-up, test) durations after the overrides.
    fn phases(&self, w: &Workload) -> Result<(Duration, Duration)> {
        if !(self.duration_scale.is_finite() && self.duration_scale > 0.0) {
            bail!(
                "--duration-scale {} must be a positive number",
                self.duration_scale
            );
        }
        let secs = |flag: &str, v: f64| -> Result<Duration> {
            Duration::try_from_secs_f64(v)
                .map_err(|_| anyhow::anyhow!("{flag} {v}: must be a number of seconds, 0 or more"))
        };
        let warmup = match self.warmup {
            Some(s) => secs("--warmup", s)?,
            None => secs(
                "--duration-scale",
                w.warmup_minutes * 60.0 * self.duration_scale,
            )?,
        };
        let test = match self.duration {
            Some(s) => secs("--duration", s)?,
            None => secs(
                "--duration-scale",
                w.test_minutes * 60.0 * self.duration_scale,
            )?,
        };
        if test.is_zero() {
            bail!(
                "the measured phase is 0 s (testDurationMinutes: {}); OMB would run until \
                 stopped — give testDurationMinutes of 1 or more, or --duration SECONDS",
                w.test_minutes
            );
        }
        Ok((warmup, test))
    }

    fn topic_configs(&self) -> Result<Vec<(String, String)>> {
        self.topic_config
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_string(), v.trim().to_string()))
                }
                _ => bail!(
                    "--topic-config {kv:?}: expected KEY=VALUE, e.g. retention.bytes=1073741824"
                ),
            })
            .collect()
    }

    /// The load settings of one topic's producers.
    fn topic_load(&self, w: &Workload, topic: &str) -> LoadArgs {
        LoadArgs {
            bootstrap: self.bootstrap.clone(),
            client_config: self.client_config.clone(),
            command_config: self.command_config.clone(),
            topic: topic.to_string(),
            partitions: w.partitions_per_topic as i32,
            replication_factor: self.replication_factor,
            min_insync_replicas: None,
            message_size: w.message_size,
            messages: None,
            // No message count, a duration: the producers have no quota and run until `stop`.
            duration: Some(0.0),
            rate: w.producer_rate / f64::from(w.topics),
            producers: w.producers_per_topic as usize,
            consumers: w.consumer_per_subscription as usize,
            acks: self.acks.clone(),
            idempotence: false,
            transactional_id: None,
            transaction_records: 1,
            compression: self.compression.clone(),
            linger_ms: self.linger_ms,
            batch_size: self.batch_size,
            keys: match w.keys {
                Keys::None => 0,
                Keys::RoundRobin => OMB_KEY_COUNT,
            },
            json: false,
            report: None,
            broker_pids: Vec::new(),
            random_payload: true,
        }
    }
}

/// A run id for topic names: the low bits of the clock in milliseconds, in hex.
fn run_id() -> String {
    format!("{:08x}", (load::now_ns() / 1_000_000) & 0xffff_ffff)
}

fn create_topics(args: &RunArgs, w: &Workload, names: &[String]) -> Result<()> {
    let base = args.topic_load(w, &names[0]);
    let admin: AdminClient<DefaultClientContext> = load::client(&base)
        .create()
        .context("creating the admin client")?;
    let configs = args.topic_configs()?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| {
            configs.iter().fold(
                NewTopic::new(
                    n,
                    w.partitions_per_topic as i32,
                    TopicReplication::Fixed(args.replication_factor),
                ),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let results = futures::executor::block_on(admin.create_topics(&topics, &AdminOptions::new()))
        .context("CreateTopics failed; is the broker reachable at --bootstrap?")?;
    for r in results {
        if let Err((t, e)) = r {
            bail!("creating topic {t}: {e}");
        }
    }
    // Wait until the metadata shows every partition, so consumers subscribe to whole topics.
    let probe: BaseConsumer = load::client(&base).create()?;
    let start = Instant::now();
    for name in names {
        loop {
            let ready = probe
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    m.topics().first().map(|t| {
                        t.error().is_none()
                            && t.partitions().len() == w.partitions_per_topic as usize
                    })
                })
                .unwrap_or(false);
            if ready {
                break;
            }
            if start.elapsed() > TOPIC_READY_TIMEOUT {
                bail!(
                    "topic {name} was created but its {} partitions are not all in the metadata \
                     after {TOPIC_READY_TIMEOUT:?}",
                    w.partitions_per_topic
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    eprintln!(
        "created {} topic(s) of {} partition(s), replication factor {}: {}{}",
        names.len(),
        w.partitions_per_topic,
        args.replication_factor,
        names[0],
        if names.len() > 1 { ", ..." } else { "" }
    );
    Ok(())
}

fn delete_topics(args: &RunArgs, w: &Workload, names: &[String]) {
    let base = args.topic_load(w, &names[0]);
    let deleted = load::client(&base)
        .create::<AdminClient<DefaultClientContext>>()
        .map_err(anyhow::Error::from)
        .and_then(|admin| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let results =
                futures::executor::block_on(admin.delete_topics(&refs, &AdminOptions::new()))?;
            for r in results {
                if let Err((t, e)) = r {
                    bail!("{t}: {e}");
                }
            }
            Ok(())
        });
    match deleted {
        Ok(()) => eprintln!("deleted the run's {} topic(s)", names.len()),
        Err(e) => eprintln!(
            "warning: deleting the run's topics failed ({e:#}); delete {}... by hand",
            names[0]
        ),
    }
}

/// The settings of one subscription's consumers: OMB's Kafka driver's, then `-X`.
fn consumer_config(args: &RunArgs, base: &LoadArgs, group: &str) -> ClientConfig {
    let mut c = load::client(base);
    c.set("group.id", group)
        .set("auto.offset.reset", "earliest")
        // OMB's Java consumer commits after each poll; librdkafka's closest is its periodic
        // commit of the offsets the application has polled.
        .set("enable.auto.commit", "true")
        .set("max.partition.fetch.bytes", MAX_PARTITION_FETCH_BYTES)
        .set("fetch.wait.max.ms", "100");
    for kv in &args.client_config {
        if let Some((k, v)) = kv.split_once('=') {
            c.set(k.trim(), v.trim());
        }
    }
    c
}

/// A producer or consumer thread.
type Worker = std::thread::JoinHandle<Result<()>>;

/// One subscription: its consumers, each publishing how many partitions it holds.
struct Group {
    name: String,
    partitions: usize,
    assigned: Vec<Arc<AtomicUsize>>,
}

impl Group {
    fn assigned(&self) -> usize {
        self.assigned
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// Starts every subscription's consumers; they record end-to-end latency into `shared`.
fn spawn_subscriptions(
    args: &RunArgs,
    w: &Workload,
    names: &[String],
    shared: &Arc<Shared>,
    bytes: &Arc<AtomicU64>,
) -> Result<(Vec<Group>, Vec<Worker>)> {
    let mut groups = Vec::new();
    let mut handles = Vec::new();
    for topic in names {
        let base = args.topic_load(w, topic);
        for s in 0..w.subscriptions_per_topic {
            let name = format!("{topic}-sub-{s:03}");
            let mut assigned = Vec::new();
            for _ in 0..w.consumer_per_subscription {
                let consumer: BaseConsumer = consumer_config(args, &base, &name)
                    .create()
                    .context("creating a consumer")?;
                consumer
                    .subscribe(&[topic.as_str()])
                    .with_context(|| format!("subscribing to {topic}"))?;
                let slot = Arc::new(AtomicUsize::new(0));
                assigned.push(slot.clone());
                let shared = shared.clone();
                let bytes = bytes.clone();
                handles.push(std::thread::spawn(move || -> Result<()> {
                    let mut checked = Instant::now() - ASSIGNMENT_CHECK_INTERVAL;
                    while !shared.stop.load(Ordering::Relaxed) {
                        let polled = consumer.poll(Duration::from_millis(50));
                        if checked.elapsed() >= ASSIGNMENT_CHECK_INTERVAL {
                            let n = consumer.assignment().map(|a| a.count()).unwrap_or(0);
                            slot.store(n, Ordering::Relaxed);
                            checked = Instant::now();
                        }
                        let Some(m) = polled else { continue };
                        let m = m.context("consuming")?;
                        shared.consumed(m.payload().unwrap_or_default(), true, &bytes);
                    }
                    Ok(())
                }));
            }
            groups.push(Group {
                name,
                partitions: w.partitions_per_topic as usize,
                assigned,
            });
        }
    }
    Ok((groups, handles))
}

/// Counters at one instant, to take differences of.
#[derive(Clone, Copy, Default)]
struct Counts {
    published: u64,
    sent: u64,
    consumed: u64,
    consumed_bytes: u64,
}

struct Sides {
    publish: Arc<Shared>,
    e2e: Arc<Shared>,
    sent: Arc<AtomicU64>,
    consumed_bytes: Arc<AtomicU64>,
}

impl Sides {
    fn counts(&self) -> Counts {
        Counts {
            published: self.publish.done.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            consumed: self.e2e.done.load(Ordering::Relaxed),
            consumed_bytes: self.consumed_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Prints a progress line per second for `length`, or until `failed`; returns the published and
/// consumed counts of each second.
fn phase(
    label: &str,
    length: Duration,
    sides: &Sides,
    w: &Workload,
    failed: impl Fn() -> bool,
) -> (Vec<u64>, Vec<u64>) {
    let start = Instant::now();
    let end = start + length;
    let (mut published, mut consumed) = (Vec::new(), Vec::new());
    let mut last = (start, sides.counts());
    let mb = |n: u64| n as f64 * w.message_size as f64 / 1e6;
    loop {
        let due = (last.0 + Duration::from_secs(1)).min(end);
        while Instant::now() < due && !failed() {
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(50)));
        }
        let (now, c) = (Instant::now(), sides.counts());
        let secs = (now - last.0).as_secs_f64().max(1e-3);
        let (p, r) = (c.published - last.1.published, c.consumed - last.1.consumed);
        published.push(p);
        consumed.push(r);
        let backlog =
            (c.sent * u64::from(w.subscriptions_per_topic)).saturating_sub(c.consumed) as f64;
        eprintln!(
            "{label:<7} {:>6.1}s  pub {:>8.0} msgs/s {:>7.1} MB/s | cons {:>8.0} msgs/s {:>7.1} MB/s | \
             backlog {:>8.1} K | pub p99 {:>8.2} ms | e2e p99 {:>8.2} ms",
            (now - start).as_secs_f64(),
            p as f64 / secs,
            mb(p) / secs,
            r as f64 / secs,
            mb(r) / secs,
            backlog / 1e3,
            sides.publish.p99() as f64 / 1e3,
            sides.e2e.p99() as f64 / 1e3,
        );
        last = (now, c);
        if now >= end || failed() {
            return (published, consumed);
        }
    }
}

pub fn run(args: &RunArgs) -> Result<()> {
    let w = Workload::load(&args.workload)?;
    let (warmup, test) = args.phases(&w)?;
    let probe = args.topic_load(&w, "probe");
    load::check_client_config(&probe)?;
    probe.validate("produce")?;
    args.topic_configs()?;
    if !w.ignored.is_empty() {
        eprintln!(
            "note: {} ignored: payloads are {} random bytes (with the send time in the first {TIMESTAMP_BYTES})",
            w.ignored.join(", "),
            w.message_size
        );
    }
    if w.producer_rate == 0.0 {
        eprintln!(
            "note: producerRate 0: publishing as fast as the producers can (OMB would search for \
             the highest rate the consumers keep up with)"
        );
    }
    eprintln!(
        "workload {:?}: {} topic(s) x {} partition(s), {} B messages, {} producer(s)/topic at \
         {} msgs/s in total, {} subscription(s)/topic x {} consumer(s); warm-up {:.0} s, test {:.0} s",
        w.name,
        w.topics,
        w.partitions_per_topic,
        w.message_size,
        w.producers_per_topic,
        if w.producer_rate > 0.0 { w.producer_rate.to_string() } else { "max".into() },
        w.subscriptions_per_topic,
        w.consumer_per_subscription,
        warmup.as_secs_f64(),
        test.as_secs_f64()
    );
    // Refuse a wrong --broker-pid before spending the warm-up.
    drop(cpu::Meter::start(&args.broker_pids)?);

    let id = run_id();
    let names: Vec<String> = (0..w.topics)
        .map(|i| format!("{}-{id}-{i:04}", args.topic_prefix))
        .collect();
    create_topics(args, &w, &names)?;
    let result = run_on_topics(args, &w, &names, warmup, test);
    if !args.keep_topics {
        delete_topics(args, &w, &names);
    }
    result
}

fn run_on_topics(
    args: &RunArgs,
    w: &Workload,
    names: &[String],
    warmup: Duration,
    test: Duration,
) -> Result<()> {
    let sides = Sides {
        publish: Shared::new(),
        e2e: Shared::new(),
        sent: Arc::new(AtomicU64::new(0)),
        consumed_bytes: Arc::new(AtomicU64::new(0)),
    };
    let (groups, consumers) =
        spawn_subscriptions(args, w, names, &sides.e2e, &sides.consumed_bytes)?;
    let stop_consumers = |consumers: Vec<Worker>| {
        sides.e2e.stop.store(true, Ordering::Relaxed);
        load::join_all(consumers)
    };
    if let Err(msg) = await_assignments(&groups, &consumers) {
        // A consumer that stopped early says why.
        stop_consumers(consumers)?;
        bail!(msg);
    }

    let producers = spawn_publishers(args, w, names, &sides)?;
    let failed =
        || producers.iter().any(|h| h.is_finished()) || consumers.iter().any(|h| h.is_finished());
    let measured = measure(args, w, &sides, warmup, test, failed)?;

    sides.publish.stop.store(true, Ordering::Relaxed);
    let produced = load::join_all(producers);
    let consumed = stop_consumers(consumers);
    produced?;
    consumed?;

    let s = summarize(args, w, warmup, test, &measured);
    output(args, &s, &measured)?;
    let errors = sides.publish.errors.load(Ordering::Relaxed);
    if errors > 0 {
        bail!("{errors} messages were not acknowledged");
    }
    Ok(())
}

/// Starts every topic's producers; they record publish latency into `sides.publish`.
fn spawn_publishers(
    args: &RunArgs,
    w: &Workload,
    names: &[String],
    sides: &Sides,
) -> Result<Vec<Worker>> {
    let mut producers = Vec::new();
    for topic in names {
        producers.extend(load::spawn_producers(
            &args.topic_load(w, topic),
            &sides.publish,
            true,
            &sides.sent,
        )?);
    }
    Ok(producers)
}

/// Waits until every group has all its topic's partitions assigned; the error says which group
/// is short when that takes longer than [`GROUPS_READY_TIMEOUT`] or a consumer has stopped.
fn await_assignments(groups: &[Group], consumers: &[Worker]) -> Result<(), String> {
    let wait = Instant::now();
    while let Some(g) = groups.iter().find(|g| g.assigned() != g.partitions) {
        let gave_up = wait.elapsed() > GROUPS_READY_TIMEOUT;
        if gave_up || consumers.iter().any(|h| h.is_finished()) {
            return Err(format!(
                "consumer group {} has {} of its {} partitions assigned after {:.1} s; does the \
                 broker coordinate consumer groups?",
                g.name,
                g.assigned(),
                g.partitions,
                wait.elapsed().as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !groups.is_empty() {
        eprintln!(
            "{} consumer group(s) have their partitions after {:.1} s",
            groups.len(),
            wait.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// What the measured phase saw.
struct Measured {
    /// The counters at its start.
    before: Counts,
    /// The counters at its end.
    after: Counts,
    /// Its length.
    seconds: f64,
    /// The CPU the broker(s) and this process spent over it.
    cpu: cpu::Usage,
    publish_latency: Histogram<u64>,
    e2e_latency: Histogram<u64>,
    published_per_second: Vec<u64>,
    consumed_per_second: Vec<u64>,
}

/// Runs the warm-up (if any), whose latencies are thrown away, then the measured phase with
/// the broker's CPU metered; either ends early once a worker has `failed`.
fn measure(
    args: &RunArgs,
    w: &Workload,
    sides: &Sides,
    warmup: Duration,
    test: Duration,
    failed: impl Fn() -> bool,
) -> Result<Measured> {
    if !warmup.is_zero() {
        phase("warm-up", warmup, sides, w, &failed);
        sides.publish.reset_latency();
        sides.e2e.reset_latency();
    }
    let meter = cpu::Meter::start(&args.broker_pids)?;
    let before = sides.counts();
    let start = Instant::now();
    let (published_per_second, consumed_per_second) = phase("test", test, sides, w, &failed);
    let seconds = start.elapsed().as_secs_f64();
    let cpu = meter.stop();
    let after = sides.counts();
    Ok(Measured {
        before,
        after,
        seconds,
        cpu,
        publish_latency: sides.publish.histogram(),
        e2e_latency: sides.e2e.histogram(),
        published_per_second,
        consumed_per_second,
    })
}

/// The run's summary: the publish side as every mode reports it, with the workload, the
/// consume side and the end-to-end latency added.
fn summarize(
    args: &RunArgs,
    w: &Workload,
    warmup: Duration,
    test: Duration,
    m: &Measured,
) -> Value {
    let published = m.after.published - m.before.published;
    let consumed = m.after.consumed - m.before.consumed;
    let consumed_bytes = m.after.consumed_bytes - m.before.consumed_bytes;
    let seconds = m.seconds;
    let mut s = report::summary(&Run {
        mode: "run",
        msgs: published,
        bytes: published * w.message_size as u64,
        seconds,
        latency_us: &m.publish_latency,
        commit_latency_us: None,
        per_second: &m.published_per_second,
        config: json!({
            "workload": w.to_json(), "file": args.workload.display().to_string(),
            "warmup_seconds": warmup.as_secs_f64(),
            "test_seconds": test.as_secs_f64(), "acks": args.acks, "compression": args.compression,
            "linger_ms": args.linger_ms, "batch_size": args.batch_size,
            "replication_factor": args.replication_factor, "topic_config": args.topic_config,
            "broker_pids": args.broker_pids,
        }),
        broker: &args.bootstrap,
        cpu: Some(&m.cpu),
    });
    s["workload"] = json!(w.name);
    s["consume"] = json!({
        "msgs": consumed,
        "msgs_per_sec": consumed as f64 / seconds.max(1e-9),
        "mb_per_sec": consumed_bytes as f64 / seconds.max(1e-9) / 1e6,
        "throughput_per_second": m.consumed_per_second,
    });
    s["e2e_latency_us"] = report::latency_json(&m.e2e_latency);
    s
}

/// Writes the report files with `--report`, prints the summary, and with `--json` the summary
/// as JSON.
fn output(args: &RunArgs, s: &Value, measured: &Measured) -> Result<()> {
    if let Some(dir) = &args.report {
        report::write_report(dir, s, &measured.publish_latency)?;
        std::fs::write(
            dir.join("e2e-latency.hgrm"),
            report::hgrm(&measured.e2e_latency),
        )?;
        eprintln!("report written to {}", dir.display());
    }
    print_summary(s);
    if args.json {
        println!("{s}");
    }
    Ok(())
}

fn print_summary(s: &Value) {
    let lat = |v: &Value| {
        format!(
            "p50 {} us, p99 {} us, p99.9 {} us, max {} us",
            v["p50"], v["p99"], v["p999"], v["max"]
        )
    };
    let c = &s["consume"];
    println!(
        "run {}: published {} msgs in {:.2}s: {:.0} msgs/s, {:.1} MB/s; consumed {} msgs: {:.0} msgs/s, {:.1} MB/s",
        s["workload"],
        s["msgs"],
        s["seconds"].as_f64().unwrap_or(0.0),
        s["msgs_per_sec"].as_f64().unwrap_or(0.0),
        s["mb_per_sec"].as_f64().unwrap_or(0.0),
        c["msgs"],
        c["msgs_per_sec"].as_f64().unwrap_or(0.0),
        c["mb_per_sec"].as_f64().unwrap_or(0.0),
    );
    println!("publish latency: {}", lat(&s["latency_us"]));
    println!("end-to-end latency: {}", lat(&s["e2e_latency_us"]));
    if let Some(line) = report::cpu_line(s) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OMB's `workloads/1-topic-16-partitions-1kb.yaml`, licence header and all.
    const OMB_16_PARTITIONS: &str = "#\n# Licensed under the Apache License, Version 2.0\n#\n\n\
        name: 1 producer / 1 consumers on 1 topic\n\ntopics: 1\npartitionsPerTopic: 16\n\
        messageSize: 1024\npayloadFile: \"payload/payload-1Kb.data\"\nsubscriptionsPerTopic: 1\n\
        consumerPerSubscription: 1\nproducersPerTopic: 1\nproducerRate: 50000\n\
        consumerBacklogSizeGB: 0\ntestDurationMinutes: 15\n";

    fn parse(text: &str) -> Workload {
        match Workload::parse(text, "file-stem") {
            Ok(w) => w,
            Err(e) => panic!("should parse: {e:#}\n{text}"),
        }
    }

    fn refusal(text: &str) -> String {
        match Workload::parse(text, "file-stem") {
            Ok(w) => panic!("should be refused, parsed {w:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn parses_an_omb_workload() {
        let w = parse(OMB_16_PARTITIONS);
        assert_eq!(w.name, "1 producer / 1 consumers on 1 topic");
        assert_eq!((w.topics, w.partitions_per_topic), (1, 16));
        assert_eq!(w.message_size, 1024);
        assert_eq!(
            (
                w.subscriptions_per_topic,
                w.consumer_per_subscription,
                w.producers_per_topic
            ),
            (1, 1, 1)
        );
        assert_eq!(w.producer_rate, 50_000.0);
        assert_eq!(w.test_minutes, 15.0);
        assert_eq!(w.warmup_minutes, DEFAULT_WARMUP_MINUTES);
        assert_eq!(w.keys, Keys::None);
        assert_eq!(w.ignored, vec!["payloadFile".to_string()]);
    }

    #[test]
    fn every_shipped_workload_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("bench/workloads exists") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let w = Workload::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
                assert!(w.test_minutes > 0.0, "{}", path.display());
                n += 1;
            }
        }
        assert!(n >= 4, "only {n} workloads in {}", dir.display());
    }

    #[test]
    fn quotes_comments_separators_and_optional_keys() {
        let w = parse(
            "---\nname: 'max rate' # trailing comment\ntopics: 2\npartitionsPerTopic: 3\r\n\
             keyDistributor: \"KEY_ROUND_ROBIN\"\nmessageSize: 100\nsubscriptionsPerTopic: 0\n\
             consumerPerSubscription: 0\nproducersPerTopic: 4\nproducerRate: 1_000_000\n\
             testDurationMinutes: 5\nwarmupDurationMinutes: 0\nuseRandomizedPayloads: true\n\
             randomBytesRatio: 0.5\nrandomizedPayloadPoolSize: 1000\n",
        );
        assert_eq!(w.name, "max rate");
        assert_eq!((w.topics, w.partitions_per_topic), (2, 3));
        assert_eq!(w.keys, Keys::RoundRobin);
        assert_eq!(w.producer_rate, 1_000_000.0);
        assert_eq!(w.warmup_minutes, 0.0);
        assert_eq!(w.subscriptions_per_topic, 0);
        assert_eq!(w.ignored.len(), 3);
        let unnamed = OMB_16_PARTITIONS.replace("name: 1 producer / 1 consumers on 1 topic\n", "");
        assert_eq!(parse(&unnamed).name, "file-stem");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it_and_its_line() {
        let e = refusal(&OMB_16_PARTITIONS.replace("producerRate", "producerRat"));
        assert!(e.contains("unknown key `producerRat`"), "{e}");
        assert!(e.contains("line 14"), "{e}");
        assert!(e.contains("producerRate"), "the known keys are listed: {e}");
    }

    #[test]
    fn a_missing_required_key_is_an_error_naming_it() {
        for key in REQUIRED_KEYS {
            let text: String = OMB_16_PARTITIONS
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}:")))
                .map(|l| format!("{l}\n"))
                .collect();
            let e = refusal(&text);
            assert!(
                e.contains(&format!("required key `{key}` is missing")),
                "{key}: {e}"
            );
        }
    }

    #[test]
    fn a_backlog_is_refused() {
        let e = refusal(
            &OMB_16_PARTITIONS.replace("consumerBacklogSizeGB: 0", "consumerBacklogSizeGB: 100"),
        );
        assert!(e.contains("consumerBacklogSizeGB: 100"), "{e}");
        assert!(e.contains("not supported, only 0"), "{e}");
        let w = parse(&OMB_16_PARTITIONS.replace("consumerBacklogSizeGB: 0\n", ""));
        assert_eq!(w.topics, 1, "an absent backlog is OMB's default, 0");
    }

    #[test]
    fn malformed_lines_and_values_are_refused() {
        let cases = [
            (
                "topics: 1",
                "topics: 1\n  extra: 2",
                "line 8: indented line",
            ),
            (
                "topics: 1",
                "topics:\n  - a",
                "`topics` has no value (nested",
            ),
            ("topics: 1", "topics", "expected `key: value`"),
            (
                "topics: 1",
                "topics: one",
                "`topics: one` must be a whole number",
            ),
            ("topics: 1", "topics: -1", "must be a whole number"),
            ("topics: 1", "topics: 0", "`topics: 0` must be at least 1"),
            (
                "topics: 1",
                "topics: 1\ntopics: 2",
                "`topics` given twice (first on line 7)",
            ),
            ("topics: 1", "topics:", "`topics` has no value"),
            ("topics: 1", "topics: |", "block, flow"),
            ("topics: 1", "topics: \"1", "unterminated"),
            ("messageSize: 1024", "messageSize: 4", "must be at least 8"),
            (
                "producersPerTopic: 1",
                "producersPerTopic: 0",
                "must be at least 1",
            ),
            (
                "consumerPerSubscription: 1",
                "consumerPerSubscription: 0",
                "needs at least one consumer",
            ),
            (
                "name: 1 producer / 1 consumers on 1 topic",
                "keyDistributor: RANDOM_NANO",
                "RANDOM_NANO` is not supported",
            ),
            (
                "name: 1 producer / 1 consumers on 1 topic",
                "backlogDrainRatio: 1.5",
                "between 0 and 1",
            ),
            ("topics: 1", "topics: 99999999999", "too large"),
        ];
        for (from, to, want) in cases {
            let e = refusal(&OMB_16_PARTITIONS.replace(from, to));
            assert!(e.contains(want), "{to:?}: want {want:?} in {e}");
        }
    }

    fn run_args(flags: &[&str]) -> RunArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = ["tributary-bench", "w.yaml"]
            .into_iter()
            .chain(flags.iter().copied());
        match <Cli as clap::Parser>::try_parse_from(argv) {
            Ok(c) => c.run,
            Err(e) => panic!("{flags:?}: {e}"),
        }
    }

    #[test]
    fn durations_follow_the_workload_unless_overridden_or_scaled() {
        let w = parse(OMB_16_PARTITIONS);
        let s = |d: Duration| d.as_secs_f64();
        let (warm, test) = run_args(&[]).phases(&w).expect("valid");
        assert_eq!((s(warm), s(test)), (60.0, 900.0));
        let (warm, test) = run_args(&["--duration-scale", "0.01"])
            .phases(&w)
            .expect("valid");
        assert!((s(warm) - 0.6).abs() < 1e-9 && (s(test) - 9.0).abs() < 1e-9);
        let (warm, test) =
            run_args(&["--duration", "10", "--warmup", "0", "--duration-scale", "5"])
                .phases(&w)
                .expect("valid");
        assert_eq!((s(warm), s(test)), (0.0, 10.0));
        let e = run_args(&["--duration", "0"])
            .phases(&w)
            .unwrap_err()
            .to_string();
        assert!(e.contains("measured phase is 0 s"), "{e}");
        let e = run_args(&["--duration-scale", "0"])
            .phases(&w)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--duration-scale 0 must be a positive number"),
            "{e}"
        );
        let e = run_args(&["--warmup=-1"])
            .phases(&w)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--warmup -1"), "{e}");
    }

    #[test]
    fn the_rate_is_shared_by_the_topics_and_keys_follow_the_distributor() {
        let w = parse(
            &OMB_16_PARTITIONS
                .replace("topics: 1", "topics: 4")
                .replace("producersPerTopic: 1", "producersPerTopic: 2")
                .replace("name:", "keyDistributor: KEY_ROUND_ROBIN\nname:"),
        );
        let l = run_args(&[]).topic_load(&w, "t");
        assert_eq!(l.rate, 12_500.0);
        assert_eq!(l.producers, 2);
        assert_eq!(l.keys, OMB_KEY_COUNT);
        assert!(l.random_payload);
        assert!(l.validate("produce").is_ok());
        assert_eq!(l.target(), None, "producers run until stopped");
    }

    #[test]
    fn topic_configs_must_be_key_value() {
        let a = run_args(&["--topic-config", "retention.bytes=1073741824"]);
        assert_eq!(
            a.topic_configs().expect("valid"),
            vec![("retention.bytes".to_string(), "1073741824".to_string())]
        );
        let e = run_args(&["--topic-config", "retention.bytes"])
            .topic_configs()
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected KEY=VALUE"), "{e}");
    }
}
