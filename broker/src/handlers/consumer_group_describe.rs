//! ConsumerGroupDescribe (KIP-848): each group's epochs, assignor and members with their
//! subscriptions, current and target assignments, from the group's coordinator shard. A group
//! that is not a consumer group answers GROUP_ID_NOT_FOUND, as Kafka does.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, ConsumerGroupDescribeResponse, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::GroupId;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::consumer_group::decode_describe;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{
    authorized_operations, decode_all, frame, str_bytes, topic_name, HandlerResult,
};
use crate::catalog::Catalog;
use crate::coordinators::{ask_group, GroupOp, GroupReply};
use crate::group::consumer::Assignment as Assigned;
use crate::group::{DescribedConsumer, DescribedConsumerGroup};
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| decode_describe(r, v))?;
    let ops = authorized_operations::when(
        req.include_authorized_operations,
        authorized_operations::GROUP,
    );
    let catalog = shard.catalog();
    let mut groups = Vec::with_capacity(req.group_ids.len());
    for id in req.group_ids {
        let base = DescribedGroup::default().with_group_id(GroupId(str_bytes(&id)));
        if !shard.allowed(conn, AclOperation::Describe, ResourceType::Group, &id) {
            groups.push(refused(
                base,
                ErrorCode::GROUP_AUTHORIZATION_FAILED,
                "DESCRIBE on the group is needed",
            ));
            continue;
        }
        let op = GroupOp::ConsumerDescribe(id.clone());
        let described = match ask_group(shard, shard.group_owner(&id), op).await {
            Some(GroupReply::ConsumerDescribe(d)) => Ok(d),
            Some(GroupReply::Code(code)) => Err(code),
            _ => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        };
        groups.push(match described {
            // As Kafka: a group whose assignments name a topic the client may not describe
            // is refused whole.
            Ok(Some(d)) if hides_a_topic(shard, conn, &d, &catalog) => refused(
                base,
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                "The group has described topic(s) that the client is not authorized to describe.",
            ),
            Ok(Some(d)) => described_group(base, d, &catalog).with_authorized_operations(ops),
            Ok(None) => refused(
                base,
                ErrorCode::GROUP_ID_NOT_FOUND,
                &format!("Group {id} not found."),
            ),
            Err(code) => refused(base, code, "the group's coordinator could not answer"),
        });
    }
    frame(
        spec,
        header,
        &ConsumerGroupDescribeResponse::default().with_groups(groups),
    )
}

/// Whether a member's current or target assignment names a topic the client may not DESCRIBE.
fn hides_a_topic(
    shard: &Shard,
    conn: crate::conn::Conn<'_>,
    d: &DescribedConsumerGroup,
    catalog: &Catalog,
) -> bool {
    d.members
        .iter()
        .flat_map(|m| m.assignment.keys().chain(m.target.keys()))
        .filter_map(|id| catalog.topic_by_id(id))
        .any(|t| !shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, &t.name))
}

fn refused(base: DescribedGroup, code: ErrorCode, message: &str) -> DescribedGroup {
    base.with_error_code(code.code())
        .with_error_message(Some(str_bytes(message)))
}

fn described_group(
    base: DescribedGroup,
    d: DescribedConsumerGroup,
    catalog: &Catalog,
) -> DescribedGroup {
    base.with_group_state(str_bytes(d.state))
        .with_group_epoch(d.group_epoch)
        .with_assignment_epoch(d.assignment_epoch)
        .with_assignor_name(str_bytes(d.assignor))
        .with_members(d.members.into_iter().map(|m| member(m, catalog)).collect())
}

fn member(m: DescribedConsumer, catalog: &Catalog) -> Member {
    Member::default()
        .with_member_id(str_bytes(&m.member_id))
        .with_instance_id(m.instance_id.as_deref().map(str_bytes))
        .with_rack_id(m.rack_id.as_deref().map(str_bytes))
        .with_member_epoch(m.member_epoch)
        .with_client_id(str_bytes(&m.client_id))
        .with_client_host(str_bytes(&m.client_host))
        .with_subscribed_topic_names(
            m.subscribed_topic_names
                .iter()
                .map(|t| topic_name(t))
                .collect(),
        )
        .with_subscribed_topic_regex(m.subscribed_topic_regex.as_deref().map(str_bytes))
        .with_assignment(assignment(&m.assignment, catalog))
        .with_target_assignment(assignment(&m.target, catalog))
        // KIP-1099: 0 a classic member of a mixed group, 1 a member of the consumer protocol.
        .with_member_type(if m.classic { 0 } else { 1 })
}

fn assignment(a: &Assigned, catalog: &Catalog) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .map(|(id, ps)| {
                let name = catalog
                    .topic_by_id(id)
                    .map(|t| t.name.as_str())
                    .unwrap_or("");
                TopicPartitions::default()
                    .with_topic_id(uuid::Uuid::from_bytes(*id))
                    .with_topic_name(topic_name(name))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}
