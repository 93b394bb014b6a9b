//! Members of the classic protocol in a consumer group (Kafka 4's mixed groups): they JoinGroup,
//! SyncGroup, Heartbeat and LeaveGroup as they always did, and the coordinator assigns them
//! itself with the group's server-side assignor, reconciling them like any member. A classic
//! member's generation is its member epoch; JoinGroup names no leader, so every member syncs
//! as a follower and SyncGroup hands it what it owns now (`ConsumerProtocolAssignment`). It is
//! told REBALANCE_IN_PROGRESS on its heartbeat when it must rejoin: to give partitions up, to
//! take partitions another member released, or because the group's target moved.
//!
//! Also the two conversions: a classic group into a consumer group (upgrade: Kafka's
//! `ConsumerGroup.fromClassicGroup`) and back (downgrade: `ClassicGroup.fromConsumerGroup`).
//! Decisions only: time and the image's topics are passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_protocol::consumer_protocol::{
    decode_assignment, encode_assignment, NamedPartitions, Subscription,
};
use tributary_protocol::requests::groups::{HeartbeatRequest, JoinGroupRequest, SyncGroupRequest};
use tributary_protocol::ErrorCode;

use super::{
    Assignment, Caller, ClassicMember, ConsumerGroup, ConsumerLimits, ConsumerMember, MemberState,
    MigrationPolicy, TopicId, TopicsImage,
};
use crate::group::join::Joiner;
use crate::group::state::{Group, GroupLimits, GroupState, JoinResult, Member, SyncResult};

/// The protocol type of every group the consumer protocol can take over.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A classic LeaveGroup's per-member answers: (member id, instance id, error).
pub type LeaveResults = Vec<(String, Option<String>, ErrorCode)>;

/// The version of a subscription's metadata (its first two bytes), 0 when unreadable: a
/// member's assignment is written at the version it subscribed with.
fn metadata_version(metadata: &[u8]) -> i16 {
    match metadata {
        [a, b, ..] => i16::from_be_bytes([*a, *b]).max(0),
        _ => 0,
    }
}

/// Partitions by topic id, by name (topics no longer in the image left out).
fn named(a: &Assignment, topics: &TopicsImage) -> NamedPartitions {
    let names: BTreeMap<TopicId, &str> = topics
        .iter()
        .map(|(name, (id, _))| (*id, name.as_str()))
        .collect();
    a.iter()
        .filter_map(|(id, ps)| {
            let name = names.get(id)?;
            Some((name.to_string(), ps.iter().copied().collect()))
        })
        .collect()
}

/// Partitions by name, by topic id: those of topics in the image, within their partition
/// counts.
fn by_id(ps: &NamedPartitions, topics: &TopicsImage) -> Assignment {
    let mut out = Assignment::new();
    for (name, parts) in ps {
        let Some((id, n)) = topics.get(name) else {
            continue;
        };
        for p in parts.iter().filter(|p| (0..*n).contains(*p)) {
            out.entry(*id).or_default().insert(*p);
        }
    }
    out
}

/// `a` ∪ `b`.
fn union(mut a: Assignment, b: &Assignment) -> Assignment {
    for (t, ps) in b {
        a.entry(*t).or_default().extend(ps.iter().copied());
    }
    a
}

fn ms(v: i32) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

impl ConsumerGroup {
    /// Whether a classic member with these protocols may join (Kafka's
    /// `supportsClassicProtocols`): protocol type "consumer", and a protocol every classic
    /// member already here supports (any, when there is none).
    pub fn supports_classic(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type != CONSUMER_PROTOCOL_TYPE || protocols.is_empty() {
            return false;
        }
        let classic: Vec<&ClassicMember> = self
            .members
            .values()
            .filter_map(|m| m.classic.as_ref())
            .collect();
        protocols.iter().any(|(name, _)| {
            classic
                .iter()
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// A classic member's JoinGroup (Kafka's `classicGroupJoinToConsumerGroup`), answered at
    /// once: the member is taken in or updated from its subscription, the group's target moves
    /// as a heartbeat would move it, and the member is reconciled from the partitions its
    /// subscription says it still owns (none for an eager member, which gave up everything).
    /// The answer's generation is the member epoch; no leader, no member list.
    pub(crate) fn classic_join(
        &mut self,
        req: &JoinGroupRequest,
        joiner: &Joiner,
        topics: &TopicsImage,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> JoinResult {
        let refuse = |code| JoinResult::error(code, &req.member_id);
        if !self.supports_classic(&req.protocol_type, &req.protocols) {
            return refuse(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        let (protocol, metadata) = &req.protocols[0];
        let Ok(subscription) = Subscription::decode(metadata.clone()) else {
            return refuse(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        };
        let (member_id, joined) = match self.classic_identify(req, joiner, now, limits) {
            Ok(found) => found,
            Err(refused) => return *refused,
        };
        let m = self.members.get_mut(&member_id).expect("identified");
        let changed = m.take_join(req, joiner, &subscription, now);
        self.move_epochs(topics, joined || changed, limits);
        let owned: Vec<(TopicId, Vec<i32>)> = by_id(&subscription.owned_partitions, topics)
            .into_iter()
            .map(|(t, ps)| (t, ps.into_iter().collect()))
            .collect();
        // Twice: a member that must give partitions up and reports owning none of them (an
        // eager member rejoining) has given them up, and moves on in the same join.
        self.reconcile(&member_id, Some(&owned), now);
        self.reconcile(&member_id, Some(&owned), now);
        // The join ends the wait its heartbeat's REBALANCE_IN_PROGRESS began (Kafka's join
        // timer), unless it still has partitions to give up: then the revocation's deadline
        // stands.
        let m = self.members.get_mut(&member_id).expect("joined");
        if m.state != MemberState::UnrevokedPartitions {
            m.revocation_deadline = None;
        } else if m.revocation_deadline.is_none() {
            m.revocation_deadline = Some(now + m.rebalance_timeout);
        }
        JoinResult {
            error: ErrorCode::NONE,
            generation_id: self.members[&member_id].member_epoch,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.into()),
            protocol_name: Some(protocol.clone()),
            leader: String::new(),
            member_id,
            members: Vec::new(),
        }
    }

    /// The member a classic JoinGroup is for, and whether it is new. A static member's new
    /// process (no member id) takes its instance's place; a member id the instance does not
    /// hold is fenced. A dynamic member without an id is given one to join with (v4+).
    fn classic_identify(
        &mut self,
        req: &JoinGroupRequest,
        joiner: &Joiner,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<(String, bool), Box<JoinResult>> {
        let refuse = |code| Box::new(JoinResult::error(code, &req.member_id));
        if let Some(instance) = &req.group_instance_id {
            let holder = self.instance_holder(instance).map(|m| m.member_id.clone());
            match (holder, req.member_id.is_empty()) {
                (Some(old), true) => {
                    // A new process of the instance takes its place: epoch, partitions and
                    // target carry over to the new member id.
                    let new = format!("{instance}-{}", uuid::Uuid::new_v4());
                    self.rename_member(&old, &new);
                    return Ok((new, false));
                }
                (Some(old), false) if old != req.member_id => {
                    return Err(refuse(ErrorCode::FENCED_INSTANCE_ID))
                }
                (Some(old), false) => return Ok((old, false)),
                (None, false) => return Err(refuse(ErrorCode::UNKNOWN_MEMBER_ID)),
                (None, true) => {}
            }
        } else if req.member_id.is_empty() && joiner.version >= 4 {
            let id = format!("{}-{}", joiner.client_id, uuid::Uuid::new_v4());
            return Err(Box::new(JoinResult::error(
                ErrorCode::MEMBER_ID_REQUIRED,
                &id,
            )));
        } else if let Some(m) = self.members.get(&req.member_id) {
            if m.classic.is_none() {
                // A member of the consumer protocol does not JoinGroup.
                return Err(refuse(ErrorCode::UNKNOWN_MEMBER_ID));
            }
            return Ok((req.member_id.clone(), false));
        }
        if self.members.len() >= limits.max_size {
            return Err(refuse(ErrorCode::GROUP_MAX_SIZE_REACHED));
        }
        let member_id = match (&req.group_instance_id, req.member_id.is_empty()) {
            (Some(instance), _) => format!("{instance}-{}", uuid::Uuid::new_v4()),
            (None, true) => format!("{}-{}", joiner.client_id, uuid::Uuid::new_v4()),
            (None, false) => req.member_id.clone(),
        };
        let caller = Caller {
            client_id: joiner.client_id.clone(),
            client_host: joiner.client_host.clone(),
            version: 1,
        };
        let mut member = ConsumerMember::new(&member_id, &caller, now + joiner.session);
        member.instance_id = req.group_instance_id.clone();
        self.members.insert(member_id.clone(), member);
        Ok((member_id, true))
    }

    /// A classic member's SyncGroup (Kafka's `classicGroupSyncToConsumerGroup`): what it owns
    /// now, at the version it subscribed with. Refused REBALANCE_IN_PROGRESS when the group
    /// moved past it and it has nothing to give up (it must rejoin to get its new target).
    pub fn classic_sync(
        &mut self,
        req: &SyncGroupRequest,
        topics: &TopicsImage,
        now: Instant,
    ) -> SyncResult {
        let group_epoch = self.group_epoch;
        let m = match self.classic_member(&req.member_id, req.group_instance_id.as_deref()) {
            Ok(m) => m,
            Err(code) => return SyncResult::error(code),
        };
        let c = m.classic.as_ref().expect("a classic member");
        if req.generation_id != m.member_epoch {
            return SyncResult::error(ErrorCode::ILLEGAL_GENERATION);
        }
        let (protocol, metadata) = &c.protocols[0];
        let other_type = req
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE);
        if other_type || req.protocol_name.as_deref().is_some_and(|n| n != protocol) {
            return SyncResult::error(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        if group_epoch > m.member_epoch && m.state != MemberState::UnrevokedPartitions {
            return SyncResult::error(ErrorCode::REBALANCE_IN_PROGRESS);
        }
        m.session_deadline = now + c.session_timeout;
        let assignment = encode_assignment(metadata_version(metadata), &named(&m.assigned, topics));
        SyncResult {
            error: ErrorCode::NONE,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.into()),
            protocol_name: Some(protocol.clone()),
            assignment,
        }
    }

    /// A classic member's Heartbeat (Kafka's `classicGroupHeartbeatToConsumerGroup`): its
    /// session goes on; REBALANCE_IN_PROGRESS when it should rejoin — the group moved past
    /// its epoch, it has partitions to give up, or every partition it waits for is free now.
    pub fn classic_heartbeat(&mut self, req: &HeartbeatRequest, now: Instant) -> ErrorCode {
        let group_epoch = self.group_epoch;
        let waiting = self.waiting_on_unreleased(&req.member_id);
        let m = match self.classic_member(&req.member_id, req.group_instance_id.as_deref()) {
            Ok(m) => m,
            Err(code) => return code,
        };
        if req.generation_id != m.member_epoch {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        m.session_deadline = now + m.classic.as_ref().expect("classic").session_timeout;
        let rejoin = m.member_epoch < group_epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions && !waiting);
        if !rejoin {
            return ErrorCode::NONE;
        }
        // Kafka's join timer: a member told to rejoin that does not within its rebalance
        // timeout is removed (`expire`), so that it cannot keep partitions the group's target
        // gave to others by heartbeating alone.
        if m.revocation_deadline.is_none() {
            m.revocation_deadline = Some(now + m.rebalance_timeout);
        }
        ErrorCode::REBALANCE_IN_PROGRESS
    }

    /// A classic LeaveGroup (Kafka's `classicGroupLeaveToConsumerGroup`): each member named,
    /// by its instance when it has one (an admin may name the instance alone), is removed.
    /// Never a downgrade: the group's type follows its members of the consumer protocol.
    pub fn classic_leave(&mut self, members: &[(String, Option<String>)]) -> LeaveResults {
        let mut out = Vec::with_capacity(members.len());
        for (member_id, instance) in members {
            let found = match instance {
                Some(i) => self.instance_holder(i).map(|m| m.member_id.clone()),
                None => self
                    .members
                    .get(member_id)
                    .filter(|m| m.classic.is_some())
                    .map(|m| m.member_id.clone()),
            };
            let code = match found {
                None => ErrorCode::UNKNOWN_MEMBER_ID,
                Some(id) if !member_id.is_empty() && id != *member_id => {
                    ErrorCode::FENCED_INSTANCE_ID
                }
                Some(id) => {
                    self.remove_member(&id);
                    ErrorCode::NONE
                }
            };
            out.push((member_id.clone(), instance.clone(), code));
        }
        out
    }

    /// The classic member `member_id`; with an instance id, the instance's member, and a
    /// replaced process (another member id) is fenced.
    fn classic_member(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<&mut ConsumerMember, ErrorCode> {
        let id = match instance {
            Some(i) => self
                .instance_holder(i)
                .map(|m| m.member_id.clone())
                .ok_or(ErrorCode::UNKNOWN_MEMBER_ID)?,
            None => member_id.to_string(),
        };
        if id != member_id {
            return Err(ErrorCode::FENCED_INSTANCE_ID);
        }
        let m = self
            .members
            .get_mut(member_id)
            .ok_or(ErrorCode::UNKNOWN_MEMBER_ID)?;
        if m.classic.is_none() {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        Ok(m)
    }

    /// Whether a member waiting for partitions (UNRELEASED) waits for one another member still
    /// holds (Kafka's `waitingOnUnreleasedPartition`).
    fn waiting_on_unreleased(&self, member_id: &str) -> bool {
        let Some(m) = self.members.get(member_id) else {
            return false;
        };
        if m.state != MemberState::UnreleasedPartitions {
            return false;
        }
        let held = self.held_by_others(member_id);
        let target = self.target.get(member_id);
        target.into_iter().flatten().any(|(t, ps)| {
            ps.iter().any(|p| {
                !m.assigned.get(t).is_some_and(|a| a.contains(p)) && held.contains(&(*t, *p))
            })
        })
    }

    /// Whether a classic group with members may become a consumer group as a member of the
    /// consumer protocol joins it (Kafka's `validateOnlineUpgrade`); the refusal says why.
    pub fn upgradable(
        g: &Group,
        policy: MigrationPolicy,
        limits: &ConsumerLimits,
    ) -> Result<(), String> {
        if !policy.upgrade {
            return Err("group.consumer.migration.policy does not allow upgrades".into());
        }
        if g.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return Err(format!(
                "its protocol type is {:?}, not the consumer protocol",
                g.protocol_type.as_deref().unwrap_or("")
            ));
        }
        if g.members.len() > limits.max_size {
            return Err(format!(
                "its {} members exceed group.consumer.max.size ({})",
                g.members.len(),
                limits.max_size
            ));
        }
        Ok(())
    }

    /// The consumer group a classic group becomes (Kafka's `fromClassicGroup`): the same
    /// member ids at member epoch = the generation, classic members all, each owning what its
    /// last assignment gave it and what its subscription says it still owns (a cooperative
    /// member keeps consuming its partitions while the group completes a rebalance, whose
    /// join phase cleared the assignments), and targeted at that. A partition two members
    /// claim stays owned by both until they give it up, and is targeted at the first only.
    /// `None` when a member's subscription or assignment does not read (the group stays
    /// classic).
    pub fn from_classic(g: &Group, topics: &TopicsImage, now: Instant) -> Option<ConsumerGroup> {
        let mut cg = ConsumerGroup::new(&g.group_id);
        cg.group_epoch = g.generation;
        cg.assignment_epoch = g.generation;
        let mut targeted = BTreeSet::new();
        for m in g.members.values() {
            let chosen = g.protocol_name.as_deref().map(|p| m.metadata_for(p));
            let metadata = chosen
                .filter(|b| !b.is_empty())
                .or_else(|| m.protocols.first().map(|(_, b)| b.clone()))?;
            let subscription = Subscription::decode(metadata).ok()?;
            let last = by_id(&decode_assignment(m.assignment.clone()).ok()?, topics);
            let assigned = union(last, &by_id(&subscription.owned_partitions, topics));
            let mut target = Assignment::new();
            for (t, ps) in &assigned {
                for p in ps.iter().filter(|p| targeted.insert((*t, **p))) {
                    target.entry(*t).or_default().insert(*p);
                }
            }
            let caller = Caller {
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                version: 1,
            };
            let mut member = ConsumerMember::new(&m.member_id, &caller, now + m.session_timeout);
            member.instance_id = m.group_instance_id.clone();
            member.rack_id = subscription.rack_id.filter(|r| !r.is_empty());
            member.subscribed_topic_names = sorted(subscription.topics);
            member.rebalance_timeout = m.rebalance_timeout;
            member.member_epoch = g.generation;
            member.previous_member_epoch = g.generation;
            member.assigned = assigned;
            member.classic = Some(ClassicMember {
                session_timeout: m.session_timeout,
                protocols: m.protocols.clone(),
            });
            cg.target.insert(m.member_id.clone(), target);
            cg.members.insert(m.member_id.clone(), member);
        }
        cg.subscribed = cg.subscription_metadata(topics);
        Some(cg)
    }

    /// Whether the group becomes classic now that a member of the consumer protocol left it
    /// (Kafka's `validateOnlineDowngradeWithFencedMember`, after the fact): members remain,
    /// all classic, within `group.max.size`, and the policy allows it.
    pub fn downgradable(&self, policy: MigrationPolicy, classic: &GroupLimits) -> bool {
        policy.downgrade
            && !self.members.is_empty()
            && self.members.len() <= classic.max_size
            && self.members.values().all(|m| m.classic.is_some())
    }

    /// Makes `classic` (the group's classic entry, which holds its offsets) this group as a
    /// classic group (Kafka's `fromConsumerGroup`), then a rebalance, so that every member
    /// rejoins the classic way. The generation is the members' epoch (the group's before the
    /// leaving member moved it), so that a member in step is told REBALANCE_IN_PROGRESS, not
    /// ILLEGAL_GENERATION, and its commits still count; each member's assignment is what it
    /// owns now, partitions it is still giving up included, so that a quick upgrade back
    /// cannot hand them to another member.
    pub fn into_classic(
        &self,
        classic: &mut Group,
        topics: &TopicsImage,
        now: Instant,
        limits: &GroupLimits,
    ) {
        assert!(self.members.values().all(|m| m.classic.is_some()));
        classic.members.clear();
        classic.static_members.clear();
        classic.pending_member_ids.clear();
        classic.generation = self
            .members
            .values()
            .map(|m| m.member_epoch)
            .max()
            .unwrap_or(self.group_epoch)
            .max(0);
        classic.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.into());
        for m in self.members.values() {
            let c = m.classic.as_ref().expect("all classic");
            let owns = union(m.assigned.clone(), &m.revoking);
            let version = metadata_version(&c.protocols[0].1);
            if let Some(i) = &m.instance_id {
                classic
                    .static_members
                    .insert(i.clone(), m.member_id.clone());
            }
            classic.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout: c.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: c.protocols.clone(),
                    assignment: encode_assignment(version, &named(&owns, topics)),
                    deadline: now + c.session_timeout,
                    awaiting_join: false,
                    awaiting_sync: false,
                },
            );
        }
        classic.protocol_name = classic.select_protocol();
        classic.leader = classic.members.keys().next().cloned();
        classic.state = GroupState::Stable;
        classic.prepare_rebalance(now, limits);
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}

impl ConsumerMember {
    /// Takes a classic JoinGroup's subscription and settings; whether the subscription changed.
    fn take_join(
        &mut self,
        req: &JoinGroupRequest,
        joiner: &Joiner,
        subscription: &Subscription,
        now: Instant,
    ) -> bool {
        let names = sorted(subscription.topics.clone());
        let changed = names != self.subscribed_topic_names || self.subscribed_topic_regex.is_some();
        self.subscribed_topic_names = names;
        self.subscribed_topic_regex = None;
        self.regex = None;
        self.rack_id = subscription.rack_id.clone().filter(|r| !r.is_empty());
        self.client_id = joiner.client_id.clone();
        self.client_host = joiner.client_host.clone();
        self.rebalance_timeout = ms(req.rebalance_timeout_ms);
        self.server_assignor = None;
        self.classic = Some(ClassicMember {
            session_timeout: joiner.session,
            protocols: req.protocols.clone(),
        });
        self.session_deadline = now + joiner.session;
        self.sent = None;
        changed
    }
}

#[cfg(test)]
mod tests;
