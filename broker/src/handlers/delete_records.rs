//! DeleteRecords: each partition's owner moves its log start offset forward and deletes the
//! segments wholly below it; the reply carries the new log start (low watermark).

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::delete_records;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, topic_name, HandlerResult};
use crate::shard::{call, Shard, ShardRequest};

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| delete_records::decode(r, v))?;
    let catalog = shard.catalog();
    let mut topics = Vec::with_capacity(req.topics.len());
    for (name, partitions) in &req.topics {
        // DELETE on the topic, as in Kafka.
        let denied = !shard.allowed(conn, AclOperation::Delete, ResourceType::Topic, name);
        let deletes = partitions.iter().map(|&(partition, offset)| {
            let access = if denied {
                Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
            } else {
                catalog.check_leader(name, partition, shard.config.node_id)
            };
            let topic = name.clone();
            async move {
                let (error, low) = if let Err(code) = access {
                    (code, -1)
                } else if offset < delete_records::HIGH_WATERMARK {
                    (ErrorCode::OFFSET_OUT_OF_RANGE, -1)
                } else {
                    let owner = shard.owner(&topic, partition);
                    call(shard, owner, move |reply| ShardRequest::DeleteRecords {
                        topic,
                        partition,
                        offset,
                        reply,
                    })
                    .await
                    .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, -1))
                };
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(partition)
                    .with_low_watermark(low)
                    .with_error_code(error.code())
            }
        });
        let partitions = futures::future::join_all(deletes).await;
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic_name(name))
                .with_partitions(partitions),
        );
    }
    frame(
        spec,
        header,
        &DeleteRecordsResponse::default().with_topics(topics),
    )
}
