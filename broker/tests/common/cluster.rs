//! A cluster of `tributary` processes for the multi-process tests — on loopback, or on hosts a
//! test sets up itself (network namespaces) — and the client helpers they share.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tributary_broker::cluster::command::FenceReason;

/// Short timeouts, so fencing and elections happen within a test's patience.
pub const SESSION_TIMEOUT_MS: u64 = 2000;

/// A loopback address no other caller in this test process was given. The port is free when
/// picked and released at once, so the kernel may pick it again for the next caller — another
/// test's cluster running in parallel. Brokers bind their client ports with SO_REUSEPORT (one
/// socket per shard), so two brokers given one port would both listen on it and split its
/// connections between them; a port handed out twice is passed over.
pub fn free_addr() -> SocketAddr {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        if GIVEN.lock().unwrap().insert(addr.port()) {
            return addr;
        }
    }
}

/// Where one node listens and how its process starts.
pub struct Host {
    pub client: SocketAddr,
    pub controller: SocketAddr,
    pub metrics: SocketAddr,
    /// The command the broker runs under (`ip netns exec NAME`, which execs it, so the child's
    /// pid is the broker's); empty: the broker is started directly.
    pub prefix: Vec<String>,
}

pub struct Node {
    pub id: i32,
    pub dir: PathBuf,
    pub client: SocketAddr,
    pub controller: SocketAddr,
    pub metrics: SocketAddr,
    pub prefix: Vec<String>,
    /// `process.roles`: `broker,controller` unless set with [`Cluster::with_roles`].
    pub roles: &'static str,
    /// Extra `--set` values of this node only, after the cluster's.
    pub extra: Vec<String>,
    pub child: Option<Child>,
    /// Whether this node was started before (a later start is a restart).
    started: bool,
}

impl Node {
    pub fn is_controller(&self) -> bool {
        self.roles.contains("controller")
    }

    pub fn is_broker(&self) -> bool {
        self.roles.contains("broker")
    }
}

pub struct Cluster {
    _root: tempfile::TempDir,
    pub nodes: Vec<Node>,
    voters: String,
    /// Extra `--set` values every node starts with.
    pub extra: Vec<String>,
    /// The faults a test caused (kills, signals, clean stops, restarts, cuts), in order. A
    /// cluster that saw none must end with no fencing and no ISR shrink (see `Drop`).
    faults: Vec<String>,
    /// The liveness counters the last running node reported before a test killed it.
    last_liveness: Option<Liveness>,
}

impl Cluster {
    /// `n` nodes on loopback, none started.
    pub fn new(n: i32) -> Self {
        Self::new_with(
            (0..n)
                .map(|_| Host {
                    client: free_addr(),
                    controller: free_addr(),
                    metrics: free_addr(),
                    prefix: Vec::new(),
                })
                .collect(),
        )
    }

    /// One node on each of `hosts` (ids from 1, in order), none started.
    pub fn new_with(hosts: Vec<Host>) -> Self {
        let root = tempfile::tempdir().unwrap();
        let nodes: Vec<Node> = (1..)
            .zip(hosts)
            .map(|(id, h)| Node {
                id,
                dir: root.path().join(format!("node-{id}")),
                client: h.client,
                controller: h.controller,
                metrics: h.metrics,
                prefix: h.prefix,
                roles: "broker,controller",
                extra: Vec::new(),
                child: None,
                started: false,
            })
            .collect();
        let mut cluster = Self {
            _root: root,
            nodes,
            voters: String::new(),
            extra: Vec::new(),
            faults: Vec::new(),
            last_liveness: None,
        };
        cluster.set_voters();
        cluster
    }

    /// Nodes on loopback with these `process.roles` (ids from 1, in order), none started; the
    /// voters are the nodes with the controller role.
    pub fn with_roles(roles: &[&'static str]) -> Self {
        let mut cluster = Self::new(roles.len() as i32);
        for (node, roles) in cluster.nodes.iter_mut().zip(roles) {
            node.roles = roles;
        }
        cluster.set_voters();
        cluster
    }

    fn set_voters(&mut self) {
        self.voters = self
            .nodes
            .iter()
            .filter(|n| n.is_controller())
            .map(|n| format!("{}@{}", n.id, n.controller))
            .collect::<Vec<_>>()
            .join(",");
    }

    pub fn spawn(&mut self, i: usize) {
        if self.nodes[i].started {
            self.note_fault(format!("restart of node {}", self.nodes[i].id));
        }
        self.nodes[i].started = true;
        let voters = self.voters.clone();
        let extra = self.extra.clone();
        let node = &mut self.nodes[i];
        std::fs::create_dir_all(&node.dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.with_extension("log"))
            .unwrap();
        let listeners = match (node.is_broker(), node.is_controller()) {
            (true, true) => format!(
                "listeners=PLAINTEXT://{},CONTROLLER://{}",
                node.client, node.controller
            ),
            (true, false) => format!("listeners=PLAINTEXT://{}", node.client),
            _ => format!("listeners=CONTROLLER://{}", node.controller),
        };
        let set = [
            format!("node.id={}", node.id),
            format!("process.roles={}", node.roles),
            format!("controller.quorum.voters={voters}"),
            listeners,
            "controller.quorum.election.timeout.ms=500".into(),
            format!("broker.session.timeout.ms={SESSION_TIMEOUT_MS}"),
            "broker.heartbeat.interval.ms=250".into(),
            format!("metrics.listen={}", node.metrics),
            "group.initial.rebalance.delay.ms=0".into(),
            "offsets.topic.num.partitions=6".into(),
        ];
        let broker = env!("CARGO_BIN_EXE_tributary");
        let mut cmd = match node.prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(broker);
                c
            }
            None => Command::new(broker),
        };
        cmd.arg("--data-dir")
            .arg(&node.dir)
            .arg("--cpus")
            .arg(node_cpu(node.id).to_string());
        for s in set.iter().chain(&extra).chain(&node.extra) {
            cmd.arg("--set").arg(s);
        }
        node.child = Some(
            // The broker logs to stdout (as Kafka's console appender); both streams go to the log.
            cmd.stdout(log.try_clone().expect("log file handle"))
                .stderr(log)
                .spawn()
                .expect("broker binary starts"),
        );
    }

    /// Starts every node and waits until each serves clients (it does once registered).
    pub fn start_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.spawn(i);
        }
        for i in 0..self.nodes.len() {
            self.wait_listening(i);
        }
    }

    /// Waits until node `i` serves clients (a controller-only node: its quorum listener).
    pub fn wait_listening(&self, i: usize) {
        let node = &self.nodes[i];
        let addr = if node.is_broker() {
            node.client
        } else {
            node.controller
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "node {} did not listen on {addr}; its log: {}",
                self.nodes[i].id,
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self, i: usize) -> String {
        let bytes = std::fs::read(self.nodes[i].dir.with_extension("log")).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn kill(&mut self, i: usize) {
        if self.nodes[i].child.is_some() {
            self.note_fault(format!("kill -9 of node {}", self.nodes[i].id));
            if self.nodes.iter().filter(|n| n.child.is_some()).count() == 1 {
                // The last one running: what it counted is all that will be known.
                self.last_liveness = self.liveness_on(i);
            }
        }
        self.stop_now(i);
    }

    fn stop_now(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Records a fault the test caused by other means than this type's (a network cut).
    pub fn note_fault(&mut self, what: String) {
        self.faults.push(what);
    }

    /// The value of one gauge or counter (its name with labels) on node `i`'s metrics
    /// endpoint.
    pub fn gauge(&self, i: usize, name: &str) -> Option<i64> {
        metric_value(&self.metrics_text(i)?, name)
    }

    fn metrics_text(&self, i: usize) -> Option<String> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(self.nodes[i].metrics).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    }

    /// The cluster-wide liveness counters (every node applies the same metadata log) from the
    /// first running node that answers: fencings by reason, then ISR shrinks and expansions.
    pub fn liveness(&self) -> Option<Liveness> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .find_map(|i| self.liveness_on(i))
    }

    /// The liveness counters as node `i` reports them.
    pub fn liveness_on(&self, i: usize) -> Option<Liveness> {
        let text = self.metrics_text(i)?;
        let fencings = FenceReason::ALL
            .into_iter()
            .map(|r| {
                let name = format!("tributary_broker_fencings_total{{reason=\"{}\"}}", r.name());
                (r.name(), metric_value(&text, &name).unwrap_or(0))
            })
            .collect();
        let isr = |c: &str| {
            metric_value(
                &text,
                &format!("tributary_isr_changes_total{{change=\"{c}\"}}"),
            )
        };
        Some(Liveness {
            fencings,
            isr_shrinks: isr("shrink")?,
            isr_expansions: isr("expand")?,
        })
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to node `i`.
    pub fn signal(&mut self, i: usize, signal: &str) {
        let what = format!("SIG{signal} of node {}", self.nodes[i].id);
        self.note_fault(what);
        if let Some(c) = &self.nodes[i].child {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    /// Stops node `i` cleanly (SIGTERM) and waits for it to exit; its exit status.
    pub fn terminate(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        let what = format!("SIGTERM of node {}", self.nodes[i].id);
        let mut c = self.nodes[i].child.take()?;
        self.note_fault(what);
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        c.wait().ok()
    }

    pub fn bootstrap(&self, i: usize) -> String {
        self.nodes[i].client.to_string()
    }

    /// Every broker's client address but node `id`'s (the one a test just stopped).
    pub fn bootstrap_except(&self, id: i32) -> String {
        self.nodes
            .iter()
            .filter(|n| n.is_broker() && n.id != id)
            .map(|n| n.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every broker's client address.
    pub fn all_bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.is_broker())
            .map(|n| n.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let liveness = self.liveness().or_else(|| self.last_liveness.clone());
        for i in 0..self.nodes.len() {
            self.stop_now(i);
        }
        // A failed test shows what each node said last (`CLUSTER_LOG_LINES` lines, 40 unless
        // set); `CLUSTER_LOG_DIR`, when set, keeps every node's whole log there.
        let keep = std::env::var_os("CLUSTER_LOG_DIR").map(PathBuf::from);
        if let Some(dir) = &keep {
            let _ = std::fs::create_dir_all(dir);
            for n in &self.nodes {
                let _ = std::fs::copy(
                    n.dir.with_extension("log"),
                    dir.join(format!("node-{}.log", n.id)),
                );
            }
        }
        if std::thread::panicking() {
            let show: usize = std::env::var("CLUSTER_LOG_LINES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(40);
            for i in 0..self.nodes.len() {
                let log = self.log(i);
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(show)..].join("\n");
                eprintln!(
                    "--- node {} log (last {show} lines) ---\n{tail}",
                    self.nodes[i].id
                );
            }
        }
        self.account(liveness);
    }
}

/// What the metadata log counted of brokers' liveness (see [`Cluster::liveness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    pub fencings: Vec<(&'static str, i64)>,
    pub isr_shrinks: i64,
    pub isr_expansions: i64,
}

impl Liveness {
    pub fn fenced(&self) -> i64 {
        self.fencings.iter().map(|(_, n)| n).sum()
    }
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fencings")?;
        for (reason, n) in &self.fencings {
            write!(f, " {reason}={n}")?;
        }
        write!(
            f,
            "; ISR shrinks {}, expansions {}",
            self.isr_shrinks, self.isr_expansions
        )
    }
}

impl Cluster {
    /// Accounts for the liveness a cluster saw as it ends: a line in the file
    /// `TRIBUTARY_LIVENESS_LEDGER` names (when set: `ci/test` sums it up), and, for a cluster
    /// no fault was done to, a failed test if any broker was fenced or any ISR shrank — a
    /// healthy broker must never be.
    fn account(&self, liveness: Option<Liveness>) {
        let test = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let faults = if self.faults.is_empty() {
            "no fault".to_string()
        } else {
            self.faults.join(", ")
        };
        let seen = liveness
            .as_ref()
            .map_or("counters not read (no node answered)".to_string(), |l| {
                l.to_string()
            });
        if let Some(path) = std::env::var_os("TRIBUTARY_LIVENESS_LEDGER") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{test}\t{faults}\t{seen}");
            }
        }
        let Some(l) = liveness.filter(|_| self.faults.is_empty()) else {
            return;
        };
        if !std::thread::panicking() && (l.fenced() > 0 || l.isr_shrinks > 0) {
            panic!(
                "{test}: no fault was done to this cluster, yet {l}: a healthy broker was fenced or left an ISR (its nodes' logs say why: 'fencing a broker', 'changing the ISR')"
            );
        }
    }
}

/// The value of metric `name` (with its labels) in a `/metrics` page.
fn metric_value(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The CPU node `id` runs its one shard on: the nodes are spread over this process's CPUs,
/// as separate machines would be, instead of all taking the first one.
pub fn node_cpu(id: i32) -> usize {
    let cpus = tributary_broker::config::allowed_cpus();
    cpus[(id.max(1) as usize - 1) % cpus.len()]
}

/// The longest interval between two consecutive acknowledgements from the last one at or
/// before `from` (the fault) on: the one spanning the fault, or any longer one after it —
/// counting only acknowledgements up to `until` when given.
pub fn longest_ack_gap(acks: &[Ack], from: Instant, until: Option<Instant>) -> Duration {
    let mut times: Vec<Instant> = acks
        .iter()
        .map(|a| a.at)
        .filter(|t| until.is_none_or(|u| *t <= u))
        .collect();
    times.sort_unstable();
    let first = times.iter().rposition(|t| *t <= from).unwrap_or(0);
    times[first..]
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

pub fn metadata(bootstrap: &str, topic: Option<&str>) -> Metadata {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .unwrap();
    c.fetch_metadata(topic, Duration::from_secs(10))
        .expect("Metadata")
}

pub fn broker_ids(m: &Metadata) -> Vec<i32> {
    let mut ids: Vec<i32> = m.brokers().iter().map(|b| b.id()).collect();
    ids.sort_unstable();
    ids
}

/// (leader, sorted ISR) of partition 0 of `topic`, as `bootstrap` sees it.
pub fn placement(bootstrap: &str, topic: &str) -> (i32, Vec<i32>) {
    let m = metadata(bootstrap, Some(topic));
    let p = &m.topics()[0].partitions()[0];
    let mut isr = p.isr().to_vec();
    isr.sort_unstable();
    (p.leader(), isr)
}

/// Each partition's leader, in partition order.
pub fn leaders(bootstrap: &str, topic: &str) -> Vec<i32> {
    let m = metadata(bootstrap, Some(topic));
    let t = &m.topics()[0];
    let mut ps: Vec<(i32, i32)> = t
        .partitions()
        .iter()
        .map(|p| (p.id(), p.leader()))
        .collect();
    ps.sort_unstable();
    ps.into_iter().map(|(_, l)| l).collect()
}

/// Produces `n` keyed messages (to partition `i % partitions`) and waits for every ack.
pub fn produce(bootstrap: &str, topic: &str, partitions: &[i32], n: usize, tag: &str) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    for i in 0..n {
        let v = format!("{tag}-{i}");
        let part = partitions[i % partitions.len()];
        let mut rec = Some(
            BaseRecord::<(), String>::to(topic)
                .payload(&v)
                .partition(part),
        );
        while let Some(r) = rec.take() {
            if let Err((_, back)) = p.send(r) {
                p.poll(Duration::from_millis(10));
                rec = Some(back);
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(60))
        .expect("every message acknowledged");
}

/// Consumes `topic` with a consumer group until `count` messages arrived; their payloads.
pub fn consume_group(bootstrap: &str, topic: &str, group: &str, count: usize) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < count && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    c.commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        .expect("offsets committed through the group's coordinator");
    out
}

/// Every value in a stopped node's copy of `topic`-`part`, read from its files in offset order.
pub fn values_on_disk(data_dir: PathBuf, topic: &str, part: i32) -> Vec<String> {
    use tributary_protocol::record_batch::{records, validate_all};
    use tributary_storage::{LogConfig, Partition};
    let topic = topic.to_string();
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            tributary_storage::io::prime_executor_io(&data_dir)
                .await
                .unwrap();
            let dir = data_dir.join(format!("{topic}-{part}"));
            let part = Partition::open_replicated(dir, LogConfig::default())
                .await
                .unwrap();
            let mut offset = part.log_start_offset();
            let mut out = Vec::new();
            while offset < part.log_end_offset() {
                let read = part.read_replica(offset, 1 << 20).await.unwrap();
                let batches = validate_all(&read.records).unwrap();
                assert!(!batches.is_empty(), "no batch at {offset}");
                for (pos, header) in batches {
                    offset = header.last_offset() + 1;
                    for r in records(&read.records[pos..pos + header.size()]).unwrap() {
                        out.push(String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned());
                    }
                }
            }
            part.close().await.unwrap();
            out
        })
        .unwrap()
        .join()
        .unwrap()
}

/// One acknowledged record: its value, the offset the acknowledgement gave, and when.
#[derive(Debug, Clone)]
pub struct Ack {
    pub value: String,
    pub offset: i64,
    pub at: Instant,
}

struct AckContext(std::sync::Arc<std::sync::Mutex<Vec<Ack>>>);
impl rdkafka::ClientContext for AckContext {
    /// librdkafka's own log, on the test's stderr: `WRITER_DEBUG=eos,broker,topic` (its
    /// `debug` contexts) shows what the producer did while a fault was on.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!(
            "rdkafka {}.{:03} {level:?} {fac}: {log_message}",
            now.as_secs(),
            now.subsec_millis()
        );
    }
}
impl rdkafka::producer::ProducerContext for AckContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Ok(m) = result {
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            let ack = Ack {
                value,
                offset: m.offset(),
                at: Instant::now(),
            };
            self.0.lock().unwrap().push(ack);
        }
    }
}

/// An idempotent acks=all producer writing `w-0`, `w-1`, … to one partition in the background,
/// recording each acknowledgement; `stop` ends it once everything sent is answered
/// (acknowledged or failed) or `flush` passed. `settings` are extra client settings.
pub struct Writer {
    acked: std::sync::Arc<std::sync::Mutex<Vec<Ack>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Writer {
    pub fn start(
        bootstrap: String,
        topic: &'static str,
        part: i32,
        settings: &[(&'static str, &'static str)],
        pause: Duration,
        flush: Duration,
    ) -> Self {
        use std::sync::atomic::Ordering;
        let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, s) = (acked.clone(), stop.clone());
        let settings = settings.to_vec();
        let thread = std::thread::spawn(move || {
            let mut c = ClientConfig::new();
            c.set("bootstrap.servers", &bootstrap)
                .set("acks", "all")
                .set("enable.idempotence", "true");
            if let Ok(debug) = std::env::var("WRITER_DEBUG") {
                c.set("debug", debug)
                    .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
            }
            for (k, v) in settings {
                c.set(k, v);
            }
            let p: BaseProducer<AckContext> = c.create_with_context(AckContext(a)).unwrap();
            let mut sent = 0usize;
            while !s.load(Ordering::Relaxed) {
                let v = format!("w-{sent}");
                if p.send(
                    BaseRecord::<(), String>::to(topic)
                        .payload(&v)
                        .partition(part),
                )
                .is_ok()
                {
                    sent += 1;
                }
                p.poll(pause);
            }
            let _ = p.flush(flush);
            sent
        });
        Self {
            acked,
            stop,
            thread: Some(thread),
        }
    }

    /// How many records were acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops sending, waits for what was sent, and returns (sent, acknowledgements).
    pub fn stop(mut self) -> (usize, Vec<Ack>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = self.thread.take().unwrap().join().unwrap();
        let acked = self.acked.lock().unwrap().clone();
        (sent, acked)
    }
}

/// Every value of partition 0 of `topic` in offset order: read until each of `want` arrived
/// and nothing more came for two seconds, or `limit` passed.
pub fn read_until_all(
    bootstrap: &str,
    topic: &str,
    want: &[String],
    limit: Duration,
) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut missing: std::collections::HashSet<&String> = want.iter().collect();
    let mut out = Vec::new();
    let deadline = Instant::now() + limit;
    let mut last = Instant::now();
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                missing.remove(&v);
                out.push(v);
                last = Instant::now();
            }
            _ if missing.is_empty() && last.elapsed() > Duration::from_secs(2) => break,
            _ => {}
        }
    }
    out
}
