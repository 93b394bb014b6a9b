//! The metadata image: topics with their partitions' replicas, ISR and leaders, the registered
//! brokers, dynamic broker configs, SCRAM credentials, ACLs, client quotas and the liveness
//! counts — what the metadata log's commands build, one immutable `Catalog` per applied entry.
//! No I/O here: the broker persists images and snapshots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::compression::Compression;
use crate::types::{LeaderEpoch, NodeId, PartitionEpoch};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
    /// Each partition's replicas, leader and epochs, `partitions` long (empty in catalogs written
    /// before the metadata log; the import fills it).
    #[serde(default)]
    pub assignment: Vec<PartitionRegistration>,
}

/// One partition's place in the cluster, as KRaft's `PartitionRecord` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The broker serving the partition; -1 when none may (its replicas are fenced).
    pub leader: i32,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// During a reassignment (KIP-455), the target replicas not yet in the original set: they
    /// are in `replicas` and fetch, but join the ISR only once caught up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// During a reassignment, the original replicas not in the target: they leave `replicas`
    /// when the reassignment completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
}

impl PartitionRegistration {
    /// A new partition led by the first of `replicas`, at epoch 0.
    pub fn new(replicas: Vec<i32>) -> Self {
        Self {
            leader: replicas.first().copied().unwrap_or(-1),
            isr: replicas.clone(),
            replicas,
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// Its replicas as node ids (the image keeps the integers it writes).
    pub fn replica_nodes(&self) -> Vec<NodeId> {
        self.replicas.iter().map(|&r| NodeId(r)).collect()
    }

    /// Its in-sync replicas as node ids.
    pub fn isr_nodes(&self) -> Vec<NodeId> {
        self.isr.iter().map(|&r| NodeId(r)).collect()
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas a reassignment in progress moves to: `replicas` without those leaving.
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }
}

/// A registered broker, as KRaft's `RegisterBrokerRecord` and fencing records leave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: i32,
    /// Random per process start: a new one means the broker restarted.
    pub incarnation: String,
    /// The metadata log index of the registration that started this incarnation.
    pub epoch: i64,
    pub host: String,
    pub port: u16,
    pub fenced: bool,
    /// Fenced by its own controlled shutdown: stays fenced until it registers again.
    #[serde(default)]
    pub in_controlled_shutdown: bool,
    /// Fenced because its process was seen gone (its port refused a connection): stays fenced
    /// until a process registers again. The successor's quorum traffic arrives before its
    /// registration and must not bring the dead process's session back.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fenced_as_gone: bool,
    /// Its client listeners (KRaft's endpoints): a client is told each broker's endpoint on
    /// the listener it connected to. Empty in registrations written before listeners were
    /// recorded: `host:port` is then the broker's one PLAINTEXT endpoint.
    #[serde(default)]
    pub listeners: Vec<Endpoint>,
    /// `broker.rack`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// One listener of a broker: a name, where clients reach it and its security protocol id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub protocol: i16,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl BrokerRegistration {
    /// Where a client connected on `listener` reaches this broker; `None` when the broker has
    /// no such listener (Kafka leaves it out of that client's Metadata).
    pub fn endpoint(&self, listener: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|e| e.name == listener)
            .map(|e| (e.host.as_str(), e.port))
    }
}

/// One ACL, Kafka's codes as on the wire (the broker's authorizer gives them meaning).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclRecord {
    pub resource_type: i8,
    pub name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// A user's salted SCRAM credential for one mechanism, as KRaft's `UserScramCredentialRecord`
/// holds it: never the password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramRecord {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl TopicMeta {
    /// A numeric topic config: the topic's override, else `default` (the broker-level value).
    /// Overrides are validated before they are stored, so they parse.
    pub fn config_or<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.configs
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Whether `cleanup.policy` (default `delete`) includes `policy`.
    pub fn cleanup_policy_includes(&self, policy: &str) -> bool {
        self.configs
            .get("cleanup.policy")
            .map_or(policy == "delete", |p| {
                p.split(',').any(|p| p.trim() == policy)
            })
    }

    /// Whether the topic's `message.timestamp.type` is LogAppendTime; `broker_default` is
    /// `log.message.timestamp.type`'s.
    pub fn log_append_time(&self, broker_default: bool) -> bool {
        self.configs
            .get("message.timestamp.type")
            .map_or(broker_default, |t| t == "LogAppendTime")
    }

    /// The topic's `compression.type` as a codec (`None`: the producer's); `broker_default` is
    /// the broker's `compression.type`.
    pub fn compression_type(&self, broker_default: Option<i16>) -> Option<i16> {
        self.configs
            .get("compression.type")
            .and_then(|v| Compression::parse_config(v).ok())
            .map_or(broker_default, |c| c.map(Compression::id))
    }

    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::parse_str(&self.id).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub version: u64,
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Broker configs changed at runtime through AlterConfigs (absent in catalogs written before
    /// they existed).
    #[serde(default)]
    pub broker_configs: DynamicBrokerConfigs,
    /// Registered brokers by node id.
    #[serde(default)]
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// The first producer id no broker has reserved.
    #[serde(default)]
    pub next_producer_id: i64,
    /// SCRAM credentials by user, then mechanism type (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    #[serde(default)]
    pub scram: BTreeMap<String, BTreeMap<i8, ScramRecord>>,
    /// The ACLs (CreateAcls / DeleteAcls), sorted and without duplicates.
    #[serde(default)]
    pub acls: Vec<AclRecord>,
    /// Client quotas (AlterClientQuotas), one record per entity.
    #[serde(default)]
    pub client_quotas: Vec<crate::quota::QuotaRecord>,
    /// Fencings and ISR changes, counted as the log applies them.
    #[serde(default)]
    pub liveness: LivenessCounts,
    /// Consumer groups' config overrides (IncrementalAlterConfigs on the GROUP resource), by
    /// group id; a group without overrides has no entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Tiered storage: each partition's segments in the object store, by topic name, then
    /// partition (see `remote_log`). A topic's entry goes with the topic.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub remote_logs: BTreeMap<String, BTreeMap<i32, crate::remote_log::RemoteLog>>,
    /// Topic names by topic id, built on first use (fetches from v13 name topics by id).
    #[serde(skip)]
    pub topic_ids: TopicIdIndex,
}

/// What the metadata log records of brokers' liveness, counted as each entry applies: every
/// fencing by its reason (`FenceReason::name`) and every ISR change. The same on every node
/// (they apply the same log) and kept across restarts, for `tributary_broker_fencings_total`
/// and `tributary_isr_changes_total`: a run can ask any node how often a healthy broker was
/// fenced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessCounts {
    pub fencings: BTreeMap<String, u64>,
    pub isr_shrinks: u64,
    pub isr_expansions: u64,
}

/// Topic names by topic id, built from an image's topics the first time one is looked up. A
/// clone starts empty, and `cluster::command::apply` drops it before changing an image, so an
/// index is never older than its image. A lookup still checks the name it finds against the
/// topic's id.
#[derive(Debug, Default)]
pub struct TopicIdIndex(std::sync::OnceLock<std::collections::HashMap<[u8; 16], String>>);

impl Clone for TopicIdIndex {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// A cache of what the topics already say: it takes no part in comparing images.
impl PartialEq for TopicIdIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TopicIdIndex {}

impl Catalog {
    /// The image before the metadata log's first entry.
    pub fn empty() -> Self {
        Self {
            version: 0,
            cluster_id: String::new(),
            topics: BTreeMap::new(),
            broker_configs: DynamicBrokerConfigs::default(),
            brokers: BTreeMap::new(),
            next_producer_id: 0,
            scram: BTreeMap::new(),
            acls: Vec::new(),
            client_quotas: Vec::new(),
            liveness: LivenessCounts::default(),
            group_configs: BTreeMap::new(),
            remote_logs: BTreeMap::new(),
            topic_ids: TopicIdIndex::default(),
        }
    }

    /// The topic whose id is `id` (16 bytes, as the wire carries it), if it exists.
    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<&TopicMeta> {
        if id == &[0; 16] {
            return None; // no topic has the zero id (Kafka's `Uuid.ZERO_UUID`)
        }
        let index = self.topic_ids.0.get_or_init(|| {
            self.topics
                .values()
                .map(|t| (*t.uuid().as_bytes(), t.name.clone()))
                .collect()
        });
        let name = index.get(id)?;
        self.topics.get(name).filter(|t| t.uuid().as_bytes() == id)
    }

    /// The leader of `partition` of `topic` as this image knows it — (leader id, leader epoch),
    /// -1/-1 for an unknown partition — and the leader's registration when it is live, as Kafka
    /// answers NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH from Produce v10 and Fetch v16
    /// (KIP-951).
    pub fn current_leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> ((i32, i32), Option<&BrokerRegistration>) {
        let Some(p) = self.partition(topic, partition) else {
            return ((-1, -1), None);
        };
        let live = self.brokers.get(&p.leader).filter(|b| !b.fenced);
        ((p.leader, p.leader_epoch.0), live)
    }

    /// `partition` of `topic`, if both exist.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRegistration> {
        let t = self.topics.get(topic)?;
        usize::try_from(partition)
            .ok()
            .and_then(|p| t.assignment.get(p))
    }

    /// The remote log (tiered storage) of `partition` of `topic`, if anything was ever copied.
    pub fn remote_log(&self, topic: &str, partition: i32) -> Option<&crate::remote_log::RemoteLog> {
        let log = self.remote_logs.get(topic)?.get(&partition)?;
        let t = self.topics.get(topic)?;
        (log.topic_id == t.id).then_some(log)
    }

    /// Whether `node` serves `partition` of `topic`: the error a client gets when it does not —
    /// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE (no live replica) or
    /// NOT_LEADER_OR_FOLLOWER (another broker leads it).
    pub fn check_leader(
        &self,
        topic: &str,
        partition: i32,
        node: i32,
    ) -> Result<(), tributary_protocol::ErrorCode> {
        use tributary_protocol::ErrorCode as E;
        match self.partition(topic, partition) {
            None => Err(E::UNKNOWN_TOPIC_OR_PARTITION),
            Some(p) if p.leader == node => Ok(()),
            Some(p) if p.leader < 0 => Err(E::LEADER_NOT_AVAILABLE),
            Some(_) => Err(E::NOT_LEADER_OR_FOLLOWER),
        }
    }

    /// Unfenced brokers, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }
}

/// Dynamic broker configs, as Kafka keeps them: cluster-wide defaults (AlterConfigs on the
/// broker resource with an empty name) and per-broker values (named by node id), the latter
/// taking precedence. Both override the static `--config`/`--set` values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicBrokerConfigs {
    pub cluster: BTreeMap<String, String>,
    pub per_broker: BTreeMap<i32, BTreeMap<String, String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_policy_reads_topic_overrides_over_broker_defaults() {
        let mut t = TopicMeta {
            name: "t".into(),
            id: String::new(),
            partitions: 1,
            configs: BTreeMap::new(),
            assignment: Vec::new(),
        };
        assert!(!t.cleanup_policy_includes("compact"));
        assert!(t.cleanup_policy_includes("delete"));
        assert!(t.log_append_time(true));
        assert_eq!(t.compression_type(Some(3)), Some(3));
        for (k, v) in [
            ("cleanup.policy", "delete,compact"),
            ("message.timestamp.type", "CreateTime"),
            ("compression.type", "producer"),
        ] {
            t.configs.insert(k.into(), v.into());
        }
        assert!(t.cleanup_policy_includes("compact"));
        assert!(!t.log_append_time(true));
        assert_eq!(t.compression_type(Some(3)), None);
    }

    #[test]
    fn topics_are_found_by_id_and_leaders_with_their_live_endpoint() {
        let mut c = Catalog::empty();
        let id = uuid::Uuid::new_v4();
        let mut p = PartitionRegistration::new(vec![2, 1]);
        p.leader_epoch = LeaderEpoch(4);
        c.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: id.to_string(),
                partitions: 1,
                configs: BTreeMap::new(),
                assignment: vec![p],
            },
        );
        let broker = |id: i32, fenced: bool| BrokerRegistration {
            id,
            incarnation: String::new(),
            epoch: 1,
            host: format!("h{id}"),
            port: 9000 + id as u16,
            fenced,
            in_controlled_shutdown: false,
            fenced_as_gone: false,
            listeners: Vec::new(),
            rack: None,
        };
        c.brokers.insert(2, broker(2, false));
        assert_eq!(
            c.topic_by_id(id.as_bytes()).map(|t| t.name.as_str()),
            Some("t")
        );
        assert!(c.topic_by_id(uuid::Uuid::new_v4().as_bytes()).is_none());
        assert!(c.topic_by_id(&[0; 16]).is_none());
        let (leader, live) = c.current_leader("t", 0);
        assert_eq!(leader, (2, 4));
        assert_eq!(live.map(|b| (b.host.as_str(), b.port)), Some(("h2", 9002)));
        assert_eq!(c.current_leader("t", 1), ((-1, -1), None));
        // A fenced leader is named without an endpoint.
        c.brokers.insert(2, broker(2, true));
        assert_eq!(c.current_leader("t", 0), ((2, 4), None));
        // A clone is a new image: its index is built from its own topics.
        let mut next = c.clone();
        next.topics.remove("t");
        assert!(next.topic_by_id(id.as_bytes()).is_none());
        assert!(c.topic_by_id(id.as_bytes()).is_some());
    }
}
