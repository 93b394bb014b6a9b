//! `tributary-bench failover`: how long acks=all produce stalls when a node of a three-node
//! cluster fails, and whether any acknowledged message is lost or doubled.
//!
//! It starts a three-node cluster (`cluster.rs`), creates a topic with RF=3 and
//! min.insync.replicas=2, and runs an idempotent acks=all producer at a fixed rate whose every
//! message carries a sequence number (message `seq` goes to partition `seq % partitions`),
//! stamping the time of each ack. Then one of two runs:
//!
//! - `--fault ROLE-ACTION` (default `leader-kill`), `--kills` times: find the victim — partition
//!   0's leader, a follower of it, or the active controller (asked with DescribeCluster,
//!   `controller.rs`; measured on a partition it does not lead when there is one, so the gap is
//!   the controller's failover alone) — and kill -9 it and restart it after `--restart-after`,
//!   SIGSTOP it and SIGCONT it after `--stop-for`, or SIGTERM it (controlled shutdown) and
//!   restart it once it has exited and `--restart-after` has passed. Then wait until it listens
//!   again, every ISR is full and acks flow on the measured partition, plus a settling pause.
//!   The gap of a fault is the longest interval between two consecutive acks around it
//!   (`gaps::kill_gaps`); the summary gives p50/p99/max.
//! - `--fault mixed`: a seeded schedule of every kind, and the share of writable seconds
//!   (`mixed.rs`).
//!
//! At the end it stops producing, flushes, reads every partition back and checks every
//! acknowledged sequence number is there exactly once (`readback.rs`). The arithmetic is `gaps.rs` and
//! `faults.rs`; this file only drives processes and clients, and every wait is bounded by a
//! named timeout.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use serde_json::{json, Value};

use crate::cluster::{Cluster, Exit, Signal, NODES};
use crate::faults::{self, Action, Fault, FaultChoice, Role};
use crate::gaps;
use crate::group_reader::GroupReader;
use crate::readback::{read_back, Delivery};

/// How long a fresh cluster may take to elect a controller, register its brokers and accept
/// the topic.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for every partition to have a leader (and the victim to be known) before
/// a fault.
pub(crate) const LEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// One Metadata request; a dead node makes librdkafka try another.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
/// One DescribeCluster to one node. A frozen node accepts the connection and never answers,
/// so this bounds what asking it costs.
const CONTROLLER_ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between two polls of the cluster's state.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Pause after a fault's recovery before the next fault, so each starts from a steady state.
const SETTLE_AFTER_ISR: Duration = Duration::from_secs(2);
/// Before a fault, every partition's last ack must be at most this old: each fault starts
/// with acks flowing, not inside the tail of the previous stall.
const ACK_FRESH: Duration = Duration::from_millis(500);
/// How long a SIGTERM'd node may take for its controlled shutdown and exit before it is killed
/// with SIGKILL (and the fault reported as forced). The broker's own shutdown waits are a few
/// seconds; this is far above them.
pub(crate) const TERM_EXIT_TIMEOUT: Duration = Duration::from_secs(60);
/// librdkafka's `message.timeout.ms`: far longer than any failover, so a message is retried
/// until it is acknowledged instead of failing.
const MESSAGE_TIMEOUT_MS: u64 = 300_000;
/// Messages the producer may hold unacknowledged (a 30 s stall at 2,000 msg/s is 60,000).
const PRODUCER_QUEUE_MESSAGES_MAX: usize = 1_000_000;
/// Flushing after the last fault.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);
/// Acks recorded (16 bytes each); past this the run fails rather than grow without bound.
/// At 2,000 msg/s it is more than an hour.
const ACK_RECORDS_MAX: usize = 10_000_000;
/// Bytes of each payload that carry the sequence number (big-endian `u64`).
pub(crate) const SEQ_BYTES: usize = 8;
/// Partitions of the topic at most: the bench keeps state per partition, and three `--cores 1`
/// nodes holding far more replicas would measure their own overload instead of failover.
const PARTITIONS_MAX: usize = 64;
/// Partitions of a mixed run without `--partitions`: two leaders per node.
const MIXED_PARTITIONS: usize = 6;
/// The longest any seconds flag may be (a day), so every conversion to a `Duration` is sound.
const SECONDS_FLAG_MAX: f64 = 86_400.0;

#[derive(Args, Clone)]
pub struct FailoverArgs {
    /// The broker binary to start three of.
    #[arg(long, default_value = "target/release/tributary")]
    pub broker: PathBuf,
    /// Directory for the nodes' data and logs: created (it must not exist) and removed at the
    /// end; kept on failure.
    #[arg(long, default_value = "./failover-cluster")]
    pub dir: PathBuf,
    /// ROLE-ACTION: ROLE `leader` (of partition 0), `follower` (a replica of partition 0 that
    /// is not its leader) or `controller` (the active controller); ACTION `kill` (kill -9,
    /// restart after --restart-after), `stop` (SIGSTOP, SIGCONT after --stop-for) or `term`
    /// (SIGTERM: controlled shutdown, restart after --restart-after). Or `mixed`: a seeded
    /// schedule of all nine for --duration seconds, reporting the writable seconds.
    #[arg(long, default_value = "leader-kill")]
    pub fault: FaultChoice,
    /// Faults of a single-kind run.
    #[arg(long, visible_alias = "faults", default_value_t = 20)]
    pub kills: usize,
    /// Messages per second, over all partitions.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Seconds between killing (or SIGTERM of) the victim and restarting it.
    #[arg(long, default_value_t = 8.0)]
    pub restart_after: f64,
    /// Seconds a stopped victim stays frozen before SIGCONT.
    #[arg(long, default_value_t = 5.0)]
    pub stop_for: f64,
    /// Seconds the healed node may take to listen again, with every ISR full and acks flowing,
    /// before the run fails.
    #[arg(long, default_value_t = 120.0)]
    pub isr_timeout: f64,
    /// Seconds after a fault in which a stall must begin to count as that fault's.
    #[arg(long, default_value_t = 30.0)]
    pub window: f64,
    /// Partitions of the topic, written round robin. Default: 6 for `mixed`, 3 for a
    /// controller fault (so there is a partition the controller does not lead), else 1.
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Seconds a mixed run measures, after its warm-up.
    #[arg(long, default_value_t = 180.0)]
    pub duration: f64,
    /// Seconds between two faults of a mixed run.
    #[arg(long, default_value_t = 9.0)]
    pub fault_every: f64,
    /// Seed of a mixed run's schedule, printed at its start: the same seed gives the same
    /// faults. Default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, default_value = "failover")]
    pub topic: String,
    /// Extra broker setting for every node (repeatable), e.g.
    /// `--set broker.session.timeout.ms=3000`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Extra librdkafka property for the bench's producer (repeatable), applied after the
    /// bench's own, e.g. `--producer-set socket.timeout.ms=2000`.
    #[arg(long = "producer-set", value_name = "KEY=VALUE", value_parser = parse_property)]
    pub producer_set: Vec<(String, String)>,
    /// Keep the directory (data and node logs) after a successful run.
    #[arg(long)]
    pub keep_dir: bool,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

/// `KEY=VALUE` as a (key, value) pair: split at the first `=`, the key not empty.
fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

impl FailoverArgs {
    /// The topic's partitions: `--partitions`, or the default for the fault kind.
    pub fn partitions(&self) -> usize {
        self.partitions.unwrap_or(match self.fault {
            FaultChoice::Mixed => MIXED_PARTITIONS,
            FaultChoice::One(f) if f.role == Role::Controller => NODES,
            FaultChoice::One(_) => 1,
        })
    }

    pub fn secs(v: f64) -> Duration {
        Duration::from_secs_f64(v)
    }

    /// `--producer-set` as `KEY=VALUE` strings, for the JSON reports.
    pub fn producer_set_json(&self) -> Vec<String> {
        self.producer_set
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }
}

/// Sequence numbers acknowledged, with when (from `start`).
pub(crate) struct Acks {
    pub start: Instant,
    pub acked: Mutex<Vec<(u64, Duration)>>,
    /// Per partition, its last ack's time in nanoseconds from `start` plus one (0: none yet),
    /// so the waits poll it without taking the ack list's lock from the delivery callback.
    last: Vec<AtomicU64>,
    pub errors: AtomicU64,
    pub first_error: Mutex<Option<String>>,
    overflow: AtomicBool,
}

impl Acks {
    fn new(partitions: usize) -> Self {
        Acks {
            start: Instant::now(),
            acked: Mutex::new(Vec::new()),
            last: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            overflow: AtomicBool::new(false),
        }
    }

    /// The time of partition `p`'s last ack.
    pub fn last_on(&self, p: usize) -> Option<Duration> {
        match self.last[p].load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n - 1)),
        }
    }

    /// Whether every partition had an ack at most `ACK_FRESH` ago.
    pub fn fresh(&self) -> bool {
        let now = self.start.elapsed();
        (0..self.last.len()).all(|p| {
            self.last_on(p)
                .is_some_and(|t| now.saturating_sub(t) <= ACK_FRESH)
        })
    }

    pub fn snapshot(&self) -> Result<Vec<(u64, Duration)>> {
        Ok(self
            .acked
            .lock()
            .map_err(|_| anyhow!("ack list poisoned"))?
            .clone())
    }
}

struct SeqContext {
    acks: Arc<Acks>,
}

impl ClientContext for SeqContext {
    /// librdkafka's own log on stderr, stamped in seconds from the start of producing (the
    /// clock of the fault lines): `--producer-set debug=eos,broker,topic` shows what the
    /// producer did around a fault.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let at = self.acks.start.elapsed().as_secs_f64();
        eprintln!("rdkafka {at:.3}s {level:?} {fac}: {log_message}");
    }
}

impl ProducerContext for SeqContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(_) => {
                let at = self.acks.start.elapsed();
                let p = seq % self.acks.last.len();
                let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1);
                self.acks.last[p].fetch_max(nanos + 1, Ordering::Relaxed);
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

pub(crate) fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("log_level", "3");
    c
}

/// What a run drives: the cluster, a metadata client and the running producer.
pub(crate) struct Bench<'a> {
    pub cluster: &'a mut Cluster,
    pub args: &'a FailoverArgs,
    pub partitions: usize,
    pub probe: BaseConsumer,
    pub acks: Arc<Acks>,
    pub producer: JoinHandle<Result<()>>,
}

pub fn run(args: &FailoverArgs) -> Result<()> {
    check_args(args)?;
    let mut cluster = Cluster::start(&args.broker, &args.dir, &args.set)?;
    let result = run_on(&mut cluster, args);
    if result.is_err() || args.keep_dir {
        cluster.keep_dir();
    }
    result
}

fn check_args(args: &FailoverArgs) -> Result<()> {
    if args.kills == 0 || args.rate <= 0.0 || args.message_size < SEQ_BYTES {
        bail!("--kills and --rate must be positive and --message-size at least {SEQ_BYTES}");
    }
    if !args.rate.is_finite() {
        bail!(
            "--rate {} is not a number of messages per second",
            args.rate
        );
    }
    let seconds = [
        ("--restart-after", args.restart_after),
        ("--stop-for", args.stop_for),
        ("--isr-timeout", args.isr_timeout),
        ("--window", args.window),
        ("--duration", args.duration),
        ("--fault-every", args.fault_every),
    ];
    for (flag, v) in seconds {
        if !(0.0..=SECONDS_FLAG_MAX).contains(&v) {
            bail!("{flag} {v} is out of range; give 0 to {SECONDS_FLAG_MAX}");
        }
    }
    let p = args.partitions();
    if p == 0 || p > PARTITIONS_MAX {
        bail!("--partitions {p}: give 1 to {PARTITIONS_MAX}");
    }
    let every_min = faults::HEAL_AFTER_MIN + faults::HEALED_BEFORE_NEXT_MIN;
    if args.fault == FaultChoice::Mixed && FailoverArgs::secs(args.fault_every) < every_min {
        bail!(
            "--fault-every {} s leaves no time to heal a fault before the next; give at least {} s",
            args.fault_every,
            every_min.as_secs()
        );
    }
    Ok(())
}

/// How a single-kind or a mixed run ended, before the read-back.
enum Outcome {
    One(Fault, Vec<Done>),
    Mixed(crate::mixed::MixedRun),
}

fn run_on(cluster: &mut Cluster, args: &FailoverArgs) -> Result<()> {
    let partitions = args.partitions();
    let bootstrap = cluster.bootstrap();
    eprintln!(
        "failover: cluster at {bootstrap}, fault {}, producer-set {:?}",
        args.fault,
        args.producer_set_json()
    );
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
    create_topic(cluster, &bootstrap, &args.topic, partitions)?;
    wait_for(
        cluster,
        CLUSTER_READY_TIMEOUT,
        "a leader and a full ISR on every partition",
        || {
            let states = partition_states(&probe, &args.topic, partitions)?;
            Ok(states.iter().all(PartitionState::full).then_some(()))
        },
    )?;
    let acks = Arc::new(Acks::new(partitions));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer = spawn_producer(args, &bootstrap, &acks, &stop, &sent, partitions)?;
    let reader = GroupReader::spawn(&bootstrap, &args.topic, acks.start, &stop)?;
    let mut b = Bench {
        cluster,
        args,
        partitions,
        probe,
        acks: acks.clone(),
        producer,
    };
    // Let the producer reach a steady state before the first fault.
    let outcome =
        sleep_checked(b.cluster, &b.producer, SETTLE_AFTER_ISR).and_then(|()| match args.fault {
            FaultChoice::One(fault) => fault_loop(&mut b, fault).map(|d| Outcome::One(fault, d)),
            FaultChoice::Mixed => crate::mixed::run(&mut b).map(Outcome::Mixed),
        });
    stop.store(true, Ordering::Relaxed);
    let joined = b
        .producer
        .join()
        .map_err(|_| anyhow!("the producer thread panicked"));
    let reads = reader.join();
    let outcome = outcome?;
    joined??;
    let reads = reads?;
    if acks.overflow.load(Ordering::Relaxed) {
        bail!("more than {ACK_RECORDS_MAX} acks; lower --rate, --kills or --duration");
    }
    let end = acks.start.elapsed();
    let acked = acks.snapshot()?;
    let read = read_back(&bootstrap, &args.topic, partitions)?;
    let mut delivery = Delivery::new(&acked, &read, &acks, &sent, partitions);
    delivery.seconds = end.as_secs_f64();
    match outcome {
        Outcome::One(fault, done) => report(args, fault, &done, &acked, &reads, &delivery)?,
        Outcome::Mixed(m) => crate::mixed::report(args, &m, &acked, &reads, partitions, &delivery)?,
    }
    delivery.check()
}

/// Calls `f` every `POLL_INTERVAL` until it gives a value, failing after `timeout` with the last
/// error it returned; also fails as soon as a node exits on its own.
pub(crate) fn wait_for<T>(
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

fn create_topic(
    cluster: &mut Cluster,
    bootstrap: &str,
    topic: &str,
    partitions: usize,
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client(bootstrap)
        .create()
        .context("creating the admin client")?;
    let options = AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT));
    wait_for(cluster, CLUSTER_READY_TIMEOUT, "CreateTopics", || {
        let new = NewTopic::new(
            topic,
            partitions as i32,
            TopicReplication::Fixed(NODES as i32),
        )
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
    eprintln!(
        "failover: created {topic} ({partitions} partitions, RF={NODES}, min.insync.replicas=2)"
    );
    Ok(())
}

pub(crate) struct PartitionState {
    /// -1 while the partition has no leader.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl PartitionState {
    pub fn full(&self) -> bool {
        self.leader >= 0 && self.isr.len() == NODES
    }
}

/// Every partition's leader, replicas and ISR as a fresh Metadata request reports them, in
/// partition order; a partition with an error (no leader) has leader -1.
pub(crate) fn partition_states(
    probe: &BaseConsumer,
    topic: &str,
    partitions: usize,
) -> Result<Vec<PartitionState>> {
    let md = probe.fetch_metadata(Some(topic), METADATA_TIMEOUT)?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .with_context(|| format!("topic {topic} missing from the metadata"))?;
    if let Some(e) = t.error() {
        bail!("topic {topic}: {e:?}");
    }
    (0..partitions)
        .map(|p| {
            let m = t
                .partitions()
                .iter()
                .find(|m| m.id() == p as i32)
                .with_context(|| format!("partition {p} of {topic} missing from the metadata"))?;
            Ok(PartitionState {
                leader: if m.error().is_some() { -1 } else { m.leader() },
                replicas: m.replicas().to_vec(),
                isr: m.isr().to_vec(),
            })
        })
        .collect()
}

/// The running nodes and their client listeners.
pub(crate) fn live_addrs(cluster: &Cluster) -> Result<Vec<(i32, SocketAddr)>> {
    cluster
        .running()
        .into_iter()
        .map(|id| Ok((id, cluster.client_addr(id)?)))
        .collect()
}

/// The active controller as every node in `nodes` reports it with DescribeCluster; `None`
/// while they disagree (during an election a node that knows no leader names itself).
fn controller(nodes: &[(i32, SocketAddr)]) -> Result<Option<i32>> {
    let mut seen = None;
    for (id, addr) in nodes {
        let c = crate::controller::controller_at(*addr, CONTROLLER_ASK_TIMEOUT)
            .with_context(|| format!("asking node {id} for the controller"))?;
        // Kafka answers -1 while it knows no controller: no node to hurt yet.
        if c < 0 {
            return Ok(None);
        }
        match seen {
            None => seen = Some(c),
            Some(s) if s != c => return Ok(None),
            Some(_) => {}
        }
    }
    Ok(seen)
}

/// The node a fault hits and the partition its gap is measured on.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub node: i32,
    pub partition: usize,
    /// The measured partition's leader when the fault was injected.
    pub leader: i32,
    /// For a controller fault: whether the controller led the measured partition too (it led
    /// every partition, so none isolates the controller's failover).
    pub controller_led: Option<bool>,
}

/// Resolves `role` against the cluster's state now: `partition`'s leader or its `pick`-th
/// follower (`faults::pick_follower`), or the controller. `None` while the partition has no
/// leader or the nodes do not agree on a controller.
pub(crate) fn resolve(
    role: Role,
    partition: usize,
    pick: usize,
    states: &[PartitionState],
    nodes: &[(i32, SocketAddr)],
) -> Result<Option<Target>> {
    let on = |node: i32, p: usize| Target {
        node,
        partition: p,
        leader: states[p].leader,
        controller_led: None,
    };
    let s = &states[partition];
    Ok(match role {
        Role::Leader => (s.leader >= 0).then(|| on(s.leader, partition)),
        Role::Follower if s.leader < 0 => None,
        Role::Follower => {
            faults::pick_follower(&s.replicas, &s.isr, s.leader, pick).map(|n| on(n, partition))
        }
        Role::Controller => {
            let Some(c) = controller(nodes)? else {
                return Ok(None);
            };
            let leaders: Vec<i32> = states.iter().map(|s| s.leader).collect();
            let (p, led) = match faults::partition_not_led_by(&leaders, c) {
                Some(p) => (p, false),
                None => (partition, true),
            };
            Some(Target {
                controller_led: Some(led),
                ..on(c, p)
            })
        }
    })
}

/// Puts `action` on `node`: kill -9, SIGSTOP, or SIGTERM (without waiting for the exit).
pub(crate) fn inject(cluster: &mut Cluster, action: Action, node: i32) -> Result<()> {
    match action {
        Action::Kill => cluster.kill(node),
        Action::Stop => cluster.signal(node, Signal::Stop),
        Action::Term => cluster.signal(node, Signal::Term),
    }
}

/// Heals `action` on `node`: a restart (for a term, once the node has exited, bounded by
/// `TERM_EXIT_TIMEOUT`), or SIGCONT. For a term, how the node exited.
pub(crate) fn heal(cluster: &mut Cluster, action: Action, node: i32) -> Result<Option<Exit>> {
    match action {
        Action::Kill => cluster.restart(node).map(|()| None),
        Action::Stop => cluster.signal(node, Signal::Cont).map(|()| None),
        Action::Term => {
            let exit = cluster.wait_exit(node, TERM_EXIT_TIMEOUT)?;
            cluster.restart(node)?;
            Ok(Some(exit))
        }
    }
}

/// What `heal` did, for the progress lines.
pub(crate) fn heal_name(action: Action) -> &'static str {
    match action {
        Action::Kill | Action::Term => "restart",
        Action::Stop => "SIGCONT",
    }
}

/// The producer's librdkafka properties: idempotent acks=all, then `--producer-set` on top.
fn producer_config(args: &FailoverArgs, bootstrap: &str) -> ClientConfig {
    let mut c = client(bootstrap);
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", args.linger_ms.to_string())
        .set("message.timeout.ms", MESSAGE_TIMEOUT_MS.to_string())
        .set(
            "queue.buffering.max.messages",
            PRODUCER_QUEUE_MESSAGES_MAX.to_string(),
        );
    for (k, v) in &args.producer_set {
        c.set(k, v);
    }
    // rdkafka passes on librdkafka's log up to its own level, not the `log_level` property.
    if c.get("debug").is_some() {
        c.set_log_level(RDKafkaLogLevel::Debug);
    }
    c
}

fn spawn_producer(
    args: &FailoverArgs,
    bootstrap: &str,
    acks: &Arc<Acks>,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
    partitions: usize,
) -> Result<JoinHandle<Result<()>>> {
    let producer: ThreadedProducer<SeqContext> = producer_config(args, bootstrap)
        .create_with_context(SeqContext { acks: acks.clone() })
        .context("creating the producer")?;
    let (topic, size, rate) = (args.topic.clone(), args.message_size, args.rate);
    let (stop, sent) = (stop.clone(), sent.clone());
    Ok(std::thread::spawn(move || -> Result<()> {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut payload = vec![0u8; size];
        let mut next = Instant::now();
        let mut seq = 0usize;
        'send: while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += interval;
            payload[..SEQ_BYTES].copy_from_slice(&(seq as u64).to_be_bytes());
            loop {
                // Round robin by sequence number, so an ack's partition is `seq % partitions`.
                let rec = BaseRecord::with_opaque_to(&topic, seq)
                    .partition((seq % partitions) as i32)
                    .payload(payload.as_slice())
                    .key(&[] as &[u8]);
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                        if stop.load(Ordering::Relaxed) {
                            // Not sent: `sent` counts only what the producer took.
                            break 'send;
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
            .context("flushing the producer after the last fault")?;
        Ok(())
    }))
}

/// Sleeps `d`, failing early if a node died on its own or the producer stopped.
pub(crate) fn sleep_checked(
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

/// One fault of a single-kind run as it happened, with times from the start of producing.
struct Done {
    target: Target,
    at: Duration,
    /// For a term: how the node exited.
    exit: Option<Exit>,
    /// From the heal (restart or SIGCONT) until the node listened again, every ISR was full
    /// and an ack had come on the measured partition after that.
    recovered: Duration,
}

fn fault_loop(b: &mut Bench, fault: Fault) -> Result<Vec<Done>> {
    let n = b.args.kills;
    let hold = FailoverArgs::secs(match fault.action {
        Action::Stop => b.args.stop_for,
        Action::Kill | Action::Term => b.args.restart_after,
    });
    let mut done = Vec::with_capacity(n);
    for i in 1..=n {
        let nodes = live_addrs(b.cluster)?;
        let (acks, probe, args, partitions) = (&b.acks, &b.probe, b.args, b.partitions);
        let target = wait_for(
            b.cluster,
            LEADER_TIMEOUT,
            "a leader on every partition, the victim and fresh acks",
            || {
                if !acks.fresh() {
                    return Ok(None);
                }
                let states = partition_states(probe, &args.topic, partitions)?;
                if states.iter().any(|s| s.leader < 0) {
                    return Ok(None);
                }
                resolve(fault.role, 0, i, &states, &nodes)
            },
        )?;
        let at = b.acks.start.elapsed();
        inject(b.cluster, fault.action, target.node)?;
        eprintln!(
            "fault {i}/{n}: {fault} on node {} (partition {} led by node {}{})",
            target.node,
            target.partition,
            target.leader,
            match target.controller_led {
                Some(true) => "; the controller leads every partition",
                _ => "",
            }
        );
        sleep_checked(b.cluster, &b.producer, hold)?;
        let exit = heal(b.cluster, fault.action, target.node)?;
        let recovered = wait_recovered(b, fault.action, &target)?;
        sleep_checked(b.cluster, &b.producer, SETTLE_AFTER_ISR)?;
        let times = gaps::times_by_partition(&b.acks.snapshot()?, b.partitions);
        let window = FailoverArgs::secs(b.args.window);
        let gap = gaps::kill_gaps(&times[target.partition], &[at], window)[0];
        eprintln!(
            "fault {i}/{n}: node {}: ack gap {} ms, recovered {:.1}s after its {}",
            target.node,
            gap.map_or("none".into(), |g| g.as_millis().to_string()),
            recovered.as_secs_f64(),
            heal_name(fault.action)
        );
        done.push(Done {
            target,
            at,
            exit,
            recovered,
        });
    }
    Ok(done)
}

/// Waits until the healed node listens again, every ISR is full and the measured partition
/// had an ack since; returns how long that took from the heal.
fn wait_recovered(b: &mut Bench, action: Action, target: &Target) -> Result<Duration> {
    let healed = Instant::now();
    let timeout = FailoverArgs::secs(b.args.isr_timeout);
    let log = b.cluster.log_path(target.node);
    let addr = b.cluster.client_addr(target.node)?;
    let (acks, probe, args, partitions) = (&b.acks, &b.probe, b.args, b.partitions);
    // A node that comes back before the controller fenced it was never out of the ISR, so a
    // full ISR alone proves nothing: a restarted node must also be listening again (it listens
    // only once registered) and the producer must have had an ack since. A thawed node kept
    // its listening socket (the kernel accepted for it while it was frozen), so for it the
    // clock starts at the SIGCONT.
    let mut since = (action == Action::Stop).then(|| acks.start.elapsed());
    wait_for(
        b.cluster,
        timeout,
        "the node to listen, a full ISR on every partition and a fresh ack",
        || {
            if since.is_none() {
                if TcpStream::connect_timeout(&addr, POLL_INTERVAL).is_err() {
                    return Ok(None);
                }
                since = Some(acks.start.elapsed());
            }
            let states = partition_states(probe, &args.topic, partitions)?;
            let full = states.iter().all(PartitionState::full);
            Ok((full && acks.last_on(target.partition) > since).then_some(()))
        },
    )
    .with_context(|| {
        format!(
            "after the {} of node {} (log {})",
            heal_name(action),
            target.node,
            log.display()
        )
    })?;
    Ok(healed.elapsed())
}

fn report(
    args: &FailoverArgs,
    fault: Fault,
    done: &[Done],
    acked: &[(u64, Duration)],
    reads: &[Duration],
    delivery: &Delivery,
) -> Result<()> {
    let times = gaps::times_by_partition(acked, args.partitions());
    let at: Vec<(usize, Duration)> = done.iter().map(|d| (d.target.partition, d.at)).collect();
    let gaps = gaps::fault_gaps(&times, &at, FailoverArgs::secs(args.window))
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.with_context(|| format!("fault {}: no ack after it", i + 1)))
        .collect::<Result<Vec<Duration>>>()?;
    let fault_at: Vec<Duration> = done.iter().map(|d| d.at).collect();
    let read_gaps = gaps::kill_gaps(reads, &fault_at, FailoverArgs::secs(args.window))
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            g.with_context(|| format!("fault {}: the group read nothing after it", i + 1))
        })
        .collect::<Result<Vec<Duration>>>()?;
    let (q, ms) = summary(&gaps);
    let (read_q, read_ms) = summary(&read_gaps);
    for (i, ((d, g), r)) in done.iter().zip(&ms).zip(&read_ms).enumerate() {
        println!(
            "{fault} {:>2}: node {} at {:>7.1}s  partition {}  ack gap {:>6} ms  read gap {:>6} ms  \
             recovered {:>5.1}s after {}{}",
            i + 1,
            d.target.node,
            d.at.as_secs_f64(),
            d.target.partition,
            g,
            r,
            d.recovered.as_secs_f64(),
            heal_name(fault.action),
            detail(d)
        );
    }
    let led = done
        .iter()
        .filter(|d| d.target.controller_led == Some(true))
        .count();
    println!(
        "failover {fault}, {} faults: ack gap p50 {} ms, p99 {} ms, max {} ms; group {} read gap \
         p50 {} ms, p99 {} ms, max {} ms; {}",
        done.len(),
        q[0],
        q[1],
        q[2],
        crate::group_reader::GROUP,
        read_q[0],
        read_q[1],
        read_q[2],
        delivery.line()
    );
    if fault.role == Role::Controller {
        println!(
            "controller faults measured on a partition the controller did not lead: {} of {}",
            done.len() - led,
            done.len()
        );
    }
    delivery.print_first_error();
    if args.json {
        let mut v = report_json(args, fault, done, &ms, q, delivery);
        v["read_gaps_ms"] = json!(read_ms);
        v["read_gap_ms"] = json!({"p50": read_q[0], "p99": read_q[1], "max": read_q[2]});
        println!("{v}");
    }
    Ok(())
}

/// p50, p99 and max of `gaps` in milliseconds, and each gap in milliseconds.
fn summary(gaps: &[Duration]) -> ([u64; 3], Vec<u64>) {
    let mut sorted = gaps.to_vec();
    sorted.sort();
    let q = |p: f64| gaps::percentile(&sorted, p).as_millis() as u64;
    let ms = gaps.iter().map(|g| g.as_millis() as u64).collect();
    ([q(0.5), q(0.99), q(1.0)], ms)
}

/// A fault line's tail: how a terminated node exited, whether the controller led the partition.
fn detail(d: &Done) -> String {
    let exit = match &d.exit {
        Some(Exit::Exited(status, took)) => {
            format!(
                "  exited {:.1}s after SIGTERM ({status})",
                took.as_secs_f64()
            )
        }
        Some(Exit::Killed) => format!(
            "  still running {}s after SIGTERM: killed",
            TERM_EXIT_TIMEOUT.as_secs()
        ),
        None => String::new(),
    };
    let led = if d.target.controller_led == Some(true) {
        "  (the controller led it)"
    } else {
        ""
    };
    format!("{exit}{led}")
}

fn report_json(
    args: &FailoverArgs,
    fault: Fault,
    done: &[Done],
    ms: &[u64],
    [p50, p99, max]: [u64; 3],
    delivery: &Delivery,
) -> Value {
    let shutdown: Vec<Option<f64>> = done
        .iter()
        .map(|d| match &d.exit {
            Some(Exit::Exited(_, took)) => Some(took.as_secs_f64()),
            _ => None,
        })
        .collect();
    let mut v = json!({
        "mode": "failover",
        "fault": fault.to_string(),
        "kills": done.len(),
        "partitions": args.partitions(),
        "targets": done.iter().map(|d| d.target.node).collect::<Vec<_>>(),
        "leaders": done.iter().map(|d| d.target.leader).collect::<Vec<_>>(),
        "measured_partitions": done.iter().map(|d| d.target.partition).collect::<Vec<_>>(),
        "controller_led_partition": done.iter().map(|d| d.target.controller_led).collect::<Vec<_>>(),
        "shutdown_s": shutdown,
        "shutdowns_forced": done.iter().filter(|d| matches!(d.exit, Some(Exit::Killed))).count(),
        "gaps_ms": ms,
        "gap_ms": {"p50": p50, "p99": p99, "max": max},
        "recovered_after_heal_s": done.iter().map(|d| d.recovered.as_secs_f64()).collect::<Vec<_>>(),
        "config": {
            "rate": args.rate, "message_size": args.message_size, "linger_ms": args.linger_ms,
            "restart_after_s": args.restart_after, "stop_for_s": args.stop_for,
            "window_s": args.window, "set": args.set,
            "producer_set": args.producer_set_json(),
        },
        "git_sha": env!("TRIBUTARY_GIT_SHA"),
    });
    delivery.add_to(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FailoverArgs,
    }

    fn parse(argv: &[&str]) -> Result<FailoverArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("failover").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn a_property_is_split_at_its_first_equals_sign() {
        let kv = |k: &str, v: &str| Ok((k.to_string(), v.to_string()));
        assert_eq!(
            parse_property("socket.timeout.ms=2000"),
            kv("socket.timeout.ms", "2000")
        );
        assert_eq!(parse_property("debug=a=b"), kv("debug", "a=b"));
        assert_eq!(parse_property(" debug =msg"), kv("debug", "msg"));
        assert_eq!(parse_property("client.id="), kv("client.id", ""));
        assert!(parse_property("socket.timeout.ms").is_err());
        assert!(parse_property("=2000").is_err());
        assert!(parse_property(" =2000").is_err());
        assert!(parse_property("").is_err());
    }

    #[test]
    fn producer_set_is_repeatable_and_applied_over_the_bench_defaults() {
        let args = parse(&[
            "--producer-set",
            "socket.timeout.ms=2000",
            "--producer-set",
            "linger.ms=0",
        ])
        .unwrap();
        assert_eq!(
            args.producer_set_json(),
            ["socket.timeout.ms=2000", "linger.ms=0"]
        );
        let c = producer_config(&args, "127.0.0.1:9092");
        assert_eq!(c.get("socket.timeout.ms"), Some("2000"));
        assert_eq!(c.get("linger.ms"), Some("0"));
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        assert!(!matches!(c.log_level, RDKafkaLogLevel::Debug));
        assert!(parse(&["--producer-set", "socket.timeout.ms"]).is_err());
    }

    #[test]
    fn a_debug_property_lets_librdkafka_debug_lines_through() {
        let args = parse(&["--producer-set", "debug=eos,broker"]).unwrap();
        let c = producer_config(&args, "127.0.0.1:9092");
        assert_eq!(c.get("debug"), Some("eos,broker"));
        assert!(matches!(c.log_level, RDKafkaLogLevel::Debug));
    }

    #[test]
    fn without_producer_set_the_producer_keeps_the_client_defaults() {
        let args = parse(&[]).unwrap();
        assert!(args.producer_set.is_empty());
        let c = producer_config(&args, "127.0.0.1:9092");
        assert_eq!(c.get("socket.timeout.ms"), None);
        assert_eq!(c.get("linger.ms"), Some("5"));
    }
}
