//! This node's member of the metadata quorum, run on shard 0 — a voter on a controller, an
//! observer on a broker-only node: it opens the quorum, brings the image up to date (naming the
//! cluster, importing a single-node catalog, registering this node if it is a broker),
//! publishes every applied image to every shard, and — while this node is the active
//! controller — fences brokers it stops hearing from (voters through raft, broker-only nodes
//! through their metadata fetches) and unfences them when they return.
//!
//! A change is answered only once every shard of the proposing node holds an image with it, so
//! a client that created a topic can use it on any connection of this broker at once. Other
//! brokers learn it when their own quorum member applies the entry, a moment later.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::partition_dirs::METADATA_DIR;
use anyhow::{bail, Context, Result};
use event_listener::Event;
use tracing::{info, warn};
use tributary_protocol::ErrorCode;
use tributary_quorum::{Evidence, ProposeError, Quorum, QuorumConfig, Role};

use super::command::{MetadataCommand, Outcome};
use super::liveness;
use super::MetadataState;
use crate::catalog::{read_checked, Catalog, PartitionRegistration, TopicMeta, CATALOG_FILE};
use crate::config::BrokerConfig;
use crate::group::OFFSETS_TOPIC;
use crate::routing::ShardId;
use crate::shard::{call, Shard, ShardRequest};

/// The metadata log's topic name, as DescribeQuorum asks for it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// The producer-id file of single-node brokers from before the metadata log.
pub const LEGACY_PRODUCER_ID_FILE: &str = "producer-ids.json";

/// How long a shutdown waits for the quorum to move this broker's leadership away.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// How often start-up says what it is waiting for.
const STARTUP_PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub struct MetadataNode {
    pub quorum: Rc<Quorum<MetadataState>>,
    node_id: i32,
    /// The newest image every shard of this node holds.
    published: Cell<u64>,
    published_event: Event,
    /// How long a client's change waits for a quorum leader to be known (an election in
    /// progress): [`NO_LEADER_WAIT_ELECTIONS`] election timeouts.
    no_leader_wait: Duration,
}

/// Election timeouts a client's change waits for a leader before it is answered
/// REQUEST_TIMED_OUT — as Kafka's brokers hold a forwarded request until a controller is known.
pub const NO_LEADER_WAIT_ELECTIONS: u32 = 4;

/// A change the quorum could not make: the error code and message for the client.
pub type Refusal = (ErrorCode, String);

impl MetadataNode {
    /// Opens the quorum and brings this node into the cluster; returns once this broker is
    /// registered in an image this node has applied.
    /// `legacy` is the single-node catalog to import ([`read_legacy`]), if the data directory
    /// holds one.
    /// `doubts` is where the quorum transport records what it doubts of other voters.
    pub async fn start(
        config: &BrokerConfig,
        legacy: Option<Catalog>,
        doubts: Arc<tributary_quorum::PeerDoubts>,
    ) -> Result<Rc<Self>> {
        let c = &config.cluster;
        let election = Duration::from_millis(c.election_timeout_ms);
        let qc = QuorumConfig {
            node_id: c.node_id,
            // A broker-only node observes the log: it fetches it from the controllers.
            role: if c.roles.controller {
                Role::Voter
            } else {
                Role::Observer
            },
            voters: c.voters.iter().map(|v| (v.id, v.addr)).collect(),
            listen: c.controller_listen,
            dir: config.data_dir.join(METADATA_DIR),
            election_timeout: election,
            heartbeat_interval: election / 10,
            proposal_timeout: Duration::from_secs(5).max(election * 3),
            snapshot_every_entries: 10_000,
            doubts,
        };
        let state = MetadataState {
            image: Arc::new(Catalog::empty()),
        };
        let quorum = Quorum::open(qc, state)
            .await
            .context("opening the metadata log")?;
        let node = Rc::new(Self {
            quorum,
            node_id: c.node_id,
            published: Cell::new(0),
            published_event: Event::new(),
            no_leader_wait: election * NO_LEADER_WAIT_ELECTIONS,
        });
        node.bootstrap(config, legacy).await?;
        Ok(node)
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn image(&self) -> Arc<Catalog> {
        self.quorum.with_state(|s| s.image.clone())
    }

    /// Proposes until committed or refused, saying every few seconds what it waits for: for
    /// start-up, when nothing can be served without the quorum anyway.
    async fn propose_at_start(
        &self,
        config: &BrokerConfig,
        cmd: &MetadataCommand,
    ) -> Result<Outcome> {
        let mut said = Instant::now();
        loop {
            match self.quorum.propose(cmd.encode()).await {
                Ok((_, out)) => return Ok(out),
                Err(ProposeError::NoLeader | ProposeError::Timeout) => {
                    if said.elapsed() >= STARTUP_PROGRESS_EVERY {
                        info!(
                            voters = config.values.get("controller.quorum.voters").map_or("", |v| v.0.as_str()),
                            "waiting for the metadata quorum to elect a leader (a majority of controller.quorum.voters must be running)"
                        );
                        said = Instant::now();
                    }
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => bail!("metadata quorum: {e}"),
            }
        }
    }

    async fn bootstrap(
        &self,
        config: &BrokerConfig,
        legacy_catalog: Option<Catalog>,
    ) -> Result<()> {
        let c = &config.cluster;
        let legacy = config.data_dir.join(CATALOG_FILE);
        if legacy_catalog.is_some() && !c.single_voter() {
            bail!(
                "{} holds a single-node catalog; a node of a several-voter quorum cannot import it. Start this data directory as a single node (no controller.quorum.voters), or give the node an empty --data-dir",
                legacy.display()
            );
        }
        if let Some(catalog) = legacy_catalog {
            if self.image().topics.is_empty() {
                let topics = catalog.topics.len();
                let out = self
                    .propose_at_start(
                        config,
                        &MetadataCommand::ImportCatalog {
                            catalog: Box::new(catalog),
                        },
                    )
                    .await?;
                if let Outcome::Refused(_, why) = out {
                    bail!("importing {}: {why}", legacy.display());
                }
                info!(
                    topics,
                    "imported the single-node catalog into the metadata log"
                );
            }
            let done = config.data_dir.join(format!("{CATALOG_FILE}.imported"));
            tributary_storage::io::rename(&legacy, &done)
                .await
                .with_context(|| format!("renaming {}", legacy.display()))?;
            tributary_storage::io::sync_dir(&config.data_dir).await?;
        }
        let bootstrap = config.data_dir.join(crate::sasl::BOOTSTRAP_SCRAM_FILE);
        if let Some(bytes) = tributary_storage::io::read_file(&bootstrap).await? {
            if let Some(cmd) = crate::sasl::bootstrap_scram_command(&bytes)? {
                self.propose_at_start(config, &cmd).await?;
                info!(file = %bootstrap.display(), "SCRAM credentials from --add-scram written to the cluster metadata");
            }
            tributary_storage::io::remove_file(&bootstrap).await?;
        }
        if self.image().cluster_id.is_empty() {
            self.propose_at_start(
                config,
                &MetadataCommand::InitCluster {
                    cluster_id: crate::catalog::new_cluster_id(),
                },
            )
            .await?;
        }
        if !c.roles.broker {
            info!(
                node = self.node_id,
                leader = ?self.quorum.leader(),
                "controller-only node joined the metadata quorum"
            );
            return Ok(());
        }
        self.propose_at_start(
            config,
            &MetadataCommand::RegisterBroker {
                id: self.node_id,
                incarnation: uuid::Uuid::new_v4().to_string(),
                host: config.advertised_host.clone(),
                port: config.advertised_port,
                listeners: config.endpoints(),
                rack: config.rack.broker_rack.clone(),
            },
        )
        .await?;
        info!(
            node = self.node_id,
            leader = ?self.quorum.leader(),
            applied = self.quorum.applied_index(),
            "registered with the metadata quorum"
        );
        Ok(())
    }

    /// Kafka's controlled shutdown, cut down: with other voters, this broker fences itself, so
    /// its partitions move to other in-sync replicas (and it leaves their ISRs) before it stops
    /// answering. Bounded: a quorum that cannot commit does not hold the shutdown up.
    pub async fn controlled_shutdown(&self, config: &BrokerConfig) {
        let image = self.image();
        let others = image.live_brokers().any(|b| b.id != self.node_id);
        if !config.cluster.roles.broker || !others {
            return;
        }
        let cmd = MetadataCommand::FenceBroker {
            id: self.node_id,
            controlled: true,
            epoch: None,
            reason: super::command::FenceReason::ControlledShutdown,
        };
        let propose = self.propose(&cmd);
        match glommio::timer::timeout(CONTROLLED_SHUTDOWN_TIMEOUT, async { Ok(propose.await) })
            .await
        {
            Ok(Ok(_)) => info!("controlled shutdown: leadership moved to other replicas"),
            Ok(Err((_, e))) => warn!(error = %e, "controlled shutdown failed; stopping anyway"),
            Err(_) => warn!("controlled shutdown timed out; stopping anyway"),
        }
    }

    /// Proposes `cmd` and returns its outcome once every shard of this node holds the image
    /// that includes it.
    pub async fn propose(&self, cmd: &MetadataCommand) -> Result<Outcome, Refusal> {
        let deadline = Instant::now() + self.no_leader_wait;
        loop {
            if self.quorum.leader().is_none() && Instant::now() < deadline {
                // An election is under way (the node just started, or the leader died).
                glommio::timer::sleep(Duration::from_millis(50)).await;
                continue;
            }
            // Retried while no leader took it (an observer's leader died, say); a proposal
            // that timed out is not: it may still commit.
            match self.quorum.propose(cmd.encode()).await {
                Err(ProposeError::NoLeader) if Instant::now() < deadline => {
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
                proposal => return self.finish(proposal).await,
            }
        }
    }

    /// Proposes a decision of the active controller of quorum term `term`: refused once this
    /// node no longer leads that term, so a deposed controller's late decision (taken from
    /// what it saw before a pause, say) never reaches the log.
    async fn propose_as_leader(
        &self,
        cmd: &MetadataCommand,
        term: u64,
    ) -> Result<Outcome, Refusal> {
        self.submit(cmd, Some(term)).await
    }

    async fn submit(&self, cmd: &MetadataCommand, term: Option<u64>) -> Result<Outcome, Refusal> {
        let proposal = match term {
            Some(term) => self.quorum.propose_as_leader(cmd.encode(), term).await,
            None => self.quorum.propose(cmd.encode()).await,
        };
        self.finish(proposal).await
    }

    async fn finish(
        &self,
        proposal: Result<(u64, Outcome), ProposeError>,
    ) -> Result<Outcome, Refusal> {
        let (index, out) = proposal.map_err(|e| {
            let code = match e {
                ProposeError::NoLeader | ProposeError::Timeout => ErrorCode::REQUEST_TIMED_OUT,
                ProposeError::NotLeader { .. } => ErrorCode::NOT_CONTROLLER,
                _ => ErrorCode::UNKNOWN_SERVER_ERROR,
            };
            (code, format!("metadata quorum: {e}"))
        })?;
        self.wait_published(index).await;
        match out {
            Outcome::Undecodable(e) => Err((ErrorCode::UNKNOWN_SERVER_ERROR, e)),
            out => Ok(out),
        }
    }

    async fn wait_published(&self, index: u64) {
        loop {
            if self.published.get() >= index {
                return;
            }
            let l = self.published_event.listen();
            if self.published.get() >= index {
                return;
            }
            l.await;
        }
    }

    /// Sends every newly applied image to every shard, in order. Runs on shard 0 for the
    /// broker's life.
    pub async fn publish_loop(self: Rc<Self>, shard: Rc<Shard>) {
        self.published.set(shard.catalog().version);
        let mut seen = self.quorum.applied_index();
        loop {
            let image = self.image();
            if image.version > self.published.get() {
                let calls = (0..shard.shards).map(|s| {
                    let catalog = image.clone();
                    call(&shard, ShardId(s), move |reply| {
                        ShardRequest::ApplyCatalog { catalog, reply }
                    })
                });
                futures::future::join_all(calls).await;
                self.published.set(image.version);
                self.published_event.notify(usize::MAX);
                continue;
            }
            let now = self.quorum.changed(seen).await;
            if now == seen {
                return; // the quorum closed
            }
            seen = now;
        }
    }

    /// The active controller's duties, checked every `broker.heartbeat.interval.ms` and at
    /// once when evidence of a broker's death arrives: fence brokers that are gone or silent
    /// for `broker.session.timeout.ms`, unfence those heard again, elect where allowed, move
    /// leadership back to preferred replicas, and create `__consumer_offsets` once its
    /// replicas are live.
    pub async fn controller_loop(self: Rc<Self>, config: Arc<BrokerConfig>) {
        let c = &config.cluster;
        let session = Duration::from_millis(c.broker_session_timeout_ms);
        let interval = Duration::from_millis(c.broker_heartbeat_interval_ms);
        let mut tenure = liveness::Tenure::default();
        let rebalance_every = Duration::from_secs(config.leader_imbalance_check_interval_seconds);
        let mut last_rebalance = Instant::now();
        let mut last_round = Instant::now();
        let mut evidence_seen = self.quorum.evidence_count();
        loop {
            // Evidence that a broker died, or this node becoming the leader, ends the wait:
            // what is left of the outage is then one commit, not the rest of an interval.
            let (leader, term) = (self.quorum.leader(), self.quorum.term());
            futures_lite::future::or(
                glommio::timer::sleep(interval),
                futures_lite::future::or(
                    self.quorum.evidence_arrived(evidence_seen),
                    self.quorum.leadership_changed(leader, term),
                ),
            )
            .await;
            evidence_seen = self.quorum.evidence_count();
            let late = last_round.elapsed().saturating_sub(interval);
            last_round = Instant::now();
            if !self.quorum.is_leader() {
                tenure.follow(self.quorum.leader().filter(|l| *l != self.node_id));
                continue;
            }
            // A controller that was itself stalled (a pause, SIGSTOP) for half a session
            // starts every session afresh: silences measured across its own stall say
            // nothing about its peers.
            tenure.lead(self.quorum.term(), late > session / 2, Instant::now());
            let term = self.quorum.term();
            self.judge_brokers(&tenure, session, term).await;
            self.elect_unclean(&config, term).await;
            if config.auto_leader_rebalance_enable && last_rebalance.elapsed() >= rebalance_every {
                last_rebalance = Instant::now();
                self.rebalance_leaders(&config, term).await;
            }
        }
    }

    /// Fences the brokers that are gone or silent and unfences those that are back (this
    /// node too, when it finds itself fenced and is not shutting down).
    async fn judge_brokers(&self, tenure: &liveness::Tenure, session: Duration, term: u64) {
        let image = self.image();
        let heard: std::collections::HashMap<i32, Option<Duration>> =
            self.quorum.peer_silence().into_iter().collect();
        let evidence: std::collections::HashMap<i32, Evidence> =
            self.quorum.peer_evidence().into_iter().collect();
        let tenure_age = tenure.age(Instant::now());
        for b in image.brokers.values().filter(|b| b.id != self.node_id) {
            let since_heard = heard.get(&b.id).copied().flatten();
            let silence =
                liveness::silence(since_heard, tenure_age, tenure.predecessor == Some(b.id));
            let gone = match evidence.get(&b.id) {
                Some(Evidence::Refused) => Some("its quorum port refused a connection"),
                Some(Evidence::Closed) if !b.fenced && endpoint_refuses(b).await => Some(
                    "its metadata fetch connection ended and its client port refused a connection",
                ),
                _ => None,
            };
            let registered = liveness::Registered {
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                fenced_as_gone: b.fenced_as_gone,
            };
            let heard = liveness::Heard {
                silence,
                gone: gone.is_some(),
            };
            let cmd = match liveness::judge(registered, heard, session) {
                liveness::Verdict::Fence(reason) => {
                    warn!(
                        broker = b.id,
                        reason = reason.name(),
                        evidence = gone.unwrap_or("none: silent past broker.session.timeout.ms"),
                        silent_ms = silence.as_millis() as u64,
                        "fencing a broker: its partitions move to other in-sync replicas"
                    );
                    MetadataCommand::FenceBroker {
                        id: b.id,
                        controlled: false,
                        epoch: Some(b.epoch),
                        reason,
                    }
                }
                liveness::Verdict::Unfence => {
                    info!(broker = b.id, "unfencing a broker that is back");
                    MetadataCommand::UnfenceBroker { id: b.id }
                }
                liveness::Verdict::Keep => continue,
            };
            if let Err((_, e)) = self.propose_as_leader(&cmd, term).await {
                warn!(broker = b.id, error = %e, "changing a broker's fencing failed");
            }
        }
        if image
            .brokers
            .get(&self.node_id)
            .is_some_and(|b| b.fenced && !b.in_controlled_shutdown)
        {
            let _ = self
                .propose_as_leader(&MetadataCommand::UnfenceBroker { id: self.node_id }, term)
                .await;
        }
    }

    /// Moves leadership back to preferred replicas (`auto.leader.rebalance.enable`).
    async fn rebalance_leaders(&self, config: &BrokerConfig, term: u64) {
        let partitions = super::placement::preferred_elections(
            &self.image(),
            config.leader_imbalance_per_broker_percentage,
        );
        if partitions.is_empty() {
            return;
        }
        info!(
            partitions = partitions.len(),
            "moving leadership back to preferred replicas"
        );
        let cmd = MetadataCommand::ElectLeaders {
            partitions,
            unclean: false,
        };
        if let Err((_, e)) = self.propose_as_leader(&cmd, term).await {
            warn!(error = %e, "leader rebalance failed");
        }
    }

    /// The command creating `__consumer_offsets`, made when a client first needs a group
    /// coordinator (FindCoordinator, as in Kafka) — `None` while it exists or must wait for its
    /// replicas: every voter registered (combined nodes) or, where brokers run apart from the
    /// controllers, as many live brokers as offsets.topic.replication.factor asks.
    pub fn offsets_topic_due(&self, config: &BrokerConfig) -> Option<MetadataCommand> {
        let c = &config.cluster;
        let image = self.image();
        let voters_registered = c
            .voters
            .iter()
            .all(|v| image.brokers.get(&v.id).is_some_and(|b| !b.fenced));
        let separate_brokers = image
            .brokers
            .keys()
            .any(|id| !c.voters.iter().any(|v| v.id == *id));
        let live = image.live_brokers().count();
        let enough = separate_brokers && live >= config.offsets_topic_replication_factor;
        if !voters_registered && !enough {
            return None;
        }
        offsets_topic_command(config, &image)
    }

    /// Kafka's unclean leader election (`unclean.leader.election.enable`, the topic's over this
    /// controller's effective broker config): each partition left with no live ISR member but
    /// with a live replica is led by that replica, at a new epoch, with itself as the ISR. Run
    /// every controller round, so it also happens when such a replica registers or is unfenced.
    async fn elect_unclean(&self, config: &Arc<BrokerConfig>, term: u64) {
        let image = self.image();
        let effective = crate::shard::effective_config(config, &image);
        let partitions =
            super::placement::unclean_elections(&image, effective.unclean_leader_election_enable);
        if partitions.is_empty() {
            return;
        }
        let cmd = MetadataCommand::ElectLeaders {
            partitions: partitions.clone(),
            unclean: true,
        };
        let items = match self.propose_as_leader(&cmd, term).await {
            Ok(Outcome::Items(items)) => items,
            Ok(other) => {
                warn!(outcome = ?other, "unclean leader election: unexpected outcome");
                return;
            }
            Err((_, e)) => {
                warn!(error = %e, "unclean leader election failed");
                return;
            }
        };
        let image = self.image();
        for (tp, item) in partitions.iter().zip(items) {
            if item.is_ok() {
                let leader = image.partition(&tp.topic, tp.partition).map(|p| p.leader);
                warn!(
                    topic = %tp.topic,
                    partition = tp.partition,
                    leader = ?leader,
                    "unclean leader election: every in-sync replica is fenced, so a replica outside the ISR now leads; records acknowledged only by the old ISR may be lost"
                );
            }
        }
    }
}

/// How long the active controller waits for a broker's client port to answer a probe. A
/// refusal comes back at once; a port that does not answer in time proves nothing.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Whether broker `b`'s registered client endpoint refuses connections: for a broker-only
/// node, whose metadata fetch connection ended, the evidence that its process is gone (a
/// paused process's kernel still accepts, so this never condemns one). An endpoint named by
/// host name is not probed: resolving it could block the shard.
async fn endpoint_refuses(b: &crate::catalog::BrokerRegistration) -> bool {
    let Ok(ip) = b.host.parse::<std::net::IpAddr>() else {
        return false;
    };
    let addr = std::net::SocketAddr::new(ip, b.port);
    match glommio::net::TcpStream::connect_timeout(addr, PROBE_TIMEOUT).await {
        Ok(_) => false,
        Err(e) => std::io::Error::from(e).kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

/// The command creating `__consumer_offsets` over the live brokers, unless it exists.
fn offsets_topic_command(config: &BrokerConfig, image: &Catalog) -> Option<MetadataCommand> {
    if image.topics.contains_key(OFFSETS_TOPIC) {
        return None;
    }
    let brokers: Vec<i32> = image.live_brokers().map(|b| b.id).collect();
    let partitions = config.offsets_topic_num_partitions;
    let rf = config.offsets_topic_replication_factor.min(brokers.len());
    let assignment = super::placement::assign_live(image, 0, partitions, rf, 0, 0).ok()?;
    let configs = [
        ("cleanup.policy".to_string(), "compact".to_string()),
        (
            "segment.bytes".to_string(),
            config.offsets_topic_segment_bytes.to_string(),
        ),
    ];
    info!(
        partitions,
        replication_factor = rf,
        "creating {OFFSETS_TOPIC}"
    );
    Some(MetadataCommand::CreateTopics {
        topics: vec![TopicMeta {
            name: OFFSETS_TOPIC.to_string(),
            id: uuid::Uuid::new_v4().to_string(),
            partitions,
            configs: configs.into_iter().collect(),
            assignment: assignment
                .into_iter()
                .map(PartitionRegistration::new)
                .collect(),
        }],
    })
}

/// A single-node catalog from before the metadata log, made whole for import: every
/// partition on `node` at epoch 0, and the producer ids it reserved. Read at start-up, before
/// any shard runs.
pub fn read_legacy(data_dir: &Path, node: i32) -> Result<Option<Catalog>> {
    #[derive(serde::Deserialize)]
    struct ProducerIdBlock {
        block_end: i64,
    }
    let Some(mut catalog) = read_checked::<Catalog>(&data_dir.join(CATALOG_FILE))? else {
        return Ok(None);
    };
    let block: Option<ProducerIdBlock> = read_checked(&data_dir.join(LEGACY_PRODUCER_ID_FILE))?;
    catalog.next_producer_id = catalog
        .next_producer_id
        .max(block.map_or(0, |b| b.block_end));
    for t in catalog.topics.values_mut() {
        if t.assignment.len() != t.partitions as usize {
            t.assignment = (0..t.partitions)
                .map(|_| PartitionRegistration::new(vec![node]))
                .collect();
        }
    }
    Ok(Some(catalog))
}
