//! The load modes: `produce` (ack latency; with `--transactional-id`, in transactions whose
//! `commit_transaction` latency is measured too), `consume` (read throughput) and `e2e` (producers
//! and consumers together; latency from a timestamp embedded in each payload). Each can measure
//! the broker's CPU over the run (`--broker-pid`) and always measures its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde_json::json;

use crate::cpu;
use crate::report::{self, Run};

/// Highest latency recorded; slower samples count as this.
const LATENCY_MAX_US: u64 = 60_000_000;

/// Records per transaction unless `--transaction-records` says otherwise.
const TRANSACTION_RECORDS_DEFAULT: u64 = 1000;

/// Longest wait for `init_transactions` (finding the coordinator, InitProducerId, fencing an
/// earlier instance of the same transactional id) and for each `commit_transaction`.
const TRANSACTION_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for the messages still queued in the client when a producer finishes.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a transactional producer checks whether its transaction's records are all
/// acknowledged before it calls `commit_transaction`.
const DRAIN_POLL_INTERVAL: Duration = Duration::from_micros(200);

#[derive(Args, Clone)]
pub struct LoadArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// A librdkafka client setting for every client of the run (repeatable), e.g.
    /// `-X security.protocol=SSL -X ssl.ca.location=ca.pem` to measure a TLS listener.
    #[arg(short = 'X', long = "client-config", value_name = "KEY=VALUE")]
    pub client_config: Vec<String>,
    /// Kafka's client security properties for a secured listener (security.protocol,
    /// sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...), as trib and
    /// kafka-topics.sh --command-config take them; `-X` settings override them.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Create the topic with this many partitions (an existing topic is used as is).
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Replication factor of a topic the run creates.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// `min.insync.replicas` of a topic the run creates (the broker's default if not given).
    #[arg(long)]
    pub min_insync_replicas: Option<u32>,
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    /// Messages in total (default 1,000,000 unless --duration is given).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Run for this many seconds instead of a message count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Messages per second across all producers; 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// Idempotent producers (`enable.idempotence=true`); needs --acks all.
    #[arg(long)]
    pub idempotence: bool,
    /// Produce in transactions; producer thread N uses the transactional id PREFIX-N.
    /// Implies idempotence; needs --acks all. `produce` only.
    #[arg(long, value_name = "PREFIX")]
    pub transactional_id: Option<String>,
    /// Records each producer thread sends per transaction (with --transactional-id).
    #[arg(long, default_value_t = TRANSACTION_RECORDS_DEFAULT)]
    pub transaction_records: u64,
    #[arg(long, default_value = "none")]
    pub compression: String,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: usize,
    /// Number of distinct keys (0: unkeyed).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Write summary.json, latency.hgrm, latency.svg and throughput.svg here.
    #[arg(long)]
    pub report: Option<std::path::PathBuf>,
    /// Process id of a broker whose CPU (utime + stime, all its threads) over the run is
    /// reported, in total and per GB; repeatable for a cluster on this machine.
    #[arg(long = "broker-pid", value_name = "PID")]
    pub broker_pids: Vec<u32>,
    /// Fill payloads with pseudo-random bytes rather than zeros (set by `run`, whose workloads
    /// say random payloads; compression would shrink zeros to nothing).
    #[arg(skip)]
    pub random_payload: bool,
}

impl LoadArgs {
    /// Refuses flag combinations librdkafka would reject later, or that would measure something
    /// other than what was asked for. `mode` is the subcommand's name.
    pub fn validate(&self, mode: &str) -> Result<()> {
        if self.transaction_records == 0 {
            bail!("--transaction-records must be at least 1");
        }
        let acks_all = matches!(self.acks.as_str(), "all" | "-1");
        if self.transactional_id.is_some() {
            if mode != "produce" {
                bail!("--transactional-id applies to the produce mode only, not {mode}");
            }
            if !acks_all {
                bail!(
                    "--transactional-id needs --acks all (transactions are idempotent, and \
                     idempotence needs acks=all); got --acks {}",
                    self.acks
                );
            }
        }
        if self.idempotence && !acks_all {
            bail!("--idempotence needs --acks all; got --acks {}", self.acks);
        }
        if self.producers == 0 {
            bail!("--producers must be at least 1");
        }
        Ok(())
    }

    /// The transactional id of producer thread `p`, if the run is transactional.
    fn transactional_id_of(&self, p: usize) -> Option<String> {
        self.transactional_id
            .as_ref()
            .map(|prefix| format!("{prefix}-{p}"))
    }

    pub(crate) fn target(&self) -> Option<u64> {
        match (self.messages, self.duration) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(1_000_000),
        }
    }

    fn config(&self) -> serde_json::Value {
        json!({
            "topic": self.topic, "partitions": self.partitions, "replication_factor": self.replication_factor,
            "min_insync_replicas": self.min_insync_replicas, "message_size": self.message_size,
            "messages": self.messages, "duration": self.duration, "rate": self.rate,
            "producers": self.producers, "consumers": self.consumers, "acks": self.acks,
            "compression": self.compression, "linger_ms": self.linger_ms, "batch_size": self.batch_size, "keys": self.keys,
            "idempotence": self.idempotence || self.transactional_id.is_some(),
            "transactional_id": self.transactional_id,
            "transaction_records": self.transactional_id.as_ref().map(|_| self.transaction_records),
            "broker_pids": self.broker_pids,
        })
    }
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds")
}

/// Counters and the latency histograms shared by the workers and the progress reporter.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) done: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) stop: AtomicBool,
    latency_us: Mutex<Option<Histogram<u64>>>,
    /// Each transaction's commit, from its last send until `commit_transaction` returned (the
    /// flush of its records, then EndTxn); empty unless the run is transactional.
    commit_us: Mutex<Option<Histogram<u64>>>,
}

impl Shared {
    pub(crate) fn new() -> Arc<Self> {
        let s = Shared::default();
        *s.latency_us.lock().expect("fresh mutex") = Some(new_histogram());
        *s.commit_us.lock().expect("fresh mutex") = Some(new_histogram());
        Arc::new(s)
    }
    fn record_commit(&self, us: u64) {
        if let Ok(mut h) = self.commit_us.lock() {
            if let Some(h) = h.as_mut() {
                let _ = h.record(us.clamp(1, LATENCY_MAX_US));
            }
        }
    }
    /// The commit p99 so far, if any transaction has committed.
    fn commit_p99(&self) -> Option<u64> {
        self.commit_us.lock().ok().and_then(|h| {
            h.as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(0.99))
        })
    }
    fn commit_histogram(&self) -> Histogram<u64> {
        self.commit_us
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .unwrap_or_else(new_histogram)
    }
    pub(crate) fn record(&self, us: u64) {
        if let Ok(mut h) = self.latency_us.lock() {
            if let Some(h) = h.as_mut() {
                let _ = h.record(us.clamp(1, LATENCY_MAX_US));
            }
        }
        self.done.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn p99(&self) -> u64 {
        self.latency_us
            .lock()
            .ok()
            .and_then(|h| {
                h.as_ref()
                    .filter(|h| !h.is_empty())
                    .map(|h| h.value_at_quantile(0.99))
            })
            .unwrap_or(0)
    }
    pub(crate) fn histogram(&self) -> Histogram<u64> {
        self.latency_us
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .unwrap_or_else(new_histogram)
    }
    /// Empties the latency histogram (the end of a warm-up); the counters keep counting.
    pub(crate) fn reset_latency(&self) {
        if let Ok(mut h) = self.latency_us.lock() {
            *h = Some(new_histogram());
        }
    }
    /// Counts one consumed message of `payload`; with `e2e`, records its latency from the send
    /// timestamp in its first 8 bytes.
    pub(crate) fn consumed(&self, payload: &[u8], e2e: bool, bytes: &AtomicU64) {
        bytes.fetch_add(payload.len() as u64, Ordering::Relaxed);
        if e2e && payload.len() >= 8 {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&payload[..8]);
            self.record(now_ns().saturating_sub(u64::from_be_bytes(ts)) / 1000);
        } else {
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `len` pseudo-random bytes (xorshift64*), different for each `seed`: incompressible payloads
/// without a dependency on a random-number crate.
pub(crate) fn random_payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

struct AckCtx {
    shared: Arc<Shared>,
    record_latency: bool,
}

impl ClientContext for AckCtx {}

impl ProducerContext for AckCtx {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        if result.is_err() {
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
        } else if self.record_latency {
            self.shared.record(sent.elapsed().as_micros() as u64);
        }
    }
}

pub(crate) fn client(args: &LoadArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &args.bootstrap)
        .set("log_level", "3");
    for (k, v) in command_settings(&args.command_config) {
        c.set(k, v);
    }
    for kv in &args.client_config {
        // Checked when the arguments are read (`check_client_config`).
        if let Some((k, v)) = kv.split_once('=') {
            c.set(k.trim(), v.trim());
        }
    }
    c
}

/// Every `-X` is KEY=VALUE, and `--command-config` reads.
pub fn check_client_config(args: &LoadArgs) -> Result<()> {
    for kv in &args.client_config {
        if !kv.contains('=') {
            anyhow::bail!("-X {kv:?}: expected KEY=VALUE, e.g. -X security.protocol=SSL");
        }
    }
    if let Some(path) = &args.command_config {
        tributary_security::client_properties::load(path)
            .map_err(|e| anyhow::anyhow!("--command-config: {e}"))?;
    }
    Ok(())
}

/// The librdkafka settings of `--command-config` (checked readable by `check_client_config`
/// before any client is made; a file that stopped reading since is said on stderr).
pub(crate) fn command_settings(path: &Option<std::path::PathBuf>) -> Vec<(String, String)> {
    let Some(path) = path else {
        return Vec::new();
    };
    tributary_security::client_properties::load(path).unwrap_or_else(|e| {
        eprintln!("--command-config: {e}");
        Vec::new()
    })
}

pub fn create_topic(args: &LoadArgs) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        client(args).create().context("creating the admin client")?;
    let min_isr = args.min_insync_replicas.map(|n| n.to_string());
    let mut topic = NewTopic::new(
        &args.topic,
        args.partitions,
        TopicReplication::Fixed(args.replication_factor),
    );
    if let Some(n) = &min_isr {
        topic = topic.set("min.insync.replicas", n);
    }
    let results = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .context("CreateTopics failed; is the broker reachable at --bootstrap?")?;
    for r in results {
        match r {
            Ok(_) => eprintln!(
                "created topic {} with {} partitions, replication factor {}",
                args.topic, args.partitions, args.replication_factor
            ),
            Err((t, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                eprintln!("using existing topic {t}")
            }
            Err((t, e)) => bail!("creating topic {t}: {e}"),
        }
    }
    Ok(())
}

/// The configuration of producer thread `p`: idempotent and `acks=all` when the run asks for
/// idempotence or transactions, with its own transactional id when transactional.
fn producer_config(args: &LoadArgs, p: usize) -> ClientConfig {
    let mut c = client(args);
    c.set("acks", &args.acks)
        .set("compression.type", &args.compression)
        .set("linger.ms", args.linger_ms.to_string())
        .set("batch.size", args.batch_size.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("queue.buffering.max.messages", "1000000");
    if args.idempotence || args.transactional_id.is_some() {
        c.set("enable.idempotence", "true").set("acks", "all");
    }
    if let Some(id) = args.transactional_id_of(p) {
        c.set("transactional.id", id);
    }
    c
}

/// Runs `producers` producer threads; with `record_latency` each ack's latency is recorded.
pub(crate) fn spawn_producers(
    args: &LoadArgs,
    shared: &Arc<Shared>,
    record_latency: bool,
    sent_total: &Arc<AtomicU64>,
) -> Result<Vec<std::thread::JoinHandle<Result<()>>>> {
    let mut handles = Vec::new();
    for p in 0..args.producers {
        // A threaded producer serves delivery reports from its own polling thread as they
        // arrive; polling from the send loop instead delays each report (and so inflates the
        // measured ack latency) by however long the loop takes to come round.
        let producer: ThreadedProducer<AckCtx> = producer_config(args, p)
            .create_with_context(AckCtx {
                shared: shared.clone(),
                record_latency,
            })
            .context("creating a producer")?;
        let mut sender = Sender {
            args: args.clone(),
            p,
            producer,
            shared: shared.clone(),
            sent_total: sent_total.clone(),
            sent: 0,
            payload: if args.random_payload {
                random_payload(args.message_size.max(8), now_ns() ^ p as u64)
            } else {
                vec![0u8; args.message_size.max(8)]
            },
            next: Instant::now(),
        };
        handles.push(std::thread::spawn(move || -> Result<()> {
            if sender.args.transactional_id.is_some() {
                sender.run_transactions()?;
            } else {
                sender.send_until(None)?;
            }
            sender.producer.flush(FLUSH_TIMEOUT).context("flushing")?;
            Ok(())
        }));
    }
    Ok(handles)
}

/// One producer thread's send loop.
struct Sender {
    args: LoadArgs,
    /// This thread's index among the producers.
    p: usize,
    producer: ThreadedProducer<AckCtx>,
    shared: Arc<Shared>,
    sent_total: Arc<AtomicU64>,
    /// Messages this thread has handed to the client.
    sent: u64,
    payload: Vec<u8>,
    /// When the next message is due under --rate.
    next: Instant,
}

impl Sender {
    /// This thread's share of the run's message count.
    fn quota(&self) -> Option<u64> {
        let n = self.args.producers as u64;
        self.args
            .target()
            .map(|t| t / n + u64::from((self.p as u64) < t % n))
    }

    /// Whether the run has more for this thread to send.
    fn more(&self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed) && self.quota().is_none_or(|q| self.sent < q)
    }

    /// Sends until the run ends or, with `limit`, until `limit` more messages were sent.
    fn send_until(&mut self, limit: Option<u64>) -> Result<()> {
        let interval = if self.args.rate > 0.0 {
            Some(Duration::from_secs_f64(
                self.args.producers as f64 / self.args.rate,
            ))
        } else {
            None
        };
        let mut n = 0u64;
        while self.more() && limit.is_none_or(|l| n < l) {
            if let Some(iv) = interval {
                let now = Instant::now();
                if self.next > now {
                    std::thread::sleep(self.next - now);
                }
                self.next += iv;
            }
            self.send_one()?;
            n += 1;
        }
        Ok(())
    }

    fn send_one(&mut self) -> Result<()> {
        let args = &self.args;
        self.payload[..8].copy_from_slice(&now_ns().to_be_bytes());
        let key = if args.keys > 0 {
            Some(format!(
                "key-{}",
                (self.sent * args.producers as u64 + self.p as u64) % args.keys
            ))
        } else {
            None
        };
        loop {
            let mut rec: BaseRecord<'_, str, [u8], Box<Instant>> =
                BaseRecord::with_opaque_to(&args.topic, Box::new(Instant::now()))
                    .payload(self.payload.as_slice());
            if let Some(k) = &key {
                rec = rec.key(k.as_str());
            }
            match self.producer.send(rec) {
                Ok(()) => break,
                Err((e, _))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("send failed: {e}"),
            }
        }
        self.sent += 1;
        self.sent_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `init_transactions`, then begin / send --transaction-records messages / commit until the
    /// run ends; the last transaction holds whatever is left. Each commit's duration is recorded.
    fn run_transactions(&mut self) -> Result<()> {
        let id = self.args.transactional_id_of(self.p).unwrap_or_default();
        self.producer
            .init_transactions(TRANSACTION_CALL_TIMEOUT)
            .with_context(|| format!("init_transactions for transactional id {id}"))?;
        while self.more() {
            self.producer
                .begin_transaction()
                .with_context(|| format!("begin_transaction ({id})"))?;
            self.send_until(Some(self.args.transaction_records))?;
            // The commit is timed from the transaction's last send: flushing its records, then
            // EndTxn. rdkafka's `commit_transaction` flushes by polling in 100 ms slices when
            // anything is in flight, which would put a 100 ms floor under every commit; waiting
            // for the acknowledgements here first leaves it nothing to flush.
            let start = Instant::now();
            self.wait_delivered()
                .with_context(|| format!("flushing the transaction ({id})"))?;
            if let Err(e) = self.producer.commit_transaction(TRANSACTION_CALL_TIMEOUT) {
                // An abortable error leaves the transaction open; abort it so the broker does
                // not hold it until the transaction timeout. The run fails either way.
                let _ = self.producer.abort_transaction(TRANSACTION_CALL_TIMEOUT);
                bail!("commit_transaction ({id}) failed: {e}");
            }
            self.shared
                .record_commit(start.elapsed().as_micros() as u64);
        }
        Ok(())
    }

    /// Waits until every message handed to the client has its delivery report. Each zero-timeout
    /// `flush` also tells librdkafka to send what it holds for `linger.ms` now.
    fn wait_delivered(&self) -> Result<()> {
        let start = Instant::now();
        loop {
            match self.producer.flush(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(rdkafka::error::KafkaError::Flush(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                )) => {}
                Err(e) => bail!("{e}"),
            }
            if start.elapsed() > TRANSACTION_CALL_TIMEOUT {
                bail!(
                    "{} messages still unacknowledged after {TRANSACTION_CALL_TIMEOUT:?}",
                    self.producer.in_flight_count()
                );
            }
            std::thread::sleep(DRAIN_POLL_INTERVAL);
        }
    }
}

/// Assigns each consumer a share of the partitions, from `offset`.
fn spawn_consumers(
    args: &LoadArgs,
    shared: &Arc<Shared>,
    offset: Offset,
    e2e: bool,
    bytes: &Arc<AtomicU64>,
    ready: &Arc<AtomicU64>,
) -> Result<Vec<std::thread::JoinHandle<Result<()>>>> {
    let mut handles = Vec::new();
    for c in 0..args.consumers {
        let consumer: BaseConsumer = client(args)
            .set("group.id", "tributary-bench")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "100")
            .create()
            .context("creating a consumer")?;
        let mut tpl = TopicPartitionList::new();
        for p in (0..args.partitions).filter(|p| *p as usize % args.consumers == c) {
            tpl.add_partition_offset(&args.topic, p, offset)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        consumer.assign(&tpl).context("assigning partitions")?;
        let shared = shared.clone();
        let bytes = bytes.clone();
        let ready = ready.clone();
        handles.push(std::thread::spawn(move || -> Result<()> {
            let mut first = true;
            while !shared.stop.load(Ordering::Relaxed) {
                let polled = consumer.poll(Duration::from_millis(50));
                if first {
                    ready.fetch_add(1, Ordering::Relaxed);
                    first = false;
                }
                let Some(m) = polled else { continue };
                let m = m.context("consuming")?;
                shared.consumed(m.payload().unwrap_or_default(), e2e, &bytes);
            }
            Ok(())
        }));
    }
    Ok(handles)
}

/// Prints one progress line per second until `finished` says so; returns the per-second counts.
fn progress(
    shared: &Shared,
    message_size: usize,
    total: Option<u64>,
    finished: impl Fn() -> bool,
) -> Vec<u64> {
    let start = Instant::now();
    let mut per_second = Vec::new();
    let mut last = 0u64;
    let mut tick = start + Duration::from_secs(1);
    while !finished() {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() >= tick {
            let done = shared.done.load(Ordering::Relaxed);
            let rate = done - last;
            per_second.push(rate);
            eprintln!(
                "{:>6.1}s {:>10} msgs/s {:>8.1} MB/s  p99 {:>8} us  ({done}{}){}",
                (tick - start).as_secs_f64(),
                rate,
                rate as f64 * message_size as f64 / 1e6,
                shared.p99(),
                total.map(|t| format!("/{t}")).unwrap_or_default(),
                shared
                    .commit_p99()
                    .map(|us| format!("  commit p99 {us} us"))
                    .unwrap_or_default()
            );
            last = done;
            tick += Duration::from_secs(1);
        }
    }
    per_second
}

/// Summarises a run. `bytes` is the payload it moved: produced for `produce`, consumed for
/// `consume` and `e2e`; the CPU figures are per GB of it.
fn finish(
    args: &LoadArgs,
    mode: &str,
    shared: &Shared,
    seconds: f64,
    bytes: u64,
    per_second: &[u64],
    cpu: &cpu::Usage,
) -> Result<()> {
    let h = shared.histogram();
    let commits = shared.commit_histogram();
    let msgs = shared.done.load(Ordering::Relaxed);
    let s = report::summary(&Run {
        mode,
        msgs,
        bytes,
        seconds,
        latency_us: &h,
        commit_latency_us: args.transactional_id.as_ref().map(|_| &commits),
        per_second,
        config: args.config(),
        broker: &args.bootstrap,
        cpu: Some(cpu),
    });
    if let Some(dir) = &args.report {
        report::write_report(dir, &s, &h)?;
        eprintln!("report written to {}", dir.display());
    }
    report::print_summary(&s);
    if args.json {
        println!("{s}");
    }
    let errors = shared.errors.load(Ordering::Relaxed);
    if errors > 0 {
        bail!("{errors} messages were not acknowledged");
    }
    Ok(())
}

pub(crate) fn join_all(handles: Vec<std::thread::JoinHandle<Result<()>>>) -> Result<()> {
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a worker thread panicked"))??;
    }
    Ok(())
}

pub fn produce(args: &LoadArgs) -> Result<()> {
    args.validate("produce")?;
    create_topic(args)?;
    let shared = Shared::new();
    let sent = Arc::new(AtomicU64::new(0));
    let meter = cpu::Meter::start(&args.broker_pids)?;
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let handles = spawn_producers(args, &shared, true, &sent)?;
    let target = args.target();
    let per_second = progress(&shared, args.message_size, target, || {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            shared.stop.store(true, Ordering::Relaxed);
        }
        handles.iter().all(|h| h.is_finished())
    });
    join_all(handles)?;
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop();
    let msgs = shared.done.load(Ordering::Relaxed);
    finish(
        args,
        "produce",
        &shared,
        secs,
        msgs * args.message_size as u64,
        &per_second,
        &usage,
    )
}

pub fn consume(args: &LoadArgs) -> Result<()> {
    args.validate("consume")?;
    // Read what is in the topic now: up to --messages, or to the end offsets seen at the start.
    let probe: BaseConsumer = client(args).create()?;
    let mut available = 0u64;
    for p in 0..args.partitions {
        let (lo, hi) = probe
            .fetch_watermarks(&args.topic, p, Duration::from_secs(10))
            .with_context(|| {
                format!(
                    "offsets of {}/{p}; does the topic exist with --partitions {}?",
                    args.topic, args.partitions
                )
            })?;
        available += (hi - lo).max(0) as u64;
    }
    let target = args.messages.unwrap_or(available).min(available);
    if target == 0 {
        bail!(
            "topic {} is empty; produce to it first (tributary-bench produce)",
            args.topic
        );
    }
    let shared = Shared::new();
    let bytes = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let meter = cpu::Meter::start(&args.broker_pids)?;
    let start = Instant::now();
    let handles = spawn_consumers(args, &shared, Offset::Beginning, false, &bytes, &ready)?;
    let per_second = progress(&shared, args.message_size, Some(target), || {
        shared.done.load(Ordering::Relaxed) >= target
    });
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop();
    shared.stop.store(true, Ordering::Relaxed);
    join_all(handles)?;
    finish(
        args,
        "consume",
        &shared,
        secs,
        bytes.load(Ordering::Relaxed),
        &per_second,
        &usage,
    )
}

pub fn e2e(args: &LoadArgs) -> Result<()> {
    args.validate("e2e")?;
    create_topic(args)?;
    let shared = Shared::new();
    let bytes = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let consumers = spawn_consumers(args, &shared, Offset::End, true, &bytes, &ready)?;
    // Let every consumer resolve its start offset before anything is produced.
    let wait = Instant::now();
    while ready.load(Ordering::Relaxed) < args.consumers as u64
        && wait.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let producer_side = Shared::new();
    let sent = Arc::new(AtomicU64::new(0));
    let meter = cpu::Meter::start(&args.broker_pids)?;
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let producers = spawn_producers(args, &producer_side, false, &sent)?;
    let per_second = progress(&shared, args.message_size, args.target(), || {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            producer_side.stop.store(true, Ordering::Relaxed);
        }
        let produced_all = producers.iter().all(|h| h.is_finished());
        let drained = shared.done.load(Ordering::Relaxed) >= sent.load(Ordering::Relaxed);
        (produced_all && drained) || start.elapsed() > Duration::from_secs(3600)
    });
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop();
    shared.stop.store(true, Ordering::Relaxed);
    join_all(producers)?;
    join_all(consumers)?;
    shared.errors.fetch_add(
        producer_side.errors.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    finish(
        args,
        "e2e",
        &shared,
        secs,
        bytes.load(Ordering::Relaxed),
        &per_second,
        &usage,
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(flags: &[&str]) -> LoadArgs {
        let argv = std::iter::once("tributary-bench").chain(flags.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli.load,
            Err(e) => panic!("{flags:?} should parse: {e}"),
        }
    }

    #[test]
    fn a_command_config_secures_every_client_and_x_overrides_it() {
        let dir = std::env::temp_dir().join(format!("bench-cc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("client.properties");
        std::fs::write(
            &file,
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";\n\
             ssl.truststore.location=/ca.pem\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let args = parse(&[
            "--command-config",
            &path,
            "-X",
            "ssl.ca.location=/other.pem",
        ]);
        check_client_config(&args).unwrap();
        let c = client(&args);
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(c.get("sasl.username"), Some("u"));
        assert_eq!(c.get("ssl.ca.location"), Some("/other.pem"));
        std::fs::write(&file, "not a property\n").unwrap();
        let e = check_client_config(&args).unwrap_err().to_string();
        assert!(e.contains("line 1 is not key=value"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn refusal(args: &LoadArgs, mode: &str) -> String {
        match args.validate(mode) {
            Ok(()) => panic!("{mode} with these flags should be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn random_payloads_have_the_length_asked_and_differ_by_seed() {
        let a = random_payload(1021, 1);
        assert_eq!(a.len(), 1021);
        assert_ne!(a, random_payload(1021, 2));
        assert_eq!(a, random_payload(1021, 1));
        // Not a run of one byte: every byte value turns up in 64 KiB.
        let mut seen = [false; 256];
        for b in random_payload(1 << 16, 7) {
            seen[b as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn defaults_are_not_transactional_and_valid() {
        let a = parse(&[]);
        assert_eq!(a.transactional_id, None);
        assert_eq!(a.transaction_records, TRANSACTION_RECORDS_DEFAULT);
        assert!(a.validate("produce").is_ok());
        let c = producer_config(&a, 0);
        assert_eq!(c.get("transactional.id"), None);
        assert_eq!(c.get("enable.idempotence"), None);
    }

    #[test]
    fn transaction_records_must_be_at_least_one() {
        let a = parse(&["--transactional-id", "t", "--transaction-records", "0"]);
        assert!(refusal(&a, "produce").contains("--transaction-records must be at least 1"));
        let a = parse(&["--transactional-id", "t", "--transaction-records", "1"]);
        assert!(a.validate("produce").is_ok());
    }

    #[test]
    fn transactions_refuse_acks_other_than_all() {
        for acks in ["0", "1"] {
            let a = parse(&["--transactional-id", "t", "--acks", acks]);
            let e = refusal(&a, "produce");
            assert!(e.contains("needs --acks all"), "{e}");
            assert!(e.contains(&format!("got --acks {acks}")), "{e}");
        }
        for acks in ["--acks=all", "--acks=-1"] {
            let a = parse(&["--transactional-id", "t", acks]);
            assert!(a.validate("produce").is_ok(), "{acks}");
        }
        let a = parse(&["--idempotence", "--acks", "1"]);
        assert!(refusal(&a, "produce").contains("--idempotence needs --acks all"));
    }

    #[test]
    fn transactions_are_for_produce_only() {
        let a = parse(&["--transactional-id", "t"]);
        for mode in ["e2e", "consume"] {
            assert!(refusal(&a, mode).contains("produce mode only"));
        }
    }

    #[test]
    fn each_producer_gets_its_own_transactional_id_with_idempotence_and_acks_all() {
        let a = parse(&["--transactional-id", "bench", "--producers", "3"]);
        for p in 0..3 {
            let c = producer_config(&a, p);
            let want = format!("bench-{p}");
            assert_eq!(c.get("transactional.id"), Some(want.as_str()));
            assert_eq!(c.get("enable.idempotence"), Some("true"));
            assert_eq!(c.get("acks"), Some("all"));
        }
        let c = producer_config(&parse(&["--idempotence"]), 0);
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        assert_eq!(c.get("transactional.id"), None);
    }

    #[test]
    fn config_names_the_transaction_size_only_when_transactional() {
        let a = parse(&["--transactional-id", "bench", "--transaction-records", "50"]);
        let c = a.config();
        assert_eq!(c["transactional_id"], "bench");
        assert_eq!(c["transaction_records"], 50);
        assert_eq!(c["idempotence"], true);
        let c = parse(&[]).config();
        assert!(c["transaction_records"].is_null());
        assert_eq!(c["idempotence"], false);
    }
}
