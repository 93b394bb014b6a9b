//! ElectLeaders: preferred-replica elections (`kafka-leader-election.sh --election-type
//! PREFERRED`) and unclean ones for partitions without a leader, decided by the metadata quorum.
//! A request naming no partitions means every partition.

use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::{
    ElectLeadersResponse, PartitionResult, ReplicaElectionResult,
};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::elect_leaders::{self, UNCLEAN};
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| elect_leaders::decode(r, v))?;
    let catalog = shard.catalog();
    let partitions: Vec<TopicPartition> = match &req.partitions {
        Some(topics) => topics
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
            .collect(),
        None => catalog
            .topics
            .values()
            .flat_map(|t| (0..t.partitions).map(move |p| TopicPartition::new(t.name.clone(), p)))
            .collect(),
    };
    let unclean = req.election_type == UNCLEAN;
    let n = partitions.len();
    let asked = partitions.clone();
    let results = crate::controller::ask(shard, move |_, c| async move {
        c.elect_leaders(partitions, unclean).await
    })
    .await
    .unwrap_or_else(|| vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); n]);
    let mut topics: Vec<ReplicaElectionResult> = Vec::new();
    for (tp, (code, msg)) in asked.into_iter().zip(results) {
        let (topic, p) = (tp.topic, tp.partition);
        let result = PartitionResult::default()
            .with_partition_id(p)
            .with_error_code(code.code())
            .with_error_message(msg.as_deref().map(str_bytes));
        match topics.last_mut().filter(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partition_result.push(result),
            None => topics.push(
                ReplicaElectionResult::default()
                    .with_topic(topic_name(&topic))
                    .with_partition_result(vec![result]),
            ),
        }
    }
    let resp = ElectLeadersResponse::default().with_replica_election_results(topics);
    frame(spec, header, &resp)
}
