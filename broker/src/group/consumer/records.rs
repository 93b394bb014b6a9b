//! A consumer group as its `__consumer_offsets` records state it, and rebuilt from them: the
//! values of types 3, 5, 6, 7 and 8 (`consumer_group_records`). Decisions only, like the rest
//! of the group.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_protocol::consumer_group_records::{
    decode_epoch, decode_target, encode_epoch, encode_target, ClassicMemberMetadata, ConsumerKey,
    CurrentAssignmentValue, MemberMetadataValue, TopicPartitionIds,
};
use tributary_protocol::DecodeError;

use super::*;

impl ConsumerGroup {
    /// The group as its `__consumer_offsets` records state it (types 3, 5, 6, 7, 8; see
    /// `consumer_group_records`). The coordinator writes what changed between two images.
    pub fn records(&self) -> BTreeMap<ConsumerKey, Bytes> {
        let group = || self.group_id.clone();
        let mut out = BTreeMap::new();
        out.insert(
            ConsumerKey::Metadata { group: group() },
            encode_epoch(self.group_epoch),
        );
        out.insert(
            ConsumerKey::TargetMetadata { group: group() },
            encode_epoch(self.assignment_epoch),
        );
        for m in self.members.values() {
            let member = || m.member_id.clone();
            out.insert(
                ConsumerKey::Member {
                    group: group(),
                    member: member(),
                },
                m.metadata_value(),
            );
            let target = self
                .target
                .get(&m.member_id)
                .map(by_topic)
                .unwrap_or_default();
            out.insert(
                ConsumerKey::Target {
                    group: group(),
                    member: member(),
                },
                encode_target(&target),
            );
            out.insert(
                ConsumerKey::Current {
                    group: group(),
                    member: member(),
                },
                m.current_value(),
            );
        }
        out
    }

    /// Takes one record of this group from the log (`value` `None`: a tombstone), as a new
    /// coordinator rebuilds the group. Sessions start afresh from `now`.
    pub fn restore(
        &mut self,
        key: &ConsumerKey,
        value: Option<Bytes>,
        now: Instant,
        limits: &ConsumerLimits,
    ) -> Result<(), DecodeError> {
        let deadline = now + limits.session_timeout;
        self.subscribed_known = false;
        match (key, value) {
            (ConsumerKey::Metadata { .. }, Some(v)) => self.group_epoch = decode_epoch(v)?,
            (ConsumerKey::TargetMetadata { .. }, Some(v)) => {
                self.assignment_epoch = decode_epoch(v)?
            }
            (ConsumerKey::Member { member, .. }, Some(v)) => {
                let value = MemberMetadataValue::decode(v)?;
                self.restored_member(member, deadline).take_metadata(value);
            }
            (ConsumerKey::Member { member, .. }, None) => {
                self.members.remove(member);
                self.target.remove(member);
            }
            (ConsumerKey::Target { member, .. }, Some(v)) => {
                self.target
                    .insert(member.clone(), from_topics(decode_target(v)?));
            }
            (ConsumerKey::Target { member, .. }, None) => {
                self.target.remove(member);
            }
            (ConsumerKey::Current { member, .. }, Some(v)) => {
                let value = CurrentAssignmentValue::decode(v)?;
                self.restored_member(member, deadline).take_current(value);
            }
            _ => {}
        }
        Ok(())
    }

    fn restored_member(&mut self, member_id: &str, deadline: Instant) -> &mut ConsumerMember {
        let caller = Caller {
            client_id: String::new(),
            client_host: String::new(),
            version: 1,
        };
        self.members
            .entry(member_id.to_string())
            .or_insert_with(|| ConsumerMember::new(member_id, &caller, deadline))
    }
}

fn by_topic(a: &Assignment) -> TopicPartitionIds {
    a.iter()
        .map(|(t, ps)| (*t, ps.iter().copied().collect()))
        .collect()
}

fn from_topics(ps: TopicPartitionIds) -> Assignment {
    ps.into_iter()
        .map(|(t, ps)| (t, ps.into_iter().collect()))
        .filter(|(_, ps): &(TopicId, BTreeSet<i32>)| !ps.is_empty())
        .collect()
}

impl ConsumerMember {
    fn metadata_value(&self) -> Bytes {
        MemberMetadataValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.clone(),
            subscribed_topic_regex: self.subscribed_topic_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis().min(i32::MAX as u128) as i32,
            server_assignor: self.server_assignor.map(|a| a.name().to_string()),
            classic: self.classic.as_ref().map(|c| ClassicMemberMetadata {
                session_timeout_ms: c.session_timeout.as_millis().min(i32::MAX as u128) as i32,
                supported_protocols: c.protocols.clone(),
            }),
        }
        .encode()
    }

    fn current_value(&self) -> Bytes {
        CurrentAssignmentValue {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: match self.state {
                MemberState::Stable => 0,
                MemberState::UnrevokedPartitions => 1,
                MemberState::UnreleasedPartitions => 2,
            },
            assigned: by_topic(&self.assigned),
            pending_revocation: by_topic(&self.revoking),
        }
        .encode()
    }

    fn take_metadata(&mut self, v: MemberMetadataValue) {
        self.instance_id = v.instance_id;
        self.rack_id = v.rack_id;
        self.client_id = v.client_id;
        self.client_host = v.client_host;
        self.subscribed_topic_names = v.subscribed_topic_names;
        // A regex was checked when it was taken; one that no longer compiles matches nothing.
        self.regex = v
            .subscribed_topic_regex
            .as_deref()
            .and_then(|p| compile(p).ok());
        self.subscribed_topic_regex = v.subscribed_topic_regex;
        self.rebalance_timeout = Duration::from_millis(v.rebalance_timeout_ms.max(0) as u64);
        self.server_assignor = v.server_assignor.as_deref().and_then(Assignor::named);
        self.classic = v.classic.map(|c| ClassicMember {
            session_timeout: Duration::from_millis(c.session_timeout_ms.max(0) as u64),
            protocols: c.supported_protocols,
        });
    }

    fn take_current(&mut self, v: CurrentAssignmentValue) {
        self.member_epoch = v.member_epoch;
        self.previous_member_epoch = v.previous_member_epoch;
        self.state = match v.state {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        };
        self.assigned = from_topics(v.assigned);
        self.revoking = from_topics(v.pending_revocation);
        // Armed once the whole partition is loaded (`ConsumerGroup::rearm`): the member's
        // rebalance timeout may come in a later record, and the coordinator's tick runs while
        // the load reads.
        self.revocation_deadline = None;
        self.sent = None;
    }
}
