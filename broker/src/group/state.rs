//! One consumer group's state machine (Kafka's classic protocol): Empty → PreparingRebalance →
//! CompletingRebalance → Stable, and back. Decisions only: no I/O, no channels, time passed
//! in. What a decision answers is returned as [`Reply`]s (`Group::take_replies`); the
//! coordinator delivers them to the requests parked for them and persists what was decided.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_metadata::types::TopicPartition;
use tributary_protocol::requests::groups::SyncGroupRequest;
use tributary_protocol::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// What a JoinGroup waits for.
#[derive(Debug, Clone)]
pub struct JoinResult {
    pub error: ErrorCode,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only: (member_id, group_instance_id, metadata).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResult {
    pub fn error(error: ErrorCode, member_id: &str) -> Self {
        JoinResult {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncResult {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ErrorCode) -> Self {
        SyncResult {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer the group decided for a request that waits on it: the coordinator hands it to the
/// JoinGroup or SyncGroup parked for that member.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A JoinGroup's answer, for the member it names (`JoinResult::member_id`).
    Join(JoinResult),
    /// A SyncGroup's answer, for `member_id`.
    Sync {
        member_id: String,
        result: SyncResult,
    },
}

pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub deadline: Instant,
    /// A JoinGroup of this member waits for the join phase to complete.
    pub awaiting_join: bool,
    /// A SyncGroup of this member waits for the leader's assignment.
    pub awaiting_sync: bool,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED and not yet used to join, with the time
    /// they lapse (one session timeout). They count toward `group.max.size`.
    pub pending_member_ids: Vec<(String, Instant)>,
    pub static_members: BTreeMap<String, String>,
    pub rebalance_deadline: Option<Instant>,
    pub initial_delay_until: Option<Instant>,
    pub state_since: Instant,
    /// Committed offsets by partition.
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// Answers decided and not yet taken by the coordinator.
    replies: Vec<Reply>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// Consumer-group limits, from the broker config.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub max_size: usize,
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    pub initial_rebalance_delay: Duration,
}

impl Group {
    pub fn new(group_id: &str, now: Instant) -> Self {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_member_ids: Vec::new(),
            static_members: BTreeMap::new(),
            rebalance_deadline: None,
            initial_delay_until: None,
            state_since: now,
            offsets: BTreeMap::new(),
            replies: Vec::new(),
        }
    }

    /// The answers decided since the last call, to deliver to the requests waiting for them.
    pub fn take_replies(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.replies)
    }

    /// Records an answer decided outside the member walks below (JoinGroup's own decisions).
    pub(super) fn push_reply(&mut self, reply: Reply) {
        self.replies.push(reply);
    }

    /// Answers `member`'s parked JoinGroup and SyncGroup, if it has them, with `error`: it was
    /// removed (UNKNOWN_MEMBER_ID) or its instance taken over (FENCED_INSTANCE_ID).
    pub(super) fn refuse_parked(&mut self, member: &mut Member, error: ErrorCode) {
        let joined = JoinResult::error(error, &member.member_id);
        Self::answer_join(&mut self.replies, member, joined);
        Self::answer_sync(&mut self.replies, member, SyncResult::error(error));
    }

    /// Answers `member`'s parked JoinGroup, if it has one.
    fn answer_join(replies: &mut Vec<Reply>, member: &mut Member, result: JoinResult) {
        if std::mem::take(&mut member.awaiting_join) {
            debug_assert_eq!(result.member_id, member.member_id);
            replies.push(Reply::Join(result));
        }
    }

    /// Answers `member`'s parked SyncGroup, if it has one.
    fn answer_sync(replies: &mut Vec<Reply>, member: &mut Member, result: SyncResult) {
        if std::mem::take(&mut member.awaiting_sync) {
            let member_id = member.member_id.clone();
            replies.push(Reply::Sync { member_id, result });
        }
    }

    /// Kafka's static-membership check: a request naming an instance id must come from the
    /// member that currently holds it.
    pub fn check_instance(&self, member_id: &str, instance: Option<&str>) -> Result<(), ErrorCode> {
        let holder = instance.and_then(|i| self.static_members.get(i));
        match holder {
            Some(holder) if holder != member_id => Err(ErrorCode::FENCED_INSTANCE_ID),
            _ => Ok(()),
        }
    }

    /// Whether an OffsetCommit from `member_id` (with its static `instance`, at `generation`)
    /// may write this group's offsets — Kafka's classic-group `validateOffsetCommit`:
    /// - generation < 0 on an Empty group is a "simple" commit (admin tools, consumers that
    ///   assign partitions themselves) and is accepted;
    /// - a request naming a generation, a member or an instance must come from a current member
    ///   (UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID when the instance is held by another member
    ///   id) of the current generation (ILLEGAL_GENERATION);
    /// - one naming none of them is accepted only while the group is Empty (UNKNOWN_MEMBER_ID);
    /// - in CompletingRebalance the member has its new generation but no assignment yet:
    ///   REBALANCE_IN_PROGRESS. PreparingRebalance is not refused: an eager consumer commits
    ///   what it processed from its revoke callback, before it rejoins.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance.is_some() {
            self.validate_member(member_id, instance)?;
            if generation != self.generation {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
        } else if self.state != GroupState::Empty {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ErrorCode::REBALANCE_IN_PROGRESS);
        }
        Ok(())
    }

    /// Kafka's `validateMember`: a static instance must be held by `member_id`; otherwise the
    /// member must exist.
    fn validate_member(&self, member_id: &str, instance: Option<&str>) -> Result<(), ErrorCode> {
        match instance {
            Some(i) => match self.static_members.get(i) {
                None => Err(ErrorCode::UNKNOWN_MEMBER_ID),
                Some(holder) if holder != member_id => Err(ErrorCode::FENCED_INSTANCE_ID),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(ErrorCode::UNKNOWN_MEMBER_ID),
        }
    }

    fn set_state(&mut self, state: GroupState, now: Instant) {
        self.state = state;
        self.state_since = now;
    }

    /// Protocols every member supports; `None` when the group has no members.
    fn candidate_protocols(&self) -> Option<Vec<String>> {
        let mut iter = self.members.values();
        let first = iter.next()?;
        let mut candidates: Vec<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in iter {
            candidates.retain(|c| m.protocols.iter().any(|(n, _)| n == c));
        }
        Some(candidates)
    }

    /// Kafka's rule: every member votes for its most preferred candidate; most votes wins.
    pub(super) fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols()?;
        let mut votes: Vec<(String, usize)> = candidates.iter().map(|c| (c.clone(), 0)).collect();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                if let Some(v) = votes.iter_mut().find(|(c, _)| c == name) {
                    v.1 += 1;
                }
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(c, _)| c)
    }

    /// Whether a member with these protocols can join: same protocol type and at least one
    /// protocol in common with the group.
    pub fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        match self.candidate_protocols() {
            Some(c) => protocols.iter().any(|(n, _)| c.contains(n)),
            None => true,
        }
    }

    pub fn prepare_rebalance(&mut self, now: Instant, limits: &GroupLimits) {
        let was_empty = self.state == GroupState::Empty;
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        // Members waiting on a sync will never get it for this generation.
        for m in self.members.values_mut() {
            let result = SyncResult::error(ErrorCode::REBALANCE_IN_PROGRESS);
            Self::answer_sync(&mut self.replies, m, result);
        }
        if self.state != GroupState::PreparingRebalance {
            self.rebalance_deadline = Some(now + timeout);
            self.initial_delay_until = if was_empty {
                Some(now + limits.initial_rebalance_delay)
            } else {
                None
            };
        } else if let Some(until) = self.initial_delay_until {
            // New members keep arriving during the initial delay: wait a little longer, up to
            // the rebalance timeout (Kafka's InitialDelayedJoin).
            let extended =
                (now + limits.initial_rebalance_delay).min(self.rebalance_deadline.unwrap_or(now));
            self.initial_delay_until = Some(until.max(extended));
        }
        self.set_state(GroupState::PreparingRebalance, now);
    }

    fn all_joined(&self) -> bool {
        self.members.values().all(|m| m.awaiting_join)
    }

    /// Completes the join phase if it is due. Returns true if a new generation started.
    pub fn maybe_complete_join(&mut self, now: Instant) -> bool {
        if self.state != GroupState::PreparingRebalance {
            return false;
        }
        let delay_over = self.initial_delay_until.is_none_or(|t| now >= t);
        let timed_out = self.rebalance_deadline.is_some_and(|t| now >= t);
        if !(timed_out || (delay_over && self.all_joined())) {
            return false;
        }
        // Members that did not rejoin in time are removed.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id);
        }
        self.generation += 1;
        self.rebalance_deadline = None;
        self.initial_delay_until = None;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.set_state(GroupState::Empty, now);
            return true;
        }
        self.protocol_name = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.set_state(GroupState::CompletingRebalance, now);
        tracing::info!(group = %self.group_id, generation = self.generation, members = self.members.len(), protocol = ?self.protocol_name, "rebalance: join complete");
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let all: Vec<(String, Option<String>, Bytes)> = self
            .members
            .values()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.metadata_for(&protocol),
                )
            })
            .collect();
        for m in self.members.values_mut() {
            m.deadline = now + m.session_timeout;
            m.assignment = Bytes::new();
            let joined = JoinResult {
                error: ErrorCode::NONE,
                generation_id: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol_name: Some(protocol.clone()),
                leader: leader.clone(),
                member_id: m.member_id.clone(),
                members: if m.member_id == leader {
                    all.clone()
                } else {
                    Vec::new()
                },
            };
            Self::answer_join(&mut self.replies, m, joined);
        }
        // A new generation: every member is answered, and the leader is one of them.
        assert!(self.members.values().all(|m| !m.awaiting_join));
        assert!(self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l)));
        true
    }

    /// The current generation as a join response for one member (a rejoin that changes nothing).
    pub fn current_join(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol_name.clone().unwrap_or_default();
        JoinResult {
            error: ErrorCode::NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: Some(protocol.clone()),
            leader: leader.clone(),
            member_id: member_id.to_string(),
            members: if member_id == leader {
                self.members
                    .values()
                    .map(|m| {
                        (
                            m.member_id.clone(),
                            m.group_instance_id.clone(),
                            m.metadata_for(&protocol),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    pub fn remove_member(&mut self, member_id: &str) {
        if let Some(mut m) = self.members.remove(member_id) {
            self.refuse_parked(&mut m, ErrorCode::UNKNOWN_MEMBER_ID);
        }
        // Whatever instance still names the removed id (its own, or one whose join with that
        // id was refused before it became a member) is free again.
        self.static_members.retain(|_, id| id != member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        debug_assert!(!self.members.contains_key(member_id));
    }

    /// Applies the leader's assignment and releases every waiting SyncGroup.
    pub fn complete_sync(&mut self, assignments: &[(String, Bytes)], now: Instant) {
        for m in self.members.values_mut() {
            m.assignment = assignments
                .iter()
                .find(|(id, _)| *id == m.member_id)
                .map(|(_, a)| a.clone())
                .unwrap_or_default();
        }
        self.set_state(GroupState::Stable, now);
        for m in self.members.values_mut() {
            let synced = SyncResult {
                error: ErrorCode::NONE,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                assignment: m.assignment.clone(),
            };
            Self::answer_sync(&mut self.replies, m, synced);
        }
        assert!(self.members.values().all(|m| !m.awaiting_sync));
    }

    /// SyncGroup's decision: refused at once, answered at once (a stable group's current
    /// assignment), or parked until the leader's assignment arrives — which, when `member_id`
    /// is the leader, is this request. Returns whether this request completed the rebalance
    /// (and the group's metadata must be persisted).
    pub fn sync(&mut self, req: &SyncGroupRequest, now: Instant) -> Result<bool, ErrorCode> {
        self.check_instance(&req.member_id, req.group_instance_id.as_deref())?;
        if !self.members.contains_key(&req.member_id) {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if req.generation_id != self.generation {
            return Err(ErrorCode::ILLEGAL_GENERATION);
        }
        let differs = |asked: &Option<String>, ours: &Option<String>| {
            asked.as_ref().is_some_and(|p| Some(p) != ours.as_ref())
        };
        if differs(&req.protocol_type, &self.protocol_type)
            || differs(&req.protocol_name, &self.protocol_name)
        {
            return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        match self.state {
            GroupState::PreparingRebalance => Err(ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::Empty | GroupState::Dead => Err(ErrorCode::UNKNOWN_MEMBER_ID),
            GroupState::Stable => {
                let m = &self.members[&req.member_id];
                self.replies.push(Reply::Sync {
                    member_id: req.member_id.clone(),
                    result: SyncResult {
                        error: ErrorCode::NONE,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    },
                });
                Ok(false)
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    m.awaiting_sync = true;
                    m.deadline = now + m.session_timeout;
                }
                let is_leader = self.leader.as_deref() == Some(req.member_id.as_str());
                if is_leader {
                    self.complete_sync(&req.assignments, now);
                }
                Ok(is_leader)
            }
        }
    }

    /// Empty, with no member and no member id handed out (KIP-394): no session or join
    /// deadline runs here.
    pub fn idle(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending_member_ids.is_empty()
    }

    /// Removes members whose session expired; returns whether any did.
    pub fn expire_sessions(&mut self, now: Instant, limits: &GroupLimits) -> bool {
        self.pending_member_ids.retain(|(_, until)| now < *until);
        // During PreparingRebalance too: a member that stopped heartbeating will not rejoin, and
        // the join phase should not wait for it until the (much longer) rebalance timeout.
        if !matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::PreparingRebalance
        ) {
            return false;
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && now >= m.deadline)
            .map(|m| m.member_id.clone())
            .collect();
        if expired.is_empty() {
            return false;
        }
        for id in &expired {
            tracing::info!(group = %self.group_id, member = %id, "session expired; removing member");
            self.remove_member(id);
        }
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now, limits);
        }
        true
    }

    pub fn subscribed_topics(&self) -> Vec<String> {
        let Some(protocol) = &self.protocol_name else {
            return Vec::new();
        };
        if self.protocol_type.as_deref() != Some("consumer") {
            return Vec::new();
        }
        let mut topics: Vec<String> = self
            .members
            .values()
            .flat_map(|m| {
                tributary_protocol::group_records::subscription_topics(&m.metadata_for(protocol))
            })
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: GroupLimits = GroupLimits {
        max_size: 10,
        min_session_timeout: Duration::from_millis(100),
        max_session_timeout: Duration::from_secs(60),
        initial_rebalance_delay: Duration::from_millis(0),
    };

    fn member(id: &str, now: Instant, protocols: &[&str]) -> Member {
        Member {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(10),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(p.to_string())))
                .collect(),
            assignment: Bytes::new(),
            deadline: now,
            awaiting_join: true,
            awaiting_sync: false,
        }
    }

    /// The join answers `g` decided, by member id.
    fn joins(g: &mut Group) -> BTreeMap<String, JoinResult> {
        let mut joins = BTreeMap::new();
        for reply in g.take_replies() {
            if let Reply::Join(j) = reply {
                let earlier = joins.insert(j.member_id.clone(), j);
                assert!(earlier.is_none(), "one answer per parked join");
            }
        }
        joins
    }

    /// The sync answers `g` decided, by member id.
    fn syncs(g: &mut Group) -> BTreeMap<String, SyncResult> {
        let mut syncs = BTreeMap::new();
        for reply in g.take_replies() {
            if let Reply::Sync { member_id, result } = reply {
                let earlier = syncs.insert(member_id, result);
                assert!(earlier.is_none(), "one answer per parked sync");
            }
        }
        syncs
    }

    fn sync_req(member: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncGroupRequest {
        SyncGroupRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                .collect(),
        }
    }

    #[test]
    fn two_members_join_pick_a_common_protocol_and_sync() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        let a = member("a", now, &["cooperative-sticky", "range"]);
        let b = member("b", now, &["range", "roundrobin"]);
        g.members.insert("a".into(), a);
        g.prepare_rebalance(now, &LIMITS);
        g.members.insert("b".into(), b);
        assert!(g.maybe_complete_join(now));
        let joined = joins(&mut g);
        let (ja, jb) = (&joined["a"], &joined["b"]);
        assert_eq!(ja.protocol_name.as_deref(), Some("range"));
        assert_eq!(ja.generation_id, 1);
        assert_eq!(ja.leader, "a");
        assert_eq!(ja.members.len(), 2, "the leader sees every member");
        assert!(jb.members.is_empty());
        assert_eq!(g.state, GroupState::CompletingRebalance);
        assert!(g.members.values().all(|m| !m.awaiting_join));
        // The follower's sync waits for the leader's; the leader's completes both.
        assert_eq!(g.sync(&sync_req("b", 1, &[]), now), Ok(false));
        assert!(g.take_replies().is_empty(), "b waits for the assignment");
        let assignment = [("a", "A"), ("b", "B")];
        assert_eq!(g.sync(&sync_req("a", 1, &assignment), now), Ok(true));
        let synced = syncs(&mut g);
        assert_eq!(synced["b"].assignment, Bytes::from_static(b"B"));
        assert_eq!(synced["a"].assignment, Bytes::from_static(b"A"));
        assert_eq!(g.state, GroupState::Stable);
        // Stable: a sync is answered at once with the member's assignment.
        assert_eq!(g.sync(&sync_req("b", 1, &[]), now), Ok(false));
        assert_eq!(syncs(&mut g)["b"].assignment, Bytes::from_static(b"B"));
        assert_eq!(
            g.sync(&sync_req("b", 0, &[]), now),
            Err(ErrorCode::ILLEGAL_GENERATION)
        );
        assert_eq!(
            g.sync(&sync_req("z", 1, &[]), now),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
    }

    #[test]
    fn a_rebalance_answers_a_parked_sync_and_a_removed_member_its_parked_requests() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        g.members.insert("a".into(), member("a", now, &["range"]));
        g.members.insert("b".into(), member("b", now, &["range"]));
        g.prepare_rebalance(now, &LIMITS);
        assert!(g.maybe_complete_join(now));
        assert_eq!(joins(&mut g).len(), 2);
        assert_eq!(g.sync(&sync_req("b", 1, &[]), now), Ok(false));
        // A new rebalance before the leader's sync: b's parked sync cannot complete.
        g.prepare_rebalance(now, &LIMITS);
        let synced = syncs(&mut g);
        assert_eq!(synced["b"].error, ErrorCode::REBALANCE_IN_PROGRESS);
        assert!(!g.members["b"].awaiting_sync);
        // b rejoins and is removed while it waits: its join is answered UNKNOWN_MEMBER_ID.
        g.members.get_mut("b").unwrap().awaiting_join = true;
        g.remove_member("b");
        let joined = joins(&mut g);
        assert_eq!(joined["b"].error, ErrorCode::UNKNOWN_MEMBER_ID);
        assert_eq!(joined.len(), 1, "a was not waiting");
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        let a = member("a", now, &["range"]);
        let mut b = member("b", now, &["range"]);
        b.awaiting_join = false;
        g.members.insert("a".into(), a);
        g.members.insert("b".into(), b);
        g.prepare_rebalance(now, &LIMITS);
        assert!(!g.maybe_complete_join(now), "b has not rejoined yet");
        assert!(g.maybe_complete_join(now + Duration::from_secs(11)));
        assert!(!g.members.contains_key("b"));
        assert_eq!(g.members.len(), 1);
    }

    #[test]
    fn offset_commits_are_validated_as_kafka_does() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        // Empty: simple commits (generation -1, with or without a member id) are accepted;
        // anything else must name a member.
        assert_eq!(g.validate_offset_commit("", None, -1), Ok(()));
        assert_eq!(g.validate_offset_commit("x", None, -1), Ok(()));
        assert_eq!(
            g.validate_offset_commit("x", None, 0),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        let a = member("a", now, &["range"]);
        g.members.insert("a".into(), a);
        g.prepare_rebalance(now, &LIMITS);
        assert!(g.maybe_complete_join(now));
        assert_eq!(g.generation, 1);
        // CompletingRebalance: the member knows its generation but has no assignment yet.
        assert_eq!(
            g.validate_offset_commit("a", None, 1),
            Err(ErrorCode::REBALANCE_IN_PROGRESS)
        );
        g.complete_sync(&[], now);
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.validate_offset_commit("a", None, 1), Ok(()));
        assert_eq!(
            g.validate_offset_commit("a", None, 0),
            Err(ErrorCode::ILLEGAL_GENERATION)
        );
        assert_eq!(
            g.validate_offset_commit("b", None, 1),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        // A commit naming nothing is refused while the group has members.
        assert_eq!(
            g.validate_offset_commit("", None, -1),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        // PreparingRebalance: a member of the current generation still commits (eager
        // consumers do, from their revoke callback); a stale generation does not.
        g.prepare_rebalance(now, &LIMITS);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.validate_offset_commit("a", None, 1), Ok(()));
        assert_eq!(
            g.validate_offset_commit("a", None, 0),
            Err(ErrorCode::ILLEGAL_GENERATION)
        );
        assert_eq!(
            g.validate_offset_commit("zz", None, 1),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        g.state = GroupState::Dead;
        assert_eq!(
            g.validate_offset_commit("a", None, 1),
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        );
    }

    #[test]
    fn static_members_are_fenced_on_commit() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        let mut a = member("a", now, &["range"]);
        a.group_instance_id = Some("i1".into());
        g.members.insert("a".into(), a);
        g.static_members.insert("i1".into(), "a".into());
        g.prepare_rebalance(now, &LIMITS);
        assert!(g.maybe_complete_join(now));
        g.complete_sync(&[], now);
        assert_eq!(g.validate_offset_commit("a", Some("i1"), 1), Ok(()));
        assert_eq!(
            g.validate_offset_commit("old", Some("i1"), 1),
            Err(ErrorCode::FENCED_INSTANCE_ID)
        );
        assert_eq!(
            g.validate_offset_commit("a", Some("i2"), 1),
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        // Generation -1 with an instance id on a non-empty group is still checked.
        assert_eq!(
            g.validate_offset_commit("old", Some("i1"), -1),
            Err(ErrorCode::FENCED_INSTANCE_ID)
        );
    }

    #[test]
    fn session_expiry_triggers_a_rebalance() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        g.protocol_type = Some("consumer".into());
        let a = member("a", now, &["range"]);
        g.members.insert("a".into(), a);
        g.prepare_rebalance(now, &LIMITS);
        assert!(g.maybe_complete_join(now));
        g.complete_sync(&[], now);
        assert!(!g.expire_sessions(now + Duration::from_secs(5), &LIMITS));
        assert!(g.expire_sessions(now + Duration::from_secs(11), &LIMITS));
        assert!(g.members.is_empty());
        assert!(g.maybe_complete_join(now + Duration::from_secs(11)));
        assert_eq!(g.state, GroupState::Empty);
    }
}
