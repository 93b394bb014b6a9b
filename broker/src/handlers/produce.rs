//! Produce: validate each partition's batch here as Kafka's `LogValidator` does (size, CRC32C,
//! magic, one batch per partition, then every record: structure, offset deltas and count, keys on
//! compacted topics, CreateTime timestamps), recompress it when the topic's `compression.type`
//! asks for another codec, then append on the owning shard and answer once the data is durable.
//! acks=0 gets no response. From v10 a partition answered NOT_LEADER_OR_FOLLOWER carries its
//! current leader and the response the leaders' endpoints (KIP-951).

use std::rc::Rc;

use std::time::Instant;

use futures::channel::oneshot;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    ProduceResponse, TopicProduceResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::record_batch::{self, BatchError, BatchHeader, RECORD_BATCH_HEADER_BYTES};
use tributary_protocol::records;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::produce::{self, ProducePartition, ProduceRequest, ProduceTopic};
use tributary_protocol::{ErrorCode, Reader};
use tributary_storage::codec::{self, CodecError};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult, PendingResponse};
use crate::catalog::{Catalog, TopicMeta};
use crate::config::BrokerConfig;
use crate::metrics::Stage;
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
    conn: crate::conn::Conn<'_>,
) -> Result<PendingResponse, String> {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let validate_start = Instant::now();
    let req = decode_all(r, |r| produce::decode(r, v))?;
    shard.produce_requests.set(shard.produce_requests.get() + 1);
    let catalog = shard.catalog();
    let acks_ok = matches!(req.acks, -1..=1);
    // producer_byte_rate: the request's record bytes count against it.
    let throttle = shard.throttle(
        conn,
        header.client_id.as_deref(),
        crate::quota::PRODUCER_BYTE_RATE,
        record_bytes(&req),
    );
    let throttle_ms = throttle.as_millis().min(i32::MAX as u128) as i32;
    // Kafka's checks: WRITE on the transactional id (every partition refused without it),
    // then WRITE on each topic.
    let txn_denied = req.transactional_id.as_deref().is_some_and(|id| {
        !shard.allowed(conn, AclOperation::Write, ResourceType::TransactionalId, id)
    });
    let mut waits: Vec<Wait> = Vec::new();
    let mut written = crate::conn::Written::Nothing;
    for topic in &req.topics {
        let topic_denied =
            !shard.allowed(conn, AclOperation::Write, ResourceType::Topic, &topic.name);
        for p in &topic.partitions {
            let check = match refusal(acks_ok, req.acks, txn_denied, topic_denied, &topic.name) {
                Some(e) => Err(Rejected::from(e)),
                None => {
                    match check_partition(shard, &catalog, &topic.name, p.index, p.records.as_ref())
                    {
                        Ok((rewritten, txn_producer)) => check_transactional(
                            shard,
                            req.transactional_id.as_deref(),
                            txn_producer,
                            (&topic.name, p.index),
                        )
                        .await
                        .map(|()| rewritten)
                        .map_err(Rejected::from),
                        Err(e) => Err(e),
                    }
                }
            };
            let outcome = match check {
                Err(rejected) => Err((ProduceResult::failed(rejected.code), rejected)),
                Ok(rewritten) => {
                    let owner = shard.owner(&topic.name, p.index);
                    written = written.and(owner.0);
                    let (append, rx) = append_request(&req, topic, p, rewritten);
                    shard.dispatch(owner, append).await;
                    Ok(rx)
                }
            };
            waits.push((topic.name.clone(), p.index, outcome));
        }
    }
    conn.trail.note(written, shard.id.0);
    shard
        .metrics
        .observe_stage(Stage::ProduceValidate, validate_start.elapsed());
    let header = header.clone();
    let shard = shard.clone();
    Ok(Box::pin(respond(
        shard,
        spec,
        header,
        req.acks,
        throttle_ms,
        waits,
    )))
}

/// One partition of a request on its way to an answer: its topic and index, and the receiver
/// its owning shard answers the append on — or the result it was refused with, and why.
type Wait = (
    String,
    i32,
    Result<oneshot::Receiver<ProduceResult>, (ProduceResult, Rejected)>,
);

/// Why a partition's batch was refused before its append: the error, its message, and (Produce
/// v8+) each bad record's index in the batch with what was wrong with it, as Kafka's
/// `RecordValidationException` lists them so that a client fails only those records. The list
/// holds at most one entry per record of a batch whose record count was already checked.
#[derive(Debug)]
struct Rejected {
    code: ErrorCode,
    message: String,
    record_errors: Vec<(i32, String)>,
}

impl From<(ErrorCode, String)> for Rejected {
    fn from((code, message): (ErrorCode, String)) -> Self {
        Rejected {
            code,
            message,
            record_errors: Vec::new(),
        }
    }
}

/// The record bytes of the whole request: what counts against `producer_byte_rate`.
fn record_bytes(req: &ProduceRequest) -> u64 {
    req.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
        .sum()
}

/// Why a partition is refused before its batch is looked at, in Kafka's order: `acks` other
/// than -1, 0 or 1 (`acks_ok` false), then no WRITE on the transactional id, then no WRITE on
/// the topic. `None` lets the batch's own checks run.
fn refusal(
    acks_ok: bool,
    acks: i16,
    txn_denied: bool,
    topic_denied: bool,
    topic: &str,
) -> Option<(ErrorCode, String)> {
    if !acks_ok {
        Some((
            ErrorCode::INVALID_REQUIRED_ACKS,
            format!("acks must be -1, 0 or 1, got {acks}"),
        ))
    } else if txn_denied {
        Some((
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "WRITE on the transactional id is not allowed".to_string(),
        ))
    } else if topic_denied {
        Some((
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            format!("WRITE on topic {topic} is not allowed"),
        ))
    } else {
        None
    }
}

/// The append of one partition's checked batch for its owning shard — `rewritten` when the
/// checks changed the batch, else the client's bytes — and the receiver its result comes on.
fn append_request(
    req: &ProduceRequest,
    topic: &ProduceTopic,
    p: &ProducePartition,
    rewritten: Option<Vec<u8>>,
) -> (ShardRequest, oneshot::Receiver<ProduceResult>) {
    let (reply, rx) = oneshot::channel();
    let batch = match rewritten {
        Some(b) => Bytes::from(b),
        None => p.records.clone().unwrap_or_default(),
    };
    let append = ShardRequest::Produce {
        topic: topic.name.clone(),
        partition: p.index,
        batch,
        acks: req.acks,
        timeout_ms: req.timeout_ms,
        sent: Instant::now(),
        reply,
    };
    (append, rx)
}

/// The rest of a produce request, after [`start`]: waits for every partition's answer in
/// request order, marks when the last one came (`response_ready`, where the `respond` stage
/// starts), and encodes the response — none for acks=0.
async fn respond(
    shard: Rc<Shard>,
    spec: &'static ApiSpec,
    header: RequestHeader,
    acks: i16,
    throttle_ms: i32,
    waits: Vec<Wait>,
) -> HandlerResult {
    let mut results = Vec::with_capacity(waits.len());
    for (t, p, outcome) in waits {
        let res = match outcome {
            Err((res, msg)) => (res, Some(msg)),
            Ok(rx) => (
                rx.await
                    .unwrap_or(ProduceResult::failed(ErrorCode::UNKNOWN_SERVER_ERROR)),
                None,
            ),
        };
        results.push((t, p, res));
    }
    let answered = results.iter().filter_map(|(_, _, (r, _))| r.answered).max();
    shard.response_ready.set(answered);
    if acks == 0 {
        return acks_zero_outcome(&results);
    }
    let response = produce_response(&shard, header.api_version, throttle_ms, results);
    frame(spec, &header, &response)
}

/// One partition's answer: topic, partition, its result and why it was refused, if it was.
type PartitionOutcome = (String, i32, (ProduceResult, Option<Rejected>));

/// An acks=0 request gets no response. If a partition refused its batch the connection closes
/// instead, as Kafka closes it: the producer, told nothing else, notices and refreshes its
/// metadata.
fn acks_zero_outcome(results: &[PartitionOutcome]) -> HandlerResult {
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, _, (r, _))| r.error.is_error())
        .map(|(t, p, (r, _))| format!("{t}-{p}: error code {}", r.error.code()))
        .collect();
    if failed.is_empty() {
        return Ok(None);
    }
    Err(format!(
        "an acks=0 produce request failed ({}); the connection closes so that the producer refreshes its metadata, as Kafka does",
        failed.join(", ")
    ))
}

/// The response to version `v` for each partition's result and message, in request order: a
/// topic's partitions gather under its first entry and, from v10, each partition whose leader
/// moved names its current leader, and the response carries those leaders' live endpoints.
fn produce_response(
    shard: &Shard,
    v: i16,
    throttle_ms: i32,
    results: Vec<PartitionOutcome>,
) -> ProduceResponse {
    let mut topics: Vec<TopicProduceResponse> = Vec::new();
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    for (t, p, (res, msg)) in results {
        let mut part = partition_response(v, p, &res, msg);
        if v >= LEADER_HINTS_FROM && leader_moved(res.error) {
            let catalog = shard.catalog();
            let (leader, endpoint) = leader_hint(&catalog, &t, p);
            part = part.with_current_leader(leader);
            if let Some(e) = endpoint.filter(|e| !endpoints.iter().any(|x| x.node_id == e.node_id))
            {
                endpoints.push(e);
            }
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
    ProduceResponse::default()
        .with_throttle_time_ms(throttle_ms)
        .with_responses(topics)
        .with_node_endpoints(endpoints)
}

/// Partition `p`'s answer with the fields version `v` has: `log_start_offset` from v5, the
/// error message from v8.
fn partition_response(
    v: i16,
    p: i32,
    res: &ProduceResult,
    rejected: Option<Rejected>,
) -> PartitionProduceResponse {
    let mut part = PartitionProduceResponse::default()
        .with_index(p)
        .with_error_code(res.error.code())
        .with_base_offset(res.base_offset)
        .with_log_append_time_ms(res.log_append_time_ms);
    if v >= 5 {
        part = part.with_log_start_offset(res.log_start_offset);
    }
    if v >= 8 {
        if let Some(r) = rejected {
            part = part
                .with_error_message(Some(str_bytes(&r.message)))
                .with_record_errors(
                    r.record_errors
                        .into_iter()
                        .map(|(i, m)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(i)
                                .with_batch_index_error_message(Some(str_bytes(&m)))
                        })
                        .collect(),
                );
        }
    }
    part
}

/// First Produce version whose response names a moved partition's leader (KIP-951).
const LEADER_HINTS_FROM: i16 = 10;

/// The errors that tell a producer the partition's leader is elsewhere. Kafka fills the leader
/// for NOT_LEADER_OR_FOLLOWER; a produce is never answered FENCED_LEADER_EPOCH today, but one
/// would mean the same.
fn leader_moved(error: ErrorCode) -> bool {
    error == ErrorCode::NOT_LEADER_OR_FOLLOWER || error == ErrorCode::FENCED_LEADER_EPOCH
}

/// The partition's leader and epoch in the image (-1/-1 when it has none) and, when that leader
/// is live, its endpoint.
fn leader_hint(
    catalog: &Catalog,
    topic: &str,
    partition: i32,
) -> (LeaderIdAndEpoch, Option<NodeEndpoint>) {
    let ((leader_id, leader_epoch), live) = catalog.current_leader(topic, partition);
    let leader = LeaderIdAndEpoch::default()
        .with_leader_id(leader_id.into())
        .with_leader_epoch(leader_epoch);
    let endpoint = live.map(|b| {
        NodeEndpoint::default()
            .with_node_id(b.id.into())
            .with_host(str_bytes(&b.host))
            .with_port(i32::from(b.port))
    });
    (leader, endpoint)
}

/// A transactional batch's checks (KIP-98, KIP-890 part 1): it comes with a transactional id,
/// and a coordinator on this node must know the partition is in that id's ongoing transaction
/// at the batch's producer id and epoch — so a late or stray write cannot open a transaction
/// nobody will end. A non-transactional batch may not claim a transactional id.
async fn check_transactional(
    shard: &Rc<Shard>,
    transactional_id: Option<&str>,
    txn_producer: Option<(i64, i16)>,
    partition: (&str, i32),
) -> Result<(), (ErrorCode, String)> {
    match (transactional_id, txn_producer) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err((
            ErrorCode::INVALID_RECORD,
            "a transactional batch needs the request's transactional id".into(),
        )),
        (Some(id), None) => Err((
            ErrorCode::INVALID_RECORD,
            format!("the request names transactional id {id:?} but its batch is not transactional"),
        )),
        (Some(id), Some(producer)) => {
            let code = super::txn::verify(shard, id, producer, partition).await;
            if code.is_error() {
                Err((
                    code,
                    format!(
                        "{}-{} is not in an ongoing transaction of {id:?} at producer id {} epoch {}; call AddPartitionsToTxn first",
                        partition.0, partition.1, producer.0, producer.1
                    ),
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// The checks Kafka's `LogValidator` makes before an append, as error codes. `Ok((Some(batch),
/// _))` is the batch to append in place of the client's (recompressed for the topic); the
/// second item is the producer (id, epoch) of a transactional batch.
#[allow(clippy::type_complexity)]
fn check_partition(
    shard: &Shard,
    catalog: &Catalog,
    topic: &str,
    partition: i32,
    records: Option<&Bytes>,
) -> Result<(Option<Vec<u8>>, Option<(i64, i16)>), Rejected> {
    let meta = check_leadership(shard, catalog, topic, partition)?;
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Err(Rejected::from((
            ErrorCode::CORRUPT_MESSAGE,
            "the produce request carries no records".to_string(),
        )));
    };
    // One snapshot of the dynamic broker config serves every check of this batch.
    let config = shard.broker_config();
    let max = meta.config_or("max.message.bytes", config.message_max_bytes);
    let header = single_batch(records, max)?;
    check_batch_header(&header)?;
    let txn_producer = header
        .is_transactional()
        .then_some((header.producer_id, header.producer_epoch));
    let policy = RecordPolicy::of(&config, meta, max);
    let rewritten = check_records(
        &records[..header.size()],
        &header,
        &policy,
        (crate::shard::now_ms(), (topic, partition)),
    )?;
    Ok((rewritten, txn_producer))
}

/// Whether this broker may append to `topic`-`partition`: the topic exists and is not internal,
/// and this broker leads the partition (else why not: no such partition, no leader, another
/// leader). Returns the topic's metadata.
fn check_leadership<'a>(
    shard: &Shard,
    catalog: &'a Catalog,
    topic: &str,
    partition: i32,
) -> Result<&'a TopicMeta, (ErrorCode, String)> {
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
    if let Err(code) = catalog.check_leader(topic, partition, shard.config.node_id) {
        let why = match catalog.partition(topic, partition) {
            None => format!("topic {topic:?} has no partition {partition}"),
            Some(p) if p.leader < 0 => format!(
                "partition {topic}-{partition} has no leader: its replicas {:?} are fenced",
                p.replicas
            ),
            Some(p) => format!(
                "broker {} leads {topic}-{partition}, not this one",
                p.leader
            ),
        };
        return Err((code, why));
    }
    Ok(meta)
}

/// Whether `records` is one well-formed record batch within `max` (`max.message.bytes`): its
/// size, then its framing, CRC and magic, then that it is the only one. Returns its header.
fn single_batch(records: &Bytes, max: usize) -> Result<BatchHeader, (ErrorCode, String)> {
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
    Ok(batches[0].1)
}

/// Whether a client may write a batch with this header: not a control batch, a record count
/// that matches `last_offset_delta`, and with a producer id, a sequence number.
fn check_batch_header(header: &BatchHeader) -> Result<(), (ErrorCode, String)> {
    if header.is_control() {
        return Err((
            ErrorCode::INVALID_RECORD,
            "clients may not write control batches (transaction markers)".into(),
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
    if header.has_producer_id() && header.base_sequence < 0 {
        return Err((
            ErrorCode::INVALID_RECORD,
            format!(
                "invalid sequence number {} in a batch of producer id {}",
                header.base_sequence, header.producer_id
            ),
        ));
    }
    Ok(())
}

/// What a topic asks of the records appended to it: its configs over the broker's defaults.
struct RecordPolicy {
    /// `cleanup.policy` includes `compact`: every record needs a key.
    compacted: bool,
    /// `message.timestamp.type=LogAppendTime`: producers' timestamps are not checked.
    log_append_time: bool,
    timestamp_before_max_ms: i64,
    timestamp_after_max_ms: i64,
    /// `compression.type`'s codec; `None` keeps the producer's.
    compression: Option<i16>,
    /// Largest records section a compressed batch may inflate to
    /// (`log.cleaner.batch.inflated.max.bytes`, so the cleaner can read every batch).
    inflated_max_bytes: usize,
    max_message_bytes: usize,
}

impl RecordPolicy {
    fn of(c: &BrokerConfig, meta: &TopicMeta, max_message_bytes: usize) -> Self {
        RecordPolicy {
            compacted: meta.cleanup_policy_includes("compact"),
            log_append_time: meta.log_append_time(c.log_message_timestamp_log_append_time),
            timestamp_before_max_ms: meta.config_or(
                "message.timestamp.before.max.ms",
                c.log_message_timestamp_before_max_ms,
            ),
            timestamp_after_max_ms: meta.config_or(
                "message.timestamp.after.max.ms",
                c.log_message_timestamp_after_max_ms,
            ),
            compression: meta.compression_type(c.compression_type),
            inflated_max_bytes: usize::try_from(c.cleaner.log_cleaner_batch_inflated_max_bytes)
                .unwrap_or(usize::MAX),
            max_message_bytes,
        }
    }
}

/// Kafka's `LogValidator` over the records of one valid batch (`batch` is exactly its bytes): the
/// records' structure, offset deltas and count (a compressed batch is inflated, within
/// `inflated_max_bytes`, to be read), keys on compacted topics and CreateTime timestamps within
/// the topic's bounds of `now_ms`. Returns the batch to append instead when it must change:
/// recompressed for the topic's `compression.type`, or with its max timestamp corrected.
fn check_records(
    batch: &[u8],
    header: &BatchHeader,
    policy: &RecordPolicy,
    (now_ms, tp): (i64, (&str, i32)),
) -> Result<Option<Vec<u8>>, Rejected> {
    let section = &batch[RECORD_BATCH_HEADER_BYTES..];
    let codec = header.compression();
    let inflated;
    let plain = if codec == 0 {
        section
    } else {
        inflated = codec::decompress(codec, section, policy.inflated_max_bytes)
            .map_err(|e| codec_error(&e))?;
        &inflated[..]
    };
    let max_timestamp = walk_records(plain, header, policy, (now_ms, tp))?;
    // The header's max timestamp feeds the time index, segment rolls and retention, so, as
    // Kafka does, it is set from the records of a CreateTime batch rather than trusted (a
    // LogAppendTime topic's batches are stamped at append instead).
    let fix_max_timestamp = !policy.log_append_time
        && !header.is_log_append_time()
        && header.max_timestamp != max_timestamp;
    let mut out = match policy.compression {
        Some(target) if target != codec => {
            recompress(batch, plain, target, policy).map_err(Rejected::from)?
        }
        _ if fix_max_timestamp => batch.to_vec(),
        _ => return Ok(None),
    };
    if fix_max_timestamp {
        record_batch::set_max_timestamp(&mut out, false, max_timestamp);
    }
    Ok(Some(out))
}

/// Reads every record of the records section `plain` and checks it; returns the records' max
/// timestamp. As Kafka: a malformed record fails at once; otherwise every record with a
/// timestamp out of bounds, and on a compacted topic every record without a key, is listed
/// (`record_errors`), the batch's error INVALID_TIMESTAMP if any timestamp is, else
/// INVALID_RECORD. `tp` (topic, partition) names the partition in the messages, formatted only
/// for a refused record: nothing is allocated for a good batch.
fn walk_records(
    plain: &[u8],
    header: &BatchHeader,
    policy: &RecordPolicy,
    (now_ms, (topic, partition)): (i64, (&str, i32)),
) -> Result<i64, Rejected> {
    let mut record_errors: Vec<(i32, String)> = Vec::new();
    let mut bad_timestamp = false;
    let mut max_timestamp = NO_TIMESTAMP;
    for (index, record) in records::records(plain, header.records_count).enumerate() {
        let record =
            record.map_err(|e| Rejected::from((ErrorCode::INVALID_RECORD, e.to_string())))?;
        let batch_index = i32::try_from(index).unwrap_or(i32::MAX);
        if let Some(msg) = timestamp_error(header, &record, index, policy, now_ms) {
            bad_timestamp = true;
            record_errors.push((batch_index, msg));
        } else if policy.compacted && record.key.is_none() {
            record_errors.push((
                batch_index,
                format!(
                    "Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
                ),
            ));
        }
        max_timestamp =
            max_timestamp.max(header.base_timestamp.wrapping_add(record.timestamp_delta));
    }
    let Some((first, first_message)) = record_errors.first() else {
        return Ok(max_timestamp);
    };
    let code = if bad_timestamp {
        ErrorCode::INVALID_TIMESTAMP
    } else {
        ErrorCode::INVALID_RECORD
    };
    let message = format!(
        "{} of the batch's records were rejected; the first, record {first}: {first_message}",
        record_errors.len()
    );
    Err(Rejected {
        code,
        message,
        record_errors,
    })
}

/// `batch` with its records (`plain`, uncompressed) compressed with `target` (0: none), as
/// Kafka converts a batch to its topic's `compression.type`. The result must still fit
/// `max.message.bytes`.
fn recompress(
    batch: &[u8],
    plain: &[u8],
    target: i16,
    policy: &RecordPolicy,
) -> Result<Vec<u8>, (ErrorCode, String)> {
    let section = if target == 0 {
        plain.to_vec()
    } else {
        // Snappy in the xerial framing Kafka's own (Java) code writes.
        codec::compress(target, plain, &codec::XERIAL_MAGIC).map_err(|e| codec_error(&e))?
    };
    let out = record_batch::with_records(batch, target, &section);
    if out.len() > policy.max_message_bytes {
        return Err((
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "record batch of {} bytes after conversion to compression.type codec {target} \
                 exceeds max.message.bytes {}",
                out.len(),
                policy.max_message_bytes
            ),
        ));
    }
    Ok(out)
}

/// Kafka's `validateTimestamp` for one record: on a CreateTime topic a record's timestamp (but
/// NO_TIMESTAMP, -1) must lie within `[now - before.max, now + after.max]`; a producer may not
/// mark its batch LogAppendTime.
fn timestamp_error(
    header: &BatchHeader,
    record: &record_batch::RecordView<'_>,
    index: usize,
    policy: &RecordPolicy,
    now_ms: i64,
) -> Option<String> {
    // In a LogAppendTime batch every record's timestamp is the batch's max timestamp.
    let timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    };
    if !policy.log_append_time && timestamp != NO_TIMESTAMP {
        let behind = i128::from(now_ms) - i128::from(timestamp);
        if behind > i128::from(policy.timestamp_before_max_ms)
            || -behind > i128::from(policy.timestamp_after_max_ms)
        {
            return Some(format!(
                "Timestamp {timestamp} of record {index} is out of range. The timestamp should be \
                 within [{}, {}]",
                now_ms.saturating_sub(policy.timestamp_before_max_ms),
                now_ms.saturating_add(policy.timestamp_after_max_ms)
            ));
        }
    } else if header.is_log_append_time() {
        return Some(format!(
            "Invalid timestamp type in record {index}: producers should not set the timestamp \
             type to LogAppendTime"
        ));
    }
    None
}

/// Kafka's "no timestamp" value, which timestamp bounds do not apply to.
const NO_TIMESTAMP: i64 = -1;

fn codec_error(e: &CodecError) -> (ErrorCode, String) {
    let code = match e {
        CodecError::TooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
        CodecError::Unknown(_) => ErrorCode::INVALID_RECORD,
        CodecError::Corrupt { .. } => ErrorCode::CORRUPT_MESSAGE,
    };
    let detail = match e {
        CodecError::TooLarge { max } => format!(
            "the batch's records decompress to more than {max} bytes \
             (log.cleaner.batch.inflated.max.bytes)"
        ),
        _ => format!("the batch's records: {e}"),
    };
    (code, detail)
}
