//! The controller role, held by shard 0: the only writer of the catalog and the producer-id
//! allocator. Catalog changes are serialized, persisted before they are announced, and applied by
//! every shard before the request that made them is answered — so a client that created a topic
//! can produce to it on any connection at once.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use glommio::sync::Semaphore;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use tributary_protocol::topic::validate_topic_name;
use tributary_protocol::ErrorCode;

use crate::catalog::{read_checked, write_atomic_async, Catalog, TopicMeta, PRODUCER_ID_FILE};
use crate::routing::ShardId;
use crate::shard::{call, NewTopic, Shard, ShardRequest};
use crate::topic_config::{topic_key, validate_topic_config};

/// Producer ids are reserved in blocks; the end of the reserved block is persisted before any id
/// from it is handed out, so ids are never reused across restarts.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

#[derive(Serialize, Deserialize)]
struct ProducerIdBlock {
    block_end: i64,
}

pub struct Controller {
    lock: Semaphore,
    /// Held while a new producer-id block is persisted, so concurrent allocations wait for it
    /// rather than each reserving a block.
    producer_id_lock: Semaphore,
    next_producer_id: Cell<i64>,
    producer_id_block_end: Cell<i64>,
}

impl Controller {
    pub fn load(data_dir: &Path) -> anyhow::Result<Self> {
        let block: Option<ProducerIdBlock> = read_checked(&data_dir.join(PRODUCER_ID_FILE))?;
        let start = block.map_or(0, |b| b.block_end);
        Ok(Self {
            lock: Semaphore::new(1),
            producer_id_lock: Semaphore::new(1),
            next_producer_id: Cell::new(start),
            producer_id_block_end: Cell::new(start),
        })
    }

    pub async fn allocate_producer_id(&self, data_dir: &Path) -> Result<i64, String> {
        let _guard = self
            .producer_id_lock
            .acquire_permit(1)
            .await
            .map_err(|e| format!("producer id allocation: {e}"))?;
        let id = self.next_producer_id.get();
        if id >= self.producer_id_block_end.get() {
            let block_end = id + PRODUCER_ID_BLOCK_SIZE;
            write_atomic_async(data_dir, PRODUCER_ID_FILE, &ProducerIdBlock { block_end })
                .await
                .map_err(|e| format!("persisting the producer id block: {e:#}"))?;
            self.producer_id_block_end.set(block_end);
        }
        self.next_producer_id.set(id + 1);
        Ok(id)
    }

    async fn publish(&self, shard: &Rc<Shard>, catalog: Catalog) -> Result<(), String> {
        catalog
            .save_async(&shard.config.data_dir)
            .await
            .map_err(|e| format!("persisting the catalog: {e:#}"))?;
        let catalog = Arc::new(catalog);
        let calls = (0..shard.shards).map(|s| {
            let catalog = catalog.clone();
            call(shard, ShardId(s), move |reply| ShardRequest::ApplyCatalog {
                catalog,
                reply,
            })
        });
        futures::future::join_all(calls).await;
        Ok(())
    }

    /// Validates and creates topics; one (error, message) per input, in order.
    pub async fn create_topics(
        &self,
        shard: &Rc<Shard>,
        topics: Vec<NewTopic>,
    ) -> Vec<(ErrorCode, Option<String>)> {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); topics.len()];
        };
        let mut catalog = (*shard.catalog()).clone();
        let mut results = Vec::with_capacity(topics.len());
        let mut created = 0;
        let max = shard.broker_config().max_broker_partitions;
        for t in topics {
            match check_new_topic(&catalog, &t, max) {
                Err(e) => results.push(e),
                Ok(()) => {
                    catalog.topics.insert(
                        t.name.clone(),
                        TopicMeta {
                            name: t.name.clone(),
                            id: uuid::Uuid::new_v4().to_string(),
                            partitions: t.partitions,
                            configs: t.configs.into_iter().collect(),
                        },
                    );
                    info!(topic = %t.name, partitions = t.partitions, "creating topic");
                    created += 1;
                    results.push((ErrorCode::NONE, None));
                }
            }
        }
        if created > 0 {
            catalog.version += 1;
            if let Err(e) = self.publish(shard, catalog).await {
                warn!(error = %e, "topic creation failed");
                for r in results.iter_mut().filter(|r| r.0 == ErrorCode::NONE) {
                    *r = (ErrorCode::UNKNOWN_SERVER_ERROR, Some(e.clone()));
                }
            }
        }
        results
    }

    pub async fn delete_topics(&self, shard: &Rc<Shard>, names: Vec<String>) -> Vec<ErrorCode> {
        let Ok(_guard) = self.lock.acquire_permit(1).await else {
            return vec![ErrorCode::UNKNOWN_SERVER_ERROR; names.len()];
        };
        let mut catalog = (*shard.catalog()).clone();
        let mut results = Vec::with_capacity(names.len());
        for name in &names {
            if crate::group::is_internal(name) {
                results.push(ErrorCode::INVALID_TOPIC_EXCEPTION);
            } else if catalog.topics.remove(name).is_some() {
                info!(topic = %name, "deleting topic");
                results.push(ErrorCode::NONE);
            } else {
                results.push(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
            }
        }
        if results.contains(&ErrorCode::NONE) {
            catalog.version += 1;
            if let Err(e) = self.publish(shard, catalog).await {
                warn!(error = %e, "topic deletion failed");
                for r in results.iter_mut().filter(|r| **r == ErrorCode::NONE) {
                    *r = ErrorCode::UNKNOWN_SERVER_ERROR;
                }
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
        let mut catalog = (*shard.catalog()).clone();
        let Some(topic) = catalog.topics.get_mut(&change.topic) else {
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
        if change.validate_only || configs == topic.configs {
            return (ErrorCode::NONE, None);
        }
        info!(topic = %change.topic, ?configs, "altering topic configs");
        topic.configs = configs;
        catalog.version += 1;
        match self.publish(shard, catalog).await {
            Ok(()) => (ErrorCode::NONE, None),
            Err(e) => (ErrorCode::UNKNOWN_SERVER_ERROR, Some(e)),
        }
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
    /// How many replica assignments the client gave, when it gave any.
    pub assignments: Option<usize>,
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
        let mut catalog = (*shard.catalog()).clone();
        let mut results = Vec::with_capacity(topics.len());
        for g in &topics {
            match check_growth(&catalog, g, max) {
                Err(e) => results.push(e),
                Ok(()) => {
                    if let Some(t) = catalog.topics.get_mut(&g.topic) {
                        info!(topic = %g.topic, from = t.partitions, to = g.count, validate_only, "adding partitions");
                        t.partitions = g.count;
                    }
                    results.push((ErrorCode::NONE, None));
                }
            }
        }
        if validate_only || !results.iter().any(|r| r.0 == ErrorCode::NONE) {
            return results;
        }
        catalog.version += 1;
        if let Err(e) = self.publish(shard, catalog).await {
            warn!(error = %e, "adding partitions failed");
            for r in results.iter_mut().filter(|r| r.0 == ErrorCode::NONE) {
                *r = (ErrorCode::UNKNOWN_SERVER_ERROR, Some(e.clone()));
            }
        }
        results
    }
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
    if let Some(n) = g.assignments {
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
        let mut catalog = (*shard.catalog()).clone();
        let resource = change.broker.map_or_else(String::new, |b| b.to_string());
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
                return (
                    ErrorCode::INVALID_REQUEST,
                    Some(format!(
                        "Invalid config value for resource ConfigResource(type=BROKER, name='{resource}'): {e}"
                    )),
                );
            }
        }
        if change.validate_only || configs == current {
            return (ErrorCode::NONE, None);
        }
        info!(broker = %resource, ?configs, "altering dynamic broker configs");
        match change.broker {
            None => catalog.broker_configs.cluster = configs,
            Some(b) if configs.is_empty() => {
                catalog.broker_configs.per_broker.remove(&b);
            }
            Some(b) => {
                catalog.broker_configs.per_broker.insert(b, configs);
            }
        }
        catalog.version += 1;
        match self.publish(shard, catalog).await {
            Ok(()) => (ErrorCode::NONE, None),
            Err(e) => (ErrorCode::UNKNOWN_SERVER_ERROR, Some(e)),
        }
    }
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
