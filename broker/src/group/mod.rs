//! The group coordinator of one shard: every consumer group whose `__consumer_offsets` partition
//! this shard owns. It runs the state machine in `state`, persists group metadata and committed
//! offsets to that partition (Kafka's record format), and rebuilds both from it on start.

pub mod assignor;
pub mod consumer;
mod consumer_ops;
mod join;
mod migration;
pub mod state;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::oneshot;
use tracing::{info, warn};
use tributary_metadata::types::{ProducerEpoch, ProducerId, TopicPartition};
use tributary_protocol::group_records::{GroupKey, GroupValue, MemberValue, OffsetValue};
use tributary_protocol::requests::groups::{
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchGroup, SyncGroupRequest,
};
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

use crate::coordinator_log::now_ms;
use state::{
    CommittedOffset, Group, GroupLimits, GroupState, JoinResult, Member, Reply, SyncResult,
};

pub use consumer_ops::{DescribedConsumer, DescribedConsumerGroup};
pub use tributary_metadata::internal_topics::{is_internal, partition_for_group, OFFSETS_TOPIC};

#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    pub limits: GroupLimits,
    /// KIP-848 consumer groups' limits, timeouts and assignors.
    pub consumer: consumer::ConsumerLimits,
    pub offset_metadata_max_bytes: usize,
    pub offsets_retention: Duration,
    pub offsets_partitions: i32,
}

pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

pub struct DescribedGroup {
    pub group_id: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

/// A group as ListGroups lists it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    /// "classic" or "consumer" (KIP-848).
    pub group_type: &'static str,
}

/// What an offset commit came as: OffsetCommit at its version, or TxnOffsetCommit in the
/// transaction of a producer (id, epoch).
#[derive(Debug, Clone, Copy)]
pub enum CommitFrom {
    OffsetCommit { version: i16 },
    Txn(ProducerId, ProducerEpoch),
}

impl CommitFrom {
    fn producer(self) -> Option<(ProducerId, ProducerEpoch)> {
        match self {
            CommitFrom::OffsetCommit { .. } => None,
            CommitFrom::Txn(id, epoch) => Some((id, epoch)),
        }
    }
}

/// Per-member results of a LeaveGroup: (member_id, group_instance_id, error).
pub type MemberResults = Vec<(String, Option<String>, ErrorCode)>;

/// Per-partition results of a commit, fetch or offset delete, grouped by topic.
pub type TopicResults<T> = Vec<(String, Vec<(i32, T)>)>;

pub use crate::coordinator_log::ReplicatedWrite;

/// A record of `__consumer_offsets`: key and value (`None`: a tombstone).
type Record = (Bytes, Option<Bytes>);

/// The JoinGroup and SyncGroup requests of one group waiting for its decisions, by member id.
/// A request whose member stops waiting without an answer (removed by a reload, its group
/// unloaded or deleted, or replaced by the member's next request) is dropped, and its sender
/// answers REBALANCE_IN_PROGRESS.
#[derive(Default)]
struct Parked {
    joins: HashMap<String, oneshot::Sender<JoinResult>>,
    syncs: HashMap<String, oneshot::Sender<SyncResult>>,
}

pub struct GroupCoordinator {
    config: GroupConfig,
    /// Set by the shard: how a write to a replicated offsets partition waits for its ISR.
    pub replicated_write: RefCell<Option<ReplicatedWrite>>,
    /// `__consumer_offsets`' partition count once the topic exists (it keeps the count it was
    /// created with, whatever `offsets.topic.num.partitions` says later).
    offsets_partitions: std::cell::Cell<i32>,
    groups: RefCell<HashMap<String, Group>>,
    /// KIP-848 consumer groups by id; their offsets live in `groups` like any group's.
    consumer_groups: RefCell<HashMap<String, consumer::ConsumerGroup>>,
    /// Tombstones of consumer groups converted to classic ones, written with their next write.
    converted: RefCell<HashMap<String, Vec<Record>>>,
    /// Each consumer group's records as last written, to write only what changes.
    persisted_consumers: RefCell<
        HashMap<
            String,
            std::collections::BTreeMap<
                tributary_protocol::consumer_group_records::ConsumerKey,
                Bytes,
            >,
        >,
    >,
    /// Requests waiting on each group's decisions, by group id.
    parked: RefCell<HashMap<String, Parked>>,
    /// Offset records of open transactions, by producer id, until their marker.
    pending_txn: RefCell<HashMap<ProducerId, Vec<Record>>>,
    /// Fired by what can give a group a timer (a join, a consumer heartbeat, a load): the
    /// shard's ticker, asleep while it is [`GroupCoordinator::quiet`], ticks often again.
    activity: event_listener::Event,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            replicated_write: RefCell::new(None),
            offsets_partitions: std::cell::Cell::new(config.offsets_partitions),
            config,
            groups: RefCell::new(HashMap::new()),
            consumer_groups: RefCell::new(HashMap::new()),
            persisted_consumers: RefCell::new(HashMap::new()),
            converted: RefCell::new(HashMap::new()),
            parked: RefCell::new(HashMap::new()),
            pending_txn: RefCell::new(HashMap::new()),
            activity: event_listener::Event::new(),
        }
    }

    pub fn group_partition(&self, group: &str) -> i32 {
        partition_for_group(group, self.offsets_partitions.get())
    }

    pub fn set_offsets_partitions(&self, n: i32) {
        self.offsets_partitions.set(n);
    }

    // ---------------------------------------------------------------- persistence

    /// Appends records to the group's `__consumer_offsets` partition and waits until durable
    /// (and held by the ISR when replicated).
    async fn persist(
        &self,
        log: &Rc<Partition>,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), ErrorCode> {
        crate::coordinator_log::append(log, &records, &self.replicated_write).await
    }

    fn group_record(g: &Group) -> (Bytes, Option<Bytes>) {
        let key = GroupKey::Group {
            group: g.group_id.clone(),
        }
        .encode();
        let protocol = g.protocol_name.clone().unwrap_or_default();
        let value = GroupValue {
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            generation: g.generation,
            protocol: g.protocol_name.clone(),
            leader: g.leader.clone(),
            current_state_timestamp_ms: now_ms(),
            members: g
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    subscription: m.metadata_for(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        (key, Some(value.encode()))
    }

    /// Forgets the groups of one `__consumer_offsets` partition this node no longer leads: its
    /// new leader rebuilds them from the log.
    pub fn unload(&self, partition: i32) -> usize {
        let n = self.offsets_partitions.get();
        let mut groups = self.groups.borrow_mut();
        let before = groups.len();
        groups.retain(|id, _| partition_for_group(id, n) != partition);
        self.forget_parked(&groups);
        self.consumer_groups
            .borrow_mut()
            .retain(|id, _| partition_for_group(id, n) != partition);
        self.persisted_consumers
            .borrow_mut()
            .retain(|id, _| partition_for_group(id, n) != partition);
        self.converted
            .borrow_mut()
            .retain(|id, _| partition_for_group(id, n) != partition);
        before - groups.len()
    }

    /// Delivers the answers `g` decided to the requests parked for them, then drops the
    /// requests whose member no longer waits.
    fn settle(&self, g: &mut Group) {
        let replies = g.take_replies();
        let mut all = self.parked.borrow_mut();
        // The common case, every group on every tick: nothing decided, nothing parked.
        if replies.is_empty() && !all.contains_key(&g.group_id) {
            return;
        }
        let parked = all.entry(g.group_id.clone()).or_default();
        for reply in replies {
            match reply {
                Reply::Join(result) => {
                    if let Some(tx) = parked.joins.remove(&result.member_id) {
                        let _ = tx.send(result);
                    }
                }
                Reply::Sync { member_id, result } => {
                    if let Some(tx) = parked.syncs.remove(&member_id) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
        let waits = |id: &String, join: bool| {
            g.members.get(id).is_some_and(|m| {
                if join {
                    m.awaiting_join
                } else {
                    m.awaiting_sync
                }
            })
        };
        parked.joins.retain(|id, _| waits(id, true));
        parked.syncs.retain(|id, _| waits(id, false));
        if parked.joins.is_empty() && parked.syncs.is_empty() {
            all.remove(&g.group_id);
        }
    }

    /// Drops the parked requests of groups this coordinator no longer holds.
    fn forget_parked(&self, groups: &HashMap<String, Group>) {
        self.parked
            .borrow_mut()
            .retain(|id, _| groups.contains_key(id));
    }

    /// Rebuilds groups and offsets from one `__consumer_offsets` partition this node leads,
    /// reading to its log end as Kafka's coordinator does: a new leader's log is the one its
    /// high watermark will reach.
    /// `configs`: the groups' own configs, which their members' re-armed deadlines follow.
    pub async fn load(
        &self,
        partition: i32,
        log: &Rc<Partition>,
        configs: &consumer_ops::GroupConfigs,
    ) {
        use crate::coordinator_log::Replayed;
        // Nothing is owed for a partition being loaded: what the log holds is the truth.
        let n = self.offsets_partitions.get();
        self.converted
            .borrow_mut()
            .retain(|id, _| partition_for_group(id, n) != partition);
        crate::coordinator_log::replay(log, |item| match item {
            Replayed::Record {
                key,
                value,
                txn_producer: None,
            } => self.apply_record(key, value),
            Replayed::Record {
                key,
                value,
                txn_producer: Some(pid),
            } => self.hold_txn_record(pid, key, value),
            Replayed::Marker {
                producer_id,
                commit,
            } => self.end_txn_offsets(producer_id, commit),
        })
        .await;
        self.rearm_consumers(partition, configs);
        // Restored members have sessions to expire.
        self.activity.notify(usize::MAX);
    }

    fn apply_record(&self, key: Bytes, value: Option<Bytes>) {
        let now = Instant::now();
        let mut groups = self.groups.borrow_mut();
        match GroupKey::decode(key) {
            Ok(GroupKey::Offset {
                group,
                topic,
                partition,
            }) => match value.map(OffsetValue::decode) {
                Some(Ok(v)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(&group, now));
                    g.offsets.insert(
                        TopicPartition::new(topic, partition),
                        CommittedOffset {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata,
                            commit_timestamp_ms: v.commit_timestamp_ms,
                        },
                    );
                }
                None => {
                    if let Some(g) = groups.get_mut(&group) {
                        g.offsets.remove(&TopicPartition::new(topic, partition));
                    }
                }
                Some(Err(e)) => warn!(error = %e, "unreadable offset record skipped"),
            },
            Ok(GroupKey::Group { group }) => match value.map(GroupValue::decode) {
                Some(Ok(v)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(&group, now));
                    restore_group(g, v, now);
                    self.settle(g);
                }
                None => {
                    // The classic group is gone; offsets its id still holds stay (a group that
                    // became a consumer group keeps them in this entry). DeleteGroups writes
                    // the offsets' tombstones first, so nothing is left of a deleted group.
                    match groups.get_mut(&group) {
                        Some(g) if !g.offsets.is_empty() => {
                            let offsets = std::mem::take(&mut g.offsets);
                            *g = Group::new(&group, now);
                            g.offsets = offsets;
                            self.parked.borrow_mut().remove(&group);
                        }
                        _ => {
                            groups.remove(&group);
                            self.forget_parked(&groups);
                        }
                    }
                }
                Some(Err(e)) => warn!(error = %e, "unreadable group record skipped"),
            },
            Ok(GroupKey::Consumer(key)) => {
                drop(groups);
                self.apply_consumer_record(key, value);
            }
            Err(e) => warn!(error = %e, "unknown __consumer_offsets key skipped"),
        }
    }

    // ---------------------------------------------------------------- membership

    pub fn join(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client_id: String,
        client_host: String,
    ) -> Result<oneshot::Receiver<JoinResult>, Box<JoinResult>> {
        self.activity.notify(usize::MAX);
        let limits = self.config.limits;
        let now = Instant::now();
        let session = join::session_timeout(&req, &limits)?;
        if self.consumer_group_has_members(&req.group_id) {
            // A classic member of a group the consumer protocol runs: Kafka's answer when it
            // does not run mixed groups.
            return Err(Box::new(JoinResult::error(
                ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                &req.member_id,
            )));
        }
        if self.is_consumer_group(&req.group_id) {
            self.convert_to_classic(&req.group_id);
        }
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(req.group_id.clone())
            .or_insert_with(|| Group::new(&req.group_id, now));
        if !g.supports(&req.protocol_type, &req.protocols) {
            return Err(Box::new(JoinResult::error(
                ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                &req.member_id,
            )));
        }
        let joiner = join::Joiner {
            client_id,
            client_host,
            session,
            version,
        };
        let admitted = match g.identify(&req, &joiner, now, &limits) {
            Ok(join::Identity::Rejoined(member_id)) => Ok(member_id),
            Ok(join::Identity::Member(member_id)) => g
                .admit(member_id.clone(), req, joiner, now, &limits)
                .map(|()| member_id),
            Err(refused) => Err(refused),
        };
        let rx = admitted.map(|member_id| {
            let (tx, rx) = oneshot::channel();
            let mut parked = self.parked.borrow_mut();
            let group = parked.entry(g.group_id.clone()).or_default();
            group.joins.insert(member_id, tx);
            rx
        });
        self.settle(g);
        rx
    }

    pub fn sync(
        &self,
        req: SyncGroupRequest,
    ) -> Result<(oneshot::Receiver<SyncResult>, bool), SyncResult> {
        let now = Instant::now();
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(&req.group_id) else {
            return Err(SyncResult::error(ErrorCode::UNKNOWN_MEMBER_ID));
        };
        let synced = g.sync(&req, now).map(|completed| {
            let (tx, rx) = oneshot::channel();
            let mut parked = self.parked.borrow_mut();
            let group = parked.entry(g.group_id.clone()).or_default();
            group.syncs.insert(req.member_id, tx);
            (rx, completed)
        });
        self.settle(g);
        synced.map_err(SyncResult::error)
    }

    /// Writes the group's metadata after a completed rebalance (or, for a consumer group, what
    /// changed in it).
    pub async fn persist_group(
        &self,
        log: &Rc<Partition>,
        group_id: &str,
    ) -> Result<(), ErrorCode> {
        if self.is_consumer_group(group_id) {
            return self.persist_consumer(log, group_id).await;
        }
        let Some(record) = self.groups.borrow().get(group_id).map(Self::group_record) else {
            return Ok(());
        };
        let mut records = self
            .converted
            .borrow_mut()
            .remove(group_id)
            .unwrap_or_default();
        records.push(record);
        let written = self.persist(log, records.clone()).await;
        if let Err(e) = written {
            warn!(group = %group_id, error = e.0, "persisting group metadata failed");
            // The consumer group's tombstones go with the next write, ahead of anything owed
            // since, while this coordinator still holds the group as a classic one.
            records.pop();
            let classic_here =
                self.groups.borrow().contains_key(group_id) && !self.is_consumer_group(group_id);
            if !records.is_empty() && classic_here {
                let mut converted = self.converted.borrow_mut();
                let later = converted.remove(group_id).unwrap_or_default();
                records.extend(later);
                converted.insert(group_id.to_string(), records);
            }
        }
        written
    }

    pub fn heartbeat(&self, req: HeartbeatRequest) -> ErrorCode {
        let now = Instant::now();
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(&req.group_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        if let Err(e) = g.check_instance(&req.member_id, req.group_instance_id.as_deref()) {
            return e;
        }
        let Some(m) = g.members.get_mut(&req.member_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        m.deadline = now + m.session_timeout;
        if req.generation_id != g.generation {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        match g.state {
            GroupState::PreparingRebalance => ErrorCode::REBALANCE_IN_PROGRESS,
            GroupState::Stable | GroupState::CompletingRebalance => ErrorCode::NONE,
            GroupState::Empty | GroupState::Dead => ErrorCode::UNKNOWN_MEMBER_ID,
        }
    }

    /// Removes members; the flag says the group became Empty and its metadata must be persisted.
    pub fn leave(&self, req: LeaveGroupRequest) -> (ErrorCode, MemberResults, bool) {
        let now = Instant::now();
        let limits = self.config.limits;
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(&req.group_id) else {
            return (
                ErrorCode::UNKNOWN_MEMBER_ID,
                req.members
                    .into_iter()
                    .map(|(m, i)| (m, i, ErrorCode::UNKNOWN_MEMBER_ID))
                    .collect(),
                false,
            );
        };
        let mut results = Vec::with_capacity(req.members.len());
        let mut removed = false;
        for (member_id, instance) in req.members {
            let id = match (&instance, member_id.is_empty()) {
                (Some(i), true) => g.static_members.get(i).cloned().unwrap_or_default(),
                _ => member_id.clone(),
            };
            let code = if let Err(e) = g.check_instance(&id, instance.as_deref()) {
                e
            } else if g.members.contains_key(&id) {
                info!(group = %g.group_id, member = %id, "member left");
                g.remove_member(&id);
                removed = true;
                ErrorCode::NONE
            } else {
                ErrorCode::UNKNOWN_MEMBER_ID
            };
            results.push((member_id, instance, code));
        }
        let mut emptied = false;
        if removed {
            match g.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    g.prepare_rebalance(now, &limits)
                }
                _ => {}
            }
            emptied = g.maybe_complete_join(now) && g.state == GroupState::Empty;
        }
        self.settle(g);
        let top = if results.len() == 1 {
            results[0].2
        } else {
            ErrorCode::NONE
        };
        (top, results, emptied)
    }

    // ---------------------------------------------------------------- offsets

    /// Validates and persists a commit. `topics` holds partitions already checked to exist;
    /// `unknown` those that do not, answered UNKNOWN_TOPIC_OR_PARTITION.
    /// OffsetCommit; with `txn` (producer id, epoch), TxnOffsetCommit: the offsets are written
    /// in the producer's transaction and become visible only when its COMMIT marker reaches
    /// this partition (`end_txn_offsets`).
    pub async fn commit(
        &self,
        log: &Rc<Partition>,
        req: OffsetCommitRequest,
        from: CommitFrom,
    ) -> TopicResults<ErrorCode> {
        let txn = from.producer();
        let all = |code: ErrorCode| -> TopicResults<ErrorCode> {
            req.topics
                .iter()
                .map(|(t, ps)| (t.clone(), ps.iter().map(|p| (p.partition, code)).collect()))
                .collect()
        };
        if let Err(code) = self.check_commit(&req, from) {
            // Said at info: a refused commit is what a stuck consumer or transactional producer
            // shows first, and the client's own report may name another broker.
            info!(
                group = %req.group_id,
                member = %req.member_id,
                generation = req.generation_id,
                transactional = txn.is_some(),
                error = ?code,
                "offset commit refused"
            );
            return all(code);
        }
        let ts = now_ms();
        let mut records = Vec::new();
        let mut results: TopicResults<ErrorCode> = Vec::new();
        for (topic, parts) in &req.topics {
            let mut rs = Vec::with_capacity(parts.len());
            for p in parts {
                let metadata = p.metadata.clone().unwrap_or_default();
                if metadata.len() > self.config.offset_metadata_max_bytes {
                    rs.push((p.partition, ErrorCode::OFFSET_METADATA_TOO_LARGE));
                    continue;
                }
                let key = GroupKey::Offset {
                    group: req.group_id.clone(),
                    topic: topic.clone(),
                    partition: p.partition,
                };
                let value = OffsetValue {
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata,
                    commit_timestamp_ms: ts,
                };
                records.push((key.encode(), Some(value.encode())));
                rs.push((p.partition, ErrorCode::NONE));
            }
            results.push((topic.clone(), rs));
        }
        let written = match txn {
            None => self.persist(log, records.clone()).await,
            Some(producer) => {
                crate::coordinator_log::append_for(
                    log,
                    &records,
                    Some(producer),
                    &self.replicated_write,
                )
                .await
            }
        };
        if let Err(code) = written {
            return all(code);
        }
        for (key, value) in records {
            match txn {
                None => self.apply_record(key, value),
                Some((pid, _)) => self.hold_txn_record(pid, key, value),
            }
        }
        results
    }

    /// Whether the group takes a commit of `req`: by the member epoch in a consumer group, by
    /// the generation in a classic one.
    fn check_commit(&self, req: &OffsetCommitRequest, from: CommitFrom) -> Result<(), ErrorCode> {
        let (transactional, version) = match from {
            CommitFrom::OffsetCommit { version } => (false, Some(version)),
            CommitFrom::Txn(..) => (true, None),
        };
        // A transactional commit outside any member (no id, no epoch) is taken by a consumer
        // group too, as Kafka does.
        let outside_txn = transactional && req.generation_id < 0 && req.member_id.is_empty();
        let consumer = self
            .consumer_commit_check(&req.group_id, &req.member_id, req.generation_id, version)
            .filter(|_| !outside_txn);
        match (consumer, self.groups.borrow().get(&req.group_id)) {
            // A transactional commit behind the member's epoch is told ILLEGAL_GENERATION, as
            // Kafka tells it.
            (Some(Err(ErrorCode::STALE_MEMBER_EPOCH)), _) if transactional => {
                Err(ErrorCode::ILLEGAL_GENERATION)
            }
            (Some(checked), _) => checked,
            (None, Some(g)) => g.validate_offset_commit(
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id,
            ),
            // A simple commit creates the group, as in Kafka.
            (None, None) if req.generation_id < 0 => Ok(()),
            // One naming a generation of a group that does not exist: GROUP_ID_NOT_FOUND from
            // OffsetCommit v9 on (an answer both protocols' clients understand), before it
            // ILLEGAL_GENERATION, as Kafka's `OffsetMetadataManager` answers.
            (None, None) => match version {
                Some(v) if v >= consumer::OFFSET_COMMIT_MEMBER_EPOCH_VERSION => {
                    Err(ErrorCode::GROUP_ID_NOT_FOUND)
                }
                _ => Err(ErrorCode::ILLEGAL_GENERATION),
            },
        }
    }

    /// Holds a transactional offset record until its producer's marker.
    fn hold_txn_record(&self, producer_id: ProducerId, key: Bytes, value: Option<Bytes>) {
        self.pending_txn
            .borrow_mut()
            .entry(producer_id)
            .or_default()
            .push((key, value));
    }

    /// A transaction marker of `producer_id` reached this partition: its held offsets take
    /// effect (COMMIT) or are dropped (ABORT).
    pub fn end_txn_offsets(&self, producer_id: ProducerId, commit: bool) {
        let held = self.pending_txn.borrow_mut().remove(&producer_id);
        if commit {
            for (key, value) in held.into_iter().flatten() {
                self.apply_record(key, value);
            }
        }
    }

    /// Whether a transaction holds an offset of `group` for the partition not yet committed
    /// (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending_offset(&self, group: &str, tp: &TopicPartition) -> bool {
        self.pending_txn
            .borrow()
            .values()
            .flatten()
            .any(|(key, _)| {
                matches!(
                    GroupKey::decode(key.clone()),
                    Ok(GroupKey::Offset { group: g, topic: t, partition: p })
                        if g == group && t == tp.topic && p == tp.partition
                )
            })
    }

    /// Every group's committed offsets as (group, topic, partition, offset), for the metrics
    /// endpoint's consumer lag.
    pub fn committed_offsets(&self) -> Vec<(String, String, i32, i64)> {
        let groups = self.groups.borrow();
        let mut out = Vec::new();
        for (name, g) in groups.iter() {
            for (tp, c) in &g.offsets {
                out.push((name.clone(), tp.topic.clone(), tp.partition, c.offset));
            }
        }
        out
    }

    /// Committed offsets: (offset, leader_epoch, metadata) per partition; -1 when none.
    pub fn fetch_offsets(&self, req: &OffsetFetchGroup) -> TopicResults<(i64, i32, String)> {
        let groups = self.groups.borrow();
        let g = groups.get(&req.group_id);
        match &req.topics {
            Some(topics) => topics
                .iter()
                .map(|(t, ps)| {
                    let rs = ps
                        .iter()
                        .map(|p| {
                            let c =
                                g.and_then(|g| g.offsets.get(&TopicPartition::new(t.clone(), *p)));
                            (
                                *p,
                                c.map_or((-1, -1, String::new()), |c| {
                                    (c.offset, c.leader_epoch, c.metadata.clone())
                                }),
                            )
                        })
                        .collect();
                    (t.clone(), rs)
                })
                .collect(),
            None => {
                let mut out: TopicResults<(i64, i32, String)> = Vec::new();
                for (tp, c) in g.map(|g| g.offsets.iter()).into_iter().flatten() {
                    let entry = (tp.partition, (c.offset, c.leader_epoch, c.metadata.clone()));
                    match out.last_mut().filter(|(name, _)| *name == tp.topic) {
                        Some((_, v)) => v.push(entry),
                        None => out.push((tp.topic.clone(), vec![entry])),
                    }
                }
                out
            }
        }
    }

    pub async fn delete_offsets(
        &self,
        log: &Rc<Partition>,
        req: OffsetDeleteRequest,
    ) -> (ErrorCode, TopicResults<ErrorCode>) {
        let (records, results) = {
            let groups = self.groups.borrow();
            let Some(g) = groups.get(&req.group_id) else {
                return (ErrorCode::GROUP_ID_NOT_FOUND, Vec::new());
            };
            let subscribed = if g.members.is_empty() {
                Vec::new()
            } else {
                g.subscribed_topics()
            };
            let mut records = Vec::new();
            let results: TopicResults<ErrorCode> = req
                .topics
                .iter()
                .map(|(t, ps)| {
                    let rs = ps
                        .iter()
                        .map(|p| {
                            if subscribed.contains(t) {
                                (*p, ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC)
                            } else {
                                if g.offsets.contains_key(&TopicPartition::new(t.clone(), *p)) {
                                    let key = GroupKey::Offset {
                                        group: req.group_id.clone(),
                                        topic: t.clone(),
                                        partition: *p,
                                    };
                                    records.push((key.encode(), None));
                                }
                                (*p, ErrorCode::NONE)
                            }
                        })
                        .collect();
                    (t.clone(), rs)
                })
                .collect();
            (records, results)
        };
        if let Err(code) = self.persist(log, records).await {
            return (code, Vec::new());
        }
        if let Some(g) = self.groups.borrow_mut().get_mut(&req.group_id) {
            for (t, rs) in &results {
                for (p, code) in rs {
                    if *code == ErrorCode::NONE {
                        g.offsets.remove(&TopicPartition::new(t.clone(), *p));
                    }
                }
            }
        }
        (ErrorCode::NONE, results)
    }

    // ---------------------------------------------------------------- administration

    pub fn describe(&self, group_id: &str) -> DescribedGroup {
        let groups = self.groups.borrow();
        // A consumer group is "Dead" to DescribeGroups below v6, as Kafka answers it.
        let found = groups
            .get(group_id)
            .filter(|_| !self.is_consumer_group(group_id));
        let Some(g) = found else {
            return DescribedGroup {
                group_id: group_id.into(),
                state: "Dead",
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            };
        };
        let protocol = g.protocol_name.clone().unwrap_or_default();
        let stable = g.state == GroupState::Stable;
        DescribedGroup {
            group_id: group_id.into(),
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: g
                .members
                .values()
                .map(|m| DescribedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata_for(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// Every group here, of either type.
    pub fn list(&self) -> Vec<ListedGroup> {
        let consumer = self.consumer_groups.borrow();
        let mut out: Vec<ListedGroup> = consumer
            .values()
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: "consumer".into(),
                state: g.state_name().to_string(),
                group_type: "consumer",
            })
            .collect();
        out.extend(
            self.groups
                .borrow()
                .values()
                .filter(|g| !consumer.contains_key(&g.group_id))
                .map(|g| ListedGroup {
                    group_id: g.group_id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state.name().to_string(),
                    group_type: "classic",
                }),
        );
        out
    }

    pub async fn delete_group(&self, log: &Rc<Partition>, group_id: &str) -> ErrorCode {
        if self.consumer_group_has_members(group_id) {
            return ErrorCode::NON_EMPTY_GROUP;
        }
        let consumer = self.is_consumer_group(group_id);
        let mut records = if consumer {
            self.consumer_tombstones(group_id)
        } else {
            Vec::new()
        };
        if consumer {
            return self.delete_consumer_group(log, group_id, records).await;
        }
        {
            let groups = self.groups.borrow();
            let Some(g) = groups.get(group_id) else {
                return ErrorCode::GROUP_ID_NOT_FOUND;
            };
            if g.state != GroupState::Empty {
                return ErrorCode::NON_EMPTY_GROUP;
            }
            records.extend(g.offsets.keys().map(|tp| {
                (
                    GroupKey::Offset {
                        group: group_id.into(),
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    }
                    .encode(),
                    None,
                )
            }));
            records.push((
                GroupKey::Group {
                    group: group_id.into(),
                }
                .encode(),
                None,
            ));
        }
        if let Err(code) = self.persist(log, records).await {
            return code;
        }
        let mut groups = self.groups.borrow_mut();
        groups.remove(group_id);
        self.forget_parked(&groups);
        self.forget_consumer_group(group_id);
        self.converted.borrow_mut().remove(group_id);
        info!(group = %group_id, "group deleted");
        ErrorCode::NONE
    }

    /// Whether no tick could change anything here but expire offsets: every classic group is
    /// idle ([`Group::idle`]), no consumer group has members, and no request is parked. What
    /// ends this fires [`GroupCoordinator::listen_activity`].
    pub fn quiet(&self) -> bool {
        self.parked.borrow().is_empty()
            && self.groups.borrow().values().all(Group::idle)
            && self
                .consumer_groups
                .borrow()
                .values()
                .all(|c| c.members.is_empty())
    }

    /// Fires at the next join, consumer heartbeat or load, any of which may end a quiet spell.
    pub fn listen_activity(&self) -> event_listener::EventListener {
        self.activity.listen()
    }

    /// Advances timers: session expiry, join completion, offset retention. Returns the groups
    /// whose metadata changed and must be persisted, and offset tombstones to write.
    /// `topics`: the image's subscribable topics, asked for only when a consumer group is
    /// downgraded.
    pub fn tick(
        &self,
        now: Instant,
        expire_offsets: bool,
        topics: &dyn Fn() -> consumer::TopicsImage,
    ) -> (Vec<String>, Vec<(String, Bytes)>) {
        let limits = self.config.limits;
        let mut tombstones = Vec::new();
        let retention_ms = self.config.offsets_retention.as_millis() as i64;
        let wall = now_ms();
        let mut changed = self.expire_consumers(now, topics);
        let mut groups = self.groups.borrow_mut();
        for g in groups.values_mut() {
            g.expire_sessions(now, &limits);
            if g.maybe_complete_join(now) && g.state == GroupState::Empty {
                changed.push(g.group_id.clone());
            }
            self.settle(g);
            // A consumer group's offsets live in its classic entry, which has no members: they
            // expire only once the consumer group has none either.
            let empty =
                g.state == GroupState::Empty && !self.consumer_group_has_members(&g.group_id);
            if expire_offsets && empty {
                let old: Vec<TopicPartition> = g
                    .offsets
                    .iter()
                    .filter(|(_, c)| c.commit_timestamp_ms + retention_ms < wall)
                    .map(|(k, _)| k.clone())
                    .collect();
                for tp in old {
                    g.offsets.remove(&tp);
                    tombstones.push((
                        g.group_id.clone(),
                        GroupKey::Offset {
                            group: g.group_id.clone(),
                            topic: tp.topic,
                            partition: tp.partition,
                        }
                        .encode(),
                    ));
                }
            }
        }
        // A member id handed out (KIP-394's MEMBER_ID_REQUIRED) keeps its group until it lapses
        // (see `Group::idle`): the client's next join names it, and a group removed meanwhile
        // answers that join UNKNOWN_MEMBER_ID.
        groups.retain(|_, g| !(g.idle() && g.offsets.is_empty() && g.generation == 0));
        self.forget_parked(&groups);
        (changed, tombstones)
    }

    /// Persists what `tick` decided.
    pub async fn persist_tick(
        &self,
        log_for: impl Fn(&str) -> Option<Rc<Partition>>,
        changed: Vec<String>,
        tombstones: Vec<(String, Bytes)>,
    ) {
        for group in changed {
            if let Some(log) = log_for(&group) {
                let _ = self.persist_group(&log, &group).await;
            }
        }
        for (group, key) in tombstones {
            if let Some(log) = log_for(&group) {
                let _ = self.persist(&log, vec![(key, None)]).await;
            }
        }
    }
}

/// A classic group as its GroupMetadata record states it (a coordinator loading it): its
/// generation, protocol, leader and members, Stable with members and Empty without.
fn restore_group(g: &mut Group, v: GroupValue, now: Instant) {
    g.generation = v.generation;
    g.protocol_type = Some(v.protocol_type).filter(|p| !p.is_empty());
    g.protocol_name = v.protocol.clone();
    g.leader = v.leader;
    g.members.clear();
    g.static_members.clear();
    for m in v.members {
        let session = Duration::from_millis(m.session_timeout_ms.max(0) as u64);
        if let Some(i) = &m.group_instance_id {
            g.static_members.insert(i.clone(), m.member_id.clone());
        }
        g.members.insert(
            m.member_id.clone(),
            Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout: session,
                rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                protocols: vec![(v.protocol.clone().unwrap_or_default(), m.subscription)],
                assignment: m.assignment,
                deadline: now + session,
                awaiting_join: false,
                awaiting_sync: false,
            },
        );
    }
    g.state = if g.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
}

#[cfg(test)]
mod coordinator_tests {
    use super::*;
    use tributary_protocol::requests::groups::JoinGroupRequest;

    pub(super) fn coordinator_with(retention: Duration) -> GroupCoordinator {
        GroupCoordinator::new(GroupConfig {
            limits: GroupLimits {
                max_size: 10,
                min_session_timeout: Duration::from_millis(100),
                max_session_timeout: Duration::from_secs(600),
                initial_rebalance_delay: Duration::from_millis(0),
            },
            consumer: consumer::ConsumerLimits {
                max_size: 10,
                session_timeout: Duration::from_secs(45),
                heartbeat_interval: Duration::from_secs(5),
                assignors: [Some(assignor::Assignor::Uniform), None],
                session_timeout_range: (Duration::from_secs(1), Duration::from_secs(60)),
                heartbeat_interval_range: (Duration::from_secs(1), Duration::from_secs(15)),
                migration: consumer::MigrationPolicy::named("bidirectional").unwrap(),
            },
            offset_metadata_max_bytes: 4096,
            offsets_retention: retention,
            offsets_partitions: 50,
        })
    }

    /// A KIP-848 member of group "g" joining on topic "t" (one partition unless `topics`
    /// says otherwise), and who it comes from.
    pub(super) fn consumer_join(
        member: &str,
    ) -> (
        tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest,
        consumer::Caller,
    ) {
        let req = tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: 0,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            subscribed_topic_regex: None,
            server_assignor: None,
            topic_partitions: Some(Vec::new()),
        };
        let caller = consumer::Caller {
            client_id: "c".into(),
            client_host: "h".into(),
            version: 1,
        };
        (req, caller)
    }

    pub(super) fn join_req(member: &str) -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: "g".into(),
            session_timeout_ms: 6000,
            rebalance_timeout_ms: 300_000,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        }
    }

    #[test]
    fn a_member_restored_from_the_log_that_never_returns_expires_during_the_next_rebalance() {
        let c = coordinator_with(Duration::from_secs(3600));
        // As loaded after a restart: a Stable group whose only member is gone for good.
        let record = {
            let mut g = Group::new("g", Instant::now());
            g.protocol_type = Some("consumer".into());
            g.protocol_name = Some("range".into());
            g.generation = 3;
            g.leader = Some("stale".into());
            g.members.insert(
                "stale".into(),
                Member {
                    member_id: "stale".into(),
                    group_instance_id: None,
                    client_id: "c".into(),
                    client_host: "h".into(),
                    session_timeout: Duration::from_secs(6),
                    rebalance_timeout: Duration::from_secs(300),
                    protocols: vec![("range".into(), Bytes::from_static(b"m"))],
                    assignment: Bytes::new(),
                    deadline: Instant::now(),
                    awaiting_join: false,
                    awaiting_sync: false,
                },
            );
            GroupCoordinator::group_record(&g)
        };
        c.apply_record(record.0, record.1);
        let first = c
            .join(join_req(""), 5, "new".into(), "h".into())
            .unwrap_err();
        assert_eq!(first.error, ErrorCode::MEMBER_ID_REQUIRED);
        let mut rx = c
            .join(join_req(&first.member_id), 5, "new".into(), "h".into())
            .unwrap();
        let start = Instant::now();
        c.tick(
            start + Duration::from_secs(1),
            false,
            &consumer::TopicsImage::new,
        );
        assert!(
            rx.try_recv().unwrap().is_none(),
            "still waiting for the old member"
        );
        c.tick(
            start + Duration::from_secs(7),
            false,
            &consumer::TopicsImage::new,
        );
        let joined = rx
            .try_recv()
            .unwrap()
            .expect("join completed once the old session expired");
        assert_eq!(joined.error, ErrorCode::NONE);
        assert_eq!(joined.generation_id, 4);
        assert_eq!(joined.leader, first.member_id);
    }
}

#[cfg(test)]
mod parked_request_tests {
    use super::coordinator_tests::{coordinator_with as coordinator, join_req};
    use super::*;

    /// Joins a new member (the two steps of KIP-394) and returns its parked join.
    fn join_new(c: &GroupCoordinator, client: &str) -> oneshot::Receiver<JoinResult> {
        let first = c
            .join(join_req(""), 5, client.into(), "h".into())
            .unwrap_err();
        assert_eq!(first.error, ErrorCode::MEMBER_ID_REQUIRED);
        c.join(join_req(&first.member_id), 5, client.into(), "h".into())
            .unwrap()
    }

    fn sync_req(member: &str, generation: i32) -> SyncGroupRequest {
        SyncGroupRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments: vec![(member.into(), Bytes::from_static(b"all"))],
        }
    }

    #[test]
    fn a_join_waits_for_the_group_and_is_dropped_when_the_group_is_unloaded() {
        let c = coordinator(Duration::from_secs(3600));
        let a = join_new(&c, "a")
            .try_recv()
            .unwrap()
            .expect("alone: joined at once");
        assert_eq!(
            (a.generation_id, a.leader.as_str()),
            (1, a.member_id.as_str())
        );
        let (mut synced, completed) = c.sync(sync_req(&a.member_id, 1)).unwrap();
        assert!(completed, "the leader's sync completes the rebalance");
        assert_eq!(
            synced.try_recv().unwrap().unwrap().assignment,
            Bytes::from_static(b"all")
        );
        // b's join waits for a to rejoin.
        let mut b = join_new(&c, "b");
        assert!(b.try_recv().unwrap().is_none());
        assert_eq!(c.parked.borrow()["g"].joins.len(), 1);
        // Another broker now leads the group's partition: b's request is dropped, which its
        // connection answers REBALANCE_IN_PROGRESS, and nothing stays parked.
        assert_eq!(c.unload(c.group_partition("g")), 1);
        assert!(b.try_recv().is_err(), "the parked join was dropped");
        assert!(c.parked.borrow().is_empty());
    }

    #[test]
    fn a_static_member_refused_by_a_full_group_joins_once_there_is_room() {
        let c = coordinator(Duration::from_secs(3600));
        // A group of one member at most.
        let c = GroupCoordinator::new(GroupConfig {
            limits: GroupLimits {
                max_size: 1,
                ..c.config.limits
            },
            ..c.config
        });
        let a = join_new(&c, "a").try_recv().unwrap().unwrap();
        let static_req = JoinGroupRequest {
            group_instance_id: Some("i1".into()),
            ..join_req("")
        };
        let full = c
            .join(static_req.clone(), 5, "s".into(), "h".into())
            .unwrap_err();
        assert_eq!(full.error, ErrorCode::GROUP_MAX_SIZE_REACHED);
        // a leaves; the static member comes back and is not fenced by its refused id.
        let left = c.leave(LeaveGroupRequest {
            group_id: "g".into(),
            members: vec![(a.member_id.clone(), None)],
        });
        assert_eq!(left.0, ErrorCode::NONE);
        let joined = c
            .join(static_req, 5, "s".into(), "h".into())
            .unwrap()
            .try_recv()
            .unwrap()
            .expect("joined at once: alone in the group");
        assert_eq!(joined.error, ErrorCode::NONE);
        let hb = c.heartbeat(HeartbeatRequest {
            group_id: "g".into(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: Some("i1".into()),
        });
        assert_eq!(hb, ErrorCode::NONE);
    }

    #[test]
    fn a_known_member_id_with_an_instance_it_does_not_hold_is_unknown() {
        let c = coordinator(Duration::from_secs(3600));
        let a = join_new(&c, "a").try_recv().unwrap().unwrap();
        // Kafka: a member id with a group.instance.id the group does not know.
        let claimed = JoinGroupRequest {
            group_instance_id: Some("i9".into()),
            ..join_req(&a.member_id)
        };
        let refused = c.join(claimed, 5, "a".into(), "h".into()).unwrap_err();
        assert_eq!(refused.error, ErrorCode::UNKNOWN_MEMBER_ID);
        // The member is unharmed, and removing it later touches no instance.
        let left = c.leave(LeaveGroupRequest {
            group_id: "g".into(),
            members: vec![(a.member_id.clone(), None)],
        });
        assert_eq!(left.0, ErrorCode::NONE);
        assert!(c.groups.borrow()["g"].static_members.is_empty());
    }

    #[test]
    fn a_member_id_handed_out_keeps_its_group_until_it_lapses() {
        let c = coordinator(Duration::from_secs(3600));
        let first = c.join(join_req(""), 5, "a".into(), "h".into()).unwrap_err();
        assert_eq!(first.error, ErrorCode::MEMBER_ID_REQUIRED);
        // The coordinator's tick runs between the client's two joins.
        let now = Instant::now();
        c.tick(now, false, &consumer::TopicsImage::new);
        let joined = c
            .join(join_req(&first.member_id), 5, "a".into(), "h".into())
            .expect("the handed-out id is still known")
            .try_recv()
            .unwrap()
            .expect("alone: joined at once");
        assert_eq!(joined.member_id, first.member_id);
        // An id never used lapses with its session, and then its empty group goes.
        let unused = c
            .join(
                JoinGroupRequest {
                    group_id: "h".into(),
                    ..join_req("")
                },
                5,
                "b".into(),
                "h".into(),
            )
            .unwrap_err();
        assert_eq!(unused.error, ErrorCode::MEMBER_ID_REQUIRED);
        c.tick(
            now + Duration::from_secs(1),
            false,
            &consumer::TopicsImage::new,
        );
        assert!(c.groups.borrow().contains_key("h"));
        c.tick(
            now + Duration::from_secs(7),
            false,
            &consumer::TopicsImage::new,
        );
        assert!(!c.groups.borrow().contains_key("h"));
    }

    #[test]
    fn a_coordinator_is_quiet_only_without_members_and_a_join_wakes_its_ticker() {
        use futures::FutureExt;
        let c = coordinator(Duration::from_secs(3600));
        assert!(c.quiet(), "no group at all");
        let woken = c.listen_activity();
        let first = c.join(join_req(""), 5, "a".into(), "h".into()).unwrap_err();
        assert_eq!(woken.now_or_never(), Some(()), "a join wakes the ticker");
        assert!(!c.quiet(), "a member id handed out lapses on a tick");
        let a = c
            .join(join_req(&first.member_id), 5, "a".into(), "h".into())
            .unwrap()
            .try_recv()
            .unwrap()
            .expect("alone: joined at once");
        assert!(!c.quiet(), "a member's session expires on a tick");
        let left = c.leave(LeaveGroupRequest {
            group_id: "g".into(),
            members: vec![(a.member_id.clone(), None)],
        });
        assert_eq!(left.0, ErrorCode::NONE);
        assert!(c.quiet(), "an empty group");
        assert!(c.listen_activity().now_or_never().is_none());
    }

    #[test]
    fn a_member_that_asks_again_replaces_its_parked_request() {
        let c = coordinator(Duration::from_secs(3600));
        let a = join_new(&c, "a").try_recv().unwrap().unwrap();
        let (_synced, completed) = c.sync(sync_req(&a.member_id, 1)).unwrap();
        assert!(completed);
        let b = join_new(&c, "b");
        let b_id = c.parked.borrow()["g"].joins.keys().next().unwrap().clone();
        let mut again = c.join(join_req(&b_id), 5, "b".into(), "h".into()).unwrap();
        let mut b = b;
        assert!(b.try_recv().is_err(), "the first request was replaced");
        assert!(again.try_recv().unwrap().is_none(), "the second waits");
        // a rejoins: the join phase completes and b's second request gets generation 2.
        let mut a_again = c
            .join(join_req(&a.member_id), 5, "a".into(), "h".into())
            .unwrap();
        let b_joined = again.try_recv().unwrap().expect("answered");
        assert_eq!(b_joined.generation_id, 2);
        assert_eq!(a_again.try_recv().unwrap().unwrap().generation_id, 2);
        assert!(c.parked.borrow().is_empty());
    }
}

#[cfg(test)]
mod retention_and_fencing_tests {
    use super::coordinator_tests::{consumer_join, coordinator_with as coordinator, join_req};
    use super::*;

    fn offset_record(
        group: &str,
        partition: i32,
        commit_timestamp_ms: i64,
    ) -> (Bytes, Option<Bytes>) {
        let key = GroupKey::Offset {
            group: group.into(),
            topic: "t".into(),
            partition,
        };
        let value = OffsetValue {
            offset: 5,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms,
        };
        (key.encode(), Some(value.encode()))
    }

    #[test]
    fn offsets_of_an_empty_group_expire_after_the_retention_and_become_tombstones() {
        let c = coordinator(Duration::from_secs(3600));
        let old = now_ms() - 2 * 3600 * 1000;
        let (k, v) = offset_record("g", 0, old);
        c.apply_record(k, v);
        let (k, v) = offset_record("g", 1, now_ms());
        c.apply_record(k, v);
        let (_, tombstones) = c.tick(Instant::now(), false, &consumer::TopicsImage::new);
        assert!(
            tombstones.is_empty(),
            "only checked when the retention check is due"
        );
        let (_, tombstones) = c.tick(Instant::now(), true, &consumer::TopicsImage::new);
        assert_eq!(tombstones.len(), 1);
        let fetched = c.fetch_offsets(&OffsetFetchGroup {
            group_id: "g".into(),
            topics: None,
            require_stable: false,
            member_id: None,
            member_epoch: -1,
        });
        assert_eq!(
            fetched,
            vec![("t".to_string(), vec![(1, (5, -1, String::new()))])]
        );
    }

    #[test]
    fn a_consumer_group_member_ends_a_quiet_spell_and_its_heartbeat_wakes_the_ticker() {
        use futures::FutureExt;
        let c = coordinator(Duration::from_secs(3600));
        // Offsets alone give no timer.
        let (k, v) = offset_record("g", 0, now_ms());
        c.apply_record(k, v);
        assert!(c.quiet());
        let woken = c.listen_activity();
        let (req, caller) = consumer_join("m");
        let topics = consumer::TopicsImage::from([("t".to_string(), ([1; 16], 1))]);
        c.consumer_heartbeat(&req, &caller, &topics, None).unwrap();
        assert_eq!(
            woken.now_or_never(),
            Some(()),
            "a heartbeat wakes the ticker"
        );
        assert!(!c.quiet(), "a member's session expires on a tick");
    }

    #[test]
    fn offsets_of_a_consumer_group_with_members_do_not_expire() {
        let c = coordinator(Duration::from_secs(3600));
        let (k, v) = offset_record("g", 0, now_ms() - 2 * 3600 * 1000);
        c.apply_record(k, v);
        let (mut req, caller) = consumer_join("m");
        let topics = consumer::TopicsImage::from([("t".to_string(), ([1; 16], 1))]);
        c.consumer_heartbeat(&req, &caller, &topics, None).unwrap();
        let (_, tombstones) = c.tick(Instant::now(), true, &consumer::TopicsImage::new);
        assert!(
            tombstones.is_empty(),
            "a member still reads the group's partitions"
        );
        req.member_epoch = -1;
        c.consumer_heartbeat(&req, &caller, &topics, None).unwrap();
        let (_, tombstones) = c.tick(Instant::now(), true, &consumer::TopicsImage::new);
        assert_eq!(
            tombstones.len(),
            1,
            "the group emptied: its old offset expires"
        );
    }

    /// A member that left while this coordinator did not hold the group: its records, loaded
    /// from the log, are tombstoned by the next write, and a refused first heartbeat leaves no
    /// group behind.
    #[test]
    fn a_loaded_consumer_group_tombstones_what_it_lost() {
        use tributary_protocol::consumer_group_records::ConsumerKey;
        use tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest;
        let c = coordinator(Duration::from_secs(3600));
        let caller = consumer_join("").1;
        let topics = consumer::TopicsImage::from([("t".to_string(), ([1; 16], 2))]);
        let join = |m: &str| consumer_join(m).0;
        // Another coordinator's log: the group with two members.
        let mut other = consumer::ConsumerGroup::new("g");
        let limits = c.config.consumer;
        for m in ["a", "b"] {
            other
                .heartbeat(&join(m), &caller, &topics, Instant::now(), &limits)
                .unwrap();
        }
        for (key, value) in other.records() {
            c.apply_record(key.encode(), Some(value));
        }
        let leave = ConsumerGroupHeartbeatRequest {
            member_epoch: -1,
            ..join("a")
        };
        c.consumer_heartbeat(&leave, &caller, &topics, None)
            .unwrap();
        let written: Vec<(Bytes, Option<Bytes>)> = c.consumer_changes("g");
        let gone = ConsumerKey::Member {
            group: "g".into(),
            member: "a".into(),
        };
        assert!(
            written
                .iter()
                .any(|(k, v)| *k == gone.encode() && v.is_none()),
            "the member that left is tombstoned"
        );
        let refused = ConsumerGroupHeartbeatRequest {
            server_assignor: Some("nope".into()),
            group_id: "fresh".into(),
            ..join("x")
        };
        assert!(c
            .consumer_heartbeat(&refused, &caller, &topics, None)
            .is_err());
        assert!(!c.is_consumer_group("fresh"));
    }

    #[test]
    fn a_classic_member_turns_an_empty_consumer_group_classic() {
        let c = coordinator(Duration::from_secs(3600));
        let topics = consumer::TopicsImage::from([("t".to_string(), ([1; 16], 1))]);
        let (mut req, caller) = consumer_join("m");
        c.consumer_heartbeat(&req, &caller, &topics, None).unwrap();
        c.consumer_changes("g");
        let refused = c.join(join_req(""), 5, "c".into(), "h".into());
        assert_eq!(
            refused.err().map(|e| e.error),
            Some(ErrorCode::INCONSISTENT_GROUP_PROTOCOL)
        );
        req.member_epoch = -1;
        c.consumer_heartbeat(&req, &caller, &topics, None).unwrap();
        c.consumer_changes("g");
        // Taken as a classic member (v5's first join is asked for its member id).
        let classic = c.join(join_req(""), 5, "c".into(), "h".into());
        assert_eq!(
            classic.err().map(|e| e.error),
            Some(ErrorCode::MEMBER_ID_REQUIRED)
        );
        assert!(!c.is_consumer_group("g"));
        assert!(
            !c.converted.borrow()["g"].is_empty(),
            "the consumer group's records are tombstoned with the classic group's first write"
        );
    }

    #[test]
    fn a_static_member_replaced_by_a_restart_is_fenced() {
        let c = coordinator(Duration::from_secs(3600));
        let req = |member: &str| JoinGroupRequest {
            group_id: "g".into(),
            session_timeout_ms: 6000,
            rebalance_timeout_ms: 10_000,
            member_id: member.into(),
            group_instance_id: Some("instance-1".into()),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        };
        let mut rx = c.join(req(""), 5, "c".into(), "h".into()).unwrap();
        let first = rx
            .try_recv()
            .unwrap()
            .expect("joined at once: no initial delay");
        assert_eq!(first.error, ErrorCode::NONE);
        // The same instance restarts: it gets a new member id, the old one is fenced.
        let mut rx = c.join(req(""), 5, "c".into(), "h".into()).unwrap();
        let second = rx.try_recv().unwrap().expect("rejoined");
        assert_ne!(second.member_id, first.member_id);
        let hb = c.heartbeat(HeartbeatRequest {
            group_id: "g".into(),
            generation_id: first.generation_id,
            member_id: first.member_id.clone(),
            group_instance_id: Some("instance-1".into()),
        });
        assert_eq!(hb, ErrorCode::FENCED_INSTANCE_ID);
        let stale = c
            .join(req(&first.member_id), 5, "c".into(), "h".into())
            .unwrap_err();
        assert_eq!(stale.error, ErrorCode::FENCED_INSTANCE_ID);
    }
}
