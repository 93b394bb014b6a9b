//! AlterConfigs and IncrementalAlterConfigs: topic configs and the dynamic broker configs
//! (`config::DYNAMIC_BROKER_KEYS`) change at runtime through the controller.

use std::rc::Rc;

use kafka_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse, AlterConfigsResponse,
};
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse as IncResource, IncrementalAlterConfigsResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::alter_configs::{self, AlterResource};
use tributary_protocol::requests::describe_configs::{
    RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC,
};
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::conn::Conn;
use crate::controller::{BrokerConfigChange, ConfigChange, GroupConfigChange};
use crate::shard::Shard;

/// One resource's outcome: its type, its name, an error code and a message.
type ResourceOutcome = (i8, String, ErrorCode, Option<String>);

/// AlterConfigs or IncrementalAlterConfigs, as `spec.key` says: each resource of the request
/// altered in its order (see [`alter_resource`]) and answered with its outcome.
pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| alter_configs::decode(r, spec.key, v))?;
    let mut results: Vec<ResourceOutcome> = Vec::with_capacity(req.resources.len());
    for res in req.resources {
        results.push(alter_resource(shard, conn, res, !req.incremental, req.validate_only).await);
    }
    if spec.key == api_key::INCREMENTAL_ALTER_CONFIGS {
        let responses = results
            .into_iter()
            .map(|(t, n, c, m)| {
                IncResource::default()
                    .with_error_code(c.code())
                    .with_error_message(m.as_deref().map(str_bytes))
                    .with_resource_type(t)
                    .with_resource_name(str_bytes(&n))
            })
            .collect();
        frame(
            spec,
            header,
            &IncrementalAlterConfigsResponse::default().with_responses(responses),
        )
    } else {
        let responses = results
            .into_iter()
            .map(|(t, n, c, m)| {
                AlterConfigsResourceResponse::default()
                    .with_error_code(c.code())
                    .with_error_message(m.as_deref().map(str_bytes))
                    .with_resource_type(t)
                    .with_resource_name(str_bytes(&n))
            })
            .collect();
        frame(
            spec,
            header,
            &AlterConfigsResponse::default().with_responses(responses),
        )
    }
}

/// Alters resource `res` (its overrides replaced when `replace`, else edited; checked only
/// when `validate_only`): refused without ALTER_CONFIGS (see [`refusal`]); an internal topic's
/// configs never change; a topic's, this broker's or the cluster defaults' change through the
/// controller, which answers the outcome; any other resource type is INVALID_REQUEST.
async fn alter_resource(
    shard: &Rc<Shard>,
    conn: Conn<'_>,
    res: AlterResource,
    replace: bool,
    validate_only: bool,
) -> ResourceOutcome {
    if let Some((code, msg)) = refusal(shard, conn, &res) {
        return (res.resource_type, res.resource_name, code, msg);
    }
    let (code, msg) = match res.resource_type {
        RESOURCE_TOPIC if crate::group::is_internal(&res.resource_name) => (
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "configs of internal topic {} cannot be changed",
                res.resource_name
            )),
        ),
        RESOURCE_TOPIC => {
            let change = ConfigChange {
                topic: res.resource_name.clone(),
                configs: res.configs,
                replace,
                validate_only,
            };
            crate::controller::ask(shard, |s, c| async move {
                c.alter_topic_configs(&s, change).await
            })
            .await
            .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None))
        }
        RESOURCE_BROKER => match broker_resource(shard, &res.resource_name) {
            Err(msg) => (ErrorCode::INVALID_REQUEST, Some(msg)),
            Ok(broker) => {
                let change = BrokerConfigChange {
                    broker,
                    configs: res.configs,
                    replace,
                    validate_only,
                };
                crate::controller::ask(shard, |s, c| async move {
                    c.alter_broker_configs(&s, change).await
                })
                .await
                .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None))
            }
        },
        RESOURCE_GROUP => {
            let change = GroupConfigChange {
                group: res.resource_name.clone(),
                configs: res.configs,
                replace,
                validate_only,
            };
            crate::controller::ask(shard, |s, c| async move {
                c.alter_group_configs(&s.config.group_consumer, change)
                    .await
            })
            .await
            .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None))
        }
        other => (
            ErrorCode::INVALID_REQUEST,
            Some(format!("resource type {other} is not supported")),
        ),
    };
    (res.resource_type, res.resource_name, code, msg)
}

/// Why the principal may not alter the configs of `res`, as in Kafka: it needs ALTER_CONFIGS
/// on the topic (TOPIC_AUTHORIZATION_FAILED), or on the cluster for a broker or any other
/// resource type (CLUSTER_AUTHORIZATION_FAILED).
fn refusal(
    shard: &Shard,
    conn: Conn<'_>,
    res: &AlterResource,
) -> Option<(ErrorCode, Option<String>)> {
    // ALTER_CONFIGS on the topic or the group, or on the cluster for a broker, as in Kafka.
    let (allowed, denied) = match res.resource_type {
        RESOURCE_TOPIC => (
            shard.allowed(
                conn,
                AclOperation::AlterConfigs,
                ResourceType::Topic,
                &res.resource_name,
            ),
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        ),
        RESOURCE_GROUP => (
            shard.allowed(
                conn,
                AclOperation::AlterConfigs,
                ResourceType::Group,
                &res.resource_name,
            ),
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
        ),
        _ => (
            shard.allowed_on_cluster(conn, AclOperation::AlterConfigs),
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        ),
    };
    (!allowed).then(|| (denied, Some("ALTER_CONFIGS is not allowed".to_string())))
}

/// The broker a BROKER resource names: `None` for the cluster-wide defaults (an empty name),
/// this broker's id, or an error for any other name.
pub(crate) fn broker_resource(shard: &Shard, name: &str) -> Result<Option<i32>, String> {
    if name.is_empty() {
        return Ok(None);
    }
    match name.parse::<i32>() {
        Ok(id) if id == shard.config.node_id => Ok(Some(id)),
        _ => Err(format!(
            "broker {name:?} is not this broker (node.id {})",
            shard.config.node_id
        )),
    }
}
