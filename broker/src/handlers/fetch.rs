//! Fetch: decide which partitions the request covers (its fetch session, `session`), read them
//! on their owning shards in request order within the response's byte budget, and when fewer
//! than `min_bytes` came back, wait as Kafka's DelayedFetch does (`wait`) — up to `max_wait_ms` —
//! then read once more.
//!
//! From v13 topics are named by id: each is resolved to its name in the catalog image, and an
//! id it does not hold is answered UNKNOWN_TOPIC_ID. From v16 a partition answered
//! NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries its current leader and the response the
//! leaders' endpoints (KIP-951), so a client moves without a Metadata request.

pub mod replica;

use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tributary_protocol::frame::{FrameBuilder, ResponseFrame};
use tributary_protocol::header::{begin_response, RequestHeader};
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::fetch::{
    self, CurrentLeader, FetchPartitionResponse, FetchRequest, FetchTopicResponse, NodeEndpoint,
    NODE_ENDPOINTS_FROM, NO_TOPIC_ID, TOPIC_IDS_FROM,
};
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::{decode_all, HandlerResult};
use crate::catalog::Catalog;
use crate::fetch_session::{Answered, Context, FetchItem, INVALID_SESSION_ID};
use crate::fetch_wait::{Baseline, Tally};
use crate::shard::{call, FetchResult, Shard, ShardRequest};

/// Longest long-poll a client may ask for; a larger `max_wait_ms` is capped to this.
pub const FETCH_MAX_WAIT_MS_CAP: u64 = 60_000;

/// The first Fetch version with `isolation_level` (and `last_stable_offset`,
/// `aborted_transactions` in the response).
pub const READ_COMMITTED_FROM: i16 = 4;

/// The first Fetch version whose consumers may read from a follower (KIP-392's rack_id).
const FOLLOWER_READS_FROM: i16 = 11;

/// Where a consumer's fetch may be read and where it should be: from a follower of this
/// broker's (Fetch v11+), and, with the rack-aware selector, from a replica in `rack`.
#[derive(Debug, Clone, Copy)]
struct ReadFrom<'a> {
    from_follower: bool,
    rack: Option<&'a str>,
}

/// Where a consumer fetch's items are to be read instead of here (KIP-392): nothing is
/// allocated for a fetch without a rack to choose by, which is every fetch but a rack-aware
/// consumer's.
struct Redirects(Option<Vec<i32>>);

impl Redirects {
    /// The replica item `i` is read from instead, or -1: here.
    fn to(&self, i: usize) -> i32 {
        self.0.as_ref().map_or(-1, |v| v[i])
    }

    fn any(&self) -> bool {
        self.0.as_ref().is_some_and(|v| v.iter().any(|r| *r >= 0))
    }
}

/// For each item, the replica the consumer should read it from instead of this leader
/// (Kafka's `RackAwareReplicaSelector`), or -1: an in-sync, unfenced replica in the consumer's
/// rack when this broker is not in it, spread over such replicas by partition.
fn preferred_replicas(shard: &Shard, items: &[FetchItem], reader: &ReadFrom<'_>) -> Redirects {
    let Some(rack) = reader.rack else {
        return Redirects(None);
    };
    let catalog = shard.catalog();
    let me = shard.config.node_id;
    let rack_of = |id: i32| {
        catalog
            .brokers
            .get(&id)
            .filter(|b| !b.fenced)
            .and_then(|b| b.rack.as_deref())
    };
    if rack_of(me) == Some(rack) {
        return Redirects(None);
    }
    let to = items
        .iter()
        .map(|i| {
            let Some(reg) = catalog
                .partition(&i.topic, i.partition)
                .filter(|r| r.leader == me)
            else {
                return -1;
            };
            let near: Vec<i32> = reg
                .isr
                .iter()
                .copied()
                .filter(|id| *id != me && rack_of(*id) == Some(rack))
                .collect();
            match near.len() {
                0 => -1,
                n => near[i.partition.unsigned_abs() as usize % n],
            }
        })
        .collect();
    Redirects(Some(to))
}

/// What a client's fetch may return and how: the response's byte budget, the bytes it waits
/// for, and its isolation level.
#[derive(Debug, Clone, Copy)]
struct Budget {
    max_bytes: usize,
    min_bytes: usize,
    read_committed: bool,
}

/// Answers a Fetch: a follower's (`replica_id` >= 0) from the leader's replica state, a
/// consumer's through its fetch session within the response's byte budget.
pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let mut req = decode_all(r, |r| fetch::decode(r, v))?;
    if v >= TOPIC_IDS_FROM {
        resolve_topic_names(&shard.catalog(), &mut req);
    }
    let wait = Duration::from_millis((req.max_wait_ms.max(0) as u64).min(FETCH_MAX_WAIT_MS_CAP));
    let deadline = Instant::now() + wait;
    if req.replica_id >= 0 {
        if !shard.allowed_on_cluster(conn, AclOperation::ClusterAction) {
            // A follower's fetch needs CLUSTER_ACTION on the cluster, as in Kafka.
            return Ok(Some(response_frame(spec, header, |out| {
                let error = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
                fetch::encode_response(out, v, error, 0, false, &[], &[]);
            })));
        }
        conn.link.follower.set(Some(req.replica_id));
        let mut topics = replica::fetch(shard, &req, conn.link.id, deadline).await;
        let endpoints = leader_hints(shard, v, &mut topics);
        return Ok(Some(response_frame(spec, header, |out| {
            fetch::encode_response(out, v, ErrorCode::NONE, 0, false, &topics, &endpoints);
        })));
    }
    let budget = consumer_budget(shard, &req, v);
    let context = begin_session(shard, &req, v);
    let denied = denied_topics(shard, conn, context.items());
    let reader = ReadFrom {
        // KIP-392: a consumer that sends its rack (v11+) may read from a follower.
        from_follower: v >= FOLLOWER_READS_FROM,
        rack: (shard.config.rack.rack_aware_reads && !req.rack_id.is_empty())
            .then_some(req.rack_id.as_str()),
    };
    let redirect = preferred_replicas(shard, context.items(), &reader);
    let results = read_and_wait(
        shard,
        context.items(),
        budget,
        deadline,
        &denied,
        &redirect,
        reader,
    )
    .await;
    let (error, session_id, include) =
        finish_session(shard, v >= TOPIC_IDS_FROM, &context, &results, &redirect);
    // consumer_byte_rate: the bytes this fetch returns count against it.
    let bytes: u64 = results.iter().map(|r| r.records.len() as u64).sum();
    let throttle = shard.throttle(
        conn,
        header.client_id.as_deref(),
        crate::quota::CONSUMER_BYTE_RATE,
        bytes,
    );
    let mut topics = response_topics(context.items(), results, &include, &redirect);
    let endpoints = leader_hints(shard, v, &mut topics);
    // Record bytes are not copied into the response: they are pieces of the frame, written to
    // the socket from the buffers the reads returned.
    Ok(Some(response_frame(spec, header, |out| {
        fetch::encode_throttled_response(
            out,
            v,
            throttle.as_millis().min(i32::MAX as u128) as i32,
            error,
            session_id,
            budget.read_committed,
            &topics,
            &endpoints,
        );
    })))
}

/// The response frame to `header`: its response header, then the body `encode` writes.
fn response_frame(
    spec: &ApiSpec,
    header: &RequestHeader,
    encode: impl FnOnce(&mut FrameBuilder),
) -> ResponseFrame {
    let mut out = FrameBuilder::new();
    begin_response(
        &mut out,
        header.correlation_id,
        spec.response_header_flexible(header.api_version),
    );
    encode(&mut out);
    out.finish()
}

/// What a consumer's fetch may return: its byte budget and the bytes it waits for, held to the
/// broker's limit, and its isolation level.
fn consumer_budget(shard: &Shard, req: &FetchRequest, v: i16) -> Budget {
    // As Kafka: the broker's fetch.max.bytes caps what the client asks for, and min_bytes
    // cannot ask for more than that.
    let max_bytes = match req.max_bytes {
        n if n <= 0 => usize::MAX,
        n => n as usize,
    }
    .min(shard.config.fetch_max_bytes);
    let min_bytes = (req.min_bytes.max(0) as usize).min(max_bytes);
    // READ_COMMITTED (v4+): records below the last stable offset, with the aborted
    // transactions among them. A follower's fetch (answered before a budget is made) never is.
    let read_committed = v >= READ_COMMITTED_FROM && req.isolation_level == 1;
    Budget {
        max_bytes,
        min_bytes,
        read_committed,
    }
}

/// Which partitions a consumer's fetch covers, as its fetch session decides from those the
/// request names and forgets. From v13 a session's partitions whose topic id was unknown when
/// it took them in are named, when the image now holds the id.
fn begin_session(shard: &Shard, req: &FetchRequest, v: i16) -> Context {
    let requested: Vec<FetchItem> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| FetchItem {
                current_leader_epoch: p.current_leader_epoch,
                topic: t.name.clone(),
                topic_id: t.topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
            })
        })
        .collect();
    let mut context = shard.fetch_sessions.borrow_mut().begin(
        Instant::now(),
        req.session_id,
        req.session_epoch,
        v >= TOPIC_IDS_FROM,
        requested,
        &req.forgotten,
    );
    if v >= TOPIC_IDS_FROM {
        name_session_topics(&shard.catalog(), context.items_mut());
    }
    context
}

/// The topics of `items` the principal may not READ; without an authorizer, none (and no ACL
/// is consulted).
fn denied_topics(
    shard: &Shard,
    conn: crate::conn::Conn<'_>,
    items: &[FetchItem],
) -> HashSet<String> {
    // Topics the principal may not READ are answered TOPIC_AUTHORIZATION_FAILED, unread.
    match shard.authorizer() {
        None => Default::default(),
        Some(_) => items
            .iter()
            .map(|i| i.topic.clone())
            .filter(|t| !shard.allowed(conn, AclOperation::Read, ResourceType::Topic, t))
            .collect(),
    }
}

/// Names each topic of a v13+ request by its id; a topic whose id the image does not hold keeps
/// an empty name and is answered UNKNOWN_TOPIC_ID.
fn resolve_topic_names(catalog: &Catalog, req: &mut FetchRequest) {
    for t in &mut req.topics {
        if let Some(meta) = catalog.topic_by_id(&t.topic_id) {
            t.name.clone_from(&meta.name);
        }
    }
}

/// Names the session's partitions whose topic ids were unknown when the session took them in
/// (a topic created after the consumer learnt of it elsewhere, before this image had it).
fn name_session_topics(catalog: &Catalog, items: &mut [FetchItem]) {
    for item in items.iter_mut().filter(|i| i.topic.is_empty()) {
        if let Some(meta) = catalog.topic_by_id(&item.topic_id) {
            item.topic.clone_from(&meta.name);
        }
    }
}

/// From v16 (KIP-951), as Kafka: each partition answered NOT_LEADER_OR_FOLLOWER or
/// FENCED_LEADER_EPOCH gets the partition's leader and epoch from the image (-1/-1 when it has
/// none), and the response the endpoints of those leaders that are live. Earlier versions are
/// left as they are, with nothing allocated.
fn leader_hints(
    shard: &Shard,
    version: i16,
    topics: &mut [FetchTopicResponse],
) -> Vec<NodeEndpoint> {
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    if version < NODE_ENDPOINTS_FROM {
        return endpoints;
    }
    let catalog = shard.catalog();
    for t in topics.iter_mut() {
        let moved = |p: &&mut FetchPartitionResponse| {
            p.error == ErrorCode::NOT_LEADER_OR_FOLLOWER
                || p.error == ErrorCode::FENCED_LEADER_EPOCH
        };
        for p in t.partitions.iter_mut().filter(moved) {
            let ((leader_id, leader_epoch), live) = catalog.current_leader(&t.name, p.partition);
            p.current_leader = Some(CurrentLeader {
                leader_id,
                leader_epoch,
            });
            if let Some(b) = live.filter(|b| !endpoints.iter().any(|e| e.node_id == b.id)) {
                endpoints.push(NodeEndpoint {
                    node_id: b.id,
                    host: b.host.clone(),
                    port: i32::from(b.port),
                    rack: None,
                });
            }
        }
    }
    endpoints
}

/// Records in the session what this fetch answered (a full fetch may create one): returns the
/// response's error and session id, and which partitions it includes.
fn finish_session(
    shard: &Shard,
    uses_topic_ids: bool,
    context: &Context,
    results: &[FetchResult],
    redirect: &Redirects,
) -> (ErrorCode, i32, Vec<bool>) {
    let answered: Vec<(FetchItem, Answered)> = context
        .items()
        .iter()
        .zip(results)
        .enumerate()
        .map(|(i, (item, r))| {
            let a = Answered {
                error: r.error,
                high_watermark: r.high_watermark,
                log_start_offset: r.log_start_offset,
                // A partition sent to another replica is in the answer, as one with records.
                has_records: !r.records.is_empty() || redirect.to(i) >= 0,
            };
            (item.clone(), a)
        })
        .collect();
    let mut sessions = shard.fetch_sessions.borrow_mut();
    match context {
        Context::Error(code) => (*code, INVALID_SESSION_ID, vec![]),
        Context::Sessionless(items) => {
            (ErrorCode::NONE, INVALID_SESSION_ID, vec![true; items.len()])
        }
        Context::Full(items) => {
            let id = sessions.create(Instant::now(), uses_topic_ids, new_session_id, answered);
            (ErrorCode::NONE, id, vec![true; items.len()])
        }
        Context::Incremental { id, epoch, .. } => {
            match sessions.finish_incremental(*id, *epoch, &answered) {
                Ok(include) => (ErrorCode::NONE, *id, include),
                // Another fetch used the session meanwhile: Kafka names the session.
                Err(code) if code == ErrorCode::INVALID_FETCH_SESSION_EPOCH => (code, *id, vec![]),
                Err(code) => (code, INVALID_SESSION_ID, vec![]),
            }
        }
    }
}

/// The included partitions, grouped into topics as they come (a topic that recurs after
/// another is a new entry, as in Kafka's responses).
fn response_topics(
    items: &[FetchItem],
    results: Vec<FetchResult>,
    include: &[bool],
    redirect: &Redirects,
) -> Vec<FetchTopicResponse> {
    let mut topics: Vec<FetchTopicResponse> = Vec::new();
    let chosen = items.iter().zip(results).zip(include).enumerate();
    for (i, ((item, res), _)) in chosen.filter(|(_, (_, included))| **included) {
        let part = FetchPartitionResponse {
            partition: item.partition,
            error: res.error,
            high_watermark: res.high_watermark,
            last_stable_offset: res.last_stable_offset,
            log_start_offset: res.log_start_offset,
            aborted_transactions: res.aborted_transactions,
            records: res.records,
            diverging_epoch: None,
            current_leader: None,
            // Kafka names a preferred replica only in an answer without error.
            preferred_read_replica: if res.error.is_error() {
                -1
            } else {
                redirect.to(i)
            },
        };
        let same_topic = |t: &&mut FetchTopicResponse| {
            t.topic_id == item.topic_id && (item.topic_id != NO_TOPIC_ID || t.name == item.topic)
        };
        match topics.last_mut().filter(same_topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(FetchTopicResponse {
                name: item.topic.clone(),
                topic_id: item.topic_id,
                partitions: vec![part],
            }),
        }
    }
    topics
}

/// A random positive session id (uniqueness is checked by the cache).
fn new_session_id() -> i32 {
    (uuid::Uuid::new_v4().as_u128() as u32 & 0x7fff_ffff) as i32
}

/// Reads `items`; if that is not yet `min_bytes` and nothing ends the wait, waits for enough new
/// data (counted, not read) or the deadline, and reads once more.
async fn read_and_wait(
    shard: &Rc<Shard>,
    items: &[FetchItem],
    budget: Budget,
    deadline: Instant,
    denied: &HashSet<String>,
    redirect: &Redirects,
    reader: ReadFrom<'_>,
) -> Vec<FetchResult> {
    let Budget {
        max_bytes,
        min_bytes,
        read_committed,
    } = budget;
    let catalog = shard.catalog();
    let node = shard.config.node_id;
    let known = readability(&catalog, items, node, denied, &reader);
    let first = read_all(shard, items, &known, redirect, max_bytes, read_committed).await;
    let bytes: usize = first.results.iter().map(|r| r.records.len()).sum();
    let errors = first.results.iter().any(|r| r.error.is_error());
    // A partition sent to another replica is answered at once, as an error would be.
    let redirected = redirect.any();
    if bytes >= min_bytes
        || errors
        || redirected
        || first.full
        || items.is_empty()
        || Instant::now() >= deadline
        || shard.draining.get()
    {
        return first.results;
    }
    let baselines = items
        .iter()
        .zip(&first.results)
        .map(|(i, r)| {
            Baseline::new(
                i.fetch_offset,
                i.partition_max_bytes.max(0) as usize,
                r,
                read_committed,
            )
        })
        .collect();
    let tally = Tally::new(baselines, min_bytes);
    if tally.satisfied() {
        return first.results;
    }
    let watched: Vec<(String, i32, bool)> = items
        .iter()
        .zip(&known)
        .map(|(i, k)| (i.topic.clone(), i.partition, !k.is_error()))
        .collect();
    let wait_start = Instant::now();
    crate::fetch_wait::wait(shard, &watched, tally, deadline).await;
    shard
        .metrics
        .observe_stage(crate::metrics::Stage::FetchWait, wait_start.elapsed());
    read_all(shard, items, &known, redirect, max_bytes, read_committed)
        .await
        .results
}

/// Whether each item may be read here: its topic known by id, READ allowed, this node its
/// leader (or an in-sync follower, for a consumer that may read from one), the client's
/// leader epoch current.
fn readability(
    catalog: &Catalog,
    items: &[FetchItem],
    node: i32,
    denied: &HashSet<String>,
    reader: &ReadFrom<'_>,
) -> Vec<ErrorCode> {
    items
        .iter()
        .map(|i| {
            if i.topic_id != NO_TOPIC_ID && !names_topic(catalog, i) {
                return ErrorCode::UNKNOWN_TOPIC_ID;
            }
            if denied.contains(&i.topic) {
                return ErrorCode::TOPIC_AUTHORIZATION_FAILED;
            }
            let readable = match catalog.check_leader(&i.topic, i.partition, node) {
                // A follower of it serves a consumer that may read from followers (KIP-392).
                Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                    if reader.from_follower && is_replica(catalog, i, node) =>
                {
                    Ok(())
                }
                other => other,
            };
            match readable {
                Ok(()) => {
                    let current = catalog
                        .partition(&i.topic, i.partition)
                        .map_or(0, |r| r.leader_epoch.0);
                    check_leader_epoch(i.current_leader_epoch, current)
                }
                Err(code) => code,
            }
        })
        .collect()
}

/// Whether this node is an in-sync replica of the item's partition: a follower out of the ISR
/// answers NOT_LEADER_OR_FOLLOWER, and its consumers go back to the leader.
fn is_replica(catalog: &Catalog, item: &FetchItem, node: i32) -> bool {
    catalog
        .partition(&item.topic, item.partition)
        .is_some_and(|r| r.isr.contains(&node))
}

/// Whether a v13+ item's topic id still names the topic it was resolved to (the topic may have
/// been deleted, or deleted and created again with another id, since).
fn names_topic(catalog: &Catalog, item: &FetchItem) -> bool {
    catalog
        .topic_by_id(&item.topic_id)
        .is_some_and(|t| t.name == item.topic)
}

struct ReadAll {
    results: Vec<FetchResult>,
    /// A partition with data got none of it: the response's byte budget ran out, and waiting
    /// would not let the response carry more.
    full: bool,
}

/// Reads of one fetch under way at once.
const FETCH_READS_INFLIGHT_MAX: usize = 16;

/// Reads the partitions in request order within `max_bytes`, as Kafka's `readFromLog`: until
/// one returns records a partition may return its first batch whatever its size (KIP-74);
/// after that no read returns more than the budget left, and once it is spent the remaining
/// partitions are answered from their watermarks without reading. Nothing is read that would
/// not be sent.
///
/// Reads overlap (up to [`FETCH_READS_INFLIGHT_MAX`]) while the budget not yet granted covers a
/// partition's whole `partition_max_bytes`: each read is granted its bytes before it starts and
/// gives back what it did not use. When it does not, reads wait for those under way and go one
/// at a time, each granted what is left.
async fn read_all(
    shard: &Rc<Shard>,
    items: &[FetchItem],
    known: &[ErrorCode],
    redirect: &Redirects,
    max_bytes: usize,
    read_committed: bool,
) -> ReadAll {
    let mut results: Vec<Option<FetchResult>> = vec![None; items.len()];
    // What each finished read was granted, and whether it was held to that (a hard limit).
    let mut grants: Vec<(usize, bool)> = vec![(0, true); items.len()];
    let mut used = 0usize; // record bytes returned by finished reads
    let mut granted = 0usize; // bytes granted to reads under way
    let mut returned_any = false;
    let mut full = false;
    let mut next = 0;
    let mut inflight = FuturesUnordered::new();
    loop {
        while next < items.len() && inflight.len() < FETCH_READS_INFLIGHT_MAX {
            let i = next;
            let item = &items[i];
            if known[i].is_error() {
                results[i] = Some(refused(known[i]));
                next += 1;
                continue;
            }
            let part_max = item.partition_max_bytes.max(0) as usize;
            let left = max_bytes.saturating_sub(used);
            let elsewhere = redirect.to(i) >= 0;
            let grant = if returned_any && left == 0 || elsewhere {
                0 // watermarks only (for one read elsewhere, too)
            } else if inflight.is_empty() {
                part_max.min(left)
            } else if left.saturating_sub(granted) >= part_max {
                part_max
            } else {
                break; // wait for the reads under way to give back what they did not use
            };
            granted += grant;
            let hard_limit = returned_any || elsewhere;
            inflight.push(async move {
                let r = read_one(shard, item, grant, hard_limit, read_committed).await;
                (i, grant, hard_limit, r)
            });
            next += 1;
        }
        let Some((i, grant, hard_limit, r)) = inflight.next().await else {
            break;
        };
        granted -= grant;
        grants[i] = (grant, hard_limit);
        if !r.records.is_empty() {
            returned_any = true;
            used += r.records.len();
        } else if hard_limit && r.has_data_at(items[i].fetch_offset, read_committed) {
            // Its first batch did not fit in what was left.
            full = true;
        }
        results[i] = Some(r);
    }
    // Reads that overlapped the first one were started before any had returned records, so
    // each may have returned a first batch larger than its grant. As KIP-74 allows, only the
    // first non-empty partition in request order keeps one; the others' are not sent.
    let mut first = true;
    for (r, &(grant, hard_limit)) in results.iter_mut().zip(&grants) {
        let Some(r) = r.as_mut().filter(|r| !r.records.is_empty()) else {
            continue;
        };
        if !first && !hard_limit && r.records.len() > grant {
            r.records = Bytes::new();
            full = true;
        }
        first = false;
    }
    let results = results
        .into_iter()
        .map(|r| r.unwrap_or_else(unknown))
        .collect();
    ReadAll { results, full }
}

async fn read_one(
    shard: &Rc<Shard>,
    item: &FetchItem,
    max_bytes: usize,
    hard_limit: bool,
    read_committed: bool,
) -> FetchResult {
    let (topic, partition, offset) = (item.topic.clone(), item.partition, item.fetch_offset);
    let owner = shard.owner(&topic, partition);
    call(shard, owner, move |reply| ShardRequest::Fetch {
        topic,
        partition,
        offset,
        max_bytes,
        hard_limit,
        read_committed,
        reply,
    })
    .await
    .unwrap_or_else(unknown)
}

impl FetchResult {
    /// The partition had data at `offset` that this result did not return (for READ_COMMITTED,
    /// data below the last stable offset).
    fn has_data_at(&self, offset: i64, read_committed: bool) -> bool {
        let end = if read_committed {
            self.last_stable_offset
        } else {
            self.high_watermark
        };
        !self.error.is_error() && self.records.is_empty() && offset < end
    }
}

/// Kafka's check of the epoch a client names against the partition's: older is fenced (the
/// client must refresh its metadata), newer is not known here yet; -1 skips the check.
pub fn check_leader_epoch(client: i32, current: i32) -> ErrorCode {
    if client < 0 || client == current {
        ErrorCode::NONE
    } else if client < current {
        ErrorCode::FENCED_LEADER_EPOCH
    } else {
        ErrorCode::UNKNOWN_LEADER_EPOCH
    }
}

fn unknown() -> FetchResult {
    refused(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
}

/// A partition this broker does not serve: unknown, or led by another broker or none.
fn refused(error: ErrorCode) -> FetchResult {
    FetchResult {
        error,
        records: Bytes::new(),
        high_watermark: -1,
        log_start_offset: -1,
        last_stable_offset: -1,
        aborted_transactions: Vec::new(),
        visible_bytes: 0,
    }
}
