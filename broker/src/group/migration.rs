//! The coordinator's side of mixed groups (Kafka 4's online migration): a classic group with
//! members becomes a consumer group when a member of the consumer protocol joins it, classic
//! members keep JoinGroup, SyncGroup, Heartbeat and LeaveGroup in a consumer group, and the
//! group becomes classic again when its last member of the consumer protocol leaves
//! (`group.consumer.migration.policy`). Either change of type owes the log the old type's
//! tombstones, written before the group's next record (`converted`); a group's offsets stay
//! in its classic entry throughout.

use std::time::Instant;

use tracing::info;
use tributary_protocol::group_records::GroupKey;
use tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest;
use tributary_protocol::requests::groups::{
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use tributary_protocol::ErrorCode;

use super::consumer::{ConsumerGroup, Refusal, TopicsImage, JOIN_EPOCH};
use super::join::{self, Joiner};
use super::state::{Group, JoinResult, SyncResult};
use super::{GroupCoordinator, MemberResults};

impl GroupCoordinator {
    /// Before a ConsumerGroupHeartbeat: the consumer group a classic group with members under
    /// its id becomes when the heartbeat joins and the policy allows it (`None`: no such classic
    /// group); the caller runs the heartbeat on it and, if it is taken, `commit_upgrade`s it.
    /// Otherwise the heartbeat is refused GROUP_ID_NOT_FOUND, as Kafka answers.
    pub(super) fn upgrade_for(
        &self,
        req: &ConsumerGroupHeartbeatRequest,
        topics: &TopicsImage,
    ) -> Result<Option<ConsumerGroup>, Refusal> {
        let groups = self.groups.borrow();
        let Some(g) = groups.get(&req.group_id).filter(|g| !g.members.is_empty()) else {
            return Ok(None);
        };
        let refused = |why: &str| Refusal {
            code: ErrorCode::GROUP_ID_NOT_FOUND,
            message: format!("Group {} is not a consumer group{why}.", req.group_id),
        };
        if req.member_epoch != JOIN_EPOCH {
            return Err(refused(""));
        }
        let limits = &self.config.consumer;
        if let Err(why) = ConsumerGroup::upgradable(g, limits.migration, limits) {
            info!(group = %req.group_id, reason = %why, "classic group not upgraded");
            return Err(refused(&format!(" and cannot become one: {why}")));
        }
        match ConsumerGroup::from_classic(g, topics, Instant::now()) {
            Some(upgraded) => Ok(Some(upgraded)),
            None => Err(refused(
                " and cannot become one: a member's consumer protocol metadata does not read",
            )),
        }
    }

    /// The classic group `upgraded` was made from becomes it: the classic entry keeps the
    /// offsets only, its parked requests are answered REBALANCE_IN_PROGRESS (its members rejoin
    /// as classic members of the consumer group), and its tombstone is owed to the log.
    pub(super) fn commit_upgrade(&self, upgraded: ConsumerGroup) {
        let id = upgraded.group_id.clone();
        let now = Instant::now();
        if let Some(g) = self.groups.borrow_mut().get_mut(&id) {
            let offsets = std::mem::take(&mut g.offsets);
            *g = Group::new(&id, now);
            g.offsets = offsets;
        }
        self.parked.borrow_mut().remove(&id);
        let tombstone = GroupKey::Group { group: id.clone() };
        self.converted
            .borrow_mut()
            .entry(id.clone())
            .or_default()
            .push((tombstone.encode(), None));
        info!(
            group = %id,
            members = upgraded.members.len(),
            epoch = upgraded.group_epoch,
            "classic group upgraded to a consumer group"
        );
        self.consumer_groups.borrow_mut().insert(id, upgraded);
    }

    /// A classic JoinGroup to a consumer group with members, answered at once (the caller
    /// persists what changed before answering). `caller`: the request's version, client id
    /// and host.
    pub fn join_consumer_group(
        &self,
        req: &JoinGroupRequest,
        (version, client_id, client_host): (i16, String, String),
        topics: &TopicsImage,
    ) -> JoinResult {
        let session = match join::session_timeout(req, &self.config.limits) {
            Ok(s) => s,
            Err(refused) => return *refused,
        };
        let joiner = Joiner {
            client_id,
            client_host,
            session,
            version,
        };
        let mut groups = self.consumer_groups.borrow_mut();
        let Some(g) = groups.get_mut(&req.group_id) else {
            return JoinResult::error(ErrorCode::UNKNOWN_MEMBER_ID, &req.member_id);
        };
        let before = (g.group_epoch, g.members.len());
        let answer = g.classic_join(req, &joiner, topics, Instant::now(), &self.config.consumer);
        if before != (g.group_epoch, g.members.len()) {
            info!(
                group = %req.group_id,
                member = %answer.member_id,
                group_epoch = g.group_epoch,
                members = g.members.len(),
                "classic member joined a consumer group"
            );
        }
        answer
    }

    /// A classic SyncGroup to a consumer group.
    pub fn sync_consumer_group(&self, req: &SyncGroupRequest, topics: &TopicsImage) -> SyncResult {
        let mut groups = self.consumer_groups.borrow_mut();
        match groups.get_mut(&req.group_id) {
            Some(g) => g.classic_sync(req, topics, Instant::now()),
            None => SyncResult::error(ErrorCode::UNKNOWN_MEMBER_ID),
        }
    }

    /// A classic Heartbeat to a consumer group.
    pub fn heartbeat_consumer_group(&self, req: &HeartbeatRequest) -> ErrorCode {
        let mut groups = self.consumer_groups.borrow_mut();
        match groups.get_mut(&req.group_id) {
            Some(g) => g.classic_heartbeat(req, Instant::now()),
            None => ErrorCode::UNKNOWN_MEMBER_ID,
        }
    }

    /// A classic LeaveGroup to a consumer group: the top-level code and each member's.
    pub fn leave_consumer_group(&self, req: &LeaveGroupRequest) -> (ErrorCode, MemberResults) {
        let mut groups = self.consumer_groups.borrow_mut();
        let Some(g) = groups.get_mut(&req.group_id) else {
            let unknown = ErrorCode::UNKNOWN_MEMBER_ID;
            let each = req
                .members
                .iter()
                .map(|(m, i)| (m.clone(), i.clone(), unknown));
            return (unknown, each.collect());
        };
        let results = g.classic_leave(&req.members);
        for (member, _, code) in &results {
            if *code == ErrorCode::NONE {
                info!(group = %req.group_id, member = %member, "classic member left a consumer group");
            }
        }
        let top = match results.as_slice() {
            [(_, _, code)] => *code,
            _ => ErrorCode::NONE,
        };
        (top, results)
    }

    /// After a member of the consumer protocol left consumer group `group_id` (a leave or an
    /// expiry): when only classic members remain and the policy allows it, the group becomes
    /// classic and rebalances the classic way. Its consumer records' tombstones are owed to the
    /// log; `persist_group` writes them with the classic group's record. Whether it changed.
    pub(super) fn maybe_downgrade(&self, group_id: &str, topics: &TopicsImage) -> bool {
        let due = self
            .consumer_groups
            .borrow()
            .get(group_id)
            .is_some_and(|g| g.downgradable(self.config.consumer.migration, &self.config.limits));
        if !due {
            return false;
        }
        let tombstones = self.consumer_tombstones(group_id);
        let Some(cg) = self.consumer_groups.borrow_mut().remove(group_id) else {
            return false;
        };
        self.persisted_consumers.borrow_mut().remove(group_id);
        let now = Instant::now();
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, now));
        cg.into_classic(g, topics, now, &self.config.limits);
        self.settle(g);
        self.converted
            .borrow_mut()
            .entry(group_id.to_string())
            .or_default()
            .extend(tombstones);
        info!(
            group = %group_id,
            members = cg.members.len(),
            generation = cg.group_epoch,
            "consumer group downgraded to a classic group"
        );
        true
    }
}
