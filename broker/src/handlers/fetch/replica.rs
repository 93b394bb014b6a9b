//! A follower's Fetch (`replica_id` set): each partition read on its owning shard up to the
//! log end (not the high watermark), the follower's position recorded there, and — when
//! nothing new came back — a wait until any partition's log grows or its log start moves, or
//! `max_wait_ms` passes. Every answered partition carries the leader's log start offset, which
//! the follower takes as its own (KIP-107).
//! No fetch sessions and no byte budget across partitions beyond the request's own: a
//! follower asks for at most `replica.fetch.response.max.bytes`. A v13+ topic the handler could
//! not name from its id is answered UNKNOWN_TOPIC_ID.

use std::rc::Rc;
use std::time::Instant;

use tributary_protocol::requests::fetch::{FetchRequest, FetchTopicResponse, NO_TOPIC_ID};
use tributary_protocol::ErrorCode;

use crate::replica::leader::answer;
use crate::replica::LinkId;
use crate::replica::ReplicaFetchItem;
use crate::shard::{invoke_on, Shard};

/// Most partitions one follower fetch may name; more is a malformed request.
const REPLICA_FETCH_PARTITIONS_MAX: usize = 100_000;

pub async fn fetch(
    shard: &Rc<Shard>,
    req: &FetchRequest,
    link: LinkId,
    deadline: Instant,
) -> Vec<FetchTopicResponse> {
    let mut out = read_all(shard, req, link).await;
    let empty = out
        .iter()
        .flat_map(|t| &t.partitions)
        .all(|p| p.records.is_empty() && p.diverging_epoch.is_none() && !p.error.is_error());
    if empty && Instant::now() < deadline {
        let waits: Vec<_> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.name.clone(), *p)))
            .take(REPLICA_FETCH_PARTITIONS_MAX)
            .map(|(topic, p)| {
                let owner = shard.owner(&topic, p.partition);
                let (partition, offset) = (p.partition, p.fetch_offset);
                Box::pin(invoke_on(shard, owner, move |s| async move {
                    s.replica_wait_local(&topic, partition, offset, deadline)
                        .await
                }))
            })
            .collect();
        if !waits.is_empty() {
            futures::future::select_all(waits).await;
            out = read_all(shard, req, link).await;
        }
    }
    out
}

async fn read_all(shard: &Rc<Shard>, req: &FetchRequest, link: LinkId) -> Vec<FetchTopicResponse> {
    let max_total = usize::try_from(req.max_bytes).unwrap_or(0);
    let mut topics = Vec::with_capacity(req.topics.len());
    let mut used = 0usize;
    for t in &req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        let unknown_id = t.topic_id != NO_TOPIC_ID && t.name.is_empty();
        for p in t.partitions.iter().take(REPLICA_FETCH_PARTITIONS_MAX) {
            if unknown_id {
                partitions.push(answer(p.partition, ErrorCode::UNKNOWN_TOPIC_ID));
                continue;
            }
            // Once the response's budget is spent the rest are answered without records
            // (their first batch would be returned whole, past any budget).
            let max_bytes = usize::try_from(p.partition_max_bytes)
                .unwrap_or(0)
                .min(max_total.saturating_sub(used));
            let item = ReplicaFetchItem {
                topic: t.name.clone(),
                partition: p.partition,
                follower: req.replica_id,
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
                max_bytes,
                link,
            };
            let owner = shard.owner(&t.name, p.partition);
            let resp = invoke_on(shard, owner, |s| async move {
                s.replica_fetch_local(item).await
            })
            .await
            .unwrap_or_else(|| answer(p.partition, ErrorCode::UNKNOWN_SERVER_ERROR));
            used += resp.records.len();
            partitions.push(resp);
        }
        topics.push(FetchTopicResponse {
            name: t.name.clone(),
            topic_id: t.topic_id,
            partitions,
        });
    }
    topics
}
