//! The metadata log's commands and how each changes the image (`Catalog`): a pure function, run
//! by every node on every committed entry in log order, so every node holds the same image.
//!
//! A proposer checks a change against its image first (config values, limits, names) and sends
//! only what it decided: topic ids and replica placement are in the command. What can change
//! between the check and the commit — another node creating the same topic, say — is decided
//! here, from the image alone, and the proposer is told through the outcome. Nothing here may
//! read a clock, a config or the disk. The names follow KRaft's records (`RegisterBrokerRecord`,
//! `FenceBrokerRecord`, `TopicRecord`, `PartitionRecord`, `ConfigRecord`, `ProducerIdsRecord`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tributary_protocol::ErrorCode;

use crate::catalog::{BrokerRegistration, Catalog, PartitionRegistration, TopicMeta};
use crate::reassign::{self, ReassignmentTarget};
use crate::types::{LeaderEpoch, NodeId, PartitionEpoch, TopicPartition};

/// Leader of a partition with no live replica (Kafka's `NO_LEADER`).
pub const NO_LEADER: i32 = -1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataCommand {
    /// Names the cluster; the first one committed wins and later ones change nothing.
    InitCluster {
        cluster_id: String,
    },
    /// Seeds an empty image with a single-node catalog written before the metadata log existed.
    ImportCatalog {
        catalog: Box<Catalog>,
    },
    /// A broker (re)starting: its endpoint, unfenced, and the partitions it leads back online.
    RegisterBroker {
        id: i32,
        incarnation: String,
        host: String,
        port: u16,
        #[serde(default)]
        listeners: Vec<crate::catalog::Endpoint>,
        /// `broker.rack` (KIP-36): placement spreads replicas over racks, and consumers may
        /// fetch from a replica in their own (KIP-392).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rack: Option<String>,
    },
    /// Kafka's AlterUserScramCredentials: credentials set (user, mechanism type, credential)
    /// and removed (user, mechanism type). Deleting one that does not exist changes nothing.
    AlterScramCredentials {
        upsert: Vec<(String, i8, crate::catalog::ScramRecord)>,
        delete: Vec<(String, i8)>,
    },
    /// Kafka's CreateAcls (bindings already validated by the proposer); one already there is
    /// kept once.
    CreateAcls {
        acls: Vec<crate::catalog::AclRecord>,
    },
    /// Kafka's AlterClientQuotas: per entity, values set (`Some`) or removed (`None`); an
    /// entity left with no value goes.
    AlterClientQuotas {
        changes: Vec<crate::quota::QuotaChange>,
    },
    /// Kafka's DeleteAcls: exactly these bindings (the proposer matched its filters against
    /// its image) go; one already gone changes nothing.
    DeleteAcls {
        acls: Vec<crate::catalog::AclRecord>,
    },
    /// The controller lost touch with the broker (or, `controlled`, the broker is shutting
    /// down): it leaves every ISR and leads nothing until it is heard again (registers again).
    FenceBroker {
        id: i32,
        #[serde(default)]
        controlled: bool,
        /// The broker epoch the controller judged (Kafka's FenceBrokerRecord epoch): a
        /// broker that registered again since is not fenced for what its old process did.
        #[serde(default)]
        epoch: Option<i64>,
        /// What the controller saw, for the fencing counts and the log.
        #[serde(default)]
        reason: FenceReason,
    },
    UnfenceBroker {
        id: i32,
    },
    CreateTopics {
        topics: Vec<TopicMeta>,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    /// Adds partitions to a topic, placed by the proposer.
    CreatePartitions {
        topic: String,
        added: Vec<PartitionRegistration>,
    },
    /// Replaces a topic's config overrides.
    SetTopicConfigs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces a consumer group's config overrides (none: the broker's defaults).
    SetGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the dynamic broker configs of one broker (`Some(id)`) or the cluster (`None`).
    SetBrokerConfigs {
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
    },
    /// Reserves `count` producer ids for `broker`; the outcome is the first.
    AllocateProducerIds {
        broker: i32,
        count: i64,
    },
    /// Kafka's ElectLeaders: each partition led by its preferred (first) replica when that one
    /// is live and in sync; or, `unclean`, a partition without a leader led by any live
    /// replica (which becomes the whole ISR: what others held beyond it is lost).
    ElectLeaders {
        /// Written as `[topic, partition]` pairs (see `TopicPartition`).
        partitions: Vec<TopicPartition>,
        unclean: bool,
    },
    /// A partition leader changes its in-sync replicas (Kafka's AlterPartition): refused unless
    /// `leader_epoch` and `partition_epoch` are the partition's current ones, so a deposed leader
    /// or a stale request changes nothing.
    ChangeIsr {
        topic: String,
        partition: i32,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
        isr: Vec<i32>,
    },
    /// Kafka's AlterPartitionReassignments (KIP-455): each partition moves to its target
    /// replicas, or (no target) its reassignment in progress is cancelled; see `reassign`.
    AlterReassignments {
        partitions: Vec<ReassignmentTarget>,
    },
    /// Tiered storage: a segment's copy to the object store or its deletion from it (KIP-405's
    /// remote log metadata); see `remote_log::apply`.
    RemoteLogSegment {
        topic: String,
        partition: i32,
        change: crate::remote_log::RemoteLogChange,
    },
}

/// Why a broker was fenced: the evidence the active controller acted on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceReason {
    /// Silent for a whole `broker.session.timeout.ms` (a pause, a cut, or a death that left
    /// no evidence). Commands written before reasons existed were all this or controlled.
    #[default]
    Silent,
    /// Its process is gone: its connection ended and its port refused a new one.
    ProcessGone,
    /// It asked to, shutting down (SIGTERM).
    ControlledShutdown,
    /// It registered again with a new incarnation: its old process's session ends.
    Restarted,
}

impl FenceReason {
    pub const ALL: [FenceReason; 4] = [
        FenceReason::ProcessGone,
        FenceReason::Silent,
        FenceReason::ControlledShutdown,
        FenceReason::Restarted,
    ];

    /// The label of `tributary_broker_fencings_total`.
    pub fn name(self) -> &'static str {
        match self {
            FenceReason::Silent => "silent",
            FenceReason::ProcessGone => "process_gone",
            FenceReason::ControlledShutdown => "controlled_shutdown",
            FenceReason::Restarted => "restarted",
        }
    }
}

/// What applying a command decided, for the node that proposed it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done,
    /// One result per item of the command (topics created or deleted), in order.
    Items(Vec<Result<(), (ErrorCode, String)>>),
    ProducerIds {
        start: i64,
    },
    Refused(ErrorCode, String),
    /// The entry could not be decoded: written by a newer Tributary, or damaged.
    Undecodable(String),
}

impl MetadataCommand {
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Applies the entry at raft `index` to `image`.
pub fn apply(image: &mut Catalog, index: u64, bytes: &[u8]) -> Outcome {
    image.version = index;
    // The topic-id index is derived from the topics this entry may change: rebuilt on next use.
    image.topic_ids = Default::default();
    let cmd: MetadataCommand = match serde_json::from_slice(bytes) {
        Ok(c) => c,
        Err(e) => return Outcome::Undecodable(format!("metadata entry {index}: {e}")),
    };
    apply_command(image, index, cmd)
}

fn apply_command(image: &mut Catalog, index: u64, cmd: MetadataCommand) -> Outcome {
    use MetadataCommand as C;
    match cmd {
        C::InitCluster { cluster_id } => {
            if image.cluster_id.is_empty() {
                image.cluster_id = cluster_id;
            }
            Outcome::Done
        }
        C::ImportCatalog { catalog } => import_catalog(image, *catalog),
        C::CreateAcls { acls } => create_acls(image, acls),
        C::AlterClientQuotas { changes } => alter_client_quotas(image, changes),
        C::DeleteAcls { acls } => {
            image.acls.retain(|a| !acls.contains(a));
            Outcome::Done
        }
        C::AlterScramCredentials { upsert, delete } => {
            alter_scram_credentials(image, upsert, delete)
        }
        C::RegisterBroker {
            id,
            incarnation,
            host,
            port,
            listeners,
            rack,
        } => {
            let registration = BrokerRegistration {
                id,
                incarnation,
                epoch: index as i64,
                host,
                port,
                fenced: false,
                in_controlled_shutdown: false,
                fenced_as_gone: false,
                listeners,
                rack,
            };
            register_broker(image, registration)
        }
        C::FenceBroker {
            id,
            controlled,
            epoch,
            reason,
        } => fence_broker(image, id, controlled, epoch, reason),
        C::UnfenceBroker { id } => unfence_broker(image, id),
        C::CreateTopics { topics } => {
            Outcome::Items(topics.into_iter().map(|t| create_topic(image, t)).collect())
        }
        C::DeleteTopics { names } => delete_topics(image, &names),
        C::CreatePartitions { topic, added } => create_partitions(image, topic, added),
        C::SetTopicConfigs { topic, configs } => match image.topics.get_mut(&topic) {
            Some(t) => {
                t.configs = configs;
                Outcome::Done
            }
            None => Outcome::Refused(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic:?} does not exist"),
            ),
        },
        C::SetBrokerConfigs { broker, configs } => set_broker_configs(image, broker, configs),
        C::SetGroupConfigs { group, configs } => set_group_configs(image, group, configs),
        C::ChangeIsr {
            topic,
            partition,
            leader_epoch,
            partition_epoch,
            isr,
        } => change_isr(image, topic, partition, leader_epoch, partition_epoch, isr),
        C::AlterReassignments { partitions } => Outcome::Items(
            partitions
                .iter()
                .map(|t| reassign::alter(image, t))
                .collect(),
        ),
        C::ElectLeaders {
            partitions,
            unclean,
        } => elect_leaders(image, &partitions, unclean),
        C::RemoteLogSegment {
            topic,
            partition,
            change,
        } => remote_log_segment(image, &topic, partition, change),
        C::AllocateProducerIds { broker: _, count } => {
            let start = image.next_producer_id;
            image.next_producer_id = start.saturating_add(count.max(1));
            Outcome::ProducerIds { start }
        }
    }
}

/// Kafka's DeleteTopics: each topic goes with its remote log metadata.
fn delete_topics(image: &mut Catalog, names: &[String]) -> Outcome {
    let gone = |n: &String| match image.topics.remove(n) {
        Some(_) => {
            image.remote_logs.remove(n);
            Ok(())
        }
        None => Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {n:?} does not exist"),
        )),
    };
    Outcome::Items(names.iter().map(gone).collect())
}

/// A change to a partition's remote log, refused for a partition that does not exist.
fn remote_log_segment(
    image: &mut Catalog,
    topic: &str,
    partition: i32,
    change: crate::remote_log::RemoteLogChange,
) -> Outcome {
    let Some(t) = image.topics.get(topic) else {
        return Outcome::Refused(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic:?} does not exist"),
        );
    };
    let Some(placed) = usize::try_from(partition)
        .ok()
        .and_then(|p| t.assignment.get(p))
    else {
        return Outcome::Refused(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("partition {topic}-{partition} does not exist"),
        );
    };
    let id = t.id.clone();
    let log = image
        .remote_logs
        .entry(topic.to_string())
        .or_default()
        .entry(partition)
        .or_default();
    log.topic_id = id;
    crate::remote_log::apply(log, placed, change)
}

/// Kafka's CreateAcls: each binding kept once.
fn create_acls(image: &mut Catalog, acls: Vec<crate::catalog::AclRecord>) -> Outcome {
    image.acls.extend(acls);
    image.acls.sort();
    image.acls.dedup();
    Outcome::Done
}

fn elect_leaders(image: &mut Catalog, partitions: &[TopicPartition], unclean: bool) -> Outcome {
    let live: Vec<i32> = image.live_brokers().map(|b| b.id).collect();
    Outcome::Items(
        partitions
            .iter()
            .map(|tp| elect(image, &tp.topic, tp.partition, unclean, &live))
            .collect(),
    )
}

/// Seeds an empty image with a catalog written before the metadata log existed.
fn import_catalog(image: &mut Catalog, catalog: Catalog) -> Outcome {
    if !image.topics.is_empty() || image.next_producer_id != 0 {
        return Outcome::Refused(
            ErrorCode::INVALID_REQUEST,
            "the metadata image is not empty; a catalog is imported only into a new one".into(),
        );
    }
    let version = image.version;
    let brokers = std::mem::take(&mut image.brokers);
    *image = catalog;
    image.version = version;
    image.brokers.extend(brokers);
    Outcome::Done
}

fn alter_client_quotas(image: &mut Catalog, changes: Vec<crate::quota::QuotaChange>) -> Outcome {
    for (entity, ops) in changes {
        let i = match image.client_quotas.iter().position(|q| q.entity == entity) {
            Some(i) => i,
            None => {
                image.client_quotas.push(crate::quota::QuotaRecord {
                    entity,
                    values: BTreeMap::new(),
                });
                image.client_quotas.len() - 1
            }
        };
        for (key, value) in ops {
            match value {
                Some(v) => image.client_quotas[i].values.insert(key, v),
                None => image.client_quotas[i].values.remove(&key),
            };
        }
        if image.client_quotas[i].values.is_empty() {
            image.client_quotas.remove(i);
        }
    }
    Outcome::Done
}

fn alter_scram_credentials(
    image: &mut Catalog,
    upsert: Vec<(String, i8, crate::catalog::ScramRecord)>,
    delete: Vec<(String, i8)>,
) -> Outcome {
    for (user, mechanism) in delete {
        if let Some(m) = image.scram.get_mut(&user) {
            m.remove(&mechanism);
            if m.is_empty() {
                image.scram.remove(&user);
            }
        }
    }
    for (user, mechanism, record) in upsert {
        image
            .scram
            .entry(user)
            .or_default()
            .insert(mechanism, record);
    }
    Outcome::Done
}

fn unfence_broker(image: &mut Catalog, id: i32) -> Outcome {
    let Some(b) = image.brokers.get_mut(&id) else {
        return Outcome::Refused(
            ErrorCode::INVALID_REQUEST,
            format!("broker {id} is not registered"),
        );
    };
    b.fenced = false;
    b.fenced_as_gone = false;
    elect_where_leaderless(image, id);
    Outcome::Done
}

fn create_partitions(
    image: &mut Catalog,
    topic: String,
    added: Vec<PartitionRegistration>,
) -> Outcome {
    let Some(t) = image.topics.get_mut(&topic) else {
        return Outcome::Refused(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic:?} does not exist"),
        );
    };
    t.assignment.extend(added);
    t.partitions = t.assignment.len() as i32;
    Outcome::Done
}

fn set_broker_configs(
    image: &mut Catalog,
    broker: Option<i32>,
    configs: BTreeMap<String, String>,
) -> Outcome {
    let d = &mut image.broker_configs;
    match broker {
        None => d.cluster = configs,
        Some(b) if configs.is_empty() => {
            d.per_broker.remove(&b);
        }
        Some(b) => {
            d.per_broker.insert(b, configs);
        }
    }
    Outcome::Done
}

/// Kafka's AlterPartition, checked against the partition's current epochs.
fn change_isr(
    image: &mut Catalog,
    topic: String,
    partition: i32,
    leader_epoch: LeaderEpoch,
    partition_epoch: PartitionEpoch,
    isr: Vec<i32>,
) -> Outcome {
    let live: Vec<i32> = image.live_brokers().map(|b| b.id).collect();
    let brokers = &image.brokers;
    let Some(p) = image.topics.get_mut(&topic).and_then(|t| {
        usize::try_from(partition)
            .ok()
            .and_then(|i| t.assignment.get_mut(i))
    }) else {
        return Outcome::Refused(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("{topic}-{partition} does not exist"),
        );
    };
    if leader_epoch != p.leader_epoch {
        return Outcome::Refused(
            ErrorCode::FENCED_LEADER_EPOCH,
            format!(
                "{topic}-{partition} is at leader epoch {}, not {leader_epoch}",
                p.leader_epoch
            ),
        );
    }
    if partition_epoch != p.partition_epoch {
        return Outcome::Refused(
            ErrorCode::INVALID_UPDATE_VERSION,
            format!(
                "{topic}-{partition} is at partition epoch {}, not {partition_epoch}",
                p.partition_epoch
            ),
        );
    }
    if isr.is_empty() || !isr.contains(&p.leader) || isr.iter().any(|b| !p.replicas.contains(b)) {
        return Outcome::Refused(
            ErrorCode::INVALID_REQUEST,
            format!(
                "ISR {isr:?} must hold the leader {} and only replicas {:?}",
                p.leader, p.replicas
            ),
        );
    }
    // KIP-841: only a registered broker that is neither fenced nor shutting down may
    // join; the leader keeps the replica out and asks again later. Leaving is always
    // allowed.
    let added: Vec<i32> = isr.iter().copied().filter(|b| !p.isr.contains(b)).collect();
    if let Some(b) = added.iter().find(|&&b| !isr_eligible(brokers, NodeId(b))) {
        return Outcome::Refused(
            ErrorCode::INELIGIBLE_REPLICA,
            format!(
                "broker {b} cannot join the ISR of {topic}-{partition}: it is fenced, shutting down or not registered"
            ),
        );
    }
    let shrank = p.isr.iter().any(|b| !isr.contains(b));
    let grew = !added.is_empty();
    p.isr = isr;
    p.partition_epoch.bump();
    debug_assert!(p.isr.contains(&p.leader), "an ISR holds its leader");
    image.liveness.isr_shrinks += u64::from(shrank);
    image.liveness.isr_expansions += u64::from(grew);
    // A reassignment completes as soon as its target is in sync.
    reassign::complete_if_caught_up(p, &live);
    Outcome::Done
}

fn create_topic(image: &mut Catalog, t: TopicMeta) -> Result<(), (ErrorCode, String)> {
    if image.topics.contains_key(&t.name) {
        return Err((
            ErrorCode::TOPIC_ALREADY_EXISTS,
            format!("topic {:?} already exists", t.name),
        ));
    }
    if t.assignment.len() != t.partitions as usize {
        return Err((
            ErrorCode::INVALID_REPLICA_ASSIGNMENT,
            format!(
                "topic {:?}: {} partition(s) but {} assignment(s)",
                t.name,
                t.partitions,
                t.assignment.len()
            ),
        ));
    }
    image.topics.insert(t.name.clone(), t);
    Ok(())
}

/// Whether `broker` may join an ISR (KIP-841): registered, not fenced and not in controlled
/// shutdown. The controller refuses an ISR change adding any other (INELIGIBLE_REPLICA), and a
/// leader does not propose one.
pub fn isr_eligible(brokers: &BTreeMap<i32, BrokerRegistration>, broker: NodeId) -> bool {
    brokers
        .get(&broker.0)
        .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
}

/// One partition of an ElectLeaders command.
fn elect(
    image: &mut Catalog,
    topic: &str,
    partition: i32,
    unclean: bool,
    live: &[i32],
) -> Result<(), (ErrorCode, String)> {
    let Some(p) = image.topics.get_mut(topic).and_then(|t| {
        usize::try_from(partition)
            .ok()
            .and_then(|i| t.assignment.get_mut(i))
    }) else {
        return Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("{topic}-{partition} does not exist"),
        ));
    };
    let name = format!("{topic}-{partition}");
    let to = if unclean {
        if p.leader >= 0 {
            return Err((
                ErrorCode::ELECTION_NOT_NEEDED,
                format!("{name} has a leader"),
            ));
        }
        let Some(&r) = p.replicas.iter().find(|r| live.contains(r)) else {
            return Err((
                ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                format!("no replica of {name} is live"),
            ));
        };
        p.isr = vec![r];
        r
    } else {
        let Some(&preferred) = p.replicas.first() else {
            return Err((
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                format!("{name} has no replicas"),
            ));
        };
        if p.leader == preferred {
            return Err((
                ErrorCode::ELECTION_NOT_NEEDED,
                format!("{name} is led by its preferred replica {preferred}"),
            ));
        }
        if !live.contains(&preferred) || !p.isr.contains(&preferred) {
            return Err((
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                format!("the preferred replica {preferred} of {name} is not live and in sync"),
            ));
        }
        preferred
    };
    p.leader = to;
    p.leader_epoch.bump();
    p.partition_epoch.bump();
    Ok(())
}

/// A broker (re)starting. The same incarnation registering again changes nothing but its
/// endpoints; a new one (a restart, even one too quick for anyone to notice the death) gets a
/// new broker epoch and ends its old process's session at once, as Kafka's incarnation id
/// does: where other in-sync replicas hold its replicated partitions, it leaves their ISRs
/// and its leadership moves to them while it recovers (it rejoins once caught up); where it is
/// the only in-sync replica, it leads again at a new epoch, so followers truncate to its log.
fn register_broker(image: &mut Catalog, mut registration: BrokerRegistration) -> Outcome {
    let id = registration.id;
    let previous = image.brokers.get(&id);
    let restarted = previous.is_some_and(|b| b.incarnation != registration.incarnation);
    // A restart the controller had already fenced for (the death left evidence, or a
    // silence) is not counted twice.
    let unnoticed = restarted && previous.is_some_and(|b| !b.fenced);
    if let Some(b) = previous.filter(|_| !restarted) {
        registration.epoch = b.epoch;
    }
    if restarted {
        let mut fenced = fenced_brokers(image);
        fenced.push(id);
        for t in image.topics.values_mut() {
            for p in t.assignment.iter_mut().filter(|p| p.replicas.len() > 1) {
                fence_in_partition(p, id, &fenced);
            }
        }
    }
    if unnoticed {
        count_fencing(image, FenceReason::Restarted);
    }
    image.brokers.insert(id, registration);
    elect_where_leaderless(image, id);
    Outcome::Done
}

/// A consumer group's config overrides replaced; none left removes its entry.
fn set_group_configs(
    image: &mut Catalog,
    group: String,
    configs: BTreeMap<String, String>,
) -> Outcome {
    if configs.is_empty() {
        image.group_configs.remove(&group);
    } else {
        image.group_configs.insert(group, configs);
    }
    Outcome::Done
}

/// Fences broker `id` (unless `epoch` names a registration it has since replaced).
fn fence_broker(
    image: &mut Catalog,
    id: i32,
    controlled: bool,
    epoch: Option<i64>,
    reason: FenceReason,
) -> Outcome {
    let Some(b) = image.brokers.get_mut(&id) else {
        return Outcome::Refused(
            ErrorCode::INVALID_REQUEST,
            format!("broker {id} is not registered"),
        );
    };
    if epoch.is_some_and(|e| e != b.epoch) {
        return Outcome::Refused(
            ErrorCode::STALE_BROKER_EPOCH,
            format!(
                "broker {id} registered again (epoch {}, not {epoch:?}); its new process is judged afresh",
                b.epoch
            ),
        );
    }
    b.in_controlled_shutdown |= controlled;
    b.fenced_as_gone |= reason == FenceReason::ProcessGone;
    if b.fenced {
        return Outcome::Done;
    }
    b.fenced = true;
    let fenced = fenced_brokers(image);
    for t in image.topics.values_mut() {
        for p in &mut t.assignment {
            fence_in_partition(p, id, &fenced);
        }
    }
    count_fencing(image, reason);
    Outcome::Done
}

fn fenced_brokers(image: &Catalog) -> Vec<i32> {
    image
        .brokers
        .values()
        .filter(|b| b.fenced)
        .map(|b| b.id)
        .collect()
}

fn count_fencing(image: &mut Catalog, reason: FenceReason) {
    *image
        .liveness
        .fencings
        .entry(reason.name().to_string())
        .or_default() += 1;
}

/// A fenced broker leaves a partition's ISR (unless it is the last member: the ISR then names
/// who holds every acknowledged record), and if it led the partition, the next live ISR member
/// leads at the next leader epoch — or none does. Then only the active controller may elect a
/// replica outside the ISR (`unclean.leader.election.enable`: `placement::unclean_elections`,
/// then ElectLeaders with `unclean`), since whether it may depends on its broker config.
fn fence_in_partition(p: &mut PartitionRegistration, id: i32, fenced: &[i32]) {
    let mut changed = false;
    if p.isr.len() > 1 && p.isr.contains(&id) {
        p.isr.retain(|&b| b != id);
        changed = true;
    }
    if p.leader == id {
        p.leader = p
            .isr
            .iter()
            .copied()
            .find(|b| !fenced.contains(b))
            .unwrap_or(NO_LEADER);
        p.leader_epoch.bump();
        changed = true;
    }
    if changed {
        p.partition_epoch.bump();
    }
    // Checked in tests and the simulator only: every node applies the same entry, and a
    // failed assertion here would stop them all at once.
    debug_assert!(
        p.leader == NO_LEADER || p.isr.contains(&p.leader),
        "a leader is elected from the ISR"
    );
    debug_assert!(!p.isr.is_empty(), "the ISR keeps its last member");
}

/// Gives a leader back to the partitions without one whose ISR holds `broker`, now live, with
/// the next leader epoch.
fn elect_where_leaderless(image: &mut Catalog, broker: i32) {
    for t in image.topics.values_mut() {
        for p in &mut t.assignment {
            if p.leader == NO_LEADER && p.isr.contains(&broker) {
                p.leader = broker;
                p.leader_epoch.bump();
                p.partition_epoch.bump();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, replicas: &[i32]) -> TopicMeta {
        TopicMeta {
            name: name.into(),
            id: format!("id-{name}"),
            partitions: replicas.len() as i32,
            configs: BTreeMap::new(),
            assignment: replicas
                .iter()
                .map(|&b| PartitionRegistration::new(vec![b]))
                .collect(),
        }
    }

    fn run(image: &mut Catalog, index: u64, cmd: MetadataCommand) -> Outcome {
        apply(image, index, &cmd.encode())
    }

    fn register(id: i32, incarnation: &str) -> MetadataCommand {
        MetadataCommand::RegisterBroker {
            id,
            incarnation: incarnation.into(),
            host: "127.0.0.1".into(),
            port: 9092 + id as u16,
            listeners: Vec::new(),
            rack: None,
        }
    }

    #[test]
    fn every_command_round_trips_and_the_image_records_its_index() {
        let mut image = Catalog::empty();
        assert_eq!(
            run(
                &mut image,
                1,
                MetadataCommand::InitCluster {
                    cluster_id: "a".into()
                }
            ),
            Outcome::Done
        );
        run(
            &mut image,
            2,
            MetadataCommand::InitCluster {
                cluster_id: "b".into(),
            },
        );
        assert_eq!(image.cluster_id, "a", "the first cluster id wins");
        assert_eq!(image.version, 2);
        assert!(matches!(
            apply(&mut image, 3, b"{not json"),
            Outcome::Undecodable(_)
        ));
    }

    #[test]
    fn creating_a_topic_twice_is_decided_by_log_order() {
        let mut image = Catalog::empty();
        let cmd = MetadataCommand::CreateTopics {
            topics: vec![topic("t", &[1, 2])],
        };
        assert_eq!(
            run(&mut image, 1, cmd.clone()),
            Outcome::Items(vec![Ok(())])
        );
        let Outcome::Items(second) = run(&mut image, 2, cmd) else {
            panic!("items expected")
        };
        assert_eq!(
            second[0].as_ref().unwrap_err().0,
            ErrorCode::TOPIC_ALREADY_EXISTS
        );
        let mut bad = topic("u", &[1]);
        bad.partitions = 2;
        let Outcome::Items(r) = run(
            &mut image,
            3,
            MetadataCommand::CreateTopics { topics: vec![bad] },
        ) else {
            panic!("items expected")
        };
        assert_eq!(
            r[0].as_ref().unwrap_err().0,
            ErrorCode::INVALID_REPLICA_ASSIGNMENT
        );
    }

    #[test]
    fn fencing_takes_leadership_away_and_unfencing_gives_it_back_with_a_new_epoch() {
        let mut image = Catalog::empty();
        run(&mut image, 1, register(1, "x"));
        run(&mut image, 2, register(2, "y"));
        run(
            &mut image,
            3,
            MetadataCommand::CreateTopics {
                topics: vec![topic("t", &[1, 2, 1])],
            },
        );
        assert_eq!(image.brokers[&1].epoch, 1);
        run(
            &mut image,
            4,
            MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        let t = &image.topics["t"];
        assert_eq!(
            t.assignment
                .iter()
                .map(|p| (p.leader, p.leader_epoch.0))
                .collect::<Vec<_>>(),
            vec![(NO_LEADER, 1), (2, 0), (NO_LEADER, 1)]
        );
        // Fencing twice changes nothing more.
        run(
            &mut image,
            5,
            MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        assert_eq!(image.topics["t"].assignment[0].leader_epoch, LeaderEpoch(1));
        run(&mut image, 6, MetadataCommand::UnfenceBroker { id: 1 });
        let t = &image.topics["t"];
        assert_eq!(
            t.assignment
                .iter()
                .map(|p| (p.leader, p.leader_epoch.0))
                .collect::<Vec<_>>(),
            vec![(1, 2), (2, 0), (1, 2)]
        );
        assert!(!image.brokers[&1].fenced);
        // A restart (a new incarnation) gets a new broker epoch; the same one keeps it.
        run(&mut image, 7, register(1, "x"));
        assert_eq!(image.brokers[&1].epoch, 1);
        run(&mut image, 8, register(1, "z"));
        assert_eq!(image.brokers[&1].epoch, 8);
        assert!(matches!(
            run(
                &mut image,
                9,
                MetadataCommand::FenceBroker {
                    id: 7,
                    controlled: false,
                    epoch: None,
                    reason: FenceReason::Silent,
                }
            ),
            Outcome::Refused(..)
        ));
    }

    #[test]
    fn a_topic_created_after_an_id_lookup_is_found_by_its_id() {
        let mut image = Catalog::empty();
        run(&mut image, 1, register(1, "x"));
        let mut t = topic("a", &[1]);
        t.id = "0b6f2c1e-8d4a-4e5b-9c3d-2a1f0e9d8c7b".into();
        let id = *t.uuid().as_bytes();
        assert!(image.topic_by_id(&id).is_none());
        run(
            &mut image,
            2,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        assert_eq!(image.topic_by_id(&id).map(|t| t.name.as_str()), Some("a"));
    }

    #[test]
    fn fencing_a_replicated_partitions_leader_elects_from_the_isr() {
        let mut image = Catalog::empty();
        for (i, id) in [1, 2, 3].into_iter().enumerate() {
            run(&mut image, i as u64 + 1, register(id, "x"));
        }
        let mut t = topic("r", &[1]);
        t.assignment = vec![PartitionRegistration::new(vec![1, 2, 3])];
        run(
            &mut image,
            4,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        run(
            &mut image,
            5,
            MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        let p = &image.topics["r"].assignment[0];
        assert_eq!(
            (p.leader, p.leader_epoch.0, p.isr.clone()),
            (2, 1, vec![2, 3])
        );
        run(
            &mut image,
            6,
            MetadataCommand::FenceBroker {
                id: 3,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        let p = &image.topics["r"].assignment[0];
        assert_eq!((p.leader, p.leader_epoch.0, p.isr.clone()), (2, 1, vec![2]));
        // The last ISR member stays in it when fenced: it alone holds everything acknowledged.
        run(
            &mut image,
            7,
            MetadataCommand::FenceBroker {
                id: 2,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        let p = &image.topics["r"].assignment[0];
        assert_eq!(
            (p.leader, p.leader_epoch.0, p.isr.clone()),
            (NO_LEADER, 2, vec![2])
        );
        // An out-of-sync replica returning does not lead; the ISR member does.
        run(&mut image, 8, MetadataCommand::UnfenceBroker { id: 1 });
        assert_eq!(image.topics["r"].assignment[0].leader, NO_LEADER);
        run(&mut image, 9, MetadataCommand::UnfenceBroker { id: 2 });
        let p = image.topics["r"].assignment[0].clone();
        assert_eq!((p.leader, p.leader_epoch.0), (2, 3));
        // The leader grows the ISR back, at its current epochs only.
        let change = |leader_epoch, partition_epoch, isr: Vec<i32>| MetadataCommand::ChangeIsr {
            topic: "r".into(),
            partition: 0,
            leader_epoch: LeaderEpoch(leader_epoch),
            partition_epoch,
            isr,
        };
        assert!(matches!(
            run(&mut image, 10, change(2, p.partition_epoch, vec![2, 1])),
            Outcome::Refused(ErrorCode::FENCED_LEADER_EPOCH, _)
        ));
        assert!(matches!(
            run(
                &mut image,
                11,
                change(3, PartitionEpoch(p.partition_epoch.0 - 1), vec![2, 1])
            ),
            Outcome::Refused(ErrorCode::INVALID_UPDATE_VERSION, _)
        ));
        assert!(matches!(
            run(&mut image, 12, change(3, p.partition_epoch, vec![1])),
            Outcome::Refused(ErrorCode::INVALID_REQUEST, _)
        ));
        assert_eq!(
            run(&mut image, 13, change(3, p.partition_epoch, vec![2, 1])),
            Outcome::Done
        );
        let q = &image.topics["r"].assignment[0];
        assert_eq!(
            (q.isr.clone(), q.partition_epoch),
            (vec![2, 1], p.partition_epoch.next())
        );
        // The same incarnation registering again changes nothing. Its leader restarting (a
        // new incarnation, before anyone fenced it) ends its old session at once, as Kafka's
        // incarnation id does: the other in-sync replica leads at the next epoch while the
        // restarted one recovers outside the ISR.
        run(&mut image, 14, register(2, "x"));
        assert_eq!(image.topics["r"].assignment[0].leader_epoch, LeaderEpoch(3));
        assert_eq!(image.liveness.fencings.get("restarted"), None);
        run(&mut image, 15, register(2, "restarted"));
        let r = &image.topics["r"].assignment[0];
        assert_eq!((r.leader, r.leader_epoch.0, r.isr.clone()), (1, 4, vec![1]));
        assert_eq!(image.liveness.fencings.get("restarted"), Some(&1));
        assert!(!image.brokers[&2].fenced, "the new process is live");
        // Where it is the only in-sync replica, it leads again, at a new epoch.
        run(&mut image, 16, register(1, "restarted"));
        let r = &image.topics["r"].assignment[0];
        assert_eq!((r.leader, r.isr.clone()), (1, vec![1]));
        assert!(r.leader_epoch > LeaderEpoch(4), "{r:?}");
    }

    #[test]
    fn a_fencing_for_an_old_broker_epoch_spares_the_new_registration() {
        let mut image = Catalog::empty();
        run(&mut image, 1, register(1, "x"));
        let old = image.brokers[&1].epoch;
        run(&mut image, 2, register(1, "restarted"));
        let fence = |epoch| MetadataCommand::FenceBroker {
            id: 1,
            controlled: false,
            epoch: Some(epoch),
            reason: FenceReason::ProcessGone,
        };
        assert!(matches!(
            run(&mut image, 3, fence(old)),
            Outcome::Refused(ErrorCode::STALE_BROKER_EPOCH, _)
        ));
        assert!(!image.brokers[&1].fenced);
        let new = image.brokers[&1].epoch;
        assert_eq!(run(&mut image, 4, fence(new)), Outcome::Done);
        assert!(image.brokers[&1].fenced);
        assert!(
            image.brokers[&1].fenced_as_gone,
            "kept until it registers again"
        );
        assert_eq!(image.liveness.fencings.get("process_gone"), Some(&1));
        // Its successor registers: live, and its restart is not a second fencing (the one
        // counted is the unnoticed restart at index 2).
        run(&mut image, 5, register(1, "third"));
        let b = &image.brokers[&1];
        assert!(!b.fenced && !b.fenced_as_gone);
        assert_eq!(image.liveness.fencings.get("restarted"), Some(&1));
    }

    #[test]
    fn a_fenced_or_shutting_down_broker_cannot_join_the_isr() {
        let mut image = Catalog::empty();
        for (i, id) in [1, 2, 3].into_iter().enumerate() {
            run(&mut image, i as u64 + 1, register(id, "x"));
        }
        let mut t = topic("k", &[1]);
        t.assignment = vec![PartitionRegistration::new(vec![1, 2, 3])];
        run(
            &mut image,
            4,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        run(
            &mut image,
            5,
            MetadataCommand::FenceBroker {
                id: 3,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        let change = |p: &PartitionRegistration, isr: Vec<i32>| MetadataCommand::ChangeIsr {
            topic: "k".into(),
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr,
        };
        let before = image.topics["k"].assignment[0].clone();
        assert_eq!(before.isr, vec![1, 2]);
        assert!(matches!(
            run(&mut image, 6, change(&before, vec![1, 2, 3])),
            Outcome::Refused(ErrorCode::INELIGIBLE_REPLICA, _)
        ));
        assert_eq!(ErrorCode::INELIGIBLE_REPLICA.code(), 107);
        assert_eq!(
            image.topics["k"].assignment[0], before,
            "a refused change leaves the partition as it was"
        );
        // Leaving stays allowed while 3 is fenced.
        assert_eq!(run(&mut image, 7, change(&before, vec![1])), Outcome::Done);
        let p = image.topics["k"].assignment[0].clone();
        assert_eq!(p.isr, vec![1]);
        // Unfenced, it may join.
        run(&mut image, 8, MetadataCommand::UnfenceBroker { id: 3 });
        assert_eq!(run(&mut image, 9, change(&p, vec![1, 3])), Outcome::Done);
        let p = image.topics["k"].assignment[0].clone();
        assert_eq!(p.isr, vec![1, 3]);
        // A broker in controlled shutdown is fenced and stays ineligible.
        run(
            &mut image,
            10,
            MetadataCommand::FenceBroker {
                id: 2,
                controlled: true,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        assert!(!isr_eligible(&image.brokers, NodeId(2)));
        assert!(!isr_eligible(&image.brokers, NodeId(9)), "not registered");
        assert!(matches!(
            run(&mut image, 11, change(&p, vec![1, 3, 2])),
            Outcome::Refused(ErrorCode::INELIGIBLE_REPLICA, _)
        ));
        // A replica id that is no broker at all is refused as well (it is a replica, so the
        // request is well formed).
        image.brokers.remove(&2);
        assert!(matches!(
            run(&mut image, 12, change(&p, vec![1, 3, 2])),
            Outcome::Refused(ErrorCode::INELIGIBLE_REPLICA, _)
        ));
        assert_eq!(image.topics["k"].assignment[0].isr, vec![1, 3]);
    }

    #[test]
    fn unclean_election_follows_the_topic_config_over_the_broker_default() {
        use crate::placement::unclean_elections;
        let mut image = Catalog::empty();
        for (i, id) in [1, 2, 3].into_iter().enumerate() {
            run(&mut image, i as u64 + 1, register(id, "x"));
        }
        let replicated = |name: &str, unclean: Option<&str>| {
            let mut t = topic(name, &[1]);
            t.assignment = vec![PartitionRegistration::new(vec![1, 2, 3])];
            if let Some(v) = unclean {
                t.configs
                    .insert("unclean.leader.election.enable".into(), v.into());
            }
            t
        };
        run(
            &mut image,
            4,
            MetadataCommand::CreateTopics {
                topics: vec![
                    replicated("dflt", None),
                    replicated("on", Some("true")),
                    replicated("off", Some("false")),
                ],
            },
        );
        let fence = |id| MetadataCommand::FenceBroker {
            id,
            controlled: false,
            epoch: None,
            reason: FenceReason::Silent,
        };
        // 2 leaves every ISR and returns out of sync; then 3 and 1 are fenced: 1, the last
        // ISR member, stays in it, nobody leads, and 2 is live outside the ISR.
        run(&mut image, 5, fence(2));
        run(&mut image, 6, MetadataCommand::UnfenceBroker { id: 2 });
        run(&mut image, 7, fence(3));
        run(&mut image, 8, fence(1));
        for t in ["dflt", "on", "off"] {
            let p = &image.topics[t].assignment[0];
            assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]), "{t}");
        }
        let names = |v: Vec<TopicPartition>| v.into_iter().map(|tp| tp.topic).collect::<Vec<_>>();
        // Off by default: only the topic that turns it on; on by default: all but the one
        // that turns it off.
        assert_eq!(names(unclean_elections(&image, false)), vec!["on"]);
        assert_eq!(names(unclean_elections(&image, true)), vec!["dflt", "on"]);
        let before = image.topics["on"].assignment[0].clone();
        let partitions = unclean_elections(&image, false);
        run(
            &mut image,
            9,
            MetadataCommand::ElectLeaders {
                partitions,
                unclean: true,
            },
        );
        let p = &image.topics["on"].assignment[0];
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch, p.partition_epoch),
            (
                2,
                vec![2],
                before.leader_epoch.next(),
                before.partition_epoch.next()
            )
        );
        // The others stay offline until 1 returns, and lead from the ISR then.
        assert_eq!(image.topics["dflt"].assignment[0].leader, NO_LEADER);
        assert!(unclean_elections(&image, false).is_empty());
        run(&mut image, 10, MetadataCommand::UnfenceBroker { id: 1 });
        assert_eq!(image.topics["off"].assignment[0].leader, 1);
        assert!(unclean_elections(&image, true).is_empty());
    }

    #[test]
    fn an_offline_partition_is_elected_uncleanly_once_a_replica_returns() {
        use crate::placement::unclean_elections;
        let mut image = Catalog::empty();
        for (i, id) in [1, 2].into_iter().enumerate() {
            run(&mut image, i as u64 + 1, register(id, "x"));
        }
        let mut t = topic("u", &[1]);
        t.assignment = vec![PartitionRegistration::new(vec![1, 2])];
        t.configs
            .insert("unclean.leader.election.enable".into(), "true".into());
        run(
            &mut image,
            3,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        for (i, id) in [2, 1].into_iter().enumerate() {
            run(
                &mut image,
                4 + i as u64,
                MetadataCommand::FenceBroker {
                    id,
                    controlled: false,
                    epoch: None,
                    reason: FenceReason::Silent,
                },
            );
        }
        // No replica is live: nothing to elect, the partition is offline.
        assert_eq!(image.topics["u"].assignment[0].isr, vec![1]);
        assert!(unclean_elections(&image, false).is_empty());
        // 2 registers again (a restart): not in the ISR, so only the unclean election lets it
        // lead.
        run(&mut image, 6, register(2, "restarted"));
        assert_eq!(image.topics["u"].assignment[0].leader, NO_LEADER);
        let partitions = unclean_elections(&image, false);
        assert_eq!(partitions, vec![TopicPartition::new("u", 0)]);
        run(
            &mut image,
            7,
            MetadataCommand::ElectLeaders {
                partitions,
                unclean: true,
            },
        );
        let p = &image.topics["u"].assignment[0];
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn preferred_and_unclean_elections_follow_kafka() {
        let mut image = Catalog::empty();
        for (i, id) in [1, 2, 3].into_iter().enumerate() {
            run(&mut image, i as u64 + 1, register(id, "x"));
        }
        let mut t = topic("e", &[1, 1]);
        t.assignment = vec![
            PartitionRegistration::new(vec![1, 2, 3]),
            PartitionRegistration::new(vec![1, 2]),
        ];
        run(
            &mut image,
            4,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        let elect = |unclean| MetadataCommand::ElectLeaders {
            partitions: vec![
                TopicPartition::new("e", 0),
                TopicPartition::new("e", 1),
                TopicPartition::new("e", 9),
            ],
            unclean,
        };
        let codes = |o: Outcome| match o {
            Outcome::Items(items) => items
                .into_iter()
                .map(|r| r.err().map_or(ErrorCode::NONE, |e| e.0))
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            codes(run(&mut image, 5, elect(false))),
            vec![
                ErrorCode::ELECTION_NOT_NEEDED,
                ErrorCode::ELECTION_NOT_NEEDED,
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            ]
        );
        // 1 is fenced and comes back: 2 leads partition 0 until the preferred election.
        run(
            &mut image,
            6,
            MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        run(&mut image, 7, MetadataCommand::UnfenceBroker { id: 1 });
        assert_eq!(image.topics["e"].assignment[0].leader, 2);
        // Not yet back in the ISR: not electable.
        assert_eq!(
            codes(run(&mut image, 8, elect(false)))[0],
            ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE
        );
        let p = image.topics["e"].assignment[0].clone();
        run(
            &mut image,
            9,
            MetadataCommand::ChangeIsr {
                topic: "e".into(),
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr: vec![2, 3, 1],
            },
        );
        assert_eq!(codes(run(&mut image, 10, elect(false)))[0], ErrorCode::NONE);
        let p = &image.topics["e"].assignment[0];
        assert_eq!((p.leader, p.leader_epoch.0), (1, 2));
        // Partition 1: both replicas fenced, 2 last in the ISR; 1 returns: only an unclean
        // election lets it lead.
        run(
            &mut image,
            11,
            MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        run(
            &mut image,
            12,
            MetadataCommand::FenceBroker {
                id: 2,
                controlled: false,
                epoch: None,
                reason: FenceReason::Silent,
            },
        );
        run(&mut image, 13, MetadataCommand::UnfenceBroker { id: 1 });
        assert_eq!(image.topics["e"].assignment[1].leader, NO_LEADER);
        assert_eq!(codes(run(&mut image, 14, elect(true)))[1], ErrorCode::NONE);
        let p = &image.topics["e"].assignment[1];
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
    }

    #[test]
    fn producer_id_blocks_never_overlap_and_survive_import_only_into_an_empty_image() {
        let mut image = Catalog::empty();
        let mut old = Catalog::empty();
        old.cluster_id = "old".into();
        old.next_producer_id = 3000;
        old.topics.insert("t".into(), topic("t", &[0]));
        assert_eq!(
            run(
                &mut image,
                1,
                MetadataCommand::ImportCatalog {
                    catalog: Box::new(old.clone())
                }
            ),
            Outcome::Done
        );
        assert_eq!(image.cluster_id, "old");
        assert_eq!(image.version, 1);
        assert!(matches!(
            run(
                &mut image,
                2,
                MetadataCommand::ImportCatalog {
                    catalog: Box::new(old)
                }
            ),
            Outcome::Refused(..)
        ));
        let a = run(
            &mut image,
            3,
            MetadataCommand::AllocateProducerIds {
                broker: 0,
                count: 1000,
            },
        );
        let b = run(
            &mut image,
            4,
            MetadataCommand::AllocateProducerIds {
                broker: 1,
                count: 1000,
            },
        );
        assert_eq!(a, Outcome::ProducerIds { start: 3000 });
        assert_eq!(b, Outcome::ProducerIds { start: 4000 });
    }

    #[test]
    fn partitions_configs_and_deletes_apply_to_existing_topics_only() {
        let mut image = Catalog::empty();
        run(
            &mut image,
            1,
            MetadataCommand::CreateTopics {
                topics: vec![topic("t", &[0])],
            },
        );
        run(
            &mut image,
            2,
            MetadataCommand::CreatePartitions {
                topic: "t".into(),
                added: vec![PartitionRegistration::new(vec![1])],
            },
        );
        assert_eq!(image.topics["t"].partitions, 2);
        let configs: BTreeMap<String, String> =
            [("retention.ms".to_string(), "5".to_string())].into();
        run(
            &mut image,
            3,
            MetadataCommand::SetTopicConfigs {
                topic: "t".into(),
                configs: configs.clone(),
            },
        );
        assert_eq!(image.topics["t"].configs, configs);
        run(
            &mut image,
            4,
            MetadataCommand::SetBrokerConfigs {
                broker: Some(1),
                configs: configs.clone(),
            },
        );
        assert_eq!(image.broker_configs.per_broker[&1], configs);
        run(
            &mut image,
            5,
            MetadataCommand::SetBrokerConfigs {
                broker: Some(1),
                configs: BTreeMap::new(),
            },
        );
        assert!(image.broker_configs.per_broker.is_empty());
        let Outcome::Items(r) = run(
            &mut image,
            6,
            MetadataCommand::DeleteTopics {
                names: vec!["t".into(), "u".into()],
            },
        ) else {
            panic!("items expected")
        };
        assert_eq!(r[0], Ok(()));
        assert_eq!(
            r[1].as_ref().unwrap_err().0,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
        for cmd in [
            MetadataCommand::SetTopicConfigs {
                topic: "t".into(),
                configs: BTreeMap::new(),
            },
            MetadataCommand::CreatePartitions {
                topic: "t".into(),
                added: vec![],
            },
        ] {
            assert!(matches!(
                run(&mut image, 7, cmd),
                Outcome::Refused(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, _)
            ));
        }
    }

    /// One command of every kind but ImportCatalog (its catalog is the snapshot's), each field set, applied in order to an empty image: the
    /// metadata log's and the snapshot's bytes. Moving these types (into their own crate, to
    /// typed fields) must not change a byte of what nodes already wrote.
    fn every_command() -> Vec<MetadataCommand> {
        use crate::catalog::{AclRecord, Endpoint, ScramRecord};
        use crate::quota::QuotaEntity;
        use crate::reassign::ReassignmentTarget;
        let endpoint = Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9093,
            protocol: 0,
        };
        let acl = AclRecord {
            resource_type: 2,
            name: "orders".into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        };
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "1000".to_string());
        let mut t = topic("orders", &[1, 2]);
        t.configs = configs.clone();
        vec![
            MetadataCommand::InitCluster {
                cluster_id: "cluster-a".into(),
            },
            MetadataCommand::RegisterBroker {
                id: 1,
                incarnation: "inc-1".into(),
                host: "127.0.0.1".into(),
                port: 9093,
                listeners: vec![endpoint.clone()],
                rack: None,
            },
            register(2, "inc-2"),
            MetadataCommand::AlterScramCredentials {
                upsert: vec![(
                    "alice".into(),
                    1,
                    ScramRecord {
                        salt: vec![1, 2],
                        stored_key: vec![3],
                        server_key: vec![4],
                        iterations: 4096,
                    },
                )],
                delete: vec![("bob".into(), 2)],
            },
            MetadataCommand::CreateAcls {
                acls: vec![acl.clone()],
            },
            MetadataCommand::AlterClientQuotas {
                changes: vec![(
                    QuotaEntity {
                        user: Some(Some("alice".into())),
                        client: Some(None),
                    },
                    vec![("producer_byte_rate".into(), Some(1024.0))],
                )],
            },
            MetadataCommand::CreateTopics { topics: vec![t] },
            MetadataCommand::CreatePartitions {
                topic: "orders".into(),
                added: vec![PartitionRegistration::new(vec![2, 1])],
            },
            MetadataCommand::SetTopicConfigs {
                topic: "orders".into(),
                configs: configs.clone(),
            },
            MetadataCommand::SetBrokerConfigs {
                broker: Some(1),
                configs,
            },
            MetadataCommand::AllocateProducerIds {
                broker: 1,
                count: 1000,
            },
            MetadataCommand::ElectLeaders {
                partitions: vec![TopicPartition::new("orders", 0)],
                unclean: false,
            },
            MetadataCommand::ChangeIsr {
                topic: "orders".into(),
                partition: 0,
                leader_epoch: LeaderEpoch(0),
                partition_epoch: PartitionEpoch(0),
                isr: vec![1],
            },
            MetadataCommand::AlterReassignments {
                partitions: vec![
                    ReassignmentTarget {
                        topic: "orders".into(),
                        partition: 0,
                        replicas: Some(vec![2]),
                        allow_replication_factor_change: false,
                    },
                    ReassignmentTarget {
                        topic: "orders".into(),
                        partition: 1,
                        replicas: Some(vec![2, 1]),
                        allow_replication_factor_change: true,
                    },
                ],
            },
            MetadataCommand::FenceBroker {
                id: 2,
                controlled: false,
                epoch: Some(3),
                reason: FenceReason::ProcessGone,
            },
            MetadataCommand::UnfenceBroker { id: 2 },
            MetadataCommand::DeleteAcls { acls: vec![acl] },
            MetadataCommand::DeleteTopics {
                names: vec!["gone".into()],
            },
        ]
    }

    #[test]
    fn the_log_and_snapshot_bytes_stay_as_written() {
        let commands = every_command();
        let mut image = Catalog::empty();
        let mut log = String::new();
        for (i, cmd) in commands.iter().enumerate() {
            let bytes = cmd.encode();
            log.push_str(std::str::from_utf8(&bytes).expect("commands are JSON"));
            log.push('\n');
            run(&mut image, i as u64 + 1, cmd.clone());
            let back: MetadataCommand = serde_json::from_slice(&bytes).expect("it reads back");
            assert_eq!(&back, cmd);
        }
        let snapshot = serde_json::to_string(&image).expect("an image encodes");
        if std::env::var_os("PRINT_GOLDEN").is_some() {
            println!("LOG<<\n{log}>>\nSNAPSHOT<<\n{snapshot}\n>>");
        }
        assert_eq!(log, GOLDEN_LOG);
        assert_eq!(snapshot, GOLDEN_SNAPSHOT);
    }

    #[test]
    fn elect_leaders_is_written_as_the_tuples_it_was() {
        // The command as it was declared before `TopicPartition`: the same variant, serde's
        // same tagging, the partitions as `(String, i32)` pairs.
        #[derive(Serialize)]
        #[serde(tag = "type")]
        enum Before {
            ElectLeaders {
                partitions: Vec<(String, i32)>,
                unclean: bool,
            },
        }
        let before = Before::ElectLeaders {
            partitions: vec![("orders".into(), 0), ("audit".into(), 11)],
            unclean: true,
        };
        let now = MetadataCommand::ElectLeaders {
            partitions: vec![
                TopicPartition::new("orders", 0),
                TopicPartition::new("audit", 11),
            ],
            unclean: true,
        };
        let old = serde_json::to_vec(&before).expect("it encodes");
        assert_eq!(now.encode(), old);
        let read: MetadataCommand = serde_json::from_slice(&old).expect("old bytes read");
        assert_eq!(read, now);
    }

    /// What `the_log_and_snapshot_bytes_stay_as_written` saw when the types were first pinned
    /// (`PRINT_GOLDEN=1` prints them).
    const GOLDEN_LOG: &str = concat!(
        r#"{"type":"InitCluster","cluster_id":"cluster-a"}"#,
        "\n",
        r#"{"type":"RegisterBroker","id":1,"incarnation":"inc-1","host":"127.0.0.1","port":9093,"listeners":[{"name":"PLAINTEXT","host":"127.0.0.1","port":9093,"protocol":0}]}"#,
        "\n",
        r#"{"type":"RegisterBroker","id":2,"incarnation":"inc-2","host":"127.0.0.1","port":9094,"listeners":[]}"#,
        "\n",
        r#"{"type":"AlterScramCredentials","upsert":[["alice",1,{"salt":[1,2],"stored_key":[3],"server_key":[4],"iterations":4096}]],"delete":[["bob",2]]}"#,
        "\n",
        r#"{"type":"CreateAcls","acls":[{"resource_type":2,"name":"orders","pattern_type":3,"principal":"User:alice","host":"*","operation":3,"permission":3}]}"#,
        "\n",
        r#"{"type":"AlterClientQuotas","changes":[[{"user":"alice","client":{"default":true}},[["producer_byte_rate",1024.0]]]]}"#,
        "\n",
        r#"{"type":"CreateTopics","topics":[{"name":"orders","id":"id-orders","partitions":2,"configs":{"retention.ms":"1000"},"assignment":[{"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0},{"replicas":[2],"isr":[2],"leader":2,"leader_epoch":0,"partition_epoch":0}]}]}"#,
        "\n",
        r#"{"type":"CreatePartitions","topic":"orders","added":[{"replicas":[2,1],"isr":[2,1],"leader":2,"leader_epoch":0,"partition_epoch":0}]}"#,
        "\n",
        r#"{"type":"SetTopicConfigs","topic":"orders","configs":{"retention.ms":"1000"}}"#,
        "\n",
        r#"{"type":"SetBrokerConfigs","broker":1,"configs":{"retention.ms":"1000"}}"#,
        "\n",
        r#"{"type":"AllocateProducerIds","broker":1,"count":1000}"#,
        "\n",
        r#"{"type":"ElectLeaders","partitions":[["orders",0]],"unclean":false}"#,
        "\n",
        r#"{"type":"ChangeIsr","topic":"orders","partition":0,"leader_epoch":0,"partition_epoch":0,"isr":[1]}"#,
        "\n",
        r#"{"type":"AlterReassignments","partitions":[{"topic":"orders","partition":0,"replicas":[2],"allow_replication_factor_change":false},{"topic":"orders","partition":1,"replicas":[2,1]}]}"#,
        "\n",
        r#"{"type":"FenceBroker","id":2,"controlled":false,"epoch":3,"reason":"process_gone"}"#,
        "\n",
        r#"{"type":"UnfenceBroker","id":2}"#,
        "\n",
        r#"{"type":"DeleteAcls","acls":[{"resource_type":2,"name":"orders","pattern_type":3,"principal":"User:alice","host":"*","operation":3,"permission":3}]}"#,
        "\n",
        r#"{"type":"DeleteTopics","names":["gone"]}"#,
        "\n",
    );
    const GOLDEN_SNAPSHOT: &str = r#"{"version":18,"cluster_id":"cluster-a","topics":{"orders":{"name":"orders","id":"id-orders","partitions":3,"configs":{"retention.ms":"1000"},"assignment":[{"replicas":[2,1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":2,"adding_replicas":[2],"removing_replicas":[1]},{"replicas":[2,1],"isr":[2],"leader":2,"leader_epoch":2,"partition_epoch":3,"adding_replicas":[1]},{"replicas":[2,1],"isr":[1],"leader":1,"leader_epoch":1,"partition_epoch":1}]}},"broker_configs":{"cluster":{},"per_broker":{"1":{"retention.ms":"1000"}}},"brokers":{"1":{"id":1,"incarnation":"inc-1","epoch":2,"host":"127.0.0.1","port":9093,"fenced":false,"in_controlled_shutdown":false,"listeners":[{"name":"PLAINTEXT","host":"127.0.0.1","port":9093,"protocol":0}]},"2":{"id":2,"incarnation":"inc-2","epoch":3,"host":"127.0.0.1","port":9094,"fenced":false,"in_controlled_shutdown":false,"listeners":[]}},"next_producer_id":1000,"scram":{"alice":{"1":{"salt":[1,2],"stored_key":[3],"server_key":[4],"iterations":4096}}},"acls":[],"client_quotas":[{"entity":{"user":"alice","client":{"default":true}},"values":{"producer_byte_rate":1024.0}}],"liveness":{"fencings":{"process_gone":1},"isr_shrinks":0,"isr_expansions":0}}"#;
}
