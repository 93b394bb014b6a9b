//! DescribeConfigs for the broker (resource type 4, named by node id) and for topics (type 2):
//! every key with its effective value and where it came from.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_configs::{self, RESOURCE_BROKER, RESOURCE_TOPIC};
use tributary_protocol::{ErrorCode, Reader};

use super::{decode_all, frame, str_bytes, HandlerResult};
use crate::catalog::{topic_default, TOPIC_KEYS};
use crate::config::{ConfigKind, BROKER_KEYS};
use crate::shard::Shard;

/// Kafka's `ConfigSource` codes.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

struct Entry {
    name: &'static str,
    value: String,
    source: i8,
    read_only: bool,
    kind: ConfigKind,
    doc: &'static str,
}

pub fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_configs::decode(r, v))?;
    let catalog = shard.catalog();
    let results = req
        .resources
        .iter()
        .map(|res| {
            let base = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(str_bytes(&res.resource_name));
            let entries: Result<Vec<Entry>, (ErrorCode, String)> = match res.resource_type {
                RESOURCE_TOPIC => match catalog.topics.get(&res.resource_name) {
                    Some(t) => Ok(TOPIC_KEYS
                        .iter()
                        .map(|k| match t.configs.get(k.name) {
                            Some(val) => Entry {
                                name: k.name,
                                value: val.clone(),
                                source: SOURCE_DYNAMIC_TOPIC,
                                read_only: false,
                                kind: k.kind,
                                doc: k.doc,
                            },
                            None => Entry {
                                name: k.name,
                                value: topic_default(&shard.config, k.name),
                                source: SOURCE_DEFAULT,
                                read_only: false,
                                kind: k.kind,
                                doc: k.doc,
                            },
                        })
                        .collect()),
                    None => Err((
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("topic {:?} does not exist", res.resource_name),
                    )),
                },
                RESOURCE_BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name == shard.config.node_id.to_string() =>
                {
                    Ok(BROKER_KEYS
                        .iter()
                        .map(|k| {
                            let (value, set) =
                                shard.config.values.get(k.name).cloned().unwrap_or_default();
                            Entry {
                                name: k.name,
                                value,
                                source: if set {
                                    SOURCE_STATIC_BROKER
                                } else {
                                    SOURCE_DEFAULT
                                },
                                read_only: true,
                                kind: k.kind,
                                doc: k.doc,
                            }
                        })
                        .collect())
                }
                RESOURCE_BROKER => Err((
                    ErrorCode::INVALID_REQUEST,
                    format!("broker {:?} is not this broker", res.resource_name),
                )),
                other => Err((
                    ErrorCode::INVALID_REQUEST,
                    format!("resource type {other} is not supported"),
                )),
            };
            match entries {
                Err((code, msg)) => base
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&msg))),
                Ok(entries) => {
                    let configs = entries
                        .into_iter()
                        .filter(|e| {
                            res.configuration_keys
                                .as_ref()
                                .is_none_or(|keys| keys.iter().any(|k| k == e.name))
                        })
                        .map(|e| {
                            // An unset key with no default (log.retention.ms) is null, as in Kafka.
                            let value = (!e.value.is_empty()).then(|| str_bytes(&e.value));
                            let mut c = DescribeConfigsResourceResult::default()
                                .with_name(str_bytes(e.name))
                                .with_value(value.clone())
                                .with_read_only(e.read_only)
                                .with_config_source(e.source)
                                .with_is_sensitive(false);
                            if req.include_synonyms {
                                c = c.with_synonyms(vec![DescribeConfigsSynonym::default()
                                    .with_name(str_bytes(e.name))
                                    .with_value(value.clone())
                                    .with_source(e.source)]);
                            }
                            if v >= 3 {
                                c = c.with_config_type(e.kind.wire_code());
                                if req.include_documentation {
                                    c = c.with_documentation(Some(str_bytes(e.doc)));
                                }
                            }
                            c
                        })
                        .collect();
                    base.with_error_message(None).with_configs(configs)
                }
            }
        })
        .collect();
    frame(
        spec,
        header,
        &DescribeConfigsResponse::default().with_results(results),
    )
}
