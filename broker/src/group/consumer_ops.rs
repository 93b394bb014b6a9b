//! The group coordinator's side of KIP-848 consumer groups: it holds them beside the classic
//! groups, runs their heartbeats through `consumer::ConsumerGroup`, expires their members on
//! its tick, and keeps the two protocols apart — a group id is one type or the other. A
//! consumer group's committed offsets live with every group's offsets, in the classic map's
//! entry for its id (`Group::offsets`), so commits, fetches, retention and deletion treat both
//! types alike.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use tracing::{info, warn};
use tributary_protocol::consumer_group_records::ConsumerKey;
use tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest;
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

use super::consumer::{
    Assignment, Caller, ConsumerGroup, HeartbeatAnswer, MemberState, Refusal, TopicsImage,
    JOIN_EPOCH, LEAVE_EPOCH,
};
use super::GroupCoordinator;

/// The groups' own configs, by group id, as the image holds them.
pub type GroupConfigs = BTreeMap<String, BTreeMap<String, String>>;

/// One member as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct DescribedConsumer {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target: Assignment,
    pub state: MemberState,
    /// A member of the classic protocol (JoinGroup, SyncGroup) in this consumer group.
    pub classic: bool,
}

/// A consumer group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct DescribedConsumerGroup {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<DescribedConsumer>,
}

impl GroupCoordinator {
    /// Whether `group_id` is a consumer group (KIP-848) here.
    pub fn is_consumer_group(&self, group_id: &str) -> bool {
        self.consumer_groups.borrow().contains_key(group_id)
    }

    /// A ConsumerGroupHeartbeat. A classic group with members under the id is upgraded by a
    /// joining member, if it may be, or the heartbeat refused (`upgrade_for`); the leave of the
    /// last member of the consumer protocol may downgrade the group (`maybe_downgrade`).
    /// `configs`: the group's own configs, from the image (`None`: the broker's defaults).
    pub fn consumer_heartbeat(
        &self,
        req: &ConsumerGroupHeartbeatRequest,
        caller: &Caller,
        topics: &TopicsImage,
        configs: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Result<HeartbeatAnswer, Refusal> {
        self.activity.notify(usize::MAX);
        let now = Instant::now();
        let limits = self.config.consumer.for_group(configs);
        // A bad request changes nothing, not even a classic group's type.
        super::consumer::validate(req, caller.version, &limits)?;
        if let Some(mut upgraded) = self.upgrade_for(req, topics)? {
            // The classic group becomes this one only if it takes the heartbeat.
            let answer = upgraded.heartbeat(req, caller, topics, now, &limits)?;
            self.commit_upgrade(upgraded);
            return Ok(answer);
        }
        let mut groups = self.consumer_groups.borrow_mut();
        if req.member_epoch != JOIN_EPOCH && !groups.contains_key(&req.group_id) {
            // A coordinator that does not hold the group does not know the member: it joins
            // again (after a coordinator move, its partitions are its own to keep until then).
            return Err(Refusal {
                code: ErrorCode::UNKNOWN_MEMBER_ID,
                message: format!("group {} has no member {}", req.group_id, req.member_id),
            });
        }
        let created = !groups.contains_key(&req.group_id);
        let g = groups
            .entry(req.group_id.clone())
            .or_insert_with(|| ConsumerGroup::new(&req.group_id));
        let before = (g.group_epoch, g.members.len());
        let answer = match g.heartbeat(req, caller, topics, now, &limits) {
            Ok(a) => a,
            Err(refused) => {
                // A refused first heartbeat leaves no group behind: the id stays free for
                // either protocol.
                if created {
                    groups.remove(&req.group_id);
                }
                return Err(refused);
            }
        };
        if before != (g.group_epoch, g.members.len()) {
            info!(
                group = %req.group_id,
                member = %answer.member_id,
                group_epoch = g.group_epoch,
                members = g.members.len(),
                "consumer group changed"
            );
        }
        drop(groups);
        if req.member_epoch == LEAVE_EPOCH {
            self.maybe_downgrade(&req.group_id, topics);
        }
        Ok(answer)
    }

    /// Removes the members of consumer groups whose session or revocation time ran out, and
    /// downgrades a group that lost its last member of the consumer protocol so (`topics`: the
    /// image's, asked for only then); the groups that changed, to be persisted.
    pub(super) fn expire_consumers(
        &self,
        now: Instant,
        topics: &dyn Fn() -> TopicsImage,
    ) -> Vec<String> {
        let mut changed = Vec::new();
        let mut downgrades = Vec::new();
        for g in self.consumer_groups.borrow_mut().values_mut() {
            let gone = g.expire(now);
            for (member, classic) in &gone {
                info!(group = %g.group_id, member = %member, classic, "consumer group member expired");
            }
            if gone.iter().any(|(_, classic)| !classic) {
                downgrades.push(g.group_id.clone());
            }
            if !gone.is_empty() {
                changed.push(g.group_id.clone());
            }
        }
        if !downgrades.is_empty() {
            let topics = topics();
            for id in downgrades {
                self.maybe_downgrade(&id, &topics);
            }
        }
        changed
    }

    /// The records that bring the log from what was last written for `group_id` to the
    /// group as it is now: changed values, and tombstones for what is gone (the whole group
    /// when it no longer exists). Counted as written from here on; a failed write forgets
    /// that, so the next one writes the group whole.
    pub(super) fn consumer_changes(&self, group_id: &str) -> Vec<(Bytes, Option<Bytes>)> {
        let now = self
            .consumer_groups
            .borrow()
            .get(group_id)
            .map(|g| g.records())
            .unwrap_or_default();
        let mut persisted = self.persisted_consumers.borrow_mut();
        let before = persisted.remove(group_id).unwrap_or_default();
        let mut out: Vec<(Bytes, Option<Bytes>)> = Vec::new();
        // Tombstones first, members' before the group's, as Kafka orders them.
        let mut gone: Vec<&ConsumerKey> = before.keys().filter(|k| !now.contains_key(*k)).collect();
        gone.sort_by_key(|k| {
            !matches!(k, ConsumerKey::Current { .. } | ConsumerKey::Target { .. })
        });
        out.extend(gone.into_iter().map(|k| (k.encode(), None)));
        for (k, v) in &now {
            if before.get(k) != Some(v) {
                out.push((k.encode(), Some(v.clone())));
            }
        }
        if !now.is_empty() {
            persisted.insert(group_id.to_string(), now);
        }
        out
    }

    /// Writes what changed in consumer group `group_id` since its last write, and waits until
    /// it is durable (and held by the ISR).
    pub async fn persist_consumer(
        &self,
        log: &Rc<Partition>,
        group_id: &str,
    ) -> Result<(), ErrorCode> {
        // What a change of type owes the log (the classic group's tombstone) goes first.
        let mut records = self
            .converted
            .borrow_mut()
            .remove(group_id)
            .unwrap_or_default();
        let owed = records.len();
        records.extend(self.consumer_changes(group_id));
        if records.is_empty() {
            return Ok(());
        }
        let written = self.persist(log, records.clone()).await;
        if let Err(code) = written {
            warn!(group = %group_id, error = code.0, "persisting consumer group state failed");
            let changes = records.split_off(owed);
            // Owed again only while this coordinator still holds the group as a consumer
            // group; ahead of anything owed since.
            if !records.is_empty() && self.is_consumer_group(group_id) {
                let mut converted = self.converted.borrow_mut();
                let later = converted.remove(group_id).unwrap_or_default();
                records.extend(later);
                converted.insert(group_id.to_string(), records);
            }
            let records = changes;
            // What this write carried may not be in the log: the next write carries it again,
            // tombstones too (an empty value matches no record).
            if !self.is_consumer_group(group_id) {
                return written;
            }
            let mut persisted = self.persisted_consumers.borrow_mut();
            let entry = persisted.entry(group_id.to_string()).or_default();
            for (key, _) in records {
                let key = match tributary_protocol::group_records::GroupKey::decode(key) {
                    Ok(tributary_protocol::group_records::GroupKey::Consumer(k)) => k,
                    _ => continue,
                };
                entry.insert(key, Bytes::new());
            }
        }
        written
    }

    /// Takes one consumer-group record from the log (a new coordinator loading the group), and
    /// counts it as written: the next write's tombstones are taken against what the log holds.
    pub(super) fn apply_consumer_record(&self, key: ConsumerKey, value: Option<Bytes>) {
        let mut groups = self.consumer_groups.borrow_mut();
        let mut persisted = self.persisted_consumers.borrow_mut();
        if matches!(key, ConsumerKey::Metadata { .. }) && value.is_none() {
            groups.remove(key.group());
            persisted.remove(key.group());
            return;
        }
        let written = persisted.entry(key.group().to_string()).or_default();
        match &value {
            Some(v) => written.insert(key.clone(), v.clone()),
            None => written.remove(&key),
        };
        drop(persisted);
        let g = groups
            .entry(key.group().to_string())
            .or_insert_with(|| ConsumerGroup::new(key.group()));
        if let Err(e) = g.restore(&key, value, Instant::now(), &self.config.consumer) {
            warn!(group = %key.group(), error = %e, "unreadable consumer group record skipped");
        }
    }

    /// DeleteGroups of consumer group `group_id`: its `records` (tombstones of its own
    /// records) and those of its committed offsets.
    pub(super) async fn delete_consumer_group(
        &self,
        log: &Rc<Partition>,
        group_id: &str,
        mut records: Vec<(Bytes, Option<Bytes>)>,
    ) -> ErrorCode {
        let offsets: Vec<(Bytes, Option<Bytes>)> = self
            .groups
            .borrow()
            .get(group_id)
            .map(|g| {
                g.offsets
                    .keys()
                    .map(|tp| {
                        let key = tributary_protocol::group_records::GroupKey::Offset {
                            group: group_id.into(),
                            topic: tp.topic.clone(),
                            partition: tp.partition,
                        };
                        (key.encode(), None)
                    })
                    .collect()
            })
            .unwrap_or_default();
        records.extend(offsets);
        let classic = tributary_protocol::group_records::GroupKey::Group {
            group: group_id.into(),
        };
        records.push((classic.encode(), None));
        if let Err(code) = self.persist(log, records).await {
            return code;
        }
        let mut groups = self.groups.borrow_mut();
        groups.remove(group_id);
        self.forget_parked(&groups);
        self.forget_consumer_group(group_id);
        self.converted.borrow_mut().remove(group_id);
        info!(group = %group_id, "consumer group deleted");
        ErrorCode::NONE
    }

    /// Tombstones for every record of consumer group `group_id`, for DeleteGroups.
    pub(super) fn consumer_tombstones(&self, group_id: &str) -> Vec<(Bytes, Option<Bytes>)> {
        let mut keys: BTreeMap<ConsumerKey, ()> = BTreeMap::new();
        if let Some(g) = self.consumer_groups.borrow().get(group_id) {
            keys.extend(g.records().into_keys().map(|k| (k, ())));
        }
        if let Some(p) = self.persisted_consumers.borrow().get(group_id) {
            keys.extend(p.keys().cloned().map(|k| (k, ())));
        }
        let mut keys: Vec<ConsumerKey> = keys.into_keys().collect();
        keys.sort_by_key(|k| matches!(k, ConsumerKey::Metadata { .. }));
        keys.into_iter().map(|k| (k.encode(), None)).collect()
    }

    /// The member epoch check of an offset commit or fetch to a consumer group; `None` when
    /// `group_id` is not one.
    pub fn consumer_offset_check(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
    ) -> Option<Result<(), ErrorCode>> {
        let groups = self.consumer_groups.borrow();
        let g = groups.get(group_id)?;
        Some(g.validate_offset_epoch(member_id, epoch))
    }

    /// The member check of an offset commit to a consumer group (`version`: OffsetCommit's,
    /// `None` for a TxnOffsetCommit); `None` when `group_id` is not one.
    pub fn consumer_commit_check(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        version: Option<i16>,
    ) -> Option<Result<(), ErrorCode>> {
        let groups = self.consumer_groups.borrow();
        let g = groups.get(group_id)?;
        Some(g.validate_offset_commit(member_id, epoch, version))
    }

    /// Whether a consumer group with members holds `group_id` (DeleteGroups answers
    /// NON_EMPTY_GROUP, a classic JoinGroup INCONSISTENT_GROUP_PROTOCOL).
    pub fn consumer_group_has_members(&self, group_id: &str) -> bool {
        self.consumer_groups
            .borrow()
            .get(group_id)
            .is_some_and(|g| !g.members.is_empty())
    }

    /// A classic member joins a consumer group without members: the id becomes a classic group,
    /// as in Kafka. The consumer group's records are tombstoned with the classic group's next
    /// write (`persist_group`).
    pub(super) fn convert_to_classic(&self, group_id: &str) {
        let tombstones = self.consumer_tombstones(group_id);
        self.forget_consumer_group(group_id);
        if !tombstones.is_empty() {
            info!(group = %group_id, "empty consumer group converted to a classic group");
            self.converted
                .borrow_mut()
                .insert(group_id.to_string(), tombstones);
        }
    }

    /// Re-arms the members' deadlines of the consumer groups in `__consumer_offsets` partition
    /// `partition` once it is loaded.
    pub(super) fn rearm_consumers(&self, partition: i32, configs: &GroupConfigs) {
        let n = self.offsets_partitions.get();
        let now = Instant::now();
        for g in self.consumer_groups.borrow_mut().values_mut() {
            if super::partition_for_group(&g.group_id, n) == partition {
                let limits = self.config.consumer.for_group(configs.get(&g.group_id));
                g.rearm(now, &limits);
            }
        }
    }

    pub(super) fn forget_consumer_group(&self, group_id: &str) {
        self.consumer_groups.borrow_mut().remove(group_id);
        self.persisted_consumers.borrow_mut().remove(group_id);
    }

    /// ConsumerGroupDescribe's view of one group; `None` when it is not a consumer group here.
    pub fn describe_consumer_group(&self, group_id: &str) -> Option<DescribedConsumerGroup> {
        let groups = self.consumer_groups.borrow();
        let g = groups.get(group_id)?;
        let members = g
            .members
            .values()
            .map(|m| DescribedConsumer {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_topic_names.clone(),
                subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                assignment: m.assigned.clone(),
                target: g.target.get(&m.member_id).cloned().unwrap_or_default(),
                state: m.state,
                classic: m.classic.is_some(),
            })
            .collect();
        Some(DescribedConsumerGroup {
            state: g.state_name(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.current_assignor(&self.config.consumer).name(),
            members,
        })
    }
}
