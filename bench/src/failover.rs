//! `tributary-bench failover`: how long acks=all produce stalls when a partition's leader is
//! killed, and whether any acknowledged message is lost or doubled.
//!
//! It starts a three-node cluster (`cluster.rs`), creates a 1-partition topic with RF=3 and
//! min.insync.replicas=2, and runs an idempotent acks=all producer at a fixed rate whose every
//! message carries a sequence number, stamping the time of each ack. Then `--kills` times: find
//! the partition leader, `kill -9` it, restart it `--restart-after` seconds later, wait until it
//! listens again, the ISR is full and acks flow, plus a settling pause. The gap of a kill is the
//! longest interval between two consecutive acks around it. At the end it stops producing,
//! flushes, reads the partition back and checks every acknowledged sequence number is there
//! exactly once.
//!
//! The arithmetic (gaps per kill, percentiles, the exactly-once tally) is plain functions over
//! recorded times and numbers, unit-tested without a cluster; the rest only drives processes
//! and clients. Every wait is bounded by a named timeout.

use std::collections::{HashMap, HashSet};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde_json::json;

use crate::cluster::{Cluster, NODES};

/// How long a fresh cluster may take to elect a controller, register its brokers and accept
/// the topic.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for the partition to have a leader before a kill.
const LEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// One Metadata request; a dead node makes librdkafka try another.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two polls of the cluster's state.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Pause after a kill's recovery before the next kill, so each kill starts from a steady
/// state.
const SETTLE_AFTER_ISR: Duration = Duration::from_secs(2);
/// Before a kill, the last ack must be at most this old: each kill starts with acks flowing,
/// not inside the tail of the previous stall.
const ACK_FRESH: Duration = Duration::from_millis(500);
/// librdkafka's `message.timeout.ms`: far longer than any failover, so a message is retried
/// until it is acknowledged instead of failing.
const MESSAGE_TIMEOUT_MS: u64 = 300_000;
/// Messages the producer may hold unacknowledged (a 30 s stall at 2,000 msg/s is 60,000).
const PRODUCER_QUEUE_MESSAGES_MAX: usize = 1_000_000;
/// Flushing after the last kill.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);
/// Reading the partition back.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(300);
/// Acks recorded (16 bytes each); past this the run fails rather than grow without bound.
/// At 2,000 msg/s it is more than an hour.
const ACK_RECORDS_MAX: usize = 10_000_000;
/// Bytes of each payload that carry the sequence number (big-endian `u64`).
const SEQ_BYTES: usize = 8;

#[derive(Args, Clone)]
pub struct FailoverArgs {
    /// The broker binary to start three of.
    #[arg(long, default_value = "target/release/tributary")]
    pub broker: PathBuf,
    /// Directory for the nodes' data and logs: created (it must not exist) and removed at the
    /// end; kept on failure.
    #[arg(long, default_value = "./failover-cluster")]
    pub dir: PathBuf,
    /// Leader kills.
    #[arg(long, default_value_t = 20)]
    pub kills: usize,
    /// Messages per second.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Seconds between killing the leader and restarting it.
    #[arg(long, default_value_t = 8.0)]
    pub restart_after: f64,
    /// Seconds the restarted node may take to listen again, with a full ISR and acks flowing,
    /// before the run fails.
    #[arg(long, default_value_t = 120.0)]
    pub isr_timeout: f64,
    /// Seconds after a kill in which a stall must begin to count as that kill's.
    #[arg(long, default_value_t = 30.0)]
    pub window: f64,
    #[arg(long, default_value = "failover")]
    pub topic: String,
    /// Extra broker setting for every node (repeatable), e.g.
    /// `--set broker.session.timeout.ms=3000`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Keep the directory (data and node logs) after a successful run.
    #[arg(long)]
    pub keep_dir: bool,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

/// One kill as it happened, with times measured from the start of producing.
struct Kill {
    leader: i32,
    at: Duration,
    /// From the restart until the node listened again, the ISR was full and an ack had come
    /// after that.
    recovered: Duration,
}

/// Sequence numbers acknowledged, with when.
struct Acks {
    start: Instant,
    acked: Mutex<Vec<(u64, Duration)>>,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    overflow: AtomicBool,
}

struct SeqContext {
    acks: Arc<Acks>,
}

impl ClientContext for SeqContext {}

impl ProducerContext for SeqContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(_) => {
                let at = self.acks.start.elapsed();
                if let Ok(mut acked) = self.acks.acked.lock() {
                    if acked.len() < ACK_RECORDS_MAX {
                        acked.push((seq as u64, at));
                    } else {
                        self.acks.overflow.store(true, Ordering::Relaxed);
                    }
                }
            }
            Err((e, _)) => {
                self.acks.errors.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.acks.first_error.lock() {
                    first.get_or_insert_with(|| format!("message {seq}: {e}"));
                }
            }
        }
    }
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("log_level", "3");
    c
}

pub fn run(args: &FailoverArgs) -> Result<()> {
    if args.kills == 0 || args.rate <= 0.0 || args.message_size < SEQ_BYTES {
        bail!("--kills and --rate must be positive and --message-size at least {SEQ_BYTES}");
    }
    let mut cluster = Cluster::start(&args.broker, &args.dir, &args.set)?;
    let result = run_on(&mut cluster, args);
    if result.is_err() || args.keep_dir {
        cluster.keep_dir();
    }
    result
}

fn run_on(cluster: &mut Cluster, args: &FailoverArgs) -> Result<()> {
    let bootstrap = cluster.bootstrap();
    eprintln!("failover: cluster at {bootstrap}");
    let probe: BaseConsumer = client(&bootstrap)
        .create()
        .context("creating a metadata client")?;
    wait_for(
        cluster,
        CLUSTER_READY_TIMEOUT,
        "all nodes registered",
        || {
            let md = probe.fetch_metadata(None, METADATA_TIMEOUT)?;
            Ok((md.brokers().len() == NODES).then_some(()))
        },
    )?;
    create_topic(cluster, &bootstrap, &args.topic)?;
    wait_for(
        cluster,
        CLUSTER_READY_TIMEOUT,
        "a leader and a full ISR",
        || Ok(partition_state(&probe, &args.topic)?.filter(|s| s.full())),
    )?;

    let acks = Arc::new(Acks {
        start: Instant::now(),
        acked: Mutex::new(Vec::new()),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
        overflow: AtomicBool::new(false),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer = spawn_producer(args, &bootstrap, &acks, &stop, &sent)?;
    // Let the producer reach a steady state before the first kill.
    sleep_checked(cluster, &producer, SETTLE_AFTER_ISR)?;
    let kills = kill_loop(cluster, args, &probe, &acks, &producer);
    stop.store(true, Ordering::Relaxed);
    let joined = producer
        .join()
        .map_err(|_| anyhow::anyhow!("the producer thread panicked"));
    let kills = kills?;
    joined??;
    let end = acks.start.elapsed();
    if acks.overflow.load(Ordering::Relaxed) {
        bail!("more than {ACK_RECORDS_MAX} acks; lower --rate or --kills");
    }
    let acked = acks
        .acked
        .lock()
        .map_err(|_| anyhow::anyhow!("ack list poisoned"))?
        .clone();
    let read = read_back(&bootstrap, &args.topic)?;
    report(args, &kills, &acked, &read, &acks, &sent, end)
}

/// Calls `f` every `POLL_INTERVAL` until it gives a value, failing after `timeout` with the last
/// error it returned; also fails as soon as a node exits on its own.
fn wait_for<T>(
    cluster: &mut Cluster,
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("not yet");
    loop {
        cluster.check_alive()?;
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "waited {:.0}s for {what}; last: {last}",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn create_topic(cluster: &mut Cluster, bootstrap: &str, topic: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client(bootstrap)
        .create()
        .context("creating the admin client")?;
    let options = AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT));
    wait_for(cluster, CLUSTER_READY_TIMEOUT, "CreateTopics", || {
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(NODES as i32))
            .set("min.insync.replicas", "2");
        let results = futures::executor::block_on(admin.create_topics([&new], &options))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => bail!("creating topic {t}: {e}"),
            }
        }
        Ok(Some(()))
    })?;
    eprintln!("failover: created {topic} (1 partition, RF={NODES}, min.insync.replicas=2)");
    Ok(())
}

struct PartitionState {
    leader: i32,
    isr: Vec<i32>,
}

impl PartitionState {
    fn full(&self) -> bool {
        self.leader >= 0 && self.isr.len() == NODES
    }
}

/// Partition 0's leader and ISR as a fresh Metadata request reports them.
fn partition_state(probe: &BaseConsumer, topic: &str) -> Result<Option<PartitionState>> {
    let md = probe.fetch_metadata(Some(topic), METADATA_TIMEOUT)?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .and_then(|t| t.partitions().iter().find(|p| p.id() == 0))
        .filter(|p| p.error().is_none())
        .map(|p| PartitionState {
            leader: p.leader(),
            isr: p.isr().to_vec(),
        }))
}

fn spawn_producer(
    args: &FailoverArgs,
    bootstrap: &str,
    acks: &Arc<Acks>,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
) -> Result<JoinHandle<Result<()>>> {
    let producer: ThreadedProducer<SeqContext> = client(bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", args.linger_ms.to_string())
        .set("message.timeout.ms", MESSAGE_TIMEOUT_MS.to_string())
        .set(
            "queue.buffering.max.messages",
            PRODUCER_QUEUE_MESSAGES_MAX.to_string(),
        )
        .create_with_context(SeqContext { acks: acks.clone() })
        .context("creating the producer")?;
    let (topic, size, rate) = (args.topic.clone(), args.message_size, args.rate);
    let (stop, sent) = (stop.clone(), sent.clone());
    Ok(std::thread::spawn(move || -> Result<()> {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut payload = vec![0u8; size];
        let mut next = Instant::now();
        let mut seq = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += interval;
            payload[..SEQ_BYTES].copy_from_slice(&(seq as u64).to_be_bytes());
            loop {
                let rec = BaseRecord::with_opaque_to(&topic, seq)
                    .partition(0)
                    .payload(payload.as_slice())
                    .key(&[] as &[u8]);
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => bail!("send of message {seq} failed: {e}"),
                }
            }
            seq += 1;
            sent.store(seq as u64, Ordering::Relaxed);
        }
        producer
            .flush(FLUSH_TIMEOUT)
            .context("flushing the producer after the last kill")?;
        Ok(())
    }))
}

/// Sleeps `d`, failing early if a node died on its own or the producer stopped.
fn sleep_checked(
    cluster: &mut Cluster,
    producer: &JoinHandle<Result<()>>,
    d: Duration,
) -> Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        cluster.check_alive()?;
        if producer.is_finished() {
            bail!("the producer stopped early");
        }
        std::thread::sleep(POLL_INTERVAL.min(until.saturating_duration_since(Instant::now())));
    }
    Ok(())
}

fn kill_loop(
    cluster: &mut Cluster,
    args: &FailoverArgs,
    probe: &BaseConsumer,
    acks: &Acks,
    producer: &JoinHandle<Result<()>>,
) -> Result<Vec<Kill>> {
    let mut kills = Vec::with_capacity(args.kills);
    for i in 1..=args.kills {
        let leader = wait_for(cluster, LEADER_TIMEOUT, "a leader and fresh acks", || {
            let now = acks.start.elapsed();
            if last_ack(acks)?.is_none_or(|t| now.saturating_sub(t) > ACK_FRESH) {
                return Ok(None);
            }
            Ok(partition_state(probe, &args.topic)?
                .filter(|s| s.leader >= 0)
                .map(|s| s.leader))
        })?;
        let at = acks.start.elapsed();
        cluster.kill(leader)?;
        eprintln!("kill {i}/{}: node {leader} (leader) killed", args.kills);
        sleep_checked(
            cluster,
            producer,
            Duration::from_secs_f64(args.restart_after),
        )?;
        cluster.restart(leader)?;
        let restarted = Instant::now();
        let timeout = Duration::from_secs_f64(args.isr_timeout);
        let log = cluster.log_path(leader);
        let addr = cluster.client_addr(leader)?;
        // A node that comes back before the controller fenced it was never out of the ISR, so
        // a full ISR alone proves nothing: the node must also be listening again (it listens
        // only once registered) and the producer must have had an ack since.
        let mut listening_at = None;
        wait_for(
            cluster,
            timeout,
            "the node to listen, a full ISR and a fresh ack",
            || {
                if listening_at.is_none() {
                    if TcpStream::connect_timeout(&addr, POLL_INTERVAL).is_err() {
                        return Ok(None);
                    }
                    listening_at = Some(acks.start.elapsed());
                }
                let full = partition_state(probe, &args.topic)?.is_some_and(|s| s.full());
                let last_ack = last_ack(acks)?;
                Ok((full && last_ack > listening_at).then_some(()))
            },
        )
        .with_context(|| format!("after restarting node {leader} (log {})", log.display()))?;
        let recovered = restarted.elapsed();
        sleep_checked(cluster, producer, SETTLE_AFTER_ISR)?;
        let times = ack_times(&acks.acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
        let gap = kill_gaps(&times, &[at], Duration::from_secs_f64(args.window))[0];
        eprintln!(
            "kill {i}/{}: node {leader}: ack gap {} ms, recovered {:.1}s after its restart",
            args.kills,
            gap.map_or("none".into(), |g| g.as_millis().to_string()),
            recovered.as_secs_f64()
        );
        kills.push(Kill {
            leader,
            at,
            recovered,
        });
    }
    Ok(kills)
}

/// Reads partition 0 from the beginning to its high watermark; returns the sequence numbers.
fn read_back(bootstrap: &str, topic: &str) -> Result<Vec<u64>> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", "tributary-bench-failover")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the read-back consumer")?;
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, READ_BACK_TIMEOUT)
        .context("offsets of the failover partition")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    consumer.assign(&tpl).context("assigning the partition")?;
    let deadline = Instant::now() + READ_BACK_TIMEOUT;
    let mut seqs = Vec::new();
    let mut next = low;
    eprintln!("failover: reading back offsets {low}..{high}");
    while next < high {
        if Instant::now() >= deadline {
            bail!("read back only to offset {next} of {high} in {READ_BACK_TIMEOUT:?}");
        }
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.context("reading back")?;
        let payload = m.payload().unwrap_or_default();
        let Some(head) = payload.get(..SEQ_BYTES) else {
            bail!(
                "offset {}: a {}-byte payload carries no sequence number",
                m.offset(),
                payload.len()
            );
        };
        let mut b = [0u8; SEQ_BYTES];
        b.copy_from_slice(head);
        seqs.push(u64::from_be_bytes(b));
        next = m.offset() + 1;
    }
    Ok(seqs)
}

fn report(
    args: &FailoverArgs,
    kills: &[Kill],
    acked: &[(u64, Duration)],
    read: &[u64],
    acks: &Acks,
    sent: &AtomicU64,
    end: Duration,
) -> Result<()> {
    let times = ack_times(acked);
    let at: Vec<Duration> = kills.iter().map(|k| k.at).collect();
    let gaps = kill_gaps(&times, &at, Duration::from_secs_f64(args.window))
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.with_context(|| format!("kill {}: no ack after it", i + 1)))
        .collect::<Result<Vec<Duration>>>()?;
    let mut sorted = gaps.clone();
    sorted.sort();
    let q = |p: f64| percentile(&sorted, p).as_millis() as u64;
    let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
    let t = tally(&seqs, read);
    let errors = acks.errors.load(Ordering::Relaxed);
    let ms: Vec<u64> = gaps.iter().map(|g| g.as_millis() as u64).collect();
    for (i, (k, g)) in kills.iter().zip(&ms).enumerate() {
        println!(
            "kill {:>2}: node {} at {:>7.1}s  ack gap {:>6} ms  recovered {:>5.1}s after restart",
            i + 1,
            k.leader,
            k.at.as_secs_f64(),
            g,
            k.recovered.as_secs_f64()
        );
    }
    println!(
        "failover {} kills: ack gap p50 {} ms, p99 {} ms, max {} ms; {} sent, {} acked, {} read back, \
         {} lost, {} duplicates, {} present but not acked, {} delivery errors",
        kills.len(), q(0.5), q(0.99), q(1.0), sent.load(Ordering::Relaxed), t.acked, t.read,
        t.lost, t.duplicates, t.unacked_present, errors
    );
    if let Some(e) = acks.first_error.lock().ok().and_then(|e| e.clone()) {
        println!("first delivery error: {e}");
    }
    if args.json {
        let s = json!({
            "mode": "failover",
            "kills": kills.len(),
            "leaders": kills.iter().map(|k| k.leader).collect::<Vec<_>>(),
            "gaps_ms": ms,
            "gap_ms": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0)},
            "recovered_after_restart_s": kills.iter().map(|k| k.recovered.as_secs_f64()).collect::<Vec<_>>(),
            "seconds": end.as_secs_f64(),
            "sent": sent.load(Ordering::Relaxed),
            "acked": t.acked, "read": t.read, "lost": t.lost, "duplicates": t.duplicates,
            "unacked_present": t.unacked_present, "delivery_errors": errors,
            "config": {
                "rate": args.rate, "message_size": args.message_size, "linger_ms": args.linger_ms,
                "restart_after_s": args.restart_after, "window_s": args.window, "set": args.set,
            },
            "git_sha": env!("TRIBUTARY_GIT_SHA"),
        });
        println!("{s}");
    }
    if t.lost > 0 || t.duplicates > 0 {
        bail!(
            "{} acknowledged messages lost, {} duplicated",
            t.lost,
            t.duplicates
        );
    }
    Ok(())
}

fn last_ack(acks: &Acks) -> Result<Option<Duration>> {
    let acked = acks
        .acked
        .lock()
        .map_err(|_| anyhow::anyhow!("ack list poisoned"))?;
    Ok(acked.last().map(|(_, at)| *at))
}

fn ack_times(acked: &[(u64, Duration)]) -> Vec<Duration> {
    let mut t: Vec<Duration> = acked.iter().map(|(_, at)| *at).collect();
    t.sort();
    t
}

/// Each kill's gap: the longest interval between two consecutive acks (`acks` sorted) that
/// ends after the kill and no later than the next kill, and begins less than `after` past it.
/// The interval that spans the kill (last ack before it to first ack after) always counts; so
/// does a second stall soon after recovery. An interval that spans a later kill belongs to that
/// later kill, so no interval is counted twice. `kills` must be in order; `None` for a kill
/// with no ack after it before the next one.
pub fn kill_gaps(acks: &[Duration], kills: &[Duration], after: Duration) -> Vec<Option<Duration>> {
    kills
        .iter()
        .enumerate()
        .map(|(i, kill)| {
            let next = kills.get(i + 1);
            // The first ack after the kill ends the first interval that may count.
            let first_after = acks.partition_point(|t| t <= kill).max(1);
            acks.get(first_after - 1..)
                .unwrap_or_default()
                .windows(2)
                .take_while(|w| next.is_none_or(|n| w[1] <= *n) && w[0] < *kill + after)
                .filter(|w| w[1] > *kill)
                .map(|w| w[1] - w[0])
                .max()
        })
        .collect()
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1): the smallest value with at least a
/// fraction `q` of the values at or below it. Of 20 values p50 is the 10th and p99 the 20th.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Debug, PartialEq, Eq)]
pub struct Tally {
    /// Distinct sequence numbers acknowledged.
    pub acked: u64,
    /// Records read back.
    pub read: u64,
    /// Acknowledged sequence numbers not read back.
    pub lost: u64,
    /// Records read back beyond the first copy of their sequence number.
    pub duplicates: u64,
    /// Distinct sequence numbers read back that were never acknowledged (a send that failed on
    /// the client side after the broker wrote it).
    pub unacked_present: u64,
}

/// Checks every acknowledged sequence number was read back exactly once.
pub fn tally(acked: &[u64], read: &[u64]) -> Tally {
    let mut counts: HashMap<u64, u64> = HashMap::with_capacity(read.len());
    for s in read {
        *counts.entry(*s).or_default() += 1;
    }
    let acked_set: HashSet<u64> = acked.iter().copied().collect();
    Tally {
        acked: acked_set.len() as u64,
        read: read.len() as u64,
        lost: acked_set.iter().filter(|s| !counts.contains_key(s)).count() as u64,
        duplicates: counts.values().map(|c| c - 1).sum(),
        unacked_present: counts.keys().filter(|s| !acked_set.contains(s)).count() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Acks every 5 ms from 0 to `until_ms`, except in the holes given.
    fn steady(until_ms: u64, holes: &[(u64, u64)]) -> Vec<Duration> {
        (0..until_ms)
            .step_by(5)
            .filter(|t| !holes.iter().any(|(a, b)| t > a && t < b))
            .map(ms)
            .collect()
    }

    #[test]
    fn the_gap_is_the_interval_that_spans_the_kill() {
        let acks = steady(20_000, &[(5_000, 8_500)]);
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(30_000)),
            vec![Some(ms(3_500))]
        );
        // A kill that stalls nothing shows the ack spacing.
        assert_eq!(
            kill_gaps(&acks, &[ms(12_001)], ms(30_000)),
            vec![Some(ms(5))]
        );
    }

    #[test]
    fn a_second_stall_after_recovery_counts_if_it_begins_within_the_window() {
        // Kill at 5 s, acks back at 8.5 s, a second stall from 9 s to 14 s.
        let acks = steady(30_000, &[(5_000, 8_500), (9_000, 14_000)]);
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(30_000)),
            vec![Some(ms(5_000))]
        );
        // With a 3 s window the second stall begins too late to count.
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(3_000)),
            vec![Some(ms(3_500))]
        );
    }

    #[test]
    fn a_stall_that_spans_the_next_kill_belongs_to_the_next_kill() {
        // Kill 1 at 10 s (acks back at 13 s, one more ack at 13.005 s); kill 2 at 15 s finds
        // acks stalled since 13.005 s and they come back at 24 s.
        let mut acks = steady(40_000, &[(10_000, 13_000), (13_005, 24_000)]);
        acks.sort();
        let gaps = kill_gaps(&acks, &[ms(10_001), ms(15_000)], ms(30_000));
        assert_eq!(gaps, vec![Some(ms(3_000)), Some(ms(10_995))]);
    }

    #[test]
    fn no_ack_after_the_kill_gives_none() {
        let acks = steady(1_000, &[]);
        assert_eq!(kill_gaps(&acks, &[ms(2_000)], ms(30_000)), vec![None]);
        assert_eq!(kill_gaps(&[], &[ms(0)], ms(30_000)), vec![None]);
        // The only ack after kill 1 comes after kill 2.
        assert_eq!(
            kill_gaps(&[ms(0), ms(50)], &[ms(10), ms(20)], ms(30_000)),
            vec![None, Some(ms(50))]
        );
    }

    #[test]
    fn nearest_rank_percentiles_of_twenty_kills() {
        let sorted: Vec<Duration> = (1..=20).map(|s| ms(s * 100)).collect();
        assert_eq!(percentile(&sorted, 0.5), ms(1_000));
        assert_eq!(percentile(&sorted, 0.99), ms(2_000));
        assert_eq!(percentile(&sorted, 1.0), ms(2_000));
        assert_eq!(percentile(&sorted, 0.0), ms(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert_eq!(percentile(&[ms(7)], 0.99), ms(7));
    }

    #[test]
    fn exactly_once_read_back_is_clean() {
        let acked: Vec<u64> = (0..1_000).collect();
        let t = tally(&acked, &acked);
        assert_eq!(
            t,
            Tally {
                acked: 1_000,
                read: 1_000,
                lost: 0,
                duplicates: 0,
                unacked_present: 0
            }
        );
    }

    #[test]
    fn lost_duplicated_and_unacked_records_are_counted() {
        let acked: Vec<u64> = (0..100).collect();
        // 10, 11 and 12 missing; 50 three times and 60 twice; 100 written but never acked.
        let mut read: Vec<u64> = (0..100).filter(|s| !(10..13).contains(s)).collect();
        read.extend([50, 50, 60, 100]);
        let t = tally(&acked, &read);
        assert_eq!(t.acked, 100);
        assert_eq!(t.read, 101);
        assert_eq!(t.lost, 3);
        assert_eq!(t.duplicates, 3);
        assert_eq!(t.unacked_present, 1);
    }
}
