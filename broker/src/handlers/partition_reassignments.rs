//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455,
//! `kafka-reassign-partitions.sh --execute / --cancel / --list`). A reassignment is decided by
//! the metadata quorum (`cluster::reassign`); the list is read from this node's image, which
//! every node builds alike.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    AlterPartitionReassignmentsResponse, ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    ListPartitionReassignmentsResponse, OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::BrokerId;
use tributary_metadata::types::TopicPartition;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::partition_reassignments as req;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::catalog::{Catalog, PartitionRegistration};
use crate::cluster::reassign::ReassignmentTarget;
use crate::shard::Shard;

/// The wait for the quorum when a request asks for none (or for less than nothing).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn handle_alter(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let request = decode_all(r, |r| req::decode_alter(r, v))?;
    let allow = request.allow_replication_factor_change;
    let partitions: Vec<ReassignmentTarget> = request
        .topics
        .iter()
        .flat_map(|(topic, ps)| {
            ps.iter().map(move |p| ReassignmentTarget {
                topic: topic.clone(),
                partition: p.partition,
                replicas: p.replicas.clone(),
                allow_replication_factor_change: allow,
            })
        })
        .collect();
    let n = partitions.len();
    let asked: Vec<TopicPartition> = partitions
        .iter()
        .map(|t| TopicPartition::new(t.topic.clone(), t.partition))
        .collect();
    let timeout = u64::try_from(request.timeout_ms)
        .ok()
        .filter(|&ms| ms > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let decided = crate::controller::ask(shard, |_, c| async move {
        c.alter_reassignments(partitions).await
    });
    // Past the request's timeout the answer is REQUEST_TIMED_OUT; the command, once proposed,
    // may still take effect (as in Kafka).
    let results = futures_lite::future::or(decided, async {
        glommio::timer::sleep(timeout).await;
        Some(vec![
            (
                ErrorCode::REQUEST_TIMED_OUT,
                Some("the metadata quorum did not answer in time".into())
            );
            n
        ])
    })
    .await
    .unwrap_or_else(|| vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); n]);
    let mut topics: Vec<ReassignableTopicResponse> = Vec::new();
    for (tp, (code, msg)) in asked.into_iter().zip(results) {
        let (topic, p) = (tp.topic, tp.partition);
        let result = ReassignablePartitionResponse::default()
            .with_partition_index(p)
            .with_error_code(code.code())
            .with_error_message(msg.as_deref().map(str_bytes));
        match topics.last_mut().filter(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(result),
            None => topics.push(
                ReassignableTopicResponse::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(vec![result]),
            ),
        }
    }
    let resp = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow)
        .with_responses(topics);
    frame(spec, header, &resp)
}

pub fn handle_list(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let request = decode_all(r, |r| req::decode_list(r, v))?;
    let resp = ListPartitionReassignmentsResponse::default()
        .with_topics(ongoing(&shard.catalog(), request.topics.as_deref()));
    frame(spec, header, &resp)
}

/// The reassignments in progress among `asked` (`None`: all), by topic. Partitions that do
/// not exist or are not being moved are left out, as Kafka leaves them out.
fn ongoing(
    catalog: &Catalog,
    asked: Option<&[(String, Vec<i32>)]>,
) -> Vec<OngoingTopicReassignment> {
    let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let entry = |p: i32, reg: &PartitionRegistration| {
        OngoingPartitionReassignment::default()
            .with_partition_index(p)
            .with_replicas(ids(&reg.replicas))
            .with_adding_replicas(ids(&reg.adding_replicas))
            .with_removing_replicas(ids(&reg.removing_replicas))
    };
    let wanted: Vec<(String, Vec<i32>)> = match asked {
        Some(a) => a.to_vec(),
        None => catalog
            .topics
            .values()
            .map(|t| (t.name.clone(), (0..t.partitions).collect()))
            .collect(),
    };
    let mut out = Vec::new();
    for (topic, partitions) in wanted {
        let moving: Vec<OngoingPartitionReassignment> = partitions
            .iter()
            .filter_map(|&p| {
                let reg = catalog.partition(&topic, p)?;
                reg.is_reassigning().then(|| entry(p, reg))
            })
            .collect();
        if !moving.is_empty() {
            out.push(
                OngoingTopicReassignment::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(moving),
            );
        }
    }
    out
}
