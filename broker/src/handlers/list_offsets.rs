//! ListOffsets: earliest (log start), latest (high watermark; the last stable offset for
//! READ_COMMITTED, v2+), the record with the largest timestamp, or the first record at or
//! after a timestamp (inside compressed batches too; below the last stable offset for
//! READ_COMMITTED), answered by each partition's owner.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::list_offsets;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, topic_name, HandlerResult};
use crate::shard::{call, Shard, ShardRequest};

/// The first ListOffsets version with `isolation_level`.
pub const READ_COMMITTED_FROM: i16 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| list_offsets::decode(r, v))?;
    let catalog = shard.catalog();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        // DESCRIBE on the topic, as in Kafka.
        let denied = !shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, &t.name);
        let lookups = t.partitions.iter().map(|p| {
            let epoch = catalog
                .partition(&t.name, p.partition)
                .map_or(0, |r| r.leader_epoch.0);
            let access = if denied {
                Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
            } else {
                Ok(())
            };
            let access = access
                .and_then(|()| catalog.check_leader(&t.name, p.partition, shard.config.node_id))
                .and_then(|()| {
                    match super::fetch::check_leader_epoch(p.current_leader_epoch, epoch) {
                        ErrorCode::NONE => Ok(()),
                        code => Err(code),
                    }
                });
            let (topic, partition, timestamp) = (t.name.clone(), p.partition, p.timestamp);
            let read_committed = v >= READ_COMMITTED_FROM && req.isolation_level == 1;
            async move {
                let (error, offset, ts) = if let Err(code) = access {
                    (code, -1, -1)
                } else {
                    let owner = shard.owner(&topic, partition);
                    call(shard, owner, move |reply| ShardRequest::ListOffset {
                        topic,
                        partition,
                        timestamp,
                        read_committed,
                        reply,
                    })
                    .await
                    .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, -1, -1))
                };
                let mut part = ListOffsetsPartitionResponse::default()
                    .with_partition_index(partition)
                    .with_error_code(error.code())
                    .with_timestamp(ts)
                    .with_offset(offset);
                if v >= 4 && !error.is_error() {
                    part = part.with_leader_epoch(epoch);
                }
                part
            }
        });
        let partitions = futures::future::join_all(lookups).await;
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic_name(&t.name))
                .with_partitions(partitions),
        );
    }
    frame(
        spec,
        header,
        &ListOffsetsResponse::default().with_topics(topics),
    )
}
