//! Produce: validate each partition's batch here (size, CRC32C, magic, one batch per partition),
//! then append on the owning shard and answer once the data is durable. acks=0 gets no response.

use std::rc::Rc;

use futures::channel::oneshot;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::record_batch::{self, BatchError};
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::produce;
use tributary_protocol::{ErrorCode, Reader};

use super::{decode_all, frame, str_bytes, topic_name, PendingResponse};
use crate::catalog::Catalog;
use crate::shard::{ProduceResult, Shard, ShardRequest};

/// Validates the request and hands every partition's batch to its owning shard, in request
/// order, then returns the rest — waiting for durability and encoding the response — as a future.
/// The connection reads its next request meanwhile, so consecutive produce requests share
/// fdatasyncs instead of waiting for each other's.
pub async fn start(
    shard: &Rc<Shard>,
    spec: &'static ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> Result<PendingResponse, String> {
    let v = header.api_version;
    let req = decode_all(r, |r| produce::decode(r, v))?;
    shard.produce_requests.set(shard.produce_requests.get() + 1);
    let catalog = shard.catalog();
    let acks_ok = matches!(req.acks, -1..=1);
    let acks = req.acks;
    let mut waits = Vec::new();
    for topic in &req.topics {
        for p in &topic.partitions {
            let check = if !acks_ok {
                Err((
                    ErrorCode::INVALID_REQUIRED_ACKS,
                    format!("acks must be -1, 0 or 1, got {}", req.acks),
                ))
            } else if req.transactional_id.is_some() {
                Err((
                    ErrorCode::INVALID_REQUEST,
                    "transactional produce is not supported yet".into(),
                ))
            } else {
                check_partition(shard, &catalog, &topic.name, p.index, p.records.as_ref())
            };
            let outcome = match check {
                Err((error, msg)) => Err((
                    ProduceResult {
                        error,
                        base_offset: -1,
                        log_start_offset: -1,
                    },
                    msg,
                )),
                Ok(()) => {
                    let (reply, rx) = oneshot::channel();
                    let owner = shard.owner(&topic.name, p.index);
                    let batch = p.records.clone().unwrap_or_default();
                    shard
                        .dispatch(
                            owner,
                            ShardRequest::Produce {
                                topic: topic.name.clone(),
                                partition: p.index,
                                batch,
                                acks,
                                reply,
                            },
                        )
                        .await;
                    Ok(rx)
                }
            };
            waits.push((topic.name.clone(), p.index, outcome));
        }
    }
    let header = header.clone();
    Ok(Box::pin(async move {
        let mut results = Vec::with_capacity(waits.len());
        for (t, p, outcome) in waits {
            let res = match outcome {
                Err((res, msg)) => (res, Some(msg)),
                Ok(rx) => (
                    rx.await.unwrap_or(ProduceResult {
                        error: ErrorCode::UNKNOWN_SERVER_ERROR,
                        base_offset: -1,
                        log_start_offset: -1,
                    }),
                    None,
                ),
            };
            results.push((t, p, res));
        }
        if acks == 0 {
            return Ok(None);
        }
        let mut topics: Vec<TopicProduceResponse> = Vec::new();
        for (t, p, (res, msg)) in results {
            let mut part = PartitionProduceResponse::default()
                .with_index(p)
                .with_error_code(res.error.code())
                .with_base_offset(res.base_offset)
                .with_log_append_time_ms(-1);
            if v >= 5 {
                part = part.with_log_start_offset(res.log_start_offset);
            }
            if v >= 8 {
                part = part.with_error_message(msg.map(|m| str_bytes(&m)));
            }
            match topics.iter_mut().find(|x| x.name.0.as_str() == t) {
                Some(x) => x.partition_responses.push(part),
                None => topics.push(
                    TopicProduceResponse::default()
                        .with_name(topic_name(&t))
                        .with_partition_responses(vec![part]),
                ),
            }
        }
        frame(
            spec,
            &header,
            &ProduceResponse::default().with_responses(topics),
        )
    }))
}

/// The checks Kafka's `LogValidator` makes before an append, as error codes.
fn check_partition(
    shard: &Shard,
    catalog: &Catalog,
    topic: &str,
    partition: i32,
    records: Option<&Bytes>,
) -> Result<(), (ErrorCode, String)> {
    let Some(meta) = catalog.topics.get(topic) else {
        return Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic:?} does not exist"),
        ));
    };
    if crate::group::is_internal(topic) {
        return Err((
            ErrorCode::INVALID_TOPIC_EXCEPTION,
            format!("cannot append to internal topic {topic}"),
        ));
    }
    if partition < 0 || partition >= meta.partitions {
        return Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic:?} has no partition {partition}"),
        ));
    }
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Err((
            ErrorCode::CORRUPT_MESSAGE,
            "the produce request carries no records".into(),
        ));
    };
    let max = meta.config_or("max.message.bytes", shard.config.message_max_bytes);
    if records.len() > max {
        return Err((
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "record batch of {} bytes exceeds max.message.bytes {max}",
                records.len()
            ),
        ));
    }
    let batches = record_batch::validate_all(records).map_err(|e| match e {
        BatchError::UnsupportedMagic { .. } => (ErrorCode::INVALID_RECORD, e.to_string()),
        _ => (ErrorCode::CORRUPT_MESSAGE, e.to_string()),
    })?;
    if batches.len() != 1 {
        return Err((
            ErrorCode::INVALID_RECORD,
            format!(
                "produce requests v3+ must carry exactly one record batch per partition, got {}",
                batches.len()
            ),
        ));
    }
    let header = batches[0].1;
    if header.is_control() || header.is_transactional() {
        return Err((
            ErrorCode::INVALID_RECORD,
            "transactional and control batches are not supported yet".into(),
        ));
    }
    if header.records_count == 0
        || i64::from(header.records_count) != i64::from(header.last_offset_delta) + 1
    {
        return Err((
            ErrorCode::INVALID_RECORD,
            format!(
                "batch claims {} records but last_offset_delta {}",
                header.records_count, header.last_offset_delta
            ),
        ));
    }
    Ok(())
}
