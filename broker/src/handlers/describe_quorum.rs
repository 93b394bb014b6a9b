//! DescribeQuorum (KIP-595): the metadata quorum as `kafka-metadata-quorum.sh describe
//! --status/--replication` shows it — the leader, its epoch (the Raft term), the high watermark
//! (commit index), each voter's log end and the observers (broker-only nodes). Any node answers
//! with its own view; only the leader knows the voters' log ends (the others report -1) and
//! the observers it hears from. Observers' log ends are not tracked (-1).

use std::rc::Rc;

use kafka_protocol::messages::describe_quorum_response::{
    DescribeQuorumResponse, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::BrokerId;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_quorum;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, topic_name, HandlerResult};
use crate::cluster::node::METADATA_TOPIC;
use crate::controller::QuorumStatus;
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_quorum::decode(r, v))?;
    let status =
        crate::controller::ask(shard, |s, c| async move { c.quorum_status(&s.config) }).await;
    let voters: Vec<i32> = shard.config.cluster.voters.iter().map(|v| v.id).collect();
    let topics = req
        .topics
        .iter()
        .map(|(name, partitions)| {
            let parts = partitions
                .iter()
                .map(|&p| describe(name, p, status.as_ref(), &voters, v))
                .collect();
            TopicData::default()
                .with_topic_name(topic_name(name))
                .with_partitions(parts)
        })
        .collect();
    frame(
        spec,
        header,
        &DescribeQuorumResponse::default().with_topics(topics),
    )
}

fn describe(
    topic: &str,
    partition: i32,
    status: Option<&QuorumStatus>,
    voters: &[i32],
    v: i16,
) -> PartitionData {
    let out = PartitionData::default().with_partition_index(partition);
    let Some(s) = status.filter(|_| topic == METADATA_TOPIC && partition == 0) else {
        return out.with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code());
    };
    let replica = |id: i32, end: i64| {
        let mut r = ReplicaState::default()
            .with_replica_id(BrokerId(id))
            .with_log_end_offset(end);
        if v >= 1 {
            r = r
                .with_last_fetch_timestamp(-1)
                .with_last_caught_up_timestamp(-1);
        }
        r
    };
    let states = voters
        .iter()
        .map(|&id| {
            let end = s
                .progress
                .iter()
                .find(|(n, _)| *n == id)
                .map_or(-1, |(_, e)| *e as i64);
            replica(id, end)
        })
        .collect();
    let mut observers: Vec<i32> = s.observers.clone();
    observers.sort_unstable();
    let observers = observers.into_iter().map(|id| replica(id, -1)).collect();
    out.with_leader_id(BrokerId(s.leader.unwrap_or(-1)))
        .with_leader_epoch(i32::try_from(s.term).unwrap_or(i32::MAX))
        .with_high_watermark(s.commit as i64)
        .with_current_voters(states)
        .with_observers(observers)
}
