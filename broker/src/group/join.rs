//! JoinGroup's decisions on one group: which member a request joins as (a new member, a
//! static member taking over its old identity, or an unknown id refused) and how the group
//! takes it in. The clock is passed in; persisting the group is the coordinator's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::info;
use tributary_protocol::requests::groups::JoinGroupRequest;
use tributary_protocol::ErrorCode;

use super::state::{Group, GroupLimits, GroupState, JoinResult, Member, Reply};

/// A refusal, answered at once.
type Refused = Box<JoinResult>;

fn refuse(error: ErrorCode, member_id: &str) -> Refused {
    Box::new(JoinResult::error(error, member_id))
}

/// The session timeout a join asks for, if the group id is valid and the timeout within
/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
pub(super) fn session_timeout(
    req: &JoinGroupRequest,
    limits: &GroupLimits,
) -> Result<Duration, Refused> {
    if req.group_id.is_empty() {
        return Err(refuse(ErrorCode::INVALID_GROUP_ID, &req.member_id));
    }
    let session = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
    if session < limits.min_session_timeout || session > limits.max_session_timeout {
        return Err(refuse(ErrorCode::INVALID_SESSION_TIMEOUT, &req.member_id));
    }
    Ok(session)
}

/// Who sends a join: the client, its session timeout and the JoinGroup version it speaks.
pub(crate) struct Joiner {
    pub client_id: String,
    pub client_host: String,
    pub session: Duration,
    pub version: i16,
}

/// Which member a join is for.
pub(super) enum Identity {
    /// This member joins (or rejoins) and waits for the rebalance.
    Member(String),
    /// A static member took over its old identity (the new member id) with nothing changed:
    /// answered at once, without a rebalance.
    Rejoined(String),
}

impl Group {
    /// The member a join is for: with a `group.instance.id`, the static member's; without a
    /// member id, a new one (KIP-394: from v4 the client must rejoin with it); otherwise the
    /// id given, if the group knows it.
    pub(super) fn identify(
        &mut self,
        req: &JoinGroupRequest,
        joiner: &Joiner,
        now: Instant,
        limits: &GroupLimits,
    ) -> Result<Identity, Refused> {
        let member_id = req.member_id.clone();
        if let Some(instance) = &req.group_instance_id {
            return self.identify_static(instance, member_id, req, joiner.session, now);
        }
        if member_id.is_empty() {
            let new_id = format!("{}-{}", joiner.client_id, uuid::Uuid::new_v4());
            if joiner.version < 4 {
                return Ok(Identity::Member(new_id));
            }
            if self.members.len() + self.pending_member_ids.len() >= limits.max_size {
                return Err(refuse(ErrorCode::GROUP_MAX_SIZE_REACHED, ""));
            }
            self.pending_member_ids
                .push((new_id.clone(), now + joiner.session));
            return Err(refuse(ErrorCode::MEMBER_ID_REQUIRED, &new_id));
        }
        let known = self.members.contains_key(&member_id)
            || self
                .pending_member_ids
                .iter()
                .any(|(id, _)| *id == member_id);
        match known {
            true => Ok(Identity::Member(member_id)),
            false => Err(refuse(ErrorCode::UNKNOWN_MEMBER_ID, &member_id)),
        }
    }

    /// The member a static member's join is for. Another member id than the instance's is
    /// fenced; none at all is the instance restarting, which takes over its old identity.
    fn identify_static(
        &mut self,
        instance: &str,
        member_id: String,
        req: &JoinGroupRequest,
        session: Duration,
        now: Instant,
    ) -> Result<Identity, Refused> {
        match self.static_members.get(instance).cloned() {
            Some(existing) if !member_id.is_empty() && existing != member_id => {
                Err(refuse(ErrorCode::FENCED_INSTANCE_ID, &member_id))
            }
            Some(existing) if member_id.is_empty() => {
                Ok(self.take_over(instance, &existing, req, session, now))
            }
            Some(_) => Ok(Identity::Member(member_id)),
            // A member id the instance does not hold: Kafka's UNKNOWN_MEMBER_ID (the client
            // joins again without one). Taking the instance over here would bind it to a
            // member that does not know it is static.
            None if !member_id.is_empty() => Err(refuse(ErrorCode::UNKNOWN_MEMBER_ID, &member_id)),
            None => {
                let member_id = format!("{instance}-{}", uuid::Uuid::new_v4());
                self.static_members
                    .insert(instance.to_owned(), member_id.clone());
                Ok(Identity::Member(member_id))
            }
        }
    }

    /// A static member restarting: it takes over its old identity with a new member id, and
    /// the old id is fenced. With nothing changed in a stable group, no rebalance.
    fn take_over(
        &mut self,
        instance: &str,
        existing: &str,
        req: &JoinGroupRequest,
        session: Duration,
        now: Instant,
    ) -> Identity {
        let new_id = format!("{instance}-{}", uuid::Uuid::new_v4());
        let Some(mut old) = self.members.remove(existing) else {
            // The instance's last id never became a member (its join was refused, e.g. by
            // `group.max.size`): the new id takes the instance, or every request it sends
            // would be fenced by the stale one.
            self.static_members
                .insert(instance.to_owned(), new_id.clone());
            return Identity::Member(new_id);
        };
        // The old member id's parked requests are fenced; the new id has none.
        self.refuse_parked(&mut old, ErrorCode::FENCED_INSTANCE_ID);
        old.member_id = new_id.clone();
        old.deadline = now + session;
        let unchanged = old.protocols == req.protocols;
        self.members.insert(new_id.clone(), old);
        self.static_members
            .insert(instance.to_owned(), new_id.clone());
        if self.leader.as_deref() == Some(existing) {
            self.leader = Some(new_id.clone());
        }
        if unchanged && self.state == GroupState::Stable {
            let current = self.current_join(&new_id);
            self.push_reply(Reply::Join(current));
            return Identity::Rejoined(new_id);
        }
        Identity::Member(new_id)
    }

    /// Takes `member_id` into the group: a known member with nothing changed while the group
    /// completes a rebalance (or is stable and it is not the leader) gets the current
    /// generation at once; anything else joins the rebalance, whose answer comes later. Either
    /// way the answer is a [`Reply`] for `member_id`.
    pub(super) fn admit(
        &mut self,
        member_id: String,
        req: JoinGroupRequest,
        joiner: Joiner,
        now: Instant,
        limits: &GroupLimits,
    ) -> Result<(), Refused> {
        self.pending_member_ids.retain(|(id, _)| *id != member_id);
        if !self.members.contains_key(&member_id) && self.members.len() >= limits.max_size {
            return Err(refuse(ErrorCode::GROUP_MAX_SIZE_REACHED, &member_id));
        }
        let session = joiner.session;
        let rebalance = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        let state = self.state;
        match self.members.get_mut(&member_id) {
            Some(m) => {
                let unchanged = m.protocols == req.protocols;
                m.session_timeout = session;
                m.rebalance_timeout = rebalance;
                m.deadline = now + session;
                if unchanged
                    && (state == GroupState::CompletingRebalance
                        || (state == GroupState::Stable && !is_leader))
                {
                    let current = self.current_join(&member_id);
                    self.push_reply(Reply::Join(current));
                    return Ok(());
                }
                m.protocols = req.protocols;
                m.awaiting_join = true;
            }
            None => {
                let member = Member {
                    member_id: member_id.clone(),
                    group_instance_id: req.group_instance_id.clone(),
                    client_id: joiner.client_id,
                    client_host: joiner.client_host,
                    session_timeout: session,
                    rebalance_timeout: rebalance,
                    protocols: req.protocols,
                    assignment: Bytes::new(),
                    deadline: now + session,
                    awaiting_join: true,
                    awaiting_sync: false,
                };
                self.members.insert(member_id.clone(), member);
            }
        }
        if self.protocol_type.is_none() || self.state == GroupState::Empty {
            self.protocol_type = Some(req.protocol_type);
        }
        if self.state != GroupState::PreparingRebalance {
            info!(group = %self.group_id, member = %member_id, "member joining; rebalancing");
        }
        self.prepare_rebalance(now, limits);
        self.maybe_complete_join(now);
        Ok(())
    }
}
