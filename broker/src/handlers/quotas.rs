//! DescribeClientQuotas and AlterClientQuotas (KIP-546): quota configs by user, client id or
//! both, with `<default>` entities (a null name), kept in the metadata image. Kafka's checks:
//! entity types `user` and `client-id` (each at most once; `ip` is not served), the keys served
//! (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`) with finite positive
//! values; DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter.

use std::rc::Rc;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntity, EntryData as AlterEntry,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{AlterClientQuotasResponse, DescribeClientQuotasResponse};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::quotas as req;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::AclOperation;

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::cluster::command::MetadataCommand;
use crate::conn::Conn;
use crate::quota::{QuotaEntity, QUOTA_KEYS, REQUEST_PERCENTAGE};
use crate::shard::Shard;

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    if spec.key == api_key::DESCRIBE_CLIENT_QUOTAS {
        let (components, strict) = decode_all(r, |r| req::decode_describe(r, v))?;
        let resp = if !shard.allowed_on_cluster(conn, AclOperation::DescribeConfigs) {
            DescribeClientQuotasResponse::default()
                .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code())
                .with_entries(None)
        } else {
            describe(shard, &components, strict)
        };
        return frame(spec, header, &resp);
    }
    let (entries, validate_only) = decode_all(r, |r| req::decode_alter(r, v))?;
    let allowed = shard.allowed_on_cluster(conn, AclOperation::AlterConfigs);
    let mut results: Vec<AlterResult> = Vec::new();
    let mut changes = Vec::new();
    for e in entries {
        let checked = if allowed {
            check_alteration(&e)
        } else {
            Err((
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                "ALTER_CONFIGS on the cluster is needed to alter quotas".to_string(),
            ))
        };
        match checked {
            Ok(change) => {
                changes.push(change);
                results.push((e.entity, ErrorCode::NONE, None));
            }
            Err((code, msg)) => results.push((e.entity, code, Some(msg))),
        }
    }
    if !changes.is_empty() && !validate_only {
        let (code, msg) =
            super::common::propose_metadata(shard, MetadataCommand::AlterClientQuotas { changes })
                .await;
        if code.is_error() {
            for r in results.iter_mut().filter(|r| !r.1.is_error()) {
                r.1 = code;
                r.2.clone_from(&msg);
            }
        }
    }
    frame(
        spec,
        header,
        &AlterClientQuotasResponse::default().with_entries(
            results
                .into_iter()
                .map(|(entity, code, msg)| {
                    AlterEntry::default()
                        .with_error_code(code.code())
                        .with_error_message(msg.map(|m| str_bytes(&m)))
                        .with_entity(
                            entity
                                .into_iter()
                                .map(|(t, n)| {
                                    AlterEntity::default()
                                        .with_entity_type(str_bytes(&t))
                                        .with_entity_name(n.map(|n| str_bytes(&n)))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

use crate::quota::QuotaChange as Change;

/// One AlterClientQuotas result: the entity as asked, its code and message.
type AlterResult = (Vec<(String, Option<String>)>, ErrorCode, Option<String>);

fn check_alteration(e: &req::QuotaAlteration) -> Result<Change, (ErrorCode, String)> {
    let bad = |m: String| Err((ErrorCode::INVALID_REQUEST, m));
    let mut entity = QuotaEntity {
        user: None,
        client: None,
    };
    if e.entity.is_empty() {
        return bad("the quota entity is empty; name a user, a client-id or both".into());
    }
    for (t, name) in &e.entity {
        let slot = match t.as_str() {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client,
            other => {
                return bad(format!(
                    "unknown quota entity type {other:?}; use user or client-id"
                ))
            }
        };
        if slot.is_some() {
            return bad(format!("quota entity type {t} appears twice"));
        }
        *slot = Some(name.clone());
    }
    let mut ops = Vec::with_capacity(e.ops.len());
    for (key, value, remove) in &e.ops {
        if !QUOTA_KEYS.contains(&key.as_str()) {
            return bad(format!(
                "quota key {key} is not supported; the keys are {}",
                QUOTA_KEYS.join(", ")
            ));
        }
        if ops.iter().any(|(k, _): &(String, Option<f64>)| k == key) {
            return bad(format!("quota key {key} appears twice"));
        }
        if *remove {
            ops.push((key.clone(), None));
        } else if !value.is_finite() || *value <= 0.0 {
            let unit = if key == REQUEST_PERCENTAGE {
                "percent of a shard's time (100 is one whole shard)"
            } else {
                "bytes per second"
            };
            return bad(format!("{key}: {value} is not a positive number of {unit}"));
        } else {
            ops.push((key.clone(), Some(*value)));
        }
    }
    Ok((entity, ops))
}

fn describe(
    shard: &Shard,
    components: &[req::QuotaFilterComponent],
    strict: bool,
) -> DescribeClientQuotasResponse {
    let invalid = |m: &str| {
        DescribeClientQuotasResponse::default()
            .with_error_code(ErrorCode::INVALID_REQUEST.code())
            .with_error_message(Some(str_bytes(m)))
            .with_entries(None)
    };
    for (i, c) in components.iter().enumerate() {
        if c.entity_type != USER && c.entity_type != CLIENT_ID {
            return invalid("unknown entity type in the filter; use user or client-id");
        }
        if components[..i]
            .iter()
            .any(|x| x.entity_type == c.entity_type)
        {
            return invalid("an entity type appears twice in the filter");
        }
        if !(MATCH_EXACT..=MATCH_ANY).contains(&c.match_type) {
            return invalid("unknown match type in the filter");
        }
    }
    let image = shard.catalog();
    let part = |e: &QuotaEntity, t: &str| -> Option<Option<String>> {
        if t == USER {
            e.user.clone()
        } else {
            e.client.clone()
        }
    };
    let entries: Vec<EntryData> = image
        .client_quotas
        .iter()
        .filter(|q| {
            components
                .iter()
                .all(|c| match (part(&q.entity, &c.entity_type), c.match_type) {
                    (None, _) => false,
                    (Some(n), MATCH_EXACT) => n == c.name,
                    (Some(n), MATCH_DEFAULT) => n.is_none(),
                    (Some(_), _) => true,
                })
                && (!strict
                    || [USER, CLIENT_ID].iter().all(|t| {
                        part(&q.entity, t).is_none()
                            || components.iter().any(|c| c.entity_type == *t)
                    }))
        })
        .map(|q| {
            let mut entity = Vec::new();
            for t in [USER, CLIENT_ID] {
                if let Some(name) = part(&q.entity, t) {
                    entity.push(
                        EntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(name.map(|n| str_bytes(&n))),
                    );
                }
            }
            EntryData::default().with_entity(entity).with_values(
                q.values
                    .iter()
                    .map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v))
                    .collect(),
            )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
