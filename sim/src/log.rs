//! A model of one replica's log: one record per offset, appended and fetched in whole batches,
//! a durable prefix (what an fsync covered; a crash loses the rest), the real leader epoch
//! cache and idempotent-producer state, and the high watermark. Offsets start at 0 (no
//! DeleteRecords in the model).

use tributary_storage::leader_epoch::LeaderEpochCache;
use tributary_storage::producer_state::{
    ProducerBatch, ProducerStateTable, SequenceCheck, SequenceError,
};

/// The epoch of every idempotent producer in the model (none is fenced or bumped).
pub const PRODUCER_EPOCH: i16 = 0;

/// One record: the leader epoch it was appended in, the id its producer gave it, and the batch
/// it came in (its producer id and sequence range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub epoch: i32,
    pub id: u64,
    pub producer: i64,
    pub first_seq: i32,
    pub last_seq: i32,
}

impl Record {
    fn same_batch(&self, other: &Record) -> bool {
        self.producer == other.producer && self.first_seq == other.first_seq
    }
}

/// Each batch of `records` (consecutive records of one producer and first sequence), with its
/// base offset when the first record is at `base`.
fn batches(records: &[Record], base: i64) -> Vec<(i64, &[Record])> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=records.len() {
        if i == records.len() || !records[i].same_batch(&records[start]) {
            out.push((base + start as i64, &records[start..i]));
            start = i;
        }
    }
    out
}

#[derive(Debug, Clone, Default)]
pub struct ReplicaLog {
    records: Vec<Record>,
    durable: usize,
    epochs: LeaderEpochCache,
    producers: ProducerStateTable,
    high_watermark: i64,
    /// Bumped by every truncation: a sync begun before one covers none of what came after.
    generation: u64,
}

impl ReplicaLog {
    pub fn log_end_offset(&self) -> i64 {
        self.records.len() as i64
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable as i64
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    pub fn durable_records(&self) -> &[Record] {
        &self.records[..self.durable]
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// A leader's new epoch begins at the log end, before anything is appended in it.
    pub fn begin_epoch(&mut self, epoch: i32) {
        self.epochs.assign(epoch, self.log_end_offset());
    }

    /// Appends whole batches at the log end: each record's epoch enters the cache where it
    /// begins, each batch the producer state.
    pub fn append(&mut self, records: &[Record]) {
        let base = self.log_end_offset();
        for r in records {
            self.epochs.assign(r.epoch, self.log_end_offset());
            self.records.push(*r);
        }
        record_batches(&mut self.producers, records, base);
    }

    /// The leader's sequence check of an idempotent batch (`Partition::check_sequence`).
    pub fn check_sequence(
        &self,
        producer: i64,
        first_seq: i32,
        last_seq: i32,
    ) -> Result<SequenceCheck, SequenceError> {
        self.producers
            .check(producer, PRODUCER_EPOCH, first_seq, last_seq)
    }

    /// An fsync begun at `generation` with the log ending at `upto` completed.
    pub fn synced(&mut self, upto: i64, generation: u64) {
        if generation == self.generation {
            self.durable = self.durable.max((upto as usize).min(self.records.len()));
        }
    }

    /// Drops every record at or after `offset` (and what the epoch cache says of them).
    pub fn truncate_to(&mut self, offset: i64) {
        let at = (offset.max(0) as usize).min(self.records.len());
        self.records.truncate(at);
        self.durable = self.durable.min(at);
        self.epochs.truncate_from_end(at as i64);
        self.high_watermark = self.high_watermark.min(at as i64);
        self.generation += 1;
        // The producer state is rebuilt from what is left, as a truncation's rescan does.
        self.producers = ProducerStateTable::default();
        record_batches(&mut self.producers, &self.records, 0);
    }

    /// The process died: what no fsync covered is gone.
    pub fn crash(&mut self) {
        self.truncate_to(self.durable as i64);
    }

    /// Moves the high watermark up to `hw`, never past the durable end, never down (the
    /// storage rule of `Partition::set_high_watermark`).
    pub fn advance_high_watermark(&mut self, hw: i64) {
        let target = hw.min(self.durable as i64);
        if target > self.high_watermark {
            self.high_watermark = target;
        }
    }

    /// Records `from..`, up to `max` of them but always whole batches.
    pub fn read(&self, from: i64, max: usize) -> Vec<Record> {
        let start = (from.max(0) as usize).min(self.records.len());
        let mut end = (start + max).min(self.records.len());
        while end > start
            && end < self.records.len()
            && self.records[end].same_batch(&self.records[end - 1])
        {
            end += 1;
        }
        self.records[start..end].to_vec()
    }

    /// The batches below `end`, with their base offsets.
    pub fn batches_below(&self, end: i64) -> Vec<(i64, &[Record])> {
        let end = (end.max(0) as usize).min(self.records.len());
        batches(&self.records[..end], 0)
    }
}

fn record_batches(producers: &mut ProducerStateTable, records: &[Record], base: i64) {
    for (offset, batch) in batches(records, base) {
        let first = batch[0];
        let last_offset = offset + batch.len() as i64 - 1;
        let range = ProducerBatch {
            first_seq: first.first_seq,
            last_seq: first.last_seq,
            base_offset: offset,
            last_offset,
        };
        producers.record(first.producer, PRODUCER_EPOCH, range, 0);
    }
}
