//! Idempotent-producer state of one partition: for each producer id, its epoch, the timestamp of
//! its last batch and the sequence ranges of its last five batches (Kafka's
//! `ProducerStateManager`, `NUM_BATCHES_TO_RETAIN = 5`). Pure: it decides, the partition log
//! applies; time is passed in.
//!
//! The table is bounded two ways. A producer idle for `producer.id.expiration.ms` — its last
//! batch's timestamp that long before now — is forgotten, as Kafka's `removeExpiredProducers`
//! does. And at most `producer.state.partition.max.producers` producers are kept: a new one
//! evicts the least recently used (the one whose last batch is oldest in the log; Kafka has no
//! such bound, Redpanda's is `max_concurrent_producer_ids`). A producer with a transaction open
//! is neither expired nor evicted, as Kafka keeps it: its transaction holds the last stable
//! offset back until the coordinator ends it, so the table may exceed the bound by the producers
//! with open transactions. A forgotten producer is unknown, and Kafka
//! accepts an unknown producer's batch at any sequence (its state may have been removed by
//! retention or DeleteRecords), so its next batch is appended and its history starts again —
//! only a retry of a batch from before it was forgotten is no longer recognised.
//!
//! Transactions (KIP-98): a producer's first transactional batch while none is open starts its
//! transaction at that batch's base offset; an end-transaction marker (a control batch, which
//! has no sequence) ends it. The table keeps the open transactions ordered by first offset (the
//! last stable offset is the first of them), and the transactions ended whose markers may not
//! be below the high watermark yet, which hold it back too, as Kafka's `unreplicatedTxns`.

use std::collections::{BTreeSet, HashMap, VecDeque};

use tributary_protocol::record_batch::{self, BatchHeader};

use crate::txn::{AbortedTxn, BatchKind, TxnMarker};

/// Batches remembered per producer, as in Kafka: a retried batch older than this is not
/// recognised as a duplicate.
pub const PRODUCER_BATCHES_RETAINED: usize = 5;

/// Ended transactions remembered while their markers may be above the high watermark.
pub const UNREPLICATED_TXNS_MAX: usize = 1 << 14;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone)]
struct ProducerEntry {
    epoch: i16,
    /// Max timestamp of the producer's last batch: idle time is measured from it.
    last_timestamp: i64,
    batches: VecDeque<ProducerBatch>,
    /// First offset of the producer's open transaction.
    txn_first_offset: Option<i64>,
    /// Epoch of the coordinator that wrote the producer's last marker (-1: none); a marker from
    /// an older coordinator is fenced.
    coordinator_epoch: i32,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        Self {
            epoch: 0,
            last_timestamp: 0,
            batches: VecDeque::new(),
            txn_first_offset: None,
            coordinator_epoch: -1,
        }
    }
}

impl ProducerEntry {
    /// Where the producer was last used: its newest batch's last offset (-1 with none).
    fn recency(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// A new batch, in order: append it.
    Append,
    /// The same batch was appended before (a retry): answer with its original offsets.
    Duplicate { base_offset: i64, last_offset: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("out of order sequence: expected {expected}, got {got} (producer {producer_id})")]
    OutOfOrder {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id} epoch {got} is older than the current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    #[error("producer {producer_id}: a marker from coordinator epoch {got}, older than {current}")]
    CoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

#[derive(Debug, Clone)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// (recency, producer id) of every producer: the first is the least recently used.
    by_recency: BTreeSet<(i64, i64)>,
    /// At most this many producers are kept (`producer.state.partition.max.producers`), but
    /// for those with an open transaction.
    max_producers: usize,
    /// (first offset, producer id) of every open transaction.
    ongoing: BTreeSet<(i64, i64)>,
    /// (first offset, marker offset) of transactions ended by markers that may still be above
    /// the high watermark, in marker order; [`ProducerStateTable::on_high_watermark`] lets go of
    /// those below it. Not in snapshots: an open starts without them.
    unreplicated: VecDeque<(i64, i64)>,
}

impl Default for ProducerStateTable {
    fn default() -> Self {
        Self {
            producers: HashMap::new(),
            by_recency: BTreeSet::new(),
            max_producers: usize::MAX,
            ongoing: BTreeSet::new(),
            unreplicated: VecDeque::new(),
        }
    }
}

impl ProducerStateTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn contains(&self, producer_id: i64) -> bool {
        self.producers.contains_key(&producer_id)
    }

    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Result<SequenceCheck, SequenceError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            // Unknown (new, expired or evicted): Kafka accepts any sequence from a producer it
            // holds no state for.
            return Ok(SequenceCheck::Append);
        };
        if epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                current: entry.epoch,
                got: epoch,
            });
        }
        if first_seq == record_batch::NO_SEQUENCE {
            // Written by a coordinator for the producer (TxnOffsetCommit's offsets carry the
            // producer's id and epoch but no sequence — Kafka's coordinator-origin appends):
            // nothing to order or deduplicate. Clients' batches always carry a sequence (the
            // Produce handler refuses them otherwise).
            return Ok(SequenceCheck::Append);
        }
        if epoch > entry.epoch {
            // A new epoch of a known producer: its sequence starts again at 0.
            return if first_seq == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    expected: 0,
                    got: first_seq,
                })
            };
        }
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.base_offset,
                last_offset: dup.last_offset,
            });
        }
        let expected = entry.batches.back().map_or(0, |b| next_seq(b.last_seq));
        if first_seq == expected {
            Ok(SequenceCheck::Append)
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id,
                expected,
                got: first_seq,
            })
        }
    }

    /// Appends the table to `out` (the producer snapshot in a segment's index file):
    /// count u32, then per producer id i64 | epoch i16 | last_timestamp i64 |
    /// txn_first_offset i64 (-1: none open) | coordinator_epoch i32 | batches u8 | each
    /// batch first_seq i32 | last_seq i32 | base_offset i64 | last_offset i64; big-endian, by id.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for id in ids {
            let e = &self.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
    }

    /// Reads what [`ProducerStateTable::encode`] wrote; `None` if it is malformed. Returns the
    /// table (without a producer bound: the partition sets it) and the bytes consumed.
    pub fn decode(bytes: &[u8]) -> Option<(Self, usize)> {
        let mut r = crate::index::ByteReader::new(bytes);
        let n = r.u32()? as usize;
        let mut table = Self::default();
        table.producers.reserve(n.min(bytes.len() / 31));
        for _ in 0..n {
            let id = r.i64()?;
            let epoch = r.i16()?;
            let last_timestamp = r.i64()?;
            let txn_first_offset = match r.i64()? {
                -1 => None,
                first if first >= 0 => Some(first),
                _ => return None,
            };
            let coordinator_epoch = r.i32()?;
            let count = r.u8()? as usize;
            if count > PRODUCER_BATCHES_RETAINED {
                return None;
            }
            let mut batches = VecDeque::with_capacity(count);
            for _ in 0..count {
                batches.push_back(ProducerBatch {
                    first_seq: r.i32()?,
                    last_seq: r.i32()?,
                    base_offset: r.i64()?,
                    last_offset: r.i64()?,
                });
            }
            let entry = ProducerEntry {
                epoch,
                last_timestamp,
                batches,
                txn_first_offset,
                coordinator_epoch,
            };
            table.by_recency.insert((entry.recency(), id));
            if let Some(first) = txn_first_offset {
                table.ongoing.insert((first, id));
            }
            if table.producers.insert(id, entry).is_some() {
                return None; // each id once
            }
        }
        Some((table, r.consumed()))
    }

    /// Records an appended batch whose max timestamp is `max_timestamp`. A newer epoch starts
    /// the producer's history afresh. A producer not in a full table first evicts the least
    /// recently used one.
    pub fn record(
        &mut self,
        producer_id: i64,
        epoch: i16,
        batch: ProducerBatch,
        max_timestamp: i64,
    ) {
        match self.producers.get(&producer_id) {
            Some(entry) => {
                self.by_recency.remove(&(entry.recency(), producer_id));
            }
            None => {
                self.evict_down_to(self.max_producers.saturating_sub(1));
            }
        }
        let entry = self.producers.entry(producer_id).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == PRODUCER_BATCHES_RETAINED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(batch);
        entry.last_timestamp = max_timestamp;
        assert!(entry.batches.len() <= PRODUCER_BATCHES_RETAINED);
        self.by_recency.insert((entry.recency(), producer_id));
        assert_eq!(self.by_recency.len(), self.producers.len());
        assert!(
            self.producers.len() <= self.max_producers.max(1).saturating_add(self.ongoing.len())
        );
    }

    /// Keeps at most `max` producers from now on (at least one), evicting the least recently
    /// used beyond it; returns how many were evicted.
    pub fn set_max_producers(&mut self, max: usize) -> usize {
        self.max_producers = max.max(1);
        self.evict_down_to(self.max_producers)
    }

    /// Evicts the least recently used producers without an open transaction until at most
    /// `len` are left (or only producers with open transactions are).
    fn evict_down_to(&mut self, len: usize) -> usize {
        let mut evicted = 0;
        while self.producers.len() > len {
            let producers = &self.producers;
            let victim = self
                .by_recency
                .iter()
                .find(|(_, id)| producers[id].txn_first_offset.is_none())
                .copied();
            let Some(key) = victim else {
                break;
            };
            self.by_recency.remove(&key);
            self.producers.remove(&key.1);
            evicted += 1;
        }
        evicted
    }

    /// Forgets every producer whose last batch's timestamp is at least `expiration_ms` before
    /// `now_ms` (`producer.id.expiration.ms`), as Kafka's `removeExpiredProducers`; returns how
    /// many.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let by_recency = &mut self.by_recency;
        self.producers.retain(|id, e| {
            let expired = e.txn_first_offset.is_none()
                && now_ms.saturating_sub(e.last_timestamp) >= expiration_ms;
            if expired {
                by_recency.remove(&(e.recency(), *id));
            }
            !expired
        });
        assert_eq!(self.by_recency.len(), self.producers.len());
        before - self.producers.len()
    }

    /// Records an appended batch of any kind (`header` with its final offsets): a data batch's
    /// sequence range, and the start of a transaction at a transactional batch while the
    /// producer has none open; an end-transaction marker ends the producer's transaction. Returns
    /// the aborted-index entry an ABORT marker makes. Batches without a producer id change
    /// nothing.
    pub fn apply(&mut self, header: &BatchHeader, kind: BatchKind) -> Option<AbortedTxn> {
        if !header.has_producer_id() {
            return None;
        }
        let pid = header.producer_id;
        match kind {
            BatchKind::Data { transactional } => {
                self.record(
                    pid,
                    header.producer_epoch,
                    ProducerBatch {
                        first_seq: header.base_sequence,
                        last_seq: header.last_sequence(),
                        base_offset: header.base_offset,
                        last_offset: header.last_offset(),
                    },
                    header.max_timestamp,
                );
                let entry = self.producers.get_mut(&pid).expect("recorded above");
                if transactional && entry.txn_first_offset.is_none() {
                    entry.txn_first_offset = Some(header.base_offset);
                    self.ongoing.insert((header.base_offset, pid));
                }
                None
            }
            BatchKind::Marker(marker) => self.end_txn(header, marker),
            BatchKind::OtherControl => None,
        }
    }

    /// An end-transaction marker of `header`'s producer, at `header.base_offset` (Kafka's
    /// `appendEndTxnMarker`): its epoch becomes the producer's (a newer one starts its sequence
    /// history afresh), its transaction ends, and an ABORT yields the aborted-index entry.
    fn end_txn(&mut self, header: &BatchHeader, marker: TxnMarker) -> Option<AbortedTxn> {
        let pid = header.producer_id;
        let offset = header.base_offset;
        if let Some(entry) = self.producers.get(&pid) {
            self.by_recency.remove(&(entry.recency(), pid));
        } else {
            self.evict_down_to(self.max_producers.saturating_sub(1));
        }
        let entry = self.producers.entry(pid).or_default();
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = header.max_timestamp;
        let first = entry.txn_first_offset.take();
        self.by_recency.insert((entry.recency(), pid));
        if let Some(first) = first {
            self.ongoing.remove(&(first, pid));
            if self.unreplicated.len() >= UNREPLICATED_TXNS_MAX {
                // Only ever holds the markers above the high watermark; past the bound the
                // oldest is forgotten, which can show its records a little early, never lose them.
                self.unreplicated.pop_front();
            }
            self.unreplicated.push_back((first, offset));
        }
        assert_eq!(self.by_recency.len(), self.producers.len());
        if marker.commit {
            return None;
        }
        let last_stable_offset = self.ongoing.first().map_or(offset + 1, |&(f, _)| f);
        Some(AbortedTxn {
            producer_id: pid,
            first_offset: first.unwrap_or(offset),
            last_offset: offset,
            last_stable_offset,
        })
    }

    /// Whether a marker for `producer_id` at `epoch` from coordinator epoch
    /// `coordinator_epoch` may be written: not if the producer is known at a newer epoch
    /// (fenced, Kafka's INVALID_PRODUCER_EPOCH) or its last marker came from a newer
    /// coordinator (TRANSACTION_COORDINATOR_FENCED). A producer with no state, or none open,
    /// may still get one, as in Kafka.
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), SequenceError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                current: entry.epoch,
                got: epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(SequenceError::CoordinatorFenced {
                producer_id,
                current: entry.coordinator_epoch,
                got: coordinator_epoch,
            });
        }
        Ok(())
    }

    /// The first offset not yet stable with the high watermark at `high_watermark`: the first
    /// offset of the oldest open transaction, or of a transaction whose marker is not below the
    /// high watermark yet; `None` when there is neither.
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let open = self.ongoing.first().map(|&(f, _)| f);
        let unreplicated = self
            .unreplicated
            .iter()
            .filter(|&&(_, marker)| marker >= high_watermark)
            .map(|&(f, _)| f)
            .min();
        match (open, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lets go of ended transactions whose markers are below `high_watermark`.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        while self
            .unreplicated
            .front()
            .is_some_and(|&(_, marker)| marker < high_watermark)
        {
            self.unreplicated.pop_front();
        }
    }

    /// The open transactions: (producer id, producer epoch, first offset), oldest first.
    pub fn ongoing(&self) -> Vec<(i64, i16, i64)> {
        self.ongoing
            .iter()
            .map(|&(first, id)| (id, self.producers[&id].epoch, first))
            .collect()
    }

    /// How many transactions are open.
    pub fn ongoing_len(&self) -> usize {
        self.ongoing.len()
    }

    /// Each remembered producer's last record, as the cleaner needs it (Kafka's
    /// `lastRecordsOfActiveProducers`): (producer id, epoch, last offset of its last data batch,
    /// if any is remembered).
    pub fn last_records(&self) -> impl Iterator<Item = (i64, i16, Option<i64>)> + '_ {
        self.producers
            .iter()
            .map(|(&id, e)| (id, e.epoch, e.batches.back().map(|b| b.last_offset)))
    }

    /// Every producer this partition remembers, by producer id (DescribeProducers).
    pub fn summaries(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<ProducerSummary> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ProducerSummary {
                producer_id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                txn_first_offset: e.txn_first_offset,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }
}

/// What DescribeProducers shows of one producer of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence number appended (-1: none remembered).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The epoch of the coordinator that wrote its last marker (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction.
    pub txn_first_offset: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i32, last: i32, base: i64) -> ProducerBatch {
        ProducerBatch {
            first_seq: first,
            last_seq: last,
            base_offset: base,
            last_offset: base + i64::from(last - first),
        }
    }

    #[test]
    fn in_order_duplicate_gap_and_fencing() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.check(7, 0, 0, 9), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(0, 9, 100), 0);
        assert_eq!(t.check(7, 0, 10, 19), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(10, 19, 110), 0);
        assert_eq!(
            t.check(7, 0, 0, 9),
            Ok(SequenceCheck::Duplicate {
                base_offset: 100,
                last_offset: 109
            })
        );
        assert!(matches!(
            t.check(7, 0, 25, 30),
            Err(SequenceError::OutOfOrder { expected: 20, .. })
        ));
        assert!(matches!(
            t.check(7, -1, 20, 20),
            Err(SequenceError::StaleEpoch { .. })
        ));
        assert_eq!(t.check(7, 1, 0, 0), Ok(SequenceCheck::Append));
        assert!(matches!(
            t.check(7, 1, 5, 5),
            Err(SequenceError::OutOfOrder { .. })
        ));
        // A producer with no state here may start at any sequence, as in Kafka.
        assert_eq!(t.check(8, 0, 3, 3), Ok(SequenceCheck::Append));
    }

    /// A coordinator writes a producer's transactional offsets without a sequence, once per
    /// transaction: none is a duplicate of the one before, a bumped epoch is no gap, and only a
    /// stale epoch is refused.
    #[test]
    fn unsequenced_batches_are_never_duplicates() {
        let none = record_batch::NO_SEQUENCE;
        let mut t = ProducerStateTable::default();
        assert_eq!(t.check(7, 0, none, none), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(none, none, 0), 0);
        assert_eq!(t.check(7, 0, none, none), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(none, none, 2), 0);
        assert_eq!(t.check(7, 1, none, none), Ok(SequenceCheck::Append));
        t.record(7, 1, batch(none, none, 4), 0);
        assert!(matches!(
            t.check(7, 0, none, none),
            Err(SequenceError::StaleEpoch { .. })
        ));
    }

    #[test]
    fn snapshots_round_trip() {
        let mut t = ProducerStateTable::default();
        for i in 0..7 {
            t.record(1, 0, batch(i, i, i64::from(i)), 5_000);
        }
        t.record(9, 3, batch(0, 4, 100), 9_000);
        let mut bytes = Vec::new();
        t.encode(&mut bytes);
        let (back, used) = ProducerStateTable::decode(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back.len(), 2);
        assert_eq!(
            back.check(1, 0, 6, 6),
            Ok(SequenceCheck::Duplicate {
                base_offset: 6,
                last_offset: 6
            })
        );
        assert_eq!(back.check(1, 0, 7, 7), Ok(SequenceCheck::Append));
        assert_eq!(back.check(9, 3, 5, 5), Ok(SequenceCheck::Append));
        // Timestamps travel with the snapshot: expiry after decoding drops the same producers.
        let mut back = back;
        assert_eq!(back.remove_expired(8_000, 3_000), 1);
        assert!(!back.contains(1) && back.contains(9));
        for cut in 0..bytes.len() {
            assert!(
                ProducerStateTable::decode(&bytes[..cut]).is_none(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn only_five_batches_are_remembered() {
        let mut t = ProducerStateTable::default();
        for i in 0..6 {
            t.record(1, 0, batch(i, i, i64::from(i)), 0);
        }
        assert_eq!(
            t.check(1, 0, 1, 1),
            Ok(SequenceCheck::Duplicate {
                base_offset: 1,
                last_offset: 1
            })
        );
        assert!(t.check(1, 0, 0, 0).is_err());
    }

    #[test]
    fn idle_producers_expire_by_their_last_batch_timestamp() {
        let mut t = ProducerStateTable::default();
        t.record(1, 0, batch(0, 0, 0), 1_000);
        t.record(2, 0, batch(0, 0, 1), 4_000);
        // Producer 1 appends again later: its last batch decides, not its first.
        t.record(1, 0, batch(1, 1, 2), 2_000);
        assert_eq!(t.remove_expired(11_999, 10_000), 0, "idle 9,999 ms");
        assert_eq!(
            t.remove_expired(12_000, 10_000),
            1,
            "idle exactly 10,000 ms"
        );
        assert!(!t.contains(1) && t.contains(2));
        // Forgotten: its next batch is accepted at any sequence and starts a new history, and
        // a retry of a batch from before is no longer recognised.
        assert_eq!(t.check(1, 0, 2, 2), Ok(SequenceCheck::Append));
        assert_eq!(t.check(1, 0, 1, 1), Ok(SequenceCheck::Append));
        t.record(1, 0, batch(2, 2, 3), 20_000);
        assert!(matches!(
            t.check(1, 0, 7, 7),
            Err(SequenceError::OutOfOrder { expected: 3, .. })
        ));
        assert_eq!(t.remove_expired(i64::MAX, 10_000), 2);
        assert!(t.is_empty());
        // Timestamps far in the past or future never overflow the idle time.
        t.record(3, 0, batch(0, 0, 4), i64::MIN);
        t.record(4, 0, batch(0, 0, 5), i64::MAX);
        assert_eq!(t.remove_expired(0, 10_000), 1);
        assert!(t.contains(4));
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_used_producer() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.set_max_producers(2), 0);
        t.record(1, 0, batch(0, 0, 0), 0);
        t.record(2, 0, batch(0, 0, 1), 0);
        // Producer 1 is used again, so producer 2 is now the least recently used.
        t.record(1, 0, batch(1, 1, 2), 0);
        t.record(3, 0, batch(0, 0, 3), 0);
        assert_eq!(t.len(), 2);
        assert!(t.contains(1) && t.contains(3) && !t.contains(2));
        // The evicted producer is unknown: its next batch is appended at any sequence.
        assert_eq!(t.check(2, 0, 1, 1), Ok(SequenceCheck::Append));
        // Known producers keep their checks.
        assert!(matches!(
            t.check(1, 0, 5, 5),
            Err(SequenceError::OutOfOrder { expected: 2, .. })
        ));
        // Lowering the bound evicts at once, oldest first; 0 still keeps one.
        assert_eq!(t.set_max_producers(1), 1);
        assert!(t.contains(3) && !t.contains(1));
        assert_eq!(t.set_max_producers(0), 0);
        assert_eq!(t.len(), 1);
        t.record(4, 0, batch(0, 0, 4), 0);
        assert!(t.contains(4) && !t.contains(3));
    }

    #[test]
    fn a_snapshot_naming_a_producer_twice_is_refused() {
        let mut t = ProducerStateTable::default();
        t.record(1, 0, batch(0, 0, 0), 0);
        let mut one = Vec::new();
        t.encode(&mut one);
        let entry = &one[4..];
        let mut twice = 2u32.to_be_bytes().to_vec();
        twice.extend_from_slice(entry);
        twice.extend_from_slice(entry);
        assert!(ProducerStateTable::decode(&twice).is_none());
    }

    /// A header of a batch at `base` with `count` records from producer `pid`.
    fn header(
        pid: i64,
        epoch: i16,
        base: i64,
        count: i32,
        seq: i32,
        attributes: i16,
    ) -> BatchHeader {
        let mut b = tributary_protocol::record_batch::build_batch(
            &[(None, Some(b"v"))],
            0,
            Some((pid, epoch, seq)),
        );
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        let mut h = tributary_protocol::record_batch::parse_header(&b, 0).unwrap();
        h.base_offset = base;
        h.last_offset_delta = count - 1;
        h
    }

    fn data(pid: i64, base: i64, count: i32, seq: i32, txn: bool) -> (BatchHeader, BatchKind) {
        let attributes = if txn { 0x10 } else { 0 };
        (
            header(pid, 0, base, count, seq, attributes),
            BatchKind::Data { transactional: txn },
        )
    }

    fn marker(pid: i64, epoch: i16, at: i64, commit: bool) -> (BatchHeader, BatchKind) {
        (
            header(pid, epoch, at, 1, -1, 0x30),
            BatchKind::Marker(TxnMarker {
                commit,
                coordinator_epoch: 4,
            }),
        )
    }

    fn apply(t: &mut ProducerStateTable, (h, k): (BatchHeader, BatchKind)) -> Option<AbortedTxn> {
        t.apply(&h, k)
    }

    #[test]
    fn transactions_open_at_their_first_batch_and_end_at_a_marker() {
        let mut t = ProducerStateTable::default();
        assert_eq!(apply(&mut t, data(1, 0, 2, 0, true)), None);
        assert_eq!(apply(&mut t, data(2, 2, 1, 0, false)), None);
        assert_eq!(apply(&mut t, data(3, 3, 1, 0, true)), None);
        // A second batch of an open transaction does not move its start.
        assert_eq!(apply(&mut t, data(1, 4, 1, 2, true)), None);
        assert_eq!(t.ongoing(), vec![(1, 0, 0), (3, 0, 3)]);
        assert_eq!(t.first_unstable_offset(100), Some(0));
        // The sequence goes on across transactional batches; markers carry none.
        assert_eq!(t.check(1, 0, 3, 3), Ok(SequenceCheck::Append));
        assert_eq!(apply(&mut t, marker(1, 0, 5, true)), None);
        assert_eq!(t.check(1, 0, 3, 3), Ok(SequenceCheck::Append));
        assert_eq!(t.ongoing(), vec![(3, 0, 3)]);
        // The committed transaction holds the LSO back until its marker is below the HW.
        assert_eq!(t.first_unstable_offset(5), Some(0));
        assert_eq!(t.first_unstable_offset(6), Some(3));
        let aborted = apply(&mut t, marker(3, 0, 6, false));
        assert_eq!(
            aborted,
            Some(AbortedTxn {
                producer_id: 3,
                first_offset: 3,
                last_offset: 6,
                last_stable_offset: 7,
            })
        );
        assert_eq!(t.first_unstable_offset(7), None);
        t.on_high_watermark(7);
        assert!(t.unreplicated.is_empty());
        // A marker for a producer with nothing open, even one never seen, is recorded at its
        // own offset.
        let a = apply(&mut t, marker(9, 0, 7, false)).unwrap();
        assert_eq!((a.first_offset, a.last_offset), (7, 7));
        assert_eq!(t.ongoing_len(), 0);
    }

    #[test]
    fn an_abort_records_the_oldest_open_transaction_as_its_last_stable_offset() {
        let mut t = ProducerStateTable::default();
        apply(&mut t, data(1, 0, 1, 0, true));
        apply(&mut t, data(2, 1, 1, 0, true));
        let a = apply(&mut t, marker(2, 0, 2, false)).unwrap();
        assert_eq!((a.first_offset, a.last_stable_offset), (1, 0));
    }

    #[test]
    fn markers_are_fenced_by_producer_and_coordinator_epochs() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.check_marker(1, 0, 0), Ok(()), "unknown producer");
        apply(
            &mut t,
            (
                header(1, 3, 0, 1, 0, 0x10),
                BatchKind::Data {
                    transactional: true,
                },
            ),
        );
        assert!(matches!(
            t.check_marker(1, 2, 9),
            Err(SequenceError::StaleEpoch { current: 3, .. })
        ));
        assert_eq!(t.check_marker(1, 3, 0), Ok(()));
        // A marker at a bumped epoch (the coordinator's abort of a fenced producer) takes its
        // epoch: sequences start again.
        apply(&mut t, marker(1, 4, 1, false));
        assert_eq!(t.check(1, 4, 0, 0), Ok(SequenceCheck::Append));
        assert!(t.check(1, 3, 1, 1).is_err());
        assert!(matches!(
            t.check_marker(1, 4, 3),
            Err(SequenceError::CoordinatorFenced {
                current: 4,
                got: 3,
                ..
            })
        ));
        assert_eq!(t.check_marker(1, 4, 4), Ok(()));
    }

    #[test]
    fn producers_with_open_transactions_are_neither_evicted_nor_expired() {
        let mut t = ProducerStateTable::default();
        t.set_max_producers(2);
        let (mut h, k) = data(1, 0, 1, 0, true);
        h.max_timestamp = 1_000;
        t.apply(&h, k);
        apply(&mut t, data(2, 1, 1, 0, false));
        apply(&mut t, data(3, 2, 1, 0, false));
        // Producer 1 is the least recently used, but open: producer 2 went.
        assert!(t.contains(1) && !t.contains(2) && t.contains(3));
        assert_eq!(t.remove_expired(i64::MAX, 10), 1);
        assert!(t.contains(1));
        // With every producer open, the table grows past its bound rather than drop one.
        apply(&mut t, data(4, 3, 1, 0, true));
        apply(&mut t, data(5, 4, 1, 0, true));
        assert_eq!(t.len(), 3);
        assert_eq!(t.ongoing_len(), 3);
        apply(&mut t, marker(1, 0, 5, true));
        apply(&mut t, data(6, 6, 1, 0, false));
        assert!(!t.contains(1), "evictable once its transaction ended");
    }

    #[test]
    fn snapshots_carry_open_transactions_and_coordinator_epochs() {
        let mut t = ProducerStateTable::default();
        apply(&mut t, data(1, 10, 1, 0, true));
        apply(&mut t, data(2, 11, 1, 0, true));
        apply(&mut t, marker(2, 0, 12, true));
        let mut bytes = Vec::new();
        t.encode(&mut bytes);
        let (back, used) = ProducerStateTable::decode(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back.ongoing(), vec![(1, 0, 10)]);
        assert!(matches!(
            back.check_marker(2, 0, 3),
            Err(SequenceError::CoordinatorFenced { .. })
        ));
        for cut in 0..bytes.len() {
            assert!(
                ProducerStateTable::decode(&bytes[..cut]).is_none(),
                "cut {cut}"
            );
        }
    }
}
