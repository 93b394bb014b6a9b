//! One consumer group of KIP-848's protocol: members heartbeat (ConsumerGroupHeartbeat), the
//! coordinator computes every member's target assignment itself when the group epoch moves,
//! and reconciles each member towards its target one heartbeat at a time — a partition is
//! handed to its new owner only once its old owner has revoked it. Decisions only: no I/O, no
//! channels, time and the topics of the image passed in.
//!
//! The three epochs: the **group epoch** moves whenever what the assignment depends on changes
//! (a member joins or leaves, a subscription changes, a subscribed topic's partition count
//! changes); the **assignment epoch** is the group epoch the target assignment was computed at;
//! a **member epoch** is the assignment epoch the member has reconciled to.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_protocol::requests::consumer_group::{
    ConsumerGroupHeartbeatRequest, OwnedPartitions,
};
use tributary_protocol::ErrorCode;

use super::assignor::{self, Assignor, Subscriber};

/// A topic's id, as the consumer protocol names topics in assignments.
pub type TopicId = [u8; 16];

/// Partitions by topic id.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// The topics a subscription may name, by name: id and partition count, taken from the image by
/// the caller (internal topics left out).
pub type TopicsImage = BTreeMap<String, (TopicId, i32)>;

/// The member epoch of a heartbeat that joins, and those of the two ways of leaving.
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// The first OffsetCommit version that carries a member epoch (KIP-848): the lowest a member of
/// this protocol may commit with.
pub const OFFSET_COMMIT_MEMBER_EPOCH_VERSION: i16 = 9;

#[derive(Debug, Clone, Copy)]
pub struct ConsumerLimits {
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.session.timeout.ms`: a member not heard from for this long is removed.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`, told to every member.
    pub heartbeat_interval: Duration,
    /// `group.consumer.assignors`, in order: the first is used when no member asks for one.
    pub assignors: [Option<Assignor>; 2],
    /// `group.consumer.{min,max}.session.timeout.ms`: a group's own session must fall in it.
    pub session_timeout_range: (Duration, Duration),
    /// `group.consumer.{min,max}.heartbeat.interval.ms`, likewise for the heartbeat.
    pub heartbeat_interval_range: (Duration, Duration),
    /// `group.consumer.migration.policy`.
    pub migration: MigrationPolicy,
}

/// `group.consumer.migration.policy`: whether a classic group with members turns into a
/// consumer group when a member of the consumer protocol joins it (upgrade), and back when the
/// last such member leaves and only classic members remain (downgrade). Kafka's default is
/// both. An empty group changes type whatever the policy, and classic members may join a
/// consumer group with members under any policy, as in Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationPolicy {
    pub upgrade: bool,
    pub downgrade: bool,
}

impl MigrationPolicy {
    pub const NAMES: [&'static str; 4] = ["bidirectional", "upgrade", "downgrade", "disabled"];

    /// Kafka's values, in any case.
    pub fn named(name: &str) -> Option<MigrationPolicy> {
        let (upgrade, downgrade) = match name.to_ascii_lowercase().as_str() {
            "bidirectional" => (true, true),
            "upgrade" => (true, false),
            "downgrade" => (false, true),
            "disabled" => (false, false),
            _ => return None,
        };
        Some(MigrationPolicy { upgrade, downgrade })
    }
}

/// A consumer group's own configs (IncrementalAlterConfigs on the GROUP resource), Kafka 4's
/// names; each overrides the broker's `group.consumer.*` default for that group.
pub const GROUP_SESSION_TIMEOUT: &str = "consumer.session.timeout.ms";
pub const GROUP_HEARTBEAT_INTERVAL: &str = "consumer.heartbeat.interval.ms";
pub const GROUP_CONFIG_KEYS: [&str; 2] = [GROUP_SESSION_TIMEOUT, GROUP_HEARTBEAT_INTERVAL];

impl ConsumerLimits {
    /// These limits with a group's own configs in place of the broker's defaults (a value that
    /// no longer parses keeps the default).
    pub fn for_group(&self, configs: Option<&BTreeMap<String, String>>) -> ConsumerLimits {
        let mut out = *self;
        let ms = |key: &str| {
            configs
                .and_then(|c| c.get(key))
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        if let Some(d) = ms(GROUP_SESSION_TIMEOUT) {
            out.session_timeout = d;
        }
        if let Some(d) = ms(GROUP_HEARTBEAT_INTERVAL) {
            out.heartbeat_interval = d;
        }
        out
    }

    /// Whether `configs` may be a group's own configs: known keys, whole numbers of ms within
    /// the broker's bounds, the heartbeat below the session. The error names what is wrong.
    pub fn check_group_configs(&self, configs: &BTreeMap<String, String>) -> Result<(), String> {
        for (key, value) in configs {
            let (range, bound) = match key.as_str() {
                GROUP_SESSION_TIMEOUT => (self.session_timeout_range, "session.timeout.ms"),
                GROUP_HEARTBEAT_INTERVAL => {
                    (self.heartbeat_interval_range, "heartbeat.interval.ms")
                }
                _ => {
                    return Err(format!(
                        "unknown group config {key:?}; the group configs are {}",
                        GROUP_CONFIG_KEYS.join(", ")
                    ))
                }
            };
            let ms: u64 = value
                .parse()
                .map_err(|_| format!("{key} must be a whole number of ms, not {value:?}"))?;
            let (lo, hi) = (range.0.as_millis() as u64, range.1.as_millis() as u64);
            if !(lo..=hi).contains(&ms) {
                return Err(format!(
                    "{key} = {ms} is outside {lo}..={hi} (group.consumer.min.{bound} and group.consumer.max.{bound})"
                ));
            }
        }
        let effective = self.for_group(Some(configs));
        if effective.heartbeat_interval >= effective.session_timeout {
            return Err(format!(
                "{GROUP_HEARTBEAT_INTERVAL} ({} ms) must be below {GROUP_SESSION_TIMEOUT} ({} ms)",
                effective.heartbeat_interval.as_millis(),
                effective.session_timeout.as_millis()
            ));
        }
        Ok(())
    }

    fn default_assignor(&self) -> Assignor {
        self.assignors[0].unwrap_or(Assignor::Uniform)
    }

    fn allows(&self, a: Assignor) -> bool {
        self.assignors.contains(&Some(a))
    }
}

/// Where a member stands against its target assignment (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// It owns its whole target at the assignment epoch.
    Stable,
    /// It must give up `revoking` before it advances to the assignment epoch.
    UnrevokedPartitions,
    /// It is at the assignment epoch but waits for partitions other members still hold.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    regex: Option<regex::Regex>,
    pub server_assignor: Option<Assignor>,
    pub rebalance_timeout: Duration,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    /// What it owns now (and was told).
    pub assigned: Assignment,
    /// What it must give up before it may advance.
    pub revoking: Assignment,
    pub session_deadline: Instant,
    /// Set while it must revoke: past it, the member is removed.
    pub revocation_deadline: Option<Instant>,
    /// The assignment the member was last answered with.
    sent: Option<Assignment>,
    /// Set for a member of the classic protocol (JoinGroup, SyncGroup, Heartbeat): what its
    /// JoinGroup said. `None` for a member that heartbeats with ConsumerGroupHeartbeat.
    pub classic: Option<ClassicMember>,
}

/// A classic member's own part: its JoinGroup's session timeout and protocols (name and
/// subscription metadata), most preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    pub session_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
}

/// Who a heartbeat comes from, beyond the request.
pub struct Caller {
    pub client_id: String,
    pub client_host: String,
    pub version: i16,
}

/// A refused heartbeat: the error and the message the response carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

/// A heartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The partitions the member owns from now on; `None` when unchanged since it was told.
    pub assignment: Option<Assignment>,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// Each member's target assignment, computed at `assignment_epoch`.
    pub target: BTreeMap<String, Assignment>,
    /// The subscribed topics (id, partition count) when the group epoch last moved.
    pub subscribed: TopicsImage,
    /// Whether `subscribed` is known: a group rebuilt from its records takes it from the image
    /// at its first heartbeat without moving the epoch (the records do not hold it).
    subscribed_known: bool,
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> Self {
        ConsumerGroup {
            group_id: group_id.to_string(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            subscribed: TopicsImage::new(),
            subscribed_known: true,
        }
    }

    /// Kafka's consumer group states, as ListGroups and ConsumerGroupDescribe name them.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.member_epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// One heartbeat: join, leave, or report and be told the member's assignment.
    pub fn heartbeat(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        caller: &Caller,
        topics: &TopicsImage,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<HeartbeatAnswer, Refusal> {
        validate(req, caller.version, limits)?;
        if req.member_epoch < 0 {
            return self.leave(req, now, limits);
        }
        let (member_id, joined) = self.identify(req, caller, now, limits)?;
        let member = self.members.get_mut(&member_id).expect("identified");
        let subscription_changed = member.update(req, caller)?;
        member.session_deadline = now + limits.session_timeout;
        self.move_epochs(topics, joined || subscription_changed, limits);
        self.reconcile(&member_id, req.topic_partitions.as_ref(), now);
        Ok(self.answer(&member_id, req, limits))
    }

    /// After a member joined, changed its subscription (`changed`) or reported in: the group
    /// epoch moves when the membership, a subscription or a subscribed topic changed, and the
    /// target is computed again when it trails the group epoch.
    fn move_epochs(&mut self, topics: &TopicsImage, changed: bool, limits: &ConsumerLimits) {
        let metadata = self.subscription_metadata(topics);
        if !self.subscribed_known {
            // Rebuilt from its records, which do not hold the topics it was assigned over: the
            // targets stand unless they miss a partition of the topics now (one added, a topic
            // created or re-created while the coordinator moved).
            self.subscribed_known = true;
            if self.targets_cover(&metadata) {
                self.subscribed = metadata.clone();
            }
        }
        if changed || metadata != self.subscribed {
            self.subscribed = metadata;
            self.group_epoch += 1;
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(limits);
        }
    }

    /// Finds the heartbeat's member, adding it when it joins; whether the membership changed
    /// (the group epoch must move).
    fn identify(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        caller: &Caller,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<(String, bool), Refusal> {
        if req.member_epoch == JOIN_EPOCH {
            return self.join(req, caller, now, limits);
        }
        let Some(m) = self.members.get(&req.member_id) else {
            return Err(refuse(
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!(
                    "member {} is not a member of group {}",
                    req.member_id, self.group_id
                ),
            ));
        };
        if req.instance_id.is_some() && req.instance_id != m.instance_id {
            return Err(refuse(
                ErrorCode::FENCED_INSTANCE_ID,
                format!("member {} holds another instance id", m.member_id),
            ));
        }
        m.check_epoch(req.member_epoch, req.topic_partitions.as_ref())?;
        Ok((m.member_id.clone(), false))
    }

    /// A member joins (epoch 0): a new member, a static member taking over the place its
    /// instance left (which changes nothing else), or a known member starting afresh (it owns
    /// nothing now).
    fn join(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        caller: &Caller,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<(String, bool), Refusal> {
        let member_id = if req.member_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        if let Some(instance) = &req.instance_id {
            let holder = self
                .instance_holder(instance)
                .map(|m| (m.member_id.clone(), m.member_epoch, m.classic.is_some()));
            match holder {
                Some((old, STATIC_LEAVE_EPOCH, _)) => {
                    self.replace_static(&old, &member_id);
                    return Ok((member_id, false));
                }
                Some((old, _, true)) if old != member_id => {
                    // A classic member's instance restarted with the consumer protocol (a
                    // rolling upgrade): it takes the place at once, as in Kafka.
                    self.rename_member(&old, &member_id);
                    return Ok((member_id, false));
                }
                Some((old, _, _)) if old != member_id => {
                    return Err(refuse(
                        ErrorCode::UNRELEASED_INSTANCE_ID,
                        format!(
                            "instance {instance} is still held by member {old} of group {}; \
                             it must leave first",
                            self.group_id
                        ),
                    ));
                }
                _ => {}
            }
        }
        if self.members.remove(&member_id).is_some() {
            // A member that rejoins owns nothing any more: what it held is free again.
            self.target.remove(&member_id);
        } else if self.members.len() >= limits.max_size {
            return Err(refuse(
                ErrorCode::GROUP_MAX_SIZE_REACHED,
                format!(
                    "group {} has reached group.consumer.max.size ({})",
                    self.group_id, limits.max_size
                ),
            ));
        }
        let member = ConsumerMember::new(&member_id, caller, now + limits.session_timeout);
        self.members.insert(member_id.clone(), member);
        Ok((member_id, true))
    }

    /// The member holding static instance `instance`, if any.
    pub(super) fn instance_holder(&self, instance: &str) -> Option<&ConsumerMember> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// Member `old` goes on as `new`: epoch, partitions and target.
    pub(super) fn rename_member(&mut self, old: &str, new: &str) {
        let mut m = self.members.remove(old).expect("member present");
        m.member_id = new.to_string();
        m.sent = None;
        if let Some(t) = self.target.remove(old) {
            self.target.insert(new.to_string(), t);
        }
        self.members.insert(new.to_string(), m);
    }

    /// A static member rejoining under a new member id takes the old one's place: its epoch,
    /// its partitions and its target.
    fn replace_static(&mut self, old: &str, new: &str) {
        let mut m = self.members.remove(old).expect("static member present");
        m.member_id = new.to_string();
        m.member_epoch = m.previous_member_epoch.max(0);
        m.sent = None;
        if let Some(t) = self.target.remove(old) {
            self.target.insert(new.to_string(), t);
        }
        self.members.insert(new.to_string(), m);
    }

    fn leave(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<HeartbeatAnswer, Refusal> {
        // A static member's leave (either epoch) names its instance, which finds the member,
        // as Kafka's `consumerGroupStaticMemberGroupLeave`: a replaced process is fenced.
        let id = match &req.instance_id {
            Some(i) => self.instance_holder(i).map(|m| m.member_id.clone()),
            None => self
                .members
                .contains_key(&req.member_id)
                .then(|| req.member_id.clone()),
        };
        let Some(id) = id else {
            return Err(refuse(
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("member {} is not in group {}", req.member_id, self.group_id),
            ));
        };
        if id != req.member_id {
            return Err(refuse(
                ErrorCode::FENCED_INSTANCE_ID,
                format!(
                    "instance {:?} is held by member {id}, not {}",
                    req.instance_id, req.member_id
                ),
            ));
        }
        if req.member_epoch == STATIC_LEAVE_EPOCH {
            // It will come back: its partitions wait for it until its session ends; what it
            // was giving up is given up (its process stopped).
            let m = self.members.get_mut(&id).expect("found");
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = STATIC_LEAVE_EPOCH;
            m.session_deadline = now + limits.session_timeout;
            m.revoking.clear();
            m.revocation_deadline = None;
            if m.state == MemberState::UnrevokedPartitions {
                m.state = MemberState::Stable;
            }
        } else {
            self.remove_member(&id);
        }
        Ok(HeartbeatAnswer {
            member_id: id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Whether the targets assign exactly the partitions of `metadata`'s topics.
    fn targets_cover(&self, metadata: &TopicsImage) -> bool {
        let targeted: BTreeSet<(TopicId, i32)> = self
            .target
            .values()
            .flat_map(|a| {
                a.iter()
                    .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            })
            .collect();
        let all: BTreeSet<(TopicId, i32)> = metadata
            .values()
            .flat_map(|(id, n)| (0..*n).map(move |p| (*id, p)))
            .collect();
        targeted == all
    }

    /// After the group was rebuilt from its records: every member's session starts now, and a
    /// member revoking has its whole rebalance timeout again (Kafka's `onLoaded`).
    pub fn rearm(&mut self, now: Instant, limits: &ConsumerLimits) {
        for m in self.members.values_mut() {
            m.session_deadline = now + m.session_timeout(limits);
            m.revocation_deadline =
                (m.state == MemberState::UnrevokedPartitions).then(|| now + m.rebalance_timeout);
        }
    }

    /// Removes a member; what it owned is free at once, and the group epoch moves.
    pub fn remove_member(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.group_epoch += 1;
        }
        assert!(!self.members.contains_key(member_id));
    }

    /// Members whose session ended, or that did not revoke within their rebalance timeout, are
    /// removed. Returns their ids, each with whether it was a classic member.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, bool)> {
        let gone: Vec<(String, bool)> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline <= now || m.revocation_deadline.is_some_and(|d| d <= now)
            })
            .map(|m| (m.member_id.clone(), m.classic.is_some()))
            .collect();
        for (id, _) in &gone {
            self.remove_member(id);
        }
        gone
    }

    /// The subscribed topics that exist, with their ids and partition counts.
    fn subscription_metadata(&self, topics: &TopicsImage) -> TopicsImage {
        let mut out = TopicsImage::new();
        for m in self.members.values() {
            for (name, meta) in m.subscribed_topics(topics) {
                out.insert(name, meta);
            }
        }
        out
    }

    /// The assignor the group uses: the one most members ask for, else the configured default.
    pub fn current_assignor(&self, limits: &ConsumerLimits) -> Assignor {
        let mut counts: BTreeMap<Assignor, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.server_assignor) {
            *counts.entry(a).or_default() += 1;
        }
        let top = counts.values().copied().max().unwrap_or(0);
        let preferred = |a: &Assignor| counts.get(a) == Some(&top) && top > 0;
        limits
            .assignors
            .iter()
            .flatten()
            .copied()
            .find(preferred)
            .unwrap_or_else(|| limits.default_assignor())
    }

    /// Computes every member's target at the group epoch.
    fn compute_target(&mut self, limits: &ConsumerLimits) {
        let subscribers: Vec<Subscriber> = self
            .members
            .values()
            .map(|m| Subscriber {
                member_id: m.member_id.clone(),
                topics: m
                    .subscribed_topics(&self.subscribed)
                    .into_iter()
                    .map(|(_, (id, n))| (id, n))
                    .collect(),
                current: self.target.get(&m.member_id).cloned().unwrap_or_default(),
            })
            .collect();
        self.target = assignor::assign(self.current_assignor(limits), &subscribers);
        self.assignment_epoch = self.group_epoch;
        assert!(self.target.keys().all(|id| self.members.contains_key(id)));
    }

    /// Partitions held (owned or being revoked) by members other than `except`.
    fn held_by_others(&self, except: &str) -> BTreeSet<(TopicId, i32)> {
        let mut held = BTreeSet::new();
        for m in self.members.values().filter(|m| m.member_id != except) {
            for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
                held.extend(ps.iter().map(|p| (*t, *p)));
            }
        }
        held
    }

    /// Moves one member towards its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, member_id: &str, owned: Option<&OwnedPartitions>, now: Instant) {
        let held = self.held_by_others(member_id);
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let epoch = self.assignment_epoch;
        let m = self.members.get_mut(member_id).expect("member present");
        if m.state == MemberState::UnrevokedPartitions {
            let still_owned = owned.is_some_and(|o| overlaps(o, &m.revoking));
            if owned.is_none() || still_owned {
                return;
            }
            // It reported owning none of what it had to give up.
            m.revoking.clear();
            m.revocation_deadline = None;
        }
        if m.member_epoch == epoch && m.state == MemberState::Stable {
            return;
        }
        m.advance(&target, epoch, &held, now);
    }

    fn answer(
        &mut self,
        member_id: &str,
        req: &ConsumerGroupHeartbeatRequest,
        limits: &ConsumerLimits,
    ) -> HeartbeatAnswer {
        let m = self.members.get_mut(member_id).expect("member present");
        // Kafka's test for a full request: every field a join must carry is set (a client
        // sends one on joining and after an error).
        let full = req.member_epoch == JOIN_EPOCH
            || (req.rebalance_timeout_ms != -1
                && (req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some())
                && req.topic_partitions.is_some());
        let assignment = if full || m.sent.as_ref() != Some(&m.assigned) {
            m.sent = Some(m.assigned.clone());
            Some(m.assigned.clone())
        } else {
            None
        };
        HeartbeatAnswer {
            member_id: member_id.to_string(),
            member_epoch: m.member_epoch,
            heartbeat_interval_ms: limits.heartbeat_interval.as_millis().min(i32::MAX as u128)
                as i32,
            assignment,
        }
    }

    /// The member epoch an offset fetch of `member_id` may carry: Kafka's
    /// `validateOffsetFetch` for consumer groups (a fetch without member, null id and epoch -1,
    /// is answered before this).
    pub fn validate_offset_epoch(&self, member_id: &str, epoch: i32) -> Result<(), ErrorCode> {
        if epoch < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(ErrorCode::UNKNOWN_MEMBER_ID)
            };
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        };
        m.check_offset_epoch(epoch)
    }

    /// Whether an offset commit of `member_id` at `epoch` is taken: Kafka's
    /// `validateOffsetCommit` for consumer groups. `version`: the OffsetCommit's version, `None`
    /// for a TxnOffsetCommit. An epoch below zero is a client outside the group (an admin, a
    /// manual assignment), taken while the group has no member; a member of this protocol must
    /// commit with OffsetCommit v9 or above, which carries its member epoch.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        epoch: i32,
        version: Option<i16>,
    ) -> Result<(), ErrorCode> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        };
        let below_v9 = version.is_some_and(|v| v < OFFSET_COMMIT_MEMBER_EPOCH_VERSION);
        if below_v9 && m.classic.is_none() {
            return Err(ErrorCode::UNSUPPORTED_VERSION);
        }
        m.check_offset_epoch(epoch)
    }
}

impl ConsumerMember {
    fn new(member_id: &str, caller: &Caller, session_deadline: Instant) -> Self {
        ConsumerMember {
            member_id: member_id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: caller.client_id.clone(),
            client_host: caller.client_host.clone(),
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            regex: None,
            server_assignor: None,
            rebalance_timeout: Duration::ZERO,
            member_epoch: 0,
            previous_member_epoch: -1,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            session_deadline,
            revocation_deadline: None,
            sent: None,
            classic: None,
        }
    }

    /// How long its session lasts: its JoinGroup's session timeout for a classic member, the
    /// group's for a member of the consumer protocol.
    pub fn session_timeout(&self, limits: &ConsumerLimits) -> Duration {
        self.classic
            .as_ref()
            .map_or(limits.session_timeout, |c| c.session_timeout)
    }

    /// Takes the heartbeat's non-null fields; whether the subscription changed.
    fn update(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        caller: &Caller,
    ) -> Result<bool, Refusal> {
        let mut changed = false;
        // A member that heartbeats speaks the consumer protocol from now on.
        self.classic = None;
        if req.instance_id.is_some() {
            self.instance_id = req.instance_id.clone();
        }
        if req.rack_id.is_some() {
            self.rack_id = req.rack_id.clone();
        }
        self.client_id = caller.client_id.clone();
        self.client_host = caller.client_host.clone();
        if req.rebalance_timeout_ms > 0 {
            self.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms as u64);
        }
        if let Some(names) = &req.subscribed_topic_names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            changed |= names != self.subscribed_topic_names;
            self.subscribed_topic_names = names;
        }
        if let Some(pattern) = &req.subscribed_topic_regex {
            let pattern = Some(pattern.clone()).filter(|p| !p.is_empty());
            if pattern != self.subscribed_topic_regex {
                self.regex = pattern.as_deref().map(compile).transpose()?;
                self.subscribed_topic_regex = pattern;
                changed = true;
            }
        }
        // A new assignor preference alone does not move the group epoch (as in Kafka): it
        // takes effect at the next change.
        if let Some(name) = &req.server_assignor {
            self.server_assignor = Assignor::named(name);
        }
        Ok(changed)
    }

    /// The topics of `topics` this member subscribes to, by name or by its regex.
    fn subscribed_topics(&self, topics: &TopicsImage) -> Vec<(String, (TopicId, i32))> {
        topics
            .iter()
            .filter(|(name, _)| {
                self.subscribed_topic_names.binary_search(name).is_ok()
                    || self.regex.as_ref().is_some_and(|r| r.is_match(name))
            })
            .map(|(name, meta)| (name.clone(), *meta))
            .collect()
    }

    /// Kafka's `validateMemberEpoch` for commits and fetches: any other epoch is stale (the
    /// member retries after its next heartbeat).
    fn check_offset_epoch(&self, epoch: i32) -> Result<(), ErrorCode> {
        if epoch == self.member_epoch {
            Ok(())
        } else if self.classic.is_some() {
            // A classic member's generation is its member epoch.
            Err(ErrorCode::ILLEGAL_GENERATION)
        } else {
            Err(ErrorCode::STALE_MEMBER_EPOCH)
        }
    }

    /// Kafka's epoch rule: the current epoch, or the previous one from a member whose
    /// heartbeat (or its answer) was lost, as long as it owns nothing it was not given.
    fn check_epoch(&self, epoch: i32, owned: Option<&OwnedPartitions>) -> Result<(), Refusal> {
        let fenced = || {
            refuse(
                ErrorCode::FENCED_MEMBER_EPOCH,
                format!(
                    "member {} sent epoch {epoch}; its epoch is {}",
                    self.member_id, self.member_epoch
                ),
            )
        };
        if epoch == self.member_epoch {
            return Ok(());
        }
        if epoch > self.member_epoch || epoch != self.previous_member_epoch {
            return Err(fenced());
        }
        // Kafka's rule: the previous epoch only with the partitions owned, all of them given.
        match owned {
            Some(o) if is_subset(o, &self.assigned) => Ok(()),
            _ => Err(fenced()),
        }
    }

    /// One reconciliation step from a state where nothing is left to revoke: revoke what the
    /// target no longer holds, or else take the assignment epoch and every target partition
    /// no other member holds.
    fn advance(
        &mut self,
        target: &Assignment,
        epoch: i32,
        held: &BTreeSet<(TopicId, i32)>,
        now: Instant,
    ) {
        let (kept, revoke) = split(&self.assigned, target);
        if !revoke.is_empty() {
            self.assigned = kept;
            self.revoking = revoke;
            self.state = MemberState::UnrevokedPartitions;
            self.revocation_deadline = Some(now + self.rebalance_timeout);
            return;
        }
        let mut pending = false;
        let mut next = kept;
        for (t, ps) in target {
            for p in ps {
                if held.contains(&(*t, *p)) {
                    pending = true;
                } else {
                    next.entry(*t).or_default().insert(*p);
                }
            }
        }
        self.assigned = next;
        if self.member_epoch != epoch {
            self.previous_member_epoch = self.member_epoch;
            self.member_epoch = epoch;
        }
        self.state = if pending {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }
}

/// Refuses what Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid` refuses.
pub(super) fn validate(
    req: &ConsumerGroupHeartbeatRequest,
    version: i16,
    limits: &ConsumerLimits,
) -> Result<(), Refusal> {
    let invalid = |m: &str| Err(refuse(ErrorCode::INVALID_REQUEST, m));
    if req.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.member_id.is_empty() && (version >= 1 || req.member_epoch != JOIN_EPOCH) {
        return invalid("MemberId can't be empty.");
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    match req.member_epoch {
        JOIN_EPOCH => {
            if req.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        STATIC_LEAVE_EPOCH if req.instance_id.is_none() => {
            return invalid("InstanceId can't be null.");
        }
        e if e < STATIC_LEAVE_EPOCH => {
            return invalid(&format!("MemberEpoch is invalid: {e}."));
        }
        _ => {}
    }
    if let Some(name) = &req.server_assignor {
        if !Assignor::named(name).is_some_and(|a| limits.allows(a)) {
            return Err(refuse(
                ErrorCode::UNSUPPORTED_ASSIGNOR,
                format!("ServerAssignor {name} is not supported. Supported assignors: uniform, range (group.consumer.assignors)."),
            ));
        }
    }
    if let Some(pattern) = req
        .subscribed_topic_regex
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        compile(pattern)?;
    }
    Ok(())
}

/// A subscription regex, matched against whole topic names (as Java's `Matcher.matches`).
fn compile(pattern: &str) -> Result<regex::Regex, Refusal> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        refuse(
            ErrorCode::INVALID_REGULAR_EXPRESSION,
            format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}"),
        )
    })
}

/// (`assigned` ∩ `target`, `assigned` − `target`).
fn split(assigned: &Assignment, target: &Assignment) -> (Assignment, Assignment) {
    let mut kept = Assignment::new();
    let mut gone = Assignment::new();
    for (t, ps) in assigned {
        for p in ps {
            let side = if target.get(t).is_some_and(|s| s.contains(p)) {
                &mut kept
            } else {
                &mut gone
            };
            side.entry(*t).or_default().insert(*p);
        }
    }
    (kept, gone)
}

fn overlaps(owned: &OwnedPartitions, set: &Assignment) -> bool {
    owned
        .iter()
        .any(|(t, ps)| set.get(t).is_some_and(|s| ps.iter().any(|p| s.contains(p))))
}

fn is_subset(owned: &OwnedPartitions, set: &Assignment) -> bool {
    owned
        .iter()
        .all(|(t, ps)| ps.iter().all(|p| set.get(t).is_some_and(|s| s.contains(p))))
}

mod classic;
mod records;

#[cfg(test)]
mod tests;
