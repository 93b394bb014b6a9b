//! OffsetForLeaderEpoch: where a leader epoch ends, from the leader's epoch cache (Kafka's
//! `LeaderEpochFileCache.endOffsetFor`): the latest epoch ends at the log end; an earlier one
//! where the next began. Consumers (librdkafka, the Java client) ask after a leader change or
//! when validating a position (KIP-320); followers learn the same from Fetch's divergence answer.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::offset_for_leader_epoch::{self, EpochQuery, NO_EPOCH};
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, topic_name, HandlerResult};
use crate::shard::{call, Shard, ShardRequest};

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

/// What the request and the partition's current epoch decide for one partition: an answer, or
/// "ask the owner's epoch cache".
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Answer(ErrorCode, i32, i64),
    Lookup,
}

/// Kafka's order: the current-epoch check (fencing) against the partition's leader epoch, then
/// the epoch lookup.
fn decide(q: &EpochQuery, current: i32) -> Decision {
    if q.current_leader_epoch != NO_EPOCH {
        if q.current_leader_epoch < current {
            return Decision::Answer(ErrorCode::FENCED_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        }
        if q.current_leader_epoch > current {
            return Decision::Answer(ErrorCode::UNKNOWN_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        }
    }
    if q.leader_epoch < 0 {
        return Decision::Answer(ErrorCode::NONE, UNDEFINED, UNDEFINED_OFFSET);
    }
    Decision::Lookup
}

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| offset_for_leader_epoch::decode(r, v))?;
    let catalog = shard.catalog();
    // As Kafka: CLUSTER_ACTION on the cluster lets a broker ask about any topic; a client
    // needs DESCRIBE on each.
    let cluster_action = shard.allowed_on_cluster(conn, AclOperation::ClusterAction);
    let mut topics = Vec::with_capacity(req.topics.len());
    for (name, queries) in &req.topics {
        let denied = !cluster_action
            && !shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, name);
        let mut partitions = Vec::with_capacity(queries.len());
        for q in queries {
            let access = if denied {
                Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
            } else {
                catalog.check_leader(name, q.partition, shard.config.node_id)
            };
            let current = catalog
                .partition(name, q.partition)
                .map_or(0, |r| r.leader_epoch.0);
            let (code, epoch, end) = if let Err(code) = access {
                (code, UNDEFINED, UNDEFINED_OFFSET)
            } else {
                match decide(q, current) {
                    Decision::Answer(c, e, o) => (c, e, o),
                    Decision::Lookup => {
                        let owner = shard.owner(name, q.partition);
                        let (topic, partition, epoch) = (name.clone(), q.partition, q.leader_epoch);
                        call(shard, owner, |reply| ShardRequest::EpochEndOffset {
                            topic,
                            partition,
                            epoch,
                            reply,
                        })
                        .await
                        .unwrap_or((
                            ErrorCode::UNKNOWN_SERVER_ERROR,
                            UNDEFINED,
                            UNDEFINED_OFFSET,
                        ))
                    }
                }
            };
            partitions.push(
                EpochEndOffset::default()
                    .with_error_code(code.code())
                    .with_partition(q.partition)
                    .with_leader_epoch(epoch)
                    .with_end_offset(end),
            );
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic_name(name))
                .with_partitions(partitions),
        );
    }
    frame(
        spec,
        header,
        &OffsetForLeaderEpochResponse::default().with_topics(topics),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(current: i32, epoch: i32) -> EpochQuery {
        EpochQuery {
            partition: 0,
            current_leader_epoch: current,
            leader_epoch: epoch,
        }
    }

    #[test]
    fn decisions_follow_kafka() {
        assert_eq!(decide(&q(NO_EPOCH, 0), 0), Decision::Lookup);
        assert_eq!(decide(&q(3, 1), 3), Decision::Lookup);
        let undefined = Decision::Answer(ErrorCode::NONE, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(NO_EPOCH, -1), 0), undefined);
        let fenced = Decision::Answer(ErrorCode::FENCED_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(1, 0), 2), fenced);
        let unknown =
            Decision::Answer(ErrorCode::UNKNOWN_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(2, 0), 0), unknown);
    }
}
