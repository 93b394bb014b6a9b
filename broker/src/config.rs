//! Broker configuration: Kafka-style `key=value` properties from `--config FILE` and `--set`,
//! validated up front. Every limit has a key here; an unknown key or a bad value stops start-up
//! with a message naming the key.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

/// One broker-level key: its default, Kafka type name and documentation.
pub struct BrokerKey {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: ConfigKind,
    pub doc: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    Bool,
    Int,
    Long,
    Double,
    String,
    List,
}

impl ConfigKind {
    /// Kafka's `DescribeConfigsResponse.ConfigType` code.
    pub fn wire_code(self) -> i8 {
        match self {
            ConfigKind::Bool => 1,
            ConfigKind::String => 2,
            ConfigKind::Int => 3,
            ConfigKind::Long => 5,
            ConfigKind::Double => 6,
            ConfigKind::List => 7,
        }
    }
}

pub const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey { name: "node.id", default: "0", kind: ConfigKind::Int, doc: "The id of this broker." },
    BrokerKey { name: "auto.create.topics.enable", default: "true", kind: ConfigKind::Bool, doc: "Create a topic when a client asks for its metadata and it does not exist." },
    BrokerKey { name: "num.partitions", default: "1", kind: ConfigKind::Int, doc: "Partitions of auto-created topics and of CreateTopics requests that ask for the default." },
    BrokerKey { name: "default.replication.factor", default: "1", kind: ConfigKind::Int, doc: "Replication factor of auto-created topics; a single broker only supports 1." },
    BrokerKey { name: "message.max.bytes", default: "1048588", kind: ConfigKind::Int, doc: "Largest record batch the broker accepts, after compression (topic override: max.message.bytes)." },
    BrokerKey { name: "socket.request.max.bytes", default: "104857600", kind: ConfigKind::Int, doc: "Largest request frame; a larger length prefix closes the connection." },
    BrokerKey { name: "log.segment.bytes", default: "1073741824", kind: ConfigKind::Int, doc: "Size at which a partition rolls to a new segment file (topic override: segment.bytes)." },
    BrokerKey { name: "log.roll.ms", default: "", kind: ConfigKind::Long, doc: "Roll a segment when its batches' timestamps span more than this (topic override: segment.ms); unset: log.roll.hours." },
    BrokerKey { name: "log.roll.hours", default: "168", kind: ConfigKind::Int, doc: "log.roll.ms in hours, used when log.roll.ms is unset." },
    BrokerKey { name: "log.retention.ms", default: "", kind: ConfigKind::Long, doc: "Delete a segment once its newest record is older than this; -1: keep forever (topic override: retention.ms). Unset: log.retention.minutes, then log.retention.hours." },
    BrokerKey { name: "log.retention.minutes", default: "", kind: ConfigKind::Int, doc: "log.retention.ms in minutes, used when log.retention.ms is unset." },
    BrokerKey { name: "log.retention.hours", default: "168", kind: ConfigKind::Int, doc: "log.retention.ms in hours, used when neither log.retention.ms nor log.retention.minutes is set." },
    BrokerKey { name: "log.retention.bytes", default: "-1", kind: ConfigKind::Long, doc: "Delete the oldest segments of a partition larger than this; -1: no size limit (topic override: retention.bytes)." },
    BrokerKey { name: "log.retention.check.interval.ms", default: "300000", kind: ConfigKind::Long, doc: "How often each shard looks for segments that retention allows deleting." },
    BrokerKey { name: "log.index.interval.bytes", default: "4096", kind: ConfigKind::Int, doc: "Bytes of log between sparse index entries: how far a fetch or timestamp lookup scans at most past an index entry (topic override: index.interval.bytes)." },
    BrokerKey { name: "log.write.ahead.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Largest append buffer of a partition: appends are copied into aligned buffers sized to hold what the partition wrote between its last two flushes, up to this, and a buffer that fills is written at once, ahead of the commit." },
    BrokerKey { name: "log.flush.syncfs.min.files", default: "2", kind: ConfigKind::Int, doc: "Group commit across partitions: a shard's sync round that covers at least this many segment files on one filesystem makes them durable with one syncfs (one journal commit and device flush) instead of one fdatasync each. syncfs also flushes other programs' dirty data on that filesystem: on a data disk shared with heavy writers set 0 (no rounds: each partition fdatasyncs at once)." },
    BrokerKey { name: "log.flush.syncfs.max.dirty.bytes", default: "16777216", kind: ConfigKind::Long, doc: "A sync round uses syncfs only while the machine's dirty and under-writeback page cache (/proc/meminfo) is below this: syncfs writes back and waits for other programs' dirty data on the filesystem (the broker's own direct writes leave only some filesystem metadata, about 1.5 MB with 64 busy partitions). 0: never syncfs." },
    BrokerKey { name: "log.read.ahead.budget.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Memory each shard may hold in log chunks read ahead for consumers reading in order; 0 turns read-ahead off." },
    BrokerKey { name: "log.tail.cache.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Memory each shard may use to keep recently flushed log data for consumers reading at the tail; 0 turns the tail cache off." },
    BrokerKey { name: "log.tail.cache.partition.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Most recently flushed bytes one partition keeps in the tail cache; past it they are let go and the cache refills." },
    BrokerKey { name: "log.cleaner.enable", default: "true", kind: ConfigKind::Bool, doc: "Run the log cleaner, which compacts topics with cleanup.policy=compact (__consumer_offsets among them)." },
    BrokerKey { name: "log.cleaner.backoff.ms", default: "15000", kind: ConfigKind::Long, doc: "How often each shard looks for compacted partitions with enough new data to clean." },
    BrokerKey { name: "log.cleaner.min.cleanable.ratio", default: "0.5", kind: ConfigKind::Double, doc: "Clean a partition once this share of its closed log is new since its last cleaning (topic override: min.cleanable.dirty.ratio)." },
    BrokerKey { name: "log.cleaner.delete.retention.ms", default: "86400000", kind: ConfigKind::Long, doc: "How long a tombstone stays in a compacted topic (topic override: delete.retention.ms)." },
    BrokerKey { name: "log.cleaner.dedupe.buffer.size", default: "134217728", kind: ConfigKind::Long, doc: "Memory for the cleaner's key map per pass; a pass covers as many segments as it holds." },
    BrokerKey { name: "log.cleaner.batch.inflated.max.bytes", default: "67108864", kind: ConfigKind::Long, doc: "Largest records section the cleaner decompresses to read a compressed batch's keys; a batch that inflates past it is kept whole, uncompacted." },
    BrokerKey { name: "log.flush.interval.messages", default: "1", kind: ConfigKind::Long, doc: "fdatasync a partition once this many messages are unsynced (topic override: flush.messages). 1, the default, acknowledges nothing before it is synced; Kafka's default leaves flushing to the OS." },
    BrokerKey { name: "log.flush.interval.ms", default: "9223372036854775807", kind: ConfigKind::Long, doc: "fdatasync written data at most this long after it was written, when log.flush.interval.messages is above 1 (topic override: flush.ms)." },
    BrokerKey { name: "queued.max.requests", default: "500", kind: ConfigKind::Int, doc: "Depth of each shard's queue of requests forwarded from other shards." },
    BrokerKey { name: "shard.io.memory.bytes", default: "1048576", kind: ConfigKind::Long, doc: "Registered io_uring buffer memory per shard; locked memory, keep within RLIMIT_MEMLOCK." },
    BrokerKey { name: "shard.spin.before.park.us", default: "0", kind: ConfigKind::Long, doc: "Microseconds a shard spins before sleeping when idle: lower latency for more CPU." },
    BrokerKey { name: "shutdown.drain.timeout.ms", default: "10000", kind: ConfigKind::Long, doc: "How long shutdown waits for in-flight requests to finish before closing logs." },
    BrokerKey { name: "offsets.topic.num.partitions", default: "50", kind: ConfigKind::Int, doc: "Partitions of __consumer_offsets; fixed once the topic exists." },
    BrokerKey { name: "offsets.topic.segment.bytes", default: "104857600", kind: ConfigKind::Int, doc: "Segment size of __consumer_offsets." },
    BrokerKey { name: "offsets.retention.minutes", default: "10080", kind: ConfigKind::Int, doc: "How long committed offsets of an empty group are kept." },
    BrokerKey { name: "offsets.retention.check.interval.ms", default: "600000", kind: ConfigKind::Long, doc: "How often expired offsets are looked for." },
    BrokerKey { name: "offset.metadata.max.bytes", default: "4096", kind: ConfigKind::Int, doc: "Largest metadata string of a committed offset (OFFSET_METADATA_TOO_LARGE)." },
    BrokerKey { name: "group.min.session.timeout.ms", default: "6000", kind: ConfigKind::Int, doc: "Smallest session timeout a group member may ask for." },
    BrokerKey { name: "group.max.session.timeout.ms", default: "1800000", kind: ConfigKind::Int, doc: "Largest session timeout a group member may ask for." },
    BrokerKey { name: "group.initial.rebalance.delay.ms", default: "3000", kind: ConfigKind::Int, doc: "How long the first rebalance of an empty group waits for more members." },
    BrokerKey { name: "group.max.size", default: "1000", kind: ConfigKind::Int, doc: "Most members a consumer group may have (GROUP_MAX_SIZE_REACHED)." },
    BrokerKey { name: "fetch.max.bytes", default: "57671680", kind: ConfigKind::Int, doc: "Most record bytes one Fetch response carries, whatever the client asks for (the first non-empty partition may exceed it, KIP-74); nothing is read past it." },
    BrokerKey { name: "max.incremental.fetch.session.cache.slots", default: "1000", kind: ConfigKind::Int, doc: "Fetch sessions (KIP-227) the broker keeps, shared out evenly between the shards; when full, a new session is refused (the fetch is answered without one) unless one has been unused for 2 minutes. 0: no sessions." },
];

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
    pub cpus: Vec<usize>,
    /// Every broker key with its effective value, and whether it was set explicitly.
    pub values: BTreeMap<&'static str, (String, bool)>,
    pub node_id: i32,
    pub auto_create_topics: bool,
    pub num_partitions: i32,
    pub message_max_bytes: usize,
    pub socket_request_max_bytes: usize,
    pub log_segment_bytes: u64,
    pub log_roll_ms: i64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: u64,
    pub log_index_interval_bytes: u64,
    pub log_flush_interval_messages: i64,
    pub log_write_ahead_bytes: u64,
    pub log_flush_syncfs_min_files: usize,
    pub log_flush_syncfs_max_dirty_bytes: u64,
    pub log_read_ahead_budget_bytes: u64,
    pub log_tail_cache_bytes: u64,
    pub log_tail_cache_partition_bytes: u64,
    pub log_cleaner_enable: bool,
    pub log_cleaner_backoff_ms: u64,
    pub log_cleaner_min_cleanable_ratio: f64,
    pub log_cleaner_delete_retention_ms: i64,
    pub log_cleaner_dedupe_buffer_size: u64,
    pub log_cleaner_batch_inflated_max_bytes: u64,
    pub log_flush_interval_ms: i64,
    pub queued_max_requests: usize,
    pub shard_io_memory_bytes: usize,
    pub shard_spin_before_park_us: u64,
    pub shutdown_drain_timeout_ms: u64,
    pub offsets_topic_num_partitions: i32,
    pub offsets_topic_segment_bytes: u64,
    pub offsets_retention_minutes: u64,
    pub offsets_retention_check_interval_ms: u64,
    pub offset_metadata_max_bytes: usize,
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    pub group_initial_rebalance_delay_ms: u64,
    pub group_max_size: usize,
    pub fetch_max_bytes: usize,
    pub max_incremental_fetch_session_cache_slots: usize,
}

/// Parses a Kafka `.properties` file: `key=value` or `key: value` lines, `#`/`!` comments.
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| anyhow!("line {}: expected key=value, found {line:?}", n + 1))?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(out)
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("config {key}: {v:?} is not a boolean; use true or false"),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str, min: i64) -> Result<T> {
    let n: i64 = v
        .parse()
        .map_err(|_| anyhow!("config {key}: {v:?} is not a whole number"))?;
    if n < min {
        bail!("config {key}: {n} is below the minimum {min}");
    }
    v.parse::<T>()
        .map_err(|_| anyhow!("config {key}: {v:?} is out of range"))
}

/// A ratio between 0 and 1.
pub fn parse_ratio(key: &str, v: &str) -> Result<f64> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => bail!("config {key}: {v:?} is not a ratio between 0 and 1"),
    }
}

/// Parses `0,2-5` into CPU ids.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a
                .trim()
                .parse()
                .with_context(|| format!("--cpus: bad CPU {a:?}"))?;
            let b: usize = b
                .trim()
                .parse()
                .with_context(|| format!("--cpus: bad CPU {b:?}"))?;
            if a > b {
                bail!("--cpus: range {part} is backwards");
            }
            cpus.extend(a..=b);
        } else {
            cpus.push(
                part.parse()
                    .with_context(|| format!("--cpus: bad CPU {part:?}"))?,
            );
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        bail!("--cpus: no CPUs listed");
    }
    Ok(cpus)
}

/// CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        ids.push(0);
    }
    ids
}

pub struct ConfigInput {
    pub data_dir: PathBuf,
    pub listen: String,
    pub advertised_listener: Option<String>,
    pub cores: Option<usize>,
    pub cpus: Option<String>,
    pub properties: Vec<(String, String)>,
}

fn resolve(addr: &str, what: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("{what} {addr:?} is not a HOST:PORT address"))?
        .next()
        .ok_or_else(|| anyhow!("{what} {addr:?} resolves to no address"))
}

impl BrokerConfig {
    pub fn build(input: ConfigInput) -> Result<Self> {
        let mut values: BTreeMap<&'static str, (String, bool)> = BROKER_KEYS
            .iter()
            .map(|k| (k.name, (k.default.to_string(), false)))
            .collect();
        for (k, v) in input.properties {
            let Some(key) = BROKER_KEYS.iter().find(|d| d.name == k) else {
                let known: Vec<&str> = BROKER_KEYS.iter().map(|d| d.name).collect();
                bail!(
                    "unknown config key {k:?}; supported keys: {}",
                    known.join(", ")
                );
            };
            values.insert(key.name, (v, true));
        }
        let snapshot = values.clone();
        let get = |k: &str| snapshot[k].0.clone();
        let set = |k: &str| !snapshot[k].0.is_empty();
        // Kafka's precedence: the finest unit that is set wins.
        let log_roll_ms: i64 = if set("log.roll.ms") {
            parse_num("log.roll.ms", &get("log.roll.ms"), 1)?
        } else {
            parse_num::<i64>("log.roll.hours", &get("log.roll.hours"), 1)? * 3_600_000
        };
        let log_retention_ms: i64 = if set("log.retention.ms") {
            parse_num("log.retention.ms", &get("log.retention.ms"), -1)?
        } else if set("log.retention.minutes") {
            let m: i64 = parse_num("log.retention.minutes", &get("log.retention.minutes"), -1)?;
            if m < 0 {
                -1
            } else {
                m * 60_000
            }
        } else {
            let h: i64 = parse_num("log.retention.hours", &get("log.retention.hours"), -1)?;
            if h < 0 {
                -1
            } else {
                h * 3_600_000
            }
        };
        let listen = resolve(&input.listen, "--listen")?;
        let (advertised_host, advertised_port) = match &input.advertised_listener {
            Some(a) => {
                let (h, p) = a
                    .rsplit_once(':')
                    .ok_or_else(|| anyhow!("--advertised-listener {a:?} must be HOST:PORT"))?;
                let port: u16 = p
                    .parse()
                    .map_err(|_| anyhow!("--advertised-listener {a:?}: bad port {p:?}"))?;
                (h.to_string(), port)
            }
            None => (listen.ip().to_string(), listen.port()),
        };
        let allowed = allowed_cpus();
        let cpus = match (&input.cores, &input.cpus) {
            (Some(_), Some(_)) => bail!("give --cores or --cpus, not both"),
            (Some(0), None) => bail!("--cores must be at least 1"),
            (Some(n), None) => {
                if *n > allowed.len() {
                    bail!(
                        "--cores {n}: only {} CPUs are in this process's affinity mask",
                        allowed.len()
                    );
                }
                allowed[..*n].to_vec()
            }
            (None, Some(list)) => {
                let cpus = parse_cpu_list(list)?;
                if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                    bail!("--cpus: CPU {bad} is not in this process's affinity mask {allowed:?}");
                }
                cpus
            }
            (None, None) => allowed,
        };
        let cfg = BrokerConfig {
            data_dir: input.data_dir,
            listen,
            advertised_host,
            advertised_port,
            cpus,
            node_id: parse_num("node.id", &get("node.id"), 0)?,
            auto_create_topics: parse_bool(
                "auto.create.topics.enable",
                &get("auto.create.topics.enable"),
            )?,
            num_partitions: parse_num("num.partitions", &get("num.partitions"), 1)?,
            message_max_bytes: parse_num("message.max.bytes", &get("message.max.bytes"), 0)?,
            socket_request_max_bytes: parse_num(
                "socket.request.max.bytes",
                &get("socket.request.max.bytes"),
                1,
            )?,
            log_segment_bytes: parse_num("log.segment.bytes", &get("log.segment.bytes"), 1024)?,
            log_roll_ms,
            log_retention_ms,
            log_retention_bytes: parse_num("log.retention.bytes", &get("log.retention.bytes"), -1)?,
            log_retention_check_interval_ms: parse_num(
                "log.retention.check.interval.ms",
                &get("log.retention.check.interval.ms"),
                1,
            )?,
            log_index_interval_bytes: parse_num(
                "log.index.interval.bytes",
                &get("log.index.interval.bytes"),
                0,
            )?,
            log_write_ahead_bytes: parse_num(
                "log.write.ahead.bytes",
                &get("log.write.ahead.bytes"),
                4096,
            )?,
            log_flush_syncfs_min_files: parse_num(
                "log.flush.syncfs.min.files",
                &get("log.flush.syncfs.min.files"),
                0,
            )?,
            log_flush_syncfs_max_dirty_bytes: parse_num(
                "log.flush.syncfs.max.dirty.bytes",
                &get("log.flush.syncfs.max.dirty.bytes"),
                0,
            )?,
            log_read_ahead_budget_bytes: parse_num(
                "log.read.ahead.budget.bytes",
                &get("log.read.ahead.budget.bytes"),
                0,
            )?,
            log_tail_cache_bytes: parse_num(
                "log.tail.cache.bytes",
                &get("log.tail.cache.bytes"),
                0,
            )?,
            log_tail_cache_partition_bytes: parse_num(
                "log.tail.cache.partition.bytes",
                &get("log.tail.cache.partition.bytes"),
                0,
            )?,
            log_cleaner_enable: parse_bool("log.cleaner.enable", &get("log.cleaner.enable"))?,
            log_cleaner_backoff_ms: parse_num(
                "log.cleaner.backoff.ms",
                &get("log.cleaner.backoff.ms"),
                1,
            )?,
            log_cleaner_min_cleanable_ratio: parse_ratio(
                "log.cleaner.min.cleanable.ratio",
                &get("log.cleaner.min.cleanable.ratio"),
            )?,
            log_cleaner_delete_retention_ms: parse_num(
                "log.cleaner.delete.retention.ms",
                &get("log.cleaner.delete.retention.ms"),
                0,
            )?,
            log_cleaner_dedupe_buffer_size: parse_num(
                "log.cleaner.dedupe.buffer.size",
                &get("log.cleaner.dedupe.buffer.size"),
                1 << 20,
            )?,
            log_cleaner_batch_inflated_max_bytes: parse_num(
                "log.cleaner.batch.inflated.max.bytes",
                &get("log.cleaner.batch.inflated.max.bytes"),
                1 << 20,
            )?,
            log_flush_interval_messages: parse_num(
                "log.flush.interval.messages",
                &get("log.flush.interval.messages"),
                1,
            )?,
            log_flush_interval_ms: parse_num(
                "log.flush.interval.ms",
                &get("log.flush.interval.ms"),
                0,
            )?,
            queued_max_requests: parse_num("queued.max.requests", &get("queued.max.requests"), 1)?,
            shard_io_memory_bytes: parse_num(
                "shard.io.memory.bytes",
                &get("shard.io.memory.bytes"),
                0,
            )?,
            shard_spin_before_park_us: parse_num(
                "shard.spin.before.park.us",
                &get("shard.spin.before.park.us"),
                0,
            )?,
            shutdown_drain_timeout_ms: parse_num(
                "shutdown.drain.timeout.ms",
                &get("shutdown.drain.timeout.ms"),
                0,
            )?,
            offsets_topic_num_partitions: parse_num(
                "offsets.topic.num.partitions",
                &get("offsets.topic.num.partitions"),
                1,
            )?,
            offsets_topic_segment_bytes: parse_num(
                "offsets.topic.segment.bytes",
                &get("offsets.topic.segment.bytes"),
                1024,
            )?,
            offsets_retention_minutes: parse_num(
                "offsets.retention.minutes",
                &get("offsets.retention.minutes"),
                1,
            )?,
            offsets_retention_check_interval_ms: parse_num(
                "offsets.retention.check.interval.ms",
                &get("offsets.retention.check.interval.ms"),
                1,
            )?,
            offset_metadata_max_bytes: parse_num(
                "offset.metadata.max.bytes",
                &get("offset.metadata.max.bytes"),
                0,
            )?,
            group_min_session_timeout_ms: parse_num(
                "group.min.session.timeout.ms",
                &get("group.min.session.timeout.ms"),
                0,
            )?,
            group_max_session_timeout_ms: parse_num(
                "group.max.session.timeout.ms",
                &get("group.max.session.timeout.ms"),
                0,
            )?,
            group_initial_rebalance_delay_ms: parse_num(
                "group.initial.rebalance.delay.ms",
                &get("group.initial.rebalance.delay.ms"),
                0,
            )?,
            group_max_size: parse_num("group.max.size", &get("group.max.size"), 1)?,
            fetch_max_bytes: parse_num("fetch.max.bytes", &get("fetch.max.bytes"), 1024)?,
            max_incremental_fetch_session_cache_slots: parse_num(
                "max.incremental.fetch.session.cache.slots",
                &get("max.incremental.fetch.session.cache.slots"),
                0,
            )?,
            values,
        };
        let rf: i32 = parse_num(
            "default.replication.factor",
            &get("default.replication.factor"),
            1,
        )?;
        if rf != 1 {
            bail!("config default.replication.factor: {rf} needs {rf} brokers; this is a single broker, use 1");
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(props: &[(&str, &str)]) -> ConfigInput {
        ConfigInput {
            data_dir: "./data".into(),
            listen: "127.0.0.1:9092".into(),
            advertised_listener: None,
            cores: None,
            cpus: None,
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let c = BrokerConfig::build(input(&[("num.partitions", "8")])).unwrap();
        assert_eq!(c.num_partitions, 8);
        assert_eq!(c.message_max_bytes, 1_048_588);
        assert!(c.auto_create_topics);
        assert_eq!(c.advertised_port, 9092);
    }

    #[test]
    fn retention_and_roll_take_the_finest_unit_set() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.log_retention_ms, 168 * 3_600_000);
        assert_eq!(c.log_roll_ms, 168 * 3_600_000);
        assert_eq!(c.log_flush_interval_messages, 1);
        let c = BrokerConfig::build(input(&[
            ("log.retention.hours", "1"),
            ("log.retention.minutes", "5"),
            ("log.roll.hours", "2"),
        ]))
        .unwrap();
        assert_eq!(c.log_retention_ms, 300_000);
        assert_eq!(c.log_roll_ms, 7_200_000);
        let c = BrokerConfig::build(input(&[
            ("log.retention.minutes", "5"),
            ("log.retention.ms", "-1"),
            ("log.roll.ms", "1000"),
        ]))
        .unwrap();
        assert_eq!(c.log_retention_ms, -1);
        assert_eq!(c.log_roll_ms, 1000);
        let e = BrokerConfig::build(input(&[("log.flush.interval.messages", "0")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.flush.interval.messages"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = BrokerConfig::build(input(&[("num.partitons", "8")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("num.partitons"), "{e}");
        let e = BrokerConfig::build(input(&[("auto.create.topics.enable", "yes")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto.create.topics.enable"), "{e}");
        let e = BrokerConfig::build(input(&[("message.max.bytes", "-5")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("message.max.bytes"), "{e}");
    }

    #[test]
    fn properties_and_cpu_lists() {
        let p = parse_properties("# c\nnum.partitions = 3\n\nnode.id:2\n").unwrap();
        assert_eq!(
            p,
            vec![
                ("num.partitions".into(), "3".into()),
                ("node.id".into(), "2".into())
            ]
        );
        assert!(parse_properties("garbage").is_err());
        assert_eq!(parse_cpu_list("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert!(parse_cpu_list("4-2").is_err());
    }

    #[test]
    fn fetch_limits_default_as_kafka_and_are_bounded() {
        let c = BrokerConfig::build(input(&[])).unwrap();
        assert_eq!(c.fetch_max_bytes, 57_671_680);
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 1000);
        // Kafka's lower bound for fetch.max.bytes is 1024.
        let e = BrokerConfig::build(input(&[("fetch.max.bytes", "1000")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fetch.max.bytes"), "{e}");
        let c = BrokerConfig::build(input(&[("max.incremental.fetch.session.cache.slots", "0")]))
            .unwrap();
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 0);
    }
}
