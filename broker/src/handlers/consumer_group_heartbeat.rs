//! ConsumerGroupHeartbeat (KIP-848): decoded here, run by the group's coordinator shard
//! (`GroupOp::ConsumerHeartbeat`), whose answer — the member's epoch, the heartbeat interval and,
//! when it changed, the member's assignment — is encoded back here.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::consumer_group::decode_heartbeat;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::coordinators::{ask_group, GroupOp, GroupReply};
use crate::group::consumer::{Caller, Refusal};
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| decode_heartbeat(r, v))?;
    let group = req.group_id.clone();
    // As Kafka: READ on the group, and DESCRIBE on every topic subscribed by name (a client
    // may not learn of topics it cannot describe through its assignment).
    let hidden = req
        .subscribed_topic_names
        .iter()
        .flatten()
        .find(|t| !shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, t));
    let answer = if !shard.allowed(conn, AclOperation::Read, ResourceType::Group, &group) {
        Err(Refusal {
            code: ErrorCode::GROUP_AUTHORIZATION_FAILED,
            message: format!("READ on group {group} is needed"),
        })
    } else if let Some(topic) = hidden {
        Err(Refusal {
            code: ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            message: format!("DESCRIBE on subscribed topic {topic} is needed"),
        })
    } else {
        let caller = Caller {
            client_id: header.client_id.clone().unwrap_or_default(),
            client_host: format!("/{}", conn.peer),
            version: v,
        };
        let op = GroupOp::ConsumerHeartbeat { req, caller };
        match ask_group(shard, shard.group_owner(&group), op).await {
            Some(GroupReply::ConsumerHeartbeat(a)) => a,
            _ => Err(Refusal {
                code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
                message: "the group's coordinator shard did not answer".into(),
            }),
        }
    };
    let resp = match answer {
        Ok(a) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&a.member_id)))
            .with_member_epoch(a.member_epoch)
            .with_heartbeat_interval_ms(a.heartbeat_interval_ms)
            .with_assignment(a.assignment.map(|assigned| {
                Assignment::default().with_topic_partitions(
                    assigned
                        .into_iter()
                        .map(|(id, ps)| {
                            TopicPartitions::default()
                                .with_topic_id(uuid::Uuid::from_bytes(id))
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            })),
        Err(refusal) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(refusal.code.code())
            .with_error_message(Some(str_bytes(&refusal.message)))
            .with_member_epoch(-1),
    };
    frame(spec, header, &resp)
}
