//! CreateTopics: validation here, creation by the controller; `validate_only` runs the same checks
//! and creates nothing.

use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicResult, CreateTopicsResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::create_topics::{self, CreatableTopic};
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::catalog::Catalog;
use crate::cluster::placement::check_manual;
use crate::conn::Conn;
use crate::controller::check_new_topic;
use crate::controller::NewTopic;
use crate::shard::Shard;

/// The outcome of checking (and maybe creating) one topic: an error code and message on failure.
type TopicCheck = Result<(), (ErrorCode, Option<String>)>;

/// What became of one topic of the request: the partition count and replication factor it
/// asked for (defaults filled in) and the outcome of checking (and maybe creating) it.
struct Outcome {
    name: String,
    partitions: i32,
    replication_factor: i32,
    check: TopicCheck,
}

/// CreateTopics: each topic checked in the request's order (CREATE, named once, then its
/// partitions, replicas and configs), those that pass created in one controller request unless
/// `validate_only`, and each answered with its outcome.
pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| create_topics::decode(r, v))?;
    // CREATE on the cluster, or on each topic, as in Kafka.
    let cluster_create = shard.allowed_on_cluster(conn, AclOperation::Create);
    let catalog = shard.catalog();
    let max_partitions = shard.broker_config().max_broker_partitions;
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut to_create: Vec<(usize, NewTopic)> = Vec::new();
    for t in &req.topics {
        let (manual, new) = planned(shard, t);
        let check = if !cluster_create
            && !shard.allowed(conn, AclOperation::Create, ResourceType::Topic, &t.name)
        {
            Err((
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                Some(format!("CREATE on topic {} is not allowed", t.name)),
            ))
        } else if outcomes.iter().any(|o| o.name == t.name) {
            Err((
                ErrorCode::INVALID_REQUEST,
                Some(format!("topic {:?} appears twice in the request", t.name)),
            ))
        } else {
            check_shape(&catalog, max_partitions, t, &manual, &new)
        };
        // A null config value fails a topic that passed every other check.
        let check = check.and(null_config(t)).and_then(|()| {
            let configs = new.configs.iter().map(|(k, v)| (k, v));
            crate::topic_config::check_topic_remote_storage(&shard.broker_config(), configs)
                .map_err(|e| (ErrorCode::INVALID_CONFIG, Some(e)))
        });
        let (partitions, replication_factor) = (new.partitions, new.replication_factor);
        if check.is_ok() && !req.validate_only {
            to_create.push((outcomes.len(), new));
        }
        outcomes.push(Outcome {
            name: t.name.clone(),
            partitions,
            replication_factor,
            check,
        });
    }
    create(shard, to_create, &mut outcomes).await;
    let catalog = shard.catalog();
    let topics = outcomes
        .into_iter()
        .map(|o| topic_result(&catalog, v, o))
        .collect();
    frame(
        spec,
        header,
        &CreateTopicsResponse::default().with_topics(topics),
    )
}

/// Topic `t` as it would be created, and its manual replica assignments sorted by partition
/// index: the partition count and replication factor are the manual assignment's when there is
/// one, the broker's defaults when the request says -1, else what the request says.
fn planned(shard: &Shard, t: &CreatableTopic) -> (Vec<(i32, Vec<i32>)>, NewTopic) {
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
    let new = NewTopic {
        name: t.name.clone(),
        partitions,
        replication_factor,
        configs: t
            .configs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
            .collect(),
        assignment,
    };
    (manual, new)
}

/// Whether the partitions and replicas `t` asks for, as `new`, can be created: a manual
/// assignment must come alone (no partition count or replication factor beside it), number its
/// partitions 0, 1, 2, … and pass `check_manual`; otherwise the replication factor must be at
/// least 1 and at most the live brokers. Then the controller's checks of the new topic.
fn check_shape(
    catalog: &Catalog,
    max_partitions: i64,
    t: &CreatableTopic,
    manual: &[(i32, Vec<i32>)],
    new: &NewTopic,
) -> TopicCheck {
    let replication_factor = new.replication_factor;
    let live = catalog.live_brokers().count() as i32;
    if let Some(a) = &new.assignment {
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
            check_manual(catalog, a, None, 0)
                .map_err(|(c, m)| (c, Some(m)))
                .and_then(|()| check_new_topic(catalog, new, max_partitions))
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
        check_new_topic(catalog, new, max_partitions)
    }
}

/// INVALID_CONFIG naming the first config of `t` sent with a null value, if any.
fn null_config(t: &CreatableTopic) -> TopicCheck {
    match t.configs.iter().find(|(_, v)| v.is_none()) {
        Some((k, _)) => Err((
            ErrorCode::INVALID_CONFIG,
            Some(format!("topic config {k} has a null value")),
        )),
        None => Ok(()),
    }
}

/// Creates the topics of `to_create` through the controller, each with its index in
/// `outcomes`, where each one the controller refuses gets its error (UNKNOWN_SERVER_ERROR for
/// all when the controller's shard does not answer).
async fn create(shard: &Rc<Shard>, to_create: Vec<(usize, NewTopic)>, outcomes: &mut [Outcome]) {
    if to_create.is_empty() {
        return;
    }
    let (idx, topics): (Vec<usize>, Vec<NewTopic>) = to_create.into_iter().unzip();
    let n = topics.len();
    let results = crate::controller::ask(
        shard,
        |s, c| async move { c.create_topics(&s, topics).await },
    )
    .await
    .unwrap_or_else(|| vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); n]);
    for (i, (code, msg)) in idx.into_iter().zip(results) {
        if code.is_error() {
            outcomes[i].check = Err((code, msg));
        }
    }
}

/// One topic's result as CreateTopics v`v` answers it: from v5 the partition count, replication
/// factor and (empty) configs of a topic created, -1 and null for one that failed; from v7 the
/// topic id of one created, from `catalog` as it stands after the creation.
fn topic_result(catalog: &Catalog, v: i16, o: Outcome) -> CreatableTopicResult {
    let (code, msg) = match o.check {
        Ok(()) => (ErrorCode::NONE, None),
        Err(e) => e,
    };
    let mut t = CreatableTopicResult::default()
        .with_name(topic_name(&o.name))
        .with_error_code(code.code())
        .with_error_message(msg.map(|m| str_bytes(&m)));
    if v >= 5 {
        let ok = !code.is_error();
        t = t
            .with_num_partitions(if ok { o.partitions } else { -1 })
            .with_replication_factor(if ok { o.replication_factor as i16 } else { -1 })
            .with_configs(None);
        if ok {
            t = t.with_configs(Some(Vec::new()));
        }
    }
    if v >= 7 {
        if let Some(meta) = catalog.topics.get(&o.name).filter(|_| !code.is_error()) {
            t = t.with_topic_id(meta.uuid());
        }
    }
    t
}
