//! CreateTopics: validation here, creation by the controller; `validate_only` runs the same checks
//! and creates nothing.

use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicResult, CreateTopicsResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::create_topics;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::cluster::placement::check_manual;
use crate::controller::check_new_topic;
use crate::routing::ShardId;
use crate::shard::{call, NewTopic, Shard, ShardRequest};

/// The outcome of checking (and maybe creating) one topic: an error code and message on failure.
type TopicCheck = Result<(), (ErrorCode, Option<String>)>;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| create_topics::decode(r, v))?;
    // CREATE on the cluster, or on each topic, as in Kafka.
    let cluster_create = shard.allowed_on_cluster(conn, AclOperation::Create);
    let catalog = shard.catalog();
    let max_partitions = shard.broker_config().max_broker_partitions;
    let mut outcomes: Vec<(String, i32, i32, TopicCheck)> = Vec::new();
    let mut to_create: Vec<(usize, NewTopic)> = Vec::new();
    for t in &req.topics {
        // Manual replica assignments, by partition index (any order in the request).
        let mut manual: Vec<(i32, Vec<i32>)> = t.assignments.clone();
        manual.sort_by_key(|(p, _)| *p);
        let assignment: Option<Vec<Vec<i32>>> =
            (!manual.is_empty()).then(|| manual.iter().map(|(_, b)| b.clone()).collect());
        let partitions = if let Some(a) = &assignment {
            a.len() as i32
        } else if t.num_partitions == -1 {
            shard.config.num_partitions
        } else {
            t.num_partitions
        };
        let replication_factor = if let Some(a) = &assignment {
            a.first().map_or(0, |r| r.len() as i32)
        } else if t.replication_factor == -1 {
            shard.config.default_replication_factor
        } else {
            i32::from(t.replication_factor)
        };
        let live = catalog.live_brokers().count() as i32;
        let new = NewTopic {
            name: t.name.clone(),
            partitions,
            replication_factor,
            configs: t
                .configs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
                .collect(),
            assignment: assignment.clone(),
        };
        let mut check = if !cluster_create
            && !shard.allowed(conn, AclOperation::Create, ResourceType::Topic, &t.name)
        {
            Err((
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                Some(format!("CREATE on topic {} is not allowed", t.name)),
            ))
        } else if outcomes.iter().any(|(n, _, _, _)| n == &t.name) {
            Err((
                ErrorCode::INVALID_REQUEST,
                Some(format!("topic {:?} appears twice in the request", t.name)),
            ))
        } else if let Some(a) = &assignment {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                Err((
                    ErrorCode::INVALID_REQUEST,
                    Some("Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into()),
                ))
            } else if manual.iter().zip(0..).any(|((p, _), i)| *p != i) {
                Err((
                    ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                    Some("partitions should be a consecutive 0-based integer sequence".into()),
                ))
            } else {
                check_manual(&catalog, a, None, 0)
                    .map_err(|(c, m)| (c, Some(m)))
                    .and_then(|()| check_new_topic(&catalog, &new, max_partitions))
            }
        } else if replication_factor < 1 {
            Err((
                ErrorCode::INVALID_REPLICATION_FACTOR,
                Some("replication factor must be larger than 0".into()),
            ))
        } else if replication_factor > live {
            Err((
                ErrorCode::INVALID_REPLICATION_FACTOR,
                Some(format!(
                    "unable to replicate the partition {replication_factor} time(s): the number of live brokers is {live}"
                )),
            ))
        } else {
            check_new_topic(&catalog, &new, max_partitions)
        };
        if let Some((k, _)) = t.configs.iter().find(|(_, v)| v.is_none()) {
            check = check.and(Err((
                ErrorCode::INVALID_CONFIG,
                Some(format!("topic config {k} has a null value")),
            )));
        }
        if check.is_ok() && !req.validate_only {
            to_create.push((outcomes.len(), new));
        }
        outcomes.push((t.name.clone(), partitions, replication_factor, check));
    }
    if !to_create.is_empty() {
        let (idx, topics): (Vec<usize>, Vec<NewTopic>) = to_create.into_iter().unzip();
        let n = topics.len();
        let results = call(shard, ShardId(0), |reply| ShardRequest::CreateTopics {
            topics,
            reply,
        })
        .await
        .unwrap_or_else(|| vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); n]);
        for (i, (code, msg)) in idx.into_iter().zip(results) {
            if code.is_error() {
                outcomes[i].3 = Err((code, msg));
            }
        }
    }
    let catalog = shard.catalog();
    let topics = outcomes
        .into_iter()
        .map(|(name, partitions, replication_factor, result)| {
            let (code, msg) = match result {
                Ok(()) => (ErrorCode::NONE, None),
                Err(e) => e,
            };
            let mut t = CreatableTopicResult::default()
                .with_name(topic_name(&name))
                .with_error_code(code.code())
                .with_error_message(msg.map(|m| str_bytes(&m)));
            if v >= 5 {
                let ok = !code.is_error();
                t = t
                    .with_num_partitions(if ok { partitions } else { -1 })
                    .with_replication_factor(if ok { replication_factor as i16 } else { -1 })
                    .with_configs(None);
                if ok {
                    t = t.with_configs(Some(Vec::new()));
                }
            }
            if v >= 7 {
                if let Some(meta) = catalog.topics.get(&name).filter(|_| !code.is_error()) {
                    t = t.with_topic_id(meta.uuid());
                }
            }
            t
        })
        .collect();
    frame(
        spec,
        header,
        &CreateTopicsResponse::default().with_topics(topics),
    )
}
