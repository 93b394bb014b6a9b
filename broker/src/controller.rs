//! The controller role on this node, held by shard 0: every catalog change and producer-id
//! reservation is checked here against the current image, then proposed to the metadata quorum
//! as one command; the request is answered with the command's outcome once every shard of this
//! node applied it — so a client that created a topic can produce to it on any connection at once.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use glommio::sync::Semaphore;
use tracing::{info, warn};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::topic::validate_topic_name;
use tributary_protocol::ErrorCode;

use crate::catalog::{Catalog, PartitionRegistration, TopicMeta};
use crate::cluster::command::{MetadataCommand, Outcome};
use crate::cluster::node::MetadataNode;
use crate::cluster::placement;
use crate::cluster::reassign::ReassignmentTarget;
use crate::routing::ShardId;
use crate::shard::{invoke_on, Shard};
use crate::topic_config::{check_topic_remote_storage, topic_key, validate_topic_config};

/// Producer ids are reserved from the quorum in blocks, as KRaft's `AllocateProducerIds` does;
/// a reserved id is never handed out twice, across restarts and brokers.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

pub struct Controller {
    pub node: Rc<MetadataNode>,
    lock: Semaphore,
    /// Held while a new producer-id block is reserved, so concurrent allocations wait for it
    /// rather than each reserving a block.
    producer_id_lock: Semaphore,
    next_producer_id: Cell<i64>,
    producer_id_block_end: Cell<i64>,
}

#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    pub configs: Vec<(String, String)>,
    /// Manual replica assignments, one list per partition; `None`: the controller places them.
    pub assignment: Option<Vec<Vec<i32>>>,
}

/// The metadata quorum's state, for DescribeQuorum: leader, term, commit index, and each
/// voter's log end (known on the leader only).
#[derive(Debug, Clone)]
pub struct QuorumStatus {
    pub leader: Option<i32>,
    pub term: u64,
    pub commit: u64,
    pub progress: Vec<(i32, u64)>,
    /// On the leader: the broker-only nodes (observers) it hears from.
    pub observers: Vec<i32>,
}

/// This node's controller, if `shard` hosts it (shard 0 does).
pub fn of(shard: &Shard) -> Option<Rc<Controller>> {
    shard.hosted::<Controller>()
}

/// Runs `op` against this node's controller on shard 0 and awaits its answer; `None` when
/// shard 0 did not answer (it is gone) or hosts no controller.
pub async fn ask<T, F, Fut>(shard: &Rc<Shard>, op: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(Rc<Shard>, Rc<Controller>) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    invoke_on(shard, ShardId(0), move |s| async move {
        let controller = of(&s)?;
        Some(op(s, controller).await)
    })
    .await
    .flatten()
}

/// A random placement starting point (Kafka draws them at random too, so that topics created
/// one by one do not all start on the same broker).
fn random() -> usize {
    (uuid::Uuid::new_v4().as_u128() & 0xffff) as usize
}

/// Every item of a command refused for the same reason.
fn refuse_all<T: Clone>(n: usize, r: T) -> Vec<T> {
    vec![r; n]
}

impl Controller {
    pub fn new(node: Rc<MetadataNode>) -> Self {
        Self {
            node,
            lock: Semaphore::new(1),
            producer_id_lock: Semaphore::new(1),
            next_producer_id: Cell::new(0),
            producer_id_block_end: Cell::new(0),
        }
    }

    pub async fn allocate_producer_id(&self) -> Result<i64, String> {
        let _guard = self
            .producer_id_lock
            .acquire_permit(1)
            .await
            .map_err(|e| format!("producer id allocation: {e}"))?;
        let mut id = self.next_producer_id.get();
        if id >= self.producer_id_block_end.get() {
            let cmd = MetadataCommand::AllocateProducerIds {
                broker: self.node_id(),
                count: PRODUCER_ID_BLOCK_SIZE,
            };
            match self.node.propose(&cmd).await {
                Ok(Outcome::ProducerIds { start }) => {
                    id = start;
                    self.producer_id_block_end
                        .set(start + PRODUCER_ID_BLOCK_SIZE);
                }
                Ok(other) => return Err(format!("reserving producer ids: {other:?}")),
                Err((_, e)) => return Err(format!("reserving producer ids: {e}")),
            }
        }
        self.next_producer_id.set(id + 1);
        Ok(id)
    }

    /// The metadata quorum as this node sees it (DescribeQuorum).
    pub fn quorum_status(&self, config: &crate::config::BrokerConfig) -> QuorumStatus {
        let q = &self.node.quorum;
        QuorumStatus {
            leader: q.leader(),
            term: q.term(),
            commit: q.commit_index(),
            progress: q.voter_progress(),
            observers: q
                .peer_silence()
                .into_iter()
                .map(|(id, _)| id)
                .filter(|id| !config.cluster.voters.iter().any(|v| v.id == *id))
                .collect(),
        }
    }

    fn node_id(&self) -> i32 {
        self.node.node_id()
    }

    /// Proposes a command answered item by item; a refusal of the whole command becomes every
    /// item's error.
    /// `propose_items` as the per-item (error, message) pairs admin responses carry.
    async fn propose_item_codes(
        &self,
        cmd: MetadataCommand,
        n: usize,
    ) -> Vec<(ErrorCode, Option<String>)> {
        self.propose_items(cmd, n)
            .await
            .into_iter()
            .map(|r| match r {
                Ok(()) => (ErrorCode::NONE, None),
                Err((code, why)) => (code, Some(why)),
            })
            .collect()
    }

    async fn propose_items(
        &self,
        cmd: MetadataCommand,
        n: usize,
    ) -> Vec<Result<(), (ErrorCode, String)>> {
        match self.node.propose(&cmd).await {
            Ok(Outcome::Items(items)) if items.len() == n => items,
            Ok(Outcome::Done) => vec![Ok(()); n],
            Ok(Outcome::Refused(code, why)) => refuse_all(n, Err((code, why))),
            Ok(other) => refuse_all(
                n,
                Err((
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!("unexpected outcome {other:?}"),
                )),
            ),
            Err(e) => refuse_all(n, Err(e)),
        }
    }

    /// Validates, places and creates topics; one (error, message) per input, in order.
    pub async fn create_topics(
        &self,
        shard: &Rc<Shard>,
        topics: Vec<NewTopic>,
    ) -> Vec<(ErrorCode, Option<String>)> {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); topics.len()];
        };
        let catalog = self.node.image();
        let cfg = shard.broker_config();
        let max = cfg.max_broker_partitions;
        let mut results: Vec<(ErrorCode, Option<String>)> = Vec::with_capacity(topics.len());
        let mut proposed: Vec<(usize, TopicMeta)> = Vec::new();
        let mut adding = 0i64;
        for (i, t) in topics.into_iter().enumerate() {
            let checked =
                check_new_topic(&catalog, &t, max.saturating_sub(adding)).and_then(|()| {
                    check_topic_remote_storage(&cfg, t.configs.iter().map(|(k, v)| (k, v)))
                        .map_err(|e| (ErrorCode::INVALID_CONFIG, Some(e)))?;
                    if let Some(given) = &t.assignment {
                        return placement::check_manual(&catalog, given, None, 0)
                            .map(|()| given.clone())
                            .map_err(|(c, m)| (c, Some(m)));
                    }
                    let (start, shift) = (random(), random());
                    let rf = usize::try_from(t.replication_factor).unwrap_or(0);
                    placement::assign_live(&catalog, 0, t.partitions, rf, start, shift)
                        .map_err(|(c, m)| (c, Some(m)))
                });
            match checked {
                Err(e) => results.push(e),
                Ok(replicas) => {
                    adding += i64::from(t.partitions);
                    info!(topic = %t.name, partitions = t.partitions, "creating topic");
                    proposed.push((
                        i,
                        TopicMeta {
                            name: t.name.clone(),
                            id: uuid::Uuid::new_v4().to_string(),
                            partitions: t.partitions,
                            configs: t.configs.into_iter().collect(),
                            assignment: replicas
                                .into_iter()
                                .map(|r| placement::manual_registration(&catalog, r))
                                .collect(),
                        },
                    ));
                    results.push((ErrorCode::NONE, None));
                }
            }
        }
        if proposed.is_empty() {
            return results;
        }
        let at: Vec<usize> = proposed.iter().map(|(i, _)| *i).collect();
        let cmd = MetadataCommand::CreateTopics {
            topics: proposed.into_iter().map(|(_, t)| t).collect(),
        };
        for (i, r) in at.iter().zip(self.propose_items(cmd, at.len()).await) {
            if let Err((code, why)) = r {
                warn!(error = %why, "topic creation failed");
                results[*i] = (code, Some(why));
            }
        }
        results
    }

    pub async fn delete_topics(&self, _shard: &Rc<Shard>, names: Vec<String>) -> Vec<ErrorCode> {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return vec![ErrorCode::UNKNOWN_SERVER_ERROR; names.len()];
        };
        let catalog = self.node.image();
        let mut results = Vec::with_capacity(names.len());
        let mut proposed: Vec<(usize, String)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if crate::group::is_internal(name) {
                results.push(ErrorCode::INVALID_TOPIC_EXCEPTION);
            } else if catalog.topics.contains_key(name) {
                info!(topic = %name, "deleting topic");
                proposed.push((i, name.clone()));
                results.push(ErrorCode::NONE);
            } else {
                results.push(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
            }
        }
        if proposed.is_empty() {
            return results;
        }
        let at: Vec<usize> = proposed.iter().map(|(i, _)| *i).collect();
        let cmd = MetadataCommand::DeleteTopics {
            names: proposed.into_iter().map(|(_, n)| n).collect(),
        };
        for (i, r) in at.iter().zip(self.propose_items(cmd, at.len()).await) {
            if let Err((code, why)) = r {
                warn!(error = %why, "topic deletion failed");
                results[*i] = code;
            }
        }
        results
    }
}

/// One topic's config change, as AlterConfigs / IncrementalAlterConfigs ask for it.
pub struct ConfigChange {
    pub topic: String,
    /// (name, operation, value): operations as in IncrementalAlterConfigs.
    pub configs: Vec<(String, i8, Option<String>)>,
    /// AlterConfigs: the given configs replace every override.
    pub replace: bool,
    pub validate_only: bool,
}

impl Controller {
    pub async fn alter_topic_configs(
        &self,
        shard: &Rc<Shard>,
        change: ConfigChange,
    ) -> (ErrorCode, Option<String>) {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return (ErrorCode::UNKNOWN_SERVER_ERROR, None);
        };
        let catalog = self.node.image();
        let Some(topic) = catalog.topics.get(&change.topic) else {
            return (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some(format!("topic {:?} does not exist", change.topic)),
            );
        };
        let mut configs = if change.replace {
            Default::default()
        } else {
            topic.configs.clone()
        };
        for (name, op, value) in &change.configs {
            if let Err(e) = apply_config_op(&mut configs, name, *op, value.as_deref()) {
                return (ErrorCode::INVALID_CONFIG, Some(e));
            }
        }
        if let Err(e) = check_topic_remote_storage(&shard.broker_config(), &configs) {
            return (ErrorCode::INVALID_CONFIG, Some(e));
        }
        // As Kafka before KIP-950: the remote log would outlive the retention nobody enforces.
        let tiered =
            |c: &DynamicConfigs| c.get("remote.storage.enable").map(String::as_str) == Some("true");
        if tiered(&topic.configs) && !tiered(&configs) {
            return (
                ErrorCode::INVALID_CONFIG,
                Some(
                    "Disabling remote storage feature on the topic level is not supported.".into(),
                ),
            );
        }
        if change.validate_only || configs == topic.configs {
            return (ErrorCode::NONE, None);
        }
        info!(topic = %change.topic, ?configs, "altering topic configs");
        let cmd = MetadataCommand::SetTopicConfigs {
            topic: change.topic,
            configs,
        };
        self.answer(cmd).await
    }
}

/// A consumer group's config change, as AlterConfigs or IncrementalAlterConfigs asks it.
pub struct GroupConfigChange {
    pub group: String,
    /// (name, operation, value): SET and DELETE (the group configs are no lists).
    pub configs: Vec<(String, i8, Option<String>)>,
    pub replace: bool,
    pub validate_only: bool,
}

impl Controller {
    /// Changes a consumer group's own configs (KIP-848's `consumer.session.timeout.ms` and
    /// `consumer.heartbeat.interval.ms`), held to the broker's `group.consumer.min/max.*`
    /// bounds (INVALID_CONFIG naming the key and the bounds).
    pub async fn alter_group_configs(
        &self,
        limits: &crate::group::consumer::ConsumerLimits,
        change: GroupConfigChange,
    ) -> (ErrorCode, Option<String>) {
        use tributary_protocol::requests::alter_configs::{OP_DELETE, OP_SET};
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return (ErrorCode::UNKNOWN_SERVER_ERROR, None);
        };
        let catalog = self.node.image();
        let current = catalog.group_configs.get(&change.group);
        let mut configs = match current {
            Some(c) if !change.replace => c.clone(),
            _ => Default::default(),
        };
        for (name, op, value) in &change.configs {
            match *op {
                OP_SET => {
                    configs.insert(name.clone(), value.clone().unwrap_or_default());
                }
                OP_DELETE if crate::group::consumer::GROUP_CONFIG_KEYS.contains(&name.as_str()) => {
                    configs.remove(name);
                }
                _ => {
                    return (
                        ErrorCode::INVALID_CONFIG,
                        Some(format!(
                            "{name}: only SET and DELETE apply to a group config"
                        )),
                    )
                }
            }
        }
        if let Err(e) = limits.check_group_configs(&configs) {
            return (ErrorCode::INVALID_CONFIG, Some(e));
        }
        if change.validate_only
            || Some(&configs) == current
            || (configs.is_empty() && current.is_none())
        {
            return (ErrorCode::NONE, None);
        }
        info!(group = %change.group, ?configs, "altering group configs");
        let cmd = MetadataCommand::SetGroupConfigs {
            group: change.group,
            configs,
        };
        self.answer(cmd).await
    }
}

fn apply_config_op(
    configs: &mut std::collections::BTreeMap<String, String>,
    name: &str,
    op: i8,
    value: Option<&str>,
) -> Result<(), String> {
    use tributary_protocol::requests::alter_configs::{OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT};
    match op {
        OP_SET => {
            validate_topic_config(name, value)?;
            configs.insert(name.to_string(), value.unwrap_or_default().to_string());
        }
        OP_DELETE => {
            if topic_key(name).is_none() {
                return Err(format!("unknown topic config {name:?}"));
            }
            configs.remove(name);
        }
        OP_APPEND | OP_SUBTRACT if name == "cleanup.policy" => {
            let current = configs
                .get(name)
                .cloned()
                .unwrap_or_else(|| "delete".into());
            let mut items: Vec<String> = current
                .split(',')
                .map(str::to_string)
                .filter(|s| !s.is_empty())
                .collect();
            for v in value
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
            {
                if op == OP_APPEND && !items.iter().any(|i| i == v) {
                    items.push(v.to_string());
                }
                if op == OP_SUBTRACT {
                    items.retain(|i| i != v);
                }
            }
            let joined = items.join(",");
            validate_topic_config(name, Some(&joined))?;
            configs.insert(name.to_string(), joined);
        }
        OP_APPEND | OP_SUBTRACT => {
            return Err(format!(
                "{name} is not a list; APPEND and SUBTRACT apply to list configs only"
            ))
        }
        other => return Err(format!("unknown config operation {other}")),
    }
    Ok(())
}

/// The checks CreateTopics makes, shared with `validate_only` requests. The partition count is
/// checked against `max.broker.partitions` before anything is sized from it.
pub fn check_new_topic(
    catalog: &Catalog,
    t: &NewTopic,
    max_partitions: i64,
) -> Result<(), (ErrorCode, Option<String>)> {
    validate_topic_name(&t.name).map_err(|e| (ErrorCode::INVALID_TOPIC_EXCEPTION, Some(e)))?;
    if catalog.topics.contains_key(&t.name) {
        return Err((
            ErrorCode::TOPIC_ALREADY_EXISTS,
            Some(format!("topic {:?} already exists", t.name)),
        ));
    }
    if t.partitions < 1 {
        return Err((
            ErrorCode::INVALID_PARTITIONS,
            Some(format!(
                "number of partitions must be at least 1, got {}",
                t.partitions
            )),
        ));
    }
    check_partition_limit(catalog, i64::from(t.partitions), max_partitions)?;
    for (k, v) in &t.configs {
        validate_topic_config(k, Some(v)).map_err(|e| (ErrorCode::INVALID_CONFIG, Some(e)))?;
    }
    Ok(())
}

/// Partitions of every topic in `catalog`, internal ones included: they all hold files.
pub fn partition_count(catalog: &Catalog) -> i64 {
    catalog
        .topics
        .values()
        .map(|t| i64::from(t.partitions))
        .sum()
}

/// Refuses `adding` partitions that would take the broker past `max.broker.partitions`.
pub fn check_partition_limit(
    catalog: &Catalog,
    adding: i64,
    max: i64,
) -> Result<(), (ErrorCode, Option<String>)> {
    let current = partition_count(catalog);
    if current.saturating_add(adding) <= max {
        return Ok(());
    }
    Err((
        ErrorCode::POLICY_VIOLATION,
        Some(format!(
            "adding {adding} partition(s) to the {current} this broker holds would exceed max.broker.partitions={max}"
        )),
    ))
}

/// One topic of a CreatePartitions request, checked for shape by the handler.
#[derive(Debug, Clone)]
pub struct PartitionGrowth {
    pub topic: String,
    /// The new total partition count.
    pub count: i32,
    /// The replica lists the client gave for the new partitions, when it gave any (checked
    /// here, by `place_growth`, against the topic's replication factor).
    pub assignments: Option<Vec<Vec<i32>>>,
}

impl Controller {
    /// Grows topics' partition counts; one (error, message) per topic, in order. The new
    /// partitions are open on their shards before this returns.
    pub async fn create_partitions(
        &self,
        shard: &Rc<Shard>,
        topics: Vec<PartitionGrowth>,
        validate_only: bool,
    ) -> Vec<(ErrorCode, Option<String>)> {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); topics.len()];
        };
        let max = shard.broker_config().max_broker_partitions;
        let mut catalog = (*self.node.image()).clone();
        let mut results = Vec::with_capacity(topics.len());
        let mut proposed: Vec<(usize, MetadataCommand)> = Vec::new();
        for (i, g) in topics.iter().enumerate() {
            let placed = place_growth(&catalog, g, max, (random(), random()));
            match placed {
                Err(e) => results.push(e),
                Ok((from, replicas)) => {
                    info!(topic = %g.topic, from, to = g.count, validate_only, "adding partitions");
                    let added: Vec<PartitionRegistration> = replicas
                        .into_iter()
                        .map(|r| placement::manual_registration(&catalog, r))
                        .collect();
                    if let Some(t) = catalog.topics.get_mut(&g.topic) {
                        t.partitions = g.count;
                        t.assignment.extend(added.iter().cloned());
                    }
                    proposed.push((
                        i,
                        MetadataCommand::CreatePartitions {
                            topic: g.topic.clone(),
                            added,
                        },
                    ));
                    results.push((ErrorCode::NONE, None));
                }
            }
        }
        if validate_only {
            return results;
        }
        for (i, cmd) in proposed {
            let (code, why) = self.answer(cmd).await;
            if code.is_error() {
                warn!(error = ?why, "adding partitions failed");
                results[i] = (code, why);
            }
        }
        results
    }

    /// Elects leaders (preferred, or unclean for leaderless partitions); one (error, message)
    /// per partition, in order.
    pub async fn elect_leaders(
        &self,
        partitions: Vec<TopicPartition>,
        unclean: bool,
    ) -> Vec<(ErrorCode, Option<String>)> {
        let n = partitions.len();
        if n == 0 {
            return Vec::new();
        }
        let cmd = MetadataCommand::ElectLeaders {
            partitions,
            unclean,
        };
        self.propose_item_codes(cmd, n).await
    }

    /// Starts, replaces or cancels partition reassignments (KIP-455); one (error, message) per
    /// partition, in order. The checks (targets, existence, a reassignment to cancel) are made
    /// in `apply`, against the image the command meets.
    pub async fn alter_reassignments(
        &self,
        partitions: Vec<ReassignmentTarget>,
    ) -> Vec<(ErrorCode, Option<String>)> {
        let n = partitions.len();
        if n == 0 {
            return Vec::new();
        }
        for t in &partitions {
            info!(topic = %t.topic, partition = t.partition, target = ?t.replicas, "reassigning partition");
        }
        let cmd = MetadataCommand::AlterReassignments { partitions };
        self.propose_item_codes(cmd, n).await
    }

    /// Creates `__consumer_offsets` if it is due (`MetadataNode::offsets_topic_due`); whether
    /// it exists once this returns.
    pub async fn create_offsets_topic(&self, config: &crate::config::BrokerConfig) -> bool {
        let Some(cmd) = self.node.offsets_topic_due(config) else {
            return self
                .node
                .image()
                .topics
                .contains_key(crate::group::OFFSETS_TOPIC);
        };
        match self.propose_item_codes(cmd, 1).await.remove(0) {
            (ErrorCode::NONE | ErrorCode::TOPIC_ALREADY_EXISTS, _) => true,
            (code, why) => {
                tracing::warn!(error = ?code, reason = ?why, "creating {} failed; group requests wait for it", crate::group::OFFSETS_TOPIC);
                false
            }
        }
    }

    /// Proposes a command answered as a whole.
    pub async fn answer(&self, cmd: MetadataCommand) -> (ErrorCode, Option<String>) {
        match self.node.propose(&cmd).await {
            Ok(Outcome::Done) => (ErrorCode::NONE, None),
            Ok(Outcome::Refused(code, why)) | Err((code, why)) => (code, Some(why)),
            Ok(other) => (
                ErrorCode::UNKNOWN_SERVER_ERROR,
                Some(format!("unexpected outcome {other:?}")),
            ),
        }
    }
}

/// One replica list per partition, in partition order.
type ReplicaLists = Vec<Vec<i32>>;
/// Why a topic's or the broker configs' change was refused: the error code and what was wrong.
type Refusal = (ErrorCode, Option<String>);

/// Where one CreatePartitions topic's new partitions go, as (first new partition, one replica
/// list per new partition): the client's assignment, checked as Kafka checks it, or a placement
/// over the live brokers from the random `draws`. Either way each new partition gets the
/// topic's replication factor — its first partition's replica count, less the replicas a
/// reassignment in progress is adding — so an explicit assignment must name that many
/// distinct, registered brokers per partition.
fn place_growth(
    catalog: &Catalog,
    g: &PartitionGrowth,
    max: i64,
    draws: (usize, usize),
) -> Result<(i32, ReplicaLists), Refusal> {
    check_growth(catalog, g, max)?;
    let topic = catalog.topics.get(&g.topic);
    let from = topic.map_or(0, |t| t.partitions);
    let rf = topic
        .and_then(|t| t.assignment.first())
        .map_or(1, |p| p.replicas.len() - p.adding_replicas.len());
    let placed = match &g.assignments {
        Some(given) => {
            placement::check_manual(catalog, given, Some(rf), from).map(|()| given.clone())
        }
        None => placement::assign_live(catalog, from, g.count - from, rf, draws.0, draws.1),
    };
    placed.map(|r| (from, r)).map_err(|(c, m)| (c, Some(m)))
}

/// The checks Kafka's controller makes on one CreatePartitions topic, in its order.
fn check_growth(
    catalog: &Catalog,
    g: &PartitionGrowth,
    max: i64,
) -> Result<(), (ErrorCode, Option<String>)> {
    let Some(t) = catalog.topics.get(&g.topic) else {
        return Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            Some(format!("topic {:?} does not exist", g.topic)),
        ));
    };
    if g.count < t.partitions {
        return Err((
            ErrorCode::INVALID_PARTITIONS,
            Some(format!(
                "topic {} currently has {} partition(s); {} would not be an increase",
                g.topic, t.partitions, g.count
            )),
        ));
    }
    if g.count == t.partitions {
        return Err((
            ErrorCode::INVALID_PARTITIONS,
            Some(format!(
                "topic {} already has {} partition(s)",
                g.topic, t.partitions
            )),
        ));
    }
    let adding = i64::from(g.count) - i64::from(t.partitions);
    if let Some(n) = g.assignments.as_ref().map(Vec::len) {
        if i64::try_from(n).ok() != Some(adding) {
            return Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                Some(format!(
                    "attempted to add {adding} additional partition(s), but {n} assignment(s) were specified"
                )),
            ));
        }
    }
    check_partition_limit(catalog, adding, max)
}

/// A change to the dynamic broker configs, as AlterConfigs / IncrementalAlterConfigs ask for it.
pub struct BrokerConfigChange {
    /// `None`: the cluster-wide defaults (empty resource name); `Some(id)`: that broker's own.
    pub broker: Option<i32>,
    /// (name, operation, value): operations as in IncrementalAlterConfigs.
    pub configs: Vec<(String, i8, Option<String>)>,
    /// AlterConfigs: the given configs replace every dynamic value of the resource.
    pub replace: bool,
    pub validate_only: bool,
}

/// One broker resource's dynamic configs (a broker's own, or the cluster-wide defaults), by
/// name.
type DynamicConfigs = std::collections::BTreeMap<String, String>;

/// The listeners' handshakes a TLS reload serves, by listener name, and the brokers' side of
/// the inter-broker listener built from the same config.
type TlsReload = (
    std::collections::BTreeMap<String, crate::tls_acceptor::TlsAcceptor>,
    crate::inter_broker::InterBrokerSecurity,
);

impl Controller {
    /// Validates, persists (with the catalog) and announces a dynamic broker config change. Bad
    /// keys and values get INVALID_REQUEST, as Kafka answers a broker resource.
    pub async fn alter_broker_configs(
        &self,
        shard: &Rc<Shard>,
        change: BrokerConfigChange,
    ) -> (ErrorCode, Option<String>) {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return (ErrorCode::UNKNOWN_SERVER_ERROR, None);
        };
        match self.alter_broker_configs_locked(shard, change).await {
            Ok(()) => (ErrorCode::NONE, None),
            Err(refusal) => refusal,
        }
    }

    /// [`Self::alter_broker_configs`], under the controller's lock: checks the change, then
    /// (unless `validate_only`) stores the configs if they differ and installs the TLS reload
    /// the change gives on every shard of this node.
    async fn alter_broker_configs_locked(
        &self,
        shard: &Rc<Shard>,
        change: BrokerConfigChange,
    ) -> Result<(), Refusal> {
        let catalog = self.node.image();
        let resource = change.broker.map_or_else(String::new, |b| b.to_string());
        let tls_keys = per_broker_tls_keys(&change)?;
        let (current, configs) = altered_broker_configs(&catalog, &change, &resource)?;
        // The listeners' handshakes the change gives, built (the files read) and checked
        // before anything is stored.
        let reloaded =
            prepare_tls_reload(shard, &catalog, &tls_keys, &current, &configs, &resource).await?;
        if change.validate_only {
            return Ok(());
        }
        if configs != current {
            info!(broker = %resource, ?configs, "altering dynamic broker configs");
            let stored = self
                .answer(MetadataCommand::SetBrokerConfigs {
                    broker: change.broker,
                    configs,
                })
                .await;
            if stored.0 != ErrorCode::NONE {
                return Err(stored);
            }
        }
        if let Some(reload) = reloaded {
            install_tls_reload(shard, reload, &resource).await;
        }
        Ok(())
    }
}

/// The TLS keys (`ssl.*`) the change names. A keystore is one broker's: its TLS keys change
/// per broker only, as in Kafka, so naming one at the cluster level is INVALID_REQUEST.
fn per_broker_tls_keys(change: &BrokerConfigChange) -> Result<Vec<&str>, Refusal> {
    let tls_keys: Vec<&str> = change
        .configs
        .iter()
        .map(|(name, _, _)| name.as_str())
        .filter(|name| crate::config::ssl_key(name).is_some())
        .collect();
    if change.broker.is_none() && !tls_keys.is_empty() {
        return Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "Cannot update these configs at default cluster level, broker id must be specified: {}",
                tls_keys.join(", ")
            )),
        ));
    }
    Ok(tls_keys)
}

/// The resource's dynamic configs now and those the change gives, as (current, changed): a
/// replacing AlterConfigs starts from none, an incremental one from the current ones. A bad
/// key or value is INVALID_REQUEST naming the resource.
fn altered_broker_configs(
    catalog: &Catalog,
    change: &BrokerConfigChange,
    resource: &str,
) -> Result<(DynamicConfigs, DynamicConfigs), Refusal> {
    let current = match change.broker {
        None => catalog.broker_configs.cluster.clone(),
        Some(b) => catalog
            .broker_configs
            .per_broker
            .get(&b)
            .cloned()
            .unwrap_or_default(),
    };
    let mut configs = if change.replace {
        Default::default()
    } else {
        current.clone()
    };
    for (name, op, value) in &change.configs {
        if let Err(e) = apply_broker_config_op(&mut configs, name, *op, value.as_deref()) {
            return Err((
                ErrorCode::INVALID_REQUEST,
                Some(format!(
                    "Invalid config value for resource ConfigResource(type=BROKER, name='{resource}'): {e}"
                )),
            ));
        }
    }
    Ok((current, configs))
}

/// The TLS reload the change needs, built and checked: `None` when it names no TLS key and
/// leaves the stored ones as they are. A config that does not build, or handshakes that do not
/// (`tls_reload::prepare`), are INVALID_CONFIG.
async fn prepare_tls_reload(
    shard: &Rc<Shard>,
    catalog: &Catalog,
    tls_keys: &[&str],
    current: &DynamicConfigs,
    configs: &DynamicConfigs,
    resource: &str,
) -> Result<Option<TlsReload>, Refusal> {
    // A replacing AlterConfigs may drop stored TLS keys without naming them: a reload too.
    let ssl_values = |c: &DynamicConfigs| {
        c.iter()
            .filter(|(k, _)| crate::config::ssl_key(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    if tls_keys.is_empty() && ssl_values(current) == ssl_values(configs) {
        return Ok(None);
    }
    let candidate = match shard
        .config
        .with_dynamic(&[&catalog.broker_configs.cluster, configs])
    {
        Ok(c) => c,
        Err(e) => return Err((ErrorCode::INVALID_CONFIG, Some(e))),
    };
    match crate::tls_reload::prepare(shard.tls_acceptors(), candidate).await {
        Ok(built) => Ok(Some(built)),
        Err(e) => {
            warn!(broker = %resource, error = %e, "refusing a TLS reload");
            Err((ErrorCode::INVALID_CONFIG, Some(e)))
        }
    }
}

/// Installs a stored TLS reload on every shard of this node, one after another in shard order,
/// and returns once each serves the new handshakes to the connections it accepts next.
async fn install_tls_reload(shard: &Rc<Shard>, reload: TlsReload, resource: &str) {
    let (acceptors, inter_broker) = reload;
    // Answered once every shard of this node serves the new handshakes.
    let listeners: Vec<String> = acceptors.keys().cloned().collect();
    for to in (0..shard.shards).map(crate::routing::ShardId) {
        if to == shard.id {
            shard.install_tls(acceptors.clone());
            shard.set_inter_broker(inter_broker.clone());
            continue;
        }
        let (reply, installed) = futures::channel::oneshot::channel();
        let request = crate::shard::ShardRequest::InstallTls {
            acceptors: acceptors.clone(),
            inter_broker: inter_broker.clone(),
            reply,
        };
        shard.forward(to, request).await;
        let _ = installed.await;
    }
    info!(broker = %resource, ?listeners, "TLS keystores and truststores reloaded for new connections");
    crate::tls_reload::log_served(&acceptors, "reloaded");
}

fn apply_broker_config_op(
    configs: &mut std::collections::BTreeMap<String, String>,
    name: &str,
    op: i8,
    value: Option<&str>,
) -> Result<(), String> {
    use tributary_protocol::requests::alter_configs::{OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT};
    match op {
        OP_SET => {
            let Some(value) = value else {
                return Err(format!("{name} has a null value"));
            };
            crate::config::validate_dynamic(name, value)?;
            configs.insert(name.to_string(), value.to_string());
        }
        OP_DELETE => {
            if !crate::config::is_dynamic(name) {
                // Validates the key only: the error says read-only or unknown.
                crate::config::validate_dynamic(name, "")?;
            }
            configs.remove(name);
        }
        OP_APPEND | OP_SUBTRACT => {
            return Err(format!(
                "{name} is not a list; APPEND and SUBTRACT apply to list configs only"
            ))
        }
        other => return Err(format!("unknown config operation {other}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::command::apply;

    /// Brokers 1–4 registered; topic `t` with two partitions on brokers 1–3 (three replicas).
    fn image() -> Catalog {
        let mut image = Catalog::empty();
        for id in 1..=4 {
            let cmd = MetadataCommand::RegisterBroker {
                id,
                incarnation: "x".into(),
                host: "127.0.0.1".into(),
                port: 9000,
                listeners: Vec::new(),
                rack: None,
            };
            apply(&mut image, id as u64, &cmd.encode());
        }
        let topic = TopicMeta {
            name: "t".into(),
            id: String::new(),
            partitions: 2,
            configs: Default::default(),
            assignment: vec![
                PartitionRegistration::new(vec![1, 2, 3]),
                PartitionRegistration::new(vec![2, 3, 1]),
            ],
        };
        image.topics.insert("t".into(), topic);
        image
    }

    fn growth(count: i32, assignments: Option<Vec<Vec<i32>>>) -> PartitionGrowth {
        PartitionGrowth {
            topic: "t".into(),
            count,
            assignments,
        }
    }

    fn place(g: &PartitionGrowth) -> Result<(i32, ReplicaLists), (ErrorCode, String)> {
        place_growth(&image(), g, i64::MAX, (0, 0)).map_err(|(c, m)| (c, m.unwrap_or_default()))
    }

    #[test]
    fn an_explicit_assignment_gets_the_topics_replication_factor() {
        let given = vec![vec![4, 1, 2], vec![3, 4, 1]];
        assert_eq!(
            place(&growth(4, Some(given.clone()))).unwrap(),
            (2, given),
            "the replicas exactly as given, first the preferred leader"
        );
        let (from, placed) = place(&growth(3, None)).unwrap();
        assert_eq!(from, 2);
        assert!(placed.iter().all(|r| r.len() == 3), "{placed:?}");
    }

    #[test]
    fn a_bad_explicit_assignment_says_what_is_wrong() {
        let why = |a: Vec<Vec<i32>>, count| {
            let (code, msg) = place(&growth(count, Some(a))).unwrap_err();
            assert_eq!(code, ErrorCode::INVALID_REPLICA_ASSIGNMENT, "{msg}");
            msg
        };
        let m = why(vec![vec![1, 2]], 3);
        assert!(
            m.contains("with 2 replica(s)") && m.contains("which have 3"),
            "{m}"
        );
        let m = why(vec![vec![1, 2, 3, 4]], 3);
        assert!(m.contains("with 4 replica(s)"), "{m}");
        let m = why(vec![vec![1, 2, 1]], 3);
        assert!(m.contains("broker 1 more than once"), "{m}");
        let m = why(vec![vec![1, 2, 9]], 3);
        assert!(
            m.contains("broker 9, but no such broker is registered"),
            "{m}"
        );
        let m = why(vec![vec![1, 2, 3]], 4);
        assert!(m.contains("add 2 additional partition(s), but 1"), "{m}");
    }
}
