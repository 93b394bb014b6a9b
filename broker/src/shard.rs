//! A shard: one pinned executor's state. It owns the partitions `shard_for` assigns it, serves
//! requests forwarded by other shards, and reads its own copy of the catalog. Shard 0 is also the
//! controller: it alone changes the catalog and allocates producer ids.
//!
//! Cross-shard messages are `Send` values on bounded channels; replies come back on one-shot
//! channels. Nothing here is shared between threads except those channels and immutable
//! catalog snapshots.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use event_listener::Event;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use tracing::{info, warn};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::ErrorCode;
use tributary_storage::group_commit::SyncPolicy;
use tributary_storage::io::WriteDurability;
use tributary_storage::{LogConfig, Partition, PartitionError};

use crate::catalog::{partition_dir, Catalog};
use crate::config::BrokerConfig;
use crate::group::{GroupConfig, GroupCoordinator, OFFSETS_TOPIC};
use crate::limits::SpareFrames;
use crate::limits::{ConnectionLimits, ConnectionQuotas, RequestMemory};
use crate::metrics::Stage;
use crate::partition_dirs;
use crate::replica::LeaderEpoch;
use crate::routing::{shard_for, ShardId};

#[derive(Debug, Clone, Copy)]
pub struct ProduceResult {
    pub error: ErrorCode,
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// The time the broker stamped on the batch (`message.timestamp.type=LogAppendTime`), or -1.
    pub log_append_time_ms: i64,
    /// When the owning shard answered (the batch durable, or refused): the start of the
    /// response's `respond` stage.
    pub answered: Option<Instant>,
}

impl ProduceResult {
    pub fn failed(error: ErrorCode) -> Self {
        ProduceResult {
            error,
            base_offset: -1,
            log_start_offset: -1,
            log_append_time_ms: -1,
            answered: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct FetchResult {
    pub error: ErrorCode,
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// The partition's last stable offset as of the read (-1 with an error).
    pub last_stable_offset: i64,
    /// For a READ_COMMITTED read, the aborted transactions overlapping `records`.
    pub aborted_transactions: Vec<(i64, i64)>,
    /// The partition's count of bytes made visible, as of the high watermark above: a waiting
    /// fetch measures new data against it (`Partition::visible_bytes`).
    pub visible_bytes: u64,
}

/// What this shard's fetches have read, for tests and operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Partition reads (each goes to the log; answers from the high watermark alone are not
    /// counted).
    pub reads: u64,
    /// Record bytes those reads returned.
    pub read_bytes: u64,
    /// Fetch sessions held.
    pub sessions: usize,
}

/// Work that runs on the shard it is sent to, decided by the module that sends it (Redpanda's
/// `invoke_on`): the shard runs it without knowing what it does, so it names none of the
/// modules that send work — coordinators, the controller, replication, fetch waits, markers.
pub struct ShardTask(Box<dyn FnOnce(Rc<Shard>) -> LocalBoxFuture<'static, ()> + Send>);

impl ShardTask {
    /// `work` is sent to the shard and builds its future there, so only the closure (what it
    /// captures) must be `Send`, not the future.
    pub fn new<F, Fut>(work: F) -> Self
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        ShardTask(Box::new(move |shard| Box::pin(work(shard))))
    }

    async fn run(self, shard: Rc<Shard>) {
        (self.0)(shard).await
    }
}

/// What this shard hosts beyond its own state, kept by type so that the shard names none of
/// them: the controller on shard 0 (`controller::of`).
#[derive(Default)]
pub struct Hosted(Vec<Rc<dyn Any>>);

impl Hosted {
    pub fn with<T: 'static>(mut self, service: Option<Rc<T>>) -> Self {
        if let Some(s) = service {
            self.0.push(s);
        }
        self
    }

    fn get<T: 'static>(&self) -> Option<Rc<T>> {
        self.0.iter().find_map(|s| s.clone().downcast::<T>().ok())
    }
}

/// Work sent to the shard that owns it.
pub enum ShardRequest {
    Produce {
        topic: String,
        partition: i32,
        batch: Bytes,
        acks: i16,
        /// How long an acks=all batch may wait for the ISR (the request's `timeout_ms`).
        timeout_ms: i32,
        /// When the connection's shard handed it over: the start of its `hop` stage.
        sent: Instant,
        reply: oneshot::Sender<ProduceResult>,
    },
    /// Reads up to `max_bytes` at `offset`. With `hard_limit` a first batch larger than
    /// `max_bytes` is not returned (nor read), and `max_bytes` 0 reads nothing: the reply
    /// carries the partition's watermarks only.
    Fetch {
        topic: String,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        hard_limit: bool,
        /// READ_COMMITTED: records below the last stable offset only, with the aborted
        /// transactions among them.
        read_committed: bool,
        reply: oneshot::Sender<FetchResult>,
    },
    /// This shard's fetch counters.
    FetchStats { reply: oneshot::Sender<FetchStats> },
    /// This shard's metrics, for a scrape of the metrics endpoint.
    Metrics {
        reply: oneshot::Sender<crate::metrics::MetricsSnapshot>,
    },
    ListOffset {
        topic: String,
        partition: i32,
        timestamp: i64,
        /// READ_COMMITTED: LATEST is the last stable offset, and a timestamp lookup finds only
        /// offsets below it.
        read_committed: bool,
        reply: oneshot::Sender<(ErrorCode, i64, i64)>,
    },
    /// Where `epoch` ends in one partition's epoch cache (OffsetForLeaderEpoch): (error,
    /// epoch, end offset).
    EpochEndOffset {
        topic: String,
        partition: i32,
        epoch: i32,
        reply: oneshot::Sender<(ErrorCode, i32, i64)>,
    },
    /// Bytes of each owned partition's segment files (DescribeLogDirs).
    PartitionSizes {
        reply: oneshot::Sender<Vec<(TopicPartition, i64)>>,
    },
    /// DeleteRecords for one partition: replies with the new log start offset.
    DeleteRecords {
        topic: String,
        partition: i32,
        offset: i64,
        reply: oneshot::Sender<(ErrorCode, i64)>,
    },
    ApplyCatalog {
        catalog: Arc<Catalog>,
        reply: oneshot::Sender<()>,
    },
    /// Serve these TLS listeners' handshakes (by name) to new connections: a reloaded keystore.
    InstallTls {
        acceptors: std::collections::BTreeMap<String, crate::tls_acceptor::TlsAcceptor>,
        inter_broker: crate::inter_broker::InterBrokerSecurity,
        reply: oneshot::Sender<()>,
    },
    /// Stop accepting, finish in-flight requests.
    Drain { reply: oneshot::Sender<()> },
    /// Work its sender's module decides, run on this shard (`invoke_on`).
    Run(ShardTask),
    /// Flush and close every owned partition, then stop the executor.
    Stop { reply: oneshot::Sender<()> },
}

pub struct Shard {
    pub id: ShardId,
    pub shards: usize,
    /// The static config, as started (`--config`, `--set`).
    pub config: Arc<BrokerConfig>,
    /// The effective config: `config` with the catalog's dynamic broker configs applied.
    broker_config: RefCell<Arc<BrokerConfig>>,
    /// The TLS listeners' handshakes by listener name, for the connections accepted next
    /// (`tls_reload`).
    tls: RefCell<std::collections::BTreeMap<String, crate::tls_acceptor::TlsAcceptor>>,
    /// This shard's client listeners by name, for the connections other shards hand to it.
    listeners: RefCell<std::collections::BTreeMap<String, Rc<crate::sasl::ListenerCtx>>>,
    /// How this broker connects to the others (set at start-up and by a TLS reload).
    inter_broker: RefCell<crate::inter_broker::InterBrokerSecurity>,
    /// Idle connections to other brokers, for markers and KIP-890 verification.
    pub broker_connections: crate::inter_broker::ConnectionPool,
    /// The ACLs of the current image, indexed; `None` without an authorizer.
    authorizer: RefCell<Option<Rc<tributary_security::acl::Authorizer>>>,
    /// What each (user, client id) produced and fetched through this shard, for quotas.
    pub(crate) quota_sensors: RefCell<crate::quota::QuotaSensors>,
    /// When this shard's image first showed each fenced broker fenced (Metadata keeps
    /// listing it for a while: `handlers::metadata::listed`).
    pub(crate) fenced_since: RefCell<std::collections::HashMap<i32, Instant>>,
    peers: Vec<async_channel::Sender<ShardRequest>>,
    catalog: RefCell<Arc<Catalog>>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    hosted: Hosted,
    pub groups: GroupCoordinator,
    /// `__consumer_offsets` partitions whose groups this shard has loaded: those this node
    /// leads. Group requests for the others are refused (NOT_COORDINATOR).
    pub groups_loaded: RefCell<std::collections::HashSet<i32>>,
    pub txns: crate::txn::TxnCoordinator,
    /// `__transaction_state` partitions whose transactional ids this shard has loaded: those
    /// this node leads.
    pub txns_loaded: RefCell<std::collections::HashSet<i32>>,
    pub draining: Cell<bool>,
    pub drain_event: Event,
    pub inflight: Cell<usize>,
    pub inflight_event: Event,
    /// Produce requests this shard's connections received (for the durability figures logged
    /// at shutdown).
    pub produce_requests: Cell<u64>,
    /// Batches appended to this shard's partitions.
    pub batches_appended: Cell<u64>,
    /// Open connections of the whole broker, shared by every shard's accept loop.
    pub connections: Arc<ConnectionQuotas>,
    /// What this node's quorum transport doubts of other nodes' processes (Metadata does not
    /// name a doubted node as a leader).
    pub doubts: Arc<tributary_quorum::PeerDoubts>,
    /// `queued.max.request.bytes`: memory this shard's connections may hold in requests.
    pub request_memory: RequestMemory,
    /// Large request buffers kept for reuse by this shard's connections.
    pub spare_frames: SpareFrames,
    /// Connections refused at accept by a connection limit.
    pub connections_refused: Cell<u64>,
    /// Connections this shard handed to the shard owning what they produce to.
    pub connections_handed_over: Cell<u64>,
    /// Partition reads made for fetches, and the record bytes they returned.
    pub fetch_reads: Cell<u64>,
    pub fetch_read_bytes: Cell<u64>,
    /// Fetch sessions of consumers connected to this shard.
    pub fetch_sessions: RefCell<crate::fetch_session::SessionCache>,
    /// Replication state of the partitions this shard owns.
    pub replicas: crate::replica::ShardReplicas,
    /// Request latencies and per-topic traffic (`metrics.rs`).
    pub metrics: crate::metrics::ShardMetrics,
    /// When the owning shards answered the produce response a connection's writer is about to
    /// write: set by the response future as it completes, taken by the writer at once (one
    /// thread, nothing runs between), so the `respond` stage starts when the data was durable
    /// rather than when the writer got to it.
    pub response_ready: Cell<Option<Instant>>,
}

impl Shard {
    pub fn new(
        id: ShardId,
        config: Arc<BrokerConfig>,
        peers: Vec<async_channel::Sender<ShardRequest>>,
        catalog: Arc<Catalog>,
        hosted: Hosted,
        connections: Arc<ConnectionQuotas>,
        doubts: Arc<tributary_quorum::PeerDoubts>,
    ) -> Self {
        let groups = GroupCoordinator::new(group_config(&config));
        let txns = crate::txn::TxnCoordinator::new(crate::txn::TxnConfig {
            max_timeout_ms: config.transaction_max_timeout_ms,
            partitions: config.transaction_state_log_num_partitions,
            id_expiration_ms: i64::try_from(config.transactional_id_expiration_ms)
                .unwrap_or(i64::MAX),
        });
        let request_memory = RequestMemory::new(config.queued_max_request_bytes);
        let broker_config = RefCell::new(effective_config(&config, &catalog));
        let authorizer = RefCell::new(crate::authz::build(&config, &catalog.acls));
        // Kafka's cache size is per broker; each shard holds its share.
        let session_slots = config
            .max_incremental_fetch_session_cache_slots
            .div_ceil(peers.len().max(1));
        let broker_connections =
            crate::inter_broker::ConnectionPool::new(config.inter_broker_connections_idle_max);
        let quota_sensors = RefCell::new(crate::quota::QuotaSensors::new(config.quota_window));
        Self {
            id,
            groups,
            shards: peers.len(),
            config,
            broker_config,
            tls: Default::default(),
            listeners: Default::default(),
            inter_broker: Default::default(),
            broker_connections,
            authorizer,
            quota_sensors,
            fenced_since: RefCell::new(std::collections::HashMap::new()),
            peers,
            catalog: RefCell::new(catalog),
            partitions: RefCell::new(HashMap::new()),
            hosted,
            draining: Cell::new(false),
            drain_event: Event::new(),
            inflight: Cell::new(0),
            inflight_event: Event::new(),
            produce_requests: Cell::new(0),
            batches_appended: Cell::new(0),
            connections,
            doubts,
            request_memory,
            spare_frames: SpareFrames::default(),
            connections_refused: Cell::new(0),
            connections_handed_over: Cell::new(0),
            fetch_reads: Cell::new(0),
            fetch_read_bytes: Cell::new(0),
            replicas: Default::default(),
            groups_loaded: RefCell::new(std::collections::HashSet::new()),
            txns,
            txns_loaded: RefCell::new(std::collections::HashSet::new()),
            fetch_sessions: RefCell::new(crate::fetch_session::SessionCache::new(session_slots)),
            metrics: crate::metrics::ShardMetrics::default(),
            response_ready: Cell::new(None),
        }
    }

    /// The service of type `T` this shard hosts, if it hosts one.
    pub fn hosted<T: 'static>(&self) -> Option<Rc<T>> {
        self.hosted.get()
    }

    /// The shard's authorizer (`None`: no `authorizer.class.name`, everything is allowed).
    pub fn authorizer(&self) -> Option<Rc<tributary_security::acl::Authorizer>> {
        self.authorizer.borrow().clone()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.borrow().clone()
    }

    /// Whether any client quota is set: the quota checks return at once when none is, without
    /// taking the catalog.
    pub fn has_client_quotas(&self) -> bool {
        !self.catalog.borrow().client_quotas.is_empty()
    }

    /// The effective broker config: the static config with the dynamic broker configs of the
    /// current catalog snapshot applied (per-broker over cluster-wide over static). Code that
    /// honours a dynamic key reads it here, per use, instead of from `config`; a change made by
    /// AlterConfigs is visible on every shard before that request is answered.
    pub fn broker_config(&self) -> Arc<BrokerConfig> {
        self.broker_config.borrow().clone()
    }

    /// How to connect to another broker.
    pub fn inter_broker(&self) -> crate::inter_broker::InterBrokerSecurity {
        self.inter_broker.borrow().clone()
    }

    pub fn set_inter_broker(&self, security: crate::inter_broker::InterBrokerSecurity) {
        self.inter_broker.replace(security);
    }

    /// Serves client listener `ctx` on this shard: connections other shards hand over find it
    /// by its name.
    pub fn add_listener(&self, ctx: Rc<crate::sasl::ListenerCtx>) {
        self.listeners.borrow_mut().insert(ctx.name.clone(), ctx);
    }

    /// This shard's client listener `name`.
    pub fn listener(&self, name: &str) -> Option<Rc<crate::sasl::ListenerCtx>> {
        self.listeners.borrow().get(name).cloned()
    }

    /// The handshake a new connection on TLS listener `name` gets.
    pub fn tls_acceptor(&self, name: &str) -> Option<crate::tls_acceptor::TlsAcceptor> {
        self.tls.borrow().get(name).cloned()
    }

    /// All TLS listeners' handshakes, as served now.
    pub fn tls_acceptors(
        &self,
    ) -> std::collections::BTreeMap<String, crate::tls_acceptor::TlsAcceptor> {
        self.tls.borrow().clone()
    }

    /// Serves `acceptors` (by listener name) to the connections accepted from now on; other
    /// listeners keep theirs.
    pub fn install_tls(
        &self,
        acceptors: std::collections::BTreeMap<String, crate::tls_acceptor::TlsAcceptor>,
    ) {
        self.tls.borrow_mut().extend(acceptors);
    }

    pub fn owner(&self, topic: &str, partition: i32) -> ShardId {
        shard_for(topic, partition, self.shards)
    }

    /// The log settings of `topic`: its overrides over the broker defaults. A topic whose
    /// cleanup policy does not include `delete` keeps its data whatever the retention settings.
    fn log_config(&self, catalog: &Catalog, topic: &str) -> LogConfig {
        let c = &*self.broker_config();
        let Some(t) = catalog.topics.get(topic) else {
            return LogConfig::DEFAULT;
        };
        let policy = |name: &str| {
            t.configs
                .get("cleanup.policy")
                .map_or(name == "delete", |p| p.split(',').any(|p| p.trim() == name))
        };
        let deletes = policy("delete");
        let retention = |key: &str, default: i64| {
            if deletes {
                t.config_or(key, default)
            } else {
                -1
            }
        };
        let retention_ms = retention("retention.ms", c.log_retention_ms);
        let retention_bytes = retention("retention.bytes", c.log_retention_bytes);
        // -2: the whole log's retention, as Kafka's `local.retention.*`.
        let local = |key: &str, default: i64, whole: i64| match t.config_or(key, default) {
            -2 => whole,
            v => v,
        };
        LogConfig {
            segment_bytes: t.config_or("segment.bytes", c.log_segment_bytes),
            segment_ms: t.config_or("segment.ms", c.log_roll_ms),
            retention_ms,
            retention_bytes,
            remote_storage: c.tiered.enabled
                && t.configs
                    .get("remote.storage.enable")
                    .is_some_and(|v| v == "true"),
            local_retention_ms: local("local.retention.ms", c.log_local_retention_ms, retention_ms),
            local_retention_bytes: local(
                "local.retention.bytes",
                c.log_local_retention_bytes,
                retention_bytes,
            ),
            flush_messages: t.config_or("flush.messages", c.log_flush_interval_messages),
            flush_ms: t.config_or("flush.ms", c.log_flush_interval_ms),
            index_interval_bytes: t.config_or("index.interval.bytes", c.log_index_interval_bytes),
            compact: policy("compact"),
            delete_retention_ms: t.config_or(
                "delete.retention.ms",
                c.cleaner.log_cleaner_delete_retention_ms,
            ),
            min_cleanable_dirty_ratio: t.config_or(
                "min.cleanable.dirty.ratio",
                c.cleaner.log_cleaner_min_cleanable_ratio,
            ),
            cleaner_buffer_bytes: c.cleaner.log_cleaner_dedupe_buffer_size,
            cleaner_batch_inflated_max_bytes: c.cleaner.log_cleaner_batch_inflated_max_bytes,
            write_ahead_bytes: c.log_write_ahead_bytes,
            zero_ahead_bytes: c.log_segment_zero_ahead_bytes,
            read_ahead_budget_bytes: c.log_read_ahead_budget_bytes,
            tail_cache_partition_bytes: c.log_tail_cache_partition_bytes,
            tail_cache_budget_bytes: c.log_tail_cache_bytes,
            sync_policy: SyncPolicy {
                syncfs_min_files: c.log_flush_syncfs_min_files,
                syncfs_max_dirty_bytes: c.log_flush_syncfs_max_dirty_bytes,
            },
            write_durability: match c.log_flush_write_through {
                true => WriteDurability::EachWrite,
                false => WriteDurability::OnSync,
            },
            producer_id_expiration_ms: c.producer_id_expiration_ms,
            producer_state_max_producers: c.producer_state_partition_max_producers,
        }
    }

    /// Sends `req` to shard `to`; a request for this shard is handled in place.
    pub async fn send(self: &Rc<Self>, to: ShardId, req: ShardRequest) {
        if to == self.id {
            self.clone().handle(req).await;
        } else {
            self.forward(to, req).await;
        }
    }

    pub(crate) async fn forward(&self, to: ShardId, req: ShardRequest) {
        if self.peers[to.0].send(req).await.is_err() {
            warn!(shard = to.0, "shard is gone; request dropped");
        }
    }

    /// Hands `req` to shard `to` without waiting for it to be handled: a request for this shard
    /// becomes a task. Requests dispatched in order start in order (tasks run first-in
    /// first-out, channels are FIFO), which keeps one connection's appends to a partition in order.
    pub async fn dispatch(self: &Rc<Self>, to: ShardId, req: ShardRequest) {
        if to == self.id {
            glommio::spawn_local(self.clone().handle(req)).detach();
        } else {
            self.forward(to, req).await;
        }
    }

    /// Opens the partitions of `catalog` this shard owns and deletes those of vanished topics.
    pub async fn apply_catalog(self: &Rc<Self>, catalog: Arc<Catalog>) {
        if catalog.version < self.catalog().version {
            return;
        }
        let old = self.catalog.replace(catalog.clone());
        self.take_image_settings(&old, &catalog);
        self.delete_vanished_partitions(&old, &catalog).await;
        for topic in catalog.topics.values() {
            let config = self.log_config(&catalog, &topic.name);
            for (p, placed) in (0..topic.partitions).zip(&topic.assignment) {
                // Partitions of other brokers are not this node's to hold.
                if self.owner(&topic.name, p) != self.id
                    || !placed.replicas.contains(&self.config.node_id)
                {
                    continue;
                }
                let key = TopicPartition::new(topic.name.clone(), p);
                let existing = self.partitions.borrow().get(&key).cloned();
                match existing {
                    Some(part) => part.set_config(config),
                    None => self.open_placed_partition(topic, p, placed, config).await,
                }
            }
        }
        self.apply_replica_roles(&catalog).await;
    }

    /// What an image sets besides partitions: fencing times, the coordinators' partition
    /// counts, the ACLs and the dynamic broker configs.
    fn take_image_settings(&self, old: &Catalog, catalog: &Catalog) {
        crate::catalog::note_fencings(&mut self.fenced_since.borrow_mut(), catalog, Instant::now());
        if let Some(t) = catalog.topics.get(OFFSETS_TOPIC) {
            self.groups.set_offsets_partitions(t.partitions);
        }
        if let Some(t) = catalog.topics.get(crate::txn::TXN_TOPIC) {
            self.txns.set_partitions(t.partitions);
        }
        if old.acls != catalog.acls {
            self.authorizer
                .replace(crate::authz::build(&self.config, &catalog.acls));
        }
        if old.broker_configs != catalog.broker_configs {
            let effective = effective_config(&self.config, catalog);
            // The counts are shared by every shard: shard 0, the controller's, sets their limits.
            if self.id == ShardId(0) {
                self.connections
                    .set_limits(ConnectionLimits::from_config(&effective));
            }
            self.broker_config.replace(effective);
        }
    }

    /// Deletes the partitions this shard holds that `catalog` no longer places on this node,
    /// or whose topic was deleted and created again (a new topic id) since `old`.
    async fn delete_vanished_partitions(&self, old: &Catalog, catalog: &Catalog) {
        let mut gone: Vec<TopicPartition> = Vec::new();
        for key in self.partitions.borrow().keys() {
            let topic = &key.topic;
            let keep = catalog
                .partition(topic, key.partition)
                .is_some_and(|r| r.replicas.contains(&self.config.node_id))
                && old.topics.get(topic).map(|t| &t.id) == catalog.topics.get(topic).map(|t| &t.id);
            if !keep {
                gone.push(key.clone());
            }
        }
        for key in gone {
            self.delete_remote_objects(old, catalog, &key);
            // Its replication state goes with it: a topic recreated under the same name starts
            // at leader and partition epoch 0, and must not inherit the old one's followers
            // (their log ends would hold the new high watermark) nor its follow.
            self.replicas.leading.borrow_mut().remove(&key);
            self.replicas.following.borrow_mut().remove(&key);
            let part = self.partitions.borrow_mut().remove(&key);
            if let Some(part) = part {
                // Writes waiting on it are answered now (NOT_LEADER_OR_FOLLOWER), not at their
                // timeout.
                part.wake_waiters();
                if let Err(e) = part.delete().await {
                    warn!(topic = %key.topic, partition = key.partition, error = %e, "deleting partition failed");
                }
            }
        }
    }

    /// Opens partition `p` of `topic`, newly placed on this shard. A directory left by an
    /// earlier topic of the same name is set aside first; one that cannot be read or set
    /// aside stays closed (logged), as does one that fails to open.
    async fn open_placed_partition(
        &self,
        topic: &crate::catalog::TopicMeta,
        p: i32,
        placed: &crate::catalog::PartitionRegistration,
        config: LogConfig,
    ) {
        let dir = partition_dir(&self.config.data_dir, &topic.name, p);
        let recorded = match partition_dirs::recorded_topic_id(&dir).await {
            Ok(id) => id,
            Err(e) => {
                warn!(topic = %topic.name, partition = p, error = %e, "reading the partition's topic id failed; not opening it");
                return;
            }
        };
        if let Some(id) = recorded.as_deref().filter(|id| *id != topic.id) {
            // An earlier topic of this name (deleted while this node was down): its data must
            // not become the new topic's.
            let why = format!(
                "it holds topic id {id}, but topic {} is now {}",
                topic.name, topic.id
            );
            if let Err(e) = partition_dirs::set_aside(&dir, Some(id), &why).await {
                warn!(topic = %topic.name, partition = p, error = %e, "setting a stray partition aside failed; not opening it");
                return;
            }
        }
        // A replicated partition's high watermark follows its ISR, not its flushes, from the
        // moment it opens: it restarts from its checkpoint, not the log end.
        let opened = if placed.replicas.len() > 1 {
            Partition::open_replicated(dir.clone(), config).await
        } else {
            Partition::open(dir.clone(), config).await
        };
        match opened {
            Ok(part) => {
                if recorded.as_deref() != Some(topic.id.as_str()) {
                    if let Err(e) = partition_dirs::record_topic_id(&dir, &topic.id).await {
                        warn!(topic = %topic.name, partition = p, error = %e, "recording the partition's topic id failed");
                    }
                }
                self.partitions
                    .borrow_mut()
                    .insert(TopicPartition::new(topic.name.clone(), p), part);
            }
            Err(e) => {
                warn!(topic = %topic.name, partition = p, error = %e, "opening partition failed")
            }
        }
    }

    /// At start-up, after the first image is applied: sets aside every partition directory of
    /// this shard that the image does not place on this node (see `partition_dirs`).
    pub async fn set_aside_strays(&self) {
        let catalog = self.catalog();
        let dirs = match partition_dirs::list(&self.config.data_dir).await {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "listing the data directory for stray partitions failed");
                return;
            }
        };
        for key in dirs {
            if self.owner(&key.topic, key.partition) != self.id
                || self.partitions.borrow().contains_key(&key)
            {
                continue;
            }
            let (topic, p) = (key.topic, key.partition);
            let dir = partition_dir(&self.config.data_dir, &topic, p);
            let Ok(id) = partition_dirs::recorded_topic_id(&dir).await else {
                continue;
            };
            let node = self.config.node_id;
            if partition_dirs::belongs(&catalog, node, &topic, p, id.as_deref()) {
                continue;
            }
            let why = match catalog.topics.get(&topic) {
                None => format!("topic {topic} does not exist"),
                Some(t) if id.as_deref().is_some_and(|id| id != t.id) => format!(
                    "it holds topic id {}, but topic {topic} is now {}",
                    id.as_deref().unwrap_or_default(),
                    t.id
                ),
                Some(_) => format!("partition {topic}-{p} is not placed on node {node}"),
            };
            if let Err(e) = partition_dirs::set_aside(&dir, id.as_deref(), &why).await {
                warn!(dir = %dir.display(), error = %e, "setting a stray partition aside failed");
            }
        }
    }

    /// The `__consumer_offsets` partition holding `group`, if this shard owns it.
    pub fn group_log(&self, group: &str) -> Option<Rc<Partition>> {
        let p = self.groups.group_partition(group);
        if !self.groups_loaded.borrow().contains(&p) {
            return None;
        }
        self.partition(OFFSETS_TOPIC, p)
    }

    /// The `__transaction_state` partition holding `id`, if this shard owns and has loaded it.
    pub fn txn_log(&self, id: &str) -> Option<Rc<Partition>> {
        let p = self.txns.partition_of(id);
        if !self.txns_loaded.borrow().contains(&p) {
            return None;
        }
        self.partition(crate::txn::TXN_TOPIC, p)
    }

    /// The shard coordinating transactional id `id`.
    pub fn txn_owner(&self, id: &str) -> ShardId {
        self.owner(crate::txn::TXN_TOPIC, self.txns.partition_of(id))
    }

    /// The shard coordinating `group`.
    pub fn group_owner(&self, group: &str) -> ShardId {
        self.owner(OFFSETS_TOPIC, self.groups.group_partition(group))
    }

    /// Every partition this shard holds.
    pub(crate) fn owned_partitions(&self) -> Vec<(TopicPartition, Rc<Partition>)> {
        self.partitions
            .borrow()
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    }

    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&TopicPartition::new(topic, partition))
            .cloned()
    }

    /// Each owned partition with the bytes its segment files hold on disk. The listings run on
    /// the executor's blocking thread, as every file-system call but segment I/O does.
    async fn partition_sizes(&self) -> Vec<(TopicPartition, i64)> {
        let parts: Vec<(TopicPartition, std::path::PathBuf)> = self
            .partitions
            .borrow()
            .iter()
            .map(|(k, p)| (k.clone(), p.dir().to_path_buf()))
            .collect();
        tributary_storage::io::blocking(move || {
            Ok(parts
                .into_iter()
                .map(|(key, dir)| {
                    let bytes: u64 = std::fs::read_dir(&dir)
                        .map(|d| {
                            d.flatten()
                                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                                .filter_map(|e| e.metadata().ok())
                                .map(|m| m.len())
                                .sum()
                        })
                        .unwrap_or(0);
                    (key, i64::try_from(bytes).unwrap_or(i64::MAX))
                })
                .collect())
        })
        .await
        .unwrap_or_default()
    }

    /// This shard's counters and the gauges of its partitions, for a metrics scrape.
    fn metrics_snapshot(&self) -> crate::metrics::MetricsSnapshot {
        let catalog = self.catalog();
        let recorded = self.metrics.snapshot(|t| catalog.topics.contains_key(t));
        let mut partitions: Vec<crate::metrics::PartitionGauges> = self
            .partitions
            .borrow()
            .iter()
            .map(|(key, p)| crate::metrics::PartitionGauges {
                topic: key.topic.clone(),
                partition: key.partition,
                high_watermark: p.high_watermark(),
                log_end_offset: p.log_end_offset(),
                log_start_offset: p.log_start_offset(),
                size_bytes: p.size_bytes(),
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let (mut tail_cache_hits, mut read_ahead_hits, mut disk_chunk_reads) = (0, 0, 0);
        for p in self.partitions.borrow().values() {
            tail_cache_hits += p.tail_cache_hits();
            read_ahead_hits += p.read_ahead_hits();
            disk_chunk_reads += p.disk_chunk_reads();
        }
        let memory = &self.request_memory;
        let limited = self.config.queued_max_request_bytes.is_some();
        crate::metrics::MetricsSnapshot {
            shard: self.id.0,
            recorded,
            group_offsets: self.groups.committed_offsets(),
            partitions,
            sync: tributary_storage::group_commit::stats(),
            fetch_reads: self.fetch_reads.get(),
            fetch_read_bytes: self.fetch_read_bytes.get(),
            connections_refused: self.connections_refused.get(),
            connections_handed_over: self.connections_handed_over.get(),
            produce_requests: self.produce_requests.get(),
            batches_appended: self.batches_appended.get(),
            tail_cache_hits,
            read_ahead_hits,
            disk_chunk_reads,
            remote: self.remote_stats(),
            request_memory: limited.then(|| {
                let capacity = memory.capacity();
                (capacity, capacity.saturating_sub(memory.available()))
            }),
        }
    }

    pub fn owned_partition_count(&self) -> usize {
        self.partitions.borrow().len()
    }

    /// Handles one request addressed to this shard: the partitions', then the shard's own.
    pub async fn handle(self: Rc<Self>, req: ShardRequest) {
        let Some(req) = self.handle_partition(req).await else {
            return;
        };
        self.handle_shard(req).await;
    }

    /// Reads and writes of the partitions this shard owns; other requests come back.
    async fn handle_partition(self: &Rc<Self>, req: ShardRequest) -> Option<ShardRequest> {
        match req {
            ShardRequest::Produce {
                topic,
                partition,
                batch,
                acks,
                timeout_ms,
                sent,
                reply,
            } => {
                self.metrics
                    .observe_stage(Stage::ProduceHop, sent.elapsed());
                let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
                let mut out = self
                    .produce_local(&topic, partition, batch, acks, timeout)
                    .await;
                out.answered = Some(Instant::now());
                let _ = reply.send(out);
            }
            ShardRequest::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
                hard_limit,
                read_committed,
                reply,
            } => {
                let read = FetchRead {
                    offset,
                    max_bytes,
                    hard_limit,
                    read_committed,
                };
                let out = self.fetch_local(&topic, partition, read).await;
                let _ = reply.send(out);
            }
            ShardRequest::ListOffset {
                topic,
                partition,
                timestamp,
                read_committed,
                reply,
            } => {
                let out = self
                    .list_offset_local(&topic, partition, timestamp, read_committed)
                    .await;
                let _ = reply.send(out);
            }
            ShardRequest::DeleteRecords {
                topic,
                partition,
                offset,
                reply,
            } => {
                let out = match self.partition(&topic, partition) {
                    None => (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1),
                    Some(part) => match part.delete_records(offset).await {
                        // Boxed: it proposes through the controller, whose closure may run
                        // on this very shard's `handle`.
                        Ok(low) => {
                            let remote =
                                self.delete_remote_records(&topic, partition, &part, offset, low);
                            Box::pin(remote).await
                        }
                        Err(e) => (partition_error_code(&e), -1),
                    },
                };
                let _ = reply.send(out);
            }
            ShardRequest::EpochEndOffset {
                topic,
                partition,
                epoch,
                reply,
            } => {
                let out = self.epoch_end_offset(&topic, partition, epoch);
                let _ = reply.send(out);
            }
            other => return Some(other),
        }
        None
    }

    /// The shard's own state: metrics, catalog, TLS, drain and stop.
    async fn handle_shard(self: &Rc<Self>, req: ShardRequest) {
        match req {
            ShardRequest::FetchStats { reply } => {
                let _ = reply.send(FetchStats {
                    reads: self.fetch_reads.get(),
                    read_bytes: self.fetch_read_bytes.get(),
                    sessions: self.fetch_sessions.borrow().len(),
                });
            }
            ShardRequest::Metrics { reply } => {
                let _ = reply.send(self.metrics_snapshot());
            }
            ShardRequest::PartitionSizes { reply } => {
                let _ = reply.send(self.partition_sizes().await);
            }
            ShardRequest::ApplyCatalog { catalog, reply } => {
                self.apply_catalog(catalog).await;
                let _ = reply.send(());
            }
            ShardRequest::InstallTls {
                acceptors,
                inter_broker,
                reply,
            } => {
                self.install_tls(acceptors);
                self.set_inter_broker(inter_broker);
                let _ = reply.send(());
            }
            ShardRequest::Run(task) => task.run(self.clone()).await,
            ShardRequest::Drain { reply } => {
                self.drain().await;
                let _ = reply.send(());
            }
            ShardRequest::Stop { reply } => {
                // Handled by the shard's message loop, which must exit afterwards.
                let _ = reply.send(());
            }
            // Routed by the handlers above; dropping it fails its caller's
            // `call` rather than hanging it.
            _ => tracing::error!("a shard request reached no handler"),
        }
    }
    /// OffsetForLeaderEpoch of one partition: (error, epoch, end offset).
    fn epoch_end_offset(&self, topic: &str, partition: i32, epoch: i32) -> (ErrorCode, i32, i64) {
        match self.partition(topic, partition) {
            None => (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
            Some(p) if p.is_offline() => (ErrorCode::KAFKA_STORAGE_ERROR, -1, -1),
            // An empty log has no batch to start its epoch yet: the epoch it is led
            // in ends at its (empty) end, as a Kafka leader's cache says once it
            // takes the partition.
            Some(p) if p.latest_epoch().is_none() && epoch == p.leader_epoch() => {
                (ErrorCode::NONE, epoch, p.log_end_offset())
            }
            Some(p) => {
                let (e, end) = p.end_offset_for(epoch);
                (ErrorCode::NONE, e, end)
            }
        }
    }

    async fn produce_local(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
        timeout: Duration,
    ) -> ProduceResult {
        let deadline = Instant::now() + timeout;
        let Some(part) = self.partition(topic, partition) else {
            return ProduceResult::failed(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        };
        let at = ProduceAt {
            part: &part,
            topic,
            partition,
            acks,
            deadline,
        };
        match self.produce_to(at, batch).await {
            Ok(result) => result,
            Err(code) => ProduceResult::failed(code),
        }
    }

    /// Appends `batch` to the partition and answers once it is as safe as `acks` asks: on the
    /// leader's disk (acks=1 and acks=0, whose request is not answered on the wire), held by
    /// the ISR as well (acks=all).
    async fn produce_to(
        &self,
        at: ProduceAt<'_>,
        batch: Bytes,
    ) -> Result<ProduceResult, ErrorCode> {
        let epoch = self.produce_epoch(&at)?;
        let (batch, log_append_time_ms) = self.stamp_log_append_time(at.topic, batch);
        // An acks=all batch waits its turn for room in the partition's replication backlog.
        let turn = match epoch {
            Some(e) if at.acks == -1 => {
                let waited_from = Instant::now();
                let turn = self
                    .append_turn(at.part, at.topic, at.partition, batch.len(), e, at.deadline)
                    .await;
                self.metrics
                    .observe_stage(Stage::ProduceBacklog, waited_from.elapsed());
                Some(turn?)
            }
            _ => None,
        };
        let append_start = Instant::now();
        let appended = match epoch {
            Some(e) => at.part.append_with_epoch(&batch, e.0).await,
            None => at.part.append(&batch).await,
        };
        drop(turn);
        let appended_at = Instant::now();
        self.metrics
            .observe_stage(Stage::ProduceAppend, appended_at - append_start);
        let outcome = appended.map_err(|e| partition_error_code(&e))?;
        self.batches_appended.set(self.batches_appended.get() + 1);
        if !outcome.duplicate {
            let records = outcome.last_offset - outcome.base_offset + 1;
            let records = u64::try_from(records).unwrap_or(0);
            self.metrics.produced(at.topic, batch.len(), records);
        }
        let end = outcome.last_offset + 1;
        self.make_durable(&at, end, appended_at).await?;
        if let Some(epoch) = epoch {
            self.acknowledge_replicated(&at, end, epoch).await?;
        }
        Ok(ProduceResult {
            error: ErrorCode::NONE,
            base_offset: outcome.base_offset,
            log_start_offset: outcome.log_start_offset,
            log_append_time_ms,
            answered: None,
        })
    }

    /// The leader epoch a replicated partition's append carries (`None`: one replica, no
    /// replication state). This shard must lead it — the handler checked an image that may
    /// have changed since — and acks=all needs enough replicas in sync.
    fn produce_epoch(&self, at: &ProduceAt<'_>) -> Result<Option<LeaderEpoch>, ErrorCode> {
        // A partition with one replica has no replication state to look up: the common case
        // pays no map lookup (and no key allocation) per batch.
        if !at.part.is_replicated() {
            return Ok(None);
        }
        let epoch = self
            .leader_epoch_of(at.topic, at.partition)
            .ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)?;
        if at.acks == -1 {
            self.check_min_isr(at.topic, at.partition)?;
        }
        Ok(Some(epoch))
    }

    /// With LogAppendTime the broker's clock stamps the batch here, on the owning shard, just
    /// before the append: a copy of the batch with its timestamp type, max timestamp and CRC
    /// rewritten, as Kafka's LogValidator does in place. The time stamped, or -1.
    fn stamp_log_append_time(&self, topic: &str, batch: Bytes) -> (Bytes, i64) {
        let log_append_time = self.catalog().topics.get(topic).is_some_and(|t| {
            t.log_append_time(self.broker_config().log_message_timestamp_log_append_time)
        });
        if !log_append_time {
            return (batch, -1);
        }
        let now = now_ms();
        let mut stamped = batch.to_vec();
        tributary_protocol::record_batch::set_log_append_time(&mut stamped, now);
        (Bytes::from(stamped), now)
    }

    /// Makes the log durable up to `end` as the partition's flush policy promises. An acks=0
    /// batch waits too, though no answer is sent: its request holds its share of
    /// `queued.max.request.bytes` until then, so a flood of acks=0 requests is read only as
    /// fast as the disk takes it (as Kafka's page cache holds an acks=0 producer to the
    /// kernel's dirty-page limit), not into memory without bound.
    async fn make_durable(
        &self,
        at: &ProduceAt<'_>,
        end: i64,
        appended_at: Instant,
    ) -> Result<(), ErrorCode> {
        let committed = at.part.commit(end).await;
        self.metrics
            .observe_stage(Stage::ProduceDurable, appended_at.elapsed());
        committed.map_err(|e| partition_error_code(&e))
    }

    /// For a replicated partition: acks=all waits until the ISR holds the batch (within the
    /// request's timeout); any other acks lets the high watermark follow.
    async fn acknowledge_replicated(
        &self,
        at: &ProduceAt<'_>,
        end: i64,
        epoch: LeaderEpoch,
    ) -> Result<(), ErrorCode> {
        if at.acks != -1 {
            self.advance_high_watermark(at.topic, at.partition);
            return Ok(());
        }
        let durable_at = Instant::now();
        let left = at.deadline.saturating_duration_since(durable_at);
        let waited = self
            .wait_replicated(at.part, at.topic, at.partition, end, epoch, left)
            .await;
        self.metrics
            .observe_stage(Stage::ProduceReplicate, durable_at.elapsed());
        waited.map_err(|code| match code {
            ErrorCode::REQUEST_TIMED_OUT => self.acks_all_timed_out(at.topic, at.partition),
            _ => code,
        })
    }

    async fn fetch_local(&self, topic: &str, partition: i32, read: FetchRead) -> FetchResult {
        let FetchRead {
            offset,
            max_bytes,
            hard_limit,
            read_committed,
        } = read;
        let Some(part) = self.partition(topic, partition) else {
            return FetchResult {
                error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                records: Bytes::new(),
                high_watermark: -1,
                log_start_offset: -1,
                last_stable_offset: -1,
                aborted_transactions: Vec::new(),
                visible_bytes: 0,
            };
        };
        // Below the local log: the remote log store's, with tiered storage.
        if offset < part.log_start_offset() && !part.is_offline() {
            if let Some(out) = self.fetch_remote(topic, partition, &part, read).await {
                return out;
            }
        }
        // Taken before the read starts: the read sees the same high watermark, as nothing runs
        // between this and the read's first await.
        let visible_bytes = part.visible_bytes();
        let last_stable_offset = part.last_stable_offset();
        let log_start_offset = self.log_start_with_remote(topic, partition, &part);
        let watermarks = |error| FetchResult {
            error,
            records: Bytes::new(),
            high_watermark: part.high_watermark(),
            log_start_offset,
            last_stable_offset,
            aborted_transactions: Vec::new(),
            visible_bytes,
        };
        // An offset the log holds but may not show yet (above the high watermark, at most the
        // log end) is empty, not out of range, as in Kafka's `LocalLog.read`: a follower
        // serving a consumer (KIP-392) may trail the leader's high watermark the consumer read
        // up to, and a new leader's high watermark may trail what its predecessor showed.
        let held = offset > part.high_watermark() && offset <= part.log_end_offset();
        if held && !part.is_offline() {
            return watermarks(ErrorCode::NONE);
        }
        if hard_limit && max_bytes == 0 {
            // No bytes left in the response: answer from the watermarks, read nothing.
            let error = if part.is_offline() {
                ErrorCode::KAFKA_STORAGE_ERROR
            } else if offset < part.log_start_offset() || offset > part.high_watermark() {
                ErrorCode::OFFSET_OUT_OF_RANGE
            } else {
                ErrorCode::NONE
            };
            return watermarks(error);
        }
        self.fetch_reads.set(self.fetch_reads.get() + 1);
        let read_start = Instant::now();
        let read = match (read_committed, hard_limit) {
            (true, within) => part.read_committed(offset, max_bytes, within).await,
            (false, true) => part.read_within(offset, max_bytes).await,
            (false, false) => part.read(offset, max_bytes).await,
        };
        self.metrics
            .observe_stage(Stage::FetchRead, read_start.elapsed());
        match read {
            Ok(r) => {
                self.fetch_read_bytes
                    .set(self.fetch_read_bytes.get() + r.records.len() as u64);
                self.metrics.fetched(topic, r.records.len());
                let aborted_transactions = match end_of_batches(&r.records) {
                    Some(upto) if read_committed => part.aborted_transactions(offset, upto),
                    _ => Vec::new(),
                };
                FetchResult {
                    error: ErrorCode::NONE,
                    records: r.records,
                    high_watermark: r.high_watermark,
                    log_start_offset: log_start_offset.min(r.log_start_offset),
                    last_stable_offset,
                    aborted_transactions,
                    visible_bytes,
                }
            }
            Err(e) => watermarks(partition_error_code(&e)),
        }
    }

    async fn list_offset_local(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        read_committed: bool,
    ) -> (ErrorCode, i64, i64) {
        use tributary_protocol::requests::list_offsets::{
            EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
            LATEST_TIMESTAMP, MAX_TIMESTAMP,
        };
        let Some(part) = self.partition(topic, partition) else {
            return (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1);
        };
        if part.is_offline() {
            return (ErrorCode::KAFKA_STORAGE_ERROR, -1, -1);
        }
        let lookup = match timestamp {
            // With tiered storage the log may begin in the remote store (KIP-405).
            EARLIEST_TIMESTAMP => {
                return (
                    ErrorCode::NONE,
                    self.log_start_with_remote(topic, partition, &part),
                    -1,
                )
            }
            EARLIEST_LOCAL_TIMESTAMP => return (ErrorCode::NONE, part.log_start_offset(), -1),
            LATEST_TIMESTAMP if read_committed => {
                return (ErrorCode::NONE, part.last_stable_offset(), -1)
            }
            LATEST_TIMESTAMP => return (ErrorCode::NONE, part.high_watermark(), -1),
            // The last offset copied to the remote store; -1 when nothing is.
            LATEST_TIERED_TIMESTAMP => {
                let catalog = self.catalog();
                let copied = catalog
                    .remote_log(topic, partition)
                    .map_or(0, |l| l.copied_end());
                return (ErrorCode::NONE, copied - 1, -1);
            }
            // The first record carrying the log's largest timestamp.
            MAX_TIMESTAMP => match part.max_timestamp() {
                Some(max) => max,
                None => return (ErrorCode::NONE, -1, -1),
            },
            t if t < 0 => return (ErrorCode::UNSUPPORTED_VERSION, -1, -1),
            t => t,
        };
        let inflated_max = usize::try_from(
            self.broker_config()
                .cleaner
                .log_cleaner_batch_inflated_max_bytes,
        )
        .unwrap_or(usize::MAX);
        if let Some(found) = self
            .remote_offset_for_timestamp(
                topic,
                partition,
                lookup,
                part.log_start_offset(),
                inflated_max,
            )
            .await
        {
            return found.map_or_else(|code| (code, -1, -1), |(o, ts)| (ErrorCode::NONE, o, ts));
        }
        match part.offset_for_timestamp(lookup).await {
            // As Kafka: READ_COMMITTED finds nothing at or past the last stable offset.
            Ok(Some((offset, _))) if read_committed && offset >= part.last_stable_offset() => {
                (ErrorCode::NONE, -1, -1)
            }
            Ok(Some((offset, ts))) => (ErrorCode::NONE, offset, ts),
            Ok(None) => (ErrorCode::NONE, -1, -1),
            Err(e) => (partition_error_code(&e), -1, -1),
        }
    }

    async fn drain(&self) {
        self.draining.set(true);
        self.drain_event.notify(usize::MAX);
        let deadline =
            Instant::now() + Duration::from_millis(self.config.shutdown_drain_timeout_ms);
        while self.inflight.get() > 0 {
            let l = self.inflight_event.listen();
            if self.inflight.get() == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                warn!(
                    shard = self.id.0,
                    inflight = self.inflight.get(),
                    "drain timed out"
                );
                break;
            }
            futures_lite::future::or(l, glommio::timer::sleep(deadline - now)).await;
        }
    }

    /// Deletes what retention allows from every owned partition, and forgets its idle producers
    /// (`producer.id.expiration.ms`), every `log.retention.check.interval.ms`.
    pub async fn enforce_retention(&self) {
        let parts: Vec<(TopicPartition, Rc<Partition>)> = self
            .partitions
            .borrow()
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        let now_ms = now_ms();
        for (key, part) in parts {
            if part.is_offline() {
                continue;
            }
            part.expire_producers(now_ms);
            if let Err(e) = part.enforce_retention(now_ms).await {
                warn!(topic = %key.topic, partition = key.partition, error = %e, "retention failed");
            }
        }
    }

    /// Runs a cleaning pass on each owned compacted partition with enough new data
    /// (`log.cleaner.backoff.ms`).
    pub async fn clean_partitions(&self) {
        let parts: Vec<(TopicPartition, Rc<Partition>)> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(_, p)| p.needs_cleaning())
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (key, part) in parts {
            if self.draining.get() {
                return;
            }
            if let Err(e) = part.clean(now_ms()).await {
                warn!(topic = %key.topic, partition = key.partition, error = %e, "cleaning failed");
            }
        }
    }

    /// Flushes and closes every owned partition.
    pub async fn close_partitions(&self) {
        let sync = tributary_storage::group_commit::stats();
        info!(
            shard = self.id.0,
            produce_requests = self.produce_requests.get(),
            batches_appended = self.batches_appended.get(),
            sync_rounds = sync.rounds,
            files_synced = sync.files,
            syncfs = sync.syncfs,
            fdatasyncs = sync.fdatasyncs,
            syncfs_skipped_dirty = sync.syncfs_skipped_dirty,
            written_through = sync.written_through,
            "durability since start"
        );
        let parts: Vec<_> = self.partitions.borrow_mut().drain().collect();
        for (key, part) in parts {
            if let Err(e) = part.close().await {
                warn!(topic = %key.topic, partition = key.partition, error = %e, "closing partition failed");
            }
        }
        info!(shard = self.id.0, "partitions closed");
    }

    pub fn request_started(&self) {
        self.inflight.set(self.inflight.get() + 1);
    }

    pub fn request_finished(&self) {
        self.inflight.set(self.inflight.get() - 1);
        self.inflight_event.notify(usize::MAX);
    }
}

/// `config` with the dynamic broker configs of `catalog` applied. The controller validated them
/// before storing them; a value that no longer applies (say, a key made read-only by an upgrade)
/// is ignored with a warning rather than stopping the broker.
pub(crate) fn effective_config(config: &Arc<BrokerConfig>, catalog: &Catalog) -> Arc<BrokerConfig> {
    let d = &catalog.broker_configs;
    let empty = Default::default();
    let own = d.per_broker.get(&config.node_id).unwrap_or(&empty);
    match config.with_dynamic(&[&d.cluster, own]) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            warn!(error = %e, "ignoring the dynamic broker configs");
            config.clone()
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn group_config(c: &BrokerConfig) -> GroupConfig {
    use crate::group::state::GroupLimits;
    GroupConfig {
        limits: GroupLimits {
            max_size: c.group_max_size,
            min_session_timeout: Duration::from_millis(c.group_min_session_timeout_ms),
            max_session_timeout: Duration::from_millis(c.group_max_session_timeout_ms),
            initial_rebalance_delay: Duration::from_millis(c.group_initial_rebalance_delay_ms),
        },
        consumer: c.group_consumer,
        offset_metadata_max_bytes: c.offset_metadata_max_bytes,
        offsets_retention: Duration::from_secs(c.offsets_retention_minutes * 60),
        offsets_partitions: c.offsets_topic_num_partitions,
    }
}

/// One partition read of a client's fetch, as `ShardRequest::Fetch` asks for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchRead {
    pub offset: i64,
    pub max_bytes: usize,
    pub hard_limit: bool,
    pub read_committed: bool,
}

/// The offset after the last of the whole batches in `records` (`None` when there are none):
/// the end of what a read returned, for its aborted transactions.
pub(crate) fn end_of_batches(records: &[u8]) -> Option<i64> {
    let mut position = 0;
    let mut end = None;
    while let Ok(h) = tributary_protocol::record_batch::parse_header(&records[position..], position)
    {
        if records.len() - position < h.size() {
            break;
        }
        end = Some(h.last_offset() + 1);
        position += h.size();
    }
    end
}

pub fn partition_error_code(e: &PartitionError) -> ErrorCode {
    use tributary_storage::producer_state::SequenceError;
    match e {
        PartitionError::Storage { .. } => ErrorCode::KAFKA_STORAGE_ERROR,
        PartitionError::Corrupt { .. } => ErrorCode::CORRUPT_MESSAGE,
        PartitionError::OffsetOutOfRange { .. } => ErrorCode::OFFSET_OUT_OF_RANGE,
        PartitionError::Sequence(SequenceError::OutOfOrder { .. }) => {
            ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        }
        PartitionError::Sequence(SequenceError::StaleEpoch { .. }) => {
            ErrorCode::INVALID_PRODUCER_EPOCH
        }
        PartitionError::Sequence(SequenceError::CoordinatorFenced { .. }) => {
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        }
    }
}

/// Runs `work` on shard `to` (in place when it is this one) and awaits its result; `None` when
/// that shard dropped the work unrun (it is gone).
pub async fn invoke_on<T, F, Fut>(shard: &Rc<Shard>, to: ShardId, work: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let (tx, rx) = oneshot::channel();
    let task = ShardTask::new(move |shard| async move {
        let _ = tx.send(work(shard).await);
    });
    shard.send(to, ShardRequest::Run(task)).await;
    rx.await.ok()
}

/// Sends a request built around a fresh reply channel and awaits the reply.
pub async fn call<T>(
    shard: &Rc<Shard>,
    to: ShardId,
    build: impl FnOnce(oneshot::Sender<T>) -> ShardRequest,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    shard.send(to, build(tx)).await;
    rx.await.ok()
}

/// Where one produce batch goes and how safe its answer must be.
struct ProduceAt<'a> {
    part: &'a Rc<Partition>,
    topic: &'a str,
    partition: i32,
    acks: i16,
    /// When the request's timeout ends.
    deadline: Instant,
}
