//! What the group and transaction coordinators share about the partitions of their internal
//! topics (`__consumer_offsets`, `__transaction_state`): appending records durably — on a
//! replicated partition, until its ISR holds them, as Kafka's coordinators write with
//! acks=all — and replaying a partition's records in order when its leadership arrives.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tracing::{info, warn};
use tributary_metadata::types::{LeaderEpoch, ProducerEpoch, ProducerId};
use tributary_protocol::record_batch;
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

/// Waits until a write to a replicated internal partition, up to the offset, is held by the
/// ISR. Set by the shard, which knows the replication state.
pub type ReplicatedWrite = Box<
    dyn Fn(
        Rc<Partition>,
        i64,
        LeaderEpoch,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ErrorCode>>>>,
>;

/// Bytes read per step of a replay.
const REPLAY_READ_BYTES: usize = 1 << 20;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Appends `records` (key, value; a `None` value is a tombstone) as one batch, makes it
/// durable and, on a replicated partition, waits for the ISR through `replicated`.
/// COORDINATOR_NOT_AVAILABLE when the write fails, NOT_COORDINATOR when leadership moved.
pub async fn append(
    log: &Rc<Partition>,
    records: &[(Bytes, Option<Bytes>)],
    replicated: &RefCell<Option<ReplicatedWrite>>,
) -> Result<(), ErrorCode> {
    append_for(log, records, None, replicated).await
}

/// As [`append`]; with `txn_producer` (producer id, epoch) the batch is transactional, its
/// effect decided by that producer's marker (TxnOffsetCommit's offsets).
pub async fn append_for(
    log: &Rc<Partition>,
    records: &[(Bytes, Option<Bytes>)],
    txn_producer: Option<(ProducerId, ProducerEpoch)>,
    replicated: &RefCell<Option<ReplicatedWrite>>,
) -> Result<(), ErrorCode> {
    if records.is_empty() {
        return Ok(());
    }
    let kv: Vec<record_batch::KeyValue<'_>> = records
        .iter()
        .map(|(k, v)| (Some(&k[..]), v.as_deref()))
        .collect();
    let batch = match txn_producer {
        // Kafka's coordinators write transactional records without a sequence.
        Some((id, epoch)) => {
            record_batch::build_transactional_batch(&kv, now_ms(), (id.0, epoch.0, -1))
        }
        None => record_batch::build_batch(&kv, now_ms(), None),
    };
    // The epoch the write is made in, read before it: should leadership move during the
    // append or the sync, the write is not acknowledged under a later epoch.
    let written_in = LeaderEpoch(log.leader_epoch());
    let out = log.append(&batch).await.map_err(|e| {
        warn!(dir = %log.dir().display(), error = %e, "writing a coordinator record failed");
        ErrorCode::COORDINATOR_NOT_AVAILABLE
    })?;
    let end = out.last_offset + 1;
    log.sync_to(end).await.map_err(|e| {
        warn!(dir = %log.dir().display(), error = %e, "syncing a coordinator record failed");
        ErrorCode::COORDINATOR_NOT_AVAILABLE
    })?;
    if log.is_replicated() {
        // The future is made under the borrow and awaited after it ends.
        let wait = replicated
            .borrow()
            .as_ref()
            .map(|hook| hook(log.clone(), end, written_in));
        if let Some(wait) = wait {
            wait.await?;
        }
    }
    Ok(())
}

/// One item of a replay, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// A record; `txn_producer` is its producer id when it was written in a transaction (its
    /// effect waits for that producer's marker).
    Record {
        key: Bytes,
        value: Option<Bytes>,
        txn_producer: Option<ProducerId>,
    },
    /// A transaction marker of `producer_id`.
    Marker {
        producer_id: ProducerId,
        commit: bool,
    },
}

/// Feeds every record and transaction marker of `log`, from its start to its log end (a new
/// leader's log is the one its high watermark will reach), to `apply` in order; returns how
/// many records there were. A corrupt batch stops the replay with a warning.
pub async fn replay(log: &Rc<Partition>, mut apply: impl FnMut(Replayed)) -> usize {
    let started = Instant::now();
    let mut offset = log.log_start_offset();
    let mut records = 0usize;
    while offset < log.log_end_offset() {
        let read = match log.read_replica(offset, REPLAY_READ_BYTES).await {
            Ok(r) => r,
            Err(e) => {
                warn!(dir = %log.dir().display(), error = %e, "reading a coordinator partition failed; its state may be incomplete");
                return records;
            }
        };
        let Ok(batches) = record_batch::validate_all(&read.records) else {
            warn!(dir = %log.dir().display(), offset, "corrupt batch in a coordinator partition; stopping its replay");
            return records;
        };
        if batches.is_empty() {
            break;
        }
        for (pos, header) in batches {
            offset = header.last_offset() + 1;
            let bytes = &read.records[pos..pos + header.size()];
            let Ok(recs) = record_batch::records(bytes) else {
                continue;
            };
            for rec in recs {
                if header.is_control() {
                    // The control record key: [version i16][type i16: 0 abort, 1 commit].
                    if let Some(k) = rec.key.filter(|k| k.len() >= 4) {
                        apply(Replayed::Marker {
                            producer_id: ProducerId(header.producer_id),
                            commit: i16::from_be_bytes([k[2], k[3]]) == 1,
                        });
                    }
                    continue;
                }
                records += 1;
                if let Some(key) = rec.key {
                    apply(Replayed::Record {
                        key: Bytes::copy_from_slice(key),
                        value: rec.value.map(Bytes::copy_from_slice),
                        txn_producer: header
                            .is_transactional()
                            .then_some(ProducerId(header.producer_id)),
                    });
                }
            }
        }
    }
    if records > 0 {
        info!(dir = %log.dir().display(), records, elapsed_ms = started.elapsed().as_millis() as u64, "coordinator state replayed");
    }
    records
}
