//! DescribeConfigs for the broker (resource type 4, named by node id) and for topics (type 2):
//! every key with its effective value and where it came from. The broker resource with an empty
//! name is the cluster-wide dynamic defaults, and lists only those, as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_configs::{
    self, ConfigResource, DescribeConfigsRequest, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC,
};
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::catalog::{Catalog, TopicMeta};
use crate::config::{is_dynamic, BrokerConfig, ConfigKind, BROKER_KEYS};
use crate::conn::Conn;
use crate::shard::Shard;
use crate::topic_config::{topic_default, TOPIC_KEYS};

/// Kafka's `ConfigSource` codes.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;

struct Entry {
    name: std::borrow::Cow<'static, str>,
    value: String,
    source: i8,
    read_only: bool,
    kind: ConfigKind,
    doc: &'static str,
}

/// DescribeConfigs: each resource of the request, in its order, with the entries it has (only
/// the keys asked for, when some are named), or why it has none.
pub fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_configs::decode(r, v))?;
    let catalog = shard.catalog();
    let effective = shard.broker_config();
    let results = req
        .resources
        .iter()
        .map(|res| {
            let base = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(str_bytes(&res.resource_name));
            match entries(shard, conn, &catalog, &effective, res) {
                Err((code, msg)) => base
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&msg))),
                Ok(entries) => {
                    let configs = entries
                        .into_iter()
                        .filter(|e| {
                            res.configuration_keys
                                .as_ref()
                                .is_none_or(|keys| keys.iter().any(|k| *k == e.name))
                        })
                        .map(|e| config_result(&req, v, e))
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

/// The entries of resource `res`, or why it has none: the principal may not describe its
/// configs (TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED), the topic does not
/// exist, the broker resource is neither this broker nor the cluster defaults, or the resource
/// type is neither a topic nor a broker.
fn entries(
    shard: &Shard,
    conn: Conn<'_>,
    catalog: &Catalog,
    effective: &BrokerConfig,
    res: &ConfigResource,
) -> Result<Vec<Entry>, (ErrorCode, String)> {
    // DESCRIBE_CONFIGS on the topic or the group, or on the cluster for a broker, as in Kafka.
    let (allowed, denied) = match res.resource_type {
        RESOURCE_TOPIC => (
            shard.allowed(
                conn,
                AclOperation::DescribeConfigs,
                ResourceType::Topic,
                &res.resource_name,
            ),
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        ),
        RESOURCE_GROUP => (
            shard.allowed(
                conn,
                AclOperation::DescribeConfigs,
                ResourceType::Group,
                &res.resource_name,
            ),
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
        ),
        _ => (
            shard.allowed_on_cluster(conn, AclOperation::DescribeConfigs),
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        ),
    };
    match res.resource_type {
        _ if !allowed => Err((denied, "DESCRIBE_CONFIGS is not allowed".to_string())),
        RESOURCE_GROUP => Ok(group_entries(catalog, effective, &res.resource_name)),
        RESOURCE_TOPIC => match catalog.topics.get(&res.resource_name) {
            Some(t) => Ok(topic_entries(shard, catalog, effective, t)),
            None => Err((
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {:?} does not exist", res.resource_name),
            )),
        },
        RESOURCE_BROKER => super::alter_configs::broker_resource(shard, &res.resource_name)
            .map(|broker| broker_entries(shard, catalog, broker))
            .map_err(|e| (ErrorCode::INVALID_REQUEST, e)),
        other => Err((
            ErrorCode::INVALID_REQUEST,
            format!("resource type {other} is not supported"),
        )),
    }
}

/// Every topic key of topic `t`: its override, a dynamic topic config; else the default the
/// broker's `effective` config gives it, from the source of the broker key behind that default
/// (see [`broker_source`]), or the default source for a key no broker key supplies.
fn topic_entries(
    shard: &Shard,
    catalog: &Catalog,
    effective: &BrokerConfig,
    t: &TopicMeta,
) -> Vec<Entry> {
    TOPIC_KEYS
        .iter()
        .map(|k| match t.configs.get(k.name) {
            Some(val) => Entry {
                name: k.name.into(),
                value: val.clone(),
                source: SOURCE_DYNAMIC_TOPIC,
                read_only: false,
                kind: k.kind,
                doc: k.doc,
            },
            None => Entry {
                name: k.name.into(),
                value: topic_default(effective, k.name),
                source: k
                    .broker_key
                    .map_or(SOURCE_DEFAULT, |b| broker_source(shard, catalog, b)),
                read_only: false,
                kind: k.kind,
                doc: k.doc,
            },
        })
        .collect()
}

/// A consumer group's configs: its own value of each group key (source GROUP_CONFIG), else
/// the broker's default it takes (`group.consumer.*`, source DEFAULT_CONFIG).
fn group_entries(catalog: &Catalog, effective: &BrokerConfig, group: &str) -> Vec<Entry> {
    use crate::group::consumer::{GROUP_CONFIG_KEYS, GROUP_SESSION_TIMEOUT};
    let own = catalog.group_configs.get(group);
    let limits = &effective.group_consumer;
    GROUP_CONFIG_KEYS
        .iter()
        .map(|key| {
            let default = if *key == GROUP_SESSION_TIMEOUT {
                limits.session_timeout
            } else {
                limits.heartbeat_interval
            };
            let (value, source) = match own.and_then(|c| c.get(*key)) {
                Some(v) => (v.clone(), SOURCE_GROUP),
                None => (default.as_millis().to_string(), SOURCE_DEFAULT),
            };
            Entry {
                name: (*key).into(),
                value,
                source,
                read_only: false,
                kind: ConfigKind::Int,
                doc: "A KIP-848 consumer group's own setting, within the broker's group.consumer.min/max bounds.",
            }
        })
        .collect()
}

/// Entry `e` as DescribeConfigs v`v` answers it: with itself as its one synonym when the
/// request asks for synonyms, and from v3 its type, and its documentation when asked for.
fn config_result(req: &DescribeConfigsRequest, v: i16, e: Entry) -> DescribeConfigsResourceResult {
    // An unset key with no default (log.retention.ms) is null, as in Kafka.
    let value = (!e.value.is_empty()).then(|| str_bytes(&e.value));
    let mut c = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(&e.name))
        .with_value(value.clone())
        .with_read_only(e.read_only)
        .with_config_source(e.source)
        .with_is_sensitive(false);
    if req.include_synonyms {
        c = c.with_synonyms(vec![DescribeConfigsSynonym::default()
            .with_name(str_bytes(&e.name))
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
}

/// Where the broker's value of `key` comes from, as a topic default reports it: Kafka gives a
/// topic key without an override the source of the broker key that supplies its default.
fn broker_source(shard: &Shard, catalog: &crate::catalog::Catalog, key: &str) -> i8 {
    let dynamic = &catalog.broker_configs;
    if dynamic
        .per_broker
        .get(&shard.config.node_id)
        .is_some_and(|o| o.contains_key(key))
    {
        SOURCE_DYNAMIC_BROKER
    } else if dynamic.cluster.contains_key(key) {
        SOURCE_DYNAMIC_DEFAULT_BROKER
    } else if shard.config.values.get(key).is_some_and(|(_, set)| *set) {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

/// The entries of a broker resource: for this broker (`Some`), every key with its effective
/// value and source; for the cluster defaults (`None`), the dynamic defaults only.
fn broker_entries(
    shard: &Shard,
    catalog: &crate::catalog::Catalog,
    broker: Option<i32>,
) -> Vec<Entry> {
    let dynamic = &catalog.broker_configs;
    let own = broker.and_then(|b| dynamic.per_broker.get(&b));
    BROKER_KEYS
        .iter()
        .filter_map(|k| {
            let (value, source) = if let Some(v) = own.and_then(|o| o.get(k.name)) {
                (v.clone(), SOURCE_DYNAMIC_BROKER)
            } else if let Some(v) = dynamic.cluster.get(k.name) {
                (v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER)
            } else if broker.is_none() {
                return None;
            } else {
                let (value, set) = shard.config.values.get(k.name).cloned().unwrap_or_default();
                let source = if set {
                    SOURCE_STATIC_BROKER
                } else {
                    SOURCE_DEFAULT
                };
                (value, source)
            };
            Some(Entry {
                name: k.name.into(),
                value,
                source,
                read_only: !is_dynamic(k.name),
                kind: k.kind,
                doc: k.doc,
            })
        })
        .chain(listener_entries(own, &dynamic.cluster))
        .collect()
}

/// The per-listener keys (`listener.name.NAME.ssl.…`) set dynamically, as Kafka lists them
/// beside the broker keys.
fn listener_entries<'a>(
    own: Option<&'a std::collections::BTreeMap<String, String>>,
    cluster: &'a std::collections::BTreeMap<String, String>,
) -> impl Iterator<Item = Entry> + 'a {
    let layers = own
        .into_iter()
        .map(|o| (o, SOURCE_DYNAMIC_BROKER))
        .chain(std::iter::once((cluster, SOURCE_DYNAMIC_DEFAULT_BROKER)));
    layers.flat_map(|(layer, source)| {
        layer
            .iter()
            .filter(|(k, _)| k.starts_with("listener.name."))
            .filter_map(move |(k, v)| {
                let (ssl, _) = crate::config::ssl_key(k)?;
                let key = BROKER_KEYS.iter().find(|b| b.name == ssl)?;
                Some(Entry {
                    name: k.clone().into(),
                    value: v.clone(),
                    source,
                    read_only: false,
                    kind: key.kind,
                    doc: key.doc,
                })
            })
    })
}
