//! Fetch: read each partition on its owning shard, and when fewer than `min_bytes` came back,
//! wait on the owners for any high watermark to move — up to `max_wait_ms` — then read again.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary_protocol::frame::FrameBuilder;
use tributary_protocol::header::{begin_response, RequestHeader};
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::fetch::{self, FetchPartitionResponse, FetchTopicResponse};
use tributary_protocol::{ErrorCode, Reader};

use super::{decode_all, HandlerResult};
use crate::routing::ShardId;
use crate::shard::{call, FetchResult, Shard, ShardRequest};

/// Longest long-poll a client may ask for; a larger `max_wait_ms` is capped to this.
pub const FETCH_MAX_WAIT_MS_CAP: u64 = 60_000;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| fetch::decode(r, v))?;
    let wait = Duration::from_millis((req.max_wait_ms.max(0) as u64).min(FETCH_MAX_WAIT_MS_CAP));
    let deadline = Instant::now() + wait;
    let max_bytes = if req.max_bytes <= 0 {
        i32::MAX as usize
    } else {
        req.max_bytes as usize
    };
    let items: Vec<(String, i32, i64, usize)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.clone(),
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes.max(0) as usize,
                )
            })
        })
        .collect();
    let catalog = shard.catalog();
    let results = loop {
        let results = read_all(shard, &catalog, &items, max_bytes).await;
        let bytes: usize = results.iter().map(|r| r.records.len()).sum();
        let errors = results.iter().any(|r| r.error.is_error());
        if bytes >= req.min_bytes.max(0) as usize
            || errors
            || Instant::now() >= deadline
            || shard.draining.get()
        {
            break results;
        }
        wait_for_data(shard, &items, deadline).await;
    };
    let mut topics: Vec<FetchTopicResponse> = Vec::new();
    for ((topic, partition, _, _), res) in items.iter().zip(results) {
        let part = FetchPartitionResponse {
            partition: *partition,
            error: res.error,
            high_watermark: res.high_watermark,
            last_stable_offset: res.high_watermark,
            log_start_offset: res.log_start_offset,
            records: res.records,
        };
        match topics.last_mut().filter(|t| &t.name == topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(FetchTopicResponse {
                name: topic.clone(),
                partitions: vec![part],
            }),
        }
    }
    // Record bytes are not copied into the response: they are pieces of the frame, written to
    // the socket from the buffers the reads returned.
    let mut out = FrameBuilder::new();
    begin_response(
        &mut out,
        header.correlation_id,
        spec.response_header_flexible(v),
    );
    fetch::encode_response(
        &mut out,
        v,
        ErrorCode::NONE,
        req.isolation_level == 1,
        &topics,
    );
    Ok(Some(out.finish()))
}

/// Reads every partition concurrently, then trims to the response's `max_bytes`: partitions are
/// kept in request order while they fit, and the first non-empty one always (KIP-74).
async fn read_all(
    shard: &Rc<Shard>,
    catalog: &crate::catalog::Catalog,
    items: &[(String, i32, i64, usize)],
    max_bytes: usize,
) -> Vec<FetchResult> {
    let reads = items.iter().map(|(topic, partition, offset, part_max)| {
        let known = catalog
            .topics
            .get(topic)
            .is_some_and(|t| *partition >= 0 && *partition < t.partitions);
        let (topic, partition, offset, limit) = (
            topic.clone(),
            *partition,
            *offset,
            (*part_max).min(max_bytes),
        );
        async move {
            if !known {
                return unknown();
            }
            let owner = shard.owner(&topic, partition);
            call(shard, owner, move |reply| ShardRequest::Fetch {
                topic,
                partition,
                offset,
                max_bytes: limit,
                reply,
            })
            .await
            .unwrap_or_else(unknown)
        }
    });
    let mut results = futures::future::join_all(reads).await;
    let mut total = 0usize;
    for r in &mut results {
        if r.records.is_empty() {
            continue;
        }
        if total > 0 && total + r.records.len() > max_bytes {
            r.records = Bytes::new();
        } else {
            total += r.records.len();
        }
    }
    results
}

fn unknown() -> FetchResult {
    FetchResult {
        error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        records: Bytes::new(),
        high_watermark: -1,
        log_start_offset: -1,
    }
}

/// Returns when any owner reports a high watermark past a fetched offset, or at `deadline`.
async fn wait_for_data(shard: &Rc<Shard>, items: &[(String, i32, i64, usize)], deadline: Instant) {
    let mut by_shard: Vec<Vec<(String, i32, i64)>> = vec![Vec::new(); shard.shards];
    for (t, p, o, _) in items {
        by_shard[shard.owner(t, *p).0].push((t.clone(), *p, *o));
    }
    let watches: Vec<_> = by_shard
        .into_iter()
        .enumerate()
        .filter(|(_, w)| !w.is_empty())
        .map(|(s, items)| {
            Box::pin(call(shard, ShardId(s), move |reply| ShardRequest::Watch {
                items,
                deadline,
                reply,
            }))
        })
        .collect();
    if watches.is_empty() {
        let now = Instant::now();
        if deadline > now {
            glommio::timer::sleep(deadline - now).await;
        }
        return;
    }
    futures::future::select_all(watches).await;
}
