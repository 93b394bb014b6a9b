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
use tributary_protocol::requests::alter_configs;
use tributary_protocol::requests::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::controller::{BrokerConfigChange, ConfigChange};
use crate::routing::ShardId;
use crate::shard::{call, Shard, ShardRequest};

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| alter_configs::decode(r, spec.key, v))?;
    let mut results = Vec::with_capacity(req.resources.len());
    for res in req.resources {
        // ALTER_CONFIGS on the topic, or on the cluster for a broker, as in Kafka.
        let allowed = match res.resource_type {
            RESOURCE_TOPIC => shard.allowed(
                conn,
                AclOperation::AlterConfigs,
                ResourceType::Topic,
                &res.resource_name,
            ),
            _ => shard.allowed_on_cluster(conn, AclOperation::AlterConfigs),
        };
        let (code, msg) = match res.resource_type {
            _ if !allowed => (
                if res.resource_type == RESOURCE_TOPIC {
                    ErrorCode::TOPIC_AUTHORIZATION_FAILED
                } else {
                    ErrorCode::CLUSTER_AUTHORIZATION_FAILED
                },
                Some("ALTER_CONFIGS is not allowed".to_string()),
            ),
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
                    replace: !req.incremental,
                    validate_only: req.validate_only,
                };
                call(shard, ShardId(0), |reply| ShardRequest::AlterTopicConfigs {
                    change,
                    reply,
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
                        replace: !req.incremental,
                        validate_only: req.validate_only,
                    };
                    call(shard, ShardId(0), |reply| {
                        ShardRequest::AlterBrokerConfigs { change, reply }
                    })
                    .await
                    .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None))
                }
            },
            other => (
                ErrorCode::INVALID_REQUEST,
                Some(format!("resource type {other} is not supported")),
            ),
        };
        results.push((res.resource_type, res.resource_name, code, msg));
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
