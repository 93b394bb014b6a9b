//! OffsetForLeaderEpoch: the end offset of a leader epoch. A single broker has led every
//! partition since it was created, in epoch 0 (the leader epoch Metadata reports), so epoch 0
//! ends at the log end offset and no later epoch exists yet. Consumers (librdkafka, the Java
//! client) ask after a leader change or when validating a position (KIP-320).

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::offset_for_leader_epoch::{self, EpochQuery, NO_EPOCH};
use tributary_protocol::{ErrorCode, Reader};

use super::{decode_all, frame, topic_name, HandlerResult};
use crate::shard::{call, Shard, ShardRequest};

/// The leader epoch of every partition on this broker.
pub const LEADER_EPOCH: i32 = 0;

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

/// What the request alone decides for one partition: an answer, or "ask the owner for the log
/// end offset".
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Answer(ErrorCode, i32, i64),
    EndOffset,
}

/// Kafka's order: the current-epoch check (fencing), then the epoch lookup.
fn decide(q: &EpochQuery) -> Decision {
    if q.current_leader_epoch != NO_EPOCH {
        if q.current_leader_epoch < LEADER_EPOCH {
            return Decision::Answer(ErrorCode::FENCED_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        }
        if q.current_leader_epoch > LEADER_EPOCH {
            return Decision::Answer(ErrorCode::UNKNOWN_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        }
    }
    if q.leader_epoch == LEADER_EPOCH {
        Decision::EndOffset
    } else {
        // A later epoch has not begun; an earlier (negative) one is undefined.
        Decision::Answer(ErrorCode::NONE, UNDEFINED, UNDEFINED_OFFSET)
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| offset_for_leader_epoch::decode(r, v))?;
    let catalog = shard.catalog();
    let mut topics = Vec::with_capacity(req.topics.len());
    for (name, queries) in &req.topics {
        let mut partitions = Vec::with_capacity(queries.len());
        for q in queries {
            let access = catalog.check_leader(name, q.partition, shard.config.node_id);
            let (code, epoch, end) = if let Err(code) = access {
                (code, UNDEFINED, UNDEFINED_OFFSET)
            } else {
                match decide(q) {
                    Decision::Answer(c, e, o) => (c, e, o),
                    Decision::EndOffset => {
                        let owner = shard.owner(name, q.partition);
                        let (topic, partition) = (name.clone(), q.partition);
                        match call(shard, owner, |reply| ShardRequest::LogEndOffset {
                            topic,
                            partition,
                            reply,
                        })
                        .await
                        {
                            Some((ErrorCode::NONE, end)) => (ErrorCode::NONE, LEADER_EPOCH, end),
                            Some((c, _)) => (c, UNDEFINED, UNDEFINED_OFFSET),
                            None => (ErrorCode::UNKNOWN_SERVER_ERROR, UNDEFINED, UNDEFINED_OFFSET),
                        }
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
        assert_eq!(decide(&q(NO_EPOCH, 0)), Decision::EndOffset);
        assert_eq!(decide(&q(0, 0)), Decision::EndOffset);
        let undefined = Decision::Answer(ErrorCode::NONE, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(0, 3)), undefined);
        assert_eq!(decide(&q(NO_EPOCH, -1)), undefined);
        let fenced = Decision::Answer(ErrorCode::FENCED_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(-4, 0)), fenced);
        let unknown =
            Decision::Answer(ErrorCode::UNKNOWN_LEADER_EPOCH, UNDEFINED, UNDEFINED_OFFSET);
        assert_eq!(decide(&q(2, 0)), unknown);
    }
}
